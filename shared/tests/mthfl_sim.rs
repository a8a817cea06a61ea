//! MT-HFL end to end in process (`federation::run` over a `SimPool`), on the bundled
//! Fashion-MNIST subset split by `tasks:fmnist3` over 10 clients (5 clothes, 3 shoes, 2 bags):
//! the one-shot clustering must find the tasks, and the GPS must leave every cluster model with
//! the same common layers and its own other layers.

use std::sync::OnceLock;

use edgecfl_shared::algorithms::{self, Algorithm, MethodConfig};
use edgecfl_shared::cluster::clustering::Lambda;
use edgecfl_shared::cluster::spectral::Relevance;
use edgecfl_shared::data::fmnist::FashionMnist;
use edgecfl_shared::data::partition::{Partition, PartitionSpec, partition};
use edgecfl_shared::federation::{FederationConfig, Quiet, RunContext, RunResult};
use edgecfl_shared::model::{ModelKind, ParamLayout, Params};
use edgecfl_shared::protocol::Encoding;
use edgecfl_shared::sim::SimPool;
use edgecfl_shared::train::Backend;

const CLIENTS: usize = 10;

fn data() -> &'static edgecfl_shared::data::Splits {
    static DATA: OnceLock<edgecfl_shared::data::Splits> = OnceLock::new();
    DATA.get_or_init(|| FashionMnist::bundled().expect("the bundled subset loads"))
}

fn split(seed: u64) -> Partition {
    let spec: PartitionSpec = "tasks:fmnist3".parse().unwrap();
    partition(&spec, &data().train.labels, CLIENTS, seed).unwrap()
}

fn config(algorithm: Algorithm) -> MethodConfig {
    MethodConfig::new(
        algorithm,
        FederationConfig {
            model: ModelKind::Mlp,
            rounds: 2,
            frac: 1.0,
            epochs: 1,
            batch_size: 10,
            lr: 0.05,
            lambda: Lambda::Clusters(3),
            seed: 3,
            ..FederationConfig::default()
        },
    )
}

fn run(cfg: &MethodConfig, part: &Partition) -> RunResult {
    let mut pool = SimPool::new(data(), part, Backend::Flex).unwrap();
    algorithms::run(cfg, &mut pool, &RunContext::of_partition(part), &mut Quiet).unwrap()
}

/// The floats of `layer` (weight and bias) of a model.
fn layer(p: &Params, name: &str) -> Vec<f32> {
    ParamLayout::of(p.model)
        .entries
        .iter()
        .filter(|e| e.layer() == name)
        .flat_map(|e| p.values[e.range()].to_vec())
        .collect()
}

/// Every pair of cluster models has the same `common` layer and different `other` layers.
fn assert_shared_and_own(r: &RunResult, common: &str, other: &str) {
    let models = &r.models;
    assert!(models.len() >= 2);
    for a in 0..models.len() {
        for b in a + 1..models.len() {
            assert_eq!(
                layer(&models[a], common),
                layer(&models[b], common),
                "clusters {a} and {b}: {common} differs after a GPS round"
            );
            assert_ne!(
                layer(&models[a], other),
                layer(&models[b], other),
                "clusters {a} and {b}: {other} was shared too"
            );
        }
    }
}

#[test]
fn mthfl_finds_the_tasks_and_shares_only_the_common_layer() {
    let part = split(3);
    let truth = part.truth.clone().unwrap();
    assert_eq!(truth, vec![0, 0, 0, 0, 0, 1, 1, 1, 2, 2]);
    let cfg = config(Algorithm::MtHfl);
    let r = run(&cfg, &part);
    assert_eq!(r.ari, Some(1.0), "assignment {:?}", r.assignment);
    assert_eq!(r.n_clusters, 3);
    // k = 5 eigenvectors of d = 784 and their eigenvalues, in f32.
    assert_eq!(r.signature_len, 5 * 784 + 5);
    assert_eq!(r.signature_bytes, 4 * (5 * 784 + 5));
    // R: symmetric, 1 on the diagonal, a task's users closer to each other than to others.
    let rel = r.relevance.as_ref().unwrap();
    for i in 0..CLIENTS {
        assert_eq!(rel[i][i], 1.0);
        for j in 0..CLIENTS {
            assert_eq!(rel[i][j], rel[j][i]);
            if truth[i] == truth[j] && i != j {
                for k in (0..CLIENTS).filter(|&k| truth[k] != truth[i]) {
                    assert!(rel[i][j] > rel[i][k], "R({i},{j}) ≤ R({i},{k})");
                }
            }
        }
    }
    // One GPS round after each of the 2 rounds; the MLP shares fc1, keeps its own fc2.
    assert_eq!(r.gps_rounds, 2);
    assert!(r.rounds.iter().all(|x| x.gps));
    assert_eq!(r.common_layers.as_deref(), Some("fc1"));
    assert_eq!(r.common_len, 784 * 32 + 32);
    assert_shared_and_own(&r, "fc1", "fc2");
    // Per-task accuracy on each task's own labels; clothes (6 labels) and shoes (3) well above
    // chance after 2 rounds.
    let tasks = r.rounds.last().unwrap().task_accuracy.clone().unwrap();
    assert_eq!(tasks.len(), 3);
    assert!(tasks[0] > 0.5 && tasks[1] > 0.6, "{tasks:?}");
}

