//! Agglomerative hierarchical clustering that reproduces `scipy.cluster.hierarchy.linkage`.
//!
//! [`linkage`] returns the same merges, in the same order, with the same heights and the same
//! cluster ids as scipy (1.x) for the methods in [`Linkage`], ties included, because it runs the
//! same algorithms with the same floating-point operations and the same tie-breaking:
//!
//! * **single**: Prim's minimum-spanning-tree algorithm (scipy's `mst_single_linkage`), starting
//!   at observation 0 and always extending the tree to the outside observation with the smallest
//!   distance (lowest index on ties);
//! * **complete, average, weighted, ward**: the nearest-neighbour-chain algorithm (scipy's
//!   `nn_chain`). The chain starts at the lowest active cluster; a cluster's nearest neighbour is
//!   the previous chain element when it is among the nearest (this avoids cycles), otherwise the
//!   lowest-index nearest one. Two mutual nearest neighbours `x < y` are merged, the merged
//!   cluster takes slot `y`, and its distances follow scipy's Lance–Williams updates
//!   ([`Linkage`] lists them; ward works on raw, not squared, Euclidean distances).
//!
//! Both produce merges in discovery order; they are then **stably** sorted by height and
//! relabelled with scipy's union-find `label` pass: the `i`-th merge creates cluster `n + i`,
//! and each merge lists the ids of the two clusters it joins, smaller first.
//!
//! Cost: `O(n²)` time for the distance scans (nn-chain is `O(n²)` for these reducible linkages);
//! memory: single linkage reads the condensed matrix in place (plus `O(n)`); the other methods
//! work on a private full `n × n` copy of the distances (`8 n²` bytes, 800 MB for 10 000
//! observations) so that every scan reads memory contiguously.
//!
//! Flat clusterings are cut from a [`Dendrogram`] by distance ([`Dendrogram::cut_distance`],
//! like `fcluster(Z, t, criterion="distance")`), by count ([`Dendrogram::cut_k`], like
//! `cut_tree(Z, n_clusters=k)`) or at the largest gap between merge heights
//! ([`Dendrogram::auto_threshold`]); [`cut`](super::cut) holds the score-based automatic cut.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::distance::{CondensedMatrix, condensed_index};

/// How the distance between two clusters is defined (scipy's `method` argument).
///
/// When clusters `x` (size `sx`) and `y` (size `sy`) at distance `dxy` merge, the distance to any
/// other cluster `i` (size `si`) becomes, with `dxi`, `dyi` the old distances:
///
/// | method | new distance |
/// | --- | --- |
/// | `single` | `min(dxi, dyi)` |
/// | `complete` | `max(dxi, dyi)` |
/// | `average` (UPGMA) | `(sx·dxi + sy·dyi) / (sx + sy)` |
/// | `weighted` (WPGMA) | `(dxi + dyi) / 2` |
/// | `ward` | `sqrt(((si+sx)·dxi² + (si+sy)·dyi² − si·dxy²) / (sx+sy+si))` |
///
/// `ward` is only meaningful on Euclidean distances (it then merges the pair with the smallest
/// increase of within-cluster variance, reported as a distance, like scipy). On other distances
/// the square root can receive a negative number, where scipy produces NaN; this implementation
/// uses 0 instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Linkage {
    /// Nearest members (minimum spanning tree).
    Single,
    /// Farthest members.
    Complete,
    /// Mean over all member pairs (UPGMA, size-weighted).
    Average,
    /// Plain mean of the two merged clusters' distances (WPGMA; PACFL's "average").
    Weighted,
    /// Ward's minimum-variance criterion on Euclidean distances.
    Ward,
}

impl Linkage {
    /// All methods, in scipy's documentation order.
    pub const ALL: [Linkage; 5] = [
        Linkage::Single,
        Linkage::Complete,
        Linkage::Average,
        Linkage::Weighted,
        Linkage::Ward,
    ];

