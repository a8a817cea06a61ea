//! `coordinator lps`: one local parameter server (LPS) of MT-HFL's hierarchy as a process of its
//! own, on any machine that reaches the broker. The GPS is `coordinator serve --lps remote`
//! ([`crate::cmd::serve::gps`] has the whole exchange).
//!
//! ```text
//!   connect ── lps/<id>/status: Hello (retained; last will Gone)
//!      │
//!   Waiting ──(Assign{cluster, members, θ⁰, settings})──▶ Joining: the members' retained Hellos
//!      │ Finish: no cluster for this LPS, exit                 │
//!      ▼                                                       ▼
//!   exit                         Training: federation::run_lps = FedAvg over an MqttPool of the
//!                                members, from θ⁰; every L rounds (RemoteGps, a GpsLink):
//!                                  ── lps/<id>/up: Common{N_c, accuracy, common layers}
//!                                  ◀─ lps/<id>/down: Common{average}  → insert, keep the rest
//!                                                              │ T rounds done
//!                                                              ▼
//!                                Done: results to --out, ── Done{…}; waits for Finish
//!                                (up to --gps-timeout), status Gone, exit
//!                                (after ── Failed{…}: status Gone, exit at once)
//! ```
//!
//! A GPS resumed after a crash (`serve --resume` with `--lps remote`) sends its last decision
//! again and then `Resend`: the LPS answers it with its last upload (the common layers it awaits
//! the average of, or its `Done` report), so nothing it sent to the dead GPS is lost.
//!
//! The LPS talks to its members with the GPS's run id, on their own client topics; the edge
//! clients answer whoever sends them jobs. It writes `summary.json`, `rounds.csv` and
//! `clusters.json` as `serve` does, plus [`MODEL_FILE`] (the final cluster model) and
//! [`COMMON_FILE`] (its common layers), raw little-endian f32.

use std::ops::ControlFlow::{Break, Continue};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use edgecfl_shared::algorithms::{self, Algorithm, MethodConfig};
use edgecfl_shared::data::DatasetKind;
use edgecfl_shared::federation::{
    FederationConfig, FederationError, GpsLink, RunContext, RunResult, Weighting,
};
use edgecfl_shared::hierarchy::CommonLayers;
use edgecfl_shared::model::{LayerSet, Params};
use edgecfl_shared::mqtt::{Inbound, Link, LinkOptions, SecurityArgs, fleet_backlog};
use edgecfl_shared::protocol::{
    self, BrokerAddr, Encoding, Envelope, Id, LpsAssignment, LpsDone, ProtocolError, Tensor, ToGps,
    ToLps, TopicKind, Topics,
};
use serde_json::json;
use tracing::{info, warn};

use crate::cmd::serve::{MqttPool, NetFlags};
use crate::config::RunConfig;
use crate::report::{self, Progress};
use crate::rounds::{Inbox, wait};

/// The final cluster model, raw little-endian f32, in the LPS's `--out`.
pub const MODEL_FILE: &str = "model.f32";
/// The common layers of the final cluster model, raw little-endian f32.
pub const COMMON_FILE: &str = "common.f32";

