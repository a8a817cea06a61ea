//! Pairwise distances in scipy's condensed layout.
//!
//! A [`CondensedMatrix`] stores the strict upper triangle of a symmetric `n × n` distance matrix
//! row by row, exactly like the vector returned by `scipy.spatial.distance.pdist`: the distance
//! between observations `i < j` sits at [`condensed_index`]`(n, i, j)`, and there are
//! `n (n − 1) / 2` entries. Values are `f64` and always finite and non-negative.
//!
//! Constructors:
//!
//! * [`CondensedMatrix::euclidean`]: Euclidean distances between `f32` observations, in `f64`
//!   like `pdist(X.astype(float64))`. Small inputs are computed pair by pair (differences and
//!   squares accumulated in `f64`, then one square root). From [`PRODUCT_MIN_N`] observations on,
//!   the dot products come from blocked matrix products (`‖x‖² + ‖y‖² − 2x·y`, the
//!   formulation of scikit-learn's `euclidean_distances`), and every pair whose squared distance
//!   is below [`RECOMPUTE_BELOW`] of `‖x‖² + ‖y‖²` (where the expansion loses digits) is
//!   recomputed pair by pair, so tiny distances stay exact;
//! * [`CondensedMatrix::cosine_distance`]: `1 − x·y / (‖x‖ ‖y‖)` (scipy's `cosine`), with the same
//!   matrix products from [`PRODUCT_MIN_N`] observations on;
//! * [`CondensedMatrix::from_square`] and [`CondensedMatrix::from_condensed`] for distances
//!   computed elsewhere.
//!
//! All of them validate their input and return a [`DistanceError`] instead of panicking.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Why a distance matrix could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum DistanceError {
    /// Observation `row` has `found` coordinates where the first one has `expected`.
    #[error("observation {row} has {found} coordinates, expected {expected} (ragged input)")]
    RaggedDims {
        /// Index of the offending observation.
        row: usize,
        /// Dimension of observation 0.
        expected: usize,
        /// Dimension of observation `index`.
        found: usize,
    },
    /// Observation `row` has a NaN or infinite coordinate at position `col`.
    #[error("observation {row} has a non-finite coordinate at position {col}")]
    NotFinite {
        /// Index of the offending observation.
        row: usize,
        /// Coordinate position.
        col: usize,
    },
    /// Cosine distance is undefined for an all-zero observation.
    #[error("observation {index} is the zero vector; its cosine distance is undefined")]
    ZeroVector {
        /// Index of the offending observation.
        index: usize,
    },
    /// A square matrix has a row of the wrong length.
    #[error("row {row} of the square matrix has {found} entries, expected {expected}")]
    NotSquare {
        /// Row index.
        row: usize,
        /// Number of rows (= expected row length).
        expected: usize,
        /// Actual row length.
        found: usize,
    },
    /// A square matrix has a non-zero diagonal entry.
    #[error("diagonal entry ({index}, {index}) is {value}, expected 0")]
    NonZeroDiagonal {
        /// Row (and column) index.
        index: usize,
        /// The offending value.
        value: f64,
    },
    /// A square matrix is not exactly symmetric.
    #[error("matrix is not symmetric: entry ({i}, {j}) = {a} but ({j}, {i}) = {b}")]
    NotSymmetric {
        /// Row index.
        i: usize,
        /// Column index.
        j: usize,
        /// Value at `(i, j)`.
        a: f64,
        /// Value at `(j, i)`.
        b: f64,
    },
    /// A distance is NaN, infinite or negative.
    #[error("distance between {i} and {j} is {value}; distances must be finite and >= 0")]
    InvalidDistance {
        /// First observation.
        i: usize,
        /// Second observation.
        j: usize,
        /// The offending value.
        value: f64,
    },
    /// A condensed vector's length is not `n (n − 1) / 2` for any `n`.
    #[error("a condensed distance vector of length {len} is not n(n-1)/2 for any n")]
    BadCondensedLength {
        /// The offending length.
        len: usize,
    },
}

/// Position of the pair `(i, j)`, `i != j`, in the condensed vector of `n` observations
/// (scipy's `condensed_index`): `n·i − i(i+1)/2 + (j − i − 1)` for `i < j`, symmetric in `i, j`.
///
/// The caller must pass `i != j` and both `< n`; for `i == j` the result is meaningless (there
/// is no diagonal in the condensed layout).
#[inline]
pub fn condensed_index(n: usize, i: usize, j: usize) -> usize {
    let (i, j) = if i < j { (i, j) } else { (j, i) };
    n * i - i * (i + 1) / 2 + (j - i - 1)
}

