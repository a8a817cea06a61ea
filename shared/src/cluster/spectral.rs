//! MT-HFL's data signature and relevance (Ali & Arafa; the paper's pipeline, equations (1) to (5),
//! is told in [`crate::algorithms::mthfl`]): the Gram matrix of a client's data and its leading
//! eigenpairs ([`Gram`], [`Signature`]), the relevance of one client's eigenvectors to another's
//! data on the client ([`client_row`]) or on the server ([`server_rows`]), its symmetrisation
//! ([`symmetrise`]) and the distance `1 − R` ([`distances`]) that the HAC of MT-HFL cuts.
//!
//! Numerical conventions, identical in both ways: received eigenvectors are renormalised to unit
//! length (so `f16` rounding does not bias `λ̂`); eigenvalues and estimates below [`TINY`] count as
//! `TINY` (a ratio of two vanishing values is 1, so the diagonal of `r` is 1); eigenvector signs
//! are fixed so that the largest-magnitude component is positive (deterministic uploads; `r` does
//! not depend on signs).
//!
//! # Why nalgebra (and not faer) for the eigen-decomposition
//!
//! Measured on the 2-core development VM (shared, loaded), Gram matrix of 6 000 × 784 `f64`
//! values, release builds of two scratch crates, best of 5:
//!
//! | | nalgebra 0.35 | faer 0.24 |
//! | --- | --- | --- |
//! | `XᵀX` (6 000 × 784) | 0.28 s (matrixmultiply) | 0.26 s |
//! | 784 × 784 symmetric eigen, `f64` | 0.54 s | 0.16 s |
//! | 784 × 784 symmetric eigen, `f32` | 0.26 s | 0.07 s |
//! | clean build, CPU time the workspace does not already pay | ≈ 36 s | ≈ 210 s (faer 63 s, nano-gemm 118 s, private-gemm-x86 23 s) |
//! | the scratch benchmark binary (not stripped) | 0.57 MB | 4.2 MB |
//!
//! faer decomposes 3.4× faster, but a client decomposes once per federation, and half a second is
//! less than one local epoch; the edge client's binary size and the CI build time on 2 cores are
//! paid on every build and every board. nalgebra is pure Rust, portable to every edge target, and
//! its large products go through matrixmultiply, which the workspace already builds.

use std::fmt;
use std::ops::Range;
use std::str::FromStr;
use std::sync::{Mutex, PoisonError};

use burn::prelude::*;
use burn::tensor::TensorData;
use nalgebra::DMatrix;
use serde::{Deserialize, Serialize};

use crate::cluster::distance::{CondensedMatrix, DistanceError};
use crate::parallel::{cores, par_map_on};
use crate::protocol::{Eigenpairs, Encoding, ProtocolError};
use crate::train::{Device, LocalData, to_unit};

/// The paper's number of kept eigenvectors (§III, Fig. 4).
pub const DEFAULT_EIGENVECTORS: usize = 5;

/// Eigenvalues and eigenvalue estimates below this count as this (see the module docs).
pub const TINY: f64 = 1e-30;

/// Samples per block when accumulating `XᵀX`: bounds the temporaries (the block and its
/// transpose in `f64`) to 2 × 512 × d × 8 bytes, 6.4 MB for Fashion-MNIST's d = 784, which an
/// edge client can afford (4 096 took 51 MB). Blocks change only the order of the sums.
const GRAM_BLOCK: usize = 512;

/// Most `f32` elements of one tile of eigenvector dot products in [`server_rows`] (4 MiB: its
/// temporaries stay below glibc's mmap threshold, so the heap reuses their pages instead of
/// mapping and faulting in fresh ones for every elementwise step).
const SERVER_TILE_ELEMS: usize = 1 << 20;

/// Errors of the spectral signature and relevance.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpectralError {
    /// A feature buffer is empty, ragged or has a zero dimension.
    #[error(
        "feature buffer of {len} floats does not hold whole rows of d = {d} (and at least one)"
    )]
    BadFeatures {
        /// Floats in the buffer.
        len: usize,
        /// Row length.
        d: usize,
    },
    /// A feature value is NaN or infinite.
    #[error("feature value {index} is not finite")]
    NotFinite {
        /// Position in the buffer.
        index: usize,
    },
    /// The local images could not be read (their scratch file).
    #[error("reading the local images: {0}")]
    Data(String),
    /// A hand-made Gram matrix is not square, not symmetric or not finite.
    #[error("not a symmetric finite d × d matrix: {0}")]
    BadGram(String),
    /// `k` outside `1..=d`.
    #[error("k = {k} eigenvectors requested, must be between 1 and d = {d}")]
    BadK {
        /// Requested number of eigenvectors.
        k: usize,
        /// Dimension.
        d: usize,
    },
    /// The symmetric eigen-decomposition did not converge.
    #[error("the symmetric eigen-decomposition of a {d} × {d} matrix did not converge")]
    NoConvergence {
        /// Dimension.
        d: usize,
    },
    /// A signature is malformed (lengths, NaN, negative eigenvalue…).
    #[error("signature {index}: {reason}")]
    BadSignature {
        /// Which signature (client position).
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// Signatures (or a signature and a Gram matrix) of different dimensions or `k`.
    #[error("signature {index} has k = {k}, d = {d}; expected k = {expected_k}, d = {expected_d}")]
    Mismatch {
        /// Which signature.
        index: usize,
        /// Its k.
        k: usize,
        /// Its d.
        d: usize,
        /// Expected k.
        expected_k: usize,
        /// Expected d.
        expected_d: usize,
    },
    /// Relevance rows that do not form a square matrix of finite values in `[0, 1]`.
    #[error("relevance rows: {0}")]
    BadRows(String),
    /// No client at all.
    #[error("no client to cluster")]
    Empty,
    /// The distance matrix could not be built.
    #[error(transparent)]
    Distance(#[from] DistanceError),
}

pub use crate::protocol::Estimate;

/// Where the relevance rows `r(i, ·)` (eq. 2-4) are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Relevance {
    /// The paper's way: every signature is relayed to every client, and client `i` computes its
    /// row with its exact Gram matrix ([`client_row`]) and uploads it.
    #[default]
    Client,
    /// On the coordinator from the uploads alone, `Gᵢ ≈ Vᵢ Λᵢ Vᵢᵀ` ([`server_rows`]).
    Server,
}

