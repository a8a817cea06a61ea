//! PACFL's data signature and proximity (Vahidian et al., AAAI 2023; the method is in
//! [`crate::algorithms::pacfl`]): the leading left singular vectors of each of a client's classes
//! ([`client_subspace`]), and the angle between two clients' subspaces ([`proximity`]) that the
//! server's HC cuts.
//!
//! As PACFL's code (`main_pacfl.py`) forms it: for each label the client holds (in increasing
//! order), the matrix `X_l` whose columns are that label's images (`d` pixels each) gives its top
//! `p` left singular vectors (fewer when the label has fewer than `p` images), and the client's
//! signature `U` is their columns side by side, `d × (p · labels)`. The left singular vectors of
//! `X_l` are the eigenvectors of `X_l X_lᵀ`, the Gram matrix of [`crate::cluster::spectral`] of
//! that label's images (up to the factor `1/n`), so they come from [`Gram::top_eigen`]; their
//! signs are fixed as there (largest-magnitude component positive; an SVD leaves them free).
//! Pixels are scaled to `[0, 1]` as training sees them; a scale does not change `U`.
//!
//! Two proximities ([`Angle`]):
//! - [`Angle::Entries`], PACFL's code (`calculating_adjacency`): the smallest angle between one
//!   column of `U_i` and one of `U_j`, `min_ab arccos(clip(U_iᵀ U_j, −1, 1))_ab` in degrees;
//! - [`Angle::Principal`], the paper's words: the smallest principal angle between the two
//!   spans, `arccos σ_max(Q_iᵀ Q_j)` in degrees with `Q` an orthonormal basis of each span. It does
//!   not depend on the columns' signs, and is never above the first (`σ_max ≥` every entry of
//!   `Q_iᵀ Q_j`, and the span of `U` holds each of its columns).

use std::fmt;
use std::str::FromStr;

use nalgebra::DMatrix;
use serde::{Deserialize, Serialize};

use crate::cluster::distance::CondensedMatrix;
use crate::cluster::spectral::{Gram, SpectralError};
use crate::train::{LocalData, to_unit};

/// The number of singular vectors per class in FedClust's runs of PACFL (`n_basis`).
pub const DEFAULT_BASIS: usize = 3;

/// How two subspaces' proximity is measured (`--pacfl-angle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Angle {
    /// PACFL's code: the smallest angle between a column of one and a column of the other.
    #[default]
    Entries,
    /// The smallest principal angle between the two spans.
    Principal,
}

impl fmt::Display for Angle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Angle::Entries => "entries",
            Angle::Principal => "principal",
        })
    }
}

impl FromStr for Angle {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "entries" => Ok(Angle::Entries),
            "principal" => Ok(Angle::Principal),
            _ => Err(format!(
                "unknown angle {s:?} (expected entries or principal)"
            )),
        }
    }
}

/// A client's PACFL signature: unit columns of dimension `d`, each with the label whose images
/// it comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subspace {
    /// Pixels of one image.
    pub d: usize,
    /// The label of each column.
    pub labels: Vec<u8>,
    /// The columns, one after the other (`labels.len() × d` floats).
    pub columns: Vec<f32>,
}

impl Subspace {
    /// Number of columns.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// True without columns.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Column `c`.
    pub fn column(&self, c: usize) -> &[f32] {
        &self.columns[c * self.d..(c + 1) * self.d]
    }

    /// A subspace from a network: `d` and the columns' count must agree, every value be finite
    /// and every column of length 1 within `1e-3` (then renormalised).
    ///
    /// # Errors
    ///
    /// What is wrong, in words.
    pub fn checked(d: usize, labels: Vec<u8>, mut columns: Vec<f32>) -> Result<Subspace, String> {
        if labels.is_empty() || columns.len() != labels.len() * d || d == 0 {
            return Err(format!(
                "{} floats for {} columns of {d}",
                columns.len(),
                labels.len()
            ));
        }
        if columns.iter().any(|v| !v.is_finite()) {
            return Err("a value is not finite".into());
        }
        for (c, col) in columns.chunks_exact_mut(d).enumerate() {
            let norm = col
                .iter()
                .map(|&v| f64::from(v).powi(2))
                .sum::<f64>()
                .sqrt();
            if (norm - 1.0).abs() > 1e-3 {
                return Err(format!("column {c} has length {norm}, not 1"));
            }
            col.iter_mut()
                .for_each(|v| *v = (f64::from(*v) / norm) as f32);
        }
        Ok(Subspace { d, labels, columns })
    }
}

