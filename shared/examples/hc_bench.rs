//! Timing of the Euclidean distance matrix and of every linkage method.
//!
//! ```text
//! cargo run --release -p edgecfl-shared --example hc_bench                 # n = 1000 and 10000
//! cargo run --release -p edgecfl-shared --example hc_bench -- 2000 --dim 850 --reps 5
//! python3 scripts/bench-hc.py 1000 10000       # the same beside scipy, on the same data
//! ```
//!
//! The observations are synthetic "final layers" (850 floats, like LeNet-5's 84×10 + 10): 20
//! Gaussian centres plus per-client noise, from a fixed-seed generator. Each measurement is
//! repeated `--reps` times (default 3 for n ≤ 2000, else 1) and the median is printed, one JSON
//! object per line, with the machine's available parallelism.
//!
//! `--dump DIR` also writes, for the comparison with scipy (`scripts/bench-hc.py`), per size
//! `n`: `points-N.f32` (the observations, row-major little-endian `f32`), `pairs-N.bin` (10 000
//! seeded pairs: `u32` i, `u32` j, `f64` distance, little-endian) and `heights-N-METHOD.f64`
//! (the dendrogram's merge heights in merge order, little-endian `f64`).
//!
//! Results: BENCHMARKS.md §4.

use std::path::{Path, PathBuf};
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
    let mut dump: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dim" => dim = args.next().and_then(|v| v.parse().ok()).unwrap_or(dim),
            "--reps" => reps = args.next().and_then(|v| v.parse().ok()),
            "--dump" => dump = args.next().map(PathBuf::from),
            other => match other.parse() {
                Ok(n) => sizes.push(n),
                Err(_) => {
                    eprintln!("usage: hc_bench [N ...] [--dim D] [--reps R] [--dump DIR]");
                    std::process::exit(2);
                }
            },
        }
    }
    if let Some(dir) = &dump
        && let Err(e) = std::fs::create_dir_all(dir)
    {
        eprintln!("cannot create {}: {e}", dir.display());
        std::process::exit(1);
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
        if let Some(dir) = &dump {
            let points: Vec<u8> = pts.iter().flatten().flat_map(|v| v.to_le_bytes()).collect();
            write(&dir.join(format!("points-{n}.f32")), &points);
            let mut rng = Rng(7);
            let mut pairs = Vec::new();
            for _ in 0..10_000 {
                let i = (rng.next_u64() % n as u64) as usize;
                let j = (rng.next_u64() % n as u64) as usize;
                let dist = d.get(i, j).unwrap_or(f64::NAN);
                pairs.extend((i as u32).to_le_bytes());
                pairs.extend((j as u32).to_le_bytes());
                pairs.extend(dist.to_le_bytes());
            }
            write(&dir.join(format!("pairs-{n}.bin")), &pairs);
        }
        for method in Linkage::ALL {
            let (secs, tree) = median_secs(reps, || linkage(&d, method));
            if let Some(dir) = &dump {
                let heights: Vec<u8> = tree
                    .heights()
                    .iter()
                    .flat_map(|h| h.to_le_bytes())
                    .collect();
                write(&dir.join(format!("heights-{n}-{method}.f64")), &heights);
            }
            let k = tree.n_clusters_at(tree.auto_threshold());
            println!(
                "{{\"n\":{n},\"dim\":{dim},\"threads\":{threads},\"reps\":{reps},\"step\":\"linkage\",\"method\":\"{method}\",\"median_s\":{secs:.4},\"auto_k\":{k}}}"
            );
        }
    }
}

fn write(path: &Path, bytes: &[u8]) {
    if let Err(e) = std::fs::write(path, bytes) {
        eprintln!("cannot write {}: {e}", path.display());
        std::process::exit(1);
    }
}