/// Arguments of `coordinator lps`.
#[derive(Debug, Clone, Args)]
pub struct LpsArgs {
    /// Broker, mqtt://HOST:PORT or mqtts://HOST:PORT (the GPS's).
    #[arg(long, env = "EDGECFL_BROKER")]
    pub broker: BrokerAddr,
    /// This LPS's id (1-32 of A-Z a-z 0-9 - _ .), unique among the LPSs of the fleet.
    #[arg(long)]
    pub id: String,
    /// Topic prefix (fleet), as given to the GPS.
    #[arg(long, default_value = Topics::DEFAULT_PREFIX)]
    pub prefix: String,
    /// Output directory (default: results/lps-<id>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Seconds to wait for the GPS's assignment.
    #[arg(long, default_value_t = 3600.0)]
    pub assign_timeout: f64,
    /// Seconds to wait for the members' announcements after the assignment.
    #[arg(long, default_value_t = 60.0)]
    pub join_timeout: f64,
    /// Seconds each phase (training, evaluation) waits for the members' answers.
    #[arg(long, default_value_t = 600.0)]
    pub phase_timeout: f64,
    /// Seconds to wait for the GPS's average after sending the common layers, and for its
    /// `Finish` after the `Done` report (the time a crashed GPS has to be resumed).
    #[arg(long, default_value_t = 3600.0)]
    pub gps_timeout: f64,
    /// Serve only this run id: an assignment or a `Finish` of any other run is ignored (default:
    /// the run of the first assignment).
    #[arg(long)]
    pub run_id: Option<String>,
    /// TLS settings and login at the broker (username default: the --id).
    #[command(flatten)]
    pub login: SecurityArgs,
}