impl fmt::Display for Relevance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Relevance::Client => "client",
            Relevance::Server => "server",
        })
    }
}

impl FromStr for Relevance {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "client" => Ok(Relevance::Client),
            "server" => Ok(Relevance::Server),
            _ => Err(format!(
                "unknown relevance {s:?} (expected client or server)"
            )),
        }
    }
}

/// A client's Gram matrix `G = (1/n) Φ(X)ᵀ Φ(X)` (eq. 1), in `f64`.
#[derive(Clone, PartialEq)]
pub struct Gram {
    n_samples: usize,
    matrix: DMatrix<f64>,
}

impl fmt::Debug for Gram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gram")
            .field("d", &self.d())
            .field("n_samples", &self.n_samples)
            .finish_non_exhaustive()
    }
}

impl Gram {
    /// The Gram matrix of `features`, `n` rows of `d` floats each (row-major), accumulated in
    /// `f64` blocks of 4 096 rows with a matrix product.
    ///
    /// # Errors
    ///
    /// [`SpectralError::BadFeatures`] for an empty or ragged buffer or `d = 0`,
    /// [`SpectralError::NotFinite`] for a NaN or infinite value.
    pub fn from_features(features: &[f32], d: usize) -> Result<Gram, SpectralError> {
        if d == 0 || features.is_empty() || !features.len().is_multiple_of(d) {
            return Err(SpectralError::BadFeatures {
                len: features.len(),
                d,
            });
        }
        if let Some(index) = features.iter().position(|v| !v.is_finite()) {
            return Err(SpectralError::NotFinite { index });
        }
        Ok(Gram::accumulate(features, d, f64::from))
    }

    /// The Gram matrix of a client's training pixels (`d` the pixels of one image, 784 for
    /// 1×28×28; values in `[0, 1]`).
    ///
    /// # Errors
    ///
    /// As [`Gram::from_features`] (an empty client is [`SpectralError::BadFeatures`]).
    pub fn from_local_data(data: &LocalData) -> Result<Gram, SpectralError> {
        // The floats training sees (`to_unit`), converted a block at a time: no f32 copy of
        // the client's data is held (nor, for images in a scratch file, more than a block of
        // them), and the sums are those `from_features` makes on them.
        let n = data.len();
        let d = data.shape().pixels();
        if n == 0 {
            return Err(SpectralError::BadFeatures { len: 0, d });
        }
        let mut g = DMatrix::<f64>::zeros(d, d);
        let mut block = Vec::with_capacity(GRAM_BLOCK.min(n) * d);
        for start in (0..n).step_by(GRAM_BLOCK) {
            block.clear();
            data.read_images(start, GRAM_BLOCK.min(n - start), &mut block)
                .map_err(|e| SpectralError::Data(e.to_string()))?;
            Gram::add_block(&mut g, &block, d, n, |p| f64::from(to_unit(p)));
        }
        Ok(Gram::finish(g, n))
    }

    /// (1/n) XᵀX over `values` (n rows of `d`, checked by the callers), each value as `f`
    /// makes it, a block of rows at a time.
    fn accumulate<T: Copy>(values: &[T], d: usize, f: impl Fn(T) -> f64) -> Gram {
        let n = values.len() / d;
        let mut g = DMatrix::<f64>::zeros(d, d);
        for block in values.chunks(GRAM_BLOCK * d) {
            Gram::add_block(&mut g, block, d, n, &f);
        }
        Gram::finish(g, n)
    }

    /// Adds (1/n) BᵀB of the block `block` (whole rows of `d`) to `g`.
    fn add_block<T: Copy>(
        g: &mut DMatrix<f64>,
        block: &[T],
        d: usize,
        n: usize,
        f: impl Fn(T) -> f64,
    ) {
        let rows = block.len() / d;
        // Column-major d × rows: column s is sample s, i.e. this is Xᵀ of the block.
        let xt = DMatrix::<f64>::from_iterator(d, rows, block.iter().map(|&v| f(v)));
        let x = xt.transpose();
        g.gemm(1.0 / n as f64, &xt, &x, 1.0);
    }

    /// The Gram matrix of `n` samples from the sum `g`.
    fn finish(g: DMatrix<f64>, n: usize) -> Gram {
        // The product is symmetric up to rounding; make it exactly so.
        let g = (&g + g.transpose()) * 0.5;
        Gram {
            n_samples: n,
            matrix: g,
        }
    }

    /// A Gram matrix given directly, `d × d` row-major (for tests and for features computed
    /// elsewhere); `n_samples` is informative only.
    ///
    /// # Errors
    ///
    /// [`SpectralError::BadGram`] unless `values` is a finite, exactly symmetric `d × d` matrix.
    pub fn from_matrix(d: usize, values: &[f64], n_samples: usize) -> Result<Gram, SpectralError> {
        if d == 0 || values.len() != d * d {
            return Err(SpectralError::BadGram(format!(
                "{} values for d = {d}",
                values.len()
            )));
        }
        if values.iter().any(|v| !v.is_finite()) {
            return Err(SpectralError::BadGram("a value is not finite".into()));
        }
        let m = DMatrix::from_row_slice(d, d, values);
        for i in 0..d {
            for j in 0..i {
                if m[(i, j)] != m[(j, i)] {
                    return Err(SpectralError::BadGram(format!("({i}, {j}) ≠ ({j}, {i})")));
                }
            }
        }
        Ok(Gram {
            n_samples,
            matrix: m,
        })
    }

    /// Dimension `d`.
    pub fn d(&self) -> usize {
        self.matrix.nrows()
    }

    /// Number of feature rows it was computed from.
    pub fn n_samples(&self) -> usize {
        self.n_samples
    }

