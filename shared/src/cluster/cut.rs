//! Where to cut a dendrogram when the number of clusters is not given.
//!
//! A dendrogram offers one flat clustering per distinct merge level: cutting anywhere between two
//! consecutive distinct heights applies the same merges. [`candidates`] lists these cuts, from
//! the most clusters to one; each is a distance threshold (the midpoint of the gap above its
//! level, the top height for one cluster), so [`Dendrogram::cut_distance`] reproduces it. Two
//! rules pick one of them:
//!
//! * [`silhouette_cut`] (the default `auto` cut): every candidate with `2 ≤ k ≤ n − 1` clusters
//!   is scored by its mean silhouette (Rousseeuw 1987) on the **same distances the tree was built
//!   from**. For observation `i` in cluster `C`, `a(i)` is its mean distance to the other members
//!   of `C`, `b(i)` the smallest mean distance to the members of another cluster, and
//!   `s(i) = (b − a) / max(a, b)` (0 when both are 0, and 0 for a singleton). The score is the
//!   mean of `s(i)` over all observations, equal to scikit-learn's
//!   `silhouette_score(D, labels, metric="precomputed")`. The rule takes the best candidate;
//!   candidates within [`SILHOUETTE_TIE`] (0.01) of the best count as tied, and among them it
//!   takes the one with the widest gap in merge heights above it, i.e. the partition that holds
//!   over the widest range of thresholds (ties again: fewer clusters). The chosen cut must show
//!   reasonable structure among the observations it groups: when their mean silhouette (over
//!   the observations in clusters of two or more, the candidate's `grouped_score`) is below
//!   [`MIN_SILHOUETTE`] (0.4), the rule answers one cluster. (The plain mean counts every
//!   singleton as 0, so a right cut into many singletons, like `label:3` at 100 clients with 60-74
//!   label triples, can score under 0.4 although its groups score about 0.85.) With `n ≤ 2` there
//!   is no candidate to score and the answer is one cluster.
//! * [`gap_cut`] (`gap`): the midpoint of the largest gap between consecutive merge heights
//!   ([`Dendrogram::auto_threshold`]); each candidate's score is the width of the gap above it.
//!
//! Why the silhouette and not the largest gap: the gap rule compares absolute height differences,
//! so in a nested structure (three tasks, two of which are closer to each other than to the
//! third) it stops at the widest gap, the top split, and merges the two nearer groups although
//! their own gap is many times their spread. The silhouette compares, for every observation, the
//! spread of its own cluster with the distance to the nearest other one: splitting the two nearer
//! groups lowers `a(i)` of all their members a lot and `b(i)` only to the (still large) distance
//! between them, so the split scores higher. Splitting a tight group instead raises nothing (`a`
//! and `b` of its members become alike) and makes singletons, which score 0. The tie rule is for
//! a small subgroup as far from its group as the group is from the next one (2 of 20 bag users of
//! `tasks:fmnist3`, 100 clients, seed 7: 4 clusters score 0.937, the 3 tasks 0.931): splitting it
//! off changes the mean silhouette by less than a far singleton does (about 0.008 at `n = 100`,
//! which `label:2` needs kept apart), but the 3-cluster partition holds over a gap seven times
//! wider. BENCHMARKS.md ("The automatic cut") has the measurements behind the choice.
//!
//! Cost: `O(n²)` to sum the distances from each observation to each cluster once, then `O(n)`
//! per merge to update the sums, plus a rescan of the clusters for the observations whose
//! nearest other cluster took part in the merge; memory `n · k₀` floats, where `k₀ = n` up to
//! `n = 4 096` observations. Above that, only the cuts with at most `2²⁴ / n` clusters are
//! scored (the others get no score).

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use super::distance::CondensedMatrix;
use super::hc::{Dendrogram, HcError};

/// When the chosen cut's mean silhouette over the observations it groups is below this,
/// [`silhouette_cut`] answers one cluster. Kaufman & Rousseeuw call 0.26-0.50 "weak structure,
/// could be artificial"; measured here, the best cut of a single Gaussian blob reaches 0.1-0.29
/// in 10-50 dimensions (it splits off outliers; up to 0.44 in 5-D and 0.6 in 2-D, far below the
/// 850 floats of a FedClust signature), while the weakest right cut of BENCHMARKS.md ("The
/// automatic cut") scores 0.45 (`rotate:4`, 5 warm-up epochs, seed 9) and most score 0.7-1.
pub const MIN_SILHOUETTE: f64 = 0.4;

