//! `edge-client run`: the client of a federation over MQTT.
//!
//! The client connects, announces itself (retained `Hello` on its status topic, with a retained
//! `Gone` as last will), answers the coordinator's `Ping` with `Pong` at once, and answers the coordinator's commands on its `down` topic one at a time:
//! warm-up training and upload of the signature layers (round 0), local training of its cluster's
//! model and upload of the update, evaluation on its local test set. The MQTT event loop runs on
//! its own thread ([`Link`]), so keepalives go on while this thread trains; after the broker drops,
//! the link reconnects and the client announces itself again.
//!
//! MT-HFL's round 0 takes two jobs. `GramSignature`: form the Gram matrix of the training data,
//! upload its leading eigenpairs, and keep the exact ones (before upload rounding) and the Gram
//! matrix for the next job. `Relevance`: once the relay of the same run and round has arrived on
//! the broadcast topic (before or after the job; see [`protocol`]), compute the row `r(i, ·)`
//! against it with the exact Gram matrix ([`spectral::client_row`]) and upload it.

use edgecfl_shared::cluster::spectral;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use edgecfl_shared::client::ClientData;
use edgecfl_shared::cluster::spectral::{Gram, Signature};
use edgecfl_shared::jobs;
use edgecfl_shared::model_file::{self, ModelMeta};
use edgecfl_shared::mqtt::{Inbound, Link, LinkOptions, SecurityArgs, retry_note};
use edgecfl_shared::protocol::{
    self, BrokerAddr, Eigenpairs, Encoding, Envelope, Estimate, FinalModel, Hello, Id, Tensor,
    ToClient, ToCoordinator, Topics,
};
use edgecfl_shared::train::{Backend, Device, MAX_TRAIN_THREADS};

use crate::shard::{Shard, ShardArgs};
use tracing::{debug, info, warn};

/// Arguments of `edge-client run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Broker, mqtt://HOST:PORT or mqtts://HOST:PORT (TLS; see --ca).
    #[arg(long, env = "EDGECFL_BROKER")]
    pub broker: BrokerAddr,
    /// This client's id (1-32 of A-Z a-z 0-9 - _ .), unique in the fleet.
    #[arg(long, env = "EDGECFL_CLIENT_ID")]
    pub id: String,
    /// Topic prefix (fleet), as given to the coordinator.
    #[arg(long, env = "EDGECFL_PREFIX", default_value = Topics::DEFAULT_PREFIX)]
    pub prefix: String,
    /// Data of this client.
    #[command(flatten)]
    pub shard: ShardArgs,
    /// Where training runs: cpu (= flex) | ndarray | vulkan[:N|:igpu[:N]|:cpu] | tch[:cpu|:cuda[:N]]
    /// | cuda[:N]. All but cpu need the cargo feature of the same name (`--backend` is an alias).
    #[arg(
        long = "device",
        visible_alias = "backend",
        value_name = "DEVICE",
        default_value = "cpu"
    )]
    pub backend: Backend,
    /// Threads one training step's batch is split over (each computes the gradient of a part;
    /// see BENCHMARKS.md §3). 1 gives the same floats as `coordinator simulate`; more give the
    /// same training up to float rounding, faster on a multi-core board.
    #[arg(long, default_value_t = 1, env = "EDGECFL_THREADS",
          value_parser = clap::value_parser!(u16).range(1..=MAX_TRAIN_THREADS as i64))]
    pub threads: u16,
    /// MQTT keepalive in seconds.
    #[arg(long, default_value_t = 30)]
    pub keepalive: u64,
    /// Stay connected after the coordinator finishes a run (wait for the next one).
    #[arg(long)]
    pub stay: bool,
    /// Give up (exit with an error) after this many consecutive failed connection attempts;
    /// 0: retry forever. Attempts back off from 1 s to 15 s.
    #[arg(long, default_value_t = 0, env = "EDGECFL_CONNECT_RETRIES")]
    pub connect_retries: u32,
    /// Serve only this run id (default: the run of the first command received; commands of
    /// any other run are ignored until that run finishes).
    #[arg(long)]
    pub run_id: Option<String>,
    /// Where to keep the final model of this client's cluster, sent by the coordinator at the end
    /// of the run (safetensors, written atomically; `edge-client predict --model FILE` uses it).
    /// Default: $XDG_DATA_HOME/edgecfl/<ID>/model.safetensors (~/.local/share/edgecfl/<ID>/…).
    #[arg(long, value_name = "FILE", env = "EDGECFL_MODEL_OUT")]
    pub model_out: Option<PathBuf>,
    /// TLS settings and login (username default: the --id).
    #[command(flatten)]
    pub login: SecurityArgs,
}

