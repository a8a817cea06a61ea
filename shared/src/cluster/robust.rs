//! What one client's upload may not do to everybody else's clusters.
//!
//! The one-shot clusterings (FedClust's final-layer weights, MT-HFL's relevance rows, AdaCFL's
//! smallest layer) cut a tree built from every client's upload. A client may send any vector it
//! likes within the protocol's bounds: its honest signature multiplied by 3 is far from every
//! other, and the automatic cut then separates that one client from all the rest, merging every
//! honest cluster into one. Three guards, all of them invisible on an honest fleet:
//!
//! 1. **Norm outliers are rescaled** ([`rescale_norm_outliers`]): a signature whose L2 norm is far
//!    from the fleet's median norm (by the modified z-score of the norms, and by more than
//!    [`NORM_TOLERANCE`] of the median) is scaled to the median norm. Scaling an honest
//!    signature then changes nothing: it lands back where it was.
//! 2. **Isolated clients are quarantined** ([`isolated`]): a client whose nearest neighbour is far
//!    compared with everybody else's (the modified z-score of the nearest-neighbour distances
//!    above [`QUARANTINE_Z`], that distance above [`QUARANTINE_RATIO`] × their median, and above
//!    the median distance of all pairs: as far from its nearest as a typical pair is from each
//!    other) becomes a cluster of its own, and the tree and its cut are built from the others
//!    ([`quarantined_cut`]). Any other distortion that puts one upload far from every other
//!    lands here. An honest client that is alone of its kind becomes a singleton, which an
//!    automatic cut would mostly have made it anyway.
//!
//! 3. **Copies are quarantined** ([`copies`]): honest devices train on their own data, so no two
//!    of them upload the same signature. A client whose nearest neighbour is closer than
//!    [`COPY_RATIO`] × the median nearest-neighbour distance has uploaded (nearly) another's
//!    signature: it copied one to join that cluster and poison it, or it is the one copied, or
//!    two colluders sent the same vector (their midpoint of a group's signatures, say). Every
//!    such client becomes a cluster of its own for the run, the original too (which of two
//!    equal uploads is the honest one cannot be told from the uploads).
//!
//! The modified z-score is Iglewicz & Hoaglin's: `0.6745 (x − median) / MAD`, flagged above 3.5.
//! Fewer than [`MIN_CLIENTS`] clients: no guard (a median of three says little).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::distance::CondensedMatrix;
use super::hc::{Dendrogram, Linkage, linkage};

/// Whether the one-shot cut guards against a single client's upload (`--signature-guard`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Guard {
    /// Norm outliers rescaled and isolated clients quarantined (module docs). The default.
    #[default]
    Robust,
    /// The papers' clustering of the uploads as they came.
    Paper,
}

impl Guard {
    /// [`rescale_norm_outliers`] of `points` under [`Guard::Robust`]; nothing under `Paper`.
    pub fn rescale(self, points: &mut [Vec<f32>]) -> Vec<usize> {
        match self {
            Guard::Robust => rescale_norm_outliers(points),
            Guard::Paper => Vec::new(),
        }
    }

    /// The [`isolated`] points of `d` and its [`copies`] under [`Guard::Robust`], ascending;
    /// none under `Paper`.
    pub fn quarantine(self, d: &CondensedMatrix) -> Vec<usize> {
        match self {
            Guard::Robust => {
                let mut q = isolated(d);
                q.extend(copies(d));
                q.sort_unstable();
                q.dedup();
                q
            }
            Guard::Paper => Vec::new(),
        }
    }
}

impl fmt::Display for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Guard::Robust => "robust",
            Guard::Paper => "paper",
        })
    }
}

impl FromStr for Guard {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "robust" => Ok(Guard::Robust),
            "paper" => Ok(Guard::Paper),
            _ => Err(format!(
                "unknown signature guard {s:?} (expected robust or paper)"
            )),
        }
    }
}

