//! The client side as the server sees it: a [`ClientPool`] runs [`Job`]s on clients and returns
//! their [`Answer`]s.
//!
//! The job vocabulary is what every method needs a client to compute; a method file builds jobs
//! and reads answers, and the runtimes (the in-process [`crate::sim::SimPool`], the
//! coordinator's MQTT pool) only carry them. A new method that needs nothing new from clients
//! touches neither.
//!
//! | job | answer | used by |
//! | --- | --- | --- |
//! | [`Job::Train`] | [`Answer::Update`] | every method's training round (FedProx, FeSEM: with a proximal term) |
//! | [`Job::Signature`] | [`Answer::Signature`] | FedClust, AdaCFL round 0 (warm-up, then some layers; AdaCFL adds label statistics) |
//! | [`Job::TrainPair`] | [`Answer::Pair`] | StoCFL's bi-level step (global ω and cluster θ with a proximal term toward ω) |
//! | [`Job::Pick`] | [`Answer::Picked`] | IFCA (lowest local loss of K models, train that one) |
//! | [`Job::Gradient`] | [`Answer::Gradient`] | StoCFL's anchor gradient |
//! | [`Job::GramSignature`] | [`Answer::Eigenpairs`] | MT-HFL round 0 |
//! | [`Job::Relevance`] | [`Answer::Row`] | MT-HFL round 0, relevance on the clients |
//! | [`Job::Evaluate`] | [`Answer::Evaluation`] | every method |

use serde::{Deserialize, Serialize};

use crate::cluster::spectral::{Estimate, Signature};
use crate::model::{LayerSet, Params};
use crate::protocol::Encoding;
use crate::train::{EvalReport, TrainConfig};

/// What the pool knows about a client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientInfo {
    /// Index in `0..n`.
    pub index: usize,
    /// Human-readable id (the MQTT client id on a real fleet).
    pub id: String,
    /// Training samples, as the client declared when it joined (its `Hello` on a real fleet). The
    /// one number a client reports about itself that weights an average: every update it sends
    /// must claim at most this many ([`crate::federation::Env::run`] drops the others), and the
    /// GPS weighs clusters by their members' declared counts; `Weighting::Equal` removes it from
    /// every average.
    pub samples: u64,
}

/// A proximal term `μ/2 · ‖θ − anchor‖²` added to a client's local objective (FedProx, FeSEM's
/// distance regulariser, StoCFL's λ).
#[derive(Debug, Clone, Copy)]
pub struct Prox<'a> {
    /// The model the local one is pulled toward.
    pub anchor: &'a Params,
    /// Strength μ ≥ 0.
    pub mu: f64,
}

/// One local training: start from `start`, train with `cfg` (epochs, batch, lr, momentum, seed of
/// the sample order), optionally with a proximal term.
#[derive(Debug, Clone, Copy)]
pub struct Training<'a> {
    /// The starting model.
    pub start: &'a Params,
    /// Local-training settings.
    pub cfg: TrainConfig,
    /// Proximal term, if any.
    pub prox: Option<Prox<'a>>,
}

/// Work for one client.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Job<'a> {
    /// Train and upload the whole model.
    Train(Training<'a>),
    /// Train, then upload only `layers` of the result; with `stats`, also the label statistics of
    /// the training data ([`LabelStats`]).
    Signature {
        /// The training (round 0's warm-up).
        train: Training<'a>,
        /// Layers to upload.
        layers: &'a LayerSet,
        /// Also upload [`LabelStats`].
        stats: bool,
    },
    /// Two trainings on the same data, both uploaded (StoCFL: ω plainly, θₖ with a proximal term
    /// toward ω).
    TrainPair {
        /// The global model's training.
        global: Training<'a>,
        /// The cluster model's training.
        cluster: Training<'a>,
    },
    /// IFCA: the mean training loss of each candidate on the local training data, then the
    /// candidate of lowest loss (ties: the lower index) is trained with `train` (whose `start` is
    /// ignored) and uploaded.
    Pick {
        /// The candidate models.
        candidates: Vec<&'a Params>,
        /// Settings of the training of the chosen one (`start` is replaced by the choice).
        train: Training<'a>,
    },
    /// The gradient of the mean cross-entropy over all local training data at `at`, normalised to
    /// unit L2 norm (StoCFL's Ψ).
    Gradient {
        /// Where the gradient is taken (the anchor model).
        at: &'a Params,
        /// Batch size of the forward passes (no effect on the result beyond rounding).
        batch_size: usize,
    },
    /// MT-HFL: the `k` leading eigenpairs of the Gram matrix of the training data, uploaded in
    /// `encoding`.
    GramSignature {
        /// Eigenpairs.
        k: usize,
        /// Upload encoding.
        encoding: Encoding,
    },
    /// MT-HFL: the relevance row `r(i, ·)` against every client's signature `all`, computed with
    /// the client's exact Gram matrix.
    Relevance {
        /// Every client's signature, client `j`'s at position `j`.
        all: &'a [Signature],
        /// How to estimate eigenvalues under the own Gram matrix.
        estimate: Estimate,
    },
    /// Evaluate a model on the local test set.
    Evaluate {
        /// The model.
        model: &'a Params,
    },
}