    /// Entry `(i, j)`.
    pub fn get(&self, i: usize, j: usize) -> f64 {
        self.matrix[(i, j)]
    }

    /// All `d` eigenpairs, eigenvalues in decreasing order (ties keep nalgebra's order), unit
    /// eigenvectors with their largest-magnitude component positive.
    ///
    /// # Errors
    ///
    /// [`SpectralError::NoConvergence`] if the implicit QR iteration does not converge.
    pub fn eigen(&self) -> Result<(Vec<f64>, Vec<Vec<f64>>), SpectralError> {
        let d = self.d();
        let eig =
            nalgebra::SymmetricEigen::try_new(self.matrix.clone(), f64::EPSILON, 1000 * d + 10_000)
                .ok_or(SpectralError::NoConvergence { d })?;
        let mut order: Vec<usize> = (0..d).collect();
        order.sort_by(|&a, &b| eig.eigenvalues[b].total_cmp(&eig.eigenvalues[a]));
        let values = order.iter().map(|&a| eig.eigenvalues[a]).collect();
        let vectors = order
            .iter()
            .map(|&a| {
                let mut v: Vec<f64> = eig.eigenvectors.column(a).iter().copied().collect();
                fix_sign(&mut v);
                v
            })
            .collect();
        Ok((values, vectors))
    }

    /// The `k` eigenpairs of largest eigenvalue, in decreasing order, unit eigenvectors with
    /// their largest-magnitude component positive (as [`Gram::eigen`]), computed without the
    /// full decomposition when `k` is small (block Krylov, by the module's private `top_eigen`);
    /// small matrices (`d ≤ 64`) and large `k` (`4k > d`) go to [`Gram::eigen`].
    ///
    /// # Errors
    ///
    /// [`SpectralError::BadK`] unless `1 ≤ k ≤ d`; [`SpectralError::NoConvergence`].
    pub fn top_eigen(&self, k: usize) -> Result<(Vec<f64>, Vec<Vec<f64>>), SpectralError> {
        let d = self.d();
        if k == 0 || k > d {
            return Err(SpectralError::BadK { k, d });
        }
        if d > 64
            && 4 * k <= d
            && let Some(out) = top_eigen(&self.matrix, k)
        {
            return Ok(out);
        }
        let (mut values, mut vectors) = self.eigen()?;
        values.truncate(k);
        vectors.truncate(k);
        Ok((values, vectors))
    }

    /// The client's upload: its top-`k` eigenpairs (see [`Gram::top_eigen`]), in `f32`.
    ///
    /// # Errors
    ///
    /// [`SpectralError::BadK`] unless `1 ≤ k ≤ d`; [`SpectralError::NoConvergence`].
    pub fn signature(&self, k: usize) -> Result<Signature, SpectralError> {
        let d = self.d();
        let (values, vectors) = self.top_eigen(k)?;
        Ok(Signature {
            k,
            d,
            vectors: vectors[..k]
                .iter()
                .flat_map(|v| v.iter().map(|&x| x as f32))
                .collect(),
            values: values[..k].iter().map(|&x| x as f32).collect(),
        })
    }

    /// `G v` for a vector of length `d` (panics on another length).
    pub fn apply(&self, v: &[f64]) -> Vec<f64> {
        assert_eq!(v.len(), self.d(), "vector length must be d");
        let v = nalgebra::DVector::from_column_slice(v);
        (&self.matrix * v).iter().copied().collect()
    }
}

/// Relative residual below which a Ritz pair counts as converged in [`Gram::top_eigen`]:
/// `‖G v − θ v‖ ≤ TOP_EIGEN_TOL · θ₁`.
pub const TOP_EIGEN_TOL: f64 = 1e-10;

/// The `k` leading eigenpairs of a symmetric positive semi-definite `d × d` matrix by block
/// Krylov iteration with Rayleigh–Ritz, or `None` when it does not converge before the basis
/// would span the whole space (the caller then runs the full decomposition).
///
/// The basis starts from a fixed pseudo-random block of `b = k + 2` vectors (deterministic: the
/// same matrix always gives the same signature) and grows by `G` times the newest block, each new
/// vector orthogonalised twice against the basis (classical Gram–Schmidt, repeated); a vector
/// that vanishes in the process (an invariant subspace was reached, as for a client with fewer
/// samples than the basis has vectors) is replaced by a fresh pseudo-random one. With the basis
/// `Q` and `W = G Q`, the Rayleigh–Ritz step takes the eigenpairs `(θ, y)` of `Qᵀ W` and accepts
/// the `k` largest once every residual `‖W y − θ Q y‖ ≤ TOP_EIGEN_TOL · θ₁`; it runs when the
/// basis reaches `4b` vectors, then each time it has grown by half.
///
/// Accuracy, against the full decomposition: a residual `r` bounds the eigenvalue error by `r`
/// (by `r² / gap` for an isolated one) and the eigenvector's angle to its true one by
/// `r / gap`, where `gap` is the distance to the rest of the spectrum (Davis–Kahan). So
/// eigenvalues agree within `1e-10 · λ₁`, and eigenvectors within `1e-10 · λ₁ / gap` before the
/// `f32` rounding of the upload; where eigenvalues are (nearly) repeated only their invariant
/// subspace is defined, and it is the subspace that agrees. A block of `k + 2 ≥ k` vectors
/// finds every copy of an eigenvalue repeated up to `k` times. Signs follow [`Gram::eigen`].
///
/// Cost for FMNIST clients (`d = 784`, `k ≤ 10`): a few hundred matrix-vector products and the
/// eigen-decomposition of a small matrix, instead of the `O(d³)` full one.
fn top_eigen(g: &DMatrix<f64>, k: usize) -> Option<(Vec<f64>, Vec<Vec<f64>>)> {
    let d = g.nrows();
    let b = k + 2;
    if d == 0 || b > d {
        return None;
    }
    let scale = g.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    if scale == 0.0 {
        // The zero matrix: every vector is an eigenvector; let the full solver answer.
        return None;
    }
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut random = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
    };
    let mut q: Vec<f64> = Vec::with_capacity(d * 8 * b);
    let mut w: Vec<f64> = Vec::with_capacity(d * 8 * b);
    let mut m = 0usize;
    let mut block: Vec<Vec<f64>> = (0..b).map(|_| (0..d).map(|_| random()).collect()).collect();
    let mut next_check = 4 * b;
    while m < d {
        // Orthonormalise the block against the basis and itself.
        let first = m;
        for mut v in std::mem::take(&mut block) {
            let mut tries = 0;
            loop {
                let before = v.iter().map(|x| x * x).sum::<f64>().sqrt();
                for _ in 0..2 {
                    for j in 0..m {
                        let qj = &q[j * d..(j + 1) * d];
                        let c: f64 = qj.iter().zip(&v).map(|(a, b)| a * b).sum();
                        v.iter_mut().zip(qj).for_each(|(x, a)| *x -= c * a);
                    }
                }
                let after = v.iter().map(|x| x * x).sum::<f64>().sqrt();
                if after > 1e-8 * before && after > 0.0 {
                    q.extend(v.iter().map(|x| x / after));
                    m += 1;
                    break;
                }
                tries += 1;
                if tries > 3 || m >= d {
                    break;
                }
                v = (0..d).map(|_| random()).collect();
            }
            if m >= d {
                break;
            }
        }
        if m == first {
            return None;
        }
        // W for the new vectors, in one product; they are the next block too.
        let new = nalgebra::DMatrixView::from_slice(&q[first * d..m * d], d, m - first);
        let gw = g * new;
        w.extend(gw.iter());
        block = gw
            .column_iter()
            .map(|c| c.iter().copied().collect())
            .collect();
        if m >= next_check.min(d) {
            if let Some(out) = rayleigh_ritz(&q, &w, d, m, k) {
                return Some(out);
            }
            next_check = m + m / 2;
        }
    }
    None
}

