//! `coordinator bench`: training throughput of a simulated fleet on this machine, as JSON: C
//! clients' local trainings (one epoch each of `--samples` samples at `--batch`) trained as one
//! cohort (`edgecfl_shared::cohort`, what `simulate --cohort C` does) and, with `--alone`, the same
//! clients trained one after another on one thread and on every core (what `simulate --cohort
//! 1` does), for each device and cohort size asked. Each setting runs once untimed (kernel
//! compilation, autotuning, allocator), then `--repeats` times; the median is reported. The JSON
//! goes to standard output at the end and, with `--out`, to a file rewritten after every setting.
//!
//! With `--relevance N,…` it times the server's side of MT-HFL's one-shot clustering instead:
//! every client's relevance row from the uploaded signatures
//! ([`server_rows`], batched matrix products on the device) for N clients, on each device.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use edgecfl_shared::atomic_file;
use edgecfl_shared::cluster::spectral::{Estimate, Signature, server_rows};
use edgecfl_shared::cohort::{Convolution, Member, train_cohort};
use edgecfl_shared::data::fmnist::FashionMnist;
use edgecfl_shared::model::{ModelKind, Params};
use edgecfl_shared::parallel::{self, par_map_on};
use edgecfl_shared::train::{Backend, Device, LocalData, TrainConfig, train_local};
use serde::Serialize;
use tracing::info;

/// Arguments of `coordinator bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// The model (its help lists each one with its input).
    #[arg(long, default_value = "lenet5", help = edgecfl_shared::model::model_flag_help())]
    pub model: ModelKind,
    /// Devices to measure (comma-separated): cpu (= flex) | ndarray | vulkan[:N|:igpu[:N]|:cpu] |
    /// tch[:cpu|:cuda[:N]] | cuda[:N].
    #[arg(long, value_delimiter = ',', default_value = "cpu")]
    pub devices: Vec<Backend>,
    /// Cohort sizes to measure (comma-separated): clients trained together.
    #[arg(long, value_delimiter = ',', default_value = "1,10,100")]
    pub cohorts: Vec<usize>,
    /// How cohorts compute LeNet-5's convolutions (comma-separated, each measured): grouped |
    /// im2col. Default: the device's own (`simulate`'s), im2col on vulkan and cuda, else grouped.
    #[arg(long, value_delimiter = ',')]
    pub convolutions: Vec<Convolution>,
    /// Each client's mini-batch size.
    #[arg(long, default_value_t = 10)]
    pub batch: usize,
    /// Training samples per client (client i holds samples i·N .. (i+1)·N of the train set,
    /// wrapping around).
    #[arg(long, default_value_t = 600)]
    pub samples: usize,
    /// Also train the same clients one by one (`simulate --cohort 1`): on one thread, and on
    /// every core one client per core.
    #[arg(long)]
    pub alone: bool,
    /// Instead of training: time MT-HFL's server-side relevance rows (`server_rows`, what `--relevance
    /// server` runs in round 0) for each of these client counts (comma-separated) on each device,
    /// from seeded random signatures of `--eigenvectors` eigenpairs over the 784 pixels (the work
    /// depends on the count, k and the dimension only).
    #[arg(long, value_delimiter = ',')]
    pub relevance: Vec<usize>,
    /// Eigenpairs per signature for `--relevance`.
    #[arg(long, default_value_t = 5)]
    pub eigenvectors: usize,
    /// Timed repetitions per setting; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Fashion-MNIST directory (default: `EDGECFL_FMNIST_DIR`, the Debian package, the bundled
    /// subset).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Also write the JSON to this file, rewritten whole after every measured setting: a run
    /// stopped early (a timeout, a device that hangs) keeps what it had measured.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// One measured setting.
#[derive(Debug, Clone, Serialize)]
pub struct Throughput {
    /// `cohort` (one batched model), `alone` (one client after the other, one thread) or
    /// `alone-threads` (one client per core at a time, as `simulate --cohort 1`).
    pub mode: &'static str,
    /// The device.
    pub device: Backend,
    /// How a cohort computed LeNet-5's convolutions (`cohort` mode only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub convolution: Option<Convolution>,
    /// Clients trained.
    pub clients: usize,
    /// Threads (`alone-threads`: the cores used; else 1).
    pub threads: usize,
    /// Mini-batch size.
    pub batch: usize,
    /// Median samples per second (all clients' samples over the wall-clock time).
    pub samples_per_second: f64,
    /// Every repeat's samples per second.
    pub runs: Vec<f64>,
}