impl RunArgs {
    /// Where the final model goes: `--model-out`, else the user's data directory
    /// (`$XDG_DATA_HOME`, else `~/.local/share`, else the working directory) under
    /// `edgecfl/<id>/model.safetensors`.
    pub fn model_path(&self) -> PathBuf {
        if let Some(p) = &self.model_out {
            return p.clone();
        }
        let env = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let base = env("XDG_DATA_HOME")
            .or_else(|| env("HOME").map(|h| h.join(".local").join("share")))
            .unwrap_or_default();
        base.join("edgecfl")
            .join(&self.id)
            .join("model.safetensors")
    }
}

/// What a client did in a run.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Served {
    /// Jobs done.
    pub jobs: u64,
    /// Jobs that failed (reported to the coordinator).
    pub failed: u64,
    /// Commands ignored (undecodable, wrong version, another run's).
    pub ignored: u64,
    /// Payload bytes uploaded.
    pub bytes_up: u64,
    /// Payload bytes received.
    pub bytes_down: u64,
    /// Commands dropped unread because a newer one on the same topic replaced them (the link
    /// keeps at most one pending command per subscribed topic).
    pub dropped: u64,
    /// The final model this client kept (the last one, if several runs ended while it ran).
    pub model: Option<Kept>,
}

/// A final model a client kept.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Kept {
    /// Where it was written.
    pub path: PathBuf,
    /// The run it ended.
    pub run: String,
    /// Its cluster in that run.
    pub cluster: u32,
}

/// Connects and serves until the coordinator says the run is finished (or forever with
/// `--stay`).
pub fn run(args: &RunArgs) -> anyhow::Result<Served> {
    run_with(args, &mut |_| {})
}

