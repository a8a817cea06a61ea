//! `coordinator serve`: the federation over MQTT. Edge clients announce themselves on the broker;
//! the coordinator runs the same round loop as `simulate` ([`federation::run`]) over an
//! [`MqttPool`], whose calls are the awaiting phases of [`crate::rounds`].
//!
//! | module | what it holds |
//! | --- | --- |
//! | `pool` | [`MqttPool`] and the counts `summary.json` reports ([`WireStats`], [`Dropout`]) |
//! | `join` | joining: ping-checked candidates, an LPS's fixed cluster, messages from outside the run |
//! | `exchange` | one awaiting phase: jobs out, answers in; dropouts, reconnects, newcomers |
//! | `resume` | `checkpoint.json` and the rejoin of `serve --resume` |

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::Args;
use edgecfl_shared::algorithms;
use edgecfl_shared::federation::{self, Observer, RunContext, RunResult};
use edgecfl_shared::mqtt::{Link, LinkOptions, Security, SecurityArgs, fleet_backlog};
use edgecfl_shared::protocol::{self, BrokerAddr, Encoding, Topics, upload_limit};
use serde_json::json;
use tracing::{error, info};

use crate::broker::{self, BrokerSecurity};
use crate::config::RunConfig;
use crate::plots;
use crate::report::{self, Progress};
use gps::{Gps, GpsPlan, GpsReport, SavedGps};

/// Network settings of `serve` and `demo`.
#[derive(Debug, Clone, Args)]
pub struct NetFlags {
    /// External broker, mqtt://HOST:PORT or mqtts://HOST:PORT (TLS). Without it the coordinator
    /// starts its embedded broker.
    #[arg(long)]
    pub broker: Option<BrokerAddr>,
    /// Port of the embedded broker (default 1883, or 8883 with TLS).
    #[arg(long)]
    pub port: Option<u16>,
    /// Address the embedded broker listens on.
    #[arg(long, default_value = "0.0.0.0")]
    pub listen: IpAddr,
    /// Topic prefix (fleet), e.g. edgecfl/lab1.
    #[arg(long, default_value = Topics::DEFAULT_PREFIX)]
    pub prefix: String,
    /// Run id carried by every message (default: from the clock).
    #[arg(long)]
    pub run_id: Option<String>,
    /// Clients to wait for before round 0, 2 to `--clients` (default: `clients` of the
    /// config). With `--resume`: the clients of the checkpoint that must answer within
    /// `--join-timeout` for the run to go on (default 1); fewer, and it stops with an error, the
    /// checkpoint unchanged.
    #[arg(long)]
    pub min_clients: Option<usize>,
    /// Seconds to wait for clients to join (a client joins once it answers the coordinator's
    /// ping, so a stale or forged retained Hello never takes a slot); after it the run starts
    /// with those that joined (≥ 2), or fails and tells them to finish.
    #[arg(long, default_value_t = 300.0)]
    pub join_timeout: f64,
    /// Seconds each phase (signatures, training, evaluation) waits for answers.
    #[arg(long, default_value_t = 600.0)]
    pub phase_timeout: f64,
    /// Encoding of client uploads: f32 | f16 (half the bytes).
    #[arg(long, default_value = "f32")]
    pub upload: Encoding,
    /// Where the LPSs of a hierarchical run train their clusters: local (in this process) |
    /// remote (`coordinator lps` processes on the same broker; this process is the GPS).
    #[arg(long, default_value = "local")]
    pub lps: LpsMode,
    /// This coordinator's TLS settings and login at an external broker (username default
    /// `coordinator`).
    #[command(flatten)]
    pub login: SecurityArgs,
    /// The embedded broker's TLS, password file and ACL.
    #[command(flatten)]
    pub embedded: BrokerSecurity,
    /// Resume the run checkpointed in DIR (its `checkpoint.json`, written after every round
    /// into `--out`), e.g. after a crash: same run id, same clients, same clusters and models;
    /// the run goes on after its last completed round, with the settings it was started with
    /// (results into DIR); a run flag given beside it must equal the checkpoint's (a differing
    /// one is named, and nothing starts). `serve` only. With `--lps remote` the GPS goes on after its last
    /// GPS round (`gps-checkpoint.json`); its LPS processes must still be running.
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
    /// The live view this run feeds (`--http`, [`crate::live`]); off by default.
    #[arg(skip)]
    pub live: crate::live::Live,
    /// A run of `demo`, which says itself what a stop leaves (its own stop hook).
    #[arg(skip)]
    pub in_demo: bool,
    /// A client's declared training count is capped at K times the median count of the clients
    /// that joined (0: no cap): its updates are kept, weighing as the cap, so that no client can
    /// claim most of the fleet's data. In testbed mode (clients holding shards of one partition)
    /// the shards' sizes, computed from the partition and this process's copy of the labels
    /// (`--data`), bound the counts instead, exactly.
    #[arg(long, value_name = "K", default_value_t = 10)]
    pub sample_cap: u64,
    /// Testbed mode: who holds each shard. Line i of FILE names the client whose shard index is
    /// i (`coordinator credentials` writes it as `shard-owners.txt`, its ids in the order
    /// given); a `Hello` claiming another client's shard is refused, so a forged claim never
    /// keeps the owner out. Without it the first client to claim a shard holds it.
    #[arg(long, value_name = "FILE")]
    pub shard_owners: Option<PathBuf>,
}