/// PACFL's signature of a client's training data: for each label it holds, the top `p` left
/// singular vectors of its images (see the module docs).
///
/// # Errors
///
/// [`SpectralError::BadK`] for `p = 0`, [`SpectralError::BadFeatures`] without data,
/// [`SpectralError::Data`] when the images cannot be read, [`SpectralError::NoConvergence`].
pub fn client_subspace(data: &LocalData, p: usize) -> Result<Subspace, SpectralError> {
    let d = data.shape().pixels();
    if p == 0 {
        return Err(SpectralError::BadK { k: 0, d });
    }
    if data.is_empty() {
        return Err(SpectralError::BadFeatures { len: 0, d });
    }
    let pixels = data
        .pixels()
        .map_err(|e| SpectralError::Data(e.to_string()))?;
    let mut labels: Vec<u8> = data.labels.clone();
    labels.sort_unstable();
    labels.dedup();
    let mut out = Subspace {
        d,
        labels: Vec::new(),
        columns: Vec::new(),
    };
    for &label in &labels {
        let features: Vec<f32> = data
            .labels
            .iter()
            .zip(pixels.chunks_exact(d))
            .filter(|&(&l, _)| l == label)
            .flat_map(|(_, img)| img.iter().map(|&p| to_unit(p)))
            .collect();
        let n = features.len() / d;
        let gram = Gram::from_features(&features, d)?;
        let (values, vectors) = gram.top_eigen(p.min(n).min(d))?;
        // Directions of (numerically) zero variance are no singular vectors of X_l.
        let top = values.first().copied().unwrap_or(0.0);
        for (value, vector) in values.iter().zip(vectors) {
            if *value > top * 1e-12 && *value > 0.0 {
                out.labels.push(label);
                out.columns.extend(vector.iter().map(|&v| v as f32));
            }
        }
    }
    Ok(out)
}

/// The proximity of two subspaces, in degrees, as `angle` measures it (see the module docs).
pub fn proximity(a: &Subspace, b: &Subspace, angle: Angle) -> f64 {
    let dots = |x: &Subspace, y: &Subspace| {
        DMatrix::from_fn(x.len(), y.len(), |i, j| {
            x.column(i)
                .iter()
                .zip(y.column(j))
                .map(|(&u, &v)| f64::from(u) * f64::from(v))
                .sum::<f64>()
        })
    };
    let cosine = match angle {
        Angle::Entries => dots(a, b).iter().copied().fold(-1.0f64, f64::max),
        Angle::Principal => {
            let (qa, qb) = (orthonormal(a), orthonormal(b));
            if qa.is_empty() || qb.is_empty() {
                0.0
            } else {
                dots(&qa, &qb).singular_values().max()
            }
        }
    };
    cosine.clamp(-1.0, 1.0).acos().to_degrees()
}

/// An orthonormal basis of `s`'s span (modified Gram–Schmidt, twice; columns that add nothing
/// are dropped).
fn orthonormal(s: &Subspace) -> Subspace {
    let mut q: Vec<Vec<f64>> = Vec::with_capacity(s.len());
    for c in 0..s.len() {
        let mut v: Vec<f64> = s.column(c).iter().map(|&x| f64::from(x)).collect();
        let before = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        for _ in 0..2 {
            for u in &q {
                let dot: f64 = u.iter().zip(&v).map(|(a, b)| a * b).sum();
                v.iter_mut().zip(u).for_each(|(x, a)| *x -= dot * a);
            }
        }
        let after = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        if after > 1e-6 * before {
            q.push(v.into_iter().map(|x| x / after).collect());
        }
    }
    Subspace {
        d: s.d,
        labels: vec![0; q.len()],
        columns: q.into_iter().flatten().map(|x| x as f32).collect(),
    }
}