    /// The scipy name: `"single"`, `"complete"`, `"average"`, `"weighted"` or `"ward"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Linkage::Single => "single",
            Linkage::Complete => "complete",
            Linkage::Average => "average",
            Linkage::Weighted => "weighted",
            Linkage::Ward => "ward",
        }
    }

    /// Lance–Williams update: distance from cluster `i` to the union of `x` and `y`, with the
    /// operations in scipy's order (so that ties come out identical).
    #[inline]
    fn update(self, d_xi: f64, d_yi: f64, d_xy: f64, sx: usize, sy: usize, si: usize) -> f64 {
        match self {
            Linkage::Single => {
                if d_xi < d_yi {
                    d_xi
                } else {
                    d_yi
                }
            }
            Linkage::Complete => {
                if d_xi > d_yi {
                    d_xi
                } else {
                    d_yi
                }
            }
            Linkage::Average => (sx as f64 * d_xi + sy as f64 * d_yi) / (sx + sy) as f64,
            Linkage::Weighted => 0.5 * (d_xi + d_yi),
            Linkage::Ward => {
                let t = 1.0 / (sx + sy + si) as f64;
                let v = (si + sx) as f64 * t * d_xi * d_xi + (si + sy) as f64 * t * d_yi * d_yi
                    - si as f64 * t * d_xy * d_xy;
                if v > 0.0 { v.sqrt() } else { 0.0 }
            }
        }
    }
}

impl fmt::Display for Linkage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A linkage name that is not one of `single`, `complete`, `average`, `weighted`, `ward`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown linkage {0:?} (expected single, complete, average, weighted or ward)")]
pub struct ParseLinkageError(pub String);

impl FromStr for Linkage {
    type Err = ParseLinkageError;

    /// Parses a scipy method name, ignoring ASCII case and surrounding white space.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        Linkage::ALL
            .into_iter()
            .find(|m| m.as_str().eq_ignore_ascii_case(t))
            .ok_or_else(|| ParseLinkageError(s.to_string()))
    }
}

/// One merge of a dendrogram: one row `[a, b, height, size]` of scipy's linkage matrix `Z`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Merge {
    /// Id of the first merged cluster: `< n` for an observation, `n + j` for the cluster created
    /// by merge `j`. Always `a < b`.
    pub a: usize,
    /// Id of the second merged cluster (`b > a`).
    pub b: usize,
    /// Distance between the two clusters when they merged.
    pub height: f64,
    /// Number of observations in the new cluster.
    pub size: usize,
}

/// Why a dendrogram is malformed, or a cut request invalid.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum HcError {
    /// `n` observations need `n − 1` merges (0 for `n = 0`).
    #[error("a dendrogram of {n} observations needs {expected} merges, found {found}")]
    WrongMergeCount {
        /// Number of observations.
        n: usize,
        /// Required number of merges.
        expected: usize,
        /// Number of merges given.
        found: usize,
    },
    /// Merge `index` is inconsistent (see the message).
    #[error("merge {index} is invalid: {reason}")]
    InvalidMerge {
        /// Position of the merge.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
}

/// The result of hierarchical clustering: `n − 1` merges of `n` observations, in scipy's order
/// and numbering (`merges[i]` is row `i` of scipy's `Z` and creates cluster `n + i`).
///
/// [`linkage`] and [`Dendrogram::from_merges`] return well-formed dendrograms, and
/// deserialising validates. The fields are public for reading; a dendrogram assembled or edited
/// by hand should be checked with [`Dendrogram::validate`]: the cuts never panic on a malformed
/// one, but they skip merges that refer to clusters that do not exist (yet).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawDendrogram")]
pub struct Dendrogram {
    /// Number of observations.
    pub n: usize,
    /// The `n − 1` merges, in order (nondecreasing heights when made by [`linkage`]).
    pub merges: Vec<Merge>,
}

#[derive(Deserialize)]
struct RawDendrogram {
    n: usize,
    merges: Vec<Merge>,
}

impl TryFrom<RawDendrogram> for Dendrogram {
    type Error = HcError;
    fn try_from(raw: RawDendrogram) -> Result<Self, HcError> {
        Dendrogram::from_merges(raw.n, raw.merges)
    }
}

/// Runs agglomerative clustering of the `d.n()` observations with `method`; the result equals
/// `scipy.cluster.hierarchy.linkage(d, method)` (see the [module docs](self) for the
/// algorithms). `n = 0` and `n = 1` give a dendrogram without merges.
pub fn linkage(d: &CondensedMatrix, method: Linkage) -> Dendrogram {
    let n = d.n();
    if n < 2 {
        return Dendrogram {
            n,
            merges: Vec::new(),
        };
    }
    let raw = match method {
        Linkage::Single => mst_single(d),
        _ => nn_chain(d, method),
    };
    Dendrogram {
        n,
        merges: sort_and_label(n, raw),
    }
}

