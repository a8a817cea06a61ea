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
//!    ── lps/*/down: Finish, clients/*/down: Finish ──▶  exits (an LPS waits for this Finish)
//! ```
//!
//! **Crash and resume.** Round 0 is checkpointed as in any `serve` run (`checkpoint.json`), and
//! the GPS writes [`GPS_CHECKPOINT_FILE`] after the assignment and after every GPS round, each
//! time *before* it sends what it decided. After a `kill -9`, `serve --resume DIR --lps remote`
//! restores round 0 without contacting the clients (they are busy with their LPSs), sends the
//! checkpoint's last decision again (the assignments, or GPS round g's average: an LPS that had
//! it ignores it), then [`ToLps::Resend`] for GPS round g+1: an LPS already waiting for that
//! average publishes its `Common` again, one that has sent its `Done` report sends that again, and
//! one still training sends when it is done (an LPS that failed has exited, and its retained
//! `Gone` ends the resumed run). A byte-identical second copy of an accepted upload
//! is no news (not counted as a duplicate). So no upload an LPS made is lost, and the run ends as
//! an uninterrupted one with the same seed. The LPS processes must outlive the GPS's downtime
//! (their `--gps-timeout`); an LPS that dies still ends the run.
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

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow::{Break, Continue};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use edgecfl_shared::federation::{self, FederationError, Weighting};
use edgecfl_shared::hierarchy::{self, CommonLayers, HierarchyError};
use edgecfl_shared::mqtt::{Inbound, Link, LinkError};
use edgecfl_shared::protocol::{
    self, Encoding, Envelope, Id, LpsAssignment, LpsDone, ProtocolError, Tensor, ToClient, ToGps,
    ToLps, TopicKind, Topics,
};
use serde::{Deserialize, Serialize};
use tracing::{debug, info, warn};

use crate::rounds::{Inbox, Rejected, Rejection, Tally, until, wait};
use edgecfl_shared::atomic_file;

/// The GPS's checkpoint, written into `--out` after the assignment and after every GPS round,
/// before what it decided is sent ([`SavedGps`]).
pub const GPS_CHECKPOINT_FILE: &str = "gps-checkpoint.json";

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
    /// The checkpoint cannot be written, or the one to resume from does not fit this run.
    #[error("GPS checkpoint: {0}")]
    Checkpoint(String),
}

/// The GPS's state after GPS round `gps_round` (0: after the assignment), as
/// [`GPS_CHECKPOINT_FILE`]. It is written before the round's average (or the assignment) is
/// sent, so a GPS resumed from it never lacks what an LPS already received: it sends that again,
/// then asks every LPS to send again what it last sent ([`ToLps::Resend`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavedGps {
    /// The run.
    pub run_id: Id,
    /// GPS rounds completed.
    pub gps_round: usize,
    /// Assigned LPS ids, by cluster.
    pub assigned: Vec<String>,
    /// LPS id → alive, as last seen.
    pub known: BTreeMap<String, bool>,
    /// The LPSs' records so far.
    pub records: Vec<LpsRecord>,
    /// Ignored messages so far.
    pub rejected: Tally,
    /// The average of GPS round `gps_round` (none after the assignment).
    pub average: Option<Vec<f32>>,
}

impl SavedGps {
    /// Reads `dir/gps-checkpoint.json`; `None` when there is none (the run was checkpointed
    /// before its assignment).
    ///
    /// # Errors
    ///
    /// [`GpsError::Checkpoint`] for a file that cannot be read or parsed.
    pub fn read(dir: &Path) -> Result<Option<Self>, GpsError> {
        let path = dir.join(GPS_CHECKPOINT_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(GpsError::Checkpoint(format!("{}: {e}", path.display()))),
        };
        federation::from_exact_json(&text)
            .map(Some)
            .map_err(|e| GpsError::Checkpoint(format!("{}: {e}", path.display())))
    }
}

/// What the GPS needs besides its link.
#[derive(Debug, Clone)]
pub struct GpsPlan {
    /// Topics of the fleet.
    pub topics: Topics,
    /// The run id (the LPSs use it for their clients' jobs too).
    pub run: Id,
    /// The settings of the whole run.
    pub federation: federation::FederationConfig,
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
    /// Where [`GPS_CHECKPOINT_FILE`] goes (`--out`).
    pub out: PathBuf,
}

