//! FedClust (Islam et al.): one-shot client clustering from final-layer weights.
//!
//! Algorithm 1, round 0: every client trains the initial model θ⁰ for a few local epochs and
//! uploads only the weights of its final layer (850 floats for LeNet-5, see
//! [`LayerSet::Final`](crate::model::LayerSet)). The server builds the Euclidean distance matrix
//! between the uploads (eq. 3) and runs agglomerative hierarchical clustering (HC), cut at the
//! threshold λ; the number of clusters is found, not given. Every cluster model starts from θ⁰.
//! A choice of ours, not the paper's (`--cluster-start members`, [`ClusterStart::Members`]):
//! round 0 uploads the whole warmed-up model instead (its signature layers are cut out of it on
//! the server), and each cluster model starts from its members' FedAvg average.
//!
//! Algorithm 2, newcomers: a client that joins later trains θ⁰ the same way and uploads its final
//! layer; the server puts it in the cluster whose stored partial weights are nearest (eq. 4). The
//! stored partial weights of a cluster are the centroid (mean) of its members' round-0 uploads.
//!
//! The round loop that follows (cluster-wise FedAvg with client sampling) is in
//! [`federation`](crate::federation).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::aggregate::weighted_average;
use crate::cluster::cut::{CutScores, gap_cut, silhouette_cut};
use crate::cluster::distance::{CondensedMatrix, DistanceError};
use crate::cluster::hc::{Dendrogram, Linkage, linkage};
use crate::cluster::robust::{Guard, quarantined_cut};
use crate::federation::{
    Answer, ClientInfo, Clusters, Env, FederationConfig, FederationError, Init, Job, NewcomerError,
    Placement, RoundStats, Strategy, Target, Training, Weighting, client_seed, fedavg_round,
    round0_uploads,
};
use crate::model::{LayerSet, ParamLayout, Params};

/// Where FedClust's cluster models start after round 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClusterStart {
    /// θ⁰, the model every client warmed up from (the paper's Algorithm 1).
    #[default]
    Initial,
    /// The average of the members' warmed-up models, weighted as FedAvg weighs updates (a choice
    /// of ours): round 0 uploads the whole model instead of the signature layers (LeNet-5:
    /// 44 426 floats instead of 850), and the newcomers still upload the signature layers only.
    Members,
}

impl fmt::Display for ClusterStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClusterStart::Initial => "initial",
            ClusterStart::Members => "members",
        })
    }
}

impl FromStr for ClusterStart {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "initial" => Ok(ClusterStart::Initial),
            "members" => Ok(ClusterStart::Members),
            _ => Err(format!(
                "unknown cluster start {s:?} (expected initial or members)"
            )),
        }
    }
}

/// Where to cut the dendrogram.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Threshold {
    /// Cut at height λ: merges at heights ≤ λ are applied (scipy `fcluster(criterion="distance")`).
    Distance(f64),
    /// The candidate cut of best mean silhouette on the clustered distances, or one cluster when
    /// none reaches [`MIN_SILHOUETTE`](crate::cluster::cut::MIN_SILHOUETTE)
    /// ([`silhouette_cut`]). The default.
    Auto,
    /// Cut in the largest gap between consecutive merge heights
    /// ([`Dendrogram::auto_threshold`], [`gap_cut`]).
    Gap,
    /// Cut so that exactly this many clusters remain (for known-K experiments).
    Clusters(usize),
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Threshold::Distance(x) => write!(f, "{x}"),
            Threshold::Auto => f.write_str("auto"),
            Threshold::Gap => f.write_str("gap"),
            Threshold::Clusters(k) => write!(f, "k={k}"),
        }
    }
}

/// A threshold that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid threshold {0:?}: expected a distance ≥ 0, `auto`, `gap`, or `k=N` (N ≥ 1)")]
pub struct ThresholdParseError(pub String);

impl FromStr for Threshold {
    type Err = ThresholdParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ThresholdParseError(s.to_string());
        if s == "auto" {
            return Ok(Threshold::Auto);
        }
        if s == "gap" {
            return Ok(Threshold::Gap);
        }
        if let Some(k) = s.strip_prefix("k=") {
            return match k.parse::<usize>() {
                Ok(k) if k >= 1 => Ok(Threshold::Clusters(k)),
                _ => Err(err()),
            };
        }
        match s.parse::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 => Ok(Threshold::Distance(x)),
            _ => Err(err()),
        }
    }
}

impl From<Threshold> for String {
    fn from(t: Threshold) -> String {
        t.to_string()
    }
}

