//! The partial eigen-solver of `Gram::top_eigen` (block Krylov + Rayleigh–Ritz) against the full
//! decomposition (`Gram::eigen`) and against matrices of known spectrum, including close and
//! repeated eigenvalues, where only the invariant subspace is defined.
//!
//! Stated tolerance (see `TOP_EIGEN_TOL`): every Ritz residual ‖G v − θ v‖ ≤ 1e-10 · λ₁, so
//! eigenvalues agree within that, and eigenvectors (same sign convention: largest-magnitude
//! component positive) within 1e-10 · λ₁ / gap. The tests check 1e-9 · λ₁ for eigenvalues, 1e-6
//! for eigenvectors whose gap to the rest of the spectrum is ≥ 1e-3 · λ₁, and the projector onto
//! the span of a cluster of (nearly) equal eigenvalues otherwise.

use edgecfl_shared::cluster::spectral::Gram;
use edgecfl_shared::data::fmnist::FashionMnist;
use edgecfl_shared::train::LocalData;
use nalgebra::DMatrix;

/// xorshift64 in [-0.5, 0.5).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64 - 0.5
    }
}

/// A random orthogonal d × d matrix (Q of a QR decomposition).
fn orthogonal(d: usize, seed: u64) -> DMatrix<f64> {
    let mut r = Rng(seed | 1);
    let a = DMatrix::from_fn(d, d, |_, _| r.next());
    a.qr().q()
}

/// U diag(λ) Uᵀ as a `Gram`, made exactly symmetric.
fn with_spectrum(u: &DMatrix<f64>, lambda: &[f64]) -> Gram {
    let d = u.nrows();
    let l = DMatrix::from_diagonal(&nalgebra::DVector::from_column_slice(lambda));
    let g = u * l * u.transpose();
    let g = (&g + g.transpose()) * 0.5;
    let values: Vec<f64> = (0..d * d).map(|i| g[(i / d, i % d)]).collect();
    Gram::from_matrix(d, &values, 1).unwrap()
}

fn dist(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).powi(2))
        .sum::<f64>()
        .sqrt()
}

/// ‖P_a − P_b‖_F for the projectors onto the spans of two orthonormal sets.
fn projector_distance(a: &[Vec<f64>], b: &[Vec<f64>]) -> f64 {
    let d = a[0].len();
    let p = |s: &[Vec<f64>]| {
        let m = DMatrix::from_fn(d, s.len(), |i, j| s[j][i]);
        &m * m.transpose()
    };
    (p(a) - p(b)).norm()
}

/// Checks top_eigen(k) against eigen(): values within 1e-9 λ₁; each vector within 1e-6 of the full
/// solver's when its gap is ≥ 1e-3 λ₁, else the spans of each cluster of close eigenvalues agree.
fn agrees_with_full(g: &Gram, k: usize, what: &str) {
    agrees_with(g, &g.eigen().unwrap(), k, what);
}

/// [`agrees_with_full`] with the full decomposition computed once by the caller.
fn agrees_with(g: &Gram, full: &(Vec<f64>, Vec<Vec<f64>>), k: usize, what: &str) {
    let (fv, fx) = (&full.0, &full.1);
    let (v, x) = g.top_eigen(k).unwrap();
    assert_eq!((v.len(), x.len()), (k, k));
    let l1 = fv[0].abs().max(1e-300);
    for i in 0..k {
        assert!(
            (v[i] - fv[i]).abs() <= 1e-9 * l1,
            "{what} k={k}: λ{i} {} vs {}",
            v[i],
            fv[i]
        );
        let n: f64 = x[i].iter().map(|a| a * a).sum::<f64>().sqrt();
        assert!((n - 1.0).abs() < 1e-12, "{what}: not unit");
    }
    // Clusters of eigenvalues closer than 1e-3 λ₁ (within the top k + 1, so a cluster cut by the
    // k-th position is compared as a subspace of the full solver's cluster).
    let mut i = 0;
    while i < k {
        let mut j = i + 1;
        while j < fv.len() && fv[j - 1] - fv[j] < 1e-3 * l1 {
            j += 1;
        }
        if j == i + 1 {
            assert!(
                dist(&x[i], &fx[i]) < 1e-6,
                "{what} k={k}: v{i} differs by {}",
                dist(&x[i], &fx[i])
            );
        } else {
            // x[i..min(j,k)] must lie in span(fx[i..j]).
            let ours = &x[i..j.min(k)];
            let full = &fx[i..j];
            let d = fx[0].len();
            let m = DMatrix::from_fn(d, full.len(), |r, c| full[c][r]);
            for v in ours {
                let vv = nalgebra::DVector::from_column_slice(v);
                let proj = &m * (m.transpose() * &vv);
                assert!(
                    (vv - proj).norm() < 1e-6,
                    "{what} k={k}: v{i}.. leaves the eigenspace"
                );
            }
        }
        i = j;
    }
}

