//! AdaCFL end to end in process, on the bundled Fashion-MNIST subset: the pre-clustering and HC
//! recover known label groups exactly, training beats chance, and newcomers join their group's
//! cluster or, farther than ε from every cluster, found a new one.

use edgecfl_shared::algorithms::{self, Algorithm, MethodConfig};
use edgecfl_shared::cluster::clustering::Lambda;
use edgecfl_shared::cluster::hc::Linkage;
use edgecfl_shared::data::fmnist::FashionMnist;
use edgecfl_shared::data::partition::{Partition, PartitionSpec, partition};
use edgecfl_shared::federation::{FederationConfig, Quiet, RunContext};
use edgecfl_shared::sim::SimPool;
use edgecfl_shared::train::Backend;

fn config(lambda: Lambda) -> MethodConfig {
    MethodConfig::new(
        Algorithm::AdaCfl,
        FederationConfig {
            rounds: 2,
            frac: 0.5,
            epochs: 2,
            warmup_epochs: 1,
            lambda,
            linkage: Linkage::Average,
            seed: 7,
            ..FederationConfig::default()
        },
    )
}

fn parts(spec: &str, n: usize) -> (edgecfl_shared::data::Splits, Partition) {
    let data = FashionMnist::bundled().unwrap();
    let spec: PartitionSpec = spec.parse().unwrap();
    let part = partition(&spec, &data.train.labels, n, 7).unwrap();
    (data, part)
}

#[test]
fn label_groups_pre_clustered_then_split_by_hc() {
    // groups:012-34-56-789: L = 3 for groups 0 and 3, L = 2 for groups 1 and 2, so the
    // pre-clustering makes (at least) two pre-clusters and HC splits each in two.
    let (data, part) = parts("groups:012-34-56-789", 12);
    let truth = part.truth.clone().unwrap();
    let mut pool = SimPool::new(&data, &part, Backend::Flex).unwrap();
    let mut cfg = config(Lambda::Distance(0.2));
    cfg.federation.epochs = 5;
    let r = algorithms::run(&cfg, &mut pool, &RunContext::with_truth(truth), &mut Quiet).unwrap();
    assert_eq!(r.n_clusters, 4, "{:?}", r.assignment);
    assert_eq!(r.ari, Some(1.0));
    // The smallest FC layer of LeNet-5 (fc3: 84 × 10 + 10), plus L and s.
    assert_eq!(r.signature_len, 850);
    assert_eq!(r.signature_bytes, 850 * 4 + 12);
    // Several pre-clusters: no single dendrogram to report, but the distances are there.
    assert!(r.clustering.is_none());
    assert_eq!(r.distances.as_ref().map(|d| d.n()), Some(12));
    // Clients see 2-3 labels each: chance is ≤ 50 %.
    let acc = r.final_accuracy().unwrap();
    eprintln!("groups: accuracy {acc}");
    assert!(acc > 0.6, "accuracy {acc}");
}

#[test]
fn pairs_form_one_pre_cluster_and_ten_clusters() {
    // pairs: every client holds two equally split labels (L = 2, s = 1 bit), so there is one
    // pre-cluster and the clustering is one tree, reported like FedClust's.
    let (data, part) = parts("pairs", 20);
    let truth = part.truth.clone().unwrap();
    let mut pool = SimPool::new(&data, &part, Backend::Flex).unwrap();
    let mut cfg = config(Lambda::Auto);
    cfg.federation.rounds = 1;
    cfg.federation.frac = 0.25;
    cfg.federation.epochs = 1;
    let r = algorithms::run(&cfg, &mut pool, &RunContext::with_truth(truth), &mut Quiet).unwrap();
    assert_eq!(r.n_clusters, 10, "{:?}", r.assignment);
    assert_eq!(r.ari, Some(1.0));
    let c = r.clustering.as_ref().expect("one pre-cluster, one tree");
    assert_eq!(c.assignment, r.assignment);
    assert!(c.threshold > 0.0);
    // Pre-clustering off: the same tree, the same clusters.
    let mut pool = SimPool::new(&data, &part, Backend::Flex).unwrap();
    cfg.methods.adacfl.pre_cluster = Some(false);
    let off = algorithms::run(&cfg, &mut pool, &RunContext::default(), &mut Quiet).unwrap();
    assert_eq!(off.assignment, r.assignment);
    assert_eq!(off.signature_bytes, 850 * 4);
}

/// 12 clients of `groups:012-34-56-789` (group `i % 4`) reordered so that the last four are one
/// client of group 0 and the three of group 3: round 0 sees groups 0-2 only.
fn unseen_group() -> (edgecfl_shared::data::Splits, Partition, Vec<usize>) {
    let (data, mut part) = parts("groups:012-34-56-789", 12);
    let truth = part.truth.clone().unwrap();
    let mut order: Vec<usize> = (0..12).filter(|&i| truth[i] != 3 && i != 8).collect();
    order.push(8);
    order.extend((0..12).filter(|&i| truth[i] == 3));
    part.clients = order.iter().map(|&i| part.clients[i].clone()).collect();
    let truth: Vec<usize> = order.iter().map(|&i| truth[i]).collect();
    part.truth = Some(truth.clone());
    (data, part, truth)
}

#[test]
fn newcomers_join_or_found_clusters_by_epsilon() {
    let (data, part, truth) = unseen_group();
    assert_eq!(truth[8..], [0, 3, 3, 3]);
    let run = |epsilon: Option<f64>| {
        let mut pool = SimPool::new(&data, &part, Backend::Flex).unwrap();
        pool.hold_out(4, 1).unwrap();
        let mut cfg = config(Lambda::Distance(0.2));
        cfg.federation.rounds = 1;
        cfg.federation.epochs = 1;
        cfg.methods.adacfl.epsilon = epsilon;
        algorithms::run(
            &cfg,
            &mut pool,
            &RunContext::with_truth(truth.clone()),
            &mut Quiet,
        )
        .unwrap()
    };
    // The paper's ε = 1.8 is far above the distances here: everybody joins an existing cluster.
    let r = run(None);
    assert_eq!(r.ari, Some(1.0), "{:?}", r.assignment);
    let d: Vec<f64> = r.newcomers.iter().map(|n| n.distance.unwrap()).collect();
    eprintln!("newcomer distances {d:?}, clusters {:?}", r.assignment);
    assert_eq!(r.n_clusters, 3);
    assert_eq!(r.newcomers.len(), 4);
    let g0 = r.assignment[0];
    assert_eq!(r.newcomers[0].cluster, g0);
    assert_eq!(r.newcomers[0].truth_match, Some(true));
    // ε between the group-0 newcomer's distance and the unseen group's: the first group-3
    // newcomer founds cluster 3, the other two join it (their distance to its upload is small).
    let epsilon = (d[0] + d[1..].iter().copied().fold(f64::MAX, f64::min)) / 2.0;
    let r = run(Some(epsilon));
    let placed: Vec<usize> = r.newcomers.iter().map(|n| n.cluster).collect();
    assert_eq!(placed, vec![g0, 3, 3, 3], "ε {epsilon}");
    assert_eq!(r.n_clusters, 4);
    assert_eq!(r.models.len(), 4);
    // Judged against the truth of all 12, the final assignment is exact.
    let ari = edgecfl_shared::cluster::adjusted_rand_index(&r.assignment, &truth);
    assert_eq!(ari, 1.0);
    assert!(r.final_client_accuracy.iter().all(|a| a.is_finite()));
}
