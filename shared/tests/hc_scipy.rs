//! Agreement with scipy and scikit-learn on committed reference fixtures.
//!
//! The fixtures under `tests/fixtures/hc/` were produced by `make_fixtures.py` (same folder)
//! with the scipy / scikit-learn versions recorded in `versions.json`. Every expected number here
//! comes from those libraries, never from this crate.
//!
//! For every case and every linkage method the test checks:
//!
//! * the distances: [`CondensedMatrix::euclidean`] (and `cosine_distance` where present) against
//!   `scipy.spatial.distance.pdist`, to 1e-12 relative;
//! * the linkage on scipy's own condensed distances: merges `(a, b, size)` exactly, heights to
//!   1e-9 relative (ties included, so the tie-breaking must match scipy's);
//! * the linkage on distances computed by this crate from the points (random data has no exact
//!   ties, so the tiny summation-order differences must not change any merge);
//! * `cut_distance(t)` against `fcluster(Z, t, "distance")` for thresholds that include the exact
//!   merge heights, and `cut_k(k)` against the first `n − k` rows of scipy's `Z` and, where the cut
//!   does not fall on tied heights, against `cut_tree(Z, n_clusters=k)` and
//!   `fcluster(Z, k, "maxclust")` (at a tie those two disagree with each other: `cut_tree`
//!   re-sorts tied merges breadth-first, `maxclust` returns fewer than `k` clusters), all as exact
//!   label vectors after renumbering by first appearance;
//! * the adjusted Rand index and Rand index against scikit-learn.

use std::fs;
use std::path::{Path, PathBuf};

use edgecfl_shared::cluster::{
    CondensedMatrix, Dendrogram, Linkage, adjusted_rand_index, linkage, rand_index,
};
use serde::Deserialize;

#[derive(Deserialize)]
struct DistanceCut {
    t: String,
    labels: Vec<usize>,
}

#[derive(Deserialize)]
struct KCut {
    k: usize,
    /// The first n − k rows of scipy's Z applied.
    labels: Vec<usize>,
    tied: bool,
    /// scipy's `cut_tree(Z, n_clusters=k)`, present when the cut is not at a tied height.
    #[serde(default)]
    cut_tree: Option<Vec<usize>>,
    /// scipy's `fcluster(Z, k, "maxclust")`, present when the cut is not at a tied height.
    #[serde(default)]
    maxclust: Option<Vec<usize>>,
}

#[derive(Deserialize)]
struct Expected {
    #[serde(rename = "Z")]
    z: Vec<(usize, usize, f64, usize)>,
    distance_cuts: Vec<DistanceCut>,
    k_cuts: Vec<KCut>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    n: usize,
    #[serde(default)]
    points: Option<Vec<Vec<String>>>,
    pdist: Vec<String>,
    #[serde(default)]
    cosine_pdist: Option<Vec<String>>,
    #[serde(default)]
    condensed_only: bool,
    linkages: std::collections::BTreeMap<String, Expected>,
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hc")
}

fn load_cases() -> Vec<Case> {
    let mut paths: Vec<PathBuf> = fs::read_dir(fixture_dir())
        .expect("fixture directory")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            p.file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|f| f.starts_with("case_") && f.ends_with(".json"))
        })
        .collect();
    paths.sort();
    assert!(paths.len() >= 10, "fixtures missing: {paths:?}");
    paths
        .iter()
        .map(|p| {
            let text = fs::read_to_string(p).expect("read fixture");
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        })
        .collect()
}

/// Exact decimal → f64 (Rust's parser is correctly rounded, the strings are shortest reprs).
fn f(s: &str) -> f64 {
    s.parse().unwrap_or_else(|e| panic!("bad float {s:?}: {e}"))
}

fn points(case: &Case) -> Option<Vec<Vec<f32>>> {
    case.points.as_ref().map(|rows| {
        rows.iter()
            .map(|r| {
                r.iter()
                    .map(|s| {
                        let v = f(s);
                        let x = v as f32;
                        assert_eq!(f64::from(x), v, "fixture point not a float32");
                        x
                    })
                    .collect()
            })
            .collect()
    })
}

