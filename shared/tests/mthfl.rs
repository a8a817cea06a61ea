//! Tests of MT-HFL's relevance (eq. 1-5), its server-side approximation and the one-shot
//! clustering of the `tasks:fmnist3` split.

// Matrices indexed by hand read best as index loops.
#![allow(clippy::needless_range_loop)]

use edgecfl_shared::cluster::spectral;
use std::sync::OnceLock;

use edgecfl_shared::algorithms::mthfl::{self, DEFAULT_LINKAGE};
use edgecfl_shared::cluster::clustering::Lambda;
use edgecfl_shared::cluster::robust::Guard;
use edgecfl_shared::cluster::spectral::{
    DEFAULT_EIGENVECTORS, Estimate, Gram, Signature, SpectralError,
};
use edgecfl_shared::cluster::{Linkage, adjusted_rand_index};
use edgecfl_shared::data::{FashionMnist, PartitionSpec, partition};
use edgecfl_shared::protocol::Encoding;
use edgecfl_shared::train::{Device, LocalData};

const S: f64 = std::f64::consts::FRAC_1_SQRT_2;

fn fmnist() -> &'static edgecfl_shared::data::Splits {
    static DATA: OnceLock<edgecfl_shared::data::Splits> = OnceLock::new();
    DATA.get_or_init(|| FashionMnist::load(None).expect("Fashion-MNIST loads"))
}

fn gram(d: usize, values: &[f64]) -> Gram {
    Gram::from_matrix(d, values, 1).unwrap()
}

/// The paper's way end to end: every client computes its row from its exact Gram matrix.
fn client_rows(grams: &[Gram], sigs: &[Signature], est: Estimate) -> Vec<Vec<f64>> {
    grams
        .iter()
        .zip(sigs)
        .map(|(g, s)| spectral::client_row(g, s, sigs, est).unwrap())
        .collect()
}

fn assert_close(a: &[Vec<f64>], b: &[Vec<f64>], tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (ra, rb)) in a.iter().zip(b).enumerate() {
        for (j, (x, y)) in ra.iter().zip(rb).enumerate() {
            assert!(
                (x - y).abs() <= tol,
                "{what}: ({i}, {j}) = {x} vs {y} (tolerance {tol})"
            );
        }
    }
}

/// Three 2-d clients whose Gram matrices are given by hand:
///
/// - A = diag(4, 1): λ = (4, 1), v₁ = (1, 0), v₂ = (0, 1);
/// - B = [[2.5, 1.5], [1.5, 2.5]]: λ = (4, 1), v₁ = (1, 1)/√2, v₂ = (1, −1)/√2;
/// - C = diag(1, 3): λ = (3, 1), v₁ = (0, 1), v₂ = (1, 0).
fn hand_clients() -> Vec<Gram> {
    vec![
        gram(2, &[4.0, 0.0, 0.0, 1.0]),
        gram(2, &[2.5, 1.5, 1.5, 2.5]),
        gram(2, &[1.0, 0.0, 0.0, 3.0]),
    ]
}

#[test]
fn hand_eigenpairs() {
    let g = hand_clients();
    let b = g[1].signature(2).unwrap();
    assert!((f64::from(b.values[0]) - 4.0).abs() < 1e-6);
    assert!((f64::from(b.values[1]) - 1.0).abs() < 1e-6);
    // Signs fixed: the largest-magnitude component (the first one on a tie) is positive.
    for (x, want) in b.vector(0).iter().zip([S, S]) {
        assert!((f64::from(*x) - want).abs() < 1e-6, "{:?}", b.vector(0));
    }
    for (x, want) in b.vector(1).iter().zip([S, -S]) {
        assert!((f64::from(*x) - want).abs() < 1e-6, "{:?}", b.vector(1));
    }
    let c = g[2].signature(2).unwrap();
    assert_eq!(c.values, vec![3.0, 1.0]);
    assert_eq!(c.vectors, vec![0.0, 1.0, 1.0, 0.0]);
}

