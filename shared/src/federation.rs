//! The federation's round loop: FedClust, FedAvg and Local over an abstract pool of clients.
//!
//! The loop is the same whether the clients are in this process ([`crate::sim::SimPool`]) or edge
//! devices behind a broker (the coordinator's MQTT pool): it only talks to a [`ClientPool`].
//!
//! ```text
//!   ┌──────────────┐  FedClust only: all clients train θ⁰ for the warm-up epochs and
//!   │ 0. Clustering │  upload their final layer → HC cut at λ → clusters, every cluster model = θ⁰
//!   └──────┬───────┘  (FedAvg: one cluster of everyone; Local: one cluster per client)
//!          ▼
//!   ┌──────────────┐  sample max(⌊frac·N⌋, 1) clients; each trains its cluster's model for E
//!   │ t. Training   │  epochs; each cluster averages the updates of its sampled members, weighted
//!   └──────┬───────┘  by sample count (clusters without a sampled member keep their model)
//!          ▼
//!   ┌──────────────┐  every client's local test accuracy under its cluster's model; the round's
//!   │ t. Evaluation │  figure is the unweighted mean over clients
//!   └──────┬───────┘
//!          └──── t < T ──▶ Training
//! ```
//!
//! Seeds: the initial model comes from `seed`, the client sample of round t from `(seed, t)`,
//! and client i's sample order in round t from [`client_seed`]`(seed, t, i)`, so a distributed
//! run reproduces an in-process one.

use std::fmt;
use std::str::FromStr;
use std::time::Instant;

use rand::SeedableRng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::aggregate::{AggregateError, fedavg};
use crate::cluster::distance::CondensedMatrix;
use crate::cluster::hc::Linkage;
use crate::cluster::metrics::adjusted_rand_index;
use crate::fedclust::{self, Clustering, FedClustError, Threshold};
use crate::model::{LayerSet, ModelError, ModelKind, Params};
use crate::train::{EvalReport, TrainConfig};

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
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Algorithm::FedClust => "fedclust",
            Algorithm::FedAvg => "fedavg",
            Algorithm::Local => "local",
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
            _ => Err(FederationError::Config(format!(
                "unknown algorithm {s:?} (expected fedclust, fedavg or local)"
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
        self.train_config(0)
            .validate()
            .map_err(|e| FederationError::Config(e.to_string()))?;
        Ok(())
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
}

/// Progress notifications (for progress bars and logs).
pub trait Observer {
    /// The one-shot clustering is done.
    fn clustered(&mut self, _clustering: &Clustering, _ari: Option<f64>) {}
    /// A round is done.
    fn round(&mut self, _record: &RoundRecord, _of: usize) {}
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
    /// Final cluster of each client.
    pub assignment: Vec<usize>,
    /// Number of clusters.
    pub n_clusters: usize,
    /// The clustering (FedClust only).
    pub clustering: Option<Clustering>,
    /// The pairwise distances of the round-0 signatures (FedClust only).
    #[serde(skip)]
    pub distances: Option<CondensedMatrix>,
    /// ARI of the clustering against the ground truth, when known.
    pub ari: Option<f64>,
    /// Floats each client uploaded for clustering.
    pub signature_len: usize,
    /// Per-round records.
    pub rounds: Vec<RoundRecord>,
    /// Last evaluation: per-client accuracy (NaN for a client that never answered one).
    pub final_client_accuracy: Vec<f64>,
    /// The cluster models at the end.
    #[serde(skip)]
    pub models: Vec<Params>,
    /// Wall-clock seconds of the whole run.
    pub wall_seconds: f64,
}

impl RunResult {
    /// Mean local test accuracy after the last round.
    pub fn final_accuracy(&self) -> Option<f64> {
        self.rounds.iter().rev().find_map(|r| r.accuracy)
    }
}

/// Runs the federation over `pool`. `truth` (ground-truth group per client) is only used to
/// score the clustering.
pub fn run(
    cfg: &FederationConfig,
    pool: &mut dyn ClientPool,
    truth: Option<&[usize]>,
    observer: &mut dyn Observer,
) -> Result<RunResult, FederationError> {
    cfg.validate()?;
    let start = Instant::now();
    let clients = pool.clients();
    let n = clients.len();
    if n == 0 {
        return Err(FederationError::NoClients);
    }
    let initial = Params::init(cfg.model, cfg.seed);

    // Round 0: who trains with whom.
    let (assignment, clustering, distances, signature_len) = match cfg.algorithm {
        Algorithm::FedAvg => (vec![0; n], None, None, 0),
        Algorithm::Local => ((0..n).collect(), None, None, 0),
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
            (c.assignment.clone(), Some(c), Some(d), len)
        }
    };
    let n_clusters = assignment.iter().max().map_or(0, |m| m + 1);
    let ari = match (&clustering, truth) {
        (Some(c), Some(t)) if t.len() == n => Some(adjusted_rand_index(&c.assignment, t)),
        _ => None,
    };
    if let Some(c) = &clustering {
        observer.clustered(c, ari);
    }

    let mut models = vec![initial; n_clusters];
    let mut last_eval: Vec<Option<EvalReport>> = vec![None; n];
    let mut stale = vec![true; n_clusters];
    let per_round = ((cfg.frac * n as f64) as usize).clamp(1, n);
    let mut rounds = Vec::with_capacity(cfg.rounds);
    let mut final_client_accuracy = Vec::new();

    for round in 1..=cfg.rounds {
        let t0 = Instant::now();
        let mut rng = ChaCha8Rng::seed_from_u64(client_seed(cfg.seed, round, usize::MAX));
        let mut chosen: Vec<usize> = sample(&mut rng, n, per_round).into_vec();
        chosen.sort_unstable();
        let jobs: Vec<(usize, &Params)> = chosen
            .iter()
            .map(|&i| (i, &models[assignment[i]]))
            .collect();
        let mut updates = pool.train(round, &jobs, cfg)?;
        // Only answers to this round's jobs, of the right model, count (the pool should already
        // ensure it; this keeps a faulty pool from corrupting a cluster).
        let expected_len = models[0].values.len();
        updates.retain(|u| {
            chosen.binary_search(&u.client).is_ok()
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

        let evaluate_now = round % cfg.eval_every == 0 || round == cfg.rounds;
        let (accuracy, cluster_accuracy) = if evaluate_now {
            let jobs: Vec<(usize, &Params)> = (0..n)
                .filter(|&i| stale[assignment[i]] || last_eval[i].is_none())
                .map(|i| (i, &models[assignment[i]]))
                .collect();
            for (i, rep) in pool.evaluate(round, &jobs)? {
                last_eval[i] = Some(rep);
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
            )
        } else {
            (None, None)
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
            seconds: t0.elapsed().as_secs_f64(),
        };
        observer.round(&record, cfg.rounds);
        rounds.push(record);
    }

    Ok(RunResult {
        config: cfg.clone(),
        clients,
        assignment,
        n_clusters,
        clustering,
        distances,
        ari,
        signature_len,
        rounds,
        final_client_accuracy,
        models,
        wall_seconds: start.elapsed().as_secs_f64(),
    })
}
