//! The one-shot clustering of client signatures shared by the methods that cluster once
//! (FedClust, AdaCFL, MT-HFL, random groups): where a dendrogram is cut ([`Lambda`]), the
//! cut itself ([`cut_tree`], [`guarded_cut`]), HC on signatures with the guards of
//! [`robust`](crate::cluster::robust) ([`cluster_signatures`]), the clusters' centroids and the nearest one
//! ([`nearest_centroid`]), and the outcome a run keeps and reports ([`Clustering`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::cluster::cut::{CutScores, gap_cut, silhouette_cut};
use crate::cluster::distance::{CondensedMatrix, DistanceError};
use crate::cluster::hc::{Dendrogram, Linkage, linkage};
use crate::cluster::robust::{Guard, quarantined_cut};

/// λ: where to cut the dendrogram (`--lambda`, the `[federation]` key `lambda`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Lambda {
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

impl fmt::Display for Lambda {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lambda::Distance(x) => write!(f, "{x}"),
            Lambda::Auto => f.write_str("auto"),
            Lambda::Gap => f.write_str("gap"),
            Lambda::Clusters(k) => write!(f, "k={k}"),
        }
    }
}

/// A λ that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid lambda {0:?}: expected a distance ≥ 0, `auto`, `gap`, or `k=N` (N ≥ 1)")]
pub struct LambdaParseError(pub String);

impl FromStr for Lambda {
    type Err = LambdaParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || LambdaParseError(s.to_string());
        if s == "auto" {
            return Ok(Lambda::Auto);
        }
        if s == "gap" {
            return Ok(Lambda::Gap);
        }
        if let Some(k) = s.strip_prefix("k=") {
            return match k.parse::<usize>() {
                Ok(k) if k >= 1 => Ok(Lambda::Clusters(k)),
                _ => Err(err()),
            };
        }
        match s.parse::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 => Ok(Lambda::Distance(x)),
            _ => Err(err()),
        }
    }
}

impl From<Lambda> for String {
    fn from(t: Lambda) -> String {
        t.to_string()
    }
}