/// Number of observations `n` whose condensed vector has `len` entries, if there is one.
pub fn n_from_condensed_len(len: usize) -> Option<usize> {
    if len == 0 {
        // n = 0 and n = 1 both give an empty vector; 1 is the useful answer.
        return Some(1);
    }
    // n = (1 + sqrt(1 + 8 len)) / 2, checked exactly in integers.
    let approx = ((1.0 + (1.0 + 8.0 * len as f64).sqrt()) / 2.0).round() as usize;
    (approx.saturating_sub(1)..=approx + 1)
        .find(|&n| n >= 2 && n.checked_mul(n - 1).map(|p| p / 2) == Some(len))
}

/// A symmetric distance matrix with zero diagonal, stored as scipy's condensed upper triangle.
///
/// Serialised as that condensed vector; deserialising checks it as
/// [`CondensedMatrix::from_condensed`] does (so the matrix of zero observations comes back as
/// that of one).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Vec<f64>", into = "Vec<f64>")]
pub struct CondensedMatrix {
    n: usize,
    data: Vec<f64>,
}

impl TryFrom<Vec<f64>> for CondensedMatrix {
    type Error = DistanceError;
    fn try_from(data: Vec<f64>) -> Result<Self, DistanceError> {
        Self::from_condensed(data)
    }
}

impl From<CondensedMatrix> for Vec<f64> {
    fn from(m: CondensedMatrix) -> Self {
        m.data
    }
}

impl fmt::Debug for CondensedMatrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CondensedMatrix")
            .field("n", &self.n)
            .field("len", &self.data.len())
            .finish()
    }
}

/// Checks that every observation has the dimension of the first and only finite coordinates.
/// Returns the common dimension (0 for no observations).
fn validate_points<P: AsRef<[f32]>>(points: &[P]) -> Result<usize, DistanceError> {
    let dim = points.first().map_or(0, |p| p.as_ref().len());
    for (index, p) in points.iter().enumerate() {
        let p = p.as_ref();
        if p.len() != dim {
            return Err(DistanceError::RaggedDims {
                row: index,
                expected: dim,
                found: p.len(),
            });
        }
        if let Some(col) = p.iter().position(|v| !v.is_finite()) {
            return Err(DistanceError::NotFinite { row: index, col });
        }
    }
    Ok(dim)
}

/// Flattens the observations into one row-major `f64` buffer (`n × dim`).
fn to_f64_rows<P: AsRef<[f32]>>(points: &[P], dim: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(points.len() * dim);
    for p in points {
        out.extend(p.as_ref().iter().map(|&v| f64::from(v)));
    }
    out
}

/// Number of independent partial sums per pair. They let the compiler vectorise the loops
/// without reassociating anything itself; their combination order is fixed, so a distance does
/// not depend on the thread or block that computed it.
const LANES: usize = 4;

/// Sum of squared differences of two equally long rows, accumulated in `f64`.
#[inline]
fn sq_euclid(x: &[f64], y: &[f64]) -> f64 {
    let mut acc = [0.0f64; LANES];
    let xc = x.chunks_exact(LANES);
    let yc = y.chunks_exact(LANES);
    let (xr, yr) = (xc.remainder(), yc.remainder());
    for (a, b) in xc.zip(yc) {
        for l in 0..LANES {
            let d = a[l] - b[l];
            acc[l] += d * d;
        }
    }
    let mut tail = 0.0;
    for (a, b) in xr.iter().zip(yr) {
        let d = a - b;
        tail += d * d;
    }
    ((acc[0] + acc[2]) + (acc[1] + acc[3])) + tail
}

/// Dot product of two equally long rows, accumulated in `f64` like [`sq_euclid`].
#[inline]
fn dot(x: &[f64], y: &[f64]) -> f64 {
    let mut acc = [0.0f64; LANES];
    let xc = x.chunks_exact(LANES);
    let yc = y.chunks_exact(LANES);
    let (xr, yr) = (xc.remainder(), yc.remainder());
    for (a, b) in xc.zip(yc) {
        for l in 0..LANES {
            acc[l] += a[l] * b[l];
        }
    }
    let mut tail = 0.0;
    for (a, b) in xr.iter().zip(yr) {
        tail += a * b;
    }
    ((acc[0] + acc[2]) + (acc[1] + acc[3])) + tail
}

