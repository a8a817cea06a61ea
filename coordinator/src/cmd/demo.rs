//! `coordinator demo`: the whole system on one machine. Starts the embedded broker, N
//! `edge-client run` processes (each with its shard of the partition) and the coordinator, runs
//! the federation over MQTT, and prints the clusters found against the partition's truth.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use edgecfl_shared::protocol::{BrokerAddr, Encoding};
use tracing::{info, warn};

use crate::broker::BrokerSecurity;
use crate::cmd::credentials::{self, CredentialsArgs, Material};
use crate::cmd::serve::{self, NetFlags, Served};
use crate::config::{RunConfig, RunFlags};

/// The demo's default configuration: a `groups:` partition (4 label groups) over 8 clients,
/// 5 short rounds; a few minutes on 2 cores.
pub const DEMO_CONFIG: &str = include_str!("../../demo-config.toml");

/// Arguments of `coordinator demo`.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Settings (the demo's defaults unless --config is given).
    #[command(flatten)]
    pub run: RunFlags,
    /// Port of the embedded broker (default: a free port).
    #[arg(long)]
    pub port: Option<u16>,
    /// The edge-client binary (default: `edge-client` next to this executable).
    #[arg(long)]
    pub client_bin: Option<PathBuf>,
    /// Seconds each phase waits for the clients.
    #[arg(long, default_value_t = 600.0)]
    pub phase_timeout: f64,
    /// Encoding of client uploads: f32 | f16.
    #[arg(long, default_value = "f32")]
    pub upload: Encoding,
    /// Everything over TLS with a password per client: writes a CA, certificates, passwords and
    /// an ACL to <out>/credentials (`coordinator credentials`), runs the embedded broker behind
    /// its TLS/login/ACL gate, and starts each client with its own credentials.
    #[arg(long)]
    pub secure: bool,
    /// Go on with a demo that was stopped (SIGINT, SIGTERM or a crash) from its checkpoint in
    /// DIR (the stopped demo's `--out`): its settings are the checkpoint's (a run flag given beside
    /// it that differs is refused, naming both values), its edge clients are started again.
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
    /// The live view (`--http`).
    #[command(flatten)]
    pub http: crate::live::HttpArgs,
}

/// Edge-client processes, killed when dropped (so an error never leaves them behind) or when
/// SIGINT/SIGTERM stops the demo ([`crate::interrupt`]). While `watching`, the first of them to
/// fail ends the demo with its error ([`Fleet::watch`]).
struct Fleet {
    children: Arc<Mutex<Vec<Child>>>,
    watching: Arc<AtomicBool>,
    _stop: crate::interrupt::Hook,
}

/// Kills those of `children` still running and reaps them all.
fn stop_all(children: &Mutex<Vec<Child>>) {
    let mut children = children.lock().unwrap_or_else(|e| e.into_inner());
    for c in children.iter_mut() {
        if matches!(c.try_wait(), Ok(None)) {
            let _ = c.kill();
        }
        let _ = c.wait();
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        stop_all(&self.children);
    }
}

impl Fleet {
    fn new(out: &Path) -> Self {
        let children = Arc::new(Mutex::new(Vec::new()));
        let watching = Arc::new(AtomicBool::new(false));
        let stop = {
            let (children, watching) = (children.clone(), watching.clone());
            let out = out.to_path_buf();
            crate::interrupt::on_stop(move |signal| {
                watching.store(false, Ordering::SeqCst);
                stop_all(&children);
                eprintln!(
                    "{signal}: the demo stopped, and its edge clients with it; {}",
                    what_is_left(&out)
                );
            })
        };
        Fleet {
            children,
            watching,
            _stop: stop,
        }
    }