/// The modified z-score above which a value is an outlier (Iglewicz & Hoaglin, 1993).
pub const QUARANTINE_Z: f64 = 3.5;
/// ... and a nearest-neighbour distance must also be this many times the median one.
pub const QUARANTINE_RATIO: f64 = 3.0;
/// ... and a norm must also differ from the median norm by this fraction of it. Honest
/// final-layer signatures spread by about ±6 % around their median (LeNet-5 after a warm-up
/// epoch on the `groups:012-34-56-789` shards of the bundled Fashion-MNIST: 2.13-2.35 about
/// 2.26), enough for a modified z-score above 3.5 on its own among 8 clients.
pub const NORM_TOLERANCE: f64 = 0.25;
/// A point whose nearest neighbour is closer than this fraction of the median nearest-neighbour
/// distance is a copy ([`copies`]). A signature recomputed from another client's shard lands
/// within float rounding of its upload (about 1e-7 of it); honest clients' nearest neighbours
/// are within a few times of each other.
pub const COPY_RATIO: f64 = 0.01;
/// The fewest clients the guards act on.
pub const MIN_CLIENTS: usize = 5;

/// The median of `values` (the mean of the middle two for an even count); NaN when empty.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The median of `values`, their median absolute deviation from it (MAD) and their mean absolute
/// deviation from it: what the modified z-scores are made of.
fn median_and_mad(values: &[f64]) -> (f64, f64, f64) {
    let m = median(values);
    let deviations: Vec<f64> = values.iter().map(|v| (v - m).abs()).collect();
    let mean = deviations.iter().sum::<f64>() / deviations.len().max(1) as f64;
    (m, median(&deviations), mean)
}

/// Positions of the values that are high outliers: modified z-score above [`QUARANTINE_Z`] and
/// value above `floor(median)`. When the MAD is 0 (more than half the values equal), any value
/// above the floor counts.
fn high_outliers(values: &[f64], floor: impl Fn(f64) -> f64) -> Vec<usize> {
    if values.len() < MIN_CLIENTS {
        return Vec::new();
    }
    let (m, mad, _) = median_and_mad(values);
    let bound = floor(m);
    values
        .iter()
        .enumerate()
        .filter(|&(_, &v)| v > bound && (mad == 0.0 || 0.6745 * (v - m) / mad > QUARANTINE_Z))
        .map(|(i, _)| i)
        .collect()
}

/// The trimmed fraction of [`Reported::trimmed`]: the lowest and the highest 20 % (Flower's
/// FedTrimmedAvg default).
pub const REPORT_TRIM: f64 = 0.2;

/// A summary of values each client reported about itself (its accuracy), that one client's lie
/// cannot move far: the plain mean beside the median and the trimmed mean, and who is an outlier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reported {
    /// The mean.
    pub mean: f64,
    /// The median.
    pub median: f64,
    /// The mean without the lowest and the highest [`REPORT_TRIM`] of the values.
    pub trimmed: f64,
    /// Positions of the values whose modified z-score is above [`QUARANTINE_Z`] either way
    /// (with [`MIN_CLIENTS`] values or more). Where more than half the values are equal (the
    /// MAD is 0), the mean absolute deviation stands in for it (`z = (x − median) / (1.2533 ·
    /// meanAD)`), so that one odd value among equal ones is still flagged.
    pub outliers: Vec<usize>,
    /// The mean without the outliers.
    pub inlier_mean: f64,
}

