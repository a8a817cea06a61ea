//! MT-HFL's one-shot clustering: the fewest eigenvectors that still separate the tasks of
//! `tasks:fmnist3`, what a client uploads, and how long the relevance matrix takes to build the
//! paper's way (every client computes its row) and server-side (batched products on burn).
//!
//! ```text
//! nice -n 10 cargo run --release --example mthfl_bench
//! nice -n 10 cargo run --release --example mthfl_bench -- --seeds 2 --kmax 20 --sizes 100
//! nice -n 10 cargo run --release --example mthfl_bench -- --eigen 5   # only step 0, 5 clients each
//! ```
//!
//! (From the workspace root without `-p`, so the features match the rest of the workspace and
//! burn is not rebuilt with another feature set.)
//!
//! 0. **Per-client eigen time** (`--eigen C` runs only this): for `tasks:fmnist3` over 10, 100 and
//!    1 000 clients (seed 0), the first `C` clients of each task form their Gram matrix; each one
//!    then computes its top `k` eigenpairs (k = 1, 2, 5, 10) with the partial solver
//!    (`Gram::top_eigen`, block Krylov) and with the full decomposition (`Gram::eigen`), each timed
//!    once; the medians are printed with the largest eigenvalue difference (relative to λ₁) and
//!    the largest eigenvector difference between the two.
//! 1. **Smallest k.** For each seed, `tasks:fmnist3` over 10 clients on the data
//!    `FashionMnist::load(None)` finds (Debian's full set when installed, else the bundled subset);
//!    every client's exact Gram matrix and its top `--kmax` eigenpairs. For each `k`, signatures
//!    truncated to `k` and uploaded in `f32` or rounded through `f16`; relevance the paper's way
//!    and server-side; average-linkage HAC cut at 3 clusters; ARI against the tasks. The smallest
//!    `k` with ARI 1.0 on every seed is printed, and whether every larger `k` up to `--kmax` also
//!    gives 1.0.
//! 2. **Bytes.** The payload floats of one upload (`k·784 + k`), no framing; and the paper's relay
//!    (every client downloads every signature).
//! 3. **Time.** `N` = 100 and 1 000 **synthetic** clients: each is one of the 10 real clients of
//!    seed 0 with its eigenvectors perturbed (5 % Gaussian noise, re-orthonormalised) and its
//!    eigenvalues scaled by ±10 %, so the work is that of real uploads. Server-side: the whole
//!    `N × N` matrix, symmetrised and clustered (median of 3, once for 1 000). The paper's way:
//!    one client's row against all `N` signatures with its exact 784 × 784 Gram matrix (median
//!    over 3 clients); clients compute in parallel, so that is the wall time of the step if every
//!    client has such a CPU, and `N ×` it is the CPU time summed over clients.

use edgecfl_shared::cluster::spectral;
use std::time::Instant;

use edgecfl_shared::algorithms::mthfl::{self, DEFAULT_LINKAGE};
use edgecfl_shared::cluster::adjusted_rand_index;
use edgecfl_shared::cluster::clustering::Lambda;
use edgecfl_shared::cluster::robust::Guard;
use edgecfl_shared::cluster::spectral::{Estimate, Gram, Signature};
use edgecfl_shared::data::{FashionMnist, PartitionSpec, Splits, partition};
use edgecfl_shared::protocol::Encoding;
use edgecfl_shared::train::{Device, LocalData};

/// splitmix64 + Box-Muller: deterministic noise for the synthetic clients.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn gauss(&mut self) -> f64 {
        (-2.0 * self.uniform().ln()).sqrt() * (std::f64::consts::TAU * self.uniform()).cos()
    }
}

struct Args {
    seeds: u64,
    kmax: usize,
    sizes: Vec<usize>,
    eigen: usize,
}

type BoxError = Box<dyn std::error::Error>;