/// Candidate cuts whose mean silhouette is within this of the best count as tied; among them
/// [`silhouette_cut`] takes the one with the widest gap in merge heights above it.
pub const SILHOUETTE_TIE: f64 = 0.01;

/// Most entries of the observation × cluster table of distance sums (128 MiB of `f64`).
const TABLE_BUDGET: usize = 1 << 24;

/// Which rule chose the cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CutRule {
    /// Best mean silhouette over the candidate cuts ([`silhouette_cut`]).
    Silhouette,
    /// Middle of the largest gap between merge heights ([`gap_cut`]).
    Gap,
}

/// Which of a candidate's scores [`CutScores::min_score`] bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BoundedScore {
    /// [`CutCandidate::score`].
    Score,
    /// [`CutCandidate::grouped_score`] (the silhouette rule).
    GroupedScore,
}

/// One candidate cut of a dendrogram.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CutCandidate {
    /// Number of flat clusters.
    pub n_clusters: usize,
    /// A distance threshold that gives them ([`Dendrogram::cut_distance`]).
    pub threshold: f64,
    /// The rule's score (silhouette: the mean silhouette, none for one cluster or where not
    /// computed; gap: the width of the gap above this level, none for the top).
    pub score: Option<f64>,
    /// Silhouette rule only: the mean silhouette over the observations in clusters of two or more
    /// (singletons score 0 and are left out), which decides between this cut and one cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grouped_score: Option<f64>,
}

/// The outcome of an automatic cut, with everything the rule looked at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CutScores {
    /// The rule.
    pub rule: CutRule,
    /// The merge heights, in merge order.
    pub heights: Vec<f64>,
    /// Every candidate cut, from the most clusters to one.
    pub candidates: Vec<CutCandidate>,
    /// Index of the chosen candidate in `candidates` (none for an empty tree).
    pub chosen: Option<usize>,
    /// The score a candidate needs to beat one cluster (silhouette: [`MIN_SILHOUETTE`]).
    pub min_score: Option<f64>,
    /// Which of the chosen candidate's scores `min_score` bounds (silhouette: its
    /// `grouped_score`). Absent in records written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_score_of: Option<BoundedScore>,
    /// Candidates whose score is within this of the best count as tied, and the widest gap in
    /// merge heights above decides between them (silhouette: [`SILHOUETTE_TIE`]). Absent in
    /// records written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tie: Option<f64>,
}

impl CutScores {
    /// The chosen candidate.
    pub fn chosen(&self) -> Option<&CutCandidate> {
        self.chosen.and_then(|i| self.candidates.get(i))
    }

    /// The chosen threshold (0 for an empty or one-observation tree).
    pub fn threshold(&self) -> f64 {
        self.chosen().map_or(0.0, |c| c.threshold)
    }
}

/// Why an automatic cut cannot be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CutError {
    /// The dendrogram is malformed.
    #[error(transparent)]
    Tree(#[from] HcError),
    /// The distances are not those of the tree's observations.
    #[error("the dendrogram has {tree} observations, the distance matrix {distances}")]
    SizeMismatch {
        /// Observations in the tree.
        tree: usize,
        /// Observations in the distance matrix.
        distances: usize,
    },
}

/// Midpoint of `[lo, hi]`, never rounded up onto `hi` (so a cut there leaves `hi` unapplied).
fn midpoint(lo: f64, hi: f64) -> f64 {
    let mid = lo + (hi - lo) / 2.0;
    if mid < hi { mid } else { lo }
}

/// The merges in the order a rising threshold applies them (by the largest height in their
/// subtree, ties by merge order, so children come before parents), with that height.
fn application_order(tree: &Dendrogram) -> Vec<(usize, f64)> {
    let mut order: Vec<(usize, f64)> = tree.max_heights().into_iter().enumerate().collect();
    order.sort_by(|p, q| p.1.partial_cmp(&q.1).unwrap_or(Ordering::Equal));
    order
}