/// One timing of `--relevance`: the server-side relevance rows of `clients` signatures.
#[derive(Debug, Clone, Serialize)]
pub struct RelevanceTime {
    /// `relevance`.
    pub mode: &'static str,
    /// The device of the batched products.
    pub device: Backend,
    /// Clients (signatures).
    pub clients: usize,
    /// Eigenpairs per signature.
    pub k: usize,
    /// Median seconds for all rows.
    pub seconds: f64,
    /// Every repeat's seconds.
    pub runs: Vec<f64>,
    /// The mean of every r(i, j): the same on every device up to float rounding.
    pub mean_relevance: f64,
}

/// One measured setting of either kind.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Measurement {
    /// Training throughput.
    Training(Throughput),
    /// `--relevance`.
    Relevance(RelevanceTime),
}

/// Runs the measurements.
pub fn run(args: &BenchArgs) -> anyhow::Result<Vec<Measurement>> {
    // Every device before the first measurement: a missing one ends the run before any time is
    // spent, not after.
    for d in &args.devices {
        d.check_compiled()?;
    }
    // And the output file: an unwritable path ends the run before any time is spent too.
    save::<Throughput>(args, &[])?;
    if args.relevance.is_empty() {
        Ok(training(args)?
            .into_iter()
            .map(Measurement::Training)
            .collect())
    } else {
        Ok(relevance(args)?
            .into_iter()
            .map(Measurement::Relevance)
            .collect())
    }
}

/// `--relevance`: each client count on each device, once untimed, then `--repeats` times.
fn relevance(args: &BenchArgs) -> anyhow::Result<Vec<RelevanceTime>> {
    anyhow::ensure!(
        args.relevance.iter().all(|&n| n >= 1) && args.eigenvectors >= 1,
        "--relevance client counts and --eigenvectors must be ≥ 1"
    );
    let most = args.relevance.iter().copied().max().unwrap_or(0);
    let signatures = random_signatures(most, args.eigenvectors, 784);
    let mut out = Vec::new();
    for &device_kind in &args.devices {
        let device = device_kind.device()?;
        for &n in &args.relevance {
            let first = server_rows(&signatures[..n], Estimate::Norm, &device)?;
            let runs = timed(args.repeats, || {
                server_rows(&signatures[..n], Estimate::Norm, &device).map(drop)
            })?;
            let sum: f64 = first.iter().flatten().sum();
            let t = RelevanceTime {
                mode: "relevance",
                device: device_kind,
                clients: n,
                k: args.eigenvectors,
                seconds: median(&runs),
                runs,
                mean_relevance: sum / (n * n) as f64,
            };
            info!(
                "{device_kind} relevance: {n} clients, k = {}: {:.3} s",
                t.k, t.seconds
            );
            out.push(t);
            save(args, &out)?;
        }
    }
    Ok(out)
}

/// `n` signatures of `k` eigenpairs over `d` dimensions from a fixed seed: Gaussian vectors
/// (splitmix64 and Box-Muller) and eigenvalues k, k − 1, …, 1.
fn random_signatures(n: usize, k: usize, d: usize) -> Vec<Signature> {
    let mut state = 0x5EED_u64;
    let mut uniform = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| Signature {
            k,
            d,
            vectors: (0..k * d)
                .map(|_| {
                    let (u, v) = (uniform().max(f64::MIN_POSITIVE), uniform());
                    ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
                })
                .collect(),
            values: (0..k).map(|m| (k - m) as f32).collect(),
        })
        .collect()
}

