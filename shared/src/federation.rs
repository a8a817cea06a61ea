//! The federation's round loop: FedClust, MT-HFL, random clusters, FedAvg and Local over an
//! abstract pool of clients.
//!
//! The loop is the same whether the clients are in this process ([`crate::sim::SimPool`]) or edge
//! devices behind a broker (the coordinator's MQTT pool): it only talks to a [`ClientPool`].
//!
//! ```text
//!   ┌──────────────┐  FedClust: all clients train θ⁰ for the warm-up epochs and upload their
//!   │ 0. Clustering │  final layer → HC cut at λ.  MT-HFL: all clients upload the top-k
//!   └──────┬───────┘  eigenpairs of their Gram matrix → relevance rows (on the clients or the
//!          │          server) → R (eq. 5) → HAC on 1 − R cut at λ.  Random: a seeded random
//!          │          split into K = λ's k groups.  Every cluster model = θ⁰.
//!          │          (FedAvg: one cluster of everyone; Local: one cluster per client)
//!          ▼
//!   ┌──────────────┐  newcomers the pool hands over are placed first ([`Newcomer`]); then
//!   │               │  sample max(⌊frac·N⌋, 1) clients; each trains its cluster's model for E
//!   │ t. Training   │  epochs; each cluster (an LPS) averages the updates of its sampled members,
//!   └──────┬───────┘  weighted by sample count (clusters without a sampled member keep their model)
//!          ▼
//!   ┌──────────────┐  hierarchical runs (MT-HFL always, others with `hierarchy`), every
//!   │ t. GPS        │  `lps_rounds` rounds: the common layers of the cluster models are averaged,
//!   └──────┬───────┘  weighted by the clusters' sample counts ([`crate::hierarchy`])
//!          ▼
//!   ┌──────────────┐  every client's local test accuracy under its cluster's model; the round's
//!   │ t. Evaluation │  figure is the unweighted mean over clients (and per cluster, and per
//!   └──────┬───────┘  ground-truth task when known)
//!          └──── t < T ──▶ Training
//! ```
//!
//! Seeds: the initial model comes from `seed`, the client sample of round t from `(seed, t)`,
//! and client i's sample order in round t from [`client_seed`]`(seed, t, i)`, so a distributed
//! run reproduces an in-process one. The random clustering draws from `(seed, 0)`.

use std::fmt;
use std::str::FromStr;
use std::time::Instant;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::aggregate::{AggregateError, fedavg};
use crate::algorithms::fedclust::{self, Clustering, FedClustError, Threshold};
use crate::algorithms::mthfl::{
    self, DEFAULT_EIGENVECTORS, Estimate, MtHflError, Relevance, Signature,
};
use crate::cluster::distance::{CondensedMatrix, DistanceError};
use crate::cluster::hc::Linkage;
use crate::cluster::metrics::adjusted_rand_index;
use crate::data::partition::Partition;
use crate::hierarchy::{self, CommonLayers, HierarchyError};
use crate::model::{LayerSet, ModelError, ModelKind, Params};
use crate::protocol::Encoding;
use crate::train::{Backend, EvalReport, PIXELS, TrainConfig};

/// The algorithms the round loop runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// One-shot HC on final-layer weights, then cluster-wise FedAvg.
    FedClust,
    /// One global model.
    FedAvg,
    /// Every client trains alone (no communication).
    Local,
    /// MT-HFL: one-shot HAC on the data relevance of the clients' Gram-matrix eigenvectors, then
    /// LPS/GPS training (always hierarchical).
    #[serde(rename = "mthfl")]
    MtHfl,
    /// MT-HFL's baseline: a seeded random split of the clients into `k` near-equal groups
    /// (`threshold` must be `k=K`).
    Random,
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Algorithm::FedClust => "fedclust",
            Algorithm::FedAvg => "fedavg",
            Algorithm::Local => "local",
            Algorithm::MtHfl => "mthfl",
            Algorithm::Random => "random",
        })
    }
}

impl FromStr for Algorithm {
    type Err = FederationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fedclust" => Ok(Algorithm::FedClust),
            "fedavg" => Ok(Algorithm::FedAvg),
            "local" => Ok(Algorithm::Local),
            "mthfl" | "mt-hfl" => Ok(Algorithm::MtHfl),
            "random" => Ok(Algorithm::Random),
            _ => Err(FederationError::Config(format!(
                "unknown algorithm {s:?} (expected fedclust, mthfl, random, fedavg or local)"
            ))),
        }
    }
}

/// Everything the round loop needs to know.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FederationConfig {
    /// Which algorithm.
    pub algorithm: Algorithm,
    /// Which model.
    pub model: ModelKind,
    /// Training rounds after the clustering round.
    pub rounds: usize,
    /// Fraction of clients sampled per round, in (0, 1].
    pub frac: f64,
    /// Local epochs per round.
    pub epochs: usize,
    /// Local epochs of the round-0 warm-up (FedClust).
    pub warmup_epochs: usize,
    /// Mini-batch size.
    pub batch_size: usize,
    /// Learning rate.
    pub lr: f64,
    /// SGD momentum.
    pub momentum: f64,
    /// HC cut (FedClust).
    pub threshold: Threshold,
    /// HC linkage (FedClust).
    pub linkage: Linkage,
    /// Layers uploaded in round 0 (FedClust: the final layer).
    pub signature_layers: LayerSet,
    /// Evaluate every this many rounds (and always after the last).
    pub eval_every: usize,
    /// Master seed.
    pub seed: u64,
    /// LPS/GPS training for any clustering (FedClust, random): every cluster is an LPS and the
    /// GPS averages the common layers. Always on for MT-HFL.
    #[serde(default)]
    pub hierarchy: bool,
    /// FedAvg rounds of each LPS between two GPS averages (Algorithm 1's inner loop).
    #[serde(default = "default_lps_rounds")]
    pub lps_rounds: usize,
    /// Layers the GPS averages (`None`: LeNet-5 `conv1,conv2`, MLP `fc1`).
    #[serde(default)]
    pub common_layers: Option<LayerSet>,
    /// MT-HFL: eigenpairs each client uploads (k).
    #[serde(default = "default_eigenvectors")]
    pub eigenvectors: usize,
    /// MT-HFL: where the relevance rows are computed.
    #[serde(default)]
    pub relevance: Relevance,
    /// MT-HFL: eq. (2)'s norm (the paper's) or the Rayleigh quotient.
    #[serde(default)]
    pub estimate: Estimate,
    /// MT-HFL: encoding of the uploaded eigenpairs (f16 halves the bytes).
    #[serde(default = "default_signature_encoding")]
    pub signature_encoding: Encoding,
}