/// Number of worker threads for the pairwise loops: at most the available parallelism and never
/// more than needed for tiny inputs.
fn worker_count(pairs: usize, dim: usize) -> usize {
    let work = pairs.saturating_mul(dim.max(1));
    if work < 1 << 20 {
        return 1;
    }
    std::thread::available_parallelism().map_or(1, |p| p.get().min(8))
}

/// Fills the condensed vector of `n` rows (`rows` is `n × dim`, row-major) with `f(row_i, row_j)`
/// for every `i < j`, splitting the rows over threads by equal numbers of pairs and visiting the
/// pairs in cache-sized blocks.
fn fill_pairwise<F>(n: usize, dim: usize, rows: &[f64], f: F) -> Vec<f64>
where
    F: Fn(&[f64], &[f64]) -> f64 + Sync,
{
    let len = n * n.saturating_sub(1) / 2;
    let mut data = vec![0.0f64; len];
    if len == 0 {
        return data;
    }
    let threads = worker_count(len, dim);
    // Row boundaries so that each thread gets about len / threads pairs.
    let mut bounds = vec![0usize];
    let mut acc = 0usize;
    for i in 0..n {
        acc += n - i - 1;
        if bounds.len() < threads && acc * threads >= len * bounds.len() {
            bounds.push(i + 1);
        }
    }
    while bounds.len() <= threads {
        bounds.push(n);
    }
    if let Some(last) = bounds.last_mut() {
        *last = n;
    }

    let row = |i: usize| &rows[i * dim..(i + 1) * dim];
    // Computes rows [r0, r1) into `out`, which starts at condensed_index(n, r0, r0 + 1).
    let work = |r0: usize, r1: usize, out: &mut [f64]| {
        // Blocks of I_BLOCK rows against J_BLOCK columns keep both sets of rows in cache.
        const I_BLOCK: usize = 16;
        let j_block = (64 * 1024 / (8 * dim.max(1))).clamp(8, 512);
        let base = if r0 < n.saturating_sub(1) {
            condensed_index(n, r0, r0 + 1)
        } else {
            0
        };
        let mut i0 = r0;
        while i0 < r1 {
            let i1 = (i0 + I_BLOCK).min(r1);
            let mut j0 = i0 + 1;
            while j0 < n {
                let j1 = (j0 + j_block).min(n);
                for i in i0..i1 {
                    let xi = row(i);
                    let start = (i + 1).max(j0);
                    if start >= j1 {
                        continue;
                    }
                    let off = condensed_index(n, i, start) - base;
                    let dst = &mut out[off..off + (j1 - start)];
                    for (d, j) in dst.iter_mut().zip(start..j1) {
                        *d = f(xi, row(j));
                    }
                }
                j0 = j1;
            }
            i0 = i1;
        }
    };

    if threads <= 1 {
        work(0, n, &mut data);
        return data;
    }
    std::thread::scope(|s| {
        let mut rest: &mut [f64] = &mut data;
        for w in bounds.windows(2) {
            let (r0, r1) = (w[0], w[1]);
            let count: usize = (r0..r1).map(|i| n - i - 1).sum();
            let (mine, tail) = rest.split_at_mut(count);
            rest = tail;
            if count > 0 {
                let work = &work;
                s.spawn(move || work(r0, r1, mine));
            }
        }
    });
    data
}

/// From this many observations on (and at least `PRODUCT_MIN_DIM` coordinates), the dot products
/// of all pairs come from blocked matrix products (`fill_by_products`) instead of one loop per
/// pair. Below it the pair loop is as fast and the distances are the direct ones bit for bit.
pub const PRODUCT_MIN_N: usize = 256;

/// Fewest coordinates for which the matrix products pay off (see [`PRODUCT_MIN_N`]).
const PRODUCT_MIN_DIM: usize = 16;

/// A squared Euclidean distance from `‖x‖² + ‖y‖² − 2x·y` that is below this fraction of
/// `‖x‖² + ‖y‖²` is recomputed directly. The expansion's absolute error is about
/// `dim · 2⁻⁵³ · (‖x‖² + ‖y‖²)`; above the threshold that is a relative error below
/// `dim · 1.2·10⁻¹⁶ / 10⁻³` (2·10⁻¹⁰ for `dim` = 850) of the squared distance, and half of it on
/// the distance. Below it the direct sum is exact to rounding however close the points are.
pub const RECOMPUTE_BELOW: f64 = 1e-3;