/// Errors of the LPS's exchange with the GPS.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LpsError {
    /// No assignment in time.
    #[error("no assignment from the GPS on {topic} within {seconds:.0}s")]
    NoAssignment {
        /// The topic listened to.
        topic: String,
        /// Seconds waited.
        seconds: f64,
    },
    /// The GPS ended the run before assigning this LPS a cluster.
    #[error("the GPS has no cluster for this LPS")]
    Unassigned,
    /// The assignment cannot be used.
    #[error("bad assignment: {0}")]
    Assignment(String),
    /// No average from the GPS in time.
    #[error("no average from the GPS for GPS round {gps_round} within {seconds:.0}s")]
    GpsTimeout {
        /// The GPS round.
        gps_round: usize,
        /// Seconds waited.
        seconds: f64,
    },
    /// The GPS ended the run while this LPS waited.
    #[error("the GPS finished the run during GPS round {0}")]
    GpsFinished(usize),
    /// The GPS sent an average that does not fit.
    #[error("bad average from the GPS: {0}")]
    BadAverage(#[from] ProtocolError),
    /// The broker connection failed.
    #[error("MQTT: {0}")]
    Link(#[from] edgecfl_shared::mqtt::LinkError),
}

/// What an LPS did.
#[derive(Debug)]
pub struct LpsServed {
    /// Its cluster.
    pub cluster: usize,
    /// The round loop's result (one cluster).
    pub result: RunResult,
    /// Where the files went.
    pub out: PathBuf,
}

/// The GPS as the LPS's round loop sees it: every exchange publishes the common layers on
/// `lps/<id>/up` and waits for the average on `lps/<id>/down`.
pub struct RemoteGps {
    link: Link,
    topics: Topics,
    id: Id,
    run: Id,
    common_len: usize,
    timeout: Duration,
    /// Payload bytes sent per GPS round.
    pub up_bytes: Vec<u64>,
    /// Payload bytes received per GPS round.
    pub down_bytes: Vec<u64>,
    /// The GPS has told this LPS that the run is over.
    finished: bool,
}

impl RemoteGps {
    /// A message on this LPS's down topic, decoded, with its size; `None` for any other event.
    fn of_gps(&self, ev: Inbound) -> Option<(Result<Envelope<ToLps>, ProtocolError>, usize)> {
        let Inbound::Message { topic, payload, .. } = ev else {
            return None;
        };
        (self.topics.parse_lps(&topic) == Some((self.id.as_str(), TopicKind::Down)))
            .then(|| (Envelope::<ToLps>::from_bytes(&payload), payload.len()))
    }

    /// After the `Done` report (`report`): waits for the GPS's `Finish` (up to
    /// `--gps-timeout`), sending the report again whenever a resumed GPS asks for it. The LPS's
    /// results are on disk already; a GPS that never answers costs the wait, not the results.
    fn await_finish(&self, report: &[u8]) {
        let deadline = Instant::now() + self.timeout;
        let finished = wait(&mut &*self, deadline, |gps, ev| {
            match gps.of_gps(ev).map(|m| m.0) {
                Some(Ok(env)) if env.run != gps.run => {}
                Some(Ok(Envelope {
                    body: ToLps::Finish,
                    ..
                })) => return Break(()),
                Some(Ok(Envelope {
                    body: ToLps::Resend,
                    ..
                })) => {
                    info!("the GPS asks again; sending the final report again");
                    if let Err(e) =
                        gps.link
                            .publish(&gps.topics.lps_up(&gps.id), report.to_vec(), false)
                    {
                        warn!("cannot send the final report again: {e}");
                    }
                }
                // Averages and assignments a resumed GPS sends again: already had them.
                Some(Ok(_)) | None => {}
                Some(Err(e)) => warn!("ignored a GPS message: {e}"),
            }
            Continue(())
        });
        if finished.is_none() {
            warn!(
                "no Finish from the GPS within {:.0}s of the final report; exiting",
                self.timeout.as_secs_f64()
            );
        }
    }

    fn exchange_inner(
        &mut self,
        gps_round: usize,
        common: &[f32],
        samples: u64,
        accuracy: Option<f64>,
    ) -> Result<Vec<f32>, LpsError> {
        let bytes = Envelope::new(
            self.run.clone(),
            gps_round as u32,
            ToGps::Common {
                samples,
                accuracy,
                values: Tensor::encode(common, Encoding::F32),
            },
        )
        .to_bytes();
        self.up_bytes.push(bytes.len() as u64);
        self.link
            .publish(&self.topics.lps_up(&self.id), bytes.clone(), false)?;
        let deadline = Instant::now() + self.timeout;
        let average = wait(self, deadline, |gps, ev| {
            let Some((msg, len)) = gps.of_gps(ev) else {
                return Continue(());
            };
            match msg {
                Ok(env) if env.run != gps.run => {
                    warn!("ignored a GPS message of run {}", env.run.as_str());
                }
                Ok(Envelope {
                    body: ToLps::Finish,
                    ..
                }) => {
                    gps.finished = true;
                    return Break(Err(LpsError::GpsFinished(gps_round)));
                }
                Ok(Envelope {
                    round,
                    body: ToLps::Common { values },
                    ..
                }) if round as usize == gps_round => {
                    let average = values.decode(Some(gps.common_len)).map_err(LpsError::from);
                    return Break(average.inspect(|_| gps.down_bytes.push(len as u64)));
                }
                // A resumed GPS lost what we sent it before its crash: the same bytes again.
                Ok(Envelope {
                    round,
                    body: ToLps::Resend,
                    ..
                }) if round as usize == gps_round => {
                    info!(
                        "GPS round {gps_round}: the GPS asks again; sending the common layers again"
                    );
                    let up = gps.topics.lps_up(&gps.id);
                    if let Err(e) = gps.link.publish(&up, bytes.clone(), false) {
                        return Break(Err(e.into()));
                    }
                }
                Ok(env) => warn!(
                    "ignored a GPS message of round {} while in GPS round {gps_round}",
                    env.round
                ),
                Err(e) => warn!("ignored a GPS message: {e}"),
            }
            Continue(())
        });
        average.unwrap_or_else(|| {
            Err(LpsError::GpsTimeout {
                gps_round,
                seconds: self.timeout.as_secs_f64(),
            })
        })
    }
}

impl Inbox for RemoteGps {
    fn recv_until(&self, deadline: Instant) -> Option<Inbound> {
        self.link.recv_until(deadline)
    }
}

impl GpsLink for RemoteGps {
    fn exchange(
        &mut self,
        gps_round: usize,
        common: &[f32],
        samples: u64,
        accuracy: Option<f64>,
    ) -> Result<Vec<f32>, FederationError> {
        let t0 = Instant::now();
        let average = self
            .exchange_inner(gps_round, common, samples, accuracy)
            .map_err(|e| FederationError::Gps(Box::new(e)))?;
        info!(
            "GPS round {gps_round}: sent {} common floats, got the average after {:.1}s",
            common.len(),
            t0.elapsed().as_secs_f64()
        );
        Ok(average)
    }
}

/// Waits for the GPS's assignment; the envelope's run id comes with it.
fn await_assignment(
    link: &Link,
    topics: &Topics,
    id: &Id,
    hello: &[u8],
    pinned: Option<&Id>,
    timeout: Duration,
) -> Result<(Id, LpsAssignment), LpsError> {
    let deadline = Instant::now() + timeout;
    let assigned = wait(&mut &*link, deadline, |_, ev| {
        match ev {
            Inbound::Connected => {
                if let Err(e) = link.publish(&topics.lps_status(id), hello.to_vec(), true) {
                    return Break(Err(e.into()));
                }
                info!("LPS {}: connected; waiting for a cluster", id.as_str());
            }
            Inbound::Disconnected(e) => warn!("broker connection: {e}"),
            Inbound::Message { payload, .. } => match Envelope::<ToLps>::from_bytes(&payload) {
                Ok(env) if pinned.is_some_and(|p| *p != env.run) => warn!(
                    "ignored a GPS message of run {} (serving run {})",
                    env.run.as_str(),
                    pinned.map_or("", Id::as_str)
                ),
                Ok(Envelope {
                    run,
                    body: ToLps::Assign(a),
                    ..
                }) => return Break(Ok((run, *a))),
                Ok(Envelope {
                    body: ToLps::Finish,
                    ..
                }) => return Break(Err(LpsError::Unassigned)),
                Ok(_) => warn!("ignored a GPS message before the assignment"),
                Err(e) => warn!("ignored a GPS message: {e}"),
            },
        }
        Continue(())
    });
    assigned.unwrap_or_else(|| {
        Err(LpsError::NoAssignment {
            topic: topics.lps_down(id),
            seconds: timeout.as_secs_f64(),
        })
    })
}

/// The round loop's settings from an assignment, and θ⁰.
fn settings(a: &LpsAssignment) -> Result<(MethodConfig, Params, CommonLayers), LpsError> {
    let bad = |e: &dyn std::fmt::Display| LpsError::Assignment(e.to_string());
    let initial = a.validate().map_err(|e| bad(&e))?;
    let initial = Params::new(a.model, initial).map_err(|e| bad(&e))?;
    let set: LayerSet = a.common_layers.parse().map_err(|e| bad(&e))?;
    let common = CommonLayers::of(&initial.layout(), Some(&set)).map_err(|e| bad(&e))?;
    // The assignment names no data set: the LPS only needs one its model takes, of θ⁰'s classes.
    let dataset = DatasetKind::ALL
        .into_iter()
        .find(|d| d.info().shape == a.model.input() && d.info().classes() == initial.classes())
        .ok_or_else(|| {
            bad(&format!(
                "no data set of {} images has the {} classes of the assigned model",
                a.model.input(),
                initial.classes()
            ))
        })?;
    let cfg = MethodConfig::new(
        Algorithm::FedAvg,
        FederationConfig {
            dataset,
            model: a.model,
            rounds: a.rounds as usize,
            frac: a.frac,
            epochs: a.epochs as usize,
            batch_size: a.batch_size as usize,
            lr: a.lr,
            momentum: a.momentum,
            eval_every: a.eval_every as usize,
            seed: a.seed,
            hierarchy: true,
            lps_rounds: a.lps_rounds as usize,
            common_layers: Some(set),
            weighting: if a.equal_weights {
                Weighting::Equal
            } else {
                Weighting::Samples
            },
            max_update_norm: a.max_update_norm,
            ..FederationConfig::default()
        },
    );
    cfg.validate().map_err(|e| bad(&e))?;
    Ok((cfg, initial, common))
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Runs one LPS: waits for a cluster, trains it with its members under the GPS, writes its
/// results, reports `Done` (or `Failed`) to the GPS. `None` when the GPS had no cluster for it.
pub fn run(args: &LpsArgs) -> anyhow::Result<Option<LpsServed>> {
    let id = protocol::id(&args.id).context("bad --id")?;
    let topics = Topics::new(&args.prefix).context("bad --prefix")?;
    let pinned = match &args.run_id {
        Some(r) => Some(protocol::id(r).context("bad --run-id")?),
        None => None,
    };
    let hello = Envelope::new(Id::new(), 0, ToGps::Hello).to_bytes();
    let gone = Envelope::new(Id::new(), 0, ToGps::Gone).to_bytes();
    let security = args.login.resolve(id.as_str())?;
    let gps_link = Link::start(LinkOptions {
        subscribe: vec![topics.lps_down(&id)],
        last_will: Some((topics.lps_status(&id), gone.clone())),
        security: security.clone(),
        max_unread_bytes: Some(fleet_backlog(1)),
        ..LinkOptions::new(args.broker.clone(), format!("edgecfl-lps-{}", id.as_str()))
    })?;
    let assigned = await_assignment(
        &gps_link,
        &topics,
        &id,
        &hello,
        pinned.as_ref(),
        Duration::from_secs_f64(args.assign_timeout),
    );
    let (run, assignment) = match assigned {
        Ok(a) => a,
        Err(e) => {
            let _ = gps_link.publish(&topics.lps_status(&id), gone, true);
            gps_link.disconnect();
            if matches!(e, LpsError::Unassigned) {
                info!("LPS {}: the GPS has no cluster for it", id.as_str());
                return Ok(None);
            }
            return Err(e.into());
        }
    };
    let cluster = assignment.cluster as usize;
    info!(
        "LPS {}: cluster {cluster} of {} with {} clients, run {}",
        id.as_str(),
        assignment.clusters,
        assignment.members.len(),
        run.as_str()
    );
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("results/lps-{}", id.as_str())));
    let mut gps = RemoteGps {
        link: gps_link,
        topics: topics.clone(),
        id: id.clone(),
        run: run.clone(),
        common_len: 0,
        timeout: Duration::from_secs_f64(args.gps_timeout),
        up_bytes: Vec::new(),
        finished: false,
        down_bytes: Vec::new(),
    };
    let result = serve_cluster(args, &assignment, &run, &topics, &mut gps, &out);
    let report = match &result {
        Ok(s) => ToGps::Done(LpsDone {
            rounds: s.result.rounds.len() as u32,
            gps_rounds: s.result.gps_rounds as u32,
            evaluated: s
                .result
                .final_client_accuracy
                .iter()
                .filter(|a| a.is_finite())
                .count() as u32,
            final_accuracy: s.result.final_accuracy(),
            wall_seconds: s.result.wall_seconds,
        }),
        Err(e) => ToGps::Failed {
            reason: protocol::text(&format!("{e:#}")),
        },
    };
    let bytes = Envelope::new(run, u32::MAX, report).to_bytes();
    let sent = gps.link.publish(&topics.lps_up(&id), bytes.clone(), false);
    // Only a `Done` report waits: a GPS that has ended the run already sends no other Finish,
    // and after a `Failed` one (the GPS may have been silent for --gps-timeout already) the
    // retained `Gone` below tells a resumed GPS as much.
    if sent.is_ok() && result.is_ok() && !gps.finished {
        gps.await_finish(&bytes);
    }
    let _ = gps.link.publish(&topics.lps_status(&id), gone, true);
    gps.link.disconnect();
    let served = result?;
    sent.context("cannot send the final report to the GPS")?;
    Ok(Some(served))
}