/// The training measurements.
fn training(args: &BenchArgs) -> anyhow::Result<Vec<Throughput>> {
    anyhow::ensure!(
        args.batch >= 1 && args.samples >= 1,
        "--batch and --samples must be ≥ 1"
    );
    anyhow::ensure!(
        args.cohorts.iter().all(|&c| c >= 1),
        "cohort sizes must be ≥ 1"
    );
    let data = FashionMnist::load(args.data.as_deref()).context("loading Fashion-MNIST")?;
    let most = args.cohorts.iter().copied().max().unwrap_or(1);
    let n = data.train.len();
    let clients: Vec<LocalData> = (0..most)
        .map(|i| {
            let idx: Vec<usize> = (0..args.samples)
                .map(|k| (i * args.samples + k) % n)
                .collect();
            LocalData::from_dataset(&data.train, &idx, 0)
        })
        .collect();
    let starts: Vec<Params> = (0..most)
        .map(|i| Params::init(args.model, i as u64))
        .collect();
    let cfg = |i: usize| TrainConfig {
        epochs: 1,
        batch_size: args.batch,
        lr: 0.01,
        momentum: 0.5,
        seed: i as u64,
        threads: 1,
    };
    let mut out = Vec::new();
    for &device_kind in &args.devices {
        let device = device_kind.device()?;
        for &c in &args.cohorts {
            let members: Vec<Member<'_>> = (0..c)
                .map(|i| Member {
                    start: &starts[i],
                    data: &clients[i],
                    cfg: cfg(i),
                    prox: None,
                })
                .collect();
            let samples = (c * args.samples) as f64;
            let convolutions = if args.convolutions.is_empty() {
                vec![Convolution::for_backend(device_kind)]
            } else {
                args.convolutions.clone()
            };
            for conv in convolutions {
                let cohort = || -> anyhow::Result<()> {
                    for r in train_cohort(&members, &device, conv) {
                        r?;
                    }
                    Ok(())
                };
                let mut t = measure(args, "cohort", device_kind, c, 1, samples, cohort)?;
                t.convolution = (args.model == ModelKind::LeNet5).then_some(conv);
                push(&mut out, args, t)?;
            }
            if args.alone {
                let alone = |threads: usize| {
                    let device: &Device = &device;
                    let members = &members;
                    move || -> anyhow::Result<()> { train_alone(members, device, threads) }
                };
                let t = measure(args, "alone", device_kind, c, 1, samples, alone(1))?;
                push(&mut out, args, t)?;
                let cores = parallel::cores().min(c);
                if cores > 1 {
                    let t = measure(
                        args,
                        "alone-threads",
                        device_kind,
                        c,
                        cores,
                        samples,
                        alone(cores),
                    )?;
                    push(&mut out, args, t)?;
                }
            }
        }
    }
    Ok(out)
}

