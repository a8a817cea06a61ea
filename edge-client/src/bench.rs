//! `edge-client bench`: local training throughput (samples per second) of this machine for each
//! device (`--devices`) and batch size asked, as JSON. Repeats each measurement and reports the median.

use clap::Args;
use edgecfl_shared::data::fmnist::FashionMnist;
use edgecfl_shared::model::{ModelKind, Params};
use edgecfl_shared::train::{Backend, LocalData, TrainConfig, train_local};
use serde::Serialize;

/// Arguments of `edge-client bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// lenet5 | mlp
    #[arg(long, default_value = "lenet5")]
    pub model: ModelKind,
    /// Devices to measure (comma-separated), e.g. `cpu,vulkan`: cpu (= flex) | ndarray |
    /// vulkan[:N|:igpu[:N]|:cpu] | tch[:cpu|:cuda[:N]] | cuda[:N] (`--backends` is an alias).
    #[arg(
        long = "devices",
        visible_aliases = ["device", "backends"],
        value_name = "DEVICES",
        value_delimiter = ',',
        default_value = "cpu"
    )]
    pub backends: Vec<Backend>,
    /// Batch sizes to measure (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "10,64")]
    pub batches: Vec<usize>,
    /// Training samples (the first N of the bundled/installed train set).
    #[arg(long, default_value_t = 600)]
    pub samples: usize,
    /// Repetitions of one epoch per setting; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
}

/// One measured setting.
#[derive(Debug, Clone, Serialize)]
pub struct Throughput {
    /// Device (`flex` for `cpu`).
    pub backend: Backend,
    /// Batch size.
    pub batch: usize,
    /// Median samples per second over the repeats.
    pub samples_per_second: f64,
    /// Every repeat's samples per second.
    pub runs: Vec<f64>,
}

/// Runs the measurements.
pub fn run(args: &BenchArgs) -> anyhow::Result<Vec<Throughput>> {
    let data = FashionMnist::load(None)?;
    let n = args.samples.min(data.train.len());
    let idx: Vec<usize> = (0..n).collect();
    let local = LocalData::from_dataset(&data.train, &idx, 0);
    let params = Params::init(args.model, 0);
    let mut out = Vec::new();
    for &backend in &args.backends {
        let device = backend.device()?;
        for &batch in &args.batches {
            let cfg = TrainConfig {
                epochs: 1,
                batch_size: batch,
                lr: 0.01,
                momentum: 0.5,
                seed: 0,
            };
            // One untimed warm-up epoch (allocator, kernels).
            train_local(&params, &local, &cfg, &device)?;
            let mut runs = Vec::with_capacity(args.repeats);
            for _ in 0..args.repeats.max(1) {
                let (_, rep) = train_local(&params, &local, &cfg, &device)?;
                runs.push(rep.samples as f64 / rep.seconds);
            }
            let mut sorted = runs.clone();
            sorted.sort_by(f64::total_cmp);
            let t = Throughput {
                backend,
                batch,
                samples_per_second: sorted[sorted.len() / 2],
                runs,
            };
            eprintln!(
                "{} {} batch {batch}: {:.0} samples/s",
                args.model, backend, t.samples_per_second
            );
            out.push(t);
        }
    }
    Ok(out)
}