/// Rows per tile of the matrix products: a tile's `TILE × TILE` products (512 KiB) stay in L2.
const TILE: usize = 256;

/// Fills the condensed vector of `n` rows (`rows` is `n × dim`, row-major) with
/// `finish(i, j, x_i·x_j)` for every `i < j`, the dot products computed as `TILE × TILE` blocks of
/// the Gram matrix by a matrix product (nalgebra's `gemm`, which runs matrixmultiply's
/// SIMD kernels chosen at run time). Row blocks are handed to the threads largest first; each
/// block owns a contiguous range of the condensed vector, so no two threads write to the same
/// place and the result does not depend on the number of threads.
fn fill_by_products<F>(n: usize, dim: usize, rows: &[f64], finish: F) -> Vec<f64>
where
    F: Fn(usize, usize, f64) -> f64 + Sync,
{
    use nalgebra::{DMatrix, DMatrixView};

    let len = n * n.saturating_sub(1) / 2;
    let mut data = vec![0.0f64; len];
    // Row blocks [i0, i1) with the part of `data` holding their pairs, smallest (last rows) first
    // so that `pop` hands out the largest first.
    let mut blocks = Vec::new();
    let mut rest: &mut [f64] = &mut data;
    for i0 in (0..n).step_by(TILE) {
        let i1 = (i0 + TILE).min(n);
        let count: usize = (i0..i1).map(|i| n - i - 1).sum();
        let (mine, tail) = rest.split_at_mut(count);
        rest = tail;
        blocks.push((i0, i1, mine));
    }
    blocks.reverse();
    let queue = std::sync::Mutex::new(blocks);

    // Block `a..b` of the rows as a `(b − a) × dim` matrix, and its transpose, without copying.
    let block = |a: usize, b: usize| {
        DMatrixView::from_slice_with_strides(&rows[a * dim..b * dim], b - a, dim, dim, 1)
    };
    let block_t = |a: usize, b: usize| {
        DMatrixView::from_slice_with_strides(&rows[a * dim..b * dim], dim, b - a, 1, dim)
    };
    let worker = || {
        let mut gram = DMatrix::<f64>::zeros(TILE, TILE);
        loop {
            // A poisoned lock only means another worker panicked; its blocks are lost either way.
            let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let Some((i0, i1, out)) = next else { break };
            let base = condensed_index(n, i0, i0 + 1);
            let xi_t = block_t(i0, i1);
            for j0 in (i0..n).step_by(TILE) {
                let j1 = (j0 + TILE).min(n);
                // gram[(j − j0, i − i0)] = x_j · x_i: column i − i0 is contiguous in j.
                let mut g = gram.view_mut((0, 0), (j1 - j0, i1 - i0));
                g.gemm(1.0, &block(j0, j1), &xi_t, 0.0);
                for i in i0..i1 {
                    let start = (i + 1).max(j0);
                    if start >= j1 {
                        continue;
                    }
                    let off = condensed_index(n, i, start) - base;
                    let col = g.column(i - i0);
                    for (k, j) in (start..j1).enumerate() {
                        out[off + k] = finish(i, j, col[j - j0]);
                    }
                }
            }
        }
    };
    let threads = worker_count(len, dim);
    if threads <= 1 {
        worker();
    } else {
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(worker);
            }
        });
    }
    data
}

/// Whether [`fill_by_products`] is used for `n` observations of `dim` coordinates.
fn use_products(n: usize, dim: usize) -> bool {
    n >= PRODUCT_MIN_N && dim >= PRODUCT_MIN_DIM
}