fn serve_cluster(
    args: &LpsArgs,
    a: &LpsAssignment,
    run: &Id,
    topics: &Topics,
    gps: &mut RemoteGps,
    out: &std::path::Path,
) -> anyhow::Result<LpsServed> {
    let (fed, initial, common) = settings(a)?;
    gps.common_len = common.len();
    let mut subscribe = Vec::with_capacity(2 * a.members.len());
    for m in &a.members {
        subscribe.push(topics.status(m));
        subscribe.push(topics.up(m));
    }
    let link = Link::start(LinkOptions {
        subscribe,
        security: args.login.resolve(gps.id.as_str())?,
        max_unread_bytes: Some(fleet_backlog(a.members.len())),
        ..LinkOptions::new(
            args.broker.clone(),
            format!("edgecfl-lps-{}-c", gps.id.as_str()),
        )
    })?;
    link.wait_connected(&args.broker, Duration::from_secs(30))?;
    let net = NetFlags {
        broker: Some(args.broker.clone()),
        prefix: topics.prefix().to_string(),
        join_timeout: args.join_timeout,
        phase_timeout: args.phase_timeout,
        upload: a.upload,
        ..NetFlags::default()
    };
    let mut pool = MqttPool::join_members(link, topics.clone(), run.clone(), &net, &a.members)?;
    pool.vouch(net.sample_cap, fed.federation.dataset, None);
    let mut cfg = RunConfig::load(None)?;
    cfg.clients = a.members.len();
    cfg.out = out.to_path_buf();
    cfg.method = fed;
    let data = match pool.partition() {
        Some((spec, seed)) => {
            cfg.partition = spec;
            format!("edge clients' shards of {} (seed {seed})", cfg.partition)
        }
        None => "edge clients' own data".to_string(),
    };
    let ctx = RunContext {
        truth: pool.truth(),
        task_labels: pool.partition().and_then(|(spec, _)| spec.task_labels()),
        backend: cfg.backend,
    };
    let mut progress = Progress::new(cfg.method.federation.rounds);
    let result = algorithms::run_lps(&cfg.method, &mut pool, &ctx, &mut progress, initial, gps)?;
    progress.finish();
    let model = result
        .models
        .first()
        .context("the LPS's round loop returned no model")?;
    let common_values = common.extract(model)?;
    let extra = json!({
        "lps_id": gps.id.as_str(),
        "run_id": run.as_str(),
        "cluster": a.cluster,
        "clusters": a.clusters,
        "members": a.members.iter().map(Id::as_str).collect::<Vec<_>>(),
        "broker": args.broker.to_string(),
        "gps_up_bytes_per_round": gps.up_bytes,
        "gps_down_bytes_per_round": gps.down_bytes,
        "model_file": MODEL_FILE,
        "common_file": COMMON_FILE,
        "rejected": pool.tally,
        "rejected_total": pool.tally.total(),
        "rejected_per_client": pool.per_client,
        "phase_timeouts": pool.timeouts,
        "wire_bytes": pool.wire,
    });
    report::write_all(out, &cfg, &result, &data, Some(extra))?;
    let write = |name: &str, bytes: Vec<u8>| {
        let p = out.join(name);
        edgecfl_shared::atomic_file::write(&p, &bytes)
            .with_context(|| format!("cannot write {}", p.display()))
    };
    write(MODEL_FILE, f32_bytes(&model.values))?;
    write(COMMON_FILE, f32_bytes(&common_values))?;
    // Its cluster's model as safetensors, under the GPS's cluster index.
    let mut models =
        crate::cmd::export::of_result(&result, Some(run.as_str()), cfg.method.federation.dataset);
    for m in &mut models {
        m.meta.cluster = Some(a.cluster as usize);
    }
    crate::cmd::export::write(out, &models)?;
    // Its members keep the model (the GPS's `Finish` that follows finds them gone).
    pool.finish(&crate::cmd::export::final_messages(run, &result, &models));
    Ok(LpsServed {
        cluster: a.cluster as usize,
        result,
        out: out.to_path_buf(),
    })
}