impl TryFrom<String> for Lambda {
    type Error = LambdaParseError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// Errors of the one-shot clustering of signatures.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusteringError {
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

/// The outcome of a one-shot clustering (FedClust, AdaCFL, MT-HFL, random groups).
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
    /// norm before the distances were taken ([`rescale_norm_outliers`](crate::cluster::robust::rescale_norm_outliers)). Positions as in
    /// `assignment`, or of the run's clients after [`Clustering::map_positions`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rescaled: Vec<usize>,
    /// Under [`Guard::Robust`]: the isolated clients ([`isolated`](crate::cluster::robust::isolated)), each made a cluster of its
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

/// Runs HC on the signatures (one per client, Euclidean distances: FedClust's eq. 3) and cuts
/// it. Returns the distances too, for plots.
///
/// Under [`Guard::Robust`] (the default of a run) the signatures' norm outliers are scaled to the
/// median norm first, and isolated clients are set apart as clusters of their own while the
/// cut is chosen on the others ([`crate::cluster::robust`]); `Clusters(k)` then cuts the others
/// into `k`. On an honest fleet neither guard acts and the result is [`Guard::Paper`]'s.
pub fn cluster_signatures(
    signatures: &[Vec<f32>],
    method: Linkage,
    lambda: Lambda,
    guard: Guard,
) -> Result<(Clustering, CondensedMatrix), ClusteringError> {
    if signatures.is_empty() {
        return Err(ClusteringError::Empty);
    }
    let mut points = signatures.to_vec();
    let rescaled = guard.rescale(&mut points);
    let distances = CondensedMatrix::euclidean(&points)?;
    let mut c = cluster_distances(&distances, method, lambda, guard);
    c.centroids = centroids(&points, &c.assignment, c.n_clusters);
    c.rescaled = rescaled;
    Ok((c, distances))
}

/// HC on `distances` (linkage `method`), cut by `lambda` with [`Guard::quarantine`]'s
/// isolated points set apart ([`guarded_cut`]); no centroids, nothing rescaled.
pub fn cluster_distances(
    distances: &CondensedMatrix,
    method: Linkage,
    lambda: Lambda,
    guard: Guard,
) -> Clustering {
    let dendrogram = linkage(distances, method);
    let quarantined = guard.quarantine(distances);
    let (assignment, height, cut) =
        guarded_cut(&dendrogram, distances, method, lambda, &quarantined);
    let n_clusters = assignment.iter().max().map_or(0, |m| m + 1);
    Clustering {
        assignment,
        n_clusters,
        dendrogram,
        threshold: height,
        linkage: method,
        centroids: Vec::new(),
        cut,
        rescaled: Vec::new(),
        quarantined,
    }
}

/// Cuts `dendrogram` (built from `distances`) by `lambda`: the flat labels, the height cut at
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
    lambda: Lambda,
) -> (Vec<usize>, f64, Option<CutScores>) {
    let n = dendrogram.n();
    match lambda {
        Lambda::Distance(t) => (dendrogram.cut_distance(t), t, None),
        Lambda::Gap => {
            let t = dendrogram.auto_threshold();
            (dendrogram.cut_distance(t), t, gap_cut(dendrogram).ok())
        }
        Lambda::Auto => match silhouette_cut(dendrogram, distances) {
            Ok(scores) => {
                let t = scores.threshold();
                (dendrogram.cut_distance(t), t, Some(scores))
            }
            Err(_) => cut_tree(dendrogram, distances, Lambda::Gap),
        },
        Lambda::Clusters(k) => {
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
/// of its own, and the tree of the others (linkage `method`) is cut by `lambda`. Without
/// quarantined points, exactly [`cut_tree`] of `dendrogram`.
pub fn guarded_cut(
    dendrogram: &Dendrogram,
    distances: &CondensedMatrix,
    method: Linkage,
    lambda: Lambda,
    quarantined: &[usize],
) -> (Vec<usize>, f64, Option<CutScores>) {
    let (labels, (height, cut)) =
        quarantined_cut(dendrogram, distances, method, quarantined, |tree, d| {
            let (labels, height, cut) = cut_tree(tree, d, lambda);
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

/// The cluster whose centroid is nearest (Euclidean) to `signature`, ties to the lower index,
/// with the distance to it (FedClust's eq. 4 and its minimum; AdaCFL's ε rule).
///
/// # Errors
///
/// [`ClusteringError::WrongDimension`] when the signature's length is not the centroids',
/// [`ClusteringError::Distance`] for a NaN or infinite value, [`ClusteringError::Empty`] without
/// centroids.
pub fn nearest_centroid(
    signature: &[f32],
    centroids: &[Vec<f32>],
) -> Result<(usize, f64), ClusteringError> {
    let mut best: Option<(usize, f64)> = None;
    for (c, centroid) in centroids.iter().enumerate() {
        if centroid.len() != signature.len() {
            return Err(ClusteringError::WrongDimension {
                expected: centroid.len(),
                got: signature.len(),
            });
        }
        if let Some(i) = signature.iter().position(|v| !v.is_finite()) {
            return Err(ClusteringError::Distance(DistanceError::NotFinite {
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
    best.map(|(c, d)| (c, d.sqrt()))
        .ok_or(ClusteringError::Empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_parse() {
        assert_eq!("auto".parse::<Lambda>().unwrap(), Lambda::Auto);
        assert_eq!("gap".parse::<Lambda>().unwrap(), Lambda::Gap);
        for t in ["auto", "gap", "k=3", "1.5"] {
            assert_eq!(t.parse::<Lambda>().unwrap().to_string(), t);
        }
        assert_eq!("1.5".parse::<Lambda>().unwrap(), Lambda::Distance(1.5));
        assert_eq!("k=3".parse::<Lambda>().unwrap(), Lambda::Clusters(3));
        for bad in ["-1", "k=0", "nan", "x", ""] {
            assert!(bad.parse::<Lambda>().is_err(), "{bad}");
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
            let (c, _) = cluster_signatures(&s, l, Lambda::Distance(1.0), Guard::Paper).unwrap();
            assert_eq!(c.assignment, vec![0, 1, 0, 1, 0], "{l}");
            let (c, _) = cluster_signatures(&s, l, Lambda::Auto, Guard::Paper).unwrap();
            assert_eq!(c.assignment, vec![0, 1, 0, 1, 0], "{l} auto");
            let cut = c.cut.as_ref().unwrap();
            assert_eq!(cut.chosen().unwrap().n_clusters, 2);
            assert_eq!(cut.heights, c.dendrogram.heights());
            let (c, _) = cluster_signatures(&s, l, Lambda::Gap, Guard::Paper).unwrap();
            assert_eq!(c.assignment, vec![0, 1, 0, 1, 0], "{l} gap");
        }
        let (c, _) =
            cluster_signatures(&s, Linkage::Single, Lambda::Clusters(2), Guard::Paper).unwrap();
        assert_eq!(c.n_clusters, 2);
        // Centroids by hand: mean(0, 0.1, 0.2) = 0.1, mean(10, 10.1) = 10.05.
        assert!((c.centroids[0][0] - 0.1).abs() < 1e-6);
        assert!((c.centroids[1][0] - 10.05).abs() < 1e-5);
    }
}