/// Rayleigh–Ritz on the orthonormal basis `q` (`m` columns of length `d`, column-major) with
/// `w = G q`: the `k` largest Ritz pairs, if all have converged (see [`top_eigen`]).
fn rayleigh_ritz(
    q: &[f64],
    w: &[f64],
    d: usize,
    m: usize,
    k: usize,
) -> Option<(Vec<f64>, Vec<Vec<f64>>)> {
    let qm = nalgebra::DMatrixView::from_slice(&q[..d * m], d, m);
    let wm = nalgebra::DMatrixView::from_slice(&w[..d * m], d, m);
    let h = qm.transpose() * wm;
    let h = (&h + h.transpose()) * 0.5;
    let eig = nalgebra::SymmetricEigen::try_new(h, f64::EPSILON, 1000 * m + 10_000)?;
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| eig.eigenvalues[b].total_cmp(&eig.eigenvalues[a]));
    let top = eig.eigenvalues[order[0]].abs().max(f64::MIN_POSITIVE);
    let mut values = Vec::with_capacity(k);
    let mut vectors = Vec::with_capacity(k);
    for &a in &order[..k] {
        let theta = eig.eigenvalues[a];
        let y = eig.eigenvectors.column(a);
        let v = qm * y;
        let r = wm * y - &v * theta;
        if r.norm() > TOP_EIGEN_TOL * top {
            return None;
        }
        let norm = v.norm();
        let mut v: Vec<f64> = v.iter().map(|x| x / norm).collect();
        fix_sign(&mut v);
        values.push(theta);
        vectors.push(v);
    }
    Some((values, vectors))
}

/// Flips `v` so that its largest-magnitude component (the first one on ties) is positive.
fn fix_sign(v: &mut [f64]) {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if x.abs() > v[best].abs() {
            best = i;
        }
    }
    if v.get(best).is_some_and(|&x| x < 0.0) {
        v.iter_mut().for_each(|x| *x = -*x);
    }
}

/// What a client uploads: its `k` leading eigenvectors (`k × d`, row-major, unit length) and
/// eigenvalues (decreasing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Signature {
    /// Number of eigenpairs.
    pub k: usize,
    /// Dimension of the feature space.
    pub d: usize,
    /// `k × d` floats, eigenvector `m` at `m·d .. (m + 1)·d`.
    pub vectors: Vec<f32>,
    /// `k` eigenvalues, largest first.
    pub values: Vec<f32>,
}

impl Signature {
    /// Checks the lengths, `k ≥ 1`, `d ≥ 1`, that everything is finite, that the eigenvalues are
    /// not negative beyond rounding (≥ −1e-3 · λ₁) and that no eigenvector is zero.
    ///
    /// # Errors
    ///
    /// The reason, as text.
    pub fn validate(&self) -> Result<(), String> {
        if self.k == 0 || self.d == 0 {
            return Err(format!("k = {} and d = {} must be ≥ 1", self.k, self.d));
        }
        if self.vectors.len() != self.k * self.d || self.values.len() != self.k {
            return Err(format!(
                "{} vector floats and {} eigenvalues for k = {}, d = {}",
                self.vectors.len(),
                self.values.len(),
                self.k,
                self.d
            ));
        }
        if let Some(i) = self.vectors.iter().position(|v| !v.is_finite()) {
            return Err(format!("eigenvector float {i} is not finite"));
        }
        if let Some(i) = self.values.iter().position(|v| !v.is_finite()) {
            return Err(format!("eigenvalue {i} is not finite"));
        }
        let top = self.values.iter().fold(0f32, |a, &b| a.max(b.abs()));
        if let Some(i) = self.values.iter().position(|&v| v < -1e-3 * top) {
            return Err(format!("eigenvalue {i} = {} is negative", self.values[i]));
        }
        for m in 0..self.k {
            if self.vector(m).iter().all(|&x| x == 0.0) {
                return Err(format!("eigenvector {m} is zero"));
            }
        }
        Ok(())
    }