impl TryFrom<String> for Threshold {
    type Error = ThresholdParseError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// Errors of the clustering step.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FedClustError {
    /// Bad uploads (ragged, NaN, …).
    #[error("client signatures: {0}")]
    Distance(#[from] DistanceError),
    /// No signature at all.
    #[error("no client signature to cluster")]
    Empty,
    /// A newcomer's signature has the wrong length.
    #[error("newcomer signature has {got} floats, clusters have {expected}")]
    WrongDimension {
        /// Centroid length.
        expected: usize,
        /// Received length.
        got: usize,
    },
}

/// The outcome of the one-shot clustering.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Clustering {
    /// Cluster of each client (0-based, in order of first appearance).
    pub assignment: Vec<usize>,
    /// Number of clusters.
    pub n_clusters: usize,
    /// The full merge tree.
    pub dendrogram: Dendrogram,
    /// The height the tree was cut at (for `Clusters(k)`, the height of the last applied merge).
    pub threshold: f64,
    /// Linkage used.
    pub linkage: Linkage,
    /// Centroid of the members' signatures, per cluster (the partial weights kept for newcomers).
    pub centroids: Vec<Vec<f32>>,
    /// For the automatic cuts (`auto`, `gap`): the merge heights, every candidate cut with its
    /// score, and the one chosen. `None` for `k=N` and numeric λ cuts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<CutScores>,
    /// Under [`Guard::Robust`]: the signatures whose norm was an outlier, scaled to the median
    /// norm before the distances were taken ([`rescale_norm_outliers`]). Positions as in
    /// `assignment`, or of the run's clients after [`Clustering::map_positions`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rescaled: Vec<usize>,
    /// Under [`Guard::Robust`]: the isolated clients ([`isolated`]), each made a cluster of its
    /// own while the tree and its cut were built from the others. Positions as `rescaled`'s.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quarantined: Vec<usize>,
}

impl Clustering {
    /// Members of cluster `c`.
    pub fn members(&self, c: usize) -> Vec<usize> {
        (0..self.assignment.len())
            .filter(|&i| self.assignment[i] == c)
            .collect()
    }

    /// Maps `rescaled` and `quarantined` from positions among the clustered signatures to the
    /// run's client positions, `present[i]` being the client of signature `i` (clients absent
    /// in round 0 sent none).
    pub fn map_positions(&mut self, present: &[usize]) {
        for p in self.rescaled.iter_mut().chain(self.quarantined.iter_mut()) {
            *p = present[*p];
        }
    }
}

/// Runs HC on the signatures (one per client) and cuts it. Returns the distances too, for plots.
///
/// Under [`Guard::Robust`] (the default of a run) the signatures' norm outliers are scaled to the
/// median norm first, and isolated clients are set apart as clusters of their own while the
/// cut is chosen on the others ([`crate::cluster::robust`]); `Clusters(k)` then cuts the others
/// into `k`. On an honest fleet neither guard acts and the result is [`Guard::Paper`]'s.
pub fn cluster(
    signatures: &[Vec<f32>],
    method: Linkage,
    threshold: Threshold,
    guard: Guard,
) -> Result<(Clustering, CondensedMatrix), FedClustError> {
    if signatures.is_empty() {
        return Err(FedClustError::Empty);
    }
    let mut points = signatures.to_vec();
    let rescaled = guard.rescale(&mut points);
    let distances = CondensedMatrix::euclidean(&points)?;
    let dendrogram = linkage(&distances, method);
    let quarantined = guard.quarantine(&distances);
    let (assignment, height, cut) =
        guarded_cut(&dendrogram, &distances, method, threshold, &quarantined);
    let n_clusters = assignment.iter().max().map_or(0, |m| m + 1);
    let centroids = centroids(&points, &assignment, n_clusters);
    Ok((
        Clustering {
            assignment,
            n_clusters,
            dendrogram,
            threshold: height,
            linkage: method,
            centroids,
            cut,
            rescaled,
            quarantined,
        },
        distances,
    ))
}

