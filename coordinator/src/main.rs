//! `coordinator`: argument parsing only; the work is in the library.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use coordinator::cmd::serve::{self, NetFlags};
use coordinator::cmd::{bench, cluster, credentials, demo, export, lps, partition, simulate};
use coordinator::config::{DEFAULT_CONFIG, RunConfig, RunFlags, SimFlags, with_defaults};
use coordinator::live;
use edgecfl_shared::logging::LogArgs;
use tracing::{error, info, warn};

/// Coordinator of edgecfl: one-shot clustering of edge clients and cluster-wise federated training.
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
    /// The main job: embedded broker, coordinator and N edge-client processes on this machine.
    Demo(Box<demo::DemoArgs>),
    /// Run the federation over MQTT with edge clients (embedded broker unless --broker).
    Serve(Box<ServeArgs>),
    /// One local parameter server of a hierarchy: waits for a cluster from the GPS
    /// (`serve --lps remote`), trains it with its clients, shares the common layers.
    Lps(Box<lps::LpsArgs>),
    /// Run a federation (any --algorithm) with every client in this process.
    Simulate(Box<SimulateArgs>),
    /// Training throughput of simulated clients on this machine (JSON): C clients trained as one
    /// batched cohort, and with --alone one by one, for each device and cohort size.
    Bench(Box<bench::BenchArgs>),
    /// Cluster signatures from a .npy or .csv file (rows = clients) and print labels and merges as JSON.
    Cluster(cluster::ClusterArgs),
    /// Print what each client of a partition holds (JSON); with --clusters, compare a run's
    /// clusters with the clients' label sets.
    Partition(partition::PartitionArgs),
    /// Write each cluster model of a run's checkpoint as `cluster-<k>.safetensors` (PyTorch
    /// names and layout, with a metadata header).
    Export(export::ExportArgs),
    /// Print the default configuration file (TOML).
    GenerateConfig,
    /// Write a testbed fleet's security material: a CA, the broker's certificate, a password
    /// (and optionally a certificate) per user, a mosquitto password_file, acl_file and
    /// mosquitto.conf, the embedded broker's broker.toml, and shard-owners.txt (which client
    /// holds which testbed shard, for `serve --shard-owners`).
    Credentials(Box<credentials::CredentialsArgs>),
}

/// Arguments of `coordinator serve`.
#[derive(clap::Args)]
struct ServeArgs {
    #[command(flatten)]
    run: RunFlags,
    #[command(flatten)]
    net: NetFlags,
    #[command(flatten)]
    http: live::HttpArgs,
}

/// Arguments of `coordinator simulate`.
#[derive(clap::Args)]
struct SimulateArgs {
    #[command(flatten)]
    run: RunFlags,
    #[command(flatten)]
    sim: SimFlags,
    #[command(flatten)]
    http: live::HttpArgs,
}

fn final_line(r: &edgecfl_shared::federation::RunResult, out: &std::path::Path) {
    println!(
        "final accuracy {}, {} clusters, ARI {}; results in {}",
        r.final_accuracy()
            .map_or("n/a (no training round)".into(), |a| format!(
                "{:.2} %",
                100.0 * a
            )),
        r.n_clusters,
        r.ari.map_or("n/a".into(), |a| format!("{a:.3}")),
        out.display()
    );
}

/// The command line, each run flag's help showing its default: the default configuration's for
/// `simulate` and `serve`, the demo's for `demo`.
fn parse() -> Cli {
    let defaults = |text: &str, name: &str| {
        RunConfig::parse(text, name).expect("the embedded configurations parse")
    };
    let (run, demo) = (
        defaults(DEFAULT_CONFIG, "<default config>"),
        defaults(demo::DEMO_CONFIG, "<demo config>"),
    );
    let cmd = Cli::command()
        .mut_subcommand("simulate", |c| with_defaults(c, &run))
        .mut_subcommand("serve", |c| with_defaults(c, &run))
        .mut_subcommand("demo", |c| with_defaults(c, &demo));
    Cli::from_arg_matches(&cmd.get_matches()).unwrap_or_else(|e| e.exit())
}

