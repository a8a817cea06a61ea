//! `edge-client`: argument parsing only; the work is in the library.

use std::io::Write as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use edge_client::{bench, predict, run, signature};
use edgecfl_shared::logging::LogArgs;
use tracing::{error, info};

/// Edge client of edgecfl: local training on a Raspberry Pi / Jetson class device.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: LogArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Join a federation over MQTT: announce, then answer the coordinator until the run ends.
    Run(Box<run::RunArgs>),
    /// Compute FedClust's round-0 upload (final-layer weights after warm-up) as a CSV row.
    Signature(signature::SignatureArgs),
    /// Measure local training throughput (samples/s) per device and batch size, as JSON
    /// (with --predict, inference throughput too).
    Bench(bench::BenchArgs),
    /// Classify images with a trained model (`cluster-<k>.safetensors`): class probabilities,
    /// or accuracy and the confusion matrix on labelled data.
    Predict(predict::PredictArgs),
}

fn main() -> ExitCode {
    // Before any thread starts: freed blocks stay in the heap for the next training step.
    edgecfl_shared::malloc::tune();
    let cli = Cli::parse();
    cli.log.init();
    let result = match cli.command {
        Command::Run(a) => run::run(&a).map(|s| {
            info!(
                "{} jobs ({} failed), {} commands ignored, {} dropped unread; {} bytes up, {} bytes down",
                s.jobs, s.failed, s.ignored, s.dropped, s.bytes_up, s.bytes_down
            );
        }),
        Command::Signature(a) => signature::run(&a).map(|_| ()),
        Command::Predict(a) => predict::run(&a).and_then(|r| {
            // An error (e.g. a closed pipe), not a panic, when stdout goes away.
            let mut out = std::io::stdout().lock();
            if a.json {
                serde_json::to_writer_pretty(&mut out, &r)?;
                writeln!(out)?;
            } else {
                write!(out, "{}", predict::text(&r))?;
            }
            Ok(())
        }),
        Command::Bench(a) => bench::run(&a).and_then(|r| {
            println!("{}", serde_json::to_string_pretty(&r)?);
            Ok(())
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}