/// The proximity of every pair of `subspaces` (PACFL's adjacency matrix, zero diagonal), as the
/// condensed matrix that HC cuts.
///
/// # Errors
///
/// When the subspaces are not all of one dimension, or fewer than one.
pub fn proximity_matrix(subspaces: &[Subspace], angle: Angle) -> Result<CondensedMatrix, String> {
    let d = subspaces.first().ok_or("no subspaces")?.d;
    if let Some(i) = subspaces.iter().position(|s| s.d != d) {
        return Err(format!(
            "subspace {i} has dimension {}, not {d}",
            subspaces[i].d
        ));
    }
    // Each pair once (the principal angle's sums are not exactly symmetric in floats).
    let n = subspaces.len();
    let mut condensed = Vec::with_capacity(n * n.saturating_sub(1) / 2);
    for i in 0..n {
        for j in i + 1..n {
            condensed.push(proximity(&subspaces[i], &subspaces[j], angle));
        }
    }
    CondensedMatrix::from_condensed(condensed).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(d: usize, cols: &[&[f32]]) -> Subspace {
        Subspace::checked(d, vec![0; cols.len()], cols.concat()).unwrap()
    }

    /// Hand-computed angles: e₁ against (cos 30°, sin 30°) is 30° either way; against the span of
    /// {e₂, e₁}-ish columns the two measures differ as the module says.
    #[test]
    fn angles_by_hand() {
        let (c, s) = (30f32.to_radians().cos(), 30f32.to_radians().sin());
        let a = sub(3, &[&[1.0, 0.0, 0.0]]);
        let b = sub(3, &[&[c, s, 0.0]]);
        for angle in [Angle::Entries, Angle::Principal] {
            assert!((proximity(&a, &b, angle) - 30.0).abs() < 1e-4, "{angle}");
            assert!(proximity(&a, &a, angle).abs() < 0.1, "{angle}");
        }
        // b's two columns span the plane of e₁ and e₂ without holding e₁: entries see 45°,
        // the principal angle 0°.
        let h = std::f32::consts::FRAC_1_SQRT_2;
        let b = sub(3, &[&[h, h, 0.0], &[h, -h, 0.0]]);
        assert!((proximity(&a, &b, Angle::Entries) - 45.0).abs() < 1e-4);
        assert!(proximity(&a, &b, Angle::Principal).abs() < 0.1);
        // A flipped column: 180° for the entries' measure, 0° for the principal angle.
        let flipped = sub(3, &[&[-1.0, 0.0, 0.0]]);
        assert!((proximity(&a, &flipped, Angle::Entries) - 180.0).abs() < 1e-4);
        assert!(proximity(&a, &flipped, Angle::Principal).abs() < 0.1);
        assert!(Subspace::checked(3, vec![0], vec![1.0, 1.0, 0.0]).is_err());
        assert!(Subspace::checked(3, vec![0], vec![1.0, 0.0]).is_err());
    }

    /// Images of two labels, each a multiple of one pattern: each label's subspace is that
    /// pattern (one column: the other directions have no variance), labels in increasing order.
    #[test]
    fn one_direction_per_label_of_rank_one_data() {
        let d = crate::data::ImageShape::GREY_28.pixels();
        let pattern = |seed: usize| -> Vec<u8> { (0..d).map(|i| ((i * seed) % 7) as u8).collect() };
        let mut pixels = Vec::new();
        let mut labels = Vec::new();
        for (k, label) in [(2u8, 5usize), (1, 3), (2, 5), (1, 3), (2, 5)]
            .iter()
            .enumerate()
        {
            let scale = 1 + k as u8;
            pixels.extend(pattern(label.1).iter().map(|&p| p * scale));
            labels.push(label.0);
        }
        let data = LocalData::new(pixels, labels);
        let s = client_subspace(&data, 3).unwrap();
        assert_eq!(s.labels, [1, 2]);
        for (c, seed) in [(0, 3), (1, 5)] {
            let p: Vec<f64> = pattern(seed).iter().map(|&v| f64::from(v)).collect();
            let norm = p.iter().map(|x| x * x).sum::<f64>().sqrt();
            let dot: f64 = s
                .column(c)
                .iter()
                .zip(&p)
                .map(|(&u, &v)| f64::from(u) * v)
                .sum();
            assert!(
                (dot / norm - 1.0).abs() < 1e-5,
                "column {c}: cos {}",
                dot / norm
            );
        }
    }
}