/// One level of a dendrogram: the candidate cut, the number of merges (in
/// [`application_order`]) it applies, and the subtree height of the last of them.
struct Level {
    cut: CutCandidate,
    applied: usize,
    height: f64,
}

/// The candidate cuts of `tree`, from the most clusters to one. A level is a maximal run of
/// equal subtree heights.
fn levels(tree: &Dendrogram) -> Vec<Level> {
    let order = application_order(tree);
    let mut out = Vec::new();
    for (i, &(_, h)) in order.iter().enumerate() {
        let next = order.get(i + 1).map(|p| p.1);
        if next == Some(h) {
            continue;
        }
        let threshold = next.map_or(h, |hi| midpoint(h, hi));
        out.push(Level {
            cut: CutCandidate {
                n_clusters: tree.n - (i + 1),
                threshold,
                score: None,
                grouped_score: None,
            },
            applied: i + 1,
            height: h,
        });
    }
    out
}

/// The candidate cuts of `tree` (see the [module docs](self)), from the most clusters to one,
/// without scores. A tree without merges has none.
pub fn candidates(tree: &Dendrogram) -> Vec<CutCandidate> {
    levels(tree).into_iter().map(|l| l.cut).collect()
}

/// The largest-gap rule: chooses the cut at [`Dendrogram::auto_threshold`]; each candidate's
/// score is the width of the gap between its level and the next.
///
/// # Errors
///
/// [`CutError::Tree`] for a malformed tree.
pub fn gap_cut(tree: &Dendrogram) -> Result<CutScores, CutError> {
    tree.validate()?;
    let t = tree.auto_threshold();
    let levels = levels(tree);
    let cands: Vec<CutCandidate> = levels
        .iter()
        .enumerate()
        .map(|(i, l)| CutCandidate {
            score: levels.get(i + 1).map(|next| next.height - l.height),
            ..l.cut
        })
        .collect();
    let k = tree.n_clusters_at(t);
    let chosen = cands.iter().position(|c| c.n_clusters == k);
    Ok(CutScores {
        rule: CutRule::Gap,
        heights: tree.heights(),
        candidates: cands,
        chosen,
        min_score: None,
        min_score_of: None,
        tie: None,
    })
}

/// The silhouette rule (the default `auto` cut): scores every candidate cut with `2 ≤ k ≤ n − 1`
/// clusters by its mean silhouette on `distances` and chooses the best one (near-ties: the widest
/// gap above), or one cluster when the chosen cut's grouped silhouette is below
/// [`MIN_SILHOUETTE`]. See the [module docs](self).
///
/// # Errors
///
/// [`CutError::Tree`] for a malformed tree, [`CutError::SizeMismatch`] when `distances` is not
/// over the tree's observations.
pub fn silhouette_cut(
    tree: &Dendrogram,
    distances: &CondensedMatrix,
) -> Result<CutScores, CutError> {
    tree.validate()?;
    if distances.n() != tree.n {
        return Err(CutError::SizeMismatch {
            tree: tree.n,
            distances: distances.n(),
        });
    }
    let levels = levels(tree);
    let scores = silhouettes(tree, distances, &levels);
    let cands: Vec<CutCandidate> = levels
        .iter()
        .zip(scores)
        .map(|(l, sc)| CutCandidate {
            score: sc.map(|x| x.0).filter(|s| s.is_finite()),
            grouped_score: sc.map(|x| x.1).filter(|s| s.is_finite()),
            ..l.cut
        })
        .collect();
    let best = cands
        .iter()
        .filter_map(|c| c.score)
        .fold(f64::NEG_INFINITY, f64::max);
    // Among the near-best, the widest gap above (ties: fewer clusters, i.e. later).
    let gap = |i: usize| {
        levels
            .get(i + 1)
            .map_or(0.0, |n| n.height - levels[i].height)
    };
    let mut pick: Option<(usize, f64)> = None;
    for (i, c) in cands.iter().enumerate() {
        if c.score.is_some_and(|s| s >= best - SILHOUETTE_TIE)
            && pick.is_none_or(|(_, g)| gap(i) >= g)
        {
            pick = Some((i, gap(i)));
        }
    }
    let chosen = match pick {
        Some((i, _)) if cands[i].grouped_score.is_some_and(|g| g >= MIN_SILHOUETTE) => Some(i),
        _ => cands.len().checked_sub(1),
    };
    Ok(CutScores {
        rule: CutRule::Silhouette,
        heights: tree.heights(),
        candidates: cands,
        chosen,
        min_score: Some(MIN_SILHOUETTE),
        min_score_of: Some(BoundedScore::GroupedScore),
        tie: Some(SILHOUETTE_TIE),
    })
}