    /// Eigenvector `m` (`m < k`).
    pub fn vector(&self, m: usize) -> &[f32] {
        &self.vectors[m * self.d..(m + 1) * self.d]
    }

    /// The first `k` eigenpairs only (`k` is clamped to `1..=self.k`).
    pub fn truncated(&self, k: usize) -> Signature {
        let k = k.clamp(1, self.k);
        Signature {
            k,
            d: self.d,
            vectors: self.vectors[..k * self.d].to_vec(),
            values: self.values[..k].to_vec(),
        }
    }

    /// The signature as the receiver sees it after an upload in `encoding`: `f16` rounds every
    /// float to the nearest binary16 value, `f32` changes nothing.
    pub fn rounded(&self, encoding: Encoding) -> Signature {
        let round = |v: &[f32]| -> Vec<f32> {
            match encoding {
                Encoding::F32 => v.to_vec(),
                Encoding::F16 => v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect(),
            }
        };
        Signature {
            k: self.k,
            d: self.d,
            vectors: round(&self.vectors),
            values: round(&self.values),
        }
    }

    /// Bytes of the payload floats (`k·d + k` elements) in `encoding`, without any framing.
    pub fn payload_bytes(&self, encoding: Encoding) -> usize {
        (self.k * self.d + self.k) * encoding.width()
    }

    /// The eigenvectors renormalised to unit length, widened to `f64`.
    fn unit_vectors(&self) -> Vec<Vec<f64>> {
        (0..self.k)
            .map(|m| {
                let v: Vec<f64> = self.vector(m).iter().map(|&x| f64::from(x)).collect();
                let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
                v.into_iter().map(|x| x / norm).collect()
            })
            .collect()
    }
}

impl Signature {
    /// The upload of this signature in `encoding` (`n = 1`).
    pub fn to_wire(&self, encoding: Encoding) -> Eigenpairs {
        Eigenpairs::encode(self.k, self.d, &self.values, &self.vectors, encoding)
    }

    /// A received upload of `k` eigenpairs in dimension `d`, checked: shape, finite values, and
    /// [`Signature::validate`].
    ///
    /// # Errors
    ///
    /// [`ProtocolError::EigenShape`], [`ProtocolError::TensorLength`],
    /// [`ProtocolError::NotFinite`], [`ProtocolError::BadSignature`].
    pub fn from_wire(wire: &Eigenpairs, k: usize, d: usize) -> Result<Signature, ProtocolError> {
        let mut one = from_relay(wire, 1, k, d)?;
        Ok(one.remove(0))
    }
}

/// The relay of every client's signature (`all[j]` at position `j`; all of one `k` and `d`) as
/// one broadcast message. The values go as `f16` when every one of them is a binary16 value
/// already (the clients uploaded in `f16`), which halves the relay and loses nothing; otherwise
/// as `f32`, which is exact.
///
/// # Errors
///
/// [`SpectralError::Empty`], [`SpectralError::BadSignature`], [`SpectralError::Mismatch`].
pub fn relay(all: &[Signature]) -> Result<Eigenpairs, SpectralError> {
    let first = all.first().ok_or(SpectralError::Empty)?;
    let (k, d) = (first.k, first.d);
    check_signatures(all, k, d)?;
    let f16_exact = all.iter().all(|s| s.rounded(Encoding::F16) == *s);
    let encoding = if f16_exact {
        Encoding::F16
    } else {
        Encoding::F32
    };
    let values: Vec<f32> = all.iter().flat_map(|s| s.values.iter().copied()).collect();
    let vectors: Vec<f32> = all.iter().flat_map(|s| s.vectors.iter().copied()).collect();
    Ok(Eigenpairs::encode(k, d, &values, &vectors, encoding))
}

/// The `n` signatures of a received relay (or, with `n = 1`, of an upload), each checked like
/// [`Signature::from_wire`].
///
/// # Errors
///
/// As [`Signature::from_wire`]; [`ProtocolError::BadSignature`] names the bad signature's
/// position.
pub fn from_relay(
    wire: &Eigenpairs,
    n: usize,
    k: usize,
    d: usize,
) -> Result<Vec<Signature>, ProtocolError> {
    let (values, vectors) = wire.decode(n, k, d)?;
    (0..n)
        .map(|index| {
            let s = Signature {
                k,
                d,
                vectors: vectors[index * k * d..(index + 1) * k * d].to_vec(),
                values: values[index * k..(index + 1) * k].to_vec(),
            };
            s.validate()
                .map_err(|reason| ProtocolError::BadSignature { index, reason })?;
            Ok(s)
        })
        .collect()
}

/// The signature of a client's training data: [`Gram::from_local_data`] then
/// [`Gram::signature`].
///
/// # Errors
///
/// As those two.
pub fn signature_of(data: &LocalData, k: usize) -> Result<Signature, SpectralError> {
    Gram::from_local_data(data)?.signature(k)
}

/// Eq. (3)-(4) for one pair: the geometric mean of `min/max(λₘ, λ̂ₘ)`, both floored at [`TINY`].
fn geometric_ratio(own: impl Iterator<Item = f64>, estimates: impl Iterator<Item = f64>) -> f64 {
    let mut sum = 0.0;
    let mut k = 0usize;
    for (a, b) in own.zip(estimates) {
        let (a, b) = (a.max(TINY), b.max(TINY));
        sum += (a.min(b) / a.max(b)).ln();
        k += 1;
    }
    if k == 0 { 1.0 } else { (sum / k as f64).exp() }
}

fn check_signatures<'a>(
    signatures: impl IntoIterator<Item = &'a Signature>,
    k: usize,
    d: usize,
) -> Result<(), SpectralError> {
    for (index, s) in signatures.into_iter().enumerate() {
        s.validate()
            .map_err(|reason| SpectralError::BadSignature { index, reason })?;
        if s.k != k || s.d != d {
            return Err(SpectralError::Mismatch {
                index,
                k: s.k,
                d: s.d,
                expected_k: k,
                expected_d: d,
            });
        }
    }
    Ok(())
}