/// The members trained one by one ([`train_local`]), on `threads` threads taking the next
/// client as they finish one.
fn train_alone(members: &[Member<'_>], device: &Device, threads: usize) -> anyhow::Result<()> {
    par_map_on(threads, members, |m| {
        train_local(m.start, m.data, &m.cfg, device)
    })
    .into_iter()
    .try_for_each(|r| r.map(drop).map_err(Into::into))
}

/// One untimed run, then `args.repeats` timed ones of `f`.
fn measure(
    args: &BenchArgs,
    mode: &'static str,
    device: Backend,
    clients: usize,
    threads: usize,
    samples: f64,
    f: impl Fn() -> anyhow::Result<()>,
) -> anyhow::Result<Throughput> {
    f()?;
    let runs: Vec<f64> = timed(args.repeats, f)?
        .into_iter()
        .map(|s| samples / s)
        .collect();
    let t = Throughput {
        mode,
        device,
        convolution: None,
        clients,
        threads,
        batch: args.batch,
        samples_per_second: median(&runs),
        runs,
    };
    Ok(t)
}

/// Seconds of each of `repeats` (at least one) calls of `f`.
fn timed<E>(repeats: usize, f: impl Fn() -> Result<(), E>) -> Result<Vec<f64>, E> {
    (0..repeats.max(1))
        .map(|_| {
            let start = Instant::now();
            f().map(|()| start.elapsed().as_secs_f64())
        })
        .collect()
}

/// The median of `runs` (the upper one of an even count).
fn median(runs: &[f64]) -> f64 {
    let mut sorted = runs.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// Logs a measured setting, adds it to `out` and saves `out` ([`save`]).
fn push(out: &mut Vec<Throughput>, args: &BenchArgs, t: Throughput) -> anyhow::Result<()> {
    let conv = t
        .convolution
        .map_or(String::new(), |c| format!(" ({c:?} convolutions)"));
    info!(
        "{} {} {}{conv}: {} clients × {} samples, batch {}, {} thread(s): {:.0} samples/s",
        args.model,
        t.device,
        t.mode,
        t.clients,
        args.samples,
        args.batch,
        t.threads,
        t.samples_per_second
    );
    out.push(t);
    save(args, out)
}

/// Rewrites `--out`, if given, with the settings measured so far (whole or not at all).
fn save<T: Serialize>(args: &BenchArgs, so_far: &[T]) -> anyhow::Result<()> {
    let Some(path) = &args.out else {
        return Ok(());
    };
    let json = serde_json::to_vec_pretty(so_far)?;
    atomic_file::write(path, &json).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    /// With `--out`, the file holds every setting measured so far after each one (a run stopped
    /// there keeps them) and, at the end, what the run returns (printed as JSON); a path that
    /// cannot be written ends the run before anything is measured.
    #[test]
    fn out_file_is_rewritten_after_every_setting() {
        let dir = std::env::temp_dir().join(format!("edgecfl-bench-out-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("bench.json");
        let parse = |out: &std::path::Path| {
            Cli::try_parse_from([
                "b",
                "--model",
                "mlp",
                "--cohorts",
                "1,2",
                "--samples",
                "20",
                "--repeats",
                "1",
                "--out",
                out.to_str().unwrap(),
            ])
            .unwrap()
            .bench
        };
        let args = parse(&file);
        let read = || -> Vec<serde_json::Value> {
            serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap()
        };
        let mut so_far = Vec::new();
        for clients in [3, 7] {
            let t = Throughput {
                mode: "cohort",
                device: args.devices[0],
                convolution: None,
                clients,
                threads: 1,
                batch: 10,
                samples_per_second: 1.5,
                runs: vec![1.5],
            };
            push(&mut so_far, &args, t).unwrap();
            let saved = read();
            assert_eq!(saved.len(), so_far.len());
            assert_eq!(saved.last().unwrap()["clients"], clients);
        }

        let measured = run(&args).unwrap();
        assert_eq!(measured.len(), 2);
        // The file's text is what the run returned, written out: compared as text, since a
        // float parsed back from JSON may be one unit in the last place off (serde_json's fast
        // parser), and these are timings, any float at all.
        assert_eq!(
            std::fs::read(&file).unwrap(),
            serde_json::to_vec_pretty(&measured).unwrap()
        );
        assert_eq!(read()[1]["clients"], 2);

        let missing = dir.join("no-such-folder").join("bench.json");
        let err = run(&parse(&missing)).unwrap_err();
        assert!(format!("{err:#}").contains("no-such-folder"), "{err:#}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `--relevance` times each client count on each device and reports the mean relevance, in
    /// (0, 1]; the signatures are valid uploads and the same at every count.
    #[test]
    fn relevance_times_each_count_on_each_device() {
        let cli = Cli::try_parse_from(["b", "--relevance", "3,20", "--repeats", "1"]).unwrap();
        let out = relevance(&cli.bench).unwrap();
        assert_eq!(out.len(), 2);
        for (t, n) in out.iter().zip([3, 20]) {
            assert_eq!(
                (t.mode, t.clients, t.k, t.runs.len()),
                ("relevance", n, 5, 1)
            );
            assert!(t.seconds > 0.0);
            assert!(
                t.mean_relevance > 0.0 && t.mean_relevance <= 1.0,
                "{}",
                t.mean_relevance
            );
        }
        let s = random_signatures(20, 5, 784);
        assert!(s.iter().all(|s| s.validate().is_ok()));
        assert_eq!(random_signatures(3, 5, 784), s[..3]);
        let err = Cli::try_parse_from(["b", "--relevance", "0"]).unwrap();
        assert!(relevance(&err.bench).is_err());
    }
}
