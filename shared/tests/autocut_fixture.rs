//! The automatic cut on a recorded real case: the symmetrised MT-HFL relevance matrix `R` of
//! `coordinator simulate --algorithm mthfl --partition tasks:fmnist3 --clients 10 --eigenvectors 2
//! --signature-encoding f16 --rounds 0 --seed 0` on full Fashion-MNIST (its `relevance.csv`, kept
//! in `fixtures/autocut/tasks10-s0.json` with the clients' tasks). The three tasks are 5 clothes,
//! 3 shoes and 2 bag users; the largest gap between merge heights separates clothes from the
//! rest, so the `gap` rule merges shoes and bags, while the silhouette rule finds the three.

use edgecfl_shared::algorithms::fedclust::Threshold;
use edgecfl_shared::algorithms::mthfl::{self, DEFAULT_LINKAGE};
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
    let (auto, _) = mthfl::cluster(&f.relevance, DEFAULT_LINKAGE, Threshold::Auto).unwrap();
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

    let (gap, _) = mthfl::cluster(&f.relevance, DEFAULT_LINKAGE, Threshold::Gap).unwrap();
    assert_eq!(gap.n_clusters, 2);
    assert!(adjusted_rand_index(&gap.assignment, &f.truth) < 1.0);
}