/// Eq. (2)-(5) worked out by hand for [`hand_clients`], k = 2 (all eigenpairs):
///
/// - r(A, B): ‖A (1, 1)/√2‖ = ‖(4, 1)‖/√2 = √8.5 and the same for (1, −1)/√2; ratios √8.5/4 and
///   1/√8.5, product 1/4, r = 1/2.
/// - r(B, A): ‖B (1, 0)‖ = ‖(2.5, 1.5)‖ = √8.5, ‖B (0, 1)‖ = √8.5, against λ_B = (4, 1): r = 1/2.
/// - r(A, C): ‖A (0, 1)‖ = 1, ‖A (1, 0)‖ = 4 against λ_A = (4, 1): ratios 1/4, 1/4, r = 1/4.
/// - r(C, A): ‖C (1, 0)‖ = 1, ‖C (0, 1)‖ = 3 against λ_C = (3, 1): ratios 1/3, 1/3, r = 1/3.
/// - r(B, C): B on (0, 1) and (1, 0) gives √8.5 twice, as for r(B, A): r = 1/2.
/// - r(C, B): ‖C (1, 1)/√2‖ = ‖(1, 3)‖/√2 = √5 = ‖C (1, −1)/√2‖; ratios √5/3 and 1/√5, product
///   1/3, r = 1/√3.
///
/// Eq. (5): R(A, B) = 1/2, R(A, C) = (1/4 + 1/3)/2 = 7/24, R(B, C) = (1/2 + 1/√3)/2.
///
/// With k = 1 only the first ratios count: r(A, B) = r(B, A) = √8.5/4, r(A, C) = 1/4,
/// r(C, A) = 1/3, r(B, C) = √8.5/4, r(C, B) = √5/3.
///
/// With the Rayleigh quotient: A on (1, ±1)/√2 gives 2.5, B on (1, 0) and (0, 1) gives 2.5, C on
/// (1, ±1)/√2 gives 2; so r(A, B) = r(B, A) = r(B, C) = √(2.5/4 · 1/2.5) = 1/2,
/// r(C, B) = √(2/3 · 1/2) = 1/√3, and r(A, C), r(C, A) as for the norm (eigenvectors of A and C).
#[test]
fn hand_computed_relevance_matches_eq_2_to_5() {
    let grams = hand_clients();
    let sigs: Vec<Signature> = grams.iter().map(|g| g.signature(2).unwrap()).collect();
    let s5 = 5f64.sqrt();
    let s85 = 8.5f64.sqrt();
    let r_k2 = vec![
        vec![1.0, 0.5, 0.25],
        vec![0.5, 1.0, 0.5],
        vec![1.0 / 3.0, 1.0 / 3f64.sqrt(), 1.0],
    ];
    for est in [Estimate::Norm, Estimate::Rayleigh] {
        let rows = client_rows(&grams, &sigs, est);
        assert_close(&rows, &r_k2, 1e-6, &format!("r, k = 2, {est}"));
    }
    let big_r = vec![
        vec![1.0, 0.5, 7.0 / 24.0],
        vec![0.5, 1.0, (0.5 + 1.0 / 3f64.sqrt()) / 2.0],
        vec![7.0 / 24.0, (0.5 + 1.0 / 3f64.sqrt()) / 2.0, 1.0],
    ];
    let rows = client_rows(&grams, &sigs, Estimate::Norm);
    assert_close(
        &spectral::symmetrise(&rows).unwrap(),
        &big_r,
        1e-6,
        "R, k = 2",
    );

    let sigs1: Vec<Signature> = sigs.iter().map(|s| s.truncated(1)).collect();
    let rows1 = client_rows(&grams, &sigs1, Estimate::Norm);
    let r_k1 = vec![
        vec![1.0, s85 / 4.0, 0.25],
        vec![s85 / 4.0, 1.0, s85 / 4.0],
        vec![1.0 / 3.0, s5 / 3.0, 1.0],
    ];
    assert_close(&rows1, &r_k1, 1e-6, "r, k = 1");

    // Server-side: with k = d the reconstruction Vᵢ Λᵢ Vᵢᵀ is exact, so the rows are the same.
    let dev = Device::flex();
    for est in [Estimate::Norm, Estimate::Rayleigh] {
        let server = spectral::server_rows(&sigs, est, &dev).unwrap();
        assert_close(&server, &r_k2, 1e-5, &format!("server r, k = 2, {est}"));
    }
    // A newcomer with C's data, placed against A and B: its row of R, both directions
    // estimated server-side (exact at k = d).
    let newcomer = mthfl::newcomer_relevance(&sigs[..2], &sigs[2], Estimate::Norm, &dev).unwrap();
    assert_close(
        &[newcomer],
        &[big_r[2][..2].to_vec()],
        1e-5,
        "newcomer R, k = 2",
    );
    // With k = 1 < d the server only knows the top eigenpair: ‖A v‖² ≈ 16 (v₁ᴬ · v)², so
    // λ̂ of B's first vector under Â = 16·½ → √8 instead of √8.5.
    let server1 = spectral::server_rows(&sigs1, Estimate::Norm, &dev).unwrap();
    assert!(
        (server1[0][1] - 8f64.sqrt() / 4.0).abs() < 1e-5,
        "{server1:?}"
    );
}

