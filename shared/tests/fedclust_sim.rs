//! FedClust end to end in process, on the bundled Fashion-MNIST subset: the one-shot clustering
//! must recover a known label-group structure exactly, and training must beat chance.

use edgecfl_shared::algorithms::fedclust::Threshold;
use edgecfl_shared::cluster::hc::Linkage;
use edgecfl_shared::data::fmnist::FashionMnist;
use edgecfl_shared::data::partition::{PartitionSpec, partition};
use edgecfl_shared::federation::{self, Algorithm, FederationConfig, Quiet, RunContext};
use edgecfl_shared::sim::SimPool;
use edgecfl_shared::train::Backend;

fn config(algorithm: Algorithm) -> FederationConfig {
    FederationConfig {
        algorithm,
        rounds: 2,
        frac: 0.5,
        epochs: 1,
        warmup_epochs: 1,
        threshold: Threshold::Auto,
        linkage: Linkage::Average,
        seed: 7,
        ..FederationConfig::default()
    }
}

#[test]
fn fedclust_recovers_label_groups_and_learns() {
    let data = FashionMnist::bundled().unwrap();
    let spec: PartitionSpec = "groups:012-34-56-789".parse().unwrap();
    let part = partition(&spec, &data.train.labels, 12, 7).unwrap();
    let truth = part.truth.clone().unwrap();
    let mut pool = SimPool::new(&data, &part, Backend::Flex).unwrap();
    let mut cfg = config(Algorithm::FedClust);
    cfg.epochs = 5;
    let r = federation::run(
        &cfg,
        &mut pool,
        &RunContext::with_truth(truth.clone()),
        &mut Quiet,
    )
    .unwrap();
    assert_eq!(
        r.n_clusters, 4,
        "assignment {:?} truth {truth:?}",
        r.assignment
    );
    assert_eq!(r.ari, Some(1.0));
    assert_eq!(r.signature_len, 850);
    assert_eq!(r.rounds.len(), 2);
    // Clients see 2–4 labels each; chance would be ≤ 50 %.
    let acc = r.final_accuracy().unwrap();
    eprintln!("accuracy {acc}");
    assert!(acc > 0.6, "accuracy {acc}");
}

#[test]
fn same_seed_same_run() {
    let data = FashionMnist::bundled().unwrap();
    let spec: PartitionSpec = "label:2".parse().unwrap();
    let part = partition(&spec, &data.train.labels, 6, 1).unwrap();
    let mut cfg = config(Algorithm::FedAvg);
    cfg.rounds = 1;
    let run = || {
        let mut pool = SimPool::new(&data, &part, Backend::Flex).unwrap();
        federation::run(&cfg, &mut pool, &RunContext::default(), &mut Quiet).unwrap()
    };
    let (a, b) = (run(), run());
    assert_eq!(a.models[0].values, b.models[0].values);
    assert_eq!(a.final_accuracy(), b.final_accuracy());
    assert_eq!(a.n_clusters, 1);
}

#[test]
fn local_keeps_one_model_per_client() {
    let data = FashionMnist::bundled().unwrap();
    let spec: PartitionSpec = "label:2".parse().unwrap();
    let part = partition(&spec, &data.train.labels, 4, 3).unwrap();
    let mut pool = SimPool::new(&data, &part, Backend::Flex).unwrap();
    let mut cfg = config(Algorithm::Local);
    cfg.rounds = 1;
    let r = federation::run(&cfg, &mut pool, &RunContext::default(), &mut Quiet).unwrap();
    assert_eq!(r.n_clusters, 4);
    // frac 0.5 of 4 → 2 clients trained; the other two still hold the initial model.
    let initial = edgecfl_shared::model::Params::init(cfg.model, cfg.seed);
    let untouched = r.models.iter().filter(|m| **m == initial).count();
    assert_eq!(untouched, 2);
}