/// An unlabelled merge: two slot (observation) indices and a height.
struct RawMerge {
    x: usize,
    y: usize,
    height: f64,
}

/// Prim's algorithm on the complete graph, as scipy's `mst_single_linkage`.
fn mst_single(d: &CondensedMatrix) -> Vec<RawMerge> {
    let n = d.n();
    let dists = d.as_slice();
    let mut merged = vec![false; n];
    // Smallest distance from each outside observation to the tree.
    let mut best = vec![f64::INFINITY; n];
    let mut out = Vec::with_capacity(n - 1);
    let mut x = 0usize;
    let mut y = 0usize;
    for _ in 0..n - 1 {
        let mut current_min = f64::INFINITY;
        merged[x] = true;
        for i in 0..n {
            if merged[i] {
                continue;
            }
            let dist = dists[condensed_index(n, x, i)];
            if best[i] > dist {
                best[i] = dist;
            }
            if best[i] < current_min {
                y = i;
                current_min = best[i];
            }
        }
        out.push(RawMerge {
            x,
            y,
            height: current_min,
        });
        x = y;
    }
    out
}

/// The nearest-neighbour-chain algorithm, as scipy's `nn_chain`, on a full square copy of the
/// distances. The diagonal holds +inf and `alive` masks dropped clusters, so the scans for the
/// nearest neighbour never pick either (scipy skips them explicitly; the outcome is the same
/// because the comparison is strict and +inf never beats the running minimum).
fn nn_chain(d: &CondensedMatrix, method: Linkage) -> Vec<RawMerge> {
    let n = d.n();
    let mut w = square_with_inf_diagonal(d);
    let mut size = vec![1usize; n];
    let mut alive = vec![true; n];
    let mut chain: Vec<usize> = Vec::with_capacity(n);
    let mut out = Vec::with_capacity(n - 1);
    let mut y = 0usize;

    for _ in 0..n - 1 {
        if chain.is_empty() {
            // `size[i] > 0` for some i: at least two clusters remain.
            chain.push(size.iter().position(|&s| s > 0).unwrap_or(0));
        }
        let (x, current_min) = loop {
            let len = chain.len();
            let x = chain[len - 1];
            let mut current_min = f64::INFINITY;
            // Prefer the previous element of the chain among equally near neighbours.
            if len > 1 {
                y = chain[len - 2];
                current_min = w[x * n + y];
            }
            let row = &w[x * n..(x + 1) * n];
            for (i, (&dist, &ok)) in row.iter().zip(&alive).enumerate() {
                let dist = if ok { dist } else { f64::INFINITY };
                if dist < current_min {
                    current_min = dist;
                    y = i;
                }
            }
            if len > 1 && y == chain[len - 2] {
                break (x, current_min);
            }
            chain.push(y);
        };
        chain.truncate(chain.len() - 2);

        let (x, yy) = if x > y { (y, x) } else { (x, y) };
        let (nx, ny) = (size[x], size[yy]);
        out.push(RawMerge {
            x,
            y: yy,
            height: current_min,
        });
        size[x] = 0;
        alive[x] = false;
        size[yy] = nx + ny;

        // Lance–Williams update of row and column yy (the only strided writes).
        for i in 0..n {
            let ni = size[i];
            if ni == 0 || i == yy {
                continue;
            }
            let v = method.update(w[x * n + i], w[yy * n + i], current_min, nx, ny, ni);
            w[yy * n + i] = v;
            w[i * n + yy] = v;
        }
        y = yy;
    }
    out
}

/// The full `n × n` matrix (row-major) with +inf on the diagonal, transposed in cache blocks.
fn square_with_inf_diagonal(d: &CondensedMatrix) -> Vec<f64> {
    let n = d.n();
    let c = d.as_slice();
    let mut w = vec![f64::INFINITY; n * n];
    // Upper triangle: rows of the condensed layout are contiguous.
    for i in 0..n {
        let start = condensed_index(n, i, i + 1).min(c.len());
        let row = &c[start..start + (n - i - 1)];
        w[i * n + i + 1..(i + 1) * n].copy_from_slice(row);
    }
    // Lower triangle: transpose in blocks.
    const B: usize = 64;
    for i0 in (0..n).step_by(B) {
        for j0 in (i0..n).step_by(B) {
            for i in i0..(i0 + B).min(n) {
                for j in j0.max(i + 1)..(j0 + B).min(n) {
                    w[j * n + i] = w[i * n + j];
                }
            }
        }
    }
    w
}