/// One LPS as the GPS saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// The checkpoint to go on from ([`Gps::resume`]).
    resume: Option<SavedGps>,
    /// Each assigned LPS's last accepted upload, by cluster: the same bytes again (an LPS
    /// answering a resumed GPS's `Resend` after its upload got through after all) are no news.
    last_upload: Vec<Option<Vec<u8>>>,
}

impl Inbox for Gps {
    fn recv_until(&self, deadline: Instant) -> Option<Inbound> {
        self.link.recv_until(deadline)
    }
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
            resume: None,
            last_upload: Vec::new(),
        }
    }

    /// A GPS that goes on from `saved` (`serve --resume` with `--lps remote`): no waiting for
    /// LPSs and no new assignment; what the checkpoint's last step decided is sent again, every
    /// assigned LPS is asked to send again what it last sent, and the run goes on with the next
    /// GPS round.
    pub fn resume(mut self, saved: SavedGps) -> Self {
        self.resume = Some(saved);
        self
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
        let gps_rounds = cfg.rounds / cfg.lps_rounds;
        let (mut records, done) = match self.resume.take() {
            Some(saved) => self.go_on_from(saved, clusters, gps_rounds, &common)?,
            None => {
                self.await_lps(clusters)?;
                (self.assign(clusters, &common)?, 0)
            }
        };
        self.last_upload = vec![None; self.assigned.len()];
        let per_round = u32::try_from(2 * cfg.lps_rounds + 1).unwrap_or(u32::MAX);
        let budget = self.plan.phase_timeout.saturating_mul(per_round);
        for g in done + 1..=gps_rounds {
            let parts = self.collect(g, gps_rounds, &common, budget, &mut records)?;
            let weighted: Vec<(&[f32], u64)> =
                parts.iter().map(|(p, w)| (p.as_slice(), *w)).collect();
            let average = hierarchy::gps_average(&common, &weighted, cfg.aggregate)?;
            let bytes = average_message(&self.plan.run, g, &average);
            for r in &mut records {
                r.down_bytes.push(bytes.len() as u64);
            }
            self.save(g, &records, Some(average))?;
            for lps in &self.assigned {
                self.link
                    .publish(&self.plan.topics.lps_down(lps), bytes.clone(), false)?;
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
        let alive = |g: &Gps| g.known.values().filter(|a| **a).count();
        // Take what is already waiting before judging, every time.
        let drain = |g: &mut Gps| {
            wait(g, Instant::now(), |g, ev| {
                g.on_idle_event(ev);
                Continue::<()>(())
            })
        };
        drain(self);
        if alive(self) >= clusters {
            return Ok(());
        }
        info!(
            "GPS: {clusters} clusters; waiting for {} more LPS processes on {}",
            clusters - alive(self),
            self.plan.topics.all_lps_status()
        );
        let enough = wait(self, deadline, |g, ev| {
            g.on_idle_event(ev);
            drain(g);
            until(alive(g) >= clusters)
        });
        enough.ok_or_else(|| GpsError::TooFewLps {
            clusters,
            got: alive(self),
            topic: self.plan.topics.all_lps_status(),
            seconds: self.plan.join_timeout.as_secs_f64(),
        })
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
        let mut records = Vec::with_capacity(clusters);
        for (c, lps) in ready.iter().take(clusters).enumerate() {
            let members = self.members(c);
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
        self.save(0, &records, None)?;
        let initial = self.initial();
        for (c, lps) in self.assigned.iter().enumerate() {
            let bytes = self.assignment_message(c, clusters, common, &initial);
            self.link
                .publish(&self.plan.topics.lps_down(lps), bytes, false)?;
            info!(
                "GPS: cluster {c} ({} clients) → LPS {lps}",
                records[c].members.len()
            );
        }
        for lps in ready.iter().skip(clusters) {
            info!("GPS: LPS {lps} gets no cluster ({clusters} clusters)");
            self.send_finish(lps);
        }
        Ok(records)
    }

    /// The client indices of cluster `c`.
    fn members(&self, c: usize) -> Vec<usize> {
        (0..self.plan.assignment.len())
            .filter(|&i| self.plan.assignment[i] == c)
            .collect()
    }

    /// θ⁰ as every `Assign` carries it.
    fn initial(&self) -> Tensor {
        let cfg = &self.plan.federation;
        let theta = edgecfl_shared::model::Params::init_for(cfg.model, cfg.classes(), cfg.seed);
        Tensor::encode(&theta.values, Encoding::F32)
    }

    /// The `Assign` message of cluster `c` (the same bytes every time), with θ⁰ `initial`.
    fn assignment_message(
        &self,
        c: usize,
        clusters: usize,
        common: &CommonLayers,
        initial: &Tensor,
    ) -> Vec<u8> {
        let cfg = &self.plan.federation;
        let assignment = LpsAssignment {
            cluster: c as u32,
            clusters: clusters as u32,
            members: self
                .members(c)
                .iter()
                .map(|&i| self.plan.clients[i].clone())
                .collect(),
            model: cfg.model,
            initial: initial.clone(),
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
            seed: federation::client_seed(cfg.seed, 0, usize::MAX - 1 - c),
            upload: self.plan.upload,
            equal_weights: cfg.weighting == Weighting::Equal,
            max_update_norm: cfg.max_update_norm,
        };
        Envelope::new(
            self.plan.run.clone(),
            0,
            ToLps::Assign(Box::new(assignment)),
        )
        .to_bytes()
    }

    /// Writes [`GPS_CHECKPOINT_FILE`] atomically: the state after GPS round `gps_round`.
    fn save(
        &self,
        gps_round: usize,
        records: &[LpsRecord],
        average: Option<Vec<f32>>,
    ) -> Result<(), GpsError> {
        let saved = SavedGps {
            run_id: self.plan.run.clone(),
            gps_round,
            assigned: self.assigned.clone(),
            known: self.known.clone(),
            records: records.to_vec(),
            rejected: self.tally.clone(),
            average,
        };
        let path = self.plan.out.join(GPS_CHECKPOINT_FILE);
        // Floats bit for bit: a resumed GPS must report what an uninterrupted one would.
        let text = federation::to_exact_json(&saved)
            .map_err(|e| GpsError::Checkpoint(format!("cannot encode: {e}")))?;
        std::fs::create_dir_all(&self.plan.out)
            .and_then(|()| atomic_file::write(&path, text.as_bytes()))
            .map_err(|e| GpsError::Checkpoint(format!("{}: {e}", path.display())))
    }

    /// Takes up the run where `saved` left it: checks that it is this run's, sends its last
    /// decision again (the assignment, or the last average) and asks every assigned LPS to send
    /// again. Returns the records and the GPS rounds done.
    fn go_on_from(
        &mut self,
        saved: SavedGps,
        clusters: usize,
        gps_rounds: usize,
        common: &CommonLayers,
    ) -> Result<(Vec<LpsRecord>, usize), GpsError> {
        let fits = saved.run_id == self.plan.run
            && saved.assigned.len() == clusters
            && saved.records.len() == clusters
            && saved.gps_round <= gps_rounds
            && saved.average.as_ref().map_or(saved.gps_round == 0, |a| {
                saved.gps_round > 0 && a.len() == common.len()
            });
        if !fits {
            return Err(GpsError::Checkpoint(format!(
                "the checkpoint (run {}, {} LPSs, GPS round {}) does not fit run {} with {clusters} \
                 clusters and {gps_rounds} GPS rounds",
                saved.run_id.as_str(),
                saved.assigned.len(),
                saved.gps_round,
                self.plan.run.as_str()
            )));
        }
        let g = saved.gps_round;
        self.known = saved.known;
        self.assigned = saved.assigned;
        self.tally = saved.rejected;
        let initial = self.initial();
        let last = |c: usize| match &saved.average {
            Some(a) => average_message(&self.plan.run, g, a),
            None => self.assignment_message(c, clusters, common, &initial),
        };
        let resend = Envelope::new(self.plan.run.clone(), (g + 1) as u32, ToLps::Resend).to_bytes();
        for (c, lps) in self.assigned.iter().enumerate() {
            let topic = self.plan.topics.lps_down(lps);
            self.link.publish(&topic, last(c), false)?;
            self.link.publish(&topic, resend.clone(), false)?;
        }
        for lps in self.known.keys() {
            if !self.assigned.contains(lps) {
                self.send_finish(lps);
            }
        }
        info!(
            "GPS: resumed after GPS round {g} of {gps_rounds}; sent the {} again and asked the \
             {} LPSs to send again",
            if g == 0 {
                "assignments"
            } else {
                "last average"
            },
            self.assigned.len()
        );
        Ok((saved.records, g))
    }

    /// Waits until every assigned LPS has sent its `what` (`judge` takes each upload of an
    /// assigned LPS, with its cluster, and says whether it was that), or `budget` passed: then an
    /// error names the silent ones. A `Gone` of an LPS still awaited, and the judge's errors, end
    /// the run. A status `Hello` of an LPS without a cluster gets it a `Finish`.
    fn await_uploads(
        &mut self,
        what: &str,
        budget: Duration,
        mut judge: impl FnMut(&mut Self, usize, Envelope<ToGps>, Vec<u8>) -> Result<bool, GpsError>,
    ) -> Result<(), GpsError> {
        let mut pending: BTreeSet<usize> = (0..self.assigned.len()).collect();
        if pending.is_empty() {
            return Ok(());
        }
        let deadline = Instant::now() + budget;
        let ended = wait(self, deadline, |g, ev| {
            let Inbound::Message { topic, payload, .. } = ev else {
                if let Inbound::Disconnected(e) = ev {
                    warn!("GPS: broker connection: {e}");
                }
                return Continue(());
            };
            let Some((lps, kind)) = g.plan.topics.parse_lps(&topic) else {
                return Continue(());
            };
            let lps = lps.to_string();
            let cluster = g.assigned.iter().position(|a| *a == lps);
            match (kind, cluster) {
                (TopicKind::Status, Some(c)) => {
                    if g.on_status(&lps, &payload) == Some(false) && pending.contains(&c) {
                        return Break(Err(GpsError::LpsGone {
                            lps,
                            cluster: c,
                            during: format!("waiting for its {what}"),
                        }));
                    }
                }
                (TopicKind::Status, None) => {
                    if g.on_status(&lps, &payload) == Some(true) {
                        info!("GPS: LPS {lps} came after the assignment; it gets no cluster");
                        g.send_finish(&lps);
                    }
                }
                (TopicKind::Up, Some(c)) if g.last_upload[c].as_ref() == Some(&payload) => {
                    debug!("GPS: LPS {lps} sent its last upload again");
                }
                (TopicKind::Up, Some(c)) => match Envelope::<ToGps>::from_bytes(&payload) {
                    Ok(env) if env.run != g.plan.run => g.reject(
                        &lps,
                        Rejected {
                            reason: Rejection::WrongRun,
                            detail: format!("run {:?}", env.run.as_str()),
                        },
                    ),
                    Ok(env) => match judge(g, c, env, payload) {
                        Ok(true) => {
                            pending.remove(&c);
                        }
                        Ok(false) => {}
                        Err(e) => return Break(Err(e)),
                    },
                    Err(e) => g.reject(&lps, e.into()),
                },
                (TopicKind::Up, None) => g.reject(
                    &lps,
                    Rejected {
                        reason: Rejection::UnknownClient,
                        detail: "not an LPS of this run".into(),
                    },
                ),
                (TopicKind::Down, _) => {}
            }
            until(pending.is_empty()).map_break(Ok)
        });
        ended.unwrap_or_else(|| {
            let silent: Vec<String> = pending
                .iter()
                .map(|&c| format!("{} (cluster {c})", self.assigned[c]))
                .collect();
            Err(GpsError::Timeout {
                lps: silent.join(", "),
                what: what.into(),
                seconds: budget.as_secs_f64(),
            })
        })
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
        let what = format!("common layers of GPS round {g}");
        self.await_uploads(&what, budget, |gps, c, env, payload| {
            let lps = gps.assigned[c].clone();
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
                _ if env.round as usize != g => gps.reject(
                    &lps,
                    reject(
                        Rejection::WrongRound,
                        format!("GPS round {}, now {g}", env.round),
                    ),
                ),
                _ if parts[c].is_some() => {
                    gps.reject(&lps, reject(Rejection::Duplicate, "already sent".into()));
                }
                body => match body.common(common.len()) {
                    Ok(Some((samples, values))) => {
                        let r = &mut records[c];
                        r.up_bytes.push(payload.len() as u64);
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
                        gps.last_upload[c] = Some(payload);
                        return Ok(true);
                    }
                    Ok(None) => gps.reject(
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
                        gps.reject(&lps, reject(reason, e.to_string()));
                    }
                },
            }
            Ok(false)
        })?;
        Ok(parts.into_iter().flatten().collect())
    }

    fn collect_done(
        &mut self,
        budget: Duration,
        records: &mut [LpsRecord],
    ) -> Result<(), GpsError> {
        self.await_uploads("final report", budget, |gps, c, env, _| {
            let lps = gps.assigned[c].clone();
            match env.body {
                ToGps::Done(d) if d.final_accuracy.is_none_or(|a| (0.0..=1.0).contains(&a)) => {
                    records[c].done = Some(d);
                    return Ok(true);
                }
                ToGps::Done(d) => gps.reject(
                    &lps,
                    Rejected {
                        reason: Rejection::NotFinite,
                        detail: format!("final accuracy {:?}", d.final_accuracy),
                    },
                ),
                ToGps::Failed { reason } => {
                    return Err(GpsError::LpsFailed {
                        lps,
                        cluster: c,
                        reason: reason.to_string(),
                    });
                }
                other => gps.reject(
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
            Ok(false)
        })
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

/// The average of GPS round `g` as sent to every LPS.
fn average_message(run: &Id, g: usize, average: &[f32]) -> Vec<u8> {
    Envelope::new(
        run.clone(),
        g as u32,
        ToLps::Common {
            values: Tensor::encode(average, Encoding::F32),
        },
    )
    .to_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A checkpoint reads back bit for bit (the average and the reported accuracies weigh in the
    /// resumed run's result), and a directory without one reads as "not assigned yet".
    #[test]
    fn checkpoint_reads_back_exactly() {
        let dir = std::env::temp_dir().join(format!("edgecfl-gps-ckpt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let _ = std::fs::remove_file(dir.join(GPS_CHECKPOINT_FILE));
        assert!(SavedGps::read(&dir).unwrap().is_none());
        let average = vec![0.1f32, -1e-40, f32::MIN_POSITIVE, 1.0 / 3.0, 12345.679];
        let record = LpsRecord {
            id: "lps-a".into(),
            cluster: 0,
            members: vec!["c0".into(), "c2".into()],
            samples: 1200,
            up_bytes: vec![100_527],
            up_floats: vec![25_120],
            down_bytes: vec![100_520],
            accuracy: vec![Some(0.1 + 0.2), None],
            done: None,
        };
        let saved = SavedGps {
            run_id: protocol::id("run-x").unwrap(),
            gps_round: 1,
            assigned: vec!["lps-a".into()],
            known: [("lps-a".to_string(), true), ("lps-z".to_string(), false)].into(),
            records: vec![record],
            rejected: Tally::default(),
            average: Some(average.clone()),
        };
        let text = federation::to_exact_json(&saved).unwrap();
        std::fs::write(dir.join(GPS_CHECKPOINT_FILE), text).unwrap();
        let back = SavedGps::read(&dir).unwrap().unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(back.average.as_deref().unwrap()), bits(&average));
        assert_eq!(back.records[0].accuracy, vec![Some(0.1 + 0.2), None]);
        assert_eq!(back.known, saved.known);
        assert_eq!((back.gps_round, back.run_id), (1, saved.run_id));
        // A damaged file is an error, not a fresh start.
        std::fs::write(dir.join(GPS_CHECKPOINT_FILE), "{\"gps_round\": 1").unwrap();
        assert!(matches!(SavedGps::read(&dir), Err(GpsError::Checkpoint(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