/// Mean silhouette of each level, over all observations and over those in clusters of two or more
/// (`None` for one cluster, for `n` singletons and for levels with more clusters than the table
/// budget allows). Incremental: see the module docs.
fn silhouettes(
    tree: &Dendrogram,
    distances: &CondensedMatrix,
    levels: &[Level],
) -> Vec<Option<(f64, f64)>> {
    let n = tree.n;
    let mut out = vec![None; levels.len()];
    if n < 3 {
        return out;
    }
    let order = application_order(tree);
    let k_max = (TABLE_BUDGET / n).clamp(2, n);
    // Apply merges until at most k_max clusters remain.
    let start = n.saturating_sub(k_max).min(order.len());
    let nodes = n + tree.merges.len();
    let mut parent: Vec<usize> = (0..nodes).collect();
    for &(m, _) in &order[..start] {
        let mg = tree.merges[m];
        parent[mg.a] = n + m;
        parent[mg.b] = n + m;
    }
    // Compact columns for the clusters alive after `start` merges.
    let mut col_of_node = vec![usize::MAX; nodes];
    let mut lab = vec![0usize; n];
    let mut k = 0usize;
    for (i, l) in lab.iter_mut().enumerate() {
        let r = root(&mut parent, i);
        if col_of_node[r] == usize::MAX {
            col_of_node[r] = k;
            k += 1;
        }
        *l = col_of_node[r];
    }
    let k0 = k;
    let mut size = vec![0usize; k0];
    for &c in &lab {
        size[c] += 1;
    }
    let mut alive = vec![true; k0];
    // sums[i * k0 + c] = Σ_{j ∈ c, j ≠ i} d(i, j)
    let mut sums = vec![0.0f64; n * k0];
    let d = distances.as_slice();
    let mut pos = 0usize;
    for i in 0..n {
        for j in i + 1..n {
            let v = d[pos];
            pos += 1;
            sums[i * k0 + lab[j]] += v;
            sums[j * k0 + lab[i]] += v;
        }
    }
    // Nearest other cluster of each observation: its column and mean distance.
    let nearest = |i: usize, lab: &[usize], size: &[usize], alive: &[bool], sums: &[f64]| {
        let row = &sums[i * k0..(i + 1) * k0];
        let mut best = (usize::MAX, f64::INFINITY);
        for c in 0..k0 {
            if alive[c] && c != lab[i] {
                let mean = row[c] / size[c] as f64;
                if mean < best.1 {
                    best = (c, mean);
                }
            }
        }
        best
    };
    let mut nb: Vec<(usize, f64)> = (0..n)
        .map(|i| nearest(i, &lab, &size, &alive, &sums))
        .collect();
    let score = |lab: &[usize], size: &[usize], sums: &[f64], nb: &[(usize, f64)]| {
        let mut total = 0.0;
        let mut grouped = 0usize;
        for i in 0..n {
            let c = lab[i];
            if size[c] < 2 {
                continue;
            }
            grouped += 1;
            let a = sums[i * k0 + c] / (size[c] - 1) as f64;
            let b = nb[i].1;
            let m = a.max(b);
            if m > 0.0 && m.is_finite() {
                total += (b - a) / m;
            }
        }
        (total / n as f64, total / grouped.max(1) as f64)
    };

    let mut applied = start;
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); k0];
    for (i, &c) in lab.iter().enumerate() {
        members[c].push(i);
    }
    for (li, level) in levels.iter().enumerate() {
        if level.applied < applied {
            continue;
        }
        while applied < level.applied {
            let (m, _) = order[applied];
            applied += 1;
            let mg = tree.merges[m];
            let (ca, cb) = (col_of_node[mg.a], col_of_node[mg.b]);
            if ca == usize::MAX || cb == usize::MAX || ca == cb {
                // Unreachable for a validated tree.
                continue;
            }
            col_of_node[n + m] = ca;
            for i in 0..n {
                let v = sums[i * k0 + cb];
                sums[i * k0 + ca] += v;
            }
            size[ca] += size[cb];
            size[cb] = 0;
            alive[cb] = false;
            let moved = std::mem::take(&mut members[cb]);
            for &i in &moved {
                lab[i] = ca;
            }
            members[ca].extend(moved);
            for (i, slot) in nb.iter_mut().enumerate() {
                if slot.0 == ca || slot.0 == cb {
                    *slot = nearest(i, &lab, &size, &alive, &sums);
                }
            }
        }
        if (2..n).contains(&level.cut.n_clusters) {
            out[li] = Some(score(&lab, &size, &sums, &nb));
        }
    }
    out
}