#[test]
fn server_side_relevance_gives_the_same_clusters() {
    let part = split(3);
    let mut cfg = config(Algorithm::MtHfl);
    cfg.federation.rounds = 0;
    let paper = run(&cfg, &part);
    cfg.methods.mthfl.relevance = Some(Relevance::Server);
    cfg.methods.mthfl.signature_encoding = Some(Encoding::F16);
    let server = run(&cfg, &part);
    assert_eq!(server.ari, Some(1.0));
    assert_eq!(server.assignment, paper.assignment);
    assert_eq!(server.signature_bytes, 2 * (5 * 784 + 5));
    assert!(server.rounds.is_empty() && server.gps_rounds == 0);
}

#[test]
fn gps_every_lps_rounds() {
    let part = split(4);
    let mut cfg = config(Algorithm::MtHfl);
    cfg.federation.rounds = 3;
    cfg.federation.lps_rounds = 2;
    let r = run(&cfg, &part);
    let gps: Vec<bool> = r.rounds.iter().map(|x| x.gps).collect();
    assert_eq!(gps, vec![false, true, false]);
    assert_eq!(r.gps_rounds, 1);
    // Round 3 trained after the last GPS round: each LPS moved its fc1 again.
    assert_ne!(layer(&r.models[0], "fc1"), layer(&r.models[1], "fc1"));
}

#[test]
fn random_clusters_and_fedclust_feed_the_same_hierarchy() {
    let part = split(5);
    let mut cfg = config(Algorithm::Random);
    cfg.federation.hierarchy = true;
    cfg.federation.rounds = 1;
    let r = run(&cfg, &part);
    let mut sizes = [0usize; 3];
    r.assignment.iter().for_each(|&c| sizes[c] += 1);
    sizes.sort_unstable();
    assert_eq!(sizes, [3, 3, 4]);
    assert!(r.ari.is_some());
    assert_eq!(r.gps_rounds, 1);
    assert_shared_and_own(&r, "fc1", "fc2");

    // Without --hierarchy nothing is shared.
    cfg.federation.hierarchy = false;
    let flat = run(&cfg, &part);
    assert_eq!(flat.gps_rounds, 0);
    assert_ne!(layer(&flat.models[0], "fc1"), layer(&flat.models[1], "fc1"));

    // FedClust's clusters (final-layer weights) under LPS/GPS, sharing fc2 this time.
    let mut cfg = config(Algorithm::FedClust);
    cfg.federation.hierarchy = true;
    cfg.federation.rounds = 1;
    cfg.federation.common_layers = Some("fc2".parse().unwrap());
    let r = run(&cfg, &part);
    assert!(r.n_clusters >= 2, "{:?}", r.assignment);
    assert_eq!(r.gps_rounds, 1);
    assert_shared_and_own(&r, "fc2", "fc1");
}

#[test]
fn newcomers_join_the_cluster_of_their_task() {
    // 20 clients: 10 clothes, 6 shoes and 4 bags users (clients 16-19); the last two join at
    // round 1 and must land with bags users 16 and 17, whichever side computes the relevance.
    let spec: PartitionSpec = "tasks:fmnist3".parse().unwrap();
    let part = partition(&spec, &data().train.labels, 20, 3).unwrap();
    for relevance in [Relevance::Client, Relevance::Server] {
        let mut cfg = config(Algorithm::MtHfl);
        cfg.federation.rounds = 1;
        cfg.methods.mthfl.relevance = Some(relevance);
        let mut pool = SimPool::new(data(), &part, Backend::Flex).unwrap();
        pool.hold_out(2, 1).unwrap();
        let r = algorithms::run(
            &cfg,
            &mut pool,
            &RunContext::of_partition(&part),
            &mut Quiet,
        )
        .unwrap();
        assert_eq!(r.ari, Some(1.0), "{relevance}");
        assert!(r.dropped_newcomers.is_empty(), "{:?}", r.dropped_newcomers);
        assert_eq!(r.newcomers.len(), 2);
        let bags = r.assignment[16];
        assert_eq!(r.assignment[17], bags);
        for n in &r.newcomers {
            assert_eq!((n.round, n.cluster), (1, bags), "{relevance}: {n:?}");
            assert_eq!(n.truth_match, Some(true));
            let d = n.distance.unwrap();
            assert!((0.0..1.0).contains(&d), "{d}");
        }
        assert_eq!(r.assignment[18..], [bags, bags]);
    }
}
