//! `coordinator`: argument parsing only; the work is in the library.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use coordinator::config::{DEFAULT_CONFIG, RunFlags};
use coordinator::{offline, simulate};

/// Coordinator of edgecfl: one-shot clustering of edge clients and cluster-wise federated training.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run FedClust, FedAvg or Local with every client in this process.
    Simulate(Box<RunFlags>),
    /// Cluster signatures from a .npy or .csv file (rows = clients) and print labels and merges as JSON.
    Cluster(offline::ClusterArgs),
    /// Print the default configuration file (TOML).
    GenerateConfig,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(flags) => flags.resolve().and_then(|cfg| {
            let r = simulate::run(&cfg)?;
            println!(
                "final accuracy {}, {} clusters, ARI {}; results in {}",
                r.final_accuracy()
                    .map_or("n/a (no training round)".into(), |a| format!(
                        "{:.2} %",
                        100.0 * a
                    )),
                r.n_clusters,
                r.ari.map_or("n/a".into(), |a| format!("{a:.3}")),
                cfg.out.display()
            );
            Ok(())
        }),
        Command::Cluster(args) => offline::run(&args).and_then(|v| {
            println!("{}", serde_json::to_string_pretty(&v)?);
            Ok(())
        }),
        Command::GenerateConfig => {
            print!("{DEFAULT_CONFIG}");
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