#[test]
fn known_distinct_spectrum() {
    let d = 200;
    let u = orthogonal(d, 11);
    let lambda: Vec<f64> = (0..d).map(|i| 10.0 * 0.8f64.powi(i as i32)).collect();
    let g = with_spectrum(&u, &lambda);
    for k in [1, 2, 5, 10] {
        let (v, x) = g.top_eigen(k).unwrap();
        for i in 0..k {
            assert!((v[i] - lambda[i]).abs() < 1e-9 * lambda[0], "λ{i}");
            // Up to sign, the i-th column of U.
            let ui: Vec<f64> = u.column(i).iter().copied().collect();
            let dot: f64 = ui.iter().zip(&x[i]).map(|(a, b)| a * b).sum();
            assert!(
                (dot.abs() - 1.0).abs() < 1e-9,
                "v{i}: |cos| = {}",
                dot.abs()
            );
        }
        agrees_with_full(&g, k, "distinct");
    }
}

#[test]
fn close_and_repeated_eigenvalues() {
    let d = 150;
    let u = orthogonal(d, 23);
    let tail = |from: usize| (from..d).map(|i| 2.0 * 0.9f64.powi(i as i32));
    // λ₁ = λ₂ = λ₃ = 7 exactly, then a gap.
    let repeated: Vec<f64> = [7.0, 7.0, 7.0].into_iter().chain(tail(3)).collect();
    // λ₁ and λ₂ 1e-7 apart.
    let close: Vec<f64> = [10.0, 10.0 - 1e-6, 5.0]
        .into_iter()
        .chain(tail(3))
        .collect();
    for (name, lambda) in [("repeated", &repeated), ("close", &close)] {
        let g = with_spectrum(&u, lambda);
        for k in [1, 2, 3, 5] {
            let (v, x) = g.top_eigen(k).unwrap();
            for i in 0..k {
                assert!(
                    (v[i] - lambda[i]).abs() < 1e-9 * lambda[0],
                    "{name} k={k} λ{i}"
                );
            }
            agrees_with_full(&g, k, name);
            // The span of the top 3 (a cluster) equals U's first 3 columns when k ≥ 3.
            if k >= 3 {
                let want: Vec<Vec<f64>> = (0..3)
                    .map(|i| u.column(i).iter().copied().collect())
                    .collect();
                let span = if name == "repeated" { 3 } else { 2 };
                let got_d = projector_distance(&x[..span], &want[..span]);
                assert!(got_d < 1e-8, "{name} k={k}: projector distance {got_d}");
            }
        }
    }
}

#[test]
fn low_rank_matrix() {
    // Rank 3 (a client with 3 samples): the top 3 are exact, the rest are zero eigenvalues whose
    // vectors are orthogonal to the top 3.
    let d = 120;
    let u = orthogonal(d, 5);
    let mut lambda = vec![0.0; d];
    lambda[..3].copy_from_slice(&[3.0, 2.0, 1.0]);
    let g = with_spectrum(&u, &lambda);
    let (v, x) = g.top_eigen(6).unwrap();
    for i in 0..3 {
        assert!((v[i] - lambda[i]).abs() < 1e-9 * 3.0);
    }
    for i in 3..6 {
        assert!(v[i].abs() < 1e-9 * 3.0, "λ{i} = {}", v[i]);
        for j in 0..3 {
            let dot: f64 = x[i].iter().zip(&x[j]).map(|(a, b)| a * b).sum();
            assert!(dot.abs() < 1e-8);
        }
    }
}

#[test]
fn real_fashion_mnist_clients() {
    // The bundled subset (shipped with the crate, so this runs everywhere): a clothes client, a
    // shoes client, a small client (30 samples, rank ≤ 30) and a mixed one.
    let data = FashionMnist::bundled().unwrap();
    let of = |labels: &[u8], count: usize| -> Vec<usize> {
        (0..data.train.len())
            .filter(|&i| labels.contains(&data.train.labels[i]))
            .take(count)
            .collect()
    };
    let clients = [
        ("clothes", of(&[0, 2, 4, 6], 600)),
        ("shoes", of(&[5, 7, 9], 600)),
        ("small", of(&[8], 30)),
        ("mixed", of(&[1, 3, 8, 9], 400)),
    ];
    for (name, idx) in clients {
        let g = Gram::from_local_data(&LocalData::from_dataset(&data.train, &idx, 0)).unwrap();
        let full = g.eigen().unwrap();
        for k in [1, 2, 5, 10] {
            agrees_with(&g, &full, k, name);
        }
        // The upload: the same as from the full solver after f32 rounding, up to 1e-6.
        let s = g.signature(5).unwrap();
        let (fv, fx) = &full;
        for m in 0..5 {
            assert!((f64::from(s.values[m]) - fv[m]).abs() <= 1e-6 * fv[0]);
            let v: Vec<f64> = s.vector(m).iter().map(|&x| f64::from(x)).collect();
            assert!(dist(&v, &fx[m]) < 1e-5, "{name}: signature vector {m}");
        }
    }
}