/// [`run`], with `outgoing` applied to every message this client is about to send (its `Hello`
/// and each answer) before encoding: the seam a modified client uses. The system tests run their
/// attackers through it (`tests/attack_system.rs`): what a fleet member can send by changing its
/// own client, within its own topics and credentials.
pub fn run_with(
    args: &RunArgs,
    outgoing: &mut dyn FnMut(&mut ToCoordinator),
) -> anyhow::Result<Served> {
    let id = protocol::id(&args.id).context("bad --id")?;
    let topics = Topics::new(&args.prefix).context("bad --prefix")?;
    let shard = args.shard.load()?;
    anyhow::ensure!(
        !shard.train.is_empty(),
        "this client has no training sample"
    );
    let device = args.backend.device()?;
    info!(
        "{}: {} training / {} test samples ({}), device {}",
        id.as_str(),
        shard.train.len(),
        shard.test.len(),
        shard.source,
        args.backend
    );
    let mut hello = ToCoordinator::Hello(Hello {
        samples: shard.train.len() as u64,
        test_samples: shard.test.len() as u64,
        backend: protocol::text(&args.backend.to_string()),
        shard: shard.info.clone(),
    });
    outgoing(&mut hello);
    let hello = Envelope::new(Id::new(), 0, hello).to_bytes();
    let gone = Envelope::new(Id::new(), 0, ToCoordinator::Gone).to_bytes();
    let pinned_run = match &args.run_id {
        Some(r) => Some(protocol::id(r).context("bad --run-id")?),
        None => None,
    };
    let link = Link::start(LinkOptions {
        subscribe: vec![topics.down(&id), topics.broadcast()],
        last_will: Some((topics.status(&id), gone.clone())),
        keep_alive: Duration::from_secs(args.keepalive.max(5)),
        security: args.login.resolve(id.as_str())?,
        // At most one pending command per topic (down and broadcast): a flood while this client
        // trains replaces the queued command instead of growing the process.
        latest_per_topic: true,
        ..LinkOptions::new(args.broker.clone(), id.as_str())
    })?;
    info!("{}: connecting to {}", id.as_str(), args.broker);
    let mut served = Served::default();
    let mut worker = Worker {
        shard: &shard,
        device: &device,
        threads: usize::from(args.threads),
        own: None,
        relay: None,
        waiting: None,
    };
    let broadcast = topics.broadcast();
    let mut connected = false;
    // The run this client serves: pinned, or the first command's (see --run-id).
    let mut current_run = pinned_run.clone();
    // The final model of the run this client served, when it could not be written.
    let mut lost_model: Option<anyhow::Error> = None;
    while let Some(ev) = link.recv() {
        let dropped = link.dropped();
        if dropped > served.dropped {
            warn!(
                "{}: dropped {} unread command(s) replaced by newer ones on the same topic ({dropped} in all)",
                id.as_str(),
                dropped - served.dropped
            );
            served.dropped = dropped;
        }
        match ev {
            Inbound::Connected => {
                info!("{}: connected to {}", id.as_str(), args.broker);
                connected = true;
                link.publish(&topics.status(&id), hello.clone(), true)?;
            }
            Inbound::Disconnected(e) => {
                if let Some(reason) = link.refused() {
                    anyhow::bail!(
                        "{}: the broker at {} refused this client: {reason}",
                        id.as_str(),
                        args.broker
                    );
                }
                let failures = link.failures();
                let give_up = args.connect_retries > 0 && failures >= args.connect_retries;
                let next = match link.next_attempt() {
                    Some(at) if !give_up => retry_note(at),
                    _ => String::new(),
                };
                if connected {
                    warn!("{}: lost the broker ({e}); reconnecting{next}", id.as_str());
                } else {
                    warn!(
                        "{}: connection attempt {failures} to {} failed: {e}{next}",
                        id.as_str(),
                        args.broker
                    );
                }
                connected = false;
                if give_up {
                    anyhow::bail!(
                        "{}: gave up after {failures} failed connection attempts to {} (--connect-retries {}); last error: {e}",
                        id.as_str(),
                        args.broker,
                        args.connect_retries
                    );
                }
            }
            Inbound::Message { topic, payload, .. } => {
                served.bytes_down += payload.len() as u64;
                let env = match Envelope::<ToClient>::from_bytes(&payload) {
                    Ok(env) => env,
                    Err(e) => {
                        warn!("{}: ignored a command: {e}", id.as_str());
                        served.ignored += 1;
                        continue;
                    }
                };
                debug!(
                    "{}: {} bytes on {topic} (run {}, round {})",
                    id.as_str(),
                    payload.len(),
                    env.run.as_str(),
                    env.round
                );
                // The end of a run with this client's model: of the run it serves, it is that
                // run's `Finish`; of an earlier run (retained on the broker, this client missed
                // its end), it is kept and fixes no run; of another run while serving one, it is
                // stale.
                if let ToClient::FinalModel(m) = &env.body {
                    let ends_current = current_run.as_ref() == Some(&env.run);
                    if current_run.is_some() && !ends_current {
                        debug!(
                            "{}: ignored the final model of run {} (serving run {})",
                            id.as_str(),
                            env.run.as_str(),
                            current_run.as_ref().map_or("", |r| r.as_str())
                        );
                        continue;
                    }
                    if served
                        .model
                        .as_ref()
                        .is_some_and(|k| k.run == env.run.as_str())
                    {
                        continue;
                    }
                    let path = args.model_path();
                    match keep(m, &env.run, &path) {
                        Ok(kept) => {
                            info!(
                                "{}: run {} {}; kept the model of cluster {} in {}",
                                id.as_str(),
                                env.run.as_str(),
                                if ends_current {
                                    "finished"
                                } else {
                                    "had finished"
                                },
                                m.cluster,
                                path.display()
                            );
                            served.model = Some(kept);
                        }
                        Err(e) => {
                            let e = e.context(format!(
                                "cannot keep the final model of run {} in {}",
                                env.run.as_str(),
                                path.display()
                            ));
                            warn!("{}: {e:#}", id.as_str());
                            if ends_current && !args.stay {
                                lost_model = Some(e);
                            }
                        }
                    }
                    if ends_current {
                        if args.stay {
                            current_run = pinned_run.clone();
                            continue;
                        }
                        break;
                    }
                    continue;
                }
                // Commands of another run (a stale or foreign coordinator on the same prefix) are
                // not this client's business; the first command fixes the run unless --run-id.
                match &current_run {
                    Some(r) if *r != env.run => {
                        warn!(
                            "{}: ignored a command of run {} (serving run {})",
                            id.as_str(),
                            env.run.as_str(),
                            r.as_str()
                        );
                        served.ignored += 1;
                        continue;
                    }
                    Some(_) => {}
                    None => current_run = Some(env.run.clone()),
                }
                // The relay, and only the relay, comes on the broadcast topic.
                if matches!(env.body, ToClient::Relay(_)) != (topic == broadcast) {
                    warn!(
                        "{}: ignored a command on the wrong topic {topic}",
                        id.as_str()
                    );
                    served.ignored += 1;
                    continue;
                }
                // A ping while the coordinator joins clients (or places a newcomer): answered at
                // once, so it counts this client as live.
                if env.body == ToClient::Ping {
                    let bytes = Envelope::new(env.run, env.round, ToCoordinator::Pong).to_bytes();
                    served.bytes_up += bytes.len() as u64;
                    link.publish(&topics.up(&id), bytes, false)?;
                    continue;
                }
                if env.body == ToClient::Finish {
                    info!("{}: run {} finished", id.as_str(), env.run.as_str());
                    if args.stay {
                        current_run = pinned_run.clone();
                        continue;
                    }
                    break;
                }
                let Some((run, round, result)) = worker.handle(env) else {
                    continue;
                };
                let mut reply = match result {
                    Ok(r) => r,
                    Err(e) => {
                        warn!("{}: round {round}: job failed: {e:#}", id.as_str());
                        served.failed += 1;
                        ToCoordinator::Failed {
                            reason: protocol::text(&format!("{e:#}")),
                        }
                    }
                };
                served.jobs += 1;
                outgoing(&mut reply);
                let bytes = Envelope::new(run, round, reply).to_bytes();
                served.bytes_up += bytes.len() as u64;
                debug!(
                    "{}: round {round}: answered ({} bytes)",
                    id.as_str(),
                    bytes.len()
                );
                link.publish(&topics.up(&id), bytes, false)?;
            }
        }
    }
    // A clean exit: replace the retained Hello so no coordinator counts on this client.
    link.publish(&topics.status(&id), gone, true)?;
    served.dropped = link.dropped();
    link.disconnect();
    match lost_model {
        // The run is over, but its model is not on this device: an error, once disconnected.
        Some(e) => Err(e),
        None => Ok(served),
    }
}