/// Cuts `dendrogram` (built from `distances`) by `threshold`: the flat labels, the height cut at
/// (for `k=N`, the height of the last applied merge) and, for the automatic cuts, the scores of
/// every candidate. Used by FedClust and MT-HFL alike.
///
/// `Distance` and `Clusters` cut exactly as [`Dendrogram::cut_distance`] and
/// [`Dendrogram::cut_k`]; `Gap` at [`Dendrogram::auto_threshold`]; `Auto` at the threshold of
/// [`silhouette_cut`] (the tree and distances come from [`linkage`] here, so the cut cannot fail;
/// should it, the gap rule is used).
pub fn cut_tree(
    dendrogram: &Dendrogram,
    distances: &CondensedMatrix,
    threshold: Threshold,
) -> (Vec<usize>, f64, Option<CutScores>) {
    let n = dendrogram.n();
    match threshold {
        Threshold::Distance(t) => (dendrogram.cut_distance(t), t, None),
        Threshold::Gap => {
            let t = dendrogram.auto_threshold();
            (dendrogram.cut_distance(t), t, gap_cut(dendrogram).ok())
        }
        Threshold::Auto => match silhouette_cut(dendrogram, distances) {
            Ok(scores) => {
                let t = scores.threshold();
                (dendrogram.cut_distance(t), t, Some(scores))
            }
            Err(_) => cut_tree(dendrogram, distances, Threshold::Gap),
        },
        Threshold::Clusters(k) => {
            let k = k.clamp(1, n.max(1));
            let h = (n - k)
                .checked_sub(1)
                .and_then(|i| dendrogram.merges().get(i))
                .map_or(0.0, |m| m.height);
            (dendrogram.cut_k(k), h, None)
        }
    }
}

/// [`cut_tree`] with the `quarantined` points set apart ([`quarantined_cut`]): each is a cluster
/// of its own, and the tree of the others (linkage `method`) is cut by `threshold`. Without
/// quarantined points, exactly [`cut_tree`] of `dendrogram`.
pub fn guarded_cut(
    dendrogram: &Dendrogram,
    distances: &CondensedMatrix,
    method: Linkage,
    threshold: Threshold,
    quarantined: &[usize],
) -> (Vec<usize>, f64, Option<CutScores>) {
    let (labels, (height, cut)) =
        quarantined_cut(dendrogram, distances, method, quarantined, |tree, d| {
            let (labels, height, cut) = cut_tree(tree, d, threshold);
            (labels, (height, cut))
        });
    (labels, height, cut)
}

/// Mean signature of each cluster's members.
pub fn centroids(signatures: &[Vec<f32>], assignment: &[usize], k: usize) -> Vec<Vec<f32>> {
    let dim = signatures.first().map_or(0, Vec::len);
    let mut sums = vec![vec![0f64; dim]; k];
    let mut counts = vec![0usize; k];
    for (s, &c) in signatures.iter().zip(assignment) {
        counts[c] += 1;
        for (a, x) in sums[c].iter_mut().zip(s) {
            *a += f64::from(*x);
        }
    }
    sums.into_iter()
        .zip(counts)
        .map(|(s, n)| {
            s.into_iter()
                .map(|x| (x / n.max(1) as f64) as f32)
                .collect()
        })
        .collect()
}

/// FedClust Algorithm 2: the cluster whose centroid is nearest (Euclidean) to `signature`.
/// Ties go to the lower cluster index.
pub fn assign_newcomer(signature: &[f32], centroids: &[Vec<f32>]) -> Result<usize, FedClustError> {
    nearest_centroid(signature, centroids).map(|(c, _)| c)
}

/// [`assign_newcomer`] with the Euclidean distance to the chosen centroid (eq. 4's minimum).
///
/// # Errors
///
/// [`FedClustError::WrongDimension`] when the signature's length is not the centroids',
/// [`FedClustError::Distance`] for a NaN or infinite value, [`FedClustError::Empty`] without
/// centroids.
pub fn nearest_centroid(
    signature: &[f32],
    centroids: &[Vec<f32>],
) -> Result<(usize, f64), FedClustError> {
    let mut best: Option<(usize, f64)> = None;
    for (c, centroid) in centroids.iter().enumerate() {
        if centroid.len() != signature.len() {
            return Err(FedClustError::WrongDimension {
                expected: centroid.len(),
                got: signature.len(),
            });
        }
        if let Some(i) = signature.iter().position(|v| !v.is_finite()) {
            return Err(FedClustError::Distance(DistanceError::NotFinite {
                row: 0,
                col: i,
            }));
        }
        let d: f64 = centroid
            .iter()
            .zip(signature)
            .map(|(a, b)| (f64::from(*a) - f64::from(*b)).powi(2))
            .sum();
        if best.is_none_or(|(_, b)| d < b) {
            best = Some((c, d));
        }
    }
    best.map(|(c, d)| (c, d.sqrt())).ok_or(FedClustError::Empty)
}

/// Checks FedClust's settings: round 0 needs a warm-up.
pub(crate) fn check(cfg: &FederationConfig) -> Result<(), FederationError> {
    if cfg.warmup_epochs == 0 {
        return Err(FederationError::Config(
            "warmup-epochs must be ≥ 1 for fedclust".into(),
        ));
    }
    Ok(())
}