impl CondensedMatrix {
    /// Euclidean distances between observations (all of the same dimension, finite).
    ///
    /// The `f32` coordinates are widened to `f64` first, as `pdist(X.astype(float64))` does.
    /// Below [`PRODUCT_MIN_N`] observations each distance is `sqrt(Σ (x_k − y_k)²)` accumulated
    /// in `f64` (it may differ from scipy in the last bits because the summation order differs);
    /// from there on it is `sqrt(‖x‖² + ‖y‖² − 2x·y)` with the dot products from blocked matrix
    /// products, recomputed the direct way where that expansion is inaccurate (see
    /// [`RECOMPUTE_BELOW`]): within about `10⁻¹⁰` relative of the direct value. Work is spread over
    /// up to [`std::thread::available_parallelism`] threads.
    ///
    /// Accepts `&[Vec<f32>]`, `&[&[f32]]` or any slice of `AsRef<[f32]>`.
    pub fn euclidean<P: AsRef<[f32]>>(points: &[P]) -> Result<Self, DistanceError> {
        let dim = validate_points(points)?;
        let n = points.len();
        let rows = to_f64_rows(points, dim);
        let row = |i: usize| &rows[i * dim..(i + 1) * dim];
        let data = if use_products(n, dim) {
            let norms: Vec<f64> = (0..n).map(|i| dot(row(i), row(i))).collect();
            fill_by_products(n, dim, &rows, |i, j, xy| {
                let scale = norms[i] + norms[j];
                let d2 = scale - 2.0 * xy;
                if d2 > RECOMPUTE_BELOW * scale {
                    d2.sqrt()
                } else {
                    sq_euclid(row(i), row(j)).sqrt()
                }
            })
        } else {
            fill_pairwise(n, dim, &rows, |x, y| sq_euclid(x, y).sqrt())
        };
        Ok(Self { n, data })
    }

    /// Cosine distances `1 − x·y / (‖x‖ ‖y‖)` (scipy's `cosine` metric), clamped to `[0, 2]`
    /// to absorb rounding. Products are accumulated in `f64`.
    ///
    /// Errors with [`DistanceError::ZeroVector`] for an all-zero observation (scipy returns NaN
    /// there).
    pub fn cosine_distance<P: AsRef<[f32]>>(points: &[P]) -> Result<Self, DistanceError> {
        let dim = validate_points(points)?;
        let n = points.len();
        let mut rows = to_f64_rows(points, dim);
        if dim == 0 && n > 0 {
            return Err(DistanceError::ZeroVector { index: 0 });
        }
        for (index, r) in rows.chunks_exact_mut(dim.max(1)).enumerate() {
            let norm = dot(r, r).sqrt();
            if norm == 0.0 {
                return Err(DistanceError::ZeroVector { index });
            }
            r.iter_mut().for_each(|v| *v /= norm);
        }
        let data = if use_products(n, dim) {
            fill_by_products(n, dim, &rows, |_, _, xy| (1.0 - xy).clamp(0.0, 2.0))
        } else {
            fill_pairwise(n, dim, &rows, |x, y| (1.0 - dot(x, y)).clamp(0.0, 2.0))
        };
        Ok(Self { n, data })
    }

    /// Builds the matrix from a full square matrix, checking that it is square, has an exactly
    /// zero diagonal, is exactly symmetric, and holds only finite, non-negative values.
    pub fn from_square(square: &[Vec<f64>]) -> Result<Self, DistanceError> {
        let n = square.len();
        for (row, r) in square.iter().enumerate() {
            if r.len() != n {
                return Err(DistanceError::NotSquare {
                    row,
                    expected: n,
                    found: r.len(),
                });
            }
        }
        let mut data = Vec::with_capacity(n * n.saturating_sub(1) / 2);
        for (i, row) in square.iter().enumerate() {
            let d = row[i];
            if d != 0.0 {
                return Err(DistanceError::NonZeroDiagonal { index: i, value: d });
            }
            for (j, &a) in row.iter().enumerate().skip(i + 1) {
                let b = square[j][i];
                if !a.is_finite() || a < 0.0 {
                    return Err(DistanceError::InvalidDistance { i, j, value: a });
                }
                if a != b {
                    return Err(DistanceError::NotSymmetric { i, j, a, b });
                }
                // `+ 0.0` turns -0.0 into 0.0.
                data.push(a + 0.0);
            }
        }
        Ok(Self { n, data })
    }

    /// Takes ownership of a condensed vector (as returned by scipy's `pdist`), checking its
    /// length and that every value is finite and non-negative. An empty vector means one
    /// observation; use [`CondensedMatrix::empty`] for none.
    pub fn from_condensed(mut data: Vec<f64>) -> Result<Self, DistanceError> {
        let n = n_from_condensed_len(data.len())
            .ok_or(DistanceError::BadCondensedLength { len: data.len() })?;
        if let Some(pos) = data.iter().position(|v| !v.is_finite() || *v < 0.0) {
            let (i, j) = pair_of_index(n, pos);
            return Err(DistanceError::InvalidDistance {
                i,
                j,
                value: data[pos],
            });
        }
        // -0.0 would print as "-0" in the heights; make it 0.0.
        data.iter_mut().for_each(|v| *v += 0.0);
        Ok(Self { n, data })
    }