/// The paper's relevance row of one client (eq. 2-4): `r(i, j)` for every `j`, computed by client
/// `i` from its exact Gram matrix `gram`, its own eigenvalues `own.values` and the relayed
/// signatures `all` (its own included, at its own position, giving `r(i, i) = 1` up to rounding).
///
/// All signatures must have `own`'s `k` and `d = gram.d()`. The `N·k` received vectors are
/// multiplied by `Gᵢ` in one matrix product (`N·k·d²` multiply-adds).
///
/// # Errors
///
/// [`SpectralError::BadSignature`] / [`SpectralError::Mismatch`].
pub fn client_row(
    gram: &Gram,
    own: &Signature,
    all: &[Signature],
    estimate: Estimate,
) -> Result<Vec<f64>, SpectralError> {
    let (k, d) = (own.k, gram.d());
    check_signatures(std::slice::from_ref(own), k, d)?;
    check_signatures(all, k, d)?;
    if all.is_empty() {
        return Ok(Vec::new());
    }
    // V: d × (N·k), column j·k + m is vₘ⁽ʲ⁾ (unit length).
    let mut v = DMatrix::<f64>::zeros(d, all.len() * k);
    for (j, s) in all.iter().enumerate() {
        for (m, u) in s.unit_vectors().into_iter().enumerate() {
            v.column_mut(j * k + m).copy_from_slice(&u);
        }
    }
    let gv = &gram.matrix * &v;
    let own_values: Vec<f64> = own.values.iter().map(|&x| f64::from(x)).collect();
    Ok((0..all.len())
        .map(|j| {
            let estimates = (0..k).map(|m| {
                let col = j * k + m;
                match estimate {
                    Estimate::Norm => gv.column(col).norm(),
                    Estimate::Rayleigh => gv.column(col).dot(&v.column(col)),
                }
            });
            geometric_ratio(own_values.iter().copied(), estimates)
        })
        .collect())
}

/// The server-side relevance rows: every `r(i, j)` from the uploads alone, with `Gᵢ ≈ Vᵢ Λᵢ Vᵢᵀ`
/// (see the module docs), in tiles of batched `f32` matrix products on `device`.
///
/// Both directions of a pair come from the same dot products `cₐₘ = vₐ⁽ⁱ⁾ · vₘ⁽ʲ⁾`:
/// `λ̂ₘ⁽ʲ⁾ = sqrt(Σₐ λₐ⁽ⁱ⁾² cₐₘ²)` for `r(i, j)` and `λ̂ₐ⁽ⁱ⁾ = sqrt(Σₘ λₘ⁽ʲ⁾² cₐₘ²)` for `r(j, i)`
/// (`Σ λ c²` for [`Estimate::Rayleigh`]), then eq. (3)-(4) elementwise. The clients are cut
/// into blocks of `B`, and block I's vectors are multiplied with those of I itself and of each
/// block after it (`Bk × Bk` tiles), so the `N·k × N·k` products are computed once per pair,
/// the upper half of the matrix. `B` keeps a tile under 2²⁰ elements (204 clients at `k = 5`).
/// On flex, whose operations run on the calling thread, the tiles are spread over all cores;
/// each tile is computed alike on any thread, so the rows do not depend on the number of cores.
/// All signatures must share `k` and `d`.
///
/// # Errors
///
/// [`SpectralError::BadSignature`] / [`SpectralError::Mismatch`].
pub fn server_rows(
    signatures: &[Signature],
    estimate: Estimate,
    device: &Device,
) -> Result<Vec<Vec<f64>>, SpectralError> {
    let k = signatures.first().map_or(1, |s| s.k.max(1));
    let block = (SERVER_TILE_ELEMS.isqrt() / k).clamp(1, signatures.len().max(1));
    server_rows_in_blocks(signatures, estimate, device, block, tile_threads(device))
}

/// [`server_rows`] with blocks of `block` clients (tiles of `block × block` clients) on `threads`
/// threads.
fn server_rows_in_blocks(
    signatures: &[Signature],
    estimate: Estimate,
    device: &Device,
    block: usize,
    threads: usize,
) -> Result<Vec<Vec<f64>>, SpectralError> {
    let n = signatures.len();
    let all: Vec<&Signature> = signatures.iter().collect();
    let Some(uploads) = Uploads::new(&all, estimate, device)? else {
        return Ok(Vec::new());
    };
    let tiles: Vec<(usize, usize)> = (0..n)
        .step_by(block)
        .flat_map(|i0| (i0..n).step_by(block).map(move |j0| (i0, j0)))
        .collect();
    let rows = Mutex::new(vec![vec![0.0; n]; n]);
    par_map_on(threads, &tiles, |&(i0, j0)| {
        let (is, js) = (i0..(i0 + block).min(n), j0..(j0 + block).min(n));
        let c = js.len();
        // Inside a diagonal tile both directions of every pair are in `r_ij`.
        let (r_ij, r_ji) = uploads.tile(is, js, j0 != i0);
        let mut rows = rows.lock().unwrap_or_else(PoisonError::into_inner);
        for (i, r) in r_ij.chunks_exact(c).enumerate() {
            rows[i0 + i][j0..j0 + c].copy_from_slice(r);
        }
        for (i, col) in r_ji.chunks_exact(c).enumerate() {
            for (j, &v) in col.iter().enumerate() {
                rows[j0 + j][i0 + i] = v;
            }
        }
    });
    Ok(rows.into_inner().unwrap_or_else(PoisonError::into_inner))
}