/// FedClust as a [`Strategy`]: Algorithm 1's round 0 in [`Strategy::init`], cluster FedAvg in
/// every round, Algorithm 2 for newcomers (the centroids stay those of round 0, so the order
/// newcomers come in does not matter).
#[derive(Debug, Clone, Default)]
pub struct FedClust {
    clustering: Option<Clustering>,
}

impl FedClust {
    /// The method for a run with `cfg`.
    pub fn new(_cfg: &FederationConfig) -> Self {
        FedClust::default()
    }
}

/// Every layer: round 0's upload under [`ClusterStart::Members`].
static ALL_LAYERS: LayerSet = LayerSet::All;

/// Round 0's upload job of client `p`: train θ⁰ for the warm-up epochs (seed
/// [`client_seed`]`(seed, 0, index)`, also for newcomers, as if they had been there) and upload
/// `layers`.
fn signature_job<'a>(env: &Env<'a>, p: usize, layers: &'a LayerSet) -> Job<'a> {
    let (cfg, initial) = (env.cfg, env.initial);
    let mut train = cfg.train_config(client_seed(cfg.seed, 0, env.clients[p].index));
    train.epochs = cfg.warmup_epochs;
    Job::Signature {
        train: Training {
            start: initial,
            cfg: train,
            prox: None,
        },
        layers,
        stats: false,
    }
}

/// The signatures among `answers`, by position.
fn signatures(answers: Vec<(usize, Answer)>) -> Vec<(usize, Vec<f32>)> {
    answers
        .into_iter()
        .filter_map(|(p, a)| match a {
            Answer::Signature { values, .. } => Some((p, values)),
            _ => None,
        })
        .collect()
}

impl Strategy for FedClust {
    /// The state: round 0's clustering (its centroids place newcomers).
    fn save(&self) -> Option<serde_json::Value> {
        serde_json::to_value(&self.clustering).ok()
    }

    fn restore(&mut self, state: serde_json::Value) -> Result<(), FederationError> {
        self.clustering = serde_json::from_value(state)
            .map_err(|e| FederationError::Config(format!("FedClust's checkpoint: {e}")))?;
        Ok(())
    }

    fn init(&mut self, env: &mut Env<'_>) -> Result<Init, FederationError> {
        let n = env.clients.len();
        let cfg = env.cfg;
        let members = cfg.cluster_start == Some(ClusterStart::Members);
        let layers = if members {
            &ALL_LAYERS
        } else {
            &cfg.signature_layers
        };
        let jobs = (0..n).map(|p| (p, signature_job(env, p, layers))).collect();
        let (uploads, absent) = round0_uploads(n, signatures(env.run(0, jobs)?))?;
        let len = uploads[0].len();
        // Under `Members`: (the signature layers cut out, the whole models).
        let (vectors, models) = if members {
            let selection = ParamLayout::of(cfg.model).select(&cfg.signature_layers)?;
            let cut = uploads.iter().map(|u| selection.extract(u)).collect();
            (cut, Some(uploads))
        } else {
            (uploads, None)
        };
        let (mut c, d) = cluster(&vectors, cfg.linkage, cfg.threshold, cfg.signature_guard)?;
        let present: Vec<usize> = (0..n).filter(|p| !absent.contains(p)).collect();
        c.map_positions(&present);
        let mut init = Init::plain(c.assignment.clone(), env.initial, true);
        if let Some(uploads) = models {
            // The present clients' declared samples, in the order of `uploads`.
            let weights: Vec<u64> = (0..n)
                .filter(|p| !absent.contains(p))
                .map(|p| match cfg.weighting {
                    Weighting::Samples => env.clients[p].samples,
                    Weighting::Equal => 1,
                })
                .collect();
            for (k, model) in init.models.iter_mut().enumerate() {
                let items: Vec<(&[f32], u64)> = c
                    .members(k)
                    .into_iter()
                    .map(|i| (uploads[i].as_slice(), weights[i]))
                    .collect();
                let mean = weighted_average(&items)
                    .map_err(|e| FederationError::Config(format!("cluster {k}'s start: {e}")))?;
                *model = Params::new(cfg.model, mean)?;
            }
        }
        init.absent = absent;
        init.signature_len = len;
        init.signature_bytes = len * 4;
        init.distances = Some(d);
        init.clustering = Some(c.clone());
        self.clustering = Some(c);
        Ok(init)
    }

    fn round(
        &mut self,
        env: &mut Env<'_>,
        round: usize,
        sampled: &[usize],
        state: &mut Clusters,
    ) -> Result<RoundStats, FederationError> {
        fedavg_round(env, round, sampled, state)
    }