fn main() -> ExitCode {
    let cli = parse();
    cli.log.init();
    coordinator::interrupt::install();
    let result = match cli.command {
        Command::Demo(args) => demo::run(&args).map(|s| final_line(&s.result, &s.out)),
        Command::Serve(args) => serve::resolve(&args.run, &args.net).and_then(|cfg| {
            let broker = serve::broker_for(&args.net, &cfg)?;
            let mut net = args.net.clone();
            let (view, server) = live::start_served(&args.http, &net, &cfg, "serve")?;
            net.live = view;
            let s = serve::run(&cfg, &net, &broker, None);
            args.http.linger(server);
            let s = s?;
            for p in &s.plots {
                info!("plot: {}", p.display());
            }
            match &s.gps {
                Some(g) => println!(
                    "final accuracy {} over {} LPSs, {} GPS rounds of {} common floats; results in {}",
                    g.final_accuracy
                        .map_or("n/a".into(), |a| format!("{:.2} %", 100.0 * a)),
                    g.lps.len(),
                    g.gps_rounds,
                    g.common_len,
                    s.out.display()
                ),
                None => final_line(&s.result, &s.out),
            }
            Ok(())
        }),
        Command::Lps(args) => lps::run(&args).map(|s| match s {
            Some(s) => {
                println!("cluster {}:", s.cluster);
                final_line(&s.result, &s.out);
            }
            None => println!("no cluster for this LPS"),
        }),
        Command::Simulate(args) => args.sim.resolve(&args.run).and_then(|cfg| {
            // Every client trains in this process: glibc's allocator kept as the edge client
            // keeps it (same results, 1.09-1.11× as fast here; BENCHMARKS §3). `serve` trains nothing.
            edgecfl_shared::malloc::tune();
            let algorithm = cfg.method.algorithm.to_string();
            let (view, server) = live::start(
                &args.http,
                live::Access::Open,
                "simulate",
                &algorithm,
                cfg.method.federation.rounds,
            )?;
            let r = simulate::run(&cfg, &view);
            args.http.linger(server);
            let r = r?;
            final_line(&r, &cfg.out);
            Ok(())
        }),
        Command::Bench(args) => {
            edgecfl_shared::malloc::tune();
            bench::run(&args).and_then(|r| {
                println!("{}", serde_json::to_string_pretty(&r)?);
                Ok(())
            })
        }
        Command::Cluster(args) => {
            for (old, new, note) in [
                (
                    "--threshold",
                    "--lambda",
                    "; `auto` is now a run's silhouette cut, the former rule is `gap`",
                ),
                ("--k", "--clusters", ""),
            ] {
                if std::env::args().any(|a| a == old || a.starts_with(&format!("{old}="))) {
                    warn!("{old} is the old name of {new}, kept for one release{note}");
                }
            }
            cluster::run(&args).and_then(|v| {
                println!("{}", serde_json::to_string_pretty(&v)?);
                Ok(())
            })
        }
        Command::Partition(args) => partition::run(&args).and_then(|v| {
            println!("{}", serde_json::to_string_pretty(&v)?);
            Ok(())
        }),
        Command::Export(args) => export::run(&args).map(|e| {
            for (m, p) in e.models.iter().zip(&e.paths) {
                println!(
                    "cluster {}: {} clients, round {}, accuracy {}: {}",
                    m.meta.cluster.unwrap_or_default(),
                    m.meta.members.len(),
                    m.meta.round.unwrap_or_default(),
                    m.meta
                        .accuracy
                        .map_or("n/a".into(), |a| format!("{:.2} %", 100.0 * a)),
                    p.display()
                );
            }
        }),
        Command::Credentials(args) => credentials::generate(&args).map(|m| {
            print!("{}", credentials::instructions(&m, args.port));
        }),
        Command::GenerateConfig => {
            print!("{DEFAULT_CONFIG}");
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}
