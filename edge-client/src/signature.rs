//! `edge-client signature`: FedClust's round-0 step done offline. Trains the seeded initial model
//! on the local data for the warm-up epochs and writes the selected layers (by default the final
//! layer) as one CSV row, ready for `coordinator cluster`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use edgecfl_shared::federation::{FederationConfig, client_seed};
use edgecfl_shared::model::{LayerSet, ModelKind, Params};
use edgecfl_shared::train::{Backend, TrainConfig, train_local};

use crate::shard::ShardArgs;
use tracing::info;

/// The federation's defaults, which the coordinator starts from too (its round 0 trains with
/// them unless told otherwise).
fn defaults() -> FederationConfig {
    FederationConfig::default()
}

/// Arguments of `edge-client signature`.
#[derive(Debug, Clone, Args)]
pub struct SignatureArgs {
    /// Data of this client.
    #[command(flatten)]
    pub shard: ShardArgs,
    /// The model (its help lists each one with its input).
    #[arg(long, default_value_t = defaults().model, help = edgecfl_shared::model::model_flag_help())]
    pub model: ModelKind,
    /// Seed of the initial model θ⁰ (the coordinator's master seed).
    #[arg(long, default_value_t = defaults().seed)]
    pub model_seed: u64,
    /// Warm-up epochs.
    #[arg(long, default_value_t = defaults().warmup_epochs)]
    pub warmup_epochs: usize,
    /// Mini-batch size.
    #[arg(long, default_value_t = defaults().batch_size)]
    pub batch: usize,
    /// Learning rate.
    #[arg(long, default_value_t = defaults().lr)]
    pub lr: f64,
    /// SGD momentum.
    #[arg(long, default_value_t = defaults().momentum)]
    pub momentum: f64,
    /// Layers to upload: final | smallest-fc | all | names (fc2,fc3).
    #[arg(long, default_value_t = defaults().signature_layers)]
    pub layers: LayerSet,
    /// Where training runs: cpu (= flex) | ndarray | vulkan[:N|:igpu[:N]|:cpu] | tch[:cpu|:cuda[:N]]
    /// | cuda[:N]. All but cpu need the cargo feature of the same name (`--backend` is an alias).
    #[arg(
        long = "device",
        visible_alias = "backend",
        value_name = "DEVICE",
        default_value = "cpu"
    )]
    pub backend: Backend,
    /// Append the row to this CSV file (created if missing); stdout if absent.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Computes the signature; returns the floats.
pub fn run(args: &SignatureArgs) -> anyhow::Result<Vec<f32>> {
    let shard = args.shard.load()?;
    anyhow::ensure!(
        !shard.train.is_empty(),
        "this client has no training sample"
    );
    let initial = Params::init_for(
        args.model,
        args.shard.dataset.info().classes(),
        args.model_seed,
    );
    let cfg = TrainConfig {
        epochs: args.warmup_epochs,
        batch_size: args.batch,
        lr: args.lr,
        momentum: args.momentum,
        seed: client_seed(args.model_seed, 0, args.shard.index),
        // One thread: the floats a coordinator computes for this client.
        threads: 1,
    };
    let (trained, report) = train_local(&initial, &shard.train, &cfg, &args.backend.device()?)?;
    let sig = trained
        .layout()
        .select(&args.layers)?
        .extract(&trained.values);
    info!(
        "{}: {} samples, {} epochs in {:.1}s (loss {:.4}); {} floats ({} bytes) to upload",
        shard.source,
        shard.train.len(),
        args.warmup_epochs,
        report.seconds,
        report.last_epoch_loss,
        sig.len(),
        sig.len() * 4
    );
    let row = sig
        .iter()
        .map(|v| format!("{v:e}"))
        .collect::<Vec<_>>()
        .join(",");
    match &args.out {
        Some(p) => {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| format!("cannot open {}", p.display()))?;
            writeln!(f, "{row}").with_context(|| format!("cannot write {}", p.display()))?;
        }
        None => println!("{row}"),
    }
    Ok(sig)
}