#[test]
fn identical_data_gives_relevance_one_and_r_is_symmetric() {
    // Two clients with the same samples (in another order) and one with other data.
    let a: Vec<f32> = (0..40 * 6).map(|i| ((i * 37 % 11) as f32) / 10.0).collect();
    let mut b = a[6 * 20..].to_vec();
    b.extend_from_slice(&a[..6 * 20]);
    let c: Vec<f32> = (0..30 * 6)
        .map(|i| ((i * 13 % 7) as f32) / 7.0 + if i % 6 == 0 { 2.0 } else { 0.0 })
        .collect();
    let grams: Vec<Gram> = [&a, &b, &c]
        .iter()
        .map(|x| Gram::from_features(x, 6).unwrap())
        .collect();
    let sigs: Vec<Signature> = grams.iter().map(|g| g.signature(3).unwrap()).collect();
    for est in [Estimate::Norm, Estimate::Rayleigh] {
        let rows = client_rows(&grams, &sigs, est);
        for (i, row) in rows.iter().enumerate() {
            assert!((row[i] - 1.0).abs() < 1e-6, "r({i}, {i}) = {}", row[i]);
        }
        assert!((rows[0][1] - 1.0).abs() < 1e-6, "{rows:?}");
        assert!((rows[1][0] - 1.0).abs() < 1e-6, "{rows:?}");
        assert!(rows[0][2] < 0.99, "{rows:?}");
        let r = spectral::symmetrise(&rows).unwrap();
        for i in 0..3 {
            assert_eq!(r[i][i], 1.0);
            for j in 0..3 {
                assert_eq!(r[i][j], r[j][i]);
                assert!((0.0..=1.0).contains(&r[i][j]));
            }
        }
        let server =
            spectral::symmetrise(&spectral::server_rows(&sigs, est, &Device::flex()).unwrap())
                .unwrap();
        assert!((server[0][1] - 1.0).abs() < 1e-5, "{server:?}");
    }
}

#[test]
fn gram_matches_its_definition() {
    // X = [[1, 2], [3, 4], [0, 1]]: XᵀX = [[10, 14], [14, 21]], /3.
    let g = Gram::from_features(&[1.0, 2.0, 3.0, 4.0, 0.0, 1.0], 2).unwrap();
    assert_eq!((g.d(), g.n_samples()), (2, 3));
    for (i, j, want) in [(0, 0, 10.0), (0, 1, 14.0), (1, 0, 14.0), (1, 1, 21.0)] {
        assert!((g.get(i, j) - want / 3.0).abs() < 1e-12);
    }
    let gv = g.apply(&[1.0, 0.0]);
    assert!((gv[0] - 10.0 / 3.0).abs() < 1e-12 && (gv[1] - 14.0 / 3.0).abs() < 1e-12);
    // More than one 4 096-row block accumulates the same.
    let rows: Vec<f32> = (0..5000 * 3).map(|i| (i % 7) as f32 * 0.1).collect();
    let g = Gram::from_features(&rows, 3).unwrap();
    let mut want = [[0f64; 3]; 3];
    for r in rows.chunks_exact(3) {
        for i in 0..3 {
            for j in 0..3 {
                want[i][j] += f64::from(r[i]) * f64::from(r[j]) / 5000.0;
            }
        }
    }
    for i in 0..3 {
        for j in 0..3 {
            assert!((g.get(i, j) - want[i][j]).abs() < 1e-9);
        }
    }
}