fn default_lps_rounds() -> usize {
    1
}

fn default_eigenvectors() -> usize {
    DEFAULT_EIGENVECTORS
}

fn default_signature_encoding() -> Encoding {
    Encoding::F32
}

impl Default for FederationConfig {
    /// FedClust's FMNIST settings (GUIDE §2), with 50 rounds.
    fn default() -> Self {
        FederationConfig {
            algorithm: Algorithm::FedClust,
            model: ModelKind::LeNet5,
            rounds: 50,
            frac: 0.1,
            epochs: 10,
            warmup_epochs: 1,
            batch_size: 10,
            lr: 0.01,
            momentum: 0.5,
            threshold: Threshold::Auto,
            linkage: Linkage::Average,
            signature_layers: LayerSet::Final,
            eval_every: 1,
            seed: 0,
            hierarchy: false,
            lps_rounds: default_lps_rounds(),
            common_layers: None,
            eigenvectors: DEFAULT_EIGENVECTORS,
            relevance: Relevance::Client,
            estimate: Estimate::Norm,
            signature_encoding: Encoding::F32,
        }
    }
}

impl FederationConfig {
    /// Checks ranges; the error says which field is wrong.
    pub fn validate(&self) -> Result<(), FederationError> {
        let bad = |m: String| Err(FederationError::Config(m));
        if !(self.frac > 0.0 && self.frac <= 1.0) {
            return bad(format!("frac must be in (0, 1], got {}", self.frac));
        }
        if self.epochs == 0 {
            return bad("epochs must be ≥ 1".into());
        }
        if self.algorithm == Algorithm::FedClust && self.warmup_epochs == 0 {
            return bad("warmup-epochs must be ≥ 1 for fedclust".into());
        }
        if self.eval_every == 0 {
            return bad("eval-every must be ≥ 1".into());
        }
        if self.lps_rounds == 0 {
            return bad("lps-rounds must be ≥ 1".into());
        }
        if self.algorithm == Algorithm::MtHfl && !(1..=PIXELS).contains(&self.eigenvectors) {
            return bad(format!(
                "eigenvectors must be between 1 and {PIXELS}, got {}",
                self.eigenvectors
            ));
        }
        if self.algorithm == Algorithm::Random && !matches!(self.threshold, Threshold::Clusters(_))
        {
            return bad(format!(
                "random clustering needs the number of groups as the threshold (k=K), got {}",
                self.threshold
            ));
        }
        if self.hierarchical() {
            self.common()?;
        }
        self.train_config(0)
            .validate()
            .map_err(|e| FederationError::Config(e.to_string()))?;
        Ok(())
    }

    /// True when clusters train as LPSs under a GPS (MT-HFL, or `hierarchy`).
    pub fn hierarchical(&self) -> bool {
        self.hierarchy || self.algorithm == Algorithm::MtHfl
    }

    /// The common layers of a hierarchical run.
    ///
    /// # Errors
    ///
    /// [`FederationError::Hierarchy`] for a layer the model does not have.
    pub fn common(&self) -> Result<CommonLayers, FederationError> {
        Ok(CommonLayers::new(self.model, self.common_layers.as_ref())?)
    }

    /// The local-training settings of one client in one round.
    pub fn train_config(&self, seed: u64) -> TrainConfig {
        TrainConfig {
            epochs: self.epochs,
            batch_size: self.batch_size,
            lr: self.lr,
            momentum: self.momentum,
            seed,
        }
    }
}