/// Stable sort by height, then scipy's `label`: union-find over cluster ids, the `i`-th merge
/// creating id `n + i`.
fn sort_and_label(n: usize, mut raw: Vec<RawMerge>) -> Vec<Merge> {
    // `sort_by` is stable, like numpy's mergesort; -0.0 and 0.0 compare equal as in numpy.
    raw.sort_by(|p, q| p.height.partial_cmp(&q.height).unwrap_or(Ordering::Equal));
    let mut parent: Vec<usize> = (0..2 * n - 1).collect();
    let mut sizes = vec![1usize; 2 * n - 1];
    let mut merges = Vec::with_capacity(raw.len());
    for (k, r) in raw.into_iter().enumerate() {
        let xr = find(&mut parent, r.x);
        let yr = find(&mut parent, r.y);
        let (a, b) = if xr < yr { (xr, yr) } else { (yr, xr) };
        let id = n + k;
        parent[a] = id;
        parent[b] = id;
        let size = sizes[a] + sizes[b];
        sizes[id] = size;
        merges.push(Merge {
            a,
            b,
            height: r.height,
            size,
        });
    }
    merges
}

/// Root of `x` with path compression.
fn find(parent: &mut [usize], mut x: usize) -> usize {
    let mut root = x;
    while parent[root] != root {
        root = parent[root];
    }
    while parent[x] != root {
        let next = parent[x];
        parent[x] = root;
        x = next;
    }
    root
}

impl Dendrogram {
    /// Builds a dendrogram from scipy-style merges, checking that there are `n − 1` of them
    /// (none for `n ≤ 1`), that merge `i` joins two distinct, not yet merged ids `a < b < n + i`,
    /// that its `size` is the sum of its children's sizes, and that no height is NaN.
    ///
    /// Heights need not be sorted; the cuts follow scipy's rules for unsorted trees too.
    pub fn from_merges(n: usize, merges: Vec<Merge>) -> Result<Self, HcError> {
        let d = Self { n, merges };
        d.validate()?;
        Ok(d)
    }

    /// Checks the invariants listed at [`Dendrogram::from_merges`].
    pub fn validate(&self) -> Result<(), HcError> {
        let (n, merges) = (self.n, &self.merges);
        let expected = n.saturating_sub(1);
        if merges.len() != expected {
            return Err(HcError::WrongMergeCount {
                n,
                expected,
                found: merges.len(),
            });
        }
        let mut sizes = vec![1usize; n + merges.len()];
        let mut used = vec![false; n + merges.len()];
        for (index, m) in merges.iter().enumerate() {
            let bad = |reason: String| HcError::InvalidMerge { index, reason };
            if m.a >= m.b {
                return Err(bad(format!(
                    "ids must satisfy a < b, got {} and {}",
                    m.a, m.b
                )));
            }
            if m.b >= n + index {
                return Err(bad(format!(
                    "id {} does not exist yet (ids must be < {})",
                    m.b,
                    n + index
                )));
            }
            if used[m.a] || used[m.b] {
                let id = if used[m.a] { m.a } else { m.b };
                return Err(bad(format!("cluster {id} was already merged")));
            }
            if m.height.is_nan() {
                return Err(bad("height is NaN".to_string()));
            }
            let size = sizes[m.a] + sizes[m.b];
            if m.size != size {
                return Err(bad(format!("size is {}, expected {size}", m.size)));
            }
            used[m.a] = true;
            used[m.b] = true;
            sizes[n + index] = size;
        }
        Ok(())
    }

    /// Number of observations (same as the `n` field).
    pub fn n(&self) -> usize {
        self.n
    }

    /// The merges, in order (scipy's rows of `Z`; same as the `merges` field).
    pub fn merges(&self) -> &[Merge] {
        &self.merges
    }