#[test]
fn input_errors() {
    assert!(matches!(
        Gram::from_features(&[1.0, 2.0, 3.0], 2),
        Err(SpectralError::BadFeatures { len: 3, d: 2 })
    ));
    assert!(matches!(
        Gram::from_features(&[], 2),
        Err(SpectralError::BadFeatures { .. })
    ));
    assert!(matches!(
        Gram::from_features(&[1.0, f32::NAN], 2),
        Err(SpectralError::NotFinite { index: 1 })
    ));
    assert!(matches!(
        Gram::from_matrix(2, &[1.0, 2.0, 3.0, 1.0], 1),
        Err(SpectralError::BadGram(_))
    ));
    let g = gram(2, &[4.0, 0.0, 0.0, 1.0]);
    assert!(matches!(
        g.signature(0),
        Err(SpectralError::BadK { k: 0, d: 2 })
    ));
    assert!(matches!(
        g.signature(3),
        Err(SpectralError::BadK { k: 3, d: 2 })
    ));
    let s = g.signature(2).unwrap();
    let mut bad = s.clone();
    bad.values[1] = f32::NAN;
    assert!(matches!(
        spectral::client_row(&g, &s, &[s.clone(), bad.clone()], Estimate::Norm),
        Err(SpectralError::BadSignature { index: 1, .. })
    ));
    assert!(matches!(
        spectral::server_rows(&[s.clone(), bad], Estimate::Norm, &Device::flex()),
        Err(SpectralError::BadSignature { index: 1, .. })
    ));
    assert!(matches!(
        spectral::server_rows(
            &[s.clone(), s.truncated(1)],
            Estimate::Norm,
            &Device::flex()
        ),
        Err(SpectralError::Mismatch { index: 1, k: 1, .. })
    ));
    assert!(matches!(
        spectral::symmetrise(&[vec![1.0, 0.5], vec![0.5]]),
        Err(SpectralError::BadRows(_))
    ));
    assert!(matches!(
        spectral::symmetrise(&[vec![1.0, 1.5], vec![0.5, 1.0]]),
        Err(SpectralError::BadRows(_))
    ));
    assert!(matches!(
        mthfl::cluster(&[], DEFAULT_LINKAGE, Lambda::Clusters(2), Guard::Robust),
        Err(SpectralError::Empty)
    ));
    assert!(
        spectral::server_rows(&[], Estimate::Norm, &Device::flex())
            .unwrap()
            .is_empty()
    );
}

#[test]
fn signature_rounding_and_bytes() {
    let g = gram(3, &[3.0, 0.5, 0.0, 0.5, 2.0, 0.1, 0.0, 0.1, 1.0]);
    let s = g.signature(2).unwrap();
    assert_eq!(s.payload_bytes(Encoding::F32), (2 * 3 + 2) * 4);
    assert_eq!(s.payload_bytes(Encoding::F16), (2 * 3 + 2) * 2);
    assert_eq!(s.rounded(Encoding::F32), s);
    let h = s.rounded(Encoding::F16);
    for (a, b) in s.vectors.iter().zip(&h.vectors) {
        assert!((a - b).abs() <= 1e-3 * a.abs().max(1e-3));
        assert_eq!(f32::from(half::f16::from_f32(*a)), *b);
    }
    // The rounded vectors are renormalised: an f16 round trip barely moves r.
    let rows = spectral::client_row(&g, &s, &[s.clone(), h.clone()], Estimate::Norm).unwrap();
    assert!((rows[1] - 1.0).abs() < 2e-3, "{rows:?}");
    assert_eq!(s.truncated(1).vectors.len(), 3);
    assert_eq!(s.truncated(9).k, 2);
}

#[test]
fn clustering_cuts_at_t_or_a_threshold_and_places_newcomers() {
    // The paper's Table I (CIFAR-10, two tasks): users 1-2 vs 3-5.
    let r = vec![
        vec![1.0, 0.97, 0.31, 0.31, 0.32],
        vec![0.97, 1.0, 0.31, 0.32, 0.32],
        vec![0.31, 0.31, 1.0, 0.97, 0.98],
        vec![0.31, 0.32, 0.97, 1.0, 0.98],
        vec![0.32, 0.32, 0.98, 0.98, 1.0],
    ];
    for l in [Linkage::Single, Linkage::Complete, Linkage::Average] {
        let (c, d) = mthfl::cluster(&r, l, Lambda::Clusters(2), Guard::Robust).unwrap();
        assert_eq!(c.assignment, vec![0, 0, 1, 1, 1], "{l}");
        assert!(c.centroids.is_empty());
        assert!((d.get(0, 2).unwrap() - 0.69).abs() < 1e-12);
        let (c, _) = mthfl::cluster(&r, l, Lambda::Distance(0.5), Guard::Robust).unwrap();
        assert_eq!(c.assignment, vec![0, 0, 1, 1, 1], "{l}");
        let (c, _) = mthfl::cluster(&r, l, Lambda::Auto, Guard::Robust).unwrap();
        assert_eq!(c.n_clusters, 2, "{l}");
        // HAC as described under Table I: 4-5 merge first (0.02), then 1-2 (0.03), then 3.
        let m = c.dendrogram.merges();
        assert!((m[0].height - 0.02).abs() < 1e-9);
        assert_eq!(
            mthfl::assign_newcomer(&[0.3, 0.3, 0.9, 0.95, 0.9], &c).unwrap(),
            1
        );
        assert_eq!(
            mthfl::assign_newcomer(&[0.9, 0.96, 0.3, 0.2, 0.3], &c).unwrap(),
            0
        );
        assert!(mthfl::assign_newcomer(&[0.9], &c).is_err());
    }
}