    /// Watches the fleet until [`Fleet::unwatch`]: the first edge client to exit with a failure
    /// (a start-up error: its data, its device, its credentials) has the end of its log printed
    /// and ends the demo (exit status 1) with the rest of the fleet, at once, not when the join
    /// or a phase gives up on it minutes later.
    fn watch(&self, ids: &[String], logs: &Path, out: &Path) {
        self.watching.store(true, Ordering::SeqCst);
        let (children, watching) = (self.children.clone(), self.watching.clone());
        let (ids, logs, out) = (ids.to_vec(), logs.to_path_buf(), out.to_path_buf());
        std::thread::spawn(move || {
            while watching.load(Ordering::SeqCst) {
                let failed = children
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter_mut()
                    .enumerate()
                    .find_map(|(i, c)| match c.try_wait() {
                        Ok(Some(status)) if !status.success() => Some((i, status)),
                        _ => None,
                    });
                if let Some((i, status)) = failed {
                    if !watching.swap(false, Ordering::SeqCst) {
                        return; // the run ended (or a signal stopped it) meanwhile
                    }
                    let id = ids.get(i).map_or("?", String::as_str);
                    let log = logs.join(format!("{id}.log"));
                    let text = std::fs::read_to_string(&log).unwrap_or_default();
                    let lines: Vec<&str> = text.lines().collect();
                    let tail = lines[lines.len().saturating_sub(10)..].join("\n");
                    stop_all(&children);
                    eprintln!(
                        "error: edge client {id} exited ({status}) before the run ended; the end \
                         of its log ({}):\n{tail}\nthe demo stopped, and its edge clients with it; \
                         {}",
                        log.display(),
                        what_is_left(&out)
                    );
                    std::process::exit(1);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
    }

    /// Ends [`Fleet::watch`]: the clients exit now that the run is over.
    fn unwatch(&self) {
        self.watching.store(false, Ordering::SeqCst);
    }

    fn push(&self, child: Child) {
        self.children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(child);
    }

    fn len(&self) -> usize {
        self.children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Waits up to `timeout` for every client to exit by itself.
    fn wait(&mut self, timeout: Duration) -> usize {
        let start = Instant::now();
        loop {
            let mut running = 0;
            for c in self
                .children
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter_mut()
            {
                if matches!(c.try_wait(), Ok(None)) {
                    running += 1;
                }
            }
            if running == 0 || start.elapsed() > timeout {
                return running;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// What a stopped demo leaves in `out`, and how to go on with it.
fn what_is_left(out: &Path) -> String {
    let resume = if out.join(serve::CHECKPOINT_FILE).is_file() {
        format!(
            "; go on with it: coordinator demo --resume {} (models so far: coordinator export {})",
            out.display(),
            out.display()
        )
    } else {
        " (stopped before round 0 ended: nothing to resume)".to_string()
    };
    format!("what it wrote so far is in {}{resume}", out.display())
}

fn client_bin(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let path = match given {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .context("cannot locate the coordinator executable")?
            .with_file_name(format!("edge-client{}", std::env::consts::EXE_SUFFIX)),
    };
    anyhow::ensure!(
        path.is_file(),
        "edge-client binary not found at {} (build the workspace: `cargo build --release`, or pass --client-bin)",
        path.display()
    );
    Ok(path)
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")
        .context("cannot find a free port")?
        .local_addr()?
        .port())
}

/// Runs the demo; returns what `serve` produced.
pub fn run(args: &DemoArgs) -> anyhow::Result<Served> {
    let cfg = match (&args.resume, &args.run.config) {
        // The checkpoint's settings (or, with --config, the file's), as `serve --resume`.
        (Some(dir), _) => serve::resolve(
            &args.run,
            &NetFlags {
                resume: Some(dir.clone()),
                ..NetFlags::default()
            },
        )?,
        (None, Some(_)) => args.run.resolve()?,
        (None, None) => args.run.resolve_from(DEMO_CONFIG, "<demo config>")?,
    };
    serve::check_fleet(&cfg, &NetFlags::default())?;
    // The partition its clients will make, made here first: a spec the clients cannot split
    // (`--clients 3` for 4 label groups) is an error now, not a join that times out.
    serve::Testbed::compute(
        &cfg.partition,
        cfg.method.federation.seed,
        cfg.clients,
        cfg.method.federation.dataset,
        cfg.data.as_deref(),
    )
    .with_context(|| {
        format!(
            "--partition {} over --clients {}",
            cfg.partition, cfg.clients
        )
    })?;
    let bin = client_bin(args.client_bin.as_deref())?;
    let port = match args.port {
        Some(p) => p,
        None => free_port()?,
    };
    let prefix = "edgecfl/demo";
    let ids: Vec<String> = (0..cfg.clients).map(|i| format!("client-{i:03}")).collect();
    let material = if args.secure {
        let m = credentials::generate(&CredentialsArgs {
            out: cfg.out.join("credentials"),
            clients: None,
            ids: ids.clone(),
            lps: Vec::new(),
            prefix: prefix.into(),
            hosts: Vec::new(),
            client_certs: false,
            days: 2,
            port: 8883,
            bind: None,
            force: true,
        })?;
        info!(
            "credentials (CA, broker certificate, a password per client, ACL) in {}",
            m.dir.display()
        );
        Some(m)
    } else {
        None
    };
    let net = NetFlags {
        broker: None,
        port: Some(port),
        listen: [127, 0, 0, 1].into(),
        prefix: prefix.into(),
        run_id: None,
        min_clients: Some(cfg.clients),
        join_timeout: 120.0,
        phase_timeout: args.phase_timeout,
        upload: args.upload,
        lps: serve::LpsMode::Local,
        resume: args.resume.clone(),
        embedded: BrokerSecurity {
            broker_config: material.as_ref().map(|m| m.broker_toml.clone()),
            ..BrokerSecurity::default()
        },
        // Secured, each login holds its own shard (client i, shard i).
        shard_owners: material.as_ref().map(|m| m.shard_owners.clone()),
        ..NetFlags::default()
    };
    let broker = serve::broker_for(&net, &cfg)?;
    // Up before the fleet starts, so the page sees every client join.
    let (view, server) = crate::live::start_served(&args.http, &net, &cfg, "demo")?;
    if let Some(s) = &server {
        println!(
            "live view: {}{}",
            s.url(),
            match &material {
                Some(m) => format!(
                    " (user {}, password in {})",
                    args.http.http_user,
                    m.dir
                        .join("users")
                        .join(format!("{}.password", args.http.http_user))
                        .display()
                ),
                None => String::new(),
            }
        );
    }
    let logs = cfg.out.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;
    let fleet = spawn_fleet(
        &bin,
        &cfg,
        &broker,
        &net.prefix,
        &ids,
        material.as_ref(),
        &logs,
    )?;
    info!(
        "started {} edge-client processes ({}; logs in {})",
        fleet.len(),
        bin.display(),
        logs.display()
    );
    let mut fleet = fleet;
    fleet.watch(&ids, &logs, &cfg.out);
    let served = serve::run(
        &cfg,
        &NetFlags {
            broker: Some(broker.clone()),
            live: view,
            in_demo: true,
            ..net
        },
        &broker,
        None,
    );
    fleet.unwatch();
    let served = served?;
    let left = fleet.wait(Duration::from_secs(10));
    if left > 0 {
        warn!("{left} edge clients did not exit after the run; stopping them");
    }
    drop(fleet);
    print_clusters(&served);
    print_models(&served, &cfg, &ids, &bin);
    args.http.linger(server);
    Ok(served)
}

fn spawn_fleet(
    bin: &Path,
    cfg: &RunConfig,
    broker: &BrokerAddr,
    prefix: &str,
    ids: &[String],
    material: Option<&Material>,
    logs: &Path,
) -> anyhow::Result<Fleet> {
    let fleet = Fleet::new(&cfg.out);
    for (i, id) in ids.iter().enumerate() {
        let log = File::create(logs.join(format!("{id}.log")))
            .with_context(|| format!("cannot create the log of {id}"))?;
        let mut cmd = Command::new(bin);
        cmd.args(["run", "--broker", &broker.to_string(), "--id", id.as_str()])
            .args(["--prefix", prefix])
            .args(["--partition", &cfg.partition.to_string()])
            .args(["--seed", &cfg.method.federation.seed.to_string()])
            .args(["--index", &i.to_string(), "--of", &cfg.clients.to_string()])
            .args(["--device", &cfg.backend.to_string()])
            .args(["--dataset", &cfg.method.federation.dataset.to_string()])
            .arg("--model-out")
            .arg(device_model(&cfg.out, id))
            .env_remove("EDGECFL_PASSWORD")
            .env_remove("EDGECFL_MODEL_OUT")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some(d) = &cfg.data {
            cmd.arg("--data").arg(d);
        }
        if let Some(m) = material {
            let user = m
                .user(id)
                .with_context(|| format!("no credentials for {id}"))?;
            cmd.arg("--ca")
                .arg(&m.ca)
                .arg("--password-file")
                .arg(&user.password_file);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        fleet.push(child);
    }
    Ok(fleet)
}

/// Where demo device `id` keeps its final model: `<out>/devices/<id>/model.safetensors`.
pub fn device_model(out: &Path, id: &str) -> PathBuf {
    out.join("devices").join(id).join("model.safetensors")
}

/// Prints where each device's model went (checked on disk), and how to use one: a `predict`
/// command that runs as printed (`bin`, the edge client the demo started, by its full path).
fn print_models(served: &Served, cfg: &RunConfig, ids: &[String], bin: &Path) {
    let r = &served.result;
    println!("models kept by the devices:");
    let mut first = None;
    for (c, k) in r.clients.iter().zip(&r.assignment) {
        let path = device_model(&cfg.out, &c.id);
        if path.is_file() {
            println!("  {} (cluster {k}): {}", c.id, path.display());
            // Its shard: the demo starts client i with shard i.
            if let Some(shard) = ids.iter().position(|i| *i == c.id) {
                first.get_or_insert((shard, path));
            }
        } else {
            println!("  {} (cluster {k}): none (see its log)", c.id);
        }
    }
    if let Some((index, path)) = first {
        let data = cfg
            .data
            .as_ref()
            .map_or(String::new(), |d| format!(" --data {}", d.display()));
        println!(
            "try: {} predict --model {} --partition {} --seed {} --index {index} --of {}{data}",
            std::path::absolute(bin)
                .unwrap_or_else(|_| bin.to_owned())
                .display(),
            path.display(),
            cfg.partition,
            cfg.method.federation.seed,
            cfg.clients
        );
    }
}

/// Prints each cluster's members with their ground-truth group.
fn print_clusters(served: &Served) {
    let r = &served.result;
    let truth = &served.truth;
    println!(
        "\n{} clusters found{}",
        r.n_clusters,
        match (truth, r.ari) {
            (Some(t), Some(ari)) => format!(
                " (truth: {} groups; adjusted Rand index {ari:.3})",
                t.iter().max().map_or(0, |m| m + 1)
            ),
            _ => String::new(),
        }
    );
    for c in 0..r.n_clusters {
        let members: Vec<String> = (0..r.assignment.len())
            .filter(|&i| r.assignment[i] == c)
            .map(
                |i| match truth.as_ref().and_then(|t| t.get(r.clients[i].index)) {
                    Some(g) => format!("{} (group {g})", r.clients[i].id),
                    None => r.clients[i].id.clone(),
                },
            )
            .collect();
        println!("  cluster {c}: {}", members.join(", "));
    }
    println!("accuracy per round (mean local test accuracy):");
    for rec in &r.rounds {
        if let Some(a) = rec.accuracy {
            println!("  round {:>3}: {:6.2} %", rec.round, 100.0 * a);
        }
    }
    println!("results: {}", served.out.display());
    for p in &served.plots {
        println!("plot:    {}", p.display());
    }
}
