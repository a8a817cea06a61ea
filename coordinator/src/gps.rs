//! The global parameter server (GPS) of MT-HFL's hierarchy when the local parameter servers run
//! as processes of their own (`coordinator serve --lps remote` with `coordinator lps` processes on
//! the same broker, on this machine or others).
//!
//! ```text
//!  coordinator serve --lps remote                    coordinator lps --id L (one per cluster)
//!  round 0 with every client (MqttPool) → C clusters
//!  Assigning: ≥ C LPSs said Hello (retained status)
//!    ── lps/L/down: Assign{cluster c, members, θ⁰} ──▶ joins its members' client topics
//!                                                       FedAvg rounds 1..L with its members
//!  GPS round g = 1..⌊T/L⌋:                              (the clients answer whoever asks)
//!    ◀── lps/L/up: Common{N_c, acc, common layers} ──
//!    all C parts → Σ_c N_c θ_c / Σ_c N_c (hierarchy::gps_average)
//!    ── lps/L/down: Common{average} ─────────────────▶ inserts it, keeps its other layers
//!  Finishing:
//!    ◀── lps/L/up: Done{final accuracy, …} ──────────
//!    ── lps/*/down: Finish, clients/*/down: Finish ──▶
//! ```
//!
//! One LPS serves one cluster (one local parameter server per cluster, as in the paper). The GPS
//! waits (up to `--join-timeout`) until at least as many LPSs have announced themselves as round 0
//! found clusters, hands cluster `c` to the `c`-th LPS id in sorted order and sends `Finish` to the
//! ones left over. After round 0 the GPS drops its client connection: the clients' training
//! traffic goes to their LPS only, and the GPS hears nothing of it.
//!
//! Every `Common` upload must hold exactly the common layers' `common_len` finite floats (anything
//! else is logged, counted and ignored, as [`crate::rounds`] does for clients). An LPS that fails
//! (`Failed`), dies (its last will, `Gone`) or does not answer within its deadline ends the run
//! with a [`GpsError`] naming it; the GPS then still tells every LPS and client to finish.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use edgecfl_shared::federation::{FederationError, Weighting};
use edgecfl_shared::hierarchy::{self, CommonLayers, HierarchyError};
use edgecfl_shared::mqtt::{Inbound, Link, LinkError};
use edgecfl_shared::protocol::{
    self, Encoding, Envelope, Id, LpsAssignment, LpsDone, ProtocolError, Tensor, ToClient, ToGps,
    ToLps, TopicKind, Topics,
};
use serde::Serialize;
use tracing::{info, warn};

use crate::rounds::{Rejected, Rejection, Tally};