    /// Merge heights in merge order (nondecreasing for a dendrogram made by [`linkage`]).
    pub fn heights(&self) -> Vec<f64> {
        self.merges.iter().map(|m| m.height).collect()
    }

    /// For each merge, the largest height in its subtree (scipy's `get_max_dist_for_each_cluster`;
    /// equals the height itself for the monotone dendrograms that [`linkage`] returns).
    pub(crate) fn max_heights(&self) -> Vec<f64> {
        let n = self.n;
        let mut out: Vec<f64> = Vec::with_capacity(self.merges.len());
        for m in &self.merges {
            let mut h = m.height;
            for c in [m.a, m.b] {
                if let Some(&hc) = c.checked_sub(n).and_then(|j| out.get(j))
                    && hc > h
                {
                    h = hc;
                }
            }
            out.push(h);
        }
        out
    }

    /// Flat labels after applying the merges for which `apply[i]` is true: observations joined by
    /// applied merges share a label; labels are `0, 1, …` in order of first appearance by
    /// observation index.
    fn flat(&self, apply: &[bool]) -> Vec<usize> {
        let n = self.n;
        // parent over all 2n − 1 ids; unapplied merges leave their children as roots.
        let mut parent: Vec<usize> = (0..n + self.merges.len()).collect();
        for (i, (m, &ap)) in self.merges.iter().zip(apply).enumerate() {
            // Only ids that exist before merge i, each re-parented once (always true for a
            // valid dendrogram; guards hand-made ones against cycles and out-of-range ids).
            let ok = |c: usize| c < n + i && parent[c] == c;
            if ap && m.a != m.b && ok(m.a) && ok(m.b) {
                parent[m.a] = n + i;
                parent[m.b] = n + i;
            }
        }
        let mut label_of_root = vec![usize::MAX; parent.len()];
        let mut next = 0;
        (0..n)
            .map(|obs| {
                let root = find(&mut parent, obs);
                if label_of_root[root] == usize::MAX {
                    label_of_root[root] = next;
                    next += 1;
                }
                label_of_root[root]
            })
            .collect()
    }

    /// Flat clusters at distance threshold `t`, like `fcluster(Z, t, criterion="distance")`: a
    /// merge is applied when every height in its subtree is `<= t` (for a monotone dendrogram:
    /// when its own height is `<= t`). Labels are `0, 1, …` in order of first appearance by
    /// observation index. A NaN `t` applies no merge.
    pub fn cut_distance(&self, t: f64) -> Vec<usize> {
        let apply: Vec<bool> = self.max_heights().into_iter().map(|h| h <= t).collect();
        self.flat(&apply)
    }

    /// Number of flat clusters that [`Dendrogram::cut_distance`]`(t)` produces.
    pub fn n_clusters_at(&self, t: f64) -> usize {
        // Labels are 0..k in order of first appearance.
        self.cut_distance(t).into_iter().max().map_or(0, |m| m + 1)
    }

    /// Exactly `k` flat clusters: the first `n − k` merges are applied, like
    /// `cut_tree(Z, n_clusters=k)`. Labels are `0, 1, …` in order of first appearance.
    ///
    /// `k` is clamped to `1..=n` (`k = 0` gives one cluster, `k > n` gives singletons); an empty
    /// dendrogram gives an empty vector. Note that `fcluster(Z, k, criterion="maxclust")` can
    /// return fewer than `k` clusters when several merges share the height at the cut; this
    /// method breaks such ties by merge order instead.
    pub fn cut_k(&self, k: usize) -> Vec<usize> {
        let k = k.clamp(1, self.n.max(1));
        let applied = self.n.saturating_sub(k);
        let apply: Vec<bool> = (0..self.merges.len()).map(|i| i < applied).collect();
        self.flat(&apply)
    }