impl Reported {
    /// The summary of `values` (NaN ones left out; positions count all of them); `None` when
    /// none is left.
    pub fn of(values: &[f64]) -> Option<Reported> {
        let kept: Vec<(usize, f64)> = values
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, v)| !v.is_nan())
            .collect();
        if kept.is_empty() {
            return None;
        }
        let v: Vec<f64> = kept.iter().map(|p| p.1).collect();
        let n = v.len();
        let mut sorted = v.clone();
        sorted.sort_by(f64::total_cmp);
        let trim = (REPORT_TRIM * n as f64).floor() as usize;
        let middle = &sorted[trim..n - trim];
        let (m, mad, mean_deviation) = median_and_mad(&v);
        let scale = if mad > 0.0 {
            mad / 0.6745
        } else {
            1.2533 * mean_deviation
        };
        let outliers = if n < MIN_CLIENTS || scale == 0.0 {
            Vec::new()
        } else {
            kept.iter()
                .filter(|(_, x)| (x - m).abs() / scale > QUARANTINE_Z)
                .map(|p| p.0)
                .collect()
        };
        let inliers: Vec<f64> = kept
            .iter()
            .filter(|(i, _)| !outliers.contains(i))
            .map(|p| p.1)
            .collect();
        Some(Reported {
            inlier_mean: inliers.iter().sum::<f64>() / inliers.len() as f64,
            mean: v.iter().sum::<f64>() / n as f64,
            median: m,
            trimmed: middle.iter().sum::<f64>() / middle.len() as f64,
            outliers,
        })
    }
}

/// The distance from each point to its nearest other point (∞ for a lone point).
pub fn nearest_neighbour(d: &CondensedMatrix) -> Vec<f64> {
    let n = d.n();
    (0..n)
        .map(|i| {
            (0..n)
                .filter(|&j| j != i)
                .filter_map(|j| d.get(i, j))
                .fold(f64::INFINITY, f64::min)
        })
        .collect()
}

/// The isolated points of `d`, ascending: those whose nearest neighbour is a high outlier among
/// the nearest-neighbour distances, at least [`QUARANTINE_RATIO`] × their median and the
/// median of all pairwise distances (module docs). Empty below [`MIN_CLIENTS`] points.
pub fn isolated(d: &CondensedMatrix) -> Vec<usize> {
    let typical = median(d.as_slice());
    high_outliers(&nearest_neighbour(d), |m| {
        (QUARANTINE_RATIO * m).max(typical)
    })
}

/// The points of `d` that have a copy, ascending: those whose nearest neighbour is closer than
/// [`COPY_RATIO`] × the median nearest-neighbour distance (module docs). None below
/// [`MIN_CLIENTS`] points, or when that median is 0 (more than half the uploads equal, as when
/// nobody trained before uploading: nothing tells a copy from the rest).
pub fn copies(d: &CondensedMatrix) -> Vec<usize> {
    if d.n() < MIN_CLIENTS {
        return Vec::new();
    }
    let nearest = nearest_neighbour(d);
    let bound = COPY_RATIO * median(&nearest);
    nearest
        .iter()
        .enumerate()
        .filter(|&(_, &v)| v < bound)
        .map(|(i, _)| i)
        .collect()
}

/// Scales each signature whose L2 norm is an outlier (module docs) to the median norm; returns
/// their positions, ascending. A signature of norm 0 is left as it is (it has no direction).
pub fn rescale_norm_outliers(signatures: &mut [Vec<f32>]) -> Vec<usize> {
    let norms: Vec<f64> = signatures
        .iter()
        .map(|s| s.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt())
        .collect();
    if norms.len() < MIN_CLIENTS {
        return Vec::new();
    }
    let m = median(&norms);
    // Outliers on either side: the deviation from the median, with the tolerance as its floor.
    let deviations: Vec<f64> = norms.iter().map(|n| (n - m).abs()).collect();
    let flagged: Vec<usize> = {
        let mad = median(&deviations);
        deviations
            .iter()
            .enumerate()
            .filter(|&(_, &dev)| {
                dev > NORM_TOLERANCE * m && (mad == 0.0 || 0.6745 * dev / mad > QUARANTINE_Z)
            })
            .map(|(i, _)| i)
            .collect()
    };
    let mut rescaled = Vec::new();
    for i in flagged {
        if norms[i] > 0.0 {
            let f = m / norms[i];
            for x in &mut signatures[i] {
                *x = (f64::from(*x) * f) as f32;
            }
            rescaled.push(i);
        }
    }
    rescaled
}