/// Errors of the GPS.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GpsError {
    /// Fewer LPS processes than clusters announced themselves in time.
    #[error(
        "{clusters} clusters need {clusters} LPS processes, only {got} announced themselves on \
         {topic} within {seconds:.0}s (start more `coordinator lps`, or cut fewer clusters)"
    )]
    TooFewLps {
        /// Clusters of round 0.
        clusters: usize,
        /// LPSs that said Hello.
        got: usize,
        /// Where they announce themselves.
        topic: String,
        /// Seconds waited.
        seconds: f64,
    },
    /// LPSs did not answer in time.
    #[error("LPS {lps} sent no {what} within {seconds:.0}s")]
    Timeout {
        /// The LPSs that did not answer, with their clusters.
        lps: String,
        /// What was awaited.
        what: String,
        /// Seconds waited.
        seconds: f64,
    },
    /// An LPS's last will arrived (or it left) before it was done.
    #[error("LPS {lps} (cluster {cluster}) is gone ({during})")]
    LpsGone {
        /// The LPS.
        lps: String,
        /// Its cluster.
        cluster: usize,
        /// What the GPS was waiting for.
        during: String,
    },
    /// An LPS reported that it cannot go on.
    #[error("LPS {lps} (cluster {cluster}) failed: {reason}")]
    LpsFailed {
        /// The LPS.
        lps: String,
        /// Its cluster.
        cluster: usize,
        /// Its reason.
        reason: String,
    },
    /// An LPS finished before the last GPS round.
    #[error("LPS {lps} (cluster {cluster}) reported Done in GPS round {gps_round} of {of}")]
    EarlyDone {
        /// The LPS.
        lps: String,
        /// Its cluster.
        cluster: usize,
        /// The GPS round awaited.
        gps_round: usize,
        /// GPS rounds of the run.
        of: usize,
    },
    /// The common layers or the average are unusable.
    #[error(transparent)]
    Hierarchy(#[from] HierarchyError),
    /// A bad id.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// The broker connection failed.
    #[error("MQTT: {0}")]
    Link(#[from] LinkError),
    /// Bad settings.
    #[error(transparent)]
    Federation(#[from] FederationError),
}

/// What the GPS needs besides its link.
#[derive(Debug, Clone)]
pub struct GpsPlan {
    /// Topics of the fleet.
    pub topics: Topics,
    /// The run id (the LPSs use it for their clients' jobs too).
    pub run: Id,
    /// The settings of the whole run.
    pub federation: edgecfl_shared::federation::FederationConfig,
    /// Round 0's clusters: `assignment[i]` = cluster of client `i`.
    pub assignment: Vec<usize>,
    /// Client ids by index.
    pub clients: Vec<Id>,
    /// Training samples by client index.
    pub samples: Vec<u64>,
    /// Encoding of the clients' uploads.
    pub upload: Encoding,
    /// How long to wait for enough LPSs.
    pub join_timeout: Duration,
    /// How long one client phase may take; an LPS gets `(2·lps_rounds + 1)` of them per GPS round.
    pub phase_timeout: Duration,
}

/// One LPS as the GPS saw it.
#[derive(Debug, Clone, Serialize)]
pub struct LpsRecord {
    /// Its id.
    pub id: String,
    /// Its cluster.
    pub cluster: usize,
    /// Its member clients.
    pub members: Vec<String>,
    /// Its weight in the GPS average: the training samples its members declared when they
    /// joined (`--weighting samples`) or its number of members (`equal`). The count the LPS
    /// reports with its upload is not used: the GPS knows the members' declarations itself.
    pub samples: u64,
    /// Payload bytes of its `Common` upload, per GPS round.
    pub up_bytes: Vec<u64>,
    /// Floats in that upload, per GPS round.
    pub up_floats: Vec<usize>,
    /// Payload bytes of the average sent to it, per GPS round.
    pub down_bytes: Vec<u64>,
    /// Its latest mean accuracy as reported with each upload.
    pub accuracy: Vec<Option<f64>>,
    /// Its final report.
    pub done: Option<LpsDone>,
}

/// What the GPS did (`summary.json` of `serve --lps remote`).
#[derive(Debug, Clone, Serialize)]
pub struct GpsReport {
    /// GPS rounds done.
    pub gps_rounds: usize,
    /// The common layers.
    pub common_layers: String,
    /// Floats of the common layers (each way, per LPS, per GPS round).
    pub common_len: usize,
    /// The LPSs, by cluster.
    pub lps: Vec<LpsRecord>,
    /// LPSs that got no cluster.
    pub idle_lps: Vec<String>,
    /// Mean local test accuracy over all evaluated clients after the last round (each LPS's
    /// mean weighted by its evaluated members).
    pub final_accuracy: Option<f64>,
    /// Ignored messages on the LPS topics, by reason.
    pub rejected: Tally,
}

/// A GPS: its link (subscribed to every LPS's status and up topic since before round 0, so
/// retained and early `Hello`s are waiting in it) and the plan.
pub struct Gps {
    link: Link,
    plan: GpsPlan,
    /// LPS id → alive.
    known: BTreeMap<String, bool>,
    /// Assigned LPS ids, by cluster.
    assigned: Vec<String>,
    tally: Tally,
}

impl Gps {
    /// A GPS over `link` (which must subscribe to `topics.all_lps_status()` and
    /// `topics.all_lps_up()`).
    pub fn new(link: Link, plan: GpsPlan) -> Self {
        Gps {
            link,
            plan,
            known: BTreeMap::new(),
            assigned: Vec::new(),
            tally: Tally::default(),
        }
    }

    /// The filters a GPS link subscribes to.
    pub fn subscriptions(topics: &Topics) -> Vec<String> {
        vec![topics.all_lps_status(), topics.all_lps_up()]
    }

    /// Runs the hierarchy to the end: assigns the clusters, does every GPS round, collects the
    /// LPSs' final reports; then (also after an error) tells every LPS and client to finish.
    ///
    /// # Errors
    ///
    /// See [`GpsError`].
    pub fn run(mut self) -> Result<GpsReport, GpsError> {
        let result = self.run_inner();
        self.finish_all();
        result
    }

    fn run_inner(&mut self) -> Result<GpsReport, GpsError> {
        let cfg = self.plan.federation.clone();
        let common = cfg.common()?;
        let clusters = self.plan.assignment.iter().max().map_or(0, |m| m + 1);
        self.await_lps(clusters)?;
        let mut records = self.assign(clusters, &common)?;
        let gps_rounds = cfg.rounds / cfg.lps_rounds;
        let per_round = u32::try_from(2 * cfg.lps_rounds + 1).unwrap_or(u32::MAX);
        let budget = self.plan.phase_timeout.saturating_mul(per_round);
        for g in 1..=gps_rounds {
            let parts = self.collect(g, gps_rounds, &common, budget, &mut records)?;
            let weighted: Vec<(&[f32], u64)> =
                parts.iter().map(|(p, w)| (p.as_slice(), *w)).collect();
            let average = hierarchy::gps_average(&common, &weighted)?;
            let bytes = Envelope::new(
                self.plan.run.clone(),
                g as u32,
                ToLps::Common {
                    values: Tensor::encode(&average, Encoding::F32),
                },
            )
            .to_bytes();
            for (c, lps) in self.assigned.iter().enumerate() {
                self.link
                    .publish(&self.plan.topics.lps_down(lps), bytes.clone(), false)?;
                records[c].down_bytes.push(bytes.len() as u64);
            }
            let latest: Vec<String> = records
                .iter()
                .map(|r| {
                    r.accuracy
                        .last()
                        .copied()
                        .flatten()
                        .map_or("n/a".into(), |a| format!("{:.2} %", 100.0 * a))
                })
                .collect();
            info!(
                "GPS round {g}/{gps_rounds}: averaged {} floats of {} LPSs (latest accuracies {})",
                common.len(),
                records.len(),
                latest.join(", ")
            );
        }
        let after_last = u32::try_from(2 * (cfg.rounds % cfg.lps_rounds) + 2).unwrap_or(u32::MAX);
        let budget_done = self.plan.phase_timeout.saturating_mul(after_last);
        self.collect_done(budget_done, &mut records)?;
        let (sum, count) = records.iter().fold((0.0, 0u64), |(s, k), r| {
            match r
                .done
                .as_ref()
                .and_then(|d| d.final_accuracy.map(|a| (a, d.evaluated)))
            {
                Some((a, e)) => (s + a * f64::from(e), k + u64::from(e)),
                None => (s, k),
            }
        });
        Ok(GpsReport {
            gps_rounds,
            common_layers: common.set().to_string(),
            common_len: common.len(),
            idle_lps: self
                .known
                .keys()
                .filter(|id| !self.assigned.contains(id))
                .cloned()
                .collect(),
            lps: records,
            final_accuracy: (count > 0).then(|| sum / count as f64),
            rejected: self.tally.clone(),
        })
    }

    fn reject(&mut self, lps: &str, r: Rejected) {
        warn!(
            "GPS: ignored message from LPS {lps}: {:?}: {}",
            r.reason, r.detail
        );
        self.tally.add(r.reason);
    }

    /// Handles a status message; returns the LPS id and whether it is alive now.
    fn on_status(&mut self, lps: &str, payload: &[u8]) -> Option<bool> {
        match Envelope::<ToGps>::from_bytes(payload) {
            Ok(Envelope {
                body: ToGps::Hello, ..
            }) => {
                if self.known.insert(lps.to_string(), true) != Some(true) {
                    info!("LPS {lps} is ready");
                }
                Some(true)
            }
            Ok(Envelope {
                body: ToGps::Gone, ..
            }) => {
                self.known.insert(lps.to_string(), false);
                Some(false)
            }
            Ok(_) => {
                self.reject(
                    lps,
                    Rejected {
                        reason: Rejection::Unexpected,
                        detail: "upload on the status topic".into(),
                    },
                );
                None
            }
            Err(e) => {
                self.reject(lps, e.into());
                None
            }
        }
    }

    fn await_lps(&mut self, clusters: usize) -> Result<(), GpsError> {
        let deadline = Instant::now() + self.plan.join_timeout;
        let alive = |known: &BTreeMap<String, bool>| known.values().filter(|a| **a).count();
        let mut told = false;
        loop {
            // Take what is already waiting before judging.
            while let Some(ev) = self.link.recv_until(Instant::now()) {
                self.on_idle_event(ev);
            }
            if alive(&self.known) >= clusters {
                return Ok(());
            }
            if !told {
                info!(
                    "GPS: {clusters} clusters; waiting for {} more LPS processes on {}",
                    clusters - alive(&self.known),
                    self.plan.topics.all_lps_status()
                );
                told = true;
            }
            match self.link.recv_until(deadline) {
                Some(ev) => self.on_idle_event(ev),
                None => {
                    return Err(GpsError::TooFewLps {
                        clusters,
                        got: alive(&self.known),
                        topic: self.plan.topics.all_lps_status(),
                        seconds: self.plan.join_timeout.as_secs_f64(),
                    });
                }
            }
        }
    }

    fn on_idle_event(&mut self, ev: Inbound) {
        if let Inbound::Message { topic, payload, .. } = ev
            && let Some((lps, kind)) = self.plan.topics.parse_lps(&topic)
        {
            let lps = lps.to_string();
            match kind {
                TopicKind::Status => {
                    self.on_status(&lps, &payload);
                }
                TopicKind::Up => self.reject(
                    &lps,
                    Rejected {
                        reason: Rejection::NotAsked,
                        detail: "upload before any assignment".into(),
                    },
                ),
                TopicKind::Down => {}
            }
        }
    }

    fn assign(
        &mut self,
        clusters: usize,
        common: &CommonLayers,
    ) -> Result<Vec<LpsRecord>, GpsError> {
        let cfg = &self.plan.federation;
        let ready: Vec<String> = self
            .known
            .iter()
            .filter(|(_, alive)| **alive)
            .map(|(id, _)| id.clone())
            .collect();
        let initial = edgecfl_shared::model::Params::init(cfg.model, cfg.seed);
        let mut records = Vec::with_capacity(clusters);
        for (c, lps) in ready.iter().take(clusters).enumerate() {
            let members: Vec<usize> = (0..self.plan.assignment.len())
                .filter(|&i| self.plan.assignment[i] == c)
                .collect();
            let assignment = LpsAssignment {
                cluster: c as u32,
                clusters: clusters as u32,
                members: members
                    .iter()
                    .map(|&i| self.plan.clients[i].clone())
                    .collect(),
                model: cfg.model,
                initial: Tensor::encode(&initial.values, Encoding::F32),
                common_layers: protocol::text(&common.set().to_string()),
                rounds: cfg.rounds as u32,
                lps_rounds: cfg.lps_rounds as u32,
                eval_every: cfg.eval_every as u32,
                frac: cfg.frac,
                epochs: cfg.epochs as u32,
                batch_size: cfg.batch_size as u32,
                lr: cfg.lr,
                momentum: cfg.momentum,
                // Each cluster samples and shuffles with its own stream of the master seed.
                seed: edgecfl_shared::federation::client_seed(cfg.seed, 0, usize::MAX - 1 - c),
                upload: self.plan.upload,
                equal_weights: cfg.weighting == Weighting::Equal,
                max_update_norm: cfg.max_update_norm,
            };
            let bytes = Envelope::new(
                self.plan.run.clone(),
                0,
                ToLps::Assign(Box::new(assignment)),
            )
            .to_bytes();
            self.link
                .publish(&self.plan.topics.lps_down(lps), bytes, false)?;
            info!("GPS: cluster {c} ({} clients) → LPS {lps}", members.len());
            self.assigned.push(lps.clone());
            records.push(LpsRecord {
                id: lps.clone(),
                cluster: c,
                members: members
                    .iter()
                    .map(|&i| self.plan.clients[i].to_string())
                    .collect(),
                samples: match cfg.weighting {
                    Weighting::Equal => members.len() as u64,
                    _ => members.iter().map(|&i| self.plan.samples[i]).sum(),
                },
                up_bytes: Vec::new(),
                up_floats: Vec::new(),
                down_bytes: Vec::new(),
                accuracy: Vec::new(),
                done: None,
            });
        }
        for lps in ready.iter().skip(clusters) {
            info!("GPS: LPS {lps} gets no cluster ({clusters} clusters)");
            self.send_finish(lps);
        }
        Ok(records)
    }

    /// Waits for the next message from an assigned LPS; a status change of an assigned LPS to
    /// `Gone` is an error. Returns (cluster, envelope, payload bytes).
    fn next_upload(
        &mut self,
        deadline: Instant,
        pending: &[usize],
        what: &str,
        budget: Duration,
    ) -> Result<(usize, Envelope<ToGps>, u64), GpsError> {
        loop {
            let Some(ev) = self.link.recv_until(deadline) else {
                let silent: Vec<String> = pending
                    .iter()
                    .map(|&c| format!("{} (cluster {c})", self.assigned[c]))
                    .collect();
                return Err(GpsError::Timeout {
                    lps: silent.join(", "),
                    what: what.into(),
                    seconds: budget.as_secs_f64(),
                });
            };
            let (topic, payload) = match ev {
                Inbound::Message { topic, payload, .. } => (topic, payload),
                Inbound::Disconnected(e) => {
                    warn!("GPS: broker connection: {e}");
                    continue;
                }
                Inbound::Connected => continue,
            };
            let Some((lps, kind)) = self.plan.topics.parse_lps(&topic) else {
                continue;
            };
            let lps = lps.to_string();
            let cluster = self.assigned.iter().position(|a| *a == lps);
            match (kind, cluster) {
                (TopicKind::Status, Some(c)) => {
                    if self.on_status(&lps, &payload) == Some(false) && pending.contains(&c) {
                        return Err(GpsError::LpsGone {
                            lps,
                            cluster: c,
                            during: format!("waiting for its {what}"),
                        });
                    }
                }
                (TopicKind::Status, None) => {
                    if self.on_status(&lps, &payload) == Some(true) {
                        info!("GPS: LPS {lps} came after the assignment; it gets no cluster");
                        self.send_finish(&lps);
                    }
                }
                (TopicKind::Up, Some(c)) => match Envelope::<ToGps>::from_bytes(&payload) {
                    Ok(env) if env.run != self.plan.run => self.reject(
                        &lps,
                        Rejected {
                            reason: Rejection::WrongRun,
                            detail: format!("run {:?}", env.run.as_str()),
                        },
                    ),
                    Ok(env) => return Ok((c, env, payload.len() as u64)),
                    Err(e) => self.reject(&lps, e.into()),
                },
                (TopicKind::Up, None) => self.reject(
                    &lps,
                    Rejected {
                        reason: Rejection::UnknownClient,
                        detail: "not an LPS of this run".into(),
                    },
                ),
                (TopicKind::Down, _) => {}
            }
        }
    }

    /// GPS round `g`: one valid `Common` from every LPS. Returns (common part, the cluster's
    /// weight [`LpsRecord::samples`]) by cluster.
    fn collect(
        &mut self,
        g: usize,
        of: usize,
        common: &CommonLayers,
        budget: Duration,
        records: &mut [LpsRecord],
    ) -> Result<Vec<(Vec<f32>, u64)>, GpsError> {
        let mut parts: Vec<Option<(Vec<f32>, u64)>> = vec![None; self.assigned.len()];
        let deadline = Instant::now() + budget;
        let what = format!("common layers of GPS round {g}");
        loop {
            let pending: Vec<usize> = (0..parts.len()).filter(|&c| parts[c].is_none()).collect();
            if pending.is_empty() {
                break;
            }
            let (c, env, len) = self.next_upload(deadline, &pending, &what, budget)?;
            let lps = self.assigned[c].clone();
            let reject = |reason, detail: String| Rejected { reason, detail };
            match &env.body {
                ToGps::Failed { reason } => {
                    return Err(GpsError::LpsFailed {
                        lps,
                        cluster: c,
                        reason: reason.to_string(),
                    });
                }
                ToGps::Done(_) => {
                    return Err(GpsError::EarlyDone {
                        lps,
                        cluster: c,
                        gps_round: g,
                        of,
                    });
                }
                _ if env.round as usize != g => self.reject(
                    &lps,
                    reject(
                        Rejection::WrongRound,
                        format!("GPS round {}, now {g}", env.round),
                    ),
                ),
                _ if parts[c].is_some() => {
                    self.reject(&lps, reject(Rejection::Duplicate, "already sent".into()));
                }
                body => match body.common(common.len()) {
                    Ok(Some((samples, values))) => {
                        let r = &mut records[c];
                        r.up_bytes.push(len);
                        r.up_floats.push(values.len());
                        if samples != r.samples {
                            warn!(
                                "LPS {lps} reported weight {samples}; the GPS weighs cluster {c} \
                                 by its members' {}",
                                r.samples
                            );
                        }
                        if let ToGps::Common { accuracy, .. } = body {
                            r.accuracy.push(*accuracy);
                        }
                        parts[c] = Some((values, r.samples));
                    }
                    Ok(None) => self.reject(
                        &lps,
                        reject(Rejection::Unexpected, "not common layers".into()),
                    ),
                    Err(e) => {
                        let reason = match &e {
                            protocol::LpsMessageError::Protocol(p) => {
                                Rejected::from(p.clone()).reason
                            }
                            protocol::LpsMessageError::ZeroSamples
                            | protocol::LpsMessageError::BadAccuracy(_) => Rejection::NotFinite,
                            _ => Rejection::Malformed,
                        };
                        self.reject(&lps, reject(reason, e.to_string()));
                    }
                },
            }
        }
        Ok(parts.into_iter().flatten().collect())
    }

    fn collect_done(
        &mut self,
        budget: Duration,
        records: &mut [LpsRecord],
    ) -> Result<(), GpsError> {
        let deadline = Instant::now() + budget;
        loop {
            let pending: Vec<usize> = (0..records.len())
                .filter(|&c| records[c].done.is_none())
                .collect();
            if pending.is_empty() {
                return Ok(());
            }
            let (c, env, _) = self.next_upload(deadline, &pending, "final report", budget)?;
            let lps = self.assigned[c].clone();
            match env.body {
                ToGps::Done(d) => {
                    let ok = d.final_accuracy.is_none_or(|a| (0.0..=1.0).contains(&a));
                    if ok {
                        records[c].done = Some(d);
                    } else {
                        self.reject(
                            &lps,
                            Rejected {
                                reason: Rejection::NotFinite,
                                detail: format!("final accuracy {:?}", d.final_accuracy),
                            },
                        );
                    }
                }
                ToGps::Failed { reason } => {
                    return Err(GpsError::LpsFailed {
                        lps,
                        cluster: c,
                        reason: reason.to_string(),
                    });
                }
                other => self.reject(
                    &lps,
                    Rejected {
                        reason: Rejection::Unexpected,
                        detail: format!("{other:?} while waiting for the final report")
                            .chars()
                            .take(120)
                            .collect(),
                    },
                ),
            }
        }
    }

    fn send_finish(&self, lps: &str) {
        let bytes = Envelope::new(self.plan.run.clone(), u32::MAX, ToLps::Finish).to_bytes();
        if let Err(e) = self
            .link
            .publish(&self.plan.topics.lps_down(lps), bytes, false)
        {
            warn!("GPS: cannot tell LPS {lps} to finish: {e}");
        }
    }

    /// Tells every LPS it knows and every client of the run that the run is over, then
    /// disconnects.
    fn finish_all(self) {
        for lps in self.known.keys() {
            self.send_finish(lps);
        }
        let bytes = Envelope::new(self.plan.run.clone(), u32::MAX, ToClient::Finish).to_bytes();
        for c in &self.plan.clients {
            let _ = self
                .link
                .publish(&self.plan.topics.down(c), bytes.clone(), false);
        }
        self.link.disconnect();
    }
}