/// Seed of client `client`'s local training in round `round` (SplitMix64 over the three).
pub fn client_seed(seed: u64, round: usize, client: usize) -> u64 {
    let mut z = seed
        ^ (round as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (client as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

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
    Clustering(#[from] FedClustError),
    /// Aggregation failed.
    #[error("aggregation: {0}")]
    Aggregate(#[from] AggregateError),
    /// A model was malformed.
    #[error("model: {0}")]
    Model(#[from] ModelError),
    /// The pool failed (transport, training).
    #[error("client pool: {0}")]
    Pool(String),
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
    MtHfl(#[from] MtHflError),
    /// The GPS step failed.
    #[error("hierarchy: {0}")]
    Hierarchy(#[from] HierarchyError),
    /// The exchange with a GPS in another process failed (see [`GpsLink`]).
    #[error("GPS: {0}")]
    Gps(Box<dyn std::error::Error + Send + Sync>),
}

/// What the pool knows about a client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientInfo {
    /// Index in `0..n`.
    pub index: usize,
    /// Human-readable id (the MQTT client id on a real fleet).
    pub id: String,
    /// Training samples.
    pub samples: u64,
}

/// A trained model coming back from a client.
#[derive(Debug, Clone)]
pub struct Update {
    /// Client index.
    pub client: usize,
    /// New parameters.
    pub params: Params,
    /// Samples it trained on (the FedAvg weight).
    pub samples: u64,
    /// Its mean training loss over the last local epoch.
    pub loss: f64,
}

/// The client side of the federation, as the server sees it. Each call may return fewer
/// answers than it asked for (clients that dropped out); the loop carries on with those it got.
pub trait ClientPool {
    /// The clients, indexed `0..n`.
    fn clients(&self) -> Vec<ClientInfo>;

    /// Round 0: every client in `clients` trains `initial` with `cfg` (seeded per client with
    /// [`client_seed`]`(seed, 0, i)`) and returns the `layers` of the result.
    fn signatures(
        &mut self,
        clients: &[usize],
        initial: &Params,
        layers: &LayerSet,
        cfg: &FederationConfig,
    ) -> Result<Vec<(usize, Vec<f32>)>, FederationError>;

    /// Round `round`: each `(client, model)` trains the model for `cfg.epochs` and returns it.
    fn train(
        &mut self,
        round: usize,
        jobs: &[(usize, &Params)],
        cfg: &FederationConfig,
    ) -> Result<Vec<Update>, FederationError>;

    /// Each `(client, model)` evaluates the model on the client's local test set.
    fn evaluate(
        &mut self,
        round: usize,
        jobs: &[(usize, &Params)],
    ) -> Result<Vec<(usize, EvalReport)>, FederationError>;

    /// MT-HFL round 0, step 1: every client in `clients` forms the Gram matrix of its training
    /// data (eq. 1) and returns its `cfg.eigenvectors` leading eigenpairs as the coordinator
    /// receives them (uploaded in `cfg.signature_encoding`).
    fn gram_signatures(
        &mut self,
        clients: &[usize],
        cfg: &FederationConfig,
    ) -> Result<Vec<(usize, Signature)>, FederationError>;

    /// Clients that joined after round 0 and are waiting to be placed (FedClust Algorithm 2),
    /// asked at the start of every training round `round`. Each returned client's `index` is
    /// the one the pool knows it by in later calls, and must not be one of the run's clients
    /// yet; the loop then asks [`Self::signatures`] of it with round 0's initial model and
    /// warm-up, and places it (see [`Newcomer`]). A client is handed over once. The default has
    /// no newcomers.
    fn newcomers(&mut self, _round: usize) -> Vec<ClientInfo> {
        Vec::new()
    }

    /// MT-HFL round 0, step 2, the paper's way: every client in `clients` receives `all`
    /// (`all[j]` = client `j`'s signature) and returns its relevance row `r(i, ·)` (eq. 2-4,
    /// [`mthfl::client_row`] with `cfg.estimate`), computed with its exact Gram matrix.
    fn relevance_rows(
        &mut self,
        clients: &[usize],
        all: &[Signature],
        cfg: &FederationConfig,
    ) -> Result<Vec<(usize, Vec<f64>)>, FederationError>;
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
    /// Backend of the server-side relevance ([`mthfl::server_rows`]).
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

/// Progress notifications (for progress bars and logs).
pub trait Observer {
    /// The one-shot clustering is done.
    fn clustered(&mut self, _clustering: &Clustering, _ari: Option<f64>) {}
    /// A round is done.
    fn round(&mut self, _record: &RoundRecord, _of: usize) {}
    /// A client that joined after round 0 was placed in a cluster.
    fn newcomer(&mut self, _newcomer: &Newcomer) {}
    /// A client that joined after round 0 was turned away (the run goes on without it).
    fn newcomer_dropped(&mut self, _dropped: &DroppedNewcomer) {}
}

/// A client that joined after round 0 and was placed in a cluster, from whose training round on
/// it is sampled and evaluated like the round-0 clients.
///
/// FedClust (Algorithm 2): it trains θ⁰ with round 0's warm-up (seed
/// [`client_seed`]`(seed, 0, index)`, as if it had been there), uploads the same layers, and joins
/// the cluster whose centroid of round-0 uploads is nearest ([`fedclust::nearest_centroid`]); the
/// centroids stay those of round 0, so the order newcomers come in does not matter. FedAvg: the
/// one cluster. Local: a cluster (model θ⁰) of its own. Random: the smallest group (ties: the
/// lower index). MT-HFL is not supported yet (its relevance needs every round-0 signature): the
/// newcomer is dropped with [`NewcomerError::Unsupported`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Newcomer {
    /// The client (its `index` is the pool's).
    pub client: ClientInfo,
    /// The training round it joined at (first round it can be sampled in).
    pub round: usize,
    /// Its cluster.
    pub cluster: usize,
    /// FedClust: Euclidean distance of its upload to the cluster's centroid.
    pub distance: Option<f64>,
    /// Whether its ground-truth group is the most common group of the cluster's round-0 members
    /// (when the truth covers it; see [`RunResult::score_newcomers`]).
    pub truth_match: Option<bool>,
}

/// Why a newcomer was turned away.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum NewcomerError {
    /// Its round-0 upload did not come back (it dropped out, failed, or timed out).
    #[error("no round-0 signature came back")]
    NoSignature,
    /// Its upload has the wrong number of floats.
    #[error("signature has {got} floats, the clusters' centroids have {expected}")]
    WrongLength {
        /// Centroid length.
        expected: usize,
        /// Received length.
        got: usize,
    },
    /// Its upload holds a NaN or infinite value.
    #[error("signature value {index} is not finite")]
    NotFinite {
        /// Position of the first bad value.
        index: usize,
    },
    /// Another failure of the assignment.
    #[error("assignment: {0}")]
    Assignment(String),
    /// The pool handed over an index the run already has.
    #[error("client index {0} is already in the run")]
    DuplicateIndex(usize),
    /// The algorithm cannot place newcomers.
    #[error("{0} cannot place newcomers")]
    Unsupported(Algorithm),
}

impl From<FedClustError> for NewcomerError {
    fn from(e: FedClustError) -> Self {
        match e {
            FedClustError::WrongDimension { expected, got } => {
                NewcomerError::WrongLength { expected, got }
            }
            FedClustError::Distance(DistanceError::NotFinite { col, .. }) => {
                NewcomerError::NotFinite { index: col }
            }
            e => NewcomerError::Assignment(e.to_string()),
        }
    }
}

/// A newcomer that was turned away, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DroppedNewcomer {
    /// The client.
    pub client: ClientInfo,
    /// The training round it tried to join at.
    pub round: usize,
    /// Why.
    pub reason: NewcomerError,
}

/// An observer that ignores everything.
pub struct Quiet;
impl Observer for Quiet {}

/// What happened in one round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundRecord {
    /// Round number (1-based; round 0 is the clustering round).
    pub round: usize,
    /// Clients sampled.
    pub sampled: usize,
    /// Updates received.
    pub received: usize,
    /// Mean training loss of the received updates' last epoch (NaN-free; 0 when none).
    pub train_loss: f64,
    /// Mean local test accuracy over the clients with an evaluation (None when not evaluated
    /// this round).
    pub accuracy: Option<f64>,
    /// Mean local test accuracy per cluster (same rounds as `accuracy`).
    pub cluster_accuracy: Option<Vec<f64>>,
    /// Per ground-truth task `t` (when the truth is known): the mean over the clients of task `t`
    /// of their cluster model's accuracy on the test samples of task `t`'s labels (on their whole
    /// local test set when the tasks have no label sets). Same rounds as `accuracy`.
    #[serde(default)]
    pub task_accuracy: Option<Vec<f64>>,
    /// True when the GPS averaged the common layers after this round's training.
    #[serde(default)]
    pub gps: bool,
    /// Seconds the round took.
    pub seconds: f64,
}

/// The result of a run.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// The configuration.
    pub config: FederationConfig,
    /// Clients.
    pub clients: Vec<ClientInfo>,
    /// Final cluster of each client, by position in `clients` (`clients[p].index` is the pool's
    /// index: `p` itself unless a newcomer before it was dropped).
    pub assignment: Vec<usize>,
    /// Number of clusters.
    pub n_clusters: usize,
    /// The clustering (FedClust only).
    pub clustering: Option<Clustering>,
    /// The pairwise distances of the round-0 signatures (FedClust), or `1 − R` (MT-HFL).
    #[serde(skip)]
    pub distances: Option<CondensedMatrix>,
    /// MT-HFL's symmetrised relevance matrix `R` (eq. 5).
    #[serde(skip)]
    pub relevance: Option<Vec<Vec<f64>>>,
    /// ARI of the clustering against the ground truth, when known (clustering algorithms only).
    pub ari: Option<f64>,
    /// Floats each client uploaded for clustering.
    pub signature_len: usize,
    /// Payload bytes of that upload (floats × encoding width, no framing).
    pub signature_bytes: usize,
    /// The common layers of a hierarchical run.
    pub common_layers: Option<String>,
    /// Floats each LPS sends to the GPS (and receives back) per GPS round.
    pub common_len: usize,
    /// GPS rounds done.
    pub gps_rounds: usize,
    /// Per-round records.
    pub rounds: Vec<RoundRecord>,
    /// Last evaluation: per-client accuracy (NaN for a client that never answered one).
    pub final_client_accuracy: Vec<f64>,
    /// The cluster models at the end.
    #[serde(skip)]
    pub models: Vec<Params>,
    /// Clients that joined after round 0 and were placed (they follow the round-0 clients in
    /// `clients`, `assignment` and `final_client_accuracy`, in the order they joined).
    pub newcomers: Vec<Newcomer>,
    /// Clients that joined after round 0 and were turned away.
    pub dropped_newcomers: Vec<DroppedNewcomer>,
    /// Wall-clock seconds of the whole run.
    pub wall_seconds: f64,
}

impl RunResult {
    /// Number of ground-truth tasks with a per-task accuracy (0 without a ground truth).
    pub fn n_tasks(&self) -> usize {
        self.rounds
            .iter()
            .filter_map(|r| r.task_accuracy.as_ref().map(Vec::len))
            .max()
            .unwrap_or(0)
    }

    /// Sets each newcomer's [`Newcomer::truth_match`]: `truth[i]` is the ground-truth group of
    /// the client the pool knows as `i`. A newcomer matches when its group is the most common
    /// group among the round-0 members of its cluster (ties: the lower group); `None` where the
    /// truth does not cover it or its cluster has no round-0 member.
    pub fn score_newcomers(&mut self, truth: &[usize]) {
        let round_zero = self.clients.len() - self.newcomers.len();
        for n in &mut self.newcomers {
            let mut counts = std::collections::BTreeMap::new();
            for (i, c) in self.clients[..round_zero].iter().enumerate() {
                if self.assignment[i] == n.cluster
                    && let Some(&g) = truth.get(c.index)
                {
                    *counts.entry(g).or_insert(0usize) += 1;
                }
            }
            // max_by_key keeps the last maximum; iterate descending for the lower group.
            let majority = counts
                .iter()
                .rev()
                .max_by_key(|&(_, k)| *k)
                .map(|(&g, _)| g);
            n.truth_match = match (truth.get(n.client.index), majority) {
                (Some(&g), Some(m)) => Some(g == m),
                _ => None,
            };
        }
    }

    /// Mean local test accuracy after the last round.
    pub fn final_accuracy(&self) -> Option<f64> {
        self.rounds.iter().rev().find_map(|r| r.accuracy)
    }
}

/// Splits `n` clients into `k` near-equal groups at random (MT-HFL's baseline): a seeded
/// shuffle cut like numpy's `array_split` (the first `n mod k` groups take one more), numbered in
/// order of first appearance.
pub fn random_assignment(n: usize, k: usize, seed: u64) -> Vec<usize> {
    let k = k.clamp(1, n.max(1));
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(client_seed(seed, 0, usize::MAX));
    order.shuffle(&mut rng);
    let mut assignment = vec![0; n];
    let (base, extra) = (n / k, n % k);
    let mut at = 0;
    for g in 0..k {
        let size = base + usize::from(g < extra);
        for &c in &order[at..at + size] {
            assignment[c] = g;
        }
        at += size;
    }
    renumber(&assignment)
}

/// Renames clusters in order of first appearance (client 0 is in cluster 0).
fn renumber(assignment: &[usize]) -> Vec<usize> {
    let mut names = std::collections::HashMap::new();
    assignment
        .iter()
        .map(|&a| {
            let next = names.len();
            *names.entry(a).or_insert(next)
        })
        .collect()
}

/// Round 0 of the clustering algorithms.
struct RoundZero {
    assignment: Vec<usize>,
    clustering: Option<Clustering>,
    distances: Option<CondensedMatrix>,
    relevance: Option<Vec<Vec<f64>>>,
    signature_len: usize,
    signature_bytes: usize,
}

impl RoundZero {
    fn plain(assignment: Vec<usize>) -> Self {
        RoundZero {
            assignment,
            clustering: None,
            distances: None,
            relevance: None,
            signature_len: 0,
            signature_bytes: 0,
        }
    }
}

/// MT-HFL's round 0 (Algorithm 2): signatures, relevance rows (eq. 2-4) on the clients or the
/// server, `R` (eq. 5), HAC on `1 − R`.
fn mthfl_round_zero(
    cfg: &FederationConfig,
    pool: &mut dyn ClientPool,
    n: usize,
    ctx: &RunContext,
) -> Result<RoundZero, FederationError> {
    let all: Vec<usize> = (0..n).collect();
    let mut sigs = pool.gram_signatures(&all, cfg)?;
    sigs.sort_by_key(|(i, _)| *i);
    sigs.dedup_by_key(|(i, _)| *i);
    if sigs.len() != n {
        return Err(FederationError::TooFewSignatures {
            expected: n,
            got: sigs.len(),
        });
    }
    let sigs: Vec<Signature> = sigs.into_iter().map(|(_, s)| s).collect();
    let rows = match cfg.relevance {
        Relevance::Server => {
            let device = ctx
                .backend
                .device()
                .map_err(|e| FederationError::Config(e.to_string()))?;
            mthfl::server_rows(&sigs, cfg.estimate, &device)?
        }
        Relevance::Client => {
            let mut rows = pool.relevance_rows(&all, &sigs, cfg)?;
            rows.sort_by_key(|(i, _)| *i);
            rows.dedup_by_key(|(i, _)| *i);
            if rows.len() != n {
                return Err(FederationError::TooFewRows {
                    expected: n,
                    got: rows.len(),
                });
            }
            rows.into_iter().map(|(_, r)| r).collect()
        }
    };
    let relevance = mthfl::symmetrise(&rows)?;
    let (clustering, distances) = mthfl::cluster(&relevance, cfg.linkage, cfg.threshold)?;
    let floats = sigs[0].k * sigs[0].d + sigs[0].k;
    Ok(RoundZero {
        assignment: clustering.assignment.clone(),
        clustering: Some(clustering),
        distances: Some(distances),
        relevance: Some(relevance),
        signature_len: floats,
        signature_bytes: floats * cfg.signature_encoding.width(),
    })
}

/// Per-task accuracy of one evaluation (see [`RoundRecord::task_accuracy`]).
fn task_accuracy(
    last_eval: &[Option<EvalReport>],
    clients: &[ClientInfo],
    ctx: &RunContext,
) -> Option<Vec<f64>> {
    let truth = ctx.truth.as_ref()?;
    if clients.len() != last_eval.len() {
        return None;
    }
    let tasks = truth.iter().max().map_or(0, |m| m + 1);
    let mut sum = vec![(0.0, 0usize); tasks];
    for (i, e) in last_eval.iter().enumerate() {
        // `truth` is by pool index; a newcomer it does not cover has no task.
        let (Some(e), Some(&t)) = (e, truth.get(clients[i].index)) else {
            continue;
        };
        let report = match ctx.task_labels.as_ref().and_then(|l| l.get(t)) {
            Some(labels) => e.restrict(labels),
            None => *e,
        };
        if report.total > 0 {
            sum[t].0 += report.accuracy();
            sum[t].1 += 1;
        }
    }
    Some(
        sum.into_iter()
            .map(|(s, k)| if k == 0 { f64::NAN } else { s / k as f64 })
            .collect(),
    )
}

/// Runs the federation over `pool`. `ctx.truth` is only used to score the clustering and to
/// report per-task accuracy.
pub fn run(
    cfg: &FederationConfig,
    pool: &mut dyn ClientPool,
    ctx: &RunContext,
    observer: &mut dyn Observer,
) -> Result<RunResult, FederationError> {
    run_inner(cfg, pool, ctx, observer, None)
}

/// Runs one LPS of a hierarchy whose GPS is another process: FedAvg of the pool's clients (one
/// cluster) from `initial`, and every `cfg.lps_rounds` rounds the common layers go through `gps`
/// (sent, averaged there with the other LPSs', inserted back) before the round's evaluation, as
/// the in-process GPS step does. `cfg` must be FedAvg with `hierarchy` on.
///
/// # Errors
///
/// [`FederationError::Config`] for another algorithm, no hierarchy, or an `initial` model of
/// another architecture; and as [`run`] and [`GpsLink::exchange`].
pub fn run_lps(
    cfg: &FederationConfig,
    pool: &mut dyn ClientPool,
    ctx: &RunContext,
    observer: &mut dyn Observer,
    initial: Params,
    gps: &mut dyn GpsLink,
) -> Result<RunResult, FederationError> {
    if cfg.algorithm != Algorithm::FedAvg || !cfg.hierarchy {
        return Err(FederationError::Config(format!(
            "an LPS runs fedavg with hierarchy on, got {} (hierarchy {})",
            cfg.algorithm, cfg.hierarchy
        )));
    }
    if initial.model != cfg.model {
        return Err(FederationError::Config(format!(
            "initial model is {}, the LPS trains {}",
            initial.model, cfg.model
        )));
    }
    run_inner(cfg, pool, ctx, observer, Some((initial, gps)))
}

fn run_inner(
    cfg: &FederationConfig,
    pool: &mut dyn ClientPool,
    ctx: &RunContext,
    observer: &mut dyn Observer,
    lps: Option<(Params, &mut dyn GpsLink)>,
) -> Result<RunResult, FederationError> {
    cfg.validate()?;
    let start = Instant::now();
    let mut clients = pool.clients();
    let n = clients.len();
    if n == 0 {
        return Err(FederationError::NoClients);
    }
    let (initial, mut remote_gps) = match lps {
        Some((initial, link)) => (initial, Some(link)),
        None => (Params::init(cfg.model, cfg.seed), None),
    };
    let common = if cfg.hierarchical() {
        Some(cfg.common()?)
    } else {
        None
    };

    // Round 0: who trains with whom.
    let zero = match cfg.algorithm {
        Algorithm::FedAvg => RoundZero::plain(vec![0; n]),
        Algorithm::Local => RoundZero::plain((0..n).collect()),
        Algorithm::Random => {
            let Threshold::Clusters(k) = cfg.threshold else {
                return Err(FederationError::Config(
                    "random clustering needs the number of groups as the threshold (k=K)".into(),
                ));
            };
            RoundZero::plain(random_assignment(n, k, cfg.seed))
        }
        Algorithm::MtHfl => mthfl_round_zero(cfg, pool, n, ctx)?,
        Algorithm::FedClust => {
            let all: Vec<usize> = (0..n).collect();
            let mut sigs = pool.signatures(&all, &initial, &cfg.signature_layers, cfg)?;
            sigs.sort_by_key(|(i, _)| *i);
            if sigs.len() != n {
                return Err(FederationError::TooFewSignatures {
                    expected: n,
                    got: sigs.len(),
                });
            }
            let vectors: Vec<Vec<f32>> = sigs.into_iter().map(|(_, s)| s).collect();
            let len = vectors[0].len();
            let (c, d) = fedclust::cluster(&vectors, cfg.linkage, cfg.threshold)?;
            RoundZero {
                assignment: c.assignment.clone(),
                clustering: Some(c),
                distances: Some(d),
                relevance: None,
                signature_len: len,
                signature_bytes: len * 4,
            }
        }
    };
    let RoundZero {
        mut assignment,
        clustering,
        distances,
        relevance,
        signature_len,
        signature_bytes,
    } = zero;
    let mut n_clusters = assignment.iter().max().map_or(0, |m| m + 1);
    let clusters_found = matches!(
        cfg.algorithm,
        Algorithm::FedClust | Algorithm::MtHfl | Algorithm::Random
    );
    let ari = match &ctx.truth {
        // The truth may cover clients that join later too (pool indices n..).
        Some(t) if clusters_found && t.len() >= n => {
            Some(adjusted_rand_index(&assignment, &t[..n]))
        }
        _ => None,
    };
    if let Some(c) = &clustering {
        observer.clustered(c, ari);
    }
    // Each LPS's weight in the GPS average: the training samples of its cluster's members.
    let mut cluster_samples = vec![0u64; n_clusters];
    for (i, c) in clients.iter().enumerate() {
        cluster_samples[assignment[i]] += c.samples;
    }

    let mut models = vec![initial.clone(); n_clusters];
    let mut last_eval: Vec<Option<EvalReport>> = vec![None; n];
    let mut stale = vec![true; n_clusters];
    let mut rounds = Vec::with_capacity(cfg.rounds);
    let mut final_client_accuracy = Vec::new();
    let mut gps_rounds = 0;
    // Position in `clients` of each pool index (round-0 clients: the same; newcomers may leave
    // gaps where one was dropped).
    let mut position: std::collections::HashMap<usize, usize> = clients
        .iter()
        .enumerate()
        .map(|(p, c)| (c.index, p))
        .collect();
    let mut newcomers = Vec::new();
    let mut dropped_newcomers = Vec::new();

    for round in 1..=cfg.rounds {
        let t0 = Instant::now();
        let offered = pool.newcomers(round);
        if !offered.is_empty() {
            let placed = place_newcomers(
                cfg,
                pool,
                round,
                offered,
                &initial,
                clustering.as_ref(),
                &assignment,
                &position,
            )?;
            for d in placed.dropped {
                observer.newcomer_dropped(&d);
                dropped_newcomers.push(d);
            }
            for nc in placed.placed {
                if nc.cluster == n_clusters {
                    // Local: a model of its own.
                    n_clusters += 1;
                    models.push(initial.clone());
                    stale.push(true);
                    cluster_samples.push(0);
                }
                cluster_samples[nc.cluster] += nc.client.samples;
                position.insert(nc.client.index, clients.len());
                clients.push(nc.client.clone());
                assignment.push(nc.cluster);
                last_eval.push(None);
                observer.newcomer(&nc);
                newcomers.push(nc);
            }
        }
        let n = clients.len();
        let per_round = ((cfg.frac * n as f64) as usize).clamp(1, n);
        let mut rng = ChaCha8Rng::seed_from_u64(client_seed(cfg.seed, round, usize::MAX));
        let mut chosen: Vec<usize> = sample(&mut rng, n, per_round).into_vec();
        chosen.sort_unstable();
        let jobs: Vec<(usize, &Params)> = chosen
            .iter()
            .map(|&p| (clients[p].index, &models[assignment[p]]))
            .collect();
        let mut updates = pool.train(round, &jobs, cfg)?;
        // Only answers to this round's jobs, of the right model, count (the pool should already
        // ensure it; this keeps a faulty pool from corrupting a cluster). From here on
        // `u.client` is the position in `clients`.
        let expected_len = models[0].values.len();
        updates.retain_mut(|u| {
            let Some(&p) = position.get(&u.client) else {
                return false;
            };
            u.client = p;
            chosen.binary_search(&p).is_ok()
                && u.params.model == cfg.model
                && u.params.values.len() == expected_len
                && u.samples > 0
        });
        let received = updates.len();
        let mut new_models = models.clone();
        for (c, model) in new_models.iter_mut().enumerate() {
            let mine: Vec<(&Params, u64)> = updates
                .iter()
                .filter(|u| assignment[u.client] == c)
                .map(|u| (&u.params, u.samples))
                .collect();
            if !mine.is_empty() {
                *model = fedavg(&mine)?;
                stale[c] = true;
            }
        }
        models = new_models;

        // GPS: every `lps_rounds` rounds the LPSs share their common layers.
        let gps = match (&common, remote_gps.as_deref_mut()) {
            // This process is one LPS (one cluster); the GPS is elsewhere.
            (Some(common), Some(link)) if round % cfg.lps_rounds == 0 => {
                let latest = rounds.iter().rev().find_map(|r: &RoundRecord| r.accuracy);
                for (c, model) in models.iter_mut().enumerate() {
                    let part = common.extract(model)?;
                    let average =
                        link.exchange(gps_rounds + 1, &part, cluster_samples[c], latest)?;
                    common.insert(model, &average)?;
                }
                stale.iter_mut().for_each(|s| *s = true);
                gps_rounds += 1;
                true
            }
            (Some(common), None) if n_clusters > 1 && round % cfg.lps_rounds == 0 => {
                hierarchy::gps_round(common, &mut models, &cluster_samples)?;
                stale.iter_mut().for_each(|s| *s = true);
                gps_rounds += 1;
                true
            }
            _ => false,
        };

        let evaluate_now = round % cfg.eval_every == 0 || round == cfg.rounds;
        let (accuracy, cluster_accuracy, task_acc) = if evaluate_now {
            let jobs: Vec<(usize, &Params)> = (0..n)
                .filter(|&i| stale[assignment[i]] || last_eval[i].is_none())
                .map(|i| (clients[i].index, &models[assignment[i]]))
                .collect();
            for (c, rep) in pool.evaluate(round, &jobs)? {
                if let Some(&p) = position.get(&c) {
                    last_eval[p] = Some(rep);
                }
            }
            stale.iter_mut().for_each(|s| *s = false);
            // Means over the clients with an evaluation (on a fleet, a client that never
            // answered has none; in process every client has one).
            let acc: Vec<Option<f64>> = last_eval
                .iter()
                .map(|e| e.as_ref().map(EvalReport::accuracy))
                .collect();
            let mut per_cluster = vec![(0.0, 0usize); n_clusters];
            for (i, a) in acc.iter().enumerate() {
                if let Some(a) = a {
                    per_cluster[assignment[i]].0 += a;
                    per_cluster[assignment[i]].1 += 1;
                }
            }
            let evaluated = acc.iter().flatten().count();
            let mean = acc.iter().flatten().sum::<f64>() / evaluated.max(1) as f64;
            let acc: Vec<f64> = acc.into_iter().map(|a| a.unwrap_or(f64::NAN)).collect();
            final_client_accuracy = acc;
            (
                Some(mean),
                Some(
                    per_cluster
                        .into_iter()
                        .map(|(s, k)| s / k.max(1) as f64)
                        .collect(),
                ),
                task_accuracy(&last_eval, &clients, ctx),
            )
        } else {
            (None, None, None)
        };
        let train_loss = if updates.is_empty() {
            0.0
        } else {
            updates.iter().map(|u| u.loss).sum::<f64>() / updates.len() as f64
        };
        let record = RoundRecord {
            round,
            sampled: chosen.len(),
            received,
            train_loss,
            accuracy,
            cluster_accuracy,
            task_accuracy: task_acc,
            gps,
            seconds: t0.elapsed().as_secs_f64(),
        };
        observer.round(&record, cfg.rounds);
        rounds.push(record);
    }

    let mut result = RunResult {
        config: cfg.clone(),
        clients,
        assignment,
        n_clusters,
        clustering,
        distances,
        relevance,
        ari,
        signature_len,
        signature_bytes,
        common_layers: common.as_ref().map(|c| c.set().to_string()),
        common_len: common.as_ref().map_or(0, CommonLayers::len),
        gps_rounds,
        rounds,
        final_client_accuracy,
        models,
        newcomers,
        dropped_newcomers,
        wall_seconds: start.elapsed().as_secs_f64(),
    };
    if let Some(truth) = &ctx.truth {
        result.score_newcomers(truth);
    }
    Ok(result)
}

/// The outcome of [`place_newcomers`].
struct Placement {
    placed: Vec<Newcomer>,
    dropped: Vec<DroppedNewcomer>,
}

/// Places the clients `offered` at the start of training round `round` (see [`Newcomer`]).
/// Only a pool failure is an error; a bad newcomer is dropped with its reason.
#[allow(clippy::too_many_arguments)]
fn place_newcomers(
    cfg: &FederationConfig,
    pool: &mut dyn ClientPool,
    round: usize,
    offered: Vec<ClientInfo>,
    initial: &Params,
    clustering: Option<&Clustering>,
    assignment: &[usize],
    position: &std::collections::HashMap<usize, usize>,
) -> Result<Placement, FederationError> {
    let mut out = Placement {
        placed: Vec::new(),
        dropped: Vec::new(),
    };
    let mut fresh: Vec<ClientInfo> = Vec::new();
    for c in offered {
        if position.contains_key(&c.index) || fresh.iter().any(|f| f.index == c.index) {
            out.dropped.push(DroppedNewcomer {
                reason: NewcomerError::DuplicateIndex(c.index),
                client: c,
                round,
            });
        } else {
            fresh.push(c);
        }
    }
    if fresh.is_empty() {
        return Ok(out);
    }
    // Members per cluster, grown as newcomers are placed (Local: a new cluster each).
    let mut sizes = vec![0usize; assignment.iter().max().map_or(0, |m| m + 1)];
    for &a in assignment {
        sizes[a] += 1;
    }
    // FedClust: round 0's upload, with round 0's model, warm-up and seeds.
    let mut signatures = std::collections::HashMap::new();
    if cfg.algorithm == Algorithm::FedClust {
        let asked: Vec<usize> = fresh.iter().map(|c| c.index).collect();
        signatures = pool
            .signatures(&asked, initial, &cfg.signature_layers, cfg)?
            .into_iter()
            .filter(|(i, _)| asked.contains(i))
            .collect();
    }
    for client in fresh {
        let placed: Result<(usize, Option<f64>), NewcomerError> = match cfg.algorithm {
            Algorithm::FedClust => match (signatures.remove(&client.index), clustering) {
                (None, _) => Err(NewcomerError::NoSignature),
                (Some(_), None) => Err(NewcomerError::Assignment("no clustering".into())),
                (Some(sig), Some(c)) => fedclust::nearest_centroid(&sig, &c.centroids)
                    .map(|(k, d)| (k, Some(d)))
                    .map_err(NewcomerError::from),
            },
            Algorithm::FedAvg => Ok((0, None)),
            Algorithm::Local => Ok((sizes.len(), None)),
            Algorithm::Random => {
                let smallest = (0..sizes.len()).min_by_key(|&k| (sizes[k], k)).unwrap_or(0);
                Ok((smallest, None))
            }
            Algorithm::MtHfl => Err(NewcomerError::Unsupported(Algorithm::MtHfl)),
        };
        match placed {
            Ok((cluster, distance)) => {
                match sizes.get_mut(cluster) {
                    Some(s) => *s += 1,
                    None => sizes.push(1),
                }
                out.placed.push(Newcomer {
                    client,
                    round,
                    cluster,
                    distance,
                    truth_match: None,
                });
            }
            Err(reason) => out.dropped.push(DroppedNewcomer {
                client,
                round,
                reason,
            }),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_groups_are_near_equal_seeded_and_numbered_in_order() {
        let a = random_assignment(10, 3, 4);
        let mut sizes = [0usize; 3];
        for &g in &a {
            sizes[g] += 1;
        }
        sizes.sort_unstable();
        assert_eq!(sizes, [3, 3, 4]);
        assert_eq!(a[0], 0);
        assert_eq!(a, random_assignment(10, 3, 4));
        // Some seed gives another split.
        assert!((0..20).any(|s| random_assignment(10, 3, s) != a));
        assert_eq!(random_assignment(2, 5, 0).len(), 2);
    }

    #[test]
    fn algorithms_parse_and_random_needs_k() {
        assert_eq!("mthfl".parse::<Algorithm>().unwrap(), Algorithm::MtHfl);
        assert_eq!(Algorithm::MtHfl.to_string(), "mthfl");
        assert_eq!("random".parse::<Algorithm>().unwrap(), Algorithm::Random);
        let mut cfg = FederationConfig {
            algorithm: Algorithm::Random,
            ..FederationConfig::default()
        };
        assert!(cfg.validate().is_err());
        cfg.threshold = Threshold::Clusters(3);
        cfg.validate().unwrap();
        cfg.algorithm = Algorithm::MtHfl;
        cfg.eigenvectors = 0;
        assert!(cfg.validate().is_err());
        cfg.eigenvectors = 5;
        cfg.common_layers = Some("fc9".parse().unwrap());
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.contains("fc9"), "{e}");
    }

    #[test]
    fn task_accuracy_restricts_to_the_tasks_labels() {
        // Client 0 (task 0 = labels {0}): 3/4 right on label 0, 0/4 on label 1 → 0.75.
        // Client 1 (task 1 = labels {1}): 1/2 on label 1 → 0.5. Client 2 (task 1): no evaluation.
        let mut a = EvalReport::default();
        a.correct_per_label[0] = 3;
        a.total_per_label[0] = 4;
        a.total_per_label[1] = 4;
        let mut b = EvalReport::default();
        b.correct_per_label[1] = 1;
        b.total_per_label[1] = 2;
        let clients: Vec<ClientInfo> = (0..3)
            .map(|index| ClientInfo {
                index,
                id: format!("c{index}"),
                samples: 1,
            })
            .collect();
        let ctx = RunContext {
            truth: Some(vec![0, 1, 1]),
            task_labels: Some(vec![vec![0], vec![1]]),
            backend: Backend::Flex,
        };
        assert_eq!(
            task_accuracy(&[Some(a), Some(b), None], &clients, &ctx),
            Some(vec![0.75, 0.5])
        );
    }
}
