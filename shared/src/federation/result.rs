//! What a run reports: per-round records, the result, newcomers, and progress notifications.

use serde::{Deserialize, Serialize};

use super::{ClientInfo, RunContext};
use crate::cluster::clustering::{Clustering, ClusteringError};
use crate::cluster::distance::{CondensedMatrix, DistanceError};
use crate::cluster::robust::Reported;
use crate::model::Params;
use crate::train::EvalReport;

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
    /// A round-0 client sent no round-0 upload and was left out of round 0 (it is offered again
    /// as a newcomer of round 1).
    fn left_out(&mut self, _client: &ClientInfo) {}
    /// A trained model was dropped: it claimed more samples than its client declared, or its
    /// change is above `max_update_norm` (reported at the end of the round it came in).
    fn update_dropped(&mut self, _dropped: &DroppedUpdate) {}
}

/// Why a trained model that checked (architecture, size, finite) was still dropped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "snake_case", tag = "reason")]
#[non_exhaustive]
pub enum UpdateRejection {
    /// It claims more training samples than its client declared when it joined
    /// ([`ClientInfo::samples`]), so it would outweigh its share of the average.
    #[error("claims {samples} training samples, the client declared {declared} when it joined")]
    TooManySamples {
        /// The count the update carried.
        samples: u64,
        /// The count the client declared.
        declared: u64,
    },
    /// Its change ‖θ_client − θ_sent‖₂ is above [`super::FederationConfig::max_update_norm`].
    #[error("update norm {norm:.4} is above the bound {bound}")]
    NormAbove {
        /// ‖θ_client − θ_sent‖₂.
        norm: f64,
        /// The bound.
        bound: f64,
    },
}

impl UpdateRejection {
    /// Its name in `summary.json` (`too_many_samples`, `norm_above`).
    pub fn name(&self) -> &'static str {
        match self {
            UpdateRejection::TooManySamples { .. } => "too_many_samples",
            UpdateRejection::NormAbove { .. } => "norm_above",
        }
    }
}

/// A trained model dropped by [`super::Env::run`], with its client and round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DroppedUpdate {
    /// The client's id.
    pub client: String,
    /// The round it was trained in (0: round 0's exchanges).
    pub round: usize,
    /// Why.
    #[serde(flatten)]
    pub reason: UpdateRejection,
}

/// A client that joined after round 0 and was placed in a cluster, from whose training round on
/// it is sampled and evaluated like the round-0 clients.
///
/// FedClust (Algorithm 2): it trains θ⁰ with round 0's warm-up (seed
/// [`client_seed`](crate::federation::client_seed)`(seed, 0, index)`, as if it had been there), uploads the same layers, and joins
/// the cluster whose centroid of round-0 uploads is nearest ([`nearest_centroid`](crate::cluster::clustering::nearest_centroid)); the
/// centroids stay those of round 0, so the order newcomers come in does not matter. FedAvg: the
/// one cluster. Local: a cluster (model θ⁰) of its own. Random: the smallest group (ties: the
/// lower index). MT-HFL: the cluster of highest mean relevance to the newcomer's uploaded
/// signature. Each other method's file says how it places newcomers.
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
    /// Its accuracy (the run's local test view) after training its cluster's final model for
    /// [`super::FederationConfig::personalize_epochs`] epochs; None without personalisation or
    /// when its answer did not come back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub personalized_accuracy: Option<f64>,
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
    Unsupported(String),
}