fn renumber(labels: &[usize]) -> Vec<usize> {
    let mut map = std::collections::HashMap::new();
    labels
        .iter()
        .map(|l| {
            let next = map.len();
            *map.entry(*l).or_insert(next)
        })
        .collect()
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    a == b || (a - b).abs() <= rel * a.abs().max(b.abs())
}

fn check_dendrogram(case: &str, method: &str, src: &str, got: &Dendrogram, want: &Expected) {
    assert_eq!(
        got.merges().len(),
        want.z.len(),
        "{case}/{method}/{src}: merge count"
    );
    for (i, (m, &(a, b, h, size))) in got.merges().iter().zip(&want.z).enumerate() {
        assert_eq!(
            (m.a, m.b, m.size),
            (a, b, size),
            "{case}/{method}/{src}: merge {i} (height {} vs scipy {h})",
            m.height
        );
        assert!(
            close(m.height, h, 1e-9),
            "{case}/{method}/{src}: merge {i} height {} vs scipy {h}",
            m.height
        );
    }
}

#[test]
fn distances_match_pdist() {
    let mut checked = 0;
    for case in load_cases() {
        let Some(pts) = points(&case) else { continue };
        let want: Vec<f64> = case.pdist.iter().map(|s| f(s)).collect();
        let got = CondensedMatrix::euclidean(&pts).expect("euclidean");
        assert_eq!(got.n(), case.n, "{}", case.name);
        assert_eq!(got.as_slice().len(), want.len(), "{}", case.name);
        for (k, (g, w)) in got.as_slice().iter().zip(&want).enumerate() {
            assert!(close(*g, *w, 1e-12), "{}: pdist[{k}] {g} vs {w}", case.name);
        }
        if let Some(cos) = &case.cosine_pdist {
            let got = CondensedMatrix::cosine_distance(&pts).expect("cosine");
            for (k, (g, w)) in got.as_slice().iter().zip(cos).enumerate() {
                let w = f(w);
                assert!(
                    (g - w).abs() <= 1e-12,
                    "{}: cosine[{k}] {g} vs {w}",
                    case.name
                );
            }
            checked += 1;
        }
        checked += 1;
    }
    assert!(checked >= 12, "only {checked} distance checks ran");
}

#[test]
fn linkage_matches_scipy_on_scipy_distances() {
    let mut checked = 0;
    let mut untied_k_cuts = 0;
    for case in load_cases() {
        let y: Vec<f64> = case.pdist.iter().map(|s| f(s)).collect();
        let d = if case.n == 1 {
            CondensedMatrix::from_condensed(Vec::new()).expect("n = 1")
        } else {
            CondensedMatrix::from_condensed(y).expect("valid pdist")
        };
        assert_eq!(d.n(), case.n, "{}", case.name);
        for (name, want) in &case.linkages {
            let method: Linkage = name.parse().expect("method name");
            let got = linkage(&d, method);
            check_dendrogram(&case.name, name, "scipy pdist", &got, want);

            for cut in &want.distance_cuts {
                let t = f(&cut.t);
                assert_eq!(
                    got.cut_distance(t),
                    renumber(&cut.labels),
                    "{}/{name}: cut_distance({t})",
                    case.name
                );
                let k = cut
                    .labels
                    .iter()
                    .collect::<std::collections::HashSet<_>>()
                    .len();
                assert_eq!(
                    got.n_clusters_at(t),
                    k,
                    "{}/{name}: n_clusters_at({t})",
                    case.name
                );
            }
            for cut in &want.k_cuts {
                let labels = got.cut_k(cut.k);
                let ctx = format!("{}/{name}: cut_k({})", case.name, cut.k);
                assert_eq!(labels, renumber(&cut.labels), "{ctx}");
                if !cut.tied {
                    let (Some(ct), Some(mc)) = (&cut.cut_tree, &cut.maxclust) else {
                        panic!("{ctx}: untied cut without scipy labels");
                    };
                    assert_eq!(labels, renumber(ct), "{ctx}: vs cut_tree");
                    assert_eq!(labels, renumber(mc), "{ctx}: vs fcluster maxclust");
                    untied_k_cuts += 1;
                }
            }
            // Round trip through JSON keeps the dendrogram (serde_json without its
            // `float_roundtrip` feature may move a parsed float by one ulp).
            let back: Dendrogram =
                serde_json::from_str(&serde_json::to_string(&got).expect("ser")).expect("de");
            assert_eq!(back.n(), got.n());
            for (p, q) in back.merges().iter().zip(got.merges()) {
                assert_eq!((p.a, p.b, p.size), (q.a, q.b, q.size));
                assert!(close(p.height, q.height, 1e-15));
            }
            checked += 1;
        }
    }
    // 14 cases with points × 5 methods + the integer condensed matrix (ward may be skipped).
    assert!(checked >= 70, "only {checked} linkage checks ran");
    assert!(
        untied_k_cuts >= 200,
        "only {untied_k_cuts} k-cuts compared with scipy"
    );
}