#[test]
fn server_side_is_exact_at_k_equals_d_and_close_below() {
    // Six clients in d = 8: two groups with different covariance structure, full rank.
    let d = 8;
    let client = |seed: u64, group: usize| -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 10_000) as f32 / 10_000.0
        };
        (0..200)
            .flat_map(|_| {
                let base: Vec<f32> = (0..d).map(|_| next()).collect();
                (0..d)
                    .map(|i| {
                        let w = if (i < d / 2) == (group == 0) {
                            1.0
                        } else {
                            0.3
                        };
                        w * base[i] + 0.5 * base[(i + 1) % d]
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let grams: Vec<Gram> = (0..6)
        .map(|c| Gram::from_features(&client(c as u64 + 1, c % 2), d).unwrap())
        .collect();
    let full: Vec<Signature> = grams.iter().map(|g| g.signature(d).unwrap()).collect();
    let dev = Device::flex();
    for est in [Estimate::Norm, Estimate::Rayleigh] {
        let paper = client_rows(&grams, &full, est);
        let server = spectral::server_rows(&full, est, &dev).unwrap();
        assert_close(&server, &paper, 1e-4, &format!("k = d, {est}"));
    }
    // k = 3 < d: close, and the same clustering.
    let sigs: Vec<Signature> = full.iter().map(|s| s.truncated(3)).collect();
    let paper = spectral::symmetrise(&client_rows(&grams, &sigs, Estimate::Norm)).unwrap();
    let server =
        spectral::symmetrise(&spectral::server_rows(&sigs, Estimate::Norm, &dev).unwrap()).unwrap();
    assert_close(&server, &paper, 0.1, "k = 3");
    let (a, _) =
        mthfl::cluster(&paper, DEFAULT_LINKAGE, Lambda::Clusters(2), Guard::Robust).unwrap();
    let (b, _) =
        mthfl::cluster(&server, DEFAULT_LINKAGE, Lambda::Clusters(2), Guard::Robust).unwrap();
    let truth: Vec<usize> = (0..6).map(|c| c % 2).collect();
    assert_eq!(adjusted_rand_index(&a.assignment, &truth), 1.0);
    assert_eq!(adjusted_rand_index(&b.assignment, &truth), 1.0);
}

#[test]
fn tasks_fmnist3_users_of_a_task_cluster_together() {
    let data = fmnist();
    let spec: PartitionSpec = "tasks:fmnist3".parse().unwrap();
    let dev = Device::flex();
    for seed in [0, 1] {
        let p = partition(&spec, &data.train.labels, 10, seed).unwrap();
        let truth = p.truth.clone().unwrap();
        assert_eq!(truth, vec![0, 0, 0, 0, 0, 1, 1, 1, 2, 2]);
        let grams: Vec<Gram> = p
            .clients
            .iter()
            .map(|c| Gram::from_local_data(&LocalData::from_dataset(&data.train, &c.train, 0)))
            .collect::<Result<_, _>>()
            .unwrap();
        let sigs: Vec<Signature> = grams
            .iter()
            .map(|g| g.signature(DEFAULT_EIGENVECTORS).unwrap())
            .collect();
        let paper = spectral::symmetrise(&client_rows(&grams, &sigs, Estimate::Norm)).unwrap();
        let server =
            spectral::symmetrise(&spectral::server_rows(&sigs, Estimate::Norm, &dev).unwrap())
                .unwrap();
        let mut worst: f64 = 0.0;
        for (a, b) in paper.iter().zip(&server) {
            for (x, y) in a.iter().zip(b) {
                worst = worst.max((x - y).abs());
            }
        }
        eprintln!(
            "tasks:fmnist3 seed {seed} ({}): max |R_paper − R_server| = {worst:.4}",
            data.source
        );
        assert!(
            worst < 0.1,
            "server-side R too far from the paper's: {worst}"
        );
        for (name, r) in [("paper", &paper), ("server", &server)] {
            let (c, _) =
                mthfl::cluster(r, DEFAULT_LINKAGE, Lambda::Clusters(3), Guard::Robust).unwrap();
            assert_eq!(
                adjusted_rand_index(&c.assignment, &truth),
                1.0,
                "{name}, seed {seed}: {:?}\n{r:?}",
                c.assignment
            );
        }
        // Same-task relevance is above cross-task relevance.
        let (mut same, mut cross) = (f64::INFINITY, f64::NEG_INFINITY);
        for i in 0..10 {
            for j in 0..10 {
                if i == j {
                    continue;
                }
                if truth[i] == truth[j] {
                    same = same.min(paper[i][j]);
                } else {
                    cross = cross.max(paper[i][j]);
                }
            }
        }
        assert!(
            same > cross,
            "min same-task R {same} ≤ max cross-task R {cross}"
        );
    }
}