impl From<ClusteringError> for NewcomerError {
    fn from(e: ClusteringError) -> Self {
        match e {
            ClusteringError::WrongDimension { expected, got } => {
                NewcomerError::WrongLength { expected, got }
            }
            ClusteringError::Distance(DistanceError::NotFinite { col, .. }) => {
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
    /// this round), in the run's view ([`super::FederationConfig::local_test`]): one of the two
    /// below.
    pub accuracy: Option<f64>,
    /// Mean accuracy in the `labels` view (every test image of each label a client holds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy_labels: Option<f64>,
    /// Mean accuracy in the `proportional` view (labels weighted as in the client's training
    /// data), over the clients that reported their training labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy_proportional: Option<f64>,
    /// Mean local test accuracy per cluster, in the run's view (same rounds as `accuracy`).
    pub cluster_accuracy: Option<Vec<f64>>,
    /// Per ground-truth task `t` (when the truth is known): the mean over the clients of task `t`
    /// of their cluster model's accuracy on the test samples of task `t`'s labels (on their whole
    /// local test set when the tasks have no label sets). Same rounds as `accuracy`.
    #[serde(default)]
    pub task_accuracy: Option<Vec<f64>>,
    /// True when the GPS averaged the common layers after this round's training.
    #[serde(default)]
    pub gps: bool,
    /// Clusters after this round (methods that merge, split or reassign change it).
    #[serde(default)]
    pub clusters: usize,
    /// ARI of the clients' clusters after this round against the ground truth, when known.
    #[serde(default)]
    pub ari: Option<f64>,
    /// Seconds the round took.
    pub seconds: f64,
}

/// The result of a run.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// The method that ran (its command-line name).
    pub method: &'static str,
    /// Clients.
    pub clients: Vec<ClientInfo>,
    /// Final cluster of each client, by position in `clients` (`clients[p].index` is the pool's
    /// index: `p` itself unless a round-0 client before it was left out or a newcomer before it
    /// was dropped).
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
    /// Each client's best accuracy over all evaluations of the run (NaN: never evaluated), in
    /// the run's local test view.
    pub best_client_accuracy: Vec<f64>,
    /// The cluster models at the end.
    #[serde(skip)]
    pub models: Vec<Params>,
    /// Clients that joined after round 0 and were placed (they follow the round-0 clients in
    /// `clients`, `assignment` and `final_client_accuracy`, in the order they joined).
    pub newcomers: Vec<Newcomer>,
    /// Clients that joined after round 0 and were turned away.
    pub dropped_newcomers: Vec<DroppedNewcomer>,
    /// Round-0 clients that sent no round-0 upload and were left out of round 0. Each was
    /// offered again as a newcomer of round 1: it is then in `newcomers` (and `clients`), or in
    /// `dropped_newcomers`.
    pub left_out: Vec<ClientInfo>,
    /// Trained models dropped for claiming too many samples or for a too large change, in the
    /// order they came.
    pub dropped_updates: Vec<DroppedUpdate>,
    /// Floats sent to clients over the whole run (models, relays; every client together).
    pub floats_down: u64,
    /// Floats clients uploaded over the whole run (models, signatures, rows).
    pub floats_up: u64,
    /// Bytes of the messages sent to clients over the whole run: the postcard encoding of each
    /// job's command (and of MT-HFL's relay, once per client that needs it), envelopes left out
    /// ([`crate::jobs::JobKind::command`]).
    pub bytes_down: u64,
    /// Bytes of the messages clients answered with over the whole run, as they came (models in
    /// the pool's upload encoding), envelopes left out.
    pub bytes_up: u64,
    /// Wall-clock seconds of the whole run.
    pub wall_seconds: f64,
}

impl RunResult {
    /// Whether the clusters trained as LPSs under a GPS.
    pub fn hierarchical(&self) -> bool {
        self.common_layers.is_some()
    }

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

    /// The clients' last reported accuracies ([`RunResult::final_client_accuracy`]) summarised
    /// so that one client's lie cannot move it far: mean, median, trimmed mean and outliers
    /// (positions in `clients`). These accuracies are what each client says of its own test
    /// set; the coordinator cannot check them.
    pub fn reported_accuracy(&self) -> Option<Reported> {
        Reported::of(&self.final_client_accuracy)
    }

    /// The newcomers' mean accuracy after personalising ([`Newcomer::personalized_accuracy`]),
    /// over those that have one.
    pub fn mean_personalized_accuracy(&self) -> Option<f64> {
        mean_of(
            self.newcomers
                .iter()
                .filter_map(|n| n.personalized_accuracy),
        )
    }

    /// The mean over the evaluated clients of each one's best accuracy in the run (PACFL's
    /// "Best Clients AVG Acc"): an optimistic figure, as each client is scored at its own best
    /// round.
    pub fn mean_best_client_accuracy(&self) -> Option<f64> {
        mean_of(
            self.best_client_accuracy
                .iter()
                .copied()
                .filter(|a| !a.is_nan()),
        )
    }
}

/// The mean of `values` (None when there are none).
pub(super) fn mean_of(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values
        .into_iter()
        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// Per-task accuracy of one evaluation (see [`RoundRecord::task_accuracy`]).
pub(super) fn task_accuracy(
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
            None => e.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::Backend;

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