/// Checks a final model (its architecture's length, finite values) and writes it to `path` as
/// safetensors, atomically (a reader sees the old file or the new one, never a part), creating
/// the directory.
fn keep(m: &FinalModel, run: &Id, path: &Path) -> anyhow::Result<Kept> {
    let params = jobs::train::decode_params(m.model, &m.params)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let meta = ModelMeta {
        run_id: Some(run.as_str().to_string()),
        method: Some(m.method.as_str().to_string()).filter(|s| !s.is_empty()),
        cluster: Some(m.cluster as usize),
        // Left empty: the coordinator does not tell a client who else is in its cluster.
        members: Vec::new(),
        round: Some(m.rounds as usize),
        accuracy: m.accuracy.filter(|a| a.is_finite()),
        ..ModelMeta::of(m.model)
    };
    model_file::write(path, &params, &meta)?;
    Ok(Kept {
        path: path.to_path_buf(),
        run: run.as_str().to_string(),
        cluster: m.cluster,
    })
}

/// The exact MT-HFL signature of this client's data (before upload rounding) and its Gram
/// matrix, kept from the `GramSignature` job for the `Relevance` job of the same run.
struct OwnSignature {
    run: Id,
    gram: Gram,
    signature: Signature,
}

/// A `Relevance` job that waits for its relay.
struct RelevanceJob {
    run: Id,
    round: u32,
    clients: u32,
    estimate: Estimate,
}

/// The client's jobs and the state MT-HFL's round 0 carries between messages.
struct Worker<'a> {
    shard: &'a Shard,
    device: &'a Device,
    /// Training threads (`--threads`).
    threads: usize,
    own: Option<OwnSignature>,
    /// The latest relay: (run, round, signatures).
    relay: Option<(Id, u32, Eigenpairs)>,
    waiting: Option<RelevanceJob>,
}