/// Where the local parameter servers of a hierarchical run live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LpsMode {
    /// Every cluster trains in the coordinator's round loop ([`federation::run`]).
    #[default]
    Local,
    /// Every cluster trains in a `coordinator lps` process; the coordinator is the GPS
    /// ([`crate::cmd::serve::gps`]).
    Remote,
}

impl std::str::FromStr for LpsMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "local" => Ok(LpsMode::Local),
            "remote" => Ok(LpsMode::Remote),
            _ => Err(format!("unknown LPS mode {s:?} (expected local or remote)")),
        }
    }
}

impl std::fmt::Display for LpsMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LpsMode::Local => "local",
            LpsMode::Remote => "remote",
        })
    }
}

impl Default for NetFlags {
    fn default() -> Self {
        NetFlags {
            broker: None,
            port: None,
            listen: [0, 0, 0, 0].into(),
            prefix: Topics::DEFAULT_PREFIX.into(),
            run_id: None,
            min_clients: None,
            join_timeout: 300.0,
            phase_timeout: 600.0,
            upload: Encoding::F32,
            lps: LpsMode::Local,
            login: SecurityArgs::default(),
            embedded: BrokerSecurity::default(),
            resume: None,
            live: crate::live::Live::default(),
            in_demo: false,
            sample_cap: 10,
            shard_owners: None,
        }
    }
}

impl NetFlags {
    /// Where and how this process's links reach `broker`: the loopback door of an embedded
    /// broker it started with security on, or `broker` itself with `--ca`/`--cert`/`--username`/
    /// `--password-file` (default username `coordinator`).
    pub fn link_to(&self, broker: &BrokerAddr) -> anyhow::Result<(BrokerAddr, Security)> {
        if let Some(door) = broker::local_login(broker) {
            return Ok(door);
        }
        Ok((broker.clone(), self.login.resolve("coordinator")?))
    }
}

mod exchange;
pub mod gps;
mod join;
mod pool;
mod resume;
mod testbed;
pub use testbed::Testbed;

pub use pool::{DropReason, Dropout, MqttPool, WireStats};
pub use resume::CHECKPOINT_FILE;
use resume::{CheckpointTo, read_checkpoint};

