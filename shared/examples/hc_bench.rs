//! Timing of the Euclidean distance matrix and of every linkage method.
//!
//! ```text
//! cargo run --release -p edgecfl-shared --example hc_bench                 # n = 1000 and 10000
//! cargo run --release -p edgecfl-shared --example hc_bench -- 2000 --dim 850 --reps 5
//! ```
//!
//! The observations are synthetic "final layers" (850 floats, like LeNet-5's 84×10 + 10): 20
//! Gaussian centres plus per-client noise, from a fixed-seed generator. Each measurement is
//! repeated `--reps` times (default 3 for n ≤ 2000, else 1) and the median is printed, one JSON
//! object per line, with the machine's available parallelism.
//!
//! Measured with the first command on the 2-core development VM (AMD EPYC, SSE2 baseline
//! build, other builds running: expect ±30 % noise), next to scipy 1.17.1 on similar data
//! (`pdist` single-threaded, `linkage` on its output) run right after it:
//!
//! | n × 850 | euclidean | single | complete | average | weighted | ward |
//! | --- | --- | --- | --- | --- | --- | --- |
//! | 1 000 (this crate) | 0.14 s | 0.005 s | 0.012 s | 0.012 s | 0.013 s | 0.019 s |
//! | 1 000 (scipy) | 0.17 s | 0.003 s | 0.010 s | 0.010 s | 0.011 s | 0.012 s |
//! | 10 000 (this crate) | 13.7 s | 1.3 s | 3.1 s | 3.1 s | 3.0 s | 3.3 s |
//! | 10 000 (scipy) | 25.5 s | 1.3 s | 4.1 s | 4.7 s | 5.6 s | 5.2 s |
//!
//! Linkage at 10 000 needs about 1.2 GB (the 400 MB condensed input plus an 800 MB square
//! working copy for the nn-chain methods).

use std::time::Instant;

use edgecfl_shared::cluster::{CondensedMatrix, Linkage, linkage};

/// splitmix64: a tiny deterministic generator, enough for benchmark data.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

fn data(n: usize, dim: usize) -> Vec<Vec<f32>> {
    let mut rng = Rng(42);
    let centres: Vec<Vec<f32>> = (0..20)
        .map(|_| (0..dim).map(|_| rng.unit()).collect())
        .collect();
    (0..n)
        .map(|i| {
            let c = &centres[i % centres.len()];
            c.iter().map(|&v| v + 0.3 * rng.unit()).collect()
        })
        .collect()
}

fn median_secs<T>(reps: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut times = Vec::with_capacity(reps);
    let mut last = None;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        let out = f();
        times.push(t.elapsed().as_secs_f64());
        last = Some(out);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let out = last.unwrap_or_else(|| unreachable!("reps >= 1"));
    (times[times.len() / 2], out)
}

fn main() {
    let mut sizes = Vec::new();
    let mut dim = 850usize;
    let mut reps: Option<usize> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dim" => dim = args.next().and_then(|v| v.parse().ok()).unwrap_or(dim),
            "--reps" => reps = args.next().and_then(|v| v.parse().ok()),
            other => match other.parse() {
                Ok(n) => sizes.push(n),
                Err(_) => {
                    eprintln!("usage: hc_bench [N ...] [--dim D] [--reps R]");
                    std::process::exit(2);
                }
            },
        }
    }
    if sizes.is_empty() {
        sizes = vec![1000, 10_000];
    }
    let threads = std::thread::available_parallelism().map_or(1, |p| p.get());
    for n in sizes {
        let reps = reps.unwrap_or(if n <= 2000 { 3 } else { 1 });
        let pts = data(n, dim);
        let (secs, d) = median_secs(reps, || CondensedMatrix::euclidean(&pts));
        let d = match d {
            Ok(d) => d,
            Err(e) => {
                eprintln!("distance error: {e}");
                std::process::exit(1);
            }
        };
        println!(
            "{{\"n\":{n},\"dim\":{dim},\"threads\":{threads},\"reps\":{reps},\"step\":\"euclidean\",\"median_s\":{secs:.4}}}"
        );
        for method in Linkage::ALL {
            let (secs, tree) = median_secs(reps, || linkage(&d, method));
            let k = tree.n_clusters_at(tree.auto_threshold());
            println!(
                "{{\"n\":{n},\"dim\":{dim},\"threads\":{threads},\"reps\":{reps},\"step\":\"linkage\",\"method\":\"{method}\",\"median_s\":{secs:.4},\"auto_k\":{k}}}"
            );
        }
    }
}