/// One client's relevance to each of `others` and theirs to it, from the uploads alone:
/// `(r(x, j), r(j, x))` for every `j` of `others`, `x` being `newcomer`. The same estimate as
/// [`server_rows`] (its row and column of `x` when `x` is appended to `others`), without the
/// `N²` pairs among `others`: a newcomer placed against `N` clustered clients costs `N` pairs.
///
/// # Errors
///
/// [`SpectralError::BadSignature`] / [`SpectralError::Mismatch`] (indices: `others`, then
/// `newcomer` at `others.len()`).
pub fn server_row_and_column(
    others: &[Signature],
    newcomer: &Signature,
    estimate: Estimate,
    device: &Device,
) -> Result<(Vec<f64>, Vec<f64>), SpectralError> {
    let n = others.len();
    // The newcomer after the others, by reference: the signatures are not copied.
    let all: Vec<&Signature> = others.iter().chain([newcomer]).collect();
    let k = newcomer.k.max(1);
    // Tiles of one client against `block` clients: `k × block·k` products.
    let block = (SERVER_TILE_ELEMS / (k * k)).clamp(1, n.max(1));
    let Some(uploads) = Uploads::new(&all, estimate, device)? else {
        return Ok((Vec::new(), Vec::new()));
    };
    let starts: Vec<usize> = (0..n).step_by(block).collect();
    let parts = par_map_on(tile_threads(device), &starts, |&j0| {
        uploads.tile(n..n + 1, j0..(j0 + block).min(n), true)
    });
    let (row, column): (Vec<_>, Vec<_>) = parts.into_iter().unzip();
    Ok((row.concat(), column.concat()))
}

/// Threads for the tiles of the server-side relevance: every core on flex (its operations run
/// on the calling thread), one on the other backends (their device or library is the parallel
/// part).
fn tile_threads(device: &Device) -> usize {
    if *device == Device::flex() {
        cores()
    } else {
        1
    }
}

/// The uploads on the device, for the tiles of [`server_rows`] and [`server_row_and_column`]:
/// every unit eigenvector as a row of `all` (`N·k × d`), the eigenvalues (floored at [`TINY`])
/// and their weights in the sums (`λ²` for [`Estimate::Norm`], `λ` for [`Estimate::Rayleigh`]),
/// `N × k` each.
struct Uploads {
    all: Tensor<2>,
    values: Tensor<2>,
    weights: Tensor<2>,
    k: usize,
    estimate: Estimate,
}

impl Uploads {
    /// `None` for no signatures.
    fn new(
        signatures: &[&Signature],
        estimate: Estimate,
        device: &Device,
    ) -> Result<Option<Uploads>, SpectralError> {
        let Some(first) = signatures.first() else {
            return Ok(None);
        };
        let (k, d, n) = (first.k, first.d, signatures.len());
        check_signatures(signatures.iter().copied(), k, d)?;
        let mut flat = Vec::with_capacity(n * k * d);
        for s in signatures {
            for u in s.unit_vectors() {
                flat.extend(u.into_iter().map(|x| x as f32));
            }
        }
        let values: Vec<f32> = signatures
            .iter()
            .flat_map(|s| s.values.iter().map(|&x| (f64::from(x).max(TINY)) as f32))
            .collect();
        let power = match estimate {
            Estimate::Norm => 2,
            Estimate::Rayleigh => 1,
        };
        let weights: Vec<f32> = values.iter().map(|&x| x.powi(power)).collect();
        Ok(Some(Uploads {
            all: Tensor::from_data(TensorData::new(flat, [n * k, d]), device),
            values: Tensor::from_data(TensorData::new(values, [n, k]), device),
            weights: Tensor::from_data(TensorData::new(weights, [n, k]), device),
            k,
            estimate,
        }))
    }

    /// The tile of clients `is` against clients `js`: `r(i, j)` (row-major, `|is| × |js|`) and,
    /// when `both`, `r(j, i)` at the same positions (empty otherwise).
    fn tile(&self, is: Range<usize>, js: Range<usize>, both: bool) -> (Vec<f64>, Vec<f64>) {
        let (k, b, c) = (self.k, is.len(), js.len());
        let vb = self.all.clone().narrow(0, is.start * k, b * k);
        let vc = self.all.clone().narrow(0, js.start * k, c * k);
        // c2[i, a, j, m] = (vₐ⁽ⁱ⁾ · vₘ⁽ʲ⁾)²
        let c2 = vb.matmul(vc.transpose()).square().reshape([b, k, c, k]);
        // r(i, j): Gᵢ on j's vectors, the sum over a weighted by i's eigenvalues.
        let w_i = self
            .weights
            .clone()
            .narrow(0, is.start, b)
            .reshape([b, k, 1, 1]);
        let own_i = self
            .values
            .clone()
            .narrow(0, is.start, b)
            .reshape([b, 1, k]);
        let sums = (c2.clone() * w_i.expand([b, k, c, k]))
            .sum_dim(1)
            .reshape([b, c, k]);
        let r_ij = read(self.relevance(own_i.expand([b, c, k]), sums, 2));
        if !both {
            return (r_ij, Vec::new());
        }
        // r(j, i): Gⱼ on i's vectors, the sum over m weighted by j's eigenvalues.
        let w_j = self
            .weights
            .clone()
            .narrow(0, js.start, c)
            .reshape([1, 1, c, k])
            .expand([b, k, c, k]);
        let own_j = self
            .values
            .clone()
            .narrow(0, js.start, c)
            .transpose()
            .reshape([1, k, c])
            .expand([b, k, c]);
        let sums = (c2 * w_j).sum_dim(3).reshape([b, k, c]);
        (r_ij, read(self.relevance(own_j, sums, 1)))
    }

    /// Eq. (3)-(4): the geometric mean over `axis` of min/max(λ, λ̂), λ̂ from the weighted sums.
    fn relevance(&self, own: Tensor<3>, sums: Tensor<3>, axis: usize) -> Tensor<3> {
        let est = match self.estimate {
            Estimate::Norm => sums.sqrt(),
            Estimate::Rayleigh => sums,
        }
        .clamp_min(TINY as f32);
        let ratio = own.clone().min_pair(est.clone()) / own.max_pair(est);
        ratio.log().mean_dim(axis).exp()
    }
}

/// A tensor's values, row-major, as `f64`.
fn read(t: Tensor<3>) -> Vec<f64> {
    t.into_data().iter::<f32>().map(f64::from).collect()
}

