//! `edge-client bench`: local training throughput (samples per second) of this machine for each
//! device (`--devices`) and batch size asked, as JSON. Repeats each measurement and reports the median.
//! With `--predict`, also the inference throughput of `edge-client predict` (forward passes of
//! the same samples in batches of each size; `task` tells the two apart).
//!
//! Without `--partition` it reads the first `--samples` training images of the data (`--data`,
//! else `EDGECFL_FMNIST_DIR`, the Debian package's directory or the bundled subset) and nothing
//! else. With `--partition` it loads this client's shard exactly as `edge-client run` does
//! (training shard and local test set, held for the whole bench) and times epochs on the first
//! `--samples` of the shard: its memory is that of a client of that partition.

use clap::Args;
use edgecfl_shared::data::DataLabels;
use std::time::Instant;

use edgecfl_shared::model::{ModelKind, Net, Params};
use edgecfl_shared::model_file::{self, InputNorm};
use edgecfl_shared::train::{Backend, Device, LocalData, TrainConfig, train_local};
use serde::Serialize;

use crate::shard::ShardArgs;
use tracing::info;

/// Arguments of `edge-client bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// The model (its help lists each one with its input).
    #[arg(long, help = format!("{}. Default: the data set's model (ResNet-9 for CIFAR-100, else its LeNet-5)",
                               edgecfl_shared::model::model_flag_help()))]
    pub model: Option<ModelKind>,
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
    /// Training thread counts to measure (comma-separated; `edge-client run --threads`).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub threads: Vec<usize>,
    /// Training samples per timed epoch: the first N of the train set, or of this client's shard
    /// with --partition.
    #[arg(long, default_value_t = 600)]
    pub samples: usize,
    /// Repetitions of one epoch per setting; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Also measure inference (`edge-client predict`'s forward passes) at each batch size.
    #[arg(long)]
    pub predict: bool,
    /// Where the data come from; with --partition, the shard a client of that partition holds.
    #[command(flatten)]
    pub shard: ShardArgs,
}

/// One measured setting.
#[derive(Debug, Clone, Serialize)]
pub struct Throughput {
    /// `train` (one epoch of local SGD) or `predict` (forward passes only).
    pub task: &'static str,
    /// Device (`flex` for `cpu`).
    pub backend: Backend,
    /// Batch size.
    pub batch: usize,
    /// Training threads (1 for `predict`).
    pub threads: usize,
    /// Median samples per second over the repeats.
    pub samples_per_second: f64,
    /// Every repeat's samples per second.
    pub runs: Vec<f64>,
}

/// Runs the measurements.
pub fn run(args: &BenchArgs) -> anyhow::Result<Vec<Throughput>> {
    let model = args
        .model
        .unwrap_or(ModelKind::default_for(args.shard.dataset));
    model.check_input(args.shard.dataset)?;
    // With --partition, `_shard` stays in memory for the whole bench, as in `edge-client run`.
    let (local, _shard) = if args.shard.partition.is_some() {
        let shard = args.shard.load()?;
        let n = args.samples.min(shard.train.len());
        // Read from the scratch file as training reads it when the shard was spilled.
        let first = shard.train.first(n);
        info!(
            "bench: first {n} of {} training samples ({} test) of {}{}",
            shard.train.len(),
            shard.test.len(),
            shard.source,
            if first.is_spilled() {
                ", images in a scratch file"
            } else {
                ""
            }
        );
        (first, Some(shard))
    } else {
        let data = DataLabels::load(args.shard.dataset, args.shard.data.as_deref())?;
        let n = args.samples.min(data.train.len());
        let idx: Vec<usize> = (0..n).collect();
        (LocalData::from_owned(data.select_train(&idx)?, 0, 0), None)
    };
    let params = Params::init(model, 0);
    let mut out = Vec::new();
    for &backend in &args.backends {
        let device = backend.device()?;
        for (&threads, &batch) in args
            .threads
            .iter()
            .flat_map(|t| args.batches.iter().map(move |b| (t, b)))
        {
            let cfg = TrainConfig {
                epochs: 1,
                batch_size: batch,
                lr: 0.01,
                momentum: 0.5,
                seed: 0,
                threads,
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
                task: "train",
                backend,
                batch,
                threads,
                samples_per_second: sorted[sorted.len() / 2],
                runs,
            };
            info!(
                "{} {} batch {batch}, {threads} thread(s): {:.0} samples/s",
                model, backend, t.samples_per_second
            );
            out.push(t);
        }
        if args.predict {
            out.extend(predict_throughput(args, &params, &local, backend, &device)?);
        }
    }
    Ok(out)
}

/// Samples per second of `predict`'s forward passes over `local`'s images, per batch size.
fn predict_throughput(
    args: &BenchArgs,
    params: &Params,
    local: &LocalData,
    backend: Backend,
    device: &Device,
) -> anyhow::Result<Vec<Throughput>> {
    let pixels = local.pixels()?;
    let n = local.len();
    let net = Net::from_params(params, device);
    let mut out = Vec::with_capacity(args.batches.len());
    for &batch in &args.batches {
        // One untimed warm-up pass.
        model_file::logits(&net, &pixels, InputNorm::PIPELINE, batch, device)?;
        let mut runs = Vec::with_capacity(args.repeats);
        for _ in 0..args.repeats.max(1) {
            let start = Instant::now();
            model_file::logits(&net, &pixels, InputNorm::PIPELINE, batch, device)?;
            runs.push(n as f64 / start.elapsed().as_secs_f64());
        }
        let mut sorted = runs.clone();
        sorted.sort_by(f64::total_cmp);
        let t = Throughput {
            task: "predict",
            backend,
            batch,
            threads: 1,
            samples_per_second: sorted[sorted.len() / 2],
            runs,
        };
        info!(
            "{} {} predict, batch {batch}: {:.0} samples/s",
            params.model, backend, t.samples_per_second
        );
        out.push(t);
    }
    Ok(out)
}