    fn place(
        &mut self,
        env: &mut Env<'_>,
        _round: usize,
        fresh: &[ClientInfo],
        state: &Clusters,
    ) -> Result<Vec<Result<Placement, NewcomerError>>, FederationError> {
        let base = state.assignment().len();
        let jobs = (base..base + fresh.len())
            .map(|p| (p, signature_job(env, p, &env.cfg.signature_layers)))
            .collect();
        let mut sigs: std::collections::HashMap<usize, Vec<f32>> =
            signatures(env.run(0, jobs)?).into_iter().collect();
        Ok((base..base + fresh.len())
            .map(|p| match (sigs.remove(&p), &self.clustering) {
                (None, _) => Err(NewcomerError::NoSignature),
                (Some(_), None) => Err(NewcomerError::Assignment("no clustering".into())),
                (Some(sig), Some(c)) => nearest_centroid(&sig, &c.centroids)
                    .map(|(k, d)| Placement {
                        target: Target::Cluster(k),
                        distance: Some(d),
                    })
                    .map_err(NewcomerError::from),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_parse() {
        assert_eq!("auto".parse::<Threshold>().unwrap(), Threshold::Auto);
        assert_eq!("gap".parse::<Threshold>().unwrap(), Threshold::Gap);
        for t in ["auto", "gap", "k=3", "1.5"] {
            assert_eq!(t.parse::<Threshold>().unwrap().to_string(), t);
        }
        assert_eq!(
            "1.5".parse::<Threshold>().unwrap(),
            Threshold::Distance(1.5)
        );
        assert_eq!("k=3".parse::<Threshold>().unwrap(), Threshold::Clusters(3));
        for bad in ["-1", "k=0", "nan", "x", ""] {
            assert!(bad.parse::<Threshold>().is_err(), "{bad}");
        }
    }

    #[test]
    fn two_obvious_groups() {
        // Points on a line: {0, 0.1, 0.2} and {10, 10.1}; any λ in (0.1, 9.8) separates them.
        let s: Vec<Vec<f32>> = [0.0, 10.0, 0.1, 10.1, 0.2]
            .iter()
            .map(|&x| vec![x])
            .collect();
        for l in [
            Linkage::Single,
            Linkage::Complete,
            Linkage::Average,
            Linkage::Ward,
        ] {
            let (c, _) = cluster(&s, l, Threshold::Distance(1.0), Guard::Paper).unwrap();
            assert_eq!(c.assignment, vec![0, 1, 0, 1, 0], "{l}");
            let (c, _) = cluster(&s, l, Threshold::Auto, Guard::Paper).unwrap();
            assert_eq!(c.assignment, vec![0, 1, 0, 1, 0], "{l} auto");
            let cut = c.cut.as_ref().unwrap();
            assert_eq!(cut.chosen().unwrap().n_clusters, 2);
            assert_eq!(cut.heights, c.dendrogram.heights());
            let (c, _) = cluster(&s, l, Threshold::Gap, Guard::Paper).unwrap();
            assert_eq!(c.assignment, vec![0, 1, 0, 1, 0], "{l} gap");
        }
        let (c, _) = cluster(&s, Linkage::Single, Threshold::Clusters(2), Guard::Paper).unwrap();
        assert_eq!(c.n_clusters, 2);
        // Centroids by hand: mean(0, 0.1, 0.2) = 0.1, mean(10, 10.1) = 10.05.
        assert!((c.centroids[0][0] - 0.1).abs() < 1e-6);
        assert!((c.centroids[1][0] - 10.05).abs() < 1e-5);
    }

    #[test]
    fn newcomer_goes_to_nearest_centroid() {
        let centroids = vec![vec![0.0, 0.0], vec![3.0, 4.0]];
        assert_eq!(assign_newcomer(&[1.0, 1.0], &centroids).unwrap(), 0);
        assert_eq!(assign_newcomer(&[2.0, 3.0], &centroids).unwrap(), 1);
        // Equidistant: lower index.
        assert_eq!(assign_newcomer(&[1.5, 2.0], &centroids).unwrap(), 0);
        assert!(assign_newcomer(&[1.0], &centroids).is_err());
        assert!(assign_newcomer(&[f32::NAN, 0.0], &centroids).is_err());
        let (c, d) = nearest_centroid(&[3.0, 0.0], &centroids).unwrap();
        assert_eq!(c, 0);
        assert!((d - 3.0).abs() < 1e-12);
        assert!(matches!(
            nearest_centroid(&[0.0, 0.0], &[]),
            Err(FedClustError::Empty)
        ));
    }
}