/// The clients that dropped out at least once (gone or timed out), each with the round and
/// phase it first did and how: `summary.json`'s `dropped_clients`.
fn dropped_clients(dropouts: &[Dropout]) -> serde_json::Value {
    let mut first: BTreeMap<&str, &Dropout> = BTreeMap::new();
    for d in dropouts {
        if matches!(d.reason, DropReason::Gone | DropReason::Timeout) {
            first.entry(d.id.as_str()).or_insert(d);
        }
    }
    first
        .into_iter()
        .map(|(id, d)| {
            (
                id.to_string(),
                json!({"round": d.round, "phase": d.phase, "reason": d.reason}),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// A default run id: seconds since the epoch, in base 36.
fn clock_run_id() -> String {
    let mut n = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut s = Vec::new();
    while n > 0 {
        s.push(b"0123456789abcdefghijklmnopqrstuvwxyz"[(n % 36) as usize]);
        n /= 36;
    }
    s.reverse();
    format!("run-{}", String::from_utf8_lossy(&s))
}

/// The broker to use: the external one, or the embedded one started now, its memory and message
/// sizes bounded for `cfg`'s fleet ([`broker::Limits`]).
pub fn broker_for(net: &NetFlags, cfg: &RunConfig) -> anyhow::Result<BrokerAddr> {
    Ok(match &net.broker {
        Some(b) => {
            anyhow::ensure!(
                !net.embedded.is_on(),
                "--tls-cert/--broker-passwd/--broker-acl/--broker-config configure the embedded broker; with --broker they have no effect (configure that broker instead)"
            );
            b.clone()
        }
        None => {
            let security = net.embedded.resolved()?;
            let port = net.port.unwrap_or(if security.tls() {
                BrokerAddr::MQTTS_PORT
            } else {
                BrokerAddr::MQTT_PORT
            });
            let clients = cfg.clients + cfg.newcomers;
            let upload = upload_limit(cfg.method.largest_upload_floats(clients));
            let limits = broker::Limits::fleet(&Topics::new(&net.prefix)?, clients, upload);
            let addr = broker::start(net.listen, port, &security, &limits)?;
            info!(
                "embedded broker (rumqttd) listening on {}:{port}{}",
                net.listen,
                match (
                    security.tls(),
                    security.broker_passwd.is_some(),
                    security.broker_acl.is_some()
                ) {
                    (false, false, false) => " (plain MQTT, anonymous, no ACL)".to_string(),
                    (tls, pw, acl) => format!(
                        " ({}, {}, {})",
                        if tls { "TLS" } else { "plain MQTT" },
                        if pw { "logins checked" } else { "anonymous" },
                        if acl { "ACL enforced" } else { "no ACL" }
                    ),
                }
            );
            addr
        }
    })
}

/// What `serve` produced.
pub struct Served {
    /// The round loop's result.
    pub result: RunResult,
    /// Where the files went.
    pub out: PathBuf,
    /// Plots written.
    pub plots: Vec<PathBuf>,
    /// Ground-truth group per client, when the clients' shards have one.
    pub truth: Option<Vec<usize>>,
    /// What the GPS did, with remote LPSs (`--lps remote`).
    pub gps: Option<GpsReport>,
}

/// Runs the federation over the broker at `broker` and writes the result files into
/// `cfg.out`; `net.live` (off unless `--http`) follows it.
pub fn run(
    cfg: &RunConfig,
    net: &NetFlags,
    broker: &BrokerAddr,
    observer: Option<&mut dyn Observer>,
) -> anyhow::Result<Served> {
    let out = cfg.out.clone();
    let _stop = (!net.in_demo)
        .then(|| crate::interrupt::on_stop(move |signal| eprintln!("{}", paused(signal, &out))));
    let served = run_inner(cfg, net, broker, observer);
    net.live.finished(&served);
    served
}

/// The configuration `serve` runs: `run`'s flags over the configuration file (or the default);
/// with `--resume DIR` and no `--config`, over the checkpoint's own configuration instead, so that
/// `serve --resume DIR` alone goes on with the run as it was started (its settings, its clients,
/// its results in `DIR`), and a flag given beside it that differs from the checkpoint is named,
/// with both values, by the comparison that runs before anything connects.
///
/// # Errors
///
/// The checkpoint does not read, or the flags do not make a valid configuration.
pub fn resolve(run: &crate::config::RunFlags, net: &NetFlags) -> anyhow::Result<RunConfig> {
    let cfg = match (&net.resume, &run.config) {
        (Some(dir), None) => match read_checkpoint(dir)?
            .config(dir)
            .with_context(|| format!("--resume {}", dir.display()))?
        {
            Some(base) => run.resolve_over(base)?,
            // A checkpoint of an older version: the flags given, compared with it as before.
            None => run.resolve()?,
        },
        _ => run.resolve()?,
    };
    check_fleet(&cfg, net)?;
    Ok(cfg)
}

/// A served run starts once at least `join::MIN_JOINED` (2) clients have joined, so a
/// configuration of fewer, or a fresh run's `--min-clients` outside `2..=clients`, is refused
/// before anything starts, not after `--join-timeout`.
///
/// # Errors
///
/// The rule above, naming the flag.
pub fn check_fleet(cfg: &RunConfig, net: &NetFlags) -> anyhow::Result<()> {
    let least = join::MIN_JOINED;
    anyhow::ensure!(
        cfg.clients >= least,
        "--clients {}: a served run needs at least {least} clients (it starts once {least} have \
         joined)",
        cfg.clients
    );
    if let (None, Some(m)) = (&net.resume, net.min_clients) {
        anyhow::ensure!(
            (least..=cfg.clients).contains(&m),
            "--min-clients {m}: must be between {least} and --clients ({})",
            cfg.clients
        );
    }
    Ok(())
}

/// What `serve` says when SIGINT or SIGTERM stops it: where the run stands on disk and the
/// commands that go on with it (resume) or take its models so far (export).
fn paused(signal: &str, out: &std::path::Path) -> String {
    let file = out.join(CHECKPOINT_FILE);
    let round = std::fs::read_to_string(&file)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["federation"]["round"].as_u64());
    match round {
        Some(round) => format!(
            "{signal}: stopped; the run is paused after round {round}, its checkpoint in {}. Its \
             clients wait for it (none was told to finish).\n{}",
            file.display(),
            resume_commands(out)
        ),
        None => format!(
            "{signal}: stopped before round 0 ended: nothing to resume (no {}); its clients wait \
             for a new run",
            file.display()
        ),
    }
}

/// The commands that go on with the run checkpointed in `out`, and that take its models so far.
fn resume_commands(out: &std::path::Path) -> String {
    format!(
        "  resume:         coordinator serve --resume {} (its settings are the checkpoint's; \
         give the broker and login flags it was started with)\n  \
         models so far:  coordinator export {}",
        out.display(),
        out.display()
    )
}

fn run_inner(
    cfg: &RunConfig,
    net: &NetFlags,
    broker: &BrokerAddr,
    observer: Option<&mut dyn Observer>,
) -> anyhow::Result<Served> {
    let topics = Topics::new(&net.prefix).context("bad --prefix")?;
    let saved = match &net.resume {
        Some(dir) => Some(read_checkpoint(dir)?),
        None => None,
    };
    // The configuration the round loop runs (remote LPSs: this process does round 0 only),
    // compared with a checkpoint's before anything is sent: a flag that differs is named, and
    // no client hears of it.
    let mut federation_cfg = cfg.method.clone();
    if net.lps == LpsMode::Remote {
        federation_cfg.federation.rounds = 0;
    }
    if let (Some(saved), Some(dir)) = (&saved, &net.resume) {
        federation_cfg
            .check_resumes(&saved.federation.config)
            .with_context(|| format!("--resume {}", dir.display()))?;
    }
    // A resumed GPS: where its GPS rounds stand (none yet: it had not assigned the clusters).
    let saved_gps = match (&net.resume, net.lps) {
        (Some(dir), LpsMode::Remote) => SavedGps::read(dir)?,
        _ => None,
    };
    let run = match &saved {
        Some(s) => {
            let id = s.serve.run_id.clone();
            if let Some(asked) = &net.run_id {
                anyhow::ensure!(
                    asked.as_str() == id.as_str(),
                    "--run-id {asked} but the checkpoint is of run {}",
                    id.as_str()
                );
            }
            id
        }
        None => protocol::id(&net.run_id.clone().unwrap_or_else(clock_run_id))
            .context("bad --run-id")?,
    };
    let (link_addr, security) = net.link_to(broker)?;
    // With remote LPSs this process is the GPS. It listens to the LPSs from the start, so their
    // announcements wait for it while round 0 runs.
    let gps_link = match net.lps {
        LpsMode::Local => None,
        LpsMode::Remote => {
            anyhow::ensure!(
                cfg.method.hierarchical(),
                "--lps remote needs a hierarchical run (--hierarchy, or --algorithm mthfl)"
            );
            // The LPS processes score their clients in the labels view (their assignment does
            // not carry a view).
            anyhow::ensure!(
                cfg.method.federation.local_test.is_labels(),
                "--lps remote reports the labels view only (drop --local-test {})",
                cfg.method.federation.local_test
            );
            let link = Link::start(LinkOptions {
                subscribe: Gps::subscriptions(&topics),
                security: security.clone(),
                max_unread_bytes: Some(fleet_backlog(cfg.clients + cfg.newcomers)),
                ..LinkOptions::new(link_addr.clone(), format!("gps-{}", run.as_str()))
            })?;
            link.wait_connected(&link_addr, Duration::from_secs(30))?;
            Some(link)
        }
    };
    let link = Link::start(LinkOptions {
        subscribe: vec![topics.all_status(), topics.all_up()],
        security,
        max_unread_bytes: Some(fleet_backlog(cfg.clients + cfg.newcomers)),
        ..LinkOptions::new(link_addr.clone(), format!("coordinator-{}", run.as_str()))
    })?;
    link.wait_connected(&link_addr, Duration::from_secs(30))?;
    info!("connected to {broker}; run {}", run.as_str());
    net.live.run_id(run.as_str());
    let min_clients = net.min_clients.unwrap_or(cfg.clients);
    let (mut pool, resume) = match saved {
        Some(saved) => {
            let round0 = saved.serve.round0;
            let mut pool = match net.lps {
                LpsMode::Local => MqttPool::rejoin(link, topics.clone(), net, saved.serve)?,
                // Round 0 is all this pool did; its clients now serve their LPSs.
                LpsMode::Remote => MqttPool::restore(link, topics.clone(), net, saved.serve),
            };
            pool.checkpoint = Some(CheckpointTo::new(cfg, round0)?);
            (pool, Some((saved.federation, round0)))
        }
        None => {
            let mut pool = MqttPool::join(link, topics.clone(), run.clone(), net, min_clients)?;
            pool.checkpoint = Some(CheckpointTo::new(cfg, pool.members.len())?);
            (pool, None)
        }
    };
    pool.vouch(
        net.sample_cap,
        cfg.method.federation.dataset,
        cfg.data.as_deref(),
    );
    let round0 = resume.as_ref().map_or(pool.members.len(), |r| r.1);
    net.live
        .fleet(&federation::ClientPool::clients(&pool)[..round0.min(pool.members.len())]);
    // The ground truth of the round-0 clients (newcomers' is added at the end).
    let truth = pool.truth().map(|t| t[..round0.min(t.len())].to_vec());
    let mut cfg = cfg.clone();
    cfg.clients = round0;
    let data = match pool.partition() {
        Some((spec, seed)) => {
            cfg.partition = spec;
            format!("edge clients' shards of {} (seed {seed})", cfg.partition)
        }
        None => "edge clients' own data".to_string(),
    };
    let mut progress = Progress::new(cfg.method.federation.rounds);
    let ctx = RunContext {
        truth: truth.clone(),
        task_labels: pool.partition().and_then(|(spec, _)| spec.task_labels()),
        backend: cfg.backend,
    };
    let mut result = match algorithms::run_resumable(
        &federation_cfg,
        &mut pool,
        &ctx,
        &mut net.live.observer(observer.unwrap_or(&mut progress)),
        resume.map(|r| r.0),
    ) {
        Ok(r) => r,
        Err(e @ federation::FederationError::NoAnswers { .. }) => {
            // Resumable: the clients that come back can go on with it.
            error!(
                "{e}; the checkpoint in {} is of the round before; once the clients are back:\n{}",
                cfg.out.display(),
                resume_commands(&cfg.out)
            );
            return Err(e.into());
        }
        Err(e) => {
            // Any other failed run tells its fleet to finish.
            error!("the run failed ({e}); telling its clients to finish");
            pool.finish(&BTreeMap::new());
            return Err(e.into());
        }
    };
    progress.finish();
    // Newcomers' shards tell their ground-truth groups too.
    let truth = pool.truth().or(truth);
    if let Some(t) = &truth {
        result.score_newcomers(t);
    }
    let mut extra = json!({
        "run_id": run.as_str(),
        // The run's clients, in the order of the per-client arrays (round-0 clients left out
        // and newcomers turned away are not among them).
        "client_ids": result.clients.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        "broker": broker.to_string(),
        "upload_encoding": net.upload.to_string(),
        "rejected": pool.tally,
        "rejected_total": pool.tally.total(),
        "rejected_per_client": pool.per_client,
        "phase_timeouts": pool.timeouts,
        "dropouts": pool.dropouts,
        "dropped_clients": dropped_clients(&pool.dropouts),
        "wire_bytes": pool.wire,
    });
    // The GPS holds the round-0 models only: each remote LPS writes and sends its trained one.
    let models = gps_link.is_none().then(|| {
        crate::cmd::export::of_result(&result, Some(run.as_str()), cfg.method.federation.dataset)
    });
    let gps = match gps_link {
        None => {
            let models = models.as_deref().unwrap_or_default();
            pool.finish(&crate::cmd::export::final_messages(&run, &result, models));
            None
        }
        Some(link) => {
            let plan = GpsPlan {
                topics,
                run: run.clone(),
                federation: cfg.method.federation.clone(),
                assignment: result.assignment.clone(),
                clients: {
                    let ids = pool.client_ids();
                    result
                        .clients
                        .iter()
                        .map(|c| ids[c.index].clone())
                        .collect()
                },
                samples: result.clients.iter().map(|c| c.samples).collect(),
                upload: net.upload,
                join_timeout: Duration::from_secs_f64(net.join_timeout),
                phase_timeout: Duration::from_secs_f64(net.phase_timeout),
                out: cfg.out.clone(),
            };
            // The clients now serve their LPSs; the GPS hears nothing of that traffic.
            pool.close();
            let gps = Gps::new(link, plan);
            let report = match saved_gps {
                Some(saved) => gps.resume(saved),
                None => gps,
            }
            .run()?;
            result.gps_rounds = report.gps_rounds;
            if let serde_json::Value::Object(map) = &mut extra {
                map.insert("lps".into(), json!("remote"));
                map.insert("gps".into(), serde_json::to_value(&report)?);
                map.insert("final_accuracy".into(), json!(report.final_accuracy));
            }
            Some(report)
        }
    };
    report::write_all(&cfg.out, &cfg, &result, &data, Some(extra))?;
    if let Some(models) = &models {
        crate::cmd::export::write_run(&cfg.out, models)?;
    }
    let plots = plots::write_all(&cfg.out, &result)?;
    Ok(Served {
        result,
        out: cfg.out.clone(),
        plots,
        truth,
        gps,
    })
}
