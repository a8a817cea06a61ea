//! The GPU backends' check (issue 5): a few steps of LeNet-5 training and MT-HFL's server-side
//! clustering distances on each device asked, compared with the CPU (`flex`) results.
//!
//! ```text
//! nice -n 10 cargo run --example gpu_check --features vulkan -- --devices cpu,vulkan
//! scripts/gpu-backends.sh          # builds each feature in its own target dir and runs this
//! ```
//!
//! 1. **Training.** LeNet-5 from `Params::init(lenet5, 0)` on the first `--samples` training
//!    images of the data `FashionMnist::load(None)` finds, `--epochs` epochs of SGD (batch
//!    `--batch`, lr 0.05, momentum 0.5, seed 0). The loss on those samples is evaluated before and
//!    after on the same device; the run fails unless it fell. Every device starts from the same
//!    weights and sees the same batches, so the trained weights of a device are compared with the
//!    CPU's: max |Δ| and the relative L2 distance. They are close, not identical (float
//!    reductions run in another order on a GPU; the differences grow with the steps).
//! 2. **Clustering distances.** `tasks:fmnist3` over 10 clients (seed 0), each client's top
//!    `--k` Gram eigenpairs (computed on the CPU in f64, as on a client), then the relevance
//!    matrix server-side ([`spectral::server_rows`], the coordinator's batched `f32` products on the
//!    device), symmetrised; the distance `1 − R` and average-linkage HAC cut at 3 clusters. Compared
//!    with the CPU: max |ΔR| and whether the clusters are the same (ARI against the CPU's).
//!    `--replicas R` repeats the 10 signatures R times (10·R clients) for a larger timing.
//!
//! Times are wall-clock seconds of the first call (which includes the GPU backends' kernel
//! compilation) and of a second, warm call. One JSON object per device is printed on stdout
//! (`--json FILE` writes them as a JSON array too); a summary goes to stderr.

use edgecfl_shared::cluster::spectral;
use std::time::Instant;

use edgecfl_shared::algorithms::mthfl::{self, DEFAULT_LINKAGE};
use edgecfl_shared::cluster::adjusted_rand_index;
use edgecfl_shared::cluster::clustering::Lambda;
use edgecfl_shared::cluster::robust::Guard;
use edgecfl_shared::cluster::spectral::{Estimate, Signature};
use edgecfl_shared::data::{FashionMnist, PartitionSpec, partition};
use edgecfl_shared::model::{ModelKind, Params};
use edgecfl_shared::train::{Backend, Device, LocalData, TrainConfig, evaluate, train_local};
use serde_json::json;

type BoxError = Box<dyn std::error::Error>;

struct Args {
    devices: Vec<Backend>,
    samples: usize,
    batch: usize,
    epochs: usize,
    k: usize,
    replicas: usize,
    json: Option<std::path::PathBuf>,
}

fn args() -> Result<Args, BoxError> {
    let mut a = Args {
        devices: vec![Backend::Flex],
        samples: 200,
        batch: 20,
        epochs: 2,
        k: 5,
        replicas: 1,
        json: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| -> Result<usize, BoxError> {
            v.parse::<usize>()
                .map_err(|e| format!("{flag} {v:?}: {e}").into())
        };
        match flag.as_str() {
            "--devices" | "--device" => {
                a.devices = value.split(',').map(str::parse).collect::<Result<_, _>>()?
            }
            "--samples" => a.samples = num(&value)?,
            "--batch" => a.batch = num(&value)?,
            "--epochs" => a.epochs = num(&value)?,
            "--k" => a.k = num(&value)?,
            "--replicas" => a.replicas = num(&value)?,
            "--json" => a.json = Some(value.into()),
            _ => {
                return Err(format!(
                    "unknown flag {flag} (expected --devices, --samples, --batch, --epochs, --k, \
                     --replicas, --json)"
                )
                .into());
            }
        }
    }
    if a.samples == 0 || a.batch == 0 || a.epochs == 0 || a.k == 0 || a.replicas == 0 {
        return Err("--samples, --batch, --epochs, --k and --replicas must be ≥ 1".into());
    }
    Ok(a)
}

/// What one device computed.
struct Outcome {
    params: Params,
    relevance: Vec<Vec<f64>>,
    assignment: Vec<usize>,
    report: serde_json::Value,
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from((x - y).abs()))
        .fold(0.0, f64::max)
}

fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2))
        .sum();
    let den: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum();
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

