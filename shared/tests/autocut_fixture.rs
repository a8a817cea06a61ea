//! The automatic cut on a recorded real case: the symmetrised MT-HFL relevance matrix `R` of
//! `coordinator simulate --algorithm mthfl --partition tasks:fmnist3 --clients 10 --eigenvectors 2
//! --signature-encoding f16 --rounds 0 --seed 0` on full Fashion-MNIST (its `relevance.csv`, kept
//! in `fixtures/autocut/tasks10-s0.json` with the clients' tasks). The three tasks are 5 clothes,
//! 3 shoes and 2 bag users; the largest gap between merge heights separates clothes from the
//! rest, so the `gap` rule merges shoes and bags, while the silhouette rule finds the three.

use edgecfl_shared::algorithms::mthfl::{self, DEFAULT_LINKAGE};
use edgecfl_shared::cluster::clustering::Lambda;
use edgecfl_shared::cluster::robust::Guard;
use edgecfl_shared::cluster::{CutRule, adjusted_rand_index};

#[derive(serde::Deserialize)]
struct Fixture {
    relevance: Vec<Vec<f64>>,
    truth: Vec<usize>,
}

fn fixture() -> Fixture {
    let text = include_str!("fixtures/autocut/tasks10-s0.json");
    serde_json::from_str(text).expect("fixture parses")
}

#[test]
fn silhouette_finds_the_three_tasks_where_the_gap_rule_merges_two() {
    let f = fixture();
    let (auto, _) =
        mthfl::cluster(&f.relevance, DEFAULT_LINKAGE, Lambda::Auto, Guard::Robust).unwrap();
    assert_eq!(auto.n_clusters, 3);
    assert_eq!(adjusted_rand_index(&auto.assignment, &f.truth), 1.0);
    let cut = auto.cut.as_ref().unwrap();
    assert_eq!(cut.rule, CutRule::Silhouette);
    assert_eq!(cut.heights.len(), 9);
    // The chosen candidate is the best-scoring one.
    let best = cut
        .candidates
        .iter()
        .filter_map(|c| c.score)
        .fold(f64::NEG_INFINITY, f64::max);
    assert_eq!(cut.chosen().unwrap().score, Some(best));

    let (gap, _) =
        mthfl::cluster(&f.relevance, DEFAULT_LINKAGE, Lambda::Gap, Guard::Robust).unwrap();
    assert_eq!(gap.n_clusters, 2);
    assert!(adjusted_rand_index(&gap.assignment, &f.truth) < 1.0);
}

/// `tasks:fmnist3`, 100 clients, seed 7 (see `fixtures/autocut/tasks100-s7.json`): 2 of the 20 bag
/// users sit about as far from the other 18 as the bags sit from the shoes. Splitting them off
/// scores a slightly higher mean silhouette (a near-tie), and the tie rule takes the three tasks,
/// whose cut holds over a much wider gap of merge heights.
#[test]
fn near_tie_goes_to_the_widest_gap() {
    #[derive(serde::Deserialize)]
    struct Upper {
        n: usize,
        upper: Vec<f64>,
        truth: Vec<usize>,
    }
    let f: Upper =
        serde_json::from_str(include_str!("fixtures/autocut/tasks100-s7.json")).expect("parses");
    // R(i, j) for i < j is upper[k] at scipy's condensed index k of (i, j).
    let n = f.n;
    let at = |i: usize, j: usize| {
        let (i, j) = (i.min(j), i.max(j));
        f.upper[n * i - i * (i + 1) / 2 + (j - i - 1)]
    };
    let r: Vec<Vec<f64>> = (0..n)
        .map(|i| {
            (0..n)
                .map(|j| if i == j { 1.0 } else { at(i, j) })
                .collect()
        })
        .collect();
    let (auto, _) = mthfl::cluster(&r, DEFAULT_LINKAGE, Lambda::Auto, Guard::Robust).unwrap();
    assert_eq!(auto.n_clusters, 3);
    assert_eq!(adjusted_rand_index(&auto.assignment, &f.truth), 1.0);
    let cut = auto.cut.as_ref().unwrap();
    let best = cut
        .candidates
        .iter()
        .filter(|c| c.score.is_some())
        .max_by(|a, b| a.score.partial_cmp(&b.score).unwrap())
        .unwrap();
    assert_eq!(best.n_clusters, 4, "the best score alone splits the bags");
    let chosen = cut.chosen().unwrap().score.unwrap();
    assert!(best.score.unwrap() - chosen < edgecfl_shared::cluster::SILHOUETTE_TIE);
    let (gap, _) = mthfl::cluster(&r, DEFAULT_LINKAGE, Lambda::Gap, Guard::Robust).unwrap();
    assert_eq!(gap.n_clusters, 2);
}