impl Job<'_> {
    /// Floats this job carries down to the client (models, relays), for the byte counts of
    /// simulated runs.
    pub fn floats_down(&self) -> usize {
        let train = |t: &Training<'_>| {
            t.start.values.len()
                + t.prox.map_or(0, |p| {
                    usize::from(!std::ptr::eq(p.anchor, t.start)) * p.anchor.values.len()
                })
        };
        match self {
            Job::Train(t) | Job::Signature { train: t, .. } => train(t),
            Job::TrainPair { global, cluster } => {
                // The cluster's anchor is the global model, which travels once.
                global.start.values.len() + cluster.start.values.len()
            }
            Job::Pick { candidates, .. } => candidates.iter().map(|c| c.values.len()).sum(),
            Job::Gradient { at, .. } => at.values.len(),
            Job::GramSignature { .. } => 0,
            Job::Relevance { all, .. } => all.iter().map(|s| s.k * s.d + s.k).sum(),
            Job::Evaluate { model } => model.values.len(),
        }
    }

    /// A short name for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Job::Train(_) => "train",
            Job::Signature { .. } => "signature",
            Job::TrainPair { .. } => "train-pair",
            Job::Pick { .. } => "pick",
            Job::Gradient { .. } => "gradient",
            Job::GramSignature { .. } => "gram-signature",
            Job::Relevance { .. } => "relevance",
            Job::Evaluate { .. } => "evaluate",
        }
    }
}

/// A trained model coming back from a client.
#[derive(Debug, Clone)]
pub struct Update {
    /// Client index.
    pub client: usize,
    /// New parameters.
    pub params: Params,
    /// Samples it trained on (the FedAvg weight), at most its client's declared
    /// [`ClientInfo::samples`]; 1 under `Weighting::Equal`.
    pub samples: u64,
    /// Its mean training loss over the last local epoch.
    pub loss: f64,
}

/// Label statistics of a client's training data (AdaCFL's pre-clustering, its eq. 4).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LabelStats {
    /// Number of classes present (L).
    pub classes: u32,
    /// Shannon entropy of the label histogram in bits (s = −Σ p log₂ p).
    pub entropy: f64,
}

impl LabelStats {
    /// The statistics of `labels`, counting only classes that hold at least `min_share` of the
    /// samples (0 counts every class present).
    pub fn of(labels: &[u8], min_share: f64) -> LabelStats {
        let mut counts = [0usize; 256];
        for &l in labels {
            counts[usize::from(l)] += 1;
        }
        let n = labels.len().max(1) as f64;
        let mut classes = 0;
        let mut entropy = 0.0;
        for &c in counts.iter().filter(|&&c| c > 0) {
            let p = c as f64 / n;
            if p >= min_share {
                classes += 1;
            }
            entropy -= p * p.log2();
        }
        LabelStats {
            classes,
            entropy: entropy.max(0.0),
        }
    }
}