    /// A distance threshold chosen at the largest gap between consecutive merge heights (the
    /// `gap` rule; the default automatic cut is [`silhouette_cut`](super::cut::silhouette_cut)).
    ///
    /// Rule: sort the heights `h₀ ≤ h₁ ≤ … ≤ h_{m−1}`, find the first `i` with the largest
    /// `h_{i+1} − h_i`, and return the midpoint of that gap, `(h_i + h_{i+1}) / 2` (never rounded
    /// up onto `h_{i+1}`). Cutting there applies the `i + 1` lowest merges, leaving `n − i − 1`
    /// clusters: the natural cut where merging suddenly becomes expensive.
    ///
    /// Special cases: with no merges (`n ≤ 1`) it returns `0.0`; with a single merge (`n = 2`),
    /// or when all gaps are zero, it returns the largest height, i.e. one cluster, because there
    /// is no gap to compare against.
    pub fn auto_threshold(&self) -> f64 {
        let mut h = self.heights();
        h.sort_by(|p, q| p.partial_cmp(q).unwrap_or(Ordering::Equal));
        match h.len() {
            0 => return 0.0,
            1 => return h[0],
            _ => {}
        }
        let mut best = 0usize;
        let mut best_gap = h[1] - h[0];
        for i in 1..h.len() - 1 {
            let gap = h[i + 1] - h[i];
            if gap > best_gap {
                best_gap = gap;
                best = i;
            }
        }
        if best_gap <= 0.0 {
            return h[h.len() - 1];
        }
        let (lo, hi) = (h[best], h[best + 1]);
        let mid = lo + (hi - lo) / 2.0;
        if mid < hi { mid } else { lo }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pts(v: &[f32]) -> CondensedMatrix {
        let p: Vec<Vec<f32>> = v.iter().map(|&x| vec![x]).collect();
        CondensedMatrix::euclidean(&p).unwrap()
    }

    fn rows(d: &Dendrogram) -> Vec<(usize, usize, f64, usize)> {
        d.merges()
            .iter()
            .map(|m| (m.a, m.b, m.height, m.size))
            .collect()
    }

    #[test]
    fn parse_and_display() {
        for m in Linkage::ALL {
            assert_eq!(m.to_string().parse::<Linkage>().unwrap(), m);
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(json, format!("\"{m}\""));
            assert_eq!(serde_json::from_str::<Linkage>(&json).unwrap(), m);
        }
        assert_eq!(" Ward ".parse::<Linkage>().unwrap(), Linkage::Ward);
        assert!("centroid".parse::<Linkage>().is_err());
    }

    #[test]
    fn tiny_sizes() {
        for m in Linkage::ALL {
            let d0 = linkage(&CondensedMatrix::empty(), m);
            assert_eq!((d0.n(), d0.merges().len()), (0, 0));
            assert!(d0.cut_k(3).is_empty());
            assert!(d0.cut_distance(1.0).is_empty());
            assert_eq!(d0.n_clusters_at(1.0), 0);
            assert_eq!(d0.auto_threshold(), 0.0);

            let d1 = linkage(&pts(&[5.0]), m);
            assert_eq!(d1.merges().len(), 0);
            assert_eq!(d1.cut_k(0), vec![0]);
            assert_eq!(d1.cut_distance(0.0), vec![0]);
            assert_eq!(d1.auto_threshold(), 0.0);

            let d2 = linkage(&pts(&[0.0, 2.0]), m);
            assert_eq!(rows(&d2), vec![(0, 1, 2.0, 2)]);
            assert_eq!(d2.cut_distance(1.9), vec![0, 1]);
            assert_eq!(d2.cut_distance(2.0), vec![0, 0]);
            assert_eq!(d2.cut_k(2), vec![0, 1]);
            assert_eq!(d2.cut_k(9), vec![0, 1]);
            assert_eq!(d2.cut_k(1), vec![0, 0]);
            assert_eq!(d2.auto_threshold(), 2.0);
        }
    }

    #[test]
    fn hand_example_1d() {
        // Points 0, 1, 3, 7: scipy gives
        //   single:   [0,1,1,2] [2,4,2,3] [3,5,4,4]
        //   complete: [0,1,1,2] [2,4,3,3] [3,5,7,4]
        //   average:  [0,1,1,2] [2,4,2.5,3] [3,5,17/3,4]
        //   weighted: [0,1,1,2] [2,4,2.5,3] [3,5,5.25,4]
        let d = pts(&[0.0, 1.0, 3.0, 7.0]);
        let want = [
            (Linkage::Single, 2.0, 4.0),
            (Linkage::Complete, 3.0, 7.0),
            (Linkage::Average, 2.5, 17.0 / 3.0),
            (Linkage::Weighted, 2.5, 5.25),
        ];
        for (m, h2, h3) in want {
            assert_eq!(
                rows(&linkage(&d, m)),
                vec![(0, 1, 1.0, 2), (2, 4, h2, 3), (3, 5, h3, 4)],
                "{m}"
            );
        }
        // ward: d({0,1},3) = sqrt((2·9 + 2·4 − 1)/3) = sqrt(25/3)
        let w = linkage(&d, Linkage::Ward);
        assert_eq!(w.merges()[1].a, 2);
        assert!((w.merges()[1].height - (25.0f64 / 3.0).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn cuts_and_threshold() {
        // Two tight groups far apart.
        let d = pts(&[0.0, 0.1, 0.2, 10.0, 10.1]);
        let dn = linkage(&d, Linkage::Average);
        assert_eq!(dn.cut_k(2), vec![0, 0, 0, 1, 1]);
        assert_eq!(dn.cut_k(5), vec![0, 1, 2, 3, 4]);
        assert_eq!(dn.cut_k(0), vec![0; 5]);
        let t = dn.auto_threshold();
        assert!(t > 0.2 && t < 9.8, "{t}");
        assert_eq!(dn.cut_distance(t), vec![0, 0, 0, 1, 1]);
        assert_eq!(dn.n_clusters_at(t), 2);
        assert_eq!(dn.n_clusters_at(f64::NAN), 5);
        assert_eq!(dn.n_clusters_at(f64::INFINITY), 1);
    }

    #[test]
    fn auto_threshold_all_equal_heights() {
        let d = CondensedMatrix::from_condensed(vec![1.0; 6]).unwrap();
        let dn = linkage(&d, Linkage::Complete);
        assert_eq!(dn.auto_threshold(), 1.0);
        assert_eq!(dn.n_clusters_at(dn.auto_threshold()), 1);
    }

    #[test]
    fn from_merges_validation_and_serde() {
        let dn = linkage(&pts(&[0.0, 1.0, 3.0, 7.0]), Linkage::Single);
        let json = serde_json::to_string(&dn).unwrap();
        let back: Dendrogram = serde_json::from_str(&json).unwrap();
        assert_eq!(back, dn);

        let m = |a, b, height, size| Merge { a, b, height, size };
        assert!(matches!(
            Dendrogram::from_merges(3, vec![m(0, 1, 1.0, 2)]),
            Err(HcError::WrongMergeCount { .. })
        ));
        assert!(Dendrogram::from_merges(3, vec![m(0, 1, 1.0, 2), m(0, 2, 1.0, 2)]).is_err());
        assert!(Dendrogram::from_merges(3, vec![m(0, 1, 1.0, 2), m(2, 4, 1.0, 3)]).is_err());
        assert!(Dendrogram::from_merges(3, vec![m(0, 1, 1.0, 2), m(2, 3, 1.0, 4)]).is_err());
        assert!(Dendrogram::from_merges(3, vec![m(1, 0, 1.0, 2), m(2, 3, 1.0, 3)]).is_err());
        assert!(Dendrogram::from_merges(3, vec![m(0, 1, f64::NAN, 2), m(2, 3, 1.0, 3)]).is_err());
        let bad = r#"{"n":3,"merges":[{"a":0,"b":1,"height":1.0,"size":2},{"a":2,"b":9,"height":1.0,"size":3}]}"#;
        assert!(serde_json::from_str::<Dendrogram>(bad).is_err());

        // Malformed hand-made trees: validate() reports them, cuts do not panic.
        let broken = Dendrogram {
            n: 3,
            merges: vec![m(0, 7, 1.0, 2), m(3, 3, 2.0, 3), m(1, 2, 0.5, 2)],
        };
        assert!(broken.validate().is_err());
        assert_eq!(broken.cut_distance(10.0).len(), 3);
        assert_eq!(broken.cut_k(1).len(), 3);
        assert!(broken.n_clusters_at(10.0) <= 3);
        let _ = broken.auto_threshold();

        // Non-monotone tree: fcluster's rule uses the largest height below each node.
        let inv = Dendrogram::from_merges(3, vec![m(0, 1, 2.0, 2), m(2, 3, 1.0, 3)]).unwrap();
        assert_eq!(inv.cut_distance(1.5), vec![0, 1, 2]);
        assert_eq!(inv.cut_distance(2.0), vec![0, 0, 0]);
    }
}
