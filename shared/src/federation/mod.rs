//! The federation's round loop over an abstract pool of clients, and the interface every method
//! implements ([`Strategy`]).
//!
//! The loop is the same whether the clients are in this process ([`crate::sim::SimPool`]) or edge
//! devices behind a broker (the coordinator's MQTT pool): it only talks to a [`ClientPool`], in the
//! vocabulary of [`Job`]s and [`Answer`]s. What happens in each phase is the method's: each lives
//! in one file under [`crate::algorithms`] and implements [`Strategy`].
//!
//! ```text
//!   ┌──────────────┐  Strategy::init: the one-shot clustering (FedClust, MT-HFL, AdaCFL),
//!   │ 0. Clustering │  K-means initialisation (FeSEM), or a fixed start (FedAvg: one cluster,
//!   └──────┬───────┘  Local: one per client, StoCFL: singletons, IFCA: K models)
//!          ▼
//!   ┌──────────────┐  newcomers the pool hands over are placed first (Strategy::place); then
//!   │               │  sample max(⌊frac·N⌋, 1) clients; Strategy::round asks them for their
//!   │ t. Training   │  work (jobs) and turns the answers into cluster models and (re)assignments
//!   └──────┬───────┘  (cluster FedAvg; FeSEM's EM step; StoCFL's merges; CFL's splits; IFCA)
//!          ▼
//!   ┌──────────────┐  hierarchical runs (MT-HFL always, others with `hierarchy`), every
//!   │ t. GPS        │  `lps_rounds` rounds: the common layers of the cluster models are averaged,
//!   └──────┬───────┘  weighted by the clusters' sample counts ([`crate::hierarchy`])
//!          ▼
//!   ┌──────────────┐  Strategy::before_evaluation (IFCA: every client picks its model); every
//!   │ t. Evaluation │  client's local test accuracy under its cluster's model; the round's
//!   └──────┬───────┘  figure is the unweighted mean over clients (and per cluster, and per
//!          │          ground-truth task when known)
//!          └──── t < T ──▶ Training
//! ```
//!
//! Why a trait and not an enum of phases: the methods differ in the state they carry between
//! rounds (StoCFL's Ψ store and global model, CFL's split history, FeSEM's centres), and in how
//! many exchanges a round takes (StoCFL asks newly sampled clients for Ψ, merges, then trains).
//! A trait object keeps each method's state private to its file and lets a round be any sequence
//! of exchanges, while the driver keeps what every method shares: sampling, newcomer
//! bookkeeping, the GPS step, evaluation, records and byte counts. Adding a method is one file
//! and one line in [`crate::algorithms::Algorithm`]: this module knows no method by name, and
//! the registry hands the loop a [`Plan`] (the loop's settings and a [`Strategy`]).
//!
//! Seeds: the initial model comes from `seed`, the client sample of round t from `(seed, t)`,
//! and client i's sample order in round t from [`client_seed`]`(seed, t, i)`, so a distributed
//! run reproduces an in-process one.
//!
//! Positions and indices: the driver and the methods address clients by their *position* in
//! the run's client list ([`Env::clients`]); the pool knows them by `index`. The two are equal
//! for round-0 clients and differ only after a newcomer was dropped. [`Env::run`] translates.

mod checkpoint;
mod config;
mod driver;
mod pool;
mod result;

pub use crate::jobs::{Answer, Job, LabelStats, Prox, Training, Update};
pub use crate::train::LocalTest;
pub use checkpoint::{
    CHECKPOINT_VERSION, Checkpoint, config_differences, from_exact_json, same_config, to_exact_json,
};
pub(crate) use checkpoint::{bad_state, check_model, strategy_state};
#[cfg(feature = "cli")]
pub use config::FederationFlags;
pub(crate) use config::non_negative;
pub use config::{FederationConfig, NormBound, Sampling, Weighting, client_seed};
pub use driver::{run, run_lps, run_resumable};
pub use pool::{ClientInfo, ClientPool, PoolError};
pub use result::{
    DroppedNewcomer, DroppedUpdate, Newcomer, NewcomerError, Observer, Quiet, RoundRecord,
    RunResult, UpdateRejection,
};