/// A client's answer to a [`Job`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Answer {
    /// To [`Job::Train`].
    Update(Update),
    /// To [`Job::Signature`].
    Signature {
        /// The selected layers' values.
        values: Vec<f32>,
        /// Label statistics, when asked.
        stats: Option<LabelStats>,
    },
    /// To [`Job::TrainPair`].
    Pair {
        /// The trained global model.
        global: Update,
        /// The trained cluster model.
        cluster: Update,
    },
    /// To [`Job::Pick`].
    Picked {
        /// Index of the chosen candidate.
        choice: usize,
        /// Mean training loss of each candidate before training.
        losses: Vec<f64>,
        /// The trained choice.
        update: Update,
    },
    /// To [`Job::Gradient`].
    Gradient(Vec<f32>),
    /// To [`Job::GramSignature`], as the coordinator received it (upload rounding applied).
    Eigenpairs(Signature),
    /// To [`Job::Relevance`].
    Row(Vec<f64>),
    /// To [`Job::Evaluate`].
    Evaluation(Box<EvalReport>),
}

impl Answer {
    /// Floats this answer carries up (models, signatures, rows), for byte counts.
    pub fn floats_up(&self) -> usize {
        match self {
            Answer::Update(u) => u.params.values.len(),
            Answer::Signature { values, stats } => values.len() + 2 * usize::from(stats.is_some()),
            Answer::Pair { global, cluster } => {
                global.params.values.len() + cluster.params.values.len()
            }
            Answer::Picked { update, losses, .. } => update.params.values.len() + losses.len(),
            Answer::Gradient(g) => g.len(),
            Answer::Eigenpairs(s) => s.k * s.d + s.k,
            Answer::Row(r) => r.len(),
            Answer::Evaluation(_) => 0,
        }
    }

    /// A short name for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Answer::Update(_) => "update",
            Answer::Signature { .. } => "signature",
            Answer::Pair { .. } => "pair",
            Answer::Picked { .. } => "picked",
            Answer::Gradient(_) => "gradient",
            Answer::Eigenpairs(_) => "eigenpairs",
            Answer::Row(_) => "row",
            Answer::Evaluation(_) => "evaluation",
        }
    }
}

/// Why the pool could not run a set of jobs (a client that fails or drops out is not an error:
/// its answer is simply missing).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// The transport failed (broker connection lost for good, a message that cannot be sent).
    #[error("transport: {0}")]
    Transport(String),
    /// A job cannot be sent as asked (too large for the wire, not supported by this pool).
    #[error("job {job}: {reason}")]
    Job {
        /// The job's name ([`Job::name`]).
        job: &'static str,
        /// Why.
        reason: String,
    },
    /// A client in this process failed its job (in-process pools stop the run: the failure is
    /// a bug or bad data, not a dropout).
    #[error("client {client}: {reason}")]
    Client {
        /// Client index.
        client: usize,
        /// Why.
        reason: String,
    },
    /// A job named a client the pool does not have.
    #[error("no client {0}")]
    NoClient(usize),
}

/// The client side of the federation, as the server sees it.
pub trait ClientPool {
    /// The clients of round 0, indexed `0..n`.
    fn clients(&self) -> Vec<ClientInfo>;

    /// Runs `jobs` (at most one per client) in round `round` (0: the clustering round), and
    /// returns the answers it got, in any order. A client that dropped out, failed or timed out
    /// has no answer; the caller carries on with those it got.
    fn run(
        &mut self,
        round: usize,
        jobs: &[(usize, Job<'_>)],
    ) -> Result<Vec<(usize, Answer)>, PoolError>;

    /// Clients that joined after round 0 and are waiting to be placed, asked at the start of
    /// every training round `round`. Each returned client's `index` is the one the pool knows
    /// it by in later calls and must not be one of the run's clients yet. A client is handed
    /// over once. The default has no newcomers.
    fn newcomers(&mut self, _round: usize) -> Vec<ClientInfo> {
        Vec::new()
    }

    /// The encoding clients upload models, layers and gradients in (the default: f32), for the
    /// byte counts of [`super::wire`].
    fn upload(&self) -> Encoding {
        Encoding::F32
    }

    /// Whether [`ClientPool::checkpoint`] should be called after every round (the default: no).
    fn wants_checkpoints(&self) -> bool {
        false
    }

    /// Keeps the driver's state after a completed round (a runtime writes it, with its own
    /// state, where a resumed run finds it). The default keeps nothing.
    ///
    /// # Errors
    ///
    /// The checkpoint cannot be kept (the run stops: a run asked to be resumable is not run
    /// unprotected).
    fn checkpoint(&mut self, _checkpoint: &super::Checkpoint) -> Result<(), PoolError> {
        Ok(())
    }
}