impl Worker<'_> {
    /// Takes one command; returns the answer to upload with its run and round, or `None` while a
    /// relevance job and its relay wait for each other.
    fn handle(
        &mut self,
        env: Envelope<ToClient>,
    ) -> Option<(Id, u32, anyhow::Result<ToCoordinator>)> {
        let (run, round) = (env.run, env.round);
        match env.body {
            ToClient::GramSignature { k, upload } => {
                let result = self.gram_signature(&run, k as usize, upload);
                Some((run, round, result))
            }
            ToClient::Relay(relay) => {
                self.relay = Some((run, round, relay));
                self.try_relevance()
            }
            ToClient::Relevance { clients, estimate } => {
                self.waiting = Some(RelevanceJob {
                    run,
                    round,
                    clients,
                    estimate,
                });
                self.try_relevance()
            }
            cmd => Some((
                run,
                round,
                answer(cmd, self.shard, self.device, self.threads),
            )),
        }
    }

    fn gram_signature(
        &mut self,
        run: &Id,
        k: usize,
        upload: Encoding,
    ) -> anyhow::Result<ToCoordinator> {
        let gram = Gram::from_local_data(&self.shard.train)?;
        let signature = gram.signature(k)?;
        let wire = signature.to_wire(upload);
        self.own = Some(OwnSignature {
            run: run.clone(),
            gram,
            signature,
        });
        Ok(ToCoordinator::Eigenpairs(wire))
    }

    /// Answers the waiting relevance job when the relay of its run and round is here.
    fn try_relevance(&mut self) -> Option<(Id, u32, anyhow::Result<ToCoordinator>)> {
        let job = self.waiting.as_ref()?;
        let (run, round, relay) = self.relay.as_ref()?;
        if (run, *round) != (&job.run, job.round) {
            return None;
        }
        let job = self.waiting.take()?;
        let result = self.relevance(&job, relay);
        Some((job.run, job.round, result))
    }

    fn relevance(&self, job: &RelevanceJob, relay: &Eigenpairs) -> anyhow::Result<ToCoordinator> {
        let (k, d) = (relay.k as usize, relay.d as usize);
        // The exact signature of this run's GramSignature job; rebuilt when there is none (the
        // client restarted in between) or it has another k.
        let rebuilt;
        let (gram, own) = match &self.own {
            Some(o) if o.run == job.run && o.signature.k == k => (&o.gram, o.signature.clone()),
            _ => {
                rebuilt = Gram::from_local_data(&self.shard.train)?;
                let own = rebuilt.signature(k)?;
                (&rebuilt, own)
            }
        };
        anyhow::ensure!(
            d == gram.d(),
            "the relay has d = {d}, this client's features have d = {}",
            gram.d()
        );
        let all = spectral::from_relay(relay, job.clients as usize, k, d)
            .context("relay from the coordinator")?;
        let row = spectral::client_row(gram, &own, &all, job.estimate)?;
        let row: Vec<f32> = row.into_iter().map(|r| r as f32).collect();
        Ok(ToCoordinator::RelevanceRow {
            row: Tensor::encode(&row, Encoding::F32),
        })
    }
}

/// Does one job that needs no state: the registry's [`jobs::serve`] decodes the command, runs
/// the job on the shard and answers in the encoding the command asked for.
fn answer(
    cmd: ToClient,
    shard: &Shard,
    device: &Device,
    threads: usize,
) -> anyhow::Result<ToCoordinator> {
    let data = ClientData {
        train: &shard.train,
        test: Some(&shard.test),
    };
    match jobs::serve(&cmd, data, device, threads) {
        Some(reply) => Ok(reply?),
        None => anyhow::bail!("not a job this client does: {}", command_name(&cmd)),
    }
}

/// A command's name, for the log.
fn command_name(cmd: &ToClient) -> String {
    match cmd {
        ToClient::Finish => "finish".into(),
        ToClient::Ping => "ping".into(),
        ToClient::FinalModel(_) => "final model".into(),
        ToClient::GramSignature { .. } | ToClient::Relay(_) | ToClient::Relevance { .. } => {
            "MT-HFL round 0 outside the worker".into()
        }
        ToClient::Custom { kind, .. } => format!("job {:?} (unknown to this build)", kind.as_str()),
        _ => "unknown command".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgecfl_shared::model::{ModelKind, ParamLayout};

    fn final_model(values: &[f32]) -> FinalModel {
        FinalModel {
            model: ModelKind::Mlp,
            params: Tensor::encode(values, Encoding::F32),
            cluster: 3,
            rounds: 7,
            method: protocol::text("fedclust"),
            accuracy: Some(0.75),
        }
    }

    #[test]
    fn a_final_model_is_checked_then_written_whole() {
        let dir = std::env::temp_dir().join(format!("edgecfl-keep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("a/b/model.safetensors");
        let run = protocol::id("run-1").unwrap();
        let n = ParamLayout::of(ModelKind::Mlp).len();
        let values: Vec<f32> = (0..n).map(|i| (i % 17) as f32 * 0.25 - 2.0).collect();

        // Not a model of its architecture, or not finite: refused, nothing written.
        assert!(keep(&final_model(&values[1..]), &run, &path).is_err());
        let mut nan = values.clone();
        nan[5] = f32::NAN;
        assert!(keep(&final_model(&nan), &run, &path).is_err());
        assert!(!path.exists());

        let kept = keep(&final_model(&values), &run, &path).unwrap();
        assert_eq!(
            (kept.path.as_path(), kept.run.as_str(), kept.cluster),
            (path.as_path(), "run-1", 3)
        );
        let back = model_file::read(&path).unwrap();
        assert_eq!(back.params.values, values);
        assert_eq!(back.meta.run_id.as_deref(), Some("run-1"));
        assert_eq!((back.meta.cluster, back.meta.round), (Some(3), Some(7)));
        assert_eq!(back.meta.method.as_deref(), Some("fedclust"));
        assert_eq!(back.meta.accuracy, Some(0.75));
        // Only the file: no temporary left beside it.
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(names.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