fn args() -> Result<Args, BoxError> {
    let mut a = Args {
        seeds: 6,
        kmax: 50,
        sizes: vec![100, 1000],
        eigen: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: std::num::ParseIntError| format!("{flag} {value:?}: {e}");
        match flag.as_str() {
            "--seeds" => a.seeds = value.parse().map_err(bad)?,
            "--kmax" => a.kmax = value.parse().map_err(bad)?,
            "--eigen" => a.eigen = value.parse().map_err(bad)?,
            "--sizes" => {
                a.sizes = value
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()
                    .map_err(bad)?
            }
            _ => {
                return Err(format!(
                    "unknown flag {flag} (expected --seeds, --kmax, --sizes, --eigen)"
                )
                .into());
            }
        }
    }
    if a.seeds == 0 || a.kmax == 0 || a.sizes.contains(&0) {
        return Err("--seeds, --kmax and every --sizes entry must be ≥ 1".into());
    }
    Ok(a)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One seed's clients: exact Gram matrices, top-`kmax` signatures, ground truth.
struct Seed {
    grams: Vec<Gram>,
    sigs: Vec<Signature>,
    truth: Vec<usize>,
}

fn ari(r: &[Vec<f64>], truth: &[usize]) -> Result<f64, BoxError> {
    let (c, _) = mthfl::cluster(r, DEFAULT_LINKAGE, Lambda::Clusters(3), Guard::Paper)?;
    Ok(adjusted_rand_index(&c.assignment, truth))
}

/// The paper's way: client `i` uses its exact Gram matrix and its own exact eigenvalues (it
/// knows them unrounded), against the received signatures `sigs`.
fn paper_r(seed: &Seed, sigs: &[Signature], est: Estimate) -> Result<Vec<Vec<f64>>, BoxError> {
    let k = sigs[0].k;
    let rows = seed
        .grams
        .iter()
        .zip(&seed.sigs)
        .map(|(g, own)| spectral::client_row(g, &own.truncated(k), sigs, est))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(spectral::symmetrise(&rows)?)
}

fn server_r(sigs: &[Signature], est: Estimate, dev: &Device) -> Result<Vec<Vec<f64>>, BoxError> {
    Ok(spectral::symmetrise(&spectral::server_rows(
        sigs, est, dev,
    )?)?)
}

/// Gram–Schmidt on `k` rows of length `d`.
fn orthonormalise(rows: &mut [Vec<f64>]) {
    for i in 0..rows.len() {
        for j in 0..i {
            let dot: f64 = rows[i].iter().zip(&rows[j]).map(|(a, b)| a * b).sum();
            let (head, tail) = rows.split_at_mut(i);
            for (x, y) in tail[0].iter_mut().zip(&head[j]) {
                *x -= dot * y;
            }
        }
        let norm = rows[i].iter().map(|x| x * x).sum::<f64>().sqrt();
        rows[i].iter_mut().for_each(|x| *x /= norm);
    }
}

fn synthetic(base: &[Signature], n: usize, rng: &mut Rng) -> Vec<Signature> {
    (0..n)
        .map(|c| {
            let b = &base[c % base.len()];
            let mut rows: Vec<Vec<f64>> = (0..b.k)
                .map(|m| {
                    let v = b.vector(m);
                    let scale = 0.05 / (b.d as f64).sqrt();
                    v.iter()
                        .map(|&x| f64::from(x) + scale * rng.gauss())
                        .collect()
                })
                .collect();
            orthonormalise(&mut rows);
            Signature {
                k: b.k,
                d: b.d,
                vectors: rows.iter().flatten().map(|&x| x as f32).collect(),
                values: b
                    .values
                    .iter()
                    .map(|&x| x * (1.0 + 0.1 * (2.0 * rng.uniform() - 1.0)) as f32)
                    .collect(),
            }
        })
        .collect()
}

/// Step 0: per-client time of the partial and the full eigen-solver (see the module docs).
fn eigen_times(data: &Splits, per_task: usize) -> Result<(), BoxError> {
    let spec: PartitionSpec = "tasks:fmnist3".parse()?;
    println!(
        "data: {}; per-client eigenpairs, partial (block Krylov) vs full (nalgebra)",
        data.source
    );
    println!(
        "| clients | samples (median) | k | partial s (median) | full s (median) | speed-up | max |Δλ|/λ₁ | max ‖Δv‖ |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for n in [10, 100, 1000] {
        let p = partition(&spec, &data.train.labels, n, 0)?;
        let truth = p.truth.clone().ok_or("tasks:fmnist3 has a ground truth")?;
        let mut picked = Vec::new();
        for t in 0..3 {
            picked.extend((0..n).filter(|&i| truth[i] == t).take(per_task));
        }
        let grams: Vec<Gram> = picked
            .iter()
            .map(|&i| {
                Gram::from_local_data(&LocalData::from_dataset(
                    &data.train,
                    &p.clients[i].train,
                    0,
                ))
            })
            .collect::<Result<_, _>>()?;
        let samples = median(
            picked
                .iter()
                .map(|&i| p.clients[i].train.len() as f64)
                .collect(),
        );
        let mut full_t = Vec::new();
        let mut full = Vec::new();
        for g in &grams {
            let t = Instant::now();
            full.push(g.eigen()?);
            full_t.push(t.elapsed().as_secs_f64());
        }
        let full_med = median(full_t);
        for k in [1, 2, 5, 10] {
            let mut part_t = Vec::new();
            let (mut dl, mut dv) = (0f64, 0f64);
            for (g, (fv, fx)) in grams.iter().zip(&full) {
                let t = Instant::now();
                let (v, x) = g.top_eigen(k)?;
                part_t.push(t.elapsed().as_secs_f64());
                for m in 0..k {
                    dl = dl.max((v[m] - fv[m]).abs() / fv[0]);
                    let e: f64 = x[m].iter().zip(&fx[m]).map(|(a, b)| (a - b).powi(2)).sum();
                    dv = dv.max(e.sqrt());
                }
            }
            let part_med = median(part_t);
            println!(
                "| {n} | {samples} | {k} | {part_med:.4} | {full_med:.3} | {:.0}× | {dl:.1e} | {dv:.1e} |",
                full_med / part_med
            );
        }
    }
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let a = args()?;
    let data = FashionMnist::load(None)?;
    if a.eigen > 0 {
        return eigen_times(&data, a.eigen);
    }
    let dev = Device::flex();
    let spec: PartitionSpec = "tasks:fmnist3".parse()?;
    println!(
        "data: {} ({} training images); tasks:fmnist3 over 10 clients, seeds 0..{}, k up to {}",
        data.source,
        data.train.len(),
        a.seeds,
        a.kmax
    );

    // Signatures.
    let mut seeds = Vec::new();
    let (mut t_gram, mut t_eig) = (Vec::new(), Vec::new());
    for seed in 0..a.seeds {
        let p = partition(&spec, &data.train.labels, 10, seed)?;
        let mut grams = Vec::new();
        let mut sigs = Vec::new();
        for c in &p.clients {
            let local = LocalData::from_dataset(&data.train, &c.train, 0);
            let t = Instant::now();
            let g = Gram::from_local_data(&local)?;
            t_gram.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            sigs.push(g.signature(a.kmax)?);
            t_eig.push(t.elapsed().as_secs_f64());
            grams.push(g);
        }
        let sizes: Vec<usize> = p.clients.iter().map(|c| c.train.len()).collect();
        if seed == 0 {
            println!("client sizes (seed 0): {sizes:?}");
        }
        seeds.push(Seed {
            grams,
            sigs,
            truth: p.truth.ok_or("tasks:fmnist3 has a ground truth")?,
        });
    }
    println!(
        "client signature: Gram XᵀX/n median {:.3} s, top-{} eigenpairs of 784×784 (Gram::signature) median {:.3} s",
        median(t_gram),
        a.kmax,
        median(t_eig)
    );

    // ARI per k.
    let mut ks: Vec<usize> = (1..=10.min(a.kmax)).collect();
    ks.extend(
        [15, 20, 30, 40, 50]
            .into_iter()
            .filter(|&k| k > 10 && k <= a.kmax),
    );
    let ways: [(&str, Encoding, Estimate, bool); 5] = [
        ("paper f32", Encoding::F32, Estimate::Norm, false),
        ("paper f16", Encoding::F16, Estimate::Norm, false),
        ("server f32", Encoding::F32, Estimate::Norm, true),
        ("server f16", Encoding::F16, Estimate::Norm, true),
        (
            "paper f32 rayleigh",
            Encoding::F32,
            Estimate::Rayleigh,
            false,
        ),
    ];
    // min ARI over seeds, [way][k index]
    let mut min_ari = vec![vec![f64::INFINITY; ks.len()]; ways.len()];
    let mut max_diff = vec![0f64; ks.len()];
    for s in &seeds {
        for (ki, &k) in ks.iter().enumerate() {
            let mut paper_f32 = None;
            for (wi, &(_, enc, est, server)) in ways.iter().enumerate() {
                let sigs: Vec<Signature> =
                    s.sigs.iter().map(|x| x.truncated(k).rounded(enc)).collect();
                let r = if server {
                    server_r(&sigs, est, &dev)?
                } else {
                    paper_r(s, &sigs, est)?
                };
                if wi == 0 {
                    paper_f32 = Some(r.clone());
                }
                if wi == 2
                    && let Some(p) = &paper_f32
                {
                    for (x, y) in p.iter().flatten().zip(r.iter().flatten()) {
                        max_diff[ki] = max_diff[ki].max((x - y).abs());
                    }
                }
                min_ari[wi][ki] = min_ari[wi][ki].min(ari(&r, &s.truth)?);
            }
        }
    }
    println!();
    print!("| k |");
    for (name, ..) in &ways {
        print!(" {name} |");
    }
    println!(" max abs(R_paper − R_server), f32 |");
    println!("|{}", " --- |".repeat(ways.len() + 2));
    for (ki, k) in ks.iter().enumerate() {
        print!("| {k} |");
        for w in &min_ari {
            print!(" {:.3} |", w[ki]);
        }
        println!(" {:.4} |", max_diff[ki]);
    }
    println!("(minimum ARI over {} seeds)", a.seeds);
    println!();
    let mut smallest: Vec<Option<usize>> = Vec::new();
    for (wi, (name, ..)) in ways.iter().enumerate() {
        let first = ks
            .iter()
            .enumerate()
            .find(|&(ki, _)| min_ari[wi][ki] == 1.0)
            .map(|(ki, &k)| (ki, k));
        match first {
            Some((ki, k)) => {
                let all_above = min_ari[wi][ki..].iter().all(|&x| x == 1.0);
                println!(
                    "smallest k with ARI 1.0 on every seed, {name}: {k} ({} for every listed k ≥ {k})",
                    if all_above { "and" } else { "but not" }
                );
                smallest.push(Some(k));
            }
            None => {
                println!(
                    "smallest k with ARI 1.0 on every seed, {name}: none up to {}",
                    a.kmax
                );
                smallest.push(None);
            }
        }
    }

    // The relevance matrix of seed 0 at the paper's k.
    let s0 = &seeds[0];
    let sigs5: Vec<Signature> = s0.sigs.iter().map(|x| x.truncated(5)).collect();
    let r5 = paper_r(s0, &sigs5, Estimate::Norm)?;
    println!("\nR (paper's way, k = 5, f32, seed 0; clients 0-4 clothes, 5-7 shoes, 8-9 bags):");
    for row in &r5 {
        let cells: Vec<String> = row.iter().map(|x| format!("{x:.3}")).collect();
        println!("  {}", cells.join(" "));
    }

    // Bytes.
    let d = s0.sigs[0].d;
    println!("\nupload per client (payload floats only, k·{d} + k):");
    for k in [1, 2, 5, 10] {
        let s = s0.sigs[0].truncated(k);
        println!(
            "  k = {k:>2}: f32 {:>6} B, f16 {:>6} B",
            s.payload_bytes(Encoding::F32),
            s.payload_bytes(Encoding::F16)
        );
    }
    println!(
        "  for scale: the full Gram matrix 784×784 f32 = {} B; FedClust's LeNet-5 final layer (850 f32) = 3400 B",
        784 * 784 * 4
    );

    // Time.
    let mut rng = Rng(7);
    let base: Vec<Signature> = s0.sigs.iter().map(|x| x.truncated(5)).collect();
    println!("\nrelevance matrix build time, k = 5, synthetic clients (see the doc comment):");
    println!(
        "| N | server-side (flex, whole matrix + symmetrise + HAC) | paper's way, one client's row | paper's way, CPU summed over clients | relay download per client (f32) |"
    );
    println!("| --- | --- | --- | --- | --- |");
    for &n in &a.sizes {
        let sigs = synthetic(&base, n, &mut rng);
        let reps = if n <= 200 { 3 } else { 1 };
        let server = median(
            (0..reps)
                .map(|_| {
                    let t = Instant::now();
                    let r = server_r(&sigs, Estimate::Norm, &dev)?;
                    let (c, _) =
                        mthfl::cluster(&r, DEFAULT_LINKAGE, Lambda::Clusters(3), Guard::Paper)?;
                    std::hint::black_box(c);
                    Ok(t.elapsed().as_secs_f64())
                })
                .collect::<Result<_, BoxError>>()?,
        );
        let row = median(
            (0..3)
                .map(|c| {
                    let t = Instant::now();
                    let r = spectral::client_row(&s0.grams[c], &sigs[c], &sigs, Estimate::Norm)?;
                    std::hint::black_box(r);
                    Ok(t.elapsed().as_secs_f64())
                })
                .collect::<Result<_, BoxError>>()?,
        );
        let relay = n * sigs[0].payload_bytes(Encoding::F32);
        println!(
            "| {n} | {server:.3} s | {row:.3} s | {:.1} s | {:.1} MB |",
            row * n as f64,
            relay as f64 / 1e6
        );
    }
    let json = |k: Option<usize>| k.map_or("null".to_string(), |k| k.to_string());
    println!(
        "\n{{\"source\":\"{}\",\"seeds\":{},\"smallest_k\":{{\"paper_f32\":{},\"paper_f16\":{},\"server_f32\":{},\"server_f16\":{},\"paper_f32_rayleigh\":{}}}}}",
        data.source,
        a.seeds,
        json(smallest[0]),
        json(smallest[1]),
        json(smallest[2]),
        json(smallest[3]),
        json(smallest[4])
    );
    Ok(())
}