#[test]
fn linkage_matches_scipy_on_own_distances() {
    let mut checked = 0;
    for case in load_cases() {
        if case.condensed_only {
            continue;
        }
        let Some(pts) = points(&case) else { continue };
        let d = CondensedMatrix::euclidean(&pts).expect("euclidean");
        for (name, want) in &case.linkages {
            let got = linkage(&d, name.parse().expect("method"));
            check_dendrogram(&case.name, name, "own euclidean", &got, want);
            checked += 1;
        }
    }
    assert!(checked >= 60, "only {checked} linkage checks ran");
}

#[test]
fn ties_are_broken_like_scipy() {
    // A direct, readable tie case (also covered by the fixtures): 1-D points 0, 1, 2, 3 have
    // three merges at height 1 for single linkage. scipy.cluster.hierarchy.linkage gives
    //   [[0, 1, 1, 2], [2, 4, 1, 3], [3, 5, 1, 4]]
    // and for complete linkage
    //   [[0, 1, 1, 2], [2, 3, 1, 2], [4, 5, 3, 4]].
    let pts: Vec<Vec<f32>> = [0.0f32, 1.0, 2.0, 3.0].iter().map(|&x| vec![x]).collect();
    let d = CondensedMatrix::euclidean(&pts).unwrap();
    let rows = |m| {
        linkage(&d, m)
            .merges()
            .iter()
            .map(|m| (m.a, m.b, m.height, m.size))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        rows(Linkage::Single),
        vec![(0, 1, 1.0, 2), (2, 4, 1.0, 3), (3, 5, 1.0, 4)]
    );
    assert_eq!(
        rows(Linkage::Complete),
        vec![(0, 1, 1.0, 2), (2, 3, 1.0, 2), (4, 5, 3.0, 4)]
    );
}

#[derive(Deserialize)]
struct MetricCase {
    a: Vec<usize>,
    b: Vec<usize>,
    ari: f64,
    rand: f64,
}

#[test]
fn metrics_match_sklearn() {
    let text = fs::read_to_string(fixture_dir().join("metrics.json")).expect("metrics.json");
    let cases: Vec<MetricCase> = serde_json::from_str(&text).expect("parse");
    assert!(cases.len() >= 10);
    for (i, c) in cases.iter().enumerate() {
        let ari = adjusted_rand_index(&c.a, &c.b);
        assert!(
            close(ari, c.ari, 1e-12),
            "case {i}: ARI {ari} vs sklearn {}",
            c.ari
        );
        let ri = rand_index(&c.a, &c.b);
        assert!(
            close(ri, c.rand, 1e-12),
            "case {i}: Rand {ri} vs sklearn {}",
            c.rand
        );
    }
}