fn run_device(
    backend: Backend,
    a: &Args,
    local: &LocalData,
    sigs: &[Signature],
) -> Result<Outcome, BoxError> {
    let t = Instant::now();
    let device: Device = backend.device()?;
    let start_s = t.elapsed().as_secs_f64();
    let init = Params::init(ModelKind::LeNet5, 0);
    let cfg = TrainConfig {
        epochs: a.epochs,
        batch_size: a.batch,
        lr: 0.05,
        momentum: 0.5,
        seed: 0,
        threads: 1,
    };
    let before = evaluate(&init, local, 100, &device)?;
    let (params, rep) = train_local(&init, local, &cfg, &device)?;
    let (_, warm) = train_local(&init, local, &cfg, &device)?;
    let after = evaluate(&params, local, 100, &device)?;
    if after.loss().partial_cmp(&before.loss()) != Some(std::cmp::Ordering::Less) {
        return Err(format!(
            "{backend}: the training loss did not fall ({:.4} -> {:.4})",
            before.loss(),
            after.loss()
        )
        .into());
    }

    let t = Instant::now();
    let rows = spectral::server_rows(sigs, Estimate::Norm, &device)?;
    let relevance_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let rows_warm = spectral::server_rows(sigs, Estimate::Norm, &device)?;
    let relevance_warm_s = t.elapsed().as_secs_f64();
    assert_eq!(
        rows, rows_warm,
        "server_rows is deterministic on one device"
    );
    let relevance = spectral::symmetrise(&rows)?;
    let (clustering, _) = mthfl::cluster(
        &relevance,
        DEFAULT_LINKAGE,
        Lambda::Clusters(3),
        Guard::Paper,
    )?;

    let report = json!({
        "device": backend.to_string(),
        "start_s": start_s,
        "train": {
            "samples": local.len(),
            "batch": a.batch,
            "epochs": a.epochs,
            "steps": rep.steps,
            "loss_before": before.loss(),
            "loss_after": after.loss(),
            "accuracy_before": before.accuracy(),
            "accuracy_after": after.accuracy(),
            "last_epoch_loss": rep.last_epoch_loss,
            "seconds_first": rep.seconds,
            "seconds_warm": warm.seconds,
            "samples_per_second_warm": rep.samples as f64 / warm.seconds,
        },
        "relevance": {
            "clients": sigs.len(),
            "k": sigs[0].k,
            "seconds_first": relevance_s,
            "seconds_warm": relevance_warm_s,
            "assignment": clustering.assignment,
        },
    });
    Ok(Outcome {
        params,
        relevance,
        assignment: clustering.assignment,
        report,
    })
}

fn main() -> Result<(), BoxError> {
    let a = args()?;
    let data = FashionMnist::load(None)?;
    let n = a.samples.min(data.train.len());
    let idx: Vec<usize> = (0..n).collect();
    let local = LocalData::from_dataset(&data.train, &idx, 0);

    let spec: PartitionSpec = "tasks:fmnist3".parse()?;
    let part = partition(&spec, &data.train.labels, 10, 0)?;
    let mut base = Vec::new();
    for c in &part.clients {
        let l = LocalData::from_dataset(&data.train, &c.train, 0);
        base.push(spectral::signature_of(&l, a.k)?);
    }
    let sigs: Vec<Signature> = (0..a.replicas).flat_map(|_| base.iter().cloned()).collect();
    let truth: Vec<usize> = (0..a.replicas)
        .flat_map(|_| part.truth.clone().unwrap_or_default())
        .collect();
    eprintln!(
        "data: {} ({} training images); LeNet-5 on {n} samples, {} epochs of batch {}; \
         relevance of {} clients (tasks:fmnist3 ×{}), k = {}; compiled in: {}",
        data.source,
        data.train.len(),
        a.epochs,
        a.batch,
        sigs.len(),
        a.replicas,
        a.k,
        Backend::compiled().join(", ")
    );

    // The reference: the CPU, whether asked or not.
    let reference = run_device(Backend::Flex, &a, &local, &sigs)?;
    let mut reports = Vec::new();
    for &backend in &a.devices {
        let out = if backend == Backend::Flex {
            None
        } else {
            Some(run_device(backend, &a, &local, &sigs)?)
        };
        let o = out.as_ref().unwrap_or(&reference);
        let mut report = o.report.clone();
        let dr = o
            .relevance
            .iter()
            .flatten()
            .zip(reference.relevance.iter().flatten())
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        report["vs_cpu"] = json!({
            "params_max_abs_diff": max_abs_diff(&o.params.values, &reference.params.values),
            "params_rel_l2": rel_l2(&o.params.values, &reference.params.values),
            "relevance_max_abs_diff": dr,
            "clusters_ari_vs_cpu": adjusted_rand_index(&o.assignment, &reference.assignment),
        });
        report["relevance"]["clusters_ari_vs_truth"] =
            json!(adjusted_rand_index(&o.assignment, &truth));
        let t = &report["train"];
        let r = &report["relevance"];
        let v = &report["vs_cpu"];
        eprintln!(
            "{backend}: loss {:.4} -> {:.4} in {} steps ({:.2} s first, {:.2} s warm); \
             weights vs cpu: max|Δ| {:.2e}, rel L2 {:.2e}; relevance {:.3} s first, {:.3} s warm, \
             max|ΔR| vs cpu {:.2e}, clusters ARI vs cpu {:.3}, vs tasks {:.3}",
            t["loss_before"].as_f64().unwrap_or(f64::NAN),
            t["loss_after"].as_f64().unwrap_or(f64::NAN),
            t["steps"],
            t["seconds_first"].as_f64().unwrap_or(f64::NAN),
            t["seconds_warm"].as_f64().unwrap_or(f64::NAN),
            v["params_max_abs_diff"].as_f64().unwrap_or(f64::NAN),
            v["params_rel_l2"].as_f64().unwrap_or(f64::NAN),
            r["seconds_first"].as_f64().unwrap_or(f64::NAN),
            r["seconds_warm"].as_f64().unwrap_or(f64::NAN),
            v["relevance_max_abs_diff"].as_f64().unwrap_or(f64::NAN),
            v["clusters_ari_vs_cpu"].as_f64().unwrap_or(f64::NAN),
            r["clusters_ari_vs_truth"].as_f64().unwrap_or(f64::NAN),
        );
        println!("{report}");
        reports.push(report);
    }
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(&reports)?)?;
    }
    Ok(())
}