use std::collections::HashMap;

use crate::aggregate::{Aggregate, AggregateError, aggregate_models};
use crate::cluster::clustering::{Clustering, ClusteringError};
use crate::cluster::distance::CondensedMatrix;
use crate::cluster::spectral::SpectralError;
use crate::data::partition::Partition;
use crate::hierarchy::HierarchyError;
use crate::jobs::encoded_len;
use crate::model::{ModelError, Params};
use crate::train::Backend;

/// Errors of a federation run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FederationError {
    /// Bad configuration.
    #[error("configuration: {0}")]
    Config(String),
    /// The pool has no client.
    #[error("no client to federate")]
    NoClients,
    /// Clustering failed.
    #[error("clustering: {0}")]
    Clustering(#[from] ClusteringError),
    /// Aggregation failed.
    #[error("aggregation: {0}")]
    Aggregate(#[from] AggregateError),
    /// A model was malformed.
    #[error("model: {0}")]
    Model(#[from] ModelError),
    /// The pool failed (transport, an in-process client's training).
    #[error("client pool: {0}")]
    Pool(#[from] PoolError),
    /// Too few signatures arrived to cluster.
    #[error("only {got} of {expected} clients sent their round-0 signature")]
    TooFewSignatures {
        /// Clients asked.
        expected: usize,
        /// Signatures received.
        got: usize,
    },
    /// Too few relevance rows arrived to cluster (MT-HFL, relevance on the clients).
    #[error("only {got} of {expected} clients sent their relevance row")]
    TooFewRows {
        /// Clients asked.
        expected: usize,
        /// Rows received.
        got: usize,
    },
    /// MT-HFL's clustering step failed (bad signatures or rows).
    #[error("MT-HFL: {0}")]
    MtHfl(#[from] SpectralError),
    /// The GPS step failed.
    #[error("hierarchy: {0}")]
    Hierarchy(#[from] HierarchyError),
    /// The exchange with a GPS in another process failed (see [`GpsLink`]).
    #[error("GPS: {0}")]
    Gps(Box<dyn std::error::Error + Send + Sync>),
    /// No sampled client answered in a training round. The round does not count: nothing of it
    /// is recorded or checkpointed, so the checkpoint of the round before stays the one to
    /// resume from.
    #[error(
        "round {round}: none of the {sampled} sampled clients answered; the round is not counted"
    )]
    NoAnswers {
        /// The round that got no answer.
        round: usize,
        /// Clients asked in it.
        sampled: usize,
    },
}

/// What the round loop knows besides the configuration and the pool: the ground truth (only used
/// to score the run, never to decide anything) and the backend of the coordinator's own tensor
/// work (server-side relevance).
#[derive(Debug, Clone, Default)]
pub struct RunContext {
    /// Ground-truth group (task) of each client, when known.
    pub truth: Option<Vec<usize>>,
    /// The labels of each ground-truth group (`groups:`, `tasks:`), for per-task accuracy.
    pub task_labels: Option<Vec<Vec<u8>>>,
    /// Backend of the server-side relevance ([`server_rows`](crate::cluster::spectral::server_rows)).
    pub backend: Backend,
}

impl RunContext {
    /// The ground truth of a partition (none for partitions without groups).
    pub fn of_partition(partition: &Partition) -> Self {
        RunContext {
            truth: partition.truth.clone(),
            task_labels: partition.spec.task_labels(),
            backend: Backend::default(),
        }
    }

    /// Ground-truth groups only.
    pub fn with_truth(truth: Vec<usize>) -> Self {
        RunContext {
            truth: Some(truth),
            ..RunContext::default()
        }
    }
}

/// A run as the round loop takes it: the loop's settings and the method that runs in it. The
/// method registry builds one ([`crate::algorithms::MethodConfig::plan`]); this module knows no
/// method by name.
pub struct Plan<'a> {
    /// The round loop's settings.
    pub cfg: &'a FederationConfig,
    /// The method's command-line name (records, messages).
    pub method: &'static str,
    /// The method.
    pub strategy: Box<dyn Strategy>,
    /// Whether the clusters train as LPSs under a GPS (`cfg.hierarchy`, or a method that always
    /// does).
    pub hierarchical: bool,
    /// The run's whole configuration as written (the loop's settings, the method and its own
    /// settings): every [`Checkpoint`] carries it, and a resumed run must bring the same.
    pub config: serde_json::Value,
}

impl std::fmt::Debug for Plan<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("method", &self.method)
            .field("hierarchical", &self.hierarchical)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// An LPS's link to a GPS in another process (`coordinator lps`): [`run_lps`] calls it every
/// `lps_rounds` rounds instead of averaging the cluster models in process.
///
/// ```text
///   round loop of one LPS            GpsLink            GPS
///   FedAvg round t (t % L = 0) ─▶ exchange(g, common part, N_c, acc) ─▶ Σ N_c θ_c / Σ N_c
///   insert the average        ◀── average of the common layers ◀────────────┘
/// ```
pub trait GpsLink {
    /// Sends this LPS's common layers after GPS round `gps_round`'s local rounds (1-based),
    /// with its cluster's training samples (its weight) and its latest mean accuracy, and
    /// returns the GPS average of the common layers (`common.len()` floats).
    ///
    /// # Errors
    ///
    /// [`FederationError::Gps`] when the GPS does not answer, failed, or sent a bad average.
    fn exchange(
        &mut self,
        gps_round: usize,
        common: &[f32],
        samples: u64,
        accuracy: Option<f64>,
    ) -> Result<Vec<f32>, FederationError>;
}

/// One federation method: what clients compute and upload in each phase, how the server turns
/// the uploads into cluster models and (re)assignments, and how a newcomer is placed. See the
/// module docs for where each call sits in a run.
pub trait Strategy {
    /// Round 0: the initial clusters and their models (one-shot methods cluster here).
    ///
    /// # Errors
    ///
    /// A pool failure, or too few answers to cluster.
    fn init(&mut self, env: &mut Env<'_>) -> Result<Init, FederationError>;

    /// Training round `round` over the `sampled` clients (positions, ascending): asks them for
    /// their work through [`Env::run`] and updates `state`. The default is the cluster-wise
    /// FedAvg round ([`fedavg_round`]), which FedAvg, Local, FedClust, AdaCFL, MT-HFL and random
    /// groups run as it is.
    ///
    /// # Errors
    ///
    /// A pool failure, or an aggregation that cannot be done.
    fn round(
        &mut self,
        env: &mut Env<'_>,
        round: usize,
        sampled: &[usize],
        state: &mut Clusters,
    ) -> Result<RoundStats, FederationError> {
        fedavg_round(env, round, sampled, state)
    }

    /// Places the clients `fresh` (already at positions `state.assignment.len()..` of
    /// [`Env::clients`]) that joined at the start of training round `round`; one result per
    /// client, in order. The default turns every newcomer away as unsupported.
    ///
    /// # Errors
    ///
    /// Only a pool failure; a newcomer that cannot be placed gets its [`NewcomerError`].
    fn place(
        &mut self,
        env: &mut Env<'_>,
        round: usize,
        fresh: &[ClientInfo],
        state: &Clusters,
    ) -> Result<Vec<Result<Placement, NewcomerError>>, FederationError> {
        let _ = (round, state);
        Ok(fresh
            .iter()
            .map(|_| Err(NewcomerError::Unsupported(env.method.to_string())))
            .collect())
    }

    /// Called before each evaluation (IFCA: every client picks the model it is evaluated with).
    /// The default does nothing.
    ///
    /// # Errors
    ///
    /// A pool failure.
    fn before_evaluation(
        &mut self,
        env: &mut Env<'_>,
        round: usize,
        state: &mut Clusters,
    ) -> Result<(), FederationError> {
        let _ = (env, round, state);
        Ok(())
    }

    /// The method's own state after a round, beyond the clusters and their models, for a
    /// [`Checkpoint`]; `None` (the default) when the method cannot be resumed.
    fn save(&self) -> Option<serde_json::Value> {
        None
    }

    /// Takes back what [`Strategy::save`] returned, instead of [`Strategy::init`], to resume a
    /// run.
    ///
    /// # Errors
    ///
    /// [`FederationError::Config`] when the method cannot be resumed (the default) or `state` is
    /// not its.
    fn restore(&mut self, state: serde_json::Value) -> Result<(), FederationError> {
        let _ = state;
        Err(FederationError::Config(
            "this method cannot resume from a checkpoint".into(),
        ))
    }
}

/// [`Strategy::save`] and [`Strategy::restore`] of a method whose state is its configuration
/// only (everything else is in the clusters and their models).
#[macro_export]
#[doc(hidden)]
macro_rules! stateless_resume {
    () => {
        fn save(&self) -> Option<serde_json::Value> {
            Some(serde_json::Value::Null)
        }

        fn restore(
            &mut self,
            _state: serde_json::Value,
        ) -> Result<(), $crate::federation::FederationError> {
            Ok(())
        }
    };
}

/// The round-0 uploads `got` of `n` clients (position, upload), in position order, and the
/// positions with none. A one-shot method clusters the clients that answered and reports the
/// others in [`Init::absent`]: on a fleet a client may die during round 0, and the run goes on
/// without it (it is named in the summary, as a client lost in a later round is).
///
/// # Errors
///
/// [`FederationError::TooFewSignatures`] when fewer than two clients answered (one when the
/// run has one client): there is nothing to cluster.
pub fn round0_uploads<T>(
    n: usize,
    mut got: Vec<(usize, T)>,
) -> Result<(Vec<T>, Vec<usize>), FederationError> {
    got.sort_by_key(|(p, _)| *p);
    got.dedup_by_key(|(p, _)| *p);
    if got.len() < n.min(2) {
        return Err(FederationError::TooFewSignatures {
            expected: n,
            got: got.len(),
        });
    }
    let mut absent = Vec::new();
    let mut next = 0;
    for (p, _) in &got {
        absent.extend(next..*p);
        next = p + 1;
    }
    absent.extend(next..n);
    Ok((got.into_iter().map(|(_, u)| u).collect(), absent))
}

/// What [`Strategy::init`] found.
#[derive(Debug, Clone)]
pub struct Init {
    /// Cluster of each round-0 client that sent its round-0 upload, by position, leaving out
    /// those in `absent`.
    pub assignment: Vec<usize>,
    /// Positions of the round-0 clients that sent no round-0 upload (dropped out, timed out, or
    /// sent a malformed one): the run goes on without them (see [`round0_uploads`]).
    pub absent: Vec<usize>,
    /// One model per cluster.
    pub models: Vec<Params>,
    /// The one-shot clustering, when there is one (reported, plotted, scored).
    pub clustering: Option<Clustering>,
    /// The distances the clustering cut (FedClust), or `1 − R` (MT-HFL).
    pub distances: Option<CondensedMatrix>,
    /// MT-HFL's symmetrised relevance matrix.
    pub relevance: Option<Vec<Vec<f64>>>,
    /// Floats each client uploaded for clustering.
    pub signature_len: usize,
    /// Payload bytes of that upload.
    pub signature_bytes: usize,
    /// Whether `assignment` is a clustering to score against the ground truth (ARI).
    pub clusters_found: bool,
}

impl Init {
    /// Clusters given by `assignment`, every cluster starting from `initial`, nothing uploaded.
    pub fn plain(assignment: Vec<usize>, initial: &Params, clusters_found: bool) -> Self {
        let k = assignment.iter().max().map_or(0, |m| m + 1);
        Init {
            assignment,
            absent: Vec::new(),
            models: vec![initial.clone(); k],
            clustering: None,
            distances: None,
            relevance: None,
            signature_len: 0,
            signature_bytes: 0,
            clusters_found,
        }
    }
}

/// What a training round did, for its [`RoundRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RoundStats {
    /// Clients asked to train.
    pub sampled: usize,
    /// Valid updates received.
    pub received: usize,
    /// Mean last-epoch training loss of the received updates (0 when none).
    pub train_loss: f64,
}

/// Where a newcomer goes.
#[derive(Debug, Clone)]
pub struct Placement {
    /// An existing cluster, or a new one with its starting model.
    pub target: Target,
    /// Distance of its upload to the cluster's representative, where the method measures one.
    pub distance: Option<f64>,
}

impl Placement {
    /// Every one of `n` newcomers into cluster `c` (FedAvg, FedProx: the one cluster).
    pub fn all_in(n: usize, c: usize) -> Vec<Result<Placement, NewcomerError>> {
        (0..n)
            .map(|_| {
                Ok(Placement {
                    target: Target::Cluster(c),
                    distance: None,
                })
            })
            .collect()
    }
}

/// The cluster a newcomer joins.
#[derive(Debug, Clone)]
pub enum Target {
    /// Cluster `c`.
    Cluster(usize),
    /// A new cluster starting from this model.
    New(Params),
}

/// The clusters every method has: who is in which, and each cluster's model. Owned by the
/// driver, changed by the methods; every change of a model is tracked so that only clients whose
/// model changed are evaluated again.
#[derive(Debug, Clone)]
pub struct Clusters {
    assignment: Vec<usize>,
    models: Vec<Params>,
    version: Vec<u64>,
    next_version: u64,
}

impl Clusters {
    /// Clusters restored from a [`Checkpoint`] (checked there).
    pub(crate) fn from_parts(
        assignment: Vec<usize>,
        models: Vec<Params>,
        version: Vec<u64>,
        next_version: u64,
    ) -> Self {
        Clusters {
            assignment,
            models,
            version,
            next_version,
        }
    }

    /// The version of every cluster model and the next version number (for a [`Checkpoint`]).
    pub(crate) fn versions(&self) -> (Vec<u64>, u64) {
        (self.version.clone(), self.next_version)
    }

    /// Clusters from an assignment (by position) and one model per cluster.
    pub fn new(assignment: Vec<usize>, models: Vec<Params>) -> Self {
        let version = (0..models.len() as u64).collect();
        let next_version = models.len() as u64;
        Clusters {
            assignment,
            models,
            version,
            next_version,
        }
    }

    /// Cluster of each client, by position.
    pub fn assignment(&self) -> &[usize] {
        &self.assignment
    }

    /// The cluster models.
    pub fn models(&self) -> &[Params] {
        &self.models
    }

    /// Number of clusters.
    pub fn len(&self) -> usize {
        self.models.len()
    }

    /// True without clusters.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }

    /// The model of client `p`'s cluster.
    pub fn model_of(&self, p: usize) -> &Params {
        &self.models[self.assignment[p]]
    }

    /// Members (positions) of cluster `c`, ascending.
    pub fn members(&self, c: usize) -> Vec<usize> {
        (0..self.assignment.len())
            .filter(|&p| self.assignment[p] == c)
            .collect()
    }

    /// A version of cluster `c`'s model that changes whenever the model does.
    pub fn version(&self, c: usize) -> u64 {
        self.version[c]
    }

    fn bump(&mut self, c: usize) {
        self.version[c] = self.next_version;
        self.next_version += 1;
    }

    /// Replaces cluster `c`'s model.
    pub fn set_model(&mut self, c: usize, model: Params) {
        self.models[c] = model;
        self.bump(c);
    }

    /// Marks every model as changed (after an in-place change such as the GPS step).
    pub fn touch_all(&mut self) {
        for c in 0..self.models.len() {
            self.bump(c);
        }
    }

    /// Mutable access to every model; marks them all as changed.
    pub fn models_mut(&mut self) -> &mut [Params] {
        self.touch_all();
        &mut self.models
    }

    /// Adds a cluster with `model`; returns its number.
    pub fn push_cluster(&mut self, model: Params) -> usize {
        self.models.push(model);
        self.version.push(self.next_version);
        self.next_version += 1;
        self.models.len() - 1
    }

    /// Adds a client (the next position) to cluster `c`.
    pub fn push_client(&mut self, c: usize) {
        self.assignment.push(c);
    }

    /// Moves client `p` to cluster `c`.
    pub fn assign(&mut self, p: usize, c: usize) {
        self.assignment[p] = c;
    }

    /// Replaces everything (merges, splits): clusters whose model is bitwise unchanged keep
    /// their version when the same model sits at the same number.
    pub fn replace(&mut self, assignment: Vec<usize>, models: Vec<Params>) {
        let mut version = Vec::with_capacity(models.len());
        for (c, m) in models.iter().enumerate() {
            match self.models.get(c) {
                Some(old) if old == m => version.push(self.version[c]),
                _ => {
                    version.push(self.next_version);
                    self.next_version += 1;
                }
            }
        }
        self.assignment = assignment;
        self.models = models;
        self.version = version;
    }

    /// Training samples of each cluster's members (the GPS weights).
    pub fn samples(&self, clients: &[ClientInfo]) -> Vec<u64> {
        let mut s = vec![0u64; self.models.len()];
        for (p, &c) in self.assignment.iter().enumerate() {
            s[c] += clients[p].samples;
        }
        s
    }

    /// Cluster FedAvg: each cluster with at least one update becomes the aggregate `how` (the
    /// sample-weighted average for [`Aggregate::Mean`]) of its members' updates
    /// (`(position, update)`, in the order given), each trained from the cluster's model; the
    /// others keep their model.
    ///
    /// # Errors
    ///
    /// [`FederationError::Aggregate`] for updates of mismatched shapes.
    pub fn fedavg(
        &mut self,
        updates: &[(usize, Update)],
        how: Aggregate,
    ) -> Result<(), FederationError> {
        for c in 0..self.models.len() {
            let mine: Vec<(&Params, u64)> = updates
                .iter()
                .filter(|(p, _)| self.assignment[*p] == c)
                .map(|(_, u)| (&u.params, u.samples))
                .collect();
            if mine.is_empty() {
                continue;
            }
            let next = aggregate_models(&mine, how, &self.models[c].values)?;
            self.set_model(c, next);
        }
        Ok(())
    }
}

/// What a method sees of the run: the configuration, the context, the clients, the initial
/// model, and the pool (through [`Env::run`], which counts the traffic and keeps only valid
/// answers to the jobs asked).
pub struct Env<'a> {
    /// The configuration.
    pub cfg: &'a FederationConfig,
    /// The method's name ([`Plan::method`]).
    pub method: &'static str,
    /// Ground truth (scoring only) and the coordinator's backend.
    pub ctx: &'a RunContext,
    /// The run's clients, by position.
    pub clients: &'a [ClientInfo],
    /// θ⁰: the model every method starts from.
    pub initial: &'a Params,
    pool: &'a mut dyn ClientPool,
    position: &'a HashMap<usize, usize>,
    traffic: &'a mut Traffic,
}

/// Floats and message bytes moved, both ways, and the trained models [`Env::run`] dropped.
#[derive(Debug, Clone, Default)]
pub(crate) struct Traffic {
    pub(crate) down: u64,
    pub(crate) up: u64,
    pub(crate) bytes_down: u64,
    pub(crate) bytes_up: u64,
    pub(crate) dropped: Vec<DroppedUpdate>,
    /// Answers heard from the clients asked (valid or not), over the run of this process: the
    /// round loop compares it before and after a round to tell a round nobody answered.
    pub(crate) answers: u64,
}

impl Traffic {
    /// Counts the messages of `job` sent to one client: its command and `relay` bytes (MT-HFL's
    /// relay, a broadcast received by each client asked; 0 for every other job).
    fn send(&mut self, job: &Job<'_>, upload: crate::protocol::Encoding, relay: u64) {
        self.down += job.floats_down() as u64;
        if let Ok(cmd) = job.command(upload) {
            self.bytes_down += encoded_len(&cmd);
        }
        if matches!(job, Job::Relevance(_)) {
            self.bytes_down += relay;
        }
    }
}

impl Env<'_> {
    /// Client `p`'s seed for round `round` ([`client_seed`] of its pool index).
    pub fn seed(&self, round: usize, p: usize) -> u64 {
        client_seed(self.cfg.seed, round, self.clients[p].index)
    }

    /// The local-training settings of client `p` in round `round` (`cfg.epochs`).
    pub fn train_config(&self, round: usize, p: usize) -> crate::train::TrainConfig {
        self.cfg.train_config(self.seed(round, p))
    }

    /// The encoding the clients upload models, layers and gradients in ([`ClientPool::upload`]):
    /// a method counts its round-0 upload's bytes with it.
    pub fn upload(&self) -> crate::protocol::Encoding {
        self.pool.upload()
    }

    /// Runs `jobs` (by position) in round `round` and returns the valid answers by position, in
    /// the order the pool gave them. An answer is dropped when it is from a client not asked, of
    /// the wrong kind for its job, a second answer, or a model of the wrong architecture or size
    /// or with zero samples. A trained model that passes these checks is still dropped, and
    /// recorded as a [`DroppedUpdate`], when it claims more samples than its client declared when
    /// it joined ([`ClientInfo::samples`]) or when its change from the model it was sent is above
    /// [`FederationConfig::max_update_norm`] (for [`NormBound::Median`], a multiple of the median
    /// change of the well-formed updates of this call). With [`Weighting::Equal`] every kept model's samples
    /// become 1.
    ///
    /// # Errors
    ///
    /// [`FederationError::Pool`] when the pool fails.
    pub fn run(
        &mut self,
        round: usize,
        jobs: Vec<(usize, Job<'_>)>,
    ) -> Result<Vec<(usize, Answer)>, FederationError> {
        let by_index: Vec<(usize, Job<'_>)> = jobs
            .into_iter()
            .map(|(p, j)| (self.clients[p].index, j))
            .collect();
        let upload = self.pool.upload();
        // The relay is the same for every relevance job of a call (every client's signature):
        // built once, not once per client.
        let relay = by_index
            .iter()
            .find_map(|(_, j)| j.broadcast().ok().flatten())
            .map_or(0, |b| encoded_len(&b.message));
        for (_, j) in &by_index {
            self.traffic.send(j, upload, relay);
        }
        let mut answers = self.pool.run(round, &by_index)?;
        // In client order, not arrival order: the averages (float sums) of a run over a network
        // are then the same in every run with the same seed (and after a resume).
        answers.sort_by_key(|(index, _)| *index);
        let expected_len = self.initial.values.len();
        let model = self.cfg.model;
        let equal = self.cfg.weighting == Weighting::Equal;
        let clients = self.clients;
        // A model of the run's architecture and size, trained on at least one sample.
        let well_formed = |u: &Update| {
            u.params.model == model && u.params.values.len() == expected_len && u.samples > 0
        };
        // The answers this call keeps looking at: from a client asked, of its job's kind, the
        // first; with the models they trained, each of the run's architecture and size and
        // trained on at least one sample.
        let mut seen = std::collections::HashSet::new();
        let mut kept = Vec::with_capacity(answers.len());
        for (index, mut answer) in answers {
            let Some(&p) = self.position.get(&index) else {
                continue;
            };
            let Some((_, job)) = by_index.iter().find(|(i, _)| *i == index) else {
                continue;
            };
            if !job.accepts(&answer) || !seen.insert(index) {
                continue;
            }
            self.traffic.answers += 1;
            // The message as it came (before the checks below and `Weighting::Equal`).
            if let Ok(msg) = job.reply(&answer, upload) {
                self.traffic.bytes_up += encoded_len(&msg);
            }
            // Every trained model of the run's architecture and size, trained on at least one
            // sample (the bounds on its samples and its change come below).
            let Some(trained) = job.trained(&mut answer) else {
                continue;
            };
            if !trained.iter().all(|(_, u)| well_formed(u)) {
                continue;
            }
            let norms: Vec<f64> = trained
                .iter()
                .map(|(sent, u)| change_norm(&u.params.values, &sent.values))
                .collect();
            kept.push((p, job, answer, norms));
        }
        // The bound of this call: for `median:M`, M times the median change of its updates.
        let all: Vec<f64> = kept
            .iter()
            .flat_map(|(.., n)| n.iter().copied())
            .filter(|n| !n.is_nan())
            .collect();
        let bound = self
            .cfg
            .max_update_norm
            .bound(crate::cluster::robust::median(&all));
        // Trained on no more samples than the client declared, and not too far from `sent`.
        let trusted = |u: &Update, norm: f64| -> Result<(), UpdateRejection> {
            let declared = clients[u.client].samples;
            if u.samples > declared {
                return Err(UpdateRejection::TooManySamples {
                    samples: u.samples,
                    declared,
                });
            }
            if let Some(bound) = bound
                && (norm.is_nan() || norm > bound)
            {
                return Err(UpdateRejection::NormAbove { norm, bound });
            }
            Ok(())
        };
        let mut out = Vec::with_capacity(kept.len());
        for (p, job, mut answer, norms) in kept {
            let Some(mut trained) = job.trained(&mut answer) else {
                continue;
            };
            for (_, u) in &mut trained {
                u.client = p;
            }
            if let Err(reason) = trained
                .iter()
                .zip(&norms)
                .try_for_each(|((_, u), &norm)| trusted(u, norm))
            {
                self.traffic.dropped.push(DroppedUpdate {
                    client: clients[p].id.clone(),
                    round,
                    reason,
                });
                continue;
            }
            if equal {
                for (_, u) in trained {
                    u.samples = 1;
                }
            }
            self.traffic.up += answer.floats_up() as u64;
            out.push((p, answer));
        }
        Ok(out)
    }
}

/// ‖a − b‖₂, summed in f64 (`a` and `b` of the same length).
fn change_norm(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| {
            let d = f64::from(x) - f64::from(y);
            d * d
        })
        .sum::<f64>()
        .sqrt()
}

/// The plain training round most methods share: every sampled client trains its cluster's model
/// for `cfg.epochs` (seed [`Env::seed`]), then cluster FedAvg ([`Clusters::fedavg`]).
///
/// # Errors
///
/// As [`Env::run`] and [`Clusters::fedavg`].
pub fn fedavg_round(
    env: &mut Env<'_>,
    round: usize,
    sampled: &[usize],
    state: &mut Clusters,
) -> Result<RoundStats, FederationError> {
    let jobs = sampled
        .iter()
        .map(|&p| {
            (
                p,
                Job::Train(Training {
                    start: state.model_of(p),
                    cfg: env.train_config(round, p),
                    prox: None,
                }),
            )
        })
        .collect();
    let updates = updates_of(env.run(round, jobs)?);
    state.fedavg(&updates, env.cfg.aggregate)?;
    Ok(RoundStats::of(sampled.len(), &updates))
}

/// The updates among `answers` (answers of other kinds are skipped).
pub fn updates_of(answers: Vec<(usize, Answer)>) -> Vec<(usize, Update)> {
    answers
        .into_iter()
        .filter_map(|(p, a)| match a {
            Answer::Update(u) => Some((p, u)),
            _ => None,
        })
        .collect()
}

impl RoundStats {
    /// The stats of a round that asked `sampled` clients and got `updates`.
    pub fn of(sampled: usize, updates: &[(usize, Update)]) -> Self {
        let train_loss = if updates.is_empty() {
            0.0
        } else {
            updates.iter().map(|(_, u)| u.loss).sum::<f64>() / updates.len() as f64
        };
        RoundStats {
            sampled,
            received: updates.len(),
            train_loss,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{FederationError, change_norm, round0_uploads};

    #[test]
    fn round0_uploads_in_position_order_and_the_absent() {
        let (got, absent) =
            round0_uploads(6, vec![(3, 'd'), (0, 'a'), (2, 'c'), (3, 'x')]).unwrap();
        assert_eq!(got, ['a', 'c', 'd']);
        assert_eq!(absent, [1, 4, 5]);
        let (got, absent) = round0_uploads(1, vec![(0, 'a')]).unwrap();
        assert_eq!((got, absent), (vec!['a'], vec![]));
        assert!(matches!(
            round0_uploads(3, vec![(1, 'b')]),
            Err(FederationError::TooFewSignatures {
                expected: 3,
                got: 1
            })
        ));
        assert!(round0_uploads::<char>(0, vec![]).is_ok_and(|(g, a)| g.is_empty() && a.is_empty()));
    }

    #[test]
    fn change_norm_is_the_l2_distance() {
        assert_eq!(change_norm(&[3.0, 4.0, 1.0], &[0.0, 0.0, 1.0]), 5.0);
        assert_eq!(change_norm(&[], &[]), 0.0);
        assert!(change_norm(&[f32::NAN], &[0.0]).is_nan());
    }
}