/// Root of `x` with path compression.
fn root(parent: &mut [usize], mut x: usize) -> usize {
    let mut r = x;
    while parent[r] != r {
        r = parent[r];
    }
    while parent[x] != r {
        let next = parent[x];
        parent[x] = r;
        x = next;
    }
    r
}

/// The mean silhouette of a flat clustering on `distances`, computed directly in `O(n²)` (the
/// definition in the [module docs](self)); `None` unless `2 ≤ k ≤ n − 1`.
///
/// # Errors
///
/// [`CutError::SizeMismatch`] when `labels` does not have one entry per observation.
pub fn silhouette_score(
    distances: &CondensedMatrix,
    labels: &[usize],
) -> Result<Option<f64>, CutError> {
    let n = distances.n();
    if labels.len() != n {
        return Err(CutError::SizeMismatch {
            tree: labels.len(),
            distances: n,
        });
    }
    let mut ids: Vec<usize> = labels.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let k = ids.len();
    if k < 2 || k >= n {
        return Ok(None);
    }
    let col: Vec<usize> = labels
        .iter()
        .map(|l| ids.binary_search(l).unwrap_or(0))
        .collect();
    let mut size = vec![0usize; k];
    for &c in &col {
        size[c] += 1;
    }
    let mut total = 0.0;
    for i in 0..n {
        let mut sums = vec![0.0f64; k];
        for j in 0..n {
            if j != i {
                sums[col[j]] += distances.get(i, j).unwrap_or(0.0);
            }
        }
        let c = col[i];
        if size[c] < 2 {
            continue;
        }
        let a = sums[c] / (size[c] - 1) as f64;
        let b = (0..k)
            .filter(|&o| o != c)
            .map(|o| sums[o] / size[o] as f64)
            .fold(f64::INFINITY, f64::min);
        let m = a.max(b);
        if m > 0.0 {
            total += (b - a) / m;
        }
    }
    Ok(Some(total / n as f64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::hc::{Linkage, linkage};
    use crate::cluster::metrics::adjusted_rand_index;

    fn tree_of(points: &[Vec<f32>], method: Linkage) -> (Dendrogram, CondensedMatrix) {
        let d = CondensedMatrix::euclidean(points).unwrap();
        (linkage(&d, method), d)
    }

    fn auto(points: &[Vec<f32>], method: Linkage) -> Vec<usize> {
        let (t, d) = tree_of(points, method);
        let s = silhouette_cut(&t, &d).unwrap();
        t.cut_distance(s.threshold())
    }

    /// A deterministic pseudo-random stream in [0, 1) (xorshift), so tests need no RNG crate.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> f32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 40) as f32 / (1u64 << 24) as f32
        }
        /// Approximately normal (sum of 4 uniforms, centred, unit variance).
        fn normal(&mut self) -> f32 {
            let s: f32 = (0..4).map(|_| self.next()).sum();
            (s - 2.0) * 3f32.sqrt()
        }
    }

    /// `sizes[g]` points around centre `g` (coordinates `10·g` on axis `g % dim`), spread
    /// `spreads[g]`, in `dim` dimensions; returns the points and their true groups.
    fn blobs(
        sizes: &[usize],
        spreads: &[f32],
        sep: f32,
        dim: usize,
        seed: u64,
    ) -> (Vec<Vec<f32>>, Vec<usize>) {
        let mut r = Lcg(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut pts = Vec::new();
        let mut truth = Vec::new();
        for (g, (&s, &sd)) in sizes.iter().zip(spreads).enumerate() {
            for _ in 0..s {
                let mut p: Vec<f32> = (0..dim).map(|_| sd * r.normal()).collect();
                p[g % dim] += sep * (1 + g / dim) as f32;
                pts.push(p);
                truth.push(g);
            }
        }
        (pts, truth)
    }

    #[test]
    fn unequal_blobs_are_found() {
        // Sizes 20, 5, 2 and spreads 1, 0.3, 0.1, centres 10 apart in 3-D.
        let (p, truth) = blobs(&[20, 5, 2], &[1.0, 0.3, 0.1], 10.0, 3, 1);
        for m in [
            Linkage::Average,
            Linkage::Complete,
            Linkage::Ward,
            Linkage::Single,
        ] {
            let got = auto(&p, m);
            assert_eq!(adjusted_rand_index(&got, &truth), 1.0, "{m}: {got:?}");
        }
    }

    #[test]
    fn nested_groups_are_split_where_the_gap_rule_merges_them() {
        // 1-D: a big group at 0 (spread 0.05), and two groups at 1.0 and 1.3: the largest gap is
        // the top one (0 vs the rest), but 1.0 and 1.3 are 6 spreads apart.
        let mut r = Lcg(7);
        let mut p = Vec::new();
        let mut truth = Vec::new();
        for (g, (c, count)) in [(0.0f32, 50), (1.0, 30), (1.3, 20)].into_iter().enumerate() {
            for _ in 0..count {
                p.push(vec![c + 0.02 * r.normal()]);
                truth.push(g);
            }
        }
        let (t, d) = tree_of(&p, Linkage::Average);
        let s = silhouette_cut(&t, &d).unwrap();
        let got = t.cut_distance(s.threshold());
        assert_eq!(adjusted_rand_index(&got, &truth), 1.0);
        let gap = gap_cut(&t).unwrap();
        assert_eq!(t.n_clusters_at(gap.threshold()), 2);
    }

    #[test]
    fn many_far_singletons_are_kept() {
        // Three tight pairs and six singletons, all centres equally far apart (on the axes of a
        // 9-D space), like `label:3` at 100 clients, where many label triples are held by one
        // client: the plain mean silhouette is only 0.5 (singletons count 0), the grouped one
        // about 1, and the right cut has 9 clusters.
        let (p, truth) = blobs(&[2, 2, 2, 1, 1, 1, 1, 1, 1], &[0.01; 9], 10.0, 9, 3);
        for m in [
            Linkage::Average,
            Linkage::Complete,
            Linkage::Single,
            Linkage::Ward,
        ] {
            let (t, d) = tree_of(&p, m);
            let s = silhouette_cut(&t, &d).unwrap();
            let c = s.chosen().unwrap();
            assert_eq!(c.n_clusters, 9, "{m}");
            assert!(
                c.score.unwrap() < 0.51 && c.grouped_score.unwrap() > 0.99,
                "{m}"
            );
            assert_eq!(
                adjusted_rand_index(&t.cut_distance(c.threshold), &truth),
                1.0
            );
        }
    }

    #[test]
    fn one_blob_is_one_cluster() {
        // A single Gaussian blob in 10-D: no cut has substantial structure.
        for seed in 0..5 {
            let (p, _) = blobs(&[40], &[1.0], 0.0, 10, seed);
            for m in [Linkage::Average, Linkage::Complete, Linkage::Ward] {
                let (t, d) = tree_of(&p, m);
                let s = silhouette_cut(&t, &d).unwrap();
                let best = s
                    .candidates
                    .iter()
                    .filter_map(|c| c.score)
                    .fold(f64::NEG_INFINITY, f64::max);
                assert_eq!(
                    t.n_clusters_at(s.threshold()),
                    1,
                    "seed {seed} {m}: best {best}"
                );
            }
        }
    }

    #[test]
    fn all_equal_distances_are_one_cluster() {
        for n in [3, 4, 7] {
            let d = CondensedMatrix::from_condensed(vec![1.0; n * (n - 1) / 2]).unwrap();
            for m in Linkage::ALL {
                let t = linkage(&d, m);
                let s = silhouette_cut(&t, &d).unwrap();
                // One level only, every merge at height 1 (ward's heights grow with the sizes).
                if m != Linkage::Ward {
                    assert_eq!(s.candidates.len(), 1, "{m}");
                }
                assert_eq!(t.n_clusters_at(s.threshold()), 1, "{m}");
            }
        }
    }

    #[test]
    fn tiny_trees() {
        for m in Linkage::ALL {
            let d0 = CondensedMatrix::empty();
            let s = silhouette_cut(&linkage(&d0, m), &d0).unwrap();
            assert!(s.candidates.is_empty() && s.chosen.is_none());
            assert_eq!(s.threshold(), 0.0);

            let d1 = CondensedMatrix::euclidean(&[vec![3.0f32]]).unwrap();
            let s = silhouette_cut(&linkage(&d1, m), &d1).unwrap();
            assert_eq!(s.threshold(), 0.0);

            // n = 2: nothing to compare a distance with, one cluster.
            let d2 = CondensedMatrix::euclidean(&[vec![0.0f32], vec![10.0]]).unwrap();
            let t2 = linkage(&d2, m);
            let s = silhouette_cut(&t2, &d2).unwrap();
            assert_eq!(t2.n_clusters_at(s.threshold()), 1);

            // n = 3: two close points and a far one are two clusters ...
            let p3 = [vec![0.0f32], vec![0.1], vec![10.0]];
            assert_eq!(auto(&p3, m), vec![0, 0, 1], "{m}");
            // ... and three evenly spread ones are one.
            let p3 = [vec![0.0f32], vec![1.0], vec![2.0]];
            assert_eq!(auto(&p3, m), vec![0, 0, 0], "{m}");
        }
    }

    #[test]
    fn silhouette_by_hand() {
        // Points 0, 1 | 10: a(0) = 1, b(0) = 10 → 0.9; a(1) = 1, b(1) = 9 → 8/9; singleton 0.
        let d = CondensedMatrix::euclidean(&[vec![0.0f32], vec![1.0], vec![10.0]]).unwrap();
        let s = silhouette_score(&d, &[0, 0, 1]).unwrap().unwrap();
        assert!((s - (0.9 + 8.0 / 9.0) / 3.0).abs() < 1e-12, "{s}");
        assert_eq!(silhouette_score(&d, &[0, 0, 0]).unwrap(), None);
        assert_eq!(silhouette_score(&d, &[0, 1, 2]).unwrap(), None);
        assert!(silhouette_score(&d, &[0, 1]).is_err());
    }

    #[test]
    fn candidates_are_distinct_levels() {
        // Heights 1, 1, 2, 7 on points 0, 1, 2, 4, 11 (single linkage).
        let p: Vec<Vec<f32>> = [0.0, 1.0, 2.0, 4.0, 11.0]
            .iter()
            .map(|&x| vec![x])
            .collect();
        let (t, _) = tree_of(&p, Linkage::Single);
        let c = candidates(&t);
        let ks: Vec<usize> = c.iter().map(|c| c.n_clusters).collect();
        assert_eq!(ks, vec![3, 2, 1]);
        assert_eq!(c[0].threshold, 1.5);
        assert_eq!(c[1].threshold, 4.5);
        assert_eq!(c[2].threshold, 7.0);
        for c in &c {
            assert_eq!(t.n_clusters_at(c.threshold), c.n_clusters);
        }
        let g = gap_cut(&t).unwrap();
        assert_eq!(g.chosen().unwrap().n_clusters, 2);
        assert_eq!(
            g.candidates.iter().map(|c| c.score).collect::<Vec<_>>(),
            vec![Some(1.0), Some(5.0), None]
        );
        assert_eq!(g.threshold(), t.auto_threshold());
    }

    #[cfg(feature = "std")]
    #[test]
    fn the_record_holds_the_rules_parameters() {
        let p: Vec<Vec<f32>> = [0.0, 0.1, 10.0].iter().map(|&x| vec![x]).collect();
        let (t, d) = tree_of(&p, Linkage::Average);
        let s = silhouette_cut(&t, &d).unwrap();
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["rule"], "silhouette");
        assert_eq!(v["min_score"], MIN_SILHOUETTE);
        assert_eq!(v["min_score_of"], "grouped_score");
        assert_eq!(v["tie"], SILHOUETTE_TIE);
        assert_eq!(serde_json::from_value::<CutScores>(v.clone()).unwrap(), s);
        // A record written before the bound's target and the tie were recorded still reads.
        let mut old = v;
        let o = old.as_object_mut().unwrap();
        o.remove("min_score_of");
        o.remove("tie");
        let r: CutScores = serde_json::from_value(old).unwrap();
        assert_eq!((r.min_score_of, r.tie), (None, None));
        // The gap rule has neither.
        let g = serde_json::to_value(gap_cut(&t).unwrap()).unwrap();
        assert!(g.get("min_score_of").is_none() && g.get("tie").is_none());
    }

    #[test]
    fn size_mismatch_is_an_error() {
        let p: Vec<Vec<f32>> = [0.0, 1.0, 2.0].iter().map(|&x| vec![x]).collect();
        let (t, _) = tree_of(&p, Linkage::Average);
        let d = CondensedMatrix::euclidean(&p[..2]).unwrap();
        assert!(matches!(
            silhouette_cut(&t, &d),
            Err(CutError::SizeMismatch { .. })
        ));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            /// The incremental scores equal the direct silhouette of each candidate's labels,
            /// every candidate's threshold reproduces its cluster count, and the chosen cut is
            /// the best-scoring one (or one cluster below the bound).
            #[test]
            fn incremental_equals_direct(
                xs in prop::collection::vec((-5.0f32..5.0, -5.0f32..5.0), 2..30),
                mi in 0usize..5,
            ) {
                let p: Vec<Vec<f32>> = xs.iter().map(|&(a, b)| vec![a, b]).collect();
                let m = Linkage::ALL[mi];
                let (t, d) = tree_of(&p, m);
                let s = silhouette_cut(&t, &d).unwrap();
                let mut best: Option<f64> = None;
                for c in &s.candidates {
                    let labels = t.cut_distance(c.threshold);
                    prop_assert_eq!(labels.iter().max().map_or(0, |x| x + 1), c.n_clusters);
                    let direct = silhouette_score(&d, &labels).unwrap();
                    match (c.score, direct) {
                        (Some(a), Some(b)) => prop_assert!((a - b).abs() < 1e-9, "{} vs {}", a, b),
                        (None, None) => {}
                        other => prop_assert!(false, "{:?}", other),
                    }
                    if let Some(x) = c.score {
                        best = Some(best.map_or(x, |b: f64| b.max(x)));
                    }
                }
                let chosen = s.chosen().unwrap();
                if chosen.n_clusters > 1 {
                    prop_assert!(chosen.score.unwrap() >= best.unwrap() - SILHOUETTE_TIE - 1e-12);
                    // The grouped score, directly: the mean over observations in clusters of ≥ 2.
                    let labels = t.cut_distance(chosen.threshold);
                    let mut size = vec![0usize; chosen.n_clusters];
                    labels.iter().for_each(|&l| size[l] += 1);
                    let m = labels.iter().filter(|&&l| size[l] > 1).count();
                    let g = chosen.score.unwrap() * p.len() as f64 / m as f64;
                    prop_assert!((chosen.grouped_score.unwrap() - g).abs() < 1e-9);
                    prop_assert!(g >= MIN_SILHOUETTE);
                } else if let Some(b) = best {
                    // One cluster: the near-best pick failed the grouped test.
                    let failed = s.candidates.iter().any(|c| {
                        c.score.is_some_and(|x| x >= b - SILHOUETTE_TIE)
                            && c.grouped_score.is_some_and(|g| g < MIN_SILHOUETTE)
                    });
                    prop_assert!(failed);
                }
                // Silhouettes lie in [-1, 1].
                for c in &s.candidates {
                    if let Some(x) = c.score {
                        prop_assert!((-1.0..=1.0).contains(&x));
                    }
                }
            }
        }
    }
}