    /// The distance matrix of zero observations.
    pub fn empty() -> Self {
        Self {
            n: 0,
            data: Vec::new(),
        }
    }

    /// Number of observations.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Distance between observations `i` and `j` (0 when `i == j`); `None` when either index is
    /// out of range.
    pub fn get(&self, i: usize, j: usize) -> Option<f64> {
        if i >= self.n || j >= self.n {
            None
        } else if i == j {
            Some(0.0)
        } else {
            self.data.get(condensed_index(self.n, i, j)).copied()
        }
    }

    /// The condensed entries, in scipy's order.
    pub fn as_slice(&self) -> &[f64] {
        &self.data
    }

    /// Gives back the condensed entries, in scipy's order.
    pub fn into_vec(self) -> Vec<f64> {
        self.data
    }

    /// The full symmetric `n × n` matrix with a zero diagonal.
    pub fn to_square(&self) -> Vec<Vec<f64>> {
        (0..self.n)
            .map(|i| (0..self.n).map(|j| self.get(i, j).unwrap_or(0.0)).collect())
            .collect()
    }
}

/// Inverse of [`condensed_index`]: the pair `(i, j)`, `i < j`, stored at position `pos`.
fn pair_of_index(n: usize, pos: usize) -> (usize, usize) {
    let mut start = 0;
    for i in 0..n {
        let len = n - i - 1;
        if pos < start + len {
            return (i, i + 1 + pos - start);
        }
        start += len;
    }
    (0, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn condensed_index_matches_scipy_layout() {
        // n = 4: (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)
        let pairs = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)];
        for (k, &(i, j)) in pairs.iter().enumerate() {
            assert_eq!(condensed_index(4, i, j), k);
            assert_eq!(condensed_index(4, j, i), k);
            assert_eq!(pair_of_index(4, k), (i, j));
        }
    }

    #[test]
    fn n_from_len() {
        assert_eq!(n_from_condensed_len(0), Some(1));
        assert_eq!(n_from_condensed_len(1), Some(2));
        assert_eq!(n_from_condensed_len(3), Some(3));
        assert_eq!(n_from_condensed_len(4), None);
        assert_eq!(n_from_condensed_len(4950), Some(100));
        assert_eq!(n_from_condensed_len(49_995_000), Some(10_000));
        assert_eq!(n_from_condensed_len(49_995_001), None);
    }

    #[test]
    fn euclidean_small() {
        let pts = vec![vec![0.0f32, 0.0], vec![3.0, 4.0], vec![0.0, 1.0]];
        let d = CondensedMatrix::euclidean(&pts).unwrap();
        assert_eq!(d.n(), 3);
        assert_eq!(d.as_slice(), &[5.0, 1.0, 18.0f64.sqrt()]);
        assert_eq!(d.get(1, 0), Some(5.0));
        assert_eq!(d.get(2, 2), Some(0.0));
        assert_eq!(d.get(3, 0), None);
        let sq = d.to_square();
        assert_eq!(CondensedMatrix::from_square(&sq).unwrap(), d);
        // &[&[f32]] works too.
        let refs: Vec<&[f32]> = pts.iter().map(|p| p.as_slice()).collect();
        assert_eq!(CondensedMatrix::euclidean(&refs).unwrap(), d);
    }

    #[test]
    fn euclidean_is_exact_for_close_points() {
        // The expansion ‖x‖² + ‖y‖² − 2x·y would lose this distance entirely.
        let a = vec![1000.0f32; 850];
        let mut b = a.clone();
        b[3] = 1000.0 + 1.0 / 1024.0;
        let d = CondensedMatrix::euclidean(&[a, b]).unwrap();
        assert_eq!(d.as_slice(), &[1.0 / 1024.0]);
    }

    #[test]
    fn threaded_matches_sequential() {
        // Big enough to take the threaded path; compare with a naive loop.
        let n = 300;
        let dim = 37;
        let pts: Vec<Vec<f32>> = (0..n)
            .map(|i| {
                (0..dim)
                    .map(|k| (((i * 31 + k * 17) % 101) as f32 - 50.0) / 7.0)
                    .collect()
            })
            .collect();
        let d = CondensedMatrix::euclidean(&pts).unwrap();
        for i in 0..n {
            for j in i + 1..n {
                let s: f64 = (0..dim)
                    .map(|k| {
                        let t = f64::from(pts[i][k]) - f64::from(pts[j][k]);
                        t * t
                    })
                    .sum();
                let want = s.sqrt();
                let got = d.get(i, j).unwrap();
                assert!((got - want).abs() <= 1e-12 * want.max(1.0), "{i} {j}");
            }
        }
    }

    /// Points for the matrix-product path: clustered values of very different magnitudes,
    /// exact duplicates, near duplicates and a zero vector, more than one tile of rows.
    fn product_path_points() -> Vec<Vec<f32>> {
        let n = TILE + 77;
        let dim = 850;
        let mut state = 7u64;
        let mut unit = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        let centres: Vec<Vec<f32>> = (0..5)
            .map(|c| (0..dim).map(|_| 10f32.powi(c - 2) * unit()).collect())
            .collect();
        let mut pts: Vec<Vec<f32>> = (0..n)
            .map(|i| {
                let c = &centres[i % 5];
                c.iter().map(|&v| v + 0.01 * v.abs() * unit()).collect()
            })
            .collect();
        pts[3] = pts[200].clone();
        pts[290] = pts[5].clone();
        pts[291] = pts[5].clone();
        pts[291][17] += 1.0 / 4096.0;
        pts[100] = vec![1000.0; dim];
        pts[300] = vec![1000.0; dim];
        pts[300][3] += 1.0 / 1024.0;
        pts[150] = vec![0.0; dim];
        pts
    }

    fn naive(x: &[f32], y: &[f32], f: impl Fn(f64, f64) -> f64) -> f64 {
        x.iter()
            .zip(y)
            .map(|(&a, &b)| f(f64::from(a), f64::from(b)))
            .sum()
    }

    #[test]
    fn matrix_products_match_the_direct_sums() {
        let pts = product_path_points();
        let n = pts.len();
        assert!(use_products(n, pts[0].len()));
        let d = CondensedMatrix::euclidean(&pts).unwrap();
        for i in 0..n {
            for j in i + 1..n {
                let want = naive(&pts[i], &pts[j], |a, b| (a - b) * (a - b)).sqrt();
                let got = d.get(i, j).unwrap();
                assert!(
                    (got - want).abs() <= 1e-10 * want,
                    "({i}, {j}): {got} vs {want}"
                );
            }
        }
        // Exact where the expansion would have lost everything.
        assert_eq!(d.get(3, 200), Some(0.0));
        assert_eq!(d.get(5, 290), Some(0.0));
        assert_eq!(d.get(5, 291), Some(1.0 / 4096.0));
        assert_eq!(d.get(100, 300), Some(1.0 / 1024.0));
        // The same again (threads pick blocks in any order).
        assert_eq!(CondensedMatrix::euclidean(&pts).unwrap(), d);
    }

    #[test]
    fn cosine_by_matrix_products_matches_the_direct_sums() {
        let mut pts = product_path_points();
        pts[150][0] = 1.0;
        let n = pts.len();
        let d = CondensedMatrix::cosine_distance(&pts).unwrap();
        for i in 0..n {
            for j in i + 1..n {
                let xy = naive(&pts[i], &pts[j], |a, b| a * b);
                let xx = naive(&pts[i], &pts[i], |a, b| a * b);
                let yy = naive(&pts[j], &pts[j], |a, b| a * b);
                let want = (1.0 - xy / (xx.sqrt() * yy.sqrt())).clamp(0.0, 2.0);
                let got = d.get(i, j).unwrap();
                assert!((got - want).abs() <= 1e-12, "({i}, {j}): {got} vs {want}");
            }
        }
    }

    #[test]
    fn cosine() {
        let pts = vec![
            vec![1.0f32, 0.0],
            vec![0.0, 2.0],
            vec![-3.0, 0.0],
            vec![1.0, 1.0],
        ];
        let d = CondensedMatrix::cosine_distance(&pts).unwrap();
        assert_eq!(d.get(0, 1), Some(1.0));
        assert_eq!(d.get(0, 2), Some(2.0));
        assert!((d.get(0, 3).unwrap() - (1.0 - 0.5f64.sqrt())).abs() < 1e-15);
        let err = CondensedMatrix::cosine_distance(&[vec![1.0f32], vec![0.0]]).unwrap_err();
        assert_eq!(err, DistanceError::ZeroVector { index: 1 });
    }

    #[test]
    fn rejects_bad_points() {
        let err = CondensedMatrix::euclidean(&[vec![1.0f32, 2.0], vec![1.0]]).unwrap_err();
        assert_eq!(
            err,
            DistanceError::RaggedDims {
                row: 1,
                expected: 2,
                found: 1
            }
        );
        let err = CondensedMatrix::euclidean(&[vec![1.0f32, f32::NAN]]).unwrap_err();
        assert_eq!(err, DistanceError::NotFinite { row: 0, col: 1 });
        let err = CondensedMatrix::euclidean(&[vec![f32::INFINITY]]).unwrap_err();
        assert!(matches!(err, DistanceError::NotFinite { .. }));
        assert!(err.to_string().contains("non-finite"));
    }

    #[test]
    fn degenerate_sizes() {
        let none: Vec<Vec<f32>> = Vec::new();
        let d = CondensedMatrix::euclidean(&none).unwrap();
        assert_eq!((d.n(), d.as_slice().len()), (0, 0));
        let d = CondensedMatrix::euclidean(&[vec![1.0f32]]).unwrap();
        assert_eq!((d.n(), d.as_slice().len()), (1, 0));
        assert_eq!(d.to_square(), vec![vec![0.0]]);
        let d = CondensedMatrix::euclidean(&[Vec::<f32>::new(), Vec::new()]).unwrap();
        assert_eq!(d.as_slice(), &[0.0]);
    }

    #[test]
    fn from_square_validation() {
        assert!(matches!(
            CondensedMatrix::from_square(&[vec![0.0, 1.0], vec![1.0]]),
            Err(DistanceError::NotSquare { row: 1, .. })
        ));
        assert!(matches!(
            CondensedMatrix::from_square(&[vec![0.0, 1.0], vec![1.0, 0.5]]),
            Err(DistanceError::NonZeroDiagonal { index: 1, .. })
        ));
        assert!(matches!(
            CondensedMatrix::from_square(&[vec![0.0, 1.0], vec![2.0, 0.0]]),
            Err(DistanceError::NotSymmetric { i: 0, j: 1, .. })
        ));
        assert!(matches!(
            CondensedMatrix::from_square(&[vec![0.0, -1.0], vec![-1.0, 0.0]]),
            Err(DistanceError::InvalidDistance { .. })
        ));
        assert!(matches!(
            CondensedMatrix::from_square(&[vec![0.0, f64::NAN], vec![f64::NAN, 0.0]]),
            Err(DistanceError::InvalidDistance { .. })
        ));
        assert_eq!(CondensedMatrix::from_square(&[]).unwrap().n(), 0);
    }

    #[test]
    fn from_condensed_validation() {
        assert_eq!(
            CondensedMatrix::from_condensed(vec![1.0, 2.0]),
            Err(DistanceError::BadCondensedLength { len: 2 })
        );
        assert_eq!(
            CondensedMatrix::from_condensed(vec![1.0, 2.0, f64::INFINITY]),
            Err(DistanceError::InvalidDistance {
                i: 1,
                j: 2,
                value: f64::INFINITY
            })
        );
        let d = CondensedMatrix::from_condensed(vec![1.0, 2.0, 3.0]).unwrap();
        assert_eq!(d.get(2, 1), Some(3.0));
    }

    /// Serialised as the condensed vector; read back through the checks of `from_condensed`.
    #[test]
    fn serde_is_the_condensed_vector() {
        let d = CondensedMatrix::from_condensed(vec![1.0, 2.5, 0.1]).unwrap();
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v, serde_json::json!([1.0, 2.5, 0.1]));
        let back: CondensedMatrix = serde_json::from_value(v).unwrap();
        assert_eq!((back.n(), back.get(1, 2)), (3, Some(0.1)));
        // Not a triangle; a negative distance.
        assert!(serde_json::from_value::<CondensedMatrix>(serde_json::json!([1.0, 2.0])).is_err());
        assert!(serde_json::from_value::<CondensedMatrix>(serde_json::json!([-1.0])).is_err());
    }
}