/// The distances among the points `keep` (ascending positions of `d`).
pub fn submatrix(d: &CondensedMatrix, keep: &[usize]) -> CondensedMatrix {
    let mut data = Vec::with_capacity(keep.len() * keep.len().saturating_sub(1) / 2);
    for (a, &i) in keep.iter().enumerate() {
        for &j in &keep[a + 1..] {
            data.push(d.get(i, j).unwrap_or(0.0));
        }
    }
    CondensedMatrix::from_condensed(data).unwrap_or_else(|_| CondensedMatrix::empty())
}

/// A cut with `quarantined` points set apart: `cut` cuts the tree of the other points (built
/// with `method` from their distances), each quarantined point becomes a cluster of its own, and
/// the labels are renumbered in order of first appearance. Returns the labels of all points and
/// whatever `cut` returned besides its labels. Without quarantined points, `cut` cuts `tree`.
pub fn quarantined_cut<T>(
    tree: &Dendrogram,
    d: &CondensedMatrix,
    method: Linkage,
    quarantined: &[usize],
    cut: impl FnOnce(&Dendrogram, &CondensedMatrix) -> (Vec<usize>, T),
) -> (Vec<usize>, T) {
    if quarantined.is_empty() {
        return cut(tree, d);
    }
    let n = d.n();
    let keep: Vec<usize> = (0..n).filter(|i| !quarantined.contains(i)).collect();
    let sub = submatrix(d, &keep);
    let (labels, extra) = cut(&linkage(&sub, method), &sub);
    let mut raw = vec![0usize; n];
    for (&i, &l) in keep.iter().zip(&labels) {
        raw[i] = l;
    }
    let next = labels.iter().max().map_or(0, |m| m + 1);
    for (k, &q) in quarantined.iter().enumerate() {
        raw[q] = next + k;
    }
    (first_appearance(&raw), extra)
}