fn check_rows(rows: &[Vec<f64>]) -> Result<usize, SpectralError> {
    let n = rows.len();
    for (i, row) in rows.iter().enumerate() {
        if row.len() != n {
            return Err(SpectralError::BadRows(format!(
                "row {i} has {} entries, expected {n}",
                row.len()
            )));
        }
        if let Some(j) = row
            .iter()
            .position(|v| !v.is_finite() || !(-1e-6..=1.0 + 1e-6).contains(v))
        {
            return Err(SpectralError::BadRows(format!(
                "r({i}, {j}) = {} is not in [0, 1]",
                row[j]
            )));
        }
    }
    Ok(n)
}

/// Eq. (5): `R(i, j) = (r(i, j) + r(j, i)) / 2` with `R(i, i) = 1`; exactly symmetric.
///
/// # Errors
///
/// [`SpectralError::BadRows`] unless `rows` is square with finite values in `[0, 1]` (a rounding
/// slack of 1e-6 is accepted and clamped).
pub fn symmetrise(rows: &[Vec<f64>]) -> Result<Vec<Vec<f64>>, SpectralError> {
    let n = check_rows(rows)?;
    let mut out = vec![vec![1.0; n]; n];
    for i in 0..n {
        for j in i + 1..n {
            let v = ((rows[i][j] + rows[j][i]) / 2.0).clamp(0.0, 1.0);
            out[i][j] = v;
            out[j][i] = v;
        }
    }
    Ok(out)
}

/// The distance `1 − R` of a symmetrised relevance matrix (its upper triangle is read), in
/// scipy's condensed layout.
///
/// # Errors
///
/// [`SpectralError::BadRows`] for a non-square matrix or values outside `[0, 1]`.
pub fn distances(relevance: &[Vec<f64>]) -> Result<CondensedMatrix, SpectralError> {
    let n = check_rows(relevance)?;
    let mut data = Vec::with_capacity(n * n.saturating_sub(1) / 2);
    for (i, row) in relevance.iter().enumerate() {
        data.extend(row[i + 1..].iter().map(|r| (1.0 - r).max(0.0)));
    }
    if n == 0 {
        return Ok(CondensedMatrix::empty());
    }
    Ok(CondensedMatrix::from_condensed(data)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimate_parse() {
        assert_eq!("norm".parse::<Estimate>().unwrap(), Estimate::Norm);
        assert_eq!("rayleigh".parse::<Estimate>().unwrap(), Estimate::Rayleigh);
        assert!("x".parse::<Estimate>().is_err());
        assert_eq!(Estimate::default().to_string(), "norm");
    }

    #[test]
    fn sign_is_fixed() {
        let mut v = vec![0.1, -0.9, 0.3];
        fix_sign(&mut v);
        assert_eq!(v, vec![-0.1, 0.9, -0.3]);
    }

    /// The blocks only change which products are shared: any block size gives the paper's rows
    /// (`client_row`, from each client's exact Gram matrix: with k = d the server's `Vᵢ Λᵢ Vᵢᵀ` is
    /// that matrix), in both directions of every pair.
    #[test]
    fn server_rows_in_any_blocks_and_threads_are_the_papers_rows_at_k_equal_d() {
        let (d, clients) = (4, 7);
        // 30 samples per client; client c stretches its coordinates by its own factors, so that
        // r(i, j) and r(j, i) differ.
        let features = |c: usize| -> Vec<f32> {
            (0..30 * d)
                .map(|i| {
                    let base = ((i * 37 + c * 11) % 17) as f32 / 17.0;
                    base * (1.0 + ((c + 1) * (i % d + 1) % 5) as f32)
                })
                .collect()
        };
        let grams: Vec<Gram> = (0..clients)
            .map(|c| Gram::from_features(&features(c), d).unwrap())
            .collect();
        let sigs: Vec<Signature> = grams.iter().map(|g| g.signature(d).unwrap()).collect();
        let device = Device::flex();
        for est in [Estimate::Norm, Estimate::Rayleigh] {
            let paper: Vec<Vec<f64>> = grams
                .iter()
                .zip(&sigs)
                .map(|(g, s)| client_row(g, s, &sigs, est).unwrap())
                .collect();
            let asymmetric = (0..clients)
                .flat_map(|i| (0..clients).map(move |j| (i, j)))
                .any(|(i, j)| (paper[i][j] - paper[j][i]).abs() > 1e-2);
            assert!(
                asymmetric,
                "the case should tell r(i, j) from r(j, i): {paper:?}"
            );
            for block in [1, 2, 3, 6, clients] {
                let rows = server_rows_in_blocks(&sigs, est, &device, block, 1).unwrap();
                for (i, (row, want)) in rows.iter().zip(&paper).enumerate() {
                    for (j, (v, w)) in row.iter().zip(want).enumerate() {
                        assert!(
                            (v - w).abs() < 1e-4,
                            "{est}, blocks of {block}: r({i}, {j}) = {v}, the paper's {w}"
                        );
                    }
                }
                // The tiles on several threads: the same values, bit for bit.
                let threaded = server_rows_in_blocks(&sigs, est, &device, block, 3).unwrap();
                assert_eq!(threaded, rows, "{est}, blocks of {block} on 3 threads");
            }
            // The last client as a newcomer: its row and column of the paper's matrix.
            let x = clients - 1;
            let (row, column) = server_row_and_column(&sigs[..x], &sigs[x], est, &device).unwrap();
            assert_eq!((row.len(), column.len()), (x, x));
            for j in 0..x {
                for (v, w, what) in [
                    (row[j], paper[x][j], "r(x, j)"),
                    (column[j], paper[j][x], "r(j, x)"),
                ] {
                    assert!(
                        (v - w).abs() < 1e-4,
                        "{est}: {what} for j = {j}: {v}, the paper's {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn geometric_ratio_floors() {
        assert_eq!(geometric_ratio([0.0].into_iter(), [0.0].into_iter()), 1.0);
        assert!(
            (geometric_ratio([1.0, 4.0].into_iter(), [4.0, 1.0].into_iter()) - 0.25).abs() < 1e-12
        );
    }
}