/// `labels` renumbered 0, 1, … in order of first appearance.
pub fn first_appearance(labels: &[usize]) -> Vec<usize> {
    let mut map = std::collections::HashMap::new();
    labels
        .iter()
        .map(|&l| {
            let next = map.len();
            *map.entry(l).or_insert(next)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::silhouette_cut;

    /// Two groups of four on a line, 2 apart, each 0.3 wide.
    fn two_groups() -> Vec<Vec<f32>> {
        [0.0, 0.1, 0.2, 0.3, 2.0, 2.1, 2.2, 2.3]
            .iter()
            .map(|&x| vec![x, 1.0])
            .collect()
    }

    #[test]
    fn median_by_hand() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn nearest_neighbours_by_hand() {
        let d = CondensedMatrix::euclidean(&[vec![0.0f32], vec![1.0], vec![5.0]]).unwrap();
        assert_eq!(nearest_neighbour(&d), vec![1.0, 1.0, 4.0]);
    }

    #[test]
    fn a_far_point_is_isolated_and_the_honest_ones_are_not() {
        let mut p = two_groups();
        assert!(isolated(&CondensedMatrix::euclidean(&p).unwrap()).is_empty());
        // Nearest-neighbour distances 0.1 × 8 and the far point's ~60: flagged alone.
        p.push(vec![5.0, 60.0]);
        assert_eq!(isolated(&CondensedMatrix::euclidean(&p).unwrap()), vec![8]);
    }

    #[test]
    fn a_point_just_beyond_its_group_is_not_isolated() {
        // 0.25 from its nearest neighbour where the others have 0.1: below 3 × the median.
        let mut p = two_groups();
        p.push(vec![2.55, 1.0]);
        assert!(isolated(&CondensedMatrix::euclidean(&p).unwrap()).is_empty());
    }

    /// Hand-made: two groups of four, 2 apart, their points 0.1 apart (every nearest
    /// neighbour at 0.1); a copy of a point lies 1e-7 from it.
    #[test]
    fn a_copy_and_its_original_are_quarantined_and_no_honest_point() {
        let honest = two_groups();
        let d = CondensedMatrix::euclidean(&honest).unwrap();
        assert!(copies(&d).is_empty());
        assert!(Guard::Robust.quarantine(&d).is_empty());
        // Point 8 copies point 1 (to within float rounding).
        let mut copied = honest.clone();
        copied.push(vec![0.1 + 1e-7, 1.0]);
        let d = CondensedMatrix::euclidean(&copied).unwrap();
        assert_eq!(copies(&d), [1, 8]);
        assert_eq!(Guard::Robust.quarantine(&d), [1, 8]);
        assert!(Guard::Paper.quarantine(&d).is_empty());
        // Two colluders sending one vector (the midpoint of points 4 and 5), and copies of
        // both of group 0's first points: every copy and original.
        let mut colluding = honest.clone();
        colluding.extend([
            vec![2.05, 1.0],
            vec![2.05, 1.0],
            vec![0.0, 1.0],
            vec![0.1, 1.0],
        ]);
        let d = CondensedMatrix::euclidean(&colluding).unwrap();
        assert_eq!(copies(&d), [0, 1, 8, 9, 10, 11]);
        // Just over the bound (1 % of the median nearest-neighbour distance, 0.1): no copy.
        let mut near = honest;
        near.push(vec![0.1 + 0.0011, 1.0]);
        let d = CondensedMatrix::euclidean(&near).unwrap();
        assert!(copies(&d).is_empty(), "{:?}", copies(&d));
    }

    /// Everybody uploading the same vector (no warm-up): the median nearest-neighbour distance
    /// is 0 and nothing is a copy.
    #[test]
    fn equal_uploads_are_not_copies() {
        let same = vec![vec![1.0_f32, 2.0]; 6];
        let d = CondensedMatrix::euclidean(&same).unwrap();
        assert!(copies(&d).is_empty());
    }

    #[test]
    fn too_few_points_are_never_flagged() {
        let p = vec![vec![0.0f32], vec![0.1], vec![0.2], vec![100.0]];
        assert!(isolated(&CondensedMatrix::euclidean(&p).unwrap()).is_empty());
        let mut p = p;
        assert!(rescale_norm_outliers(&mut p).is_empty());
    }

    #[test]
    fn a_scaled_signature_is_scaled_back() {
        let honest = two_groups();
        let mut sent = honest.clone();
        for x in &mut sent[2] {
            *x *= 3.0;
        }
        // Norms: the first group's 1.0-1.04 and the second's 2.24-2.51 give a median of ~1.6;
        // the scaled one (3 × 1.02) is no outlier against that spread.
        assert!(rescale_norm_outliers(&mut sent.clone()).is_empty());
        // Among signatures of similar norms (as final-layer weights are: θ⁰ dominates them), it
        // is: it comes back to the median norm, the direction kept.
        let mut alike: Vec<Vec<f32>> = (0..8).map(|i| vec![1.0, 0.01 * i as f32]).collect();
        alike[5] = vec![3.0, 0.15];
        let norm = |s: &[f32]| s.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
        let m = median(&alike.iter().map(|s| norm(s)).collect::<Vec<_>>());
        assert_eq!(rescale_norm_outliers(&mut alike), vec![5]);
        let n5 = norm(&alike[5]);
        assert!((n5 - m).abs() < 1e-6, "{n5} vs {m}");
        assert!((alike[5][1] / alike[5][0] - 0.05).abs() < 1e-6);
    }

    #[test]
    fn norms_within_the_tolerance_are_left_alone() {
        // The honest spread that flagged a client at a 5 % tolerance: 5.7 % below the median,
        // a modified z-score of 3.6.
        let mut p: Vec<Vec<f32>> = [
            2.2582, 2.2283, 2.2761, 2.3118, 2.2497, 2.1323, 2.2695, 2.3501,
        ]
        .iter()
        .map(|&x| vec![x])
        .collect();
        let before = p.clone();
        assert!(rescale_norm_outliers(&mut p).is_empty());
        assert_eq!(p, before);
    }

    #[test]
    fn submatrix_keeps_the_chosen_points() {
        let p = vec![vec![0.0f32], vec![1.0], vec![3.0], vec![7.0]];
        let d = CondensedMatrix::euclidean(&p).unwrap();
        let s = submatrix(&d, &[0, 2, 3]);
        assert_eq!(s.n(), 3);
        assert_eq!(s.as_slice(), &[3.0, 7.0, 4.0]);
    }

    #[test]
    fn first_appearance_renumbers() {
        assert_eq!(first_appearance(&[4, 4, 2, 9, 2]), vec![0, 0, 1, 2, 1]);
    }

    #[test]
    fn the_quarantined_cut_recovers_the_groups_the_far_point_would_merge() {
        let mut p = two_groups();
        p.push(vec![5.0, 60.0]);
        let d = CondensedMatrix::euclidean(&p).unwrap();
        let tree = linkage(&d, Linkage::Average);
        let auto = |t: &Dendrogram, d: &CondensedMatrix| {
            let s = silhouette_cut(t, d).unwrap();
            (t.cut_distance(s.threshold()), ())
        };
        // Unguarded: the far point against all the rest (silhouette ~0.98 against ~0.9 for
        // the two groups and the far point).
        let (plain, ()) = auto(&tree, &d);
        assert_eq!(plain, vec![0, 0, 0, 0, 0, 0, 0, 0, 1]);
        // Guarded: the two groups, and the far point alone.
        let q = isolated(&d);
        let (labels, ()) = quarantined_cut(&tree, &d, Linkage::Average, &q, auto);
        assert_eq!(labels, vec![0, 0, 0, 0, 1, 1, 1, 1, 2]);
        // Nothing quarantined: the tree's own cut.
        let (same, ()) = quarantined_cut(&tree, &d, Linkage::Average, &[], auto);
        assert_eq!(same, plain);
    }
    /// By hand: eight accuracies, one client reporting 0 (the evaluation lie of issue 28).
    #[test]
    fn reported_accuracy_by_hand() {
        let acc = [0.9, 0.88, 0.92, 0.9, 0.91, 0.0, 0.89, 0.9];
        let r = Reported::of(&acc).unwrap();
        // Sum 6.30 over 8.
        assert!((r.mean - 0.7875).abs() < 1e-12, "{r:?}");
        // Sorted: 0, .88, .89, .9, .9, .9, .91, .92: middle two .9 and .9.
        assert!((r.median - 0.9).abs() < 1e-12);
        // Trim floor(0.2 · 8) = 1 each end: .89 + .9 · 3 + .91 + .88 = 5.38 over 6.
        assert!((r.trimmed - 5.38 / 6.0).abs() < 1e-12, "{r:?}");
        // Deviations from .9: 0, .02, .02, 0, .01, .9, .01, 0: MAD .01; the liar's z is
        // .6745 · .9 / .01 = 60.7; .88's is 1.35.
        assert_eq!(r.outliers, vec![5]);
        // The other seven: 6.30 / 7.
        assert!((r.inlier_mean - 0.9).abs() < 1e-12, "{r:?}");
        // More than half equal (MAD 0): the mean absolute deviation stands in.
        let r = Reported::of(&[1.0, 1.0, 1.0, 1.0, 1.0, 0.98, 0.0]).unwrap();
        assert_eq!(r.outliers, vec![6], "{r:?}");
        // All equal: no outlier; NaN (never evaluated) left out, positions kept.
        let r = Reported::of(&[0.5, f64::NAN, 0.5, 0.5, 0.5, 0.5]).unwrap();
        assert!(r.outliers.is_empty());
        assert_eq!(r.mean, 0.5);
        assert_eq!(Reported::of(&[f64::NAN]), None);
        // Too few to judge.
        assert!(Reported::of(&[0.9, 0.9, 0.0]).unwrap().outliers.is_empty());
    }
}
