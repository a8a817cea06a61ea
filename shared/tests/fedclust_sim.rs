//! FedClust end to end in process, on the bundled Fashion-MNIST subset: the one-shot clustering
//! must recover a known label-group structure exactly, and training must beat chance.

use edgecfl_shared::algorithms::{self, Algorithm, MethodConfig};
use edgecfl_shared::cluster::clustering::Lambda;
use edgecfl_shared::cluster::hc::Linkage;
use edgecfl_shared::data::fmnist::FashionMnist;
use edgecfl_shared::data::partition::{PartitionSpec, partition};
use edgecfl_shared::federation::{FederationConfig, Quiet, RunContext};
use edgecfl_shared::sim::SimPool;
use edgecfl_shared::train::Backend;

fn config(algorithm: Algorithm) -> MethodConfig {
    MethodConfig::new(
        algorithm,
        FederationConfig {
            rounds: 2,
            frac: 0.5,
            epochs: 1,
            warmup_epochs: 1,
            lambda: Lambda::Auto,
            linkage: Linkage::Average,
            seed: 7,
            ..FederationConfig::default()
        },
    )
}

#[test]
fn fedclust_recovers_label_groups_and_learns() {
    let data = FashionMnist::bundled().unwrap();
    let spec: PartitionSpec = "groups:012-34-56-789".parse().unwrap();
    let part = partition(&spec, &data.train.labels, 12, 7).unwrap();
    let truth = part.truth.clone().unwrap();
    let mut pool = SimPool::new(&data, &part, Backend::Flex).unwrap();
    let mut cfg = config(Algorithm::FedClust);
    cfg.federation.epochs = 5;
    let r = algorithms::run(
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
    cfg.federation.rounds = 1;
    let run = || {
        let mut pool = SimPool::new(&data, &part, Backend::Flex).unwrap();
        algorithms::run(&cfg, &mut pool, &RunContext::default(), &mut Quiet).unwrap()
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
    cfg.federation.rounds = 1;
    let r = algorithms::run(&cfg, &mut pool, &RunContext::default(), &mut Quiet).unwrap();
    assert_eq!(r.n_clusters, 4);
    // frac 0.5 of 4 → 2 clients trained; the other two still hold the initial model.
    let initial = edgecfl_shared::model::Params::init(cfg.federation.model, cfg.federation.seed);
    let untouched = r.models.iter().filter(|m| **m == initial).count();
    assert_eq!(untouched, 2);
}

/// `--cluster-start members`: the same clusters as the paper's start (the signature layers are
/// cut out of the whole warmed-up model the clients now upload), and each cluster model starts
/// from its members' mean, here checked against another run's centroids: a run that clusters on
/// every layer keeps, per cluster, the mean of its members' whole warmed-up models.
#[test]
fn cluster_start_members_starts_each_cluster_from_its_members_mean() {
    use edgecfl_shared::algorithms::fedclust::ClusterStart;
    use edgecfl_shared::federation::Weighting;
    use edgecfl_shared::model::LayerSet;
    let data = FashionMnist::bundled().unwrap();
    let spec: PartitionSpec = "groups:012-34-56-789".parse().unwrap();
    let part = partition(&spec, &data.train.labels, 12, 7).unwrap();
    let truth = part.truth.clone().unwrap();
    let run = |cfg: &MethodConfig| {
        let mut pool = SimPool::new(&data, &part, Backend::Flex).unwrap();
        algorithms::run(
            cfg,
            &mut pool,
            &RunContext::with_truth(truth.clone()),
            &mut Quiet,
        )
        .unwrap()
    };
    let mut cfg = config(Algorithm::FedClust);
    cfg.federation.rounds = 0;
    cfg.federation.weighting = Weighting::Equal;
    let paper = run(&cfg);
    let mut every_layer = cfg.clone();
    every_layer.federation.signature_layers = LayerSet::All;
    every_layer.federation.lambda = Lambda::Clusters(paper.n_clusters);
    let every_layer = run(&every_layer);
    cfg.methods.fedclust.cluster_start = Some(ClusterStart::Members);
    let members = run(&cfg);
    assert_eq!(paper.ari, Some(1.0));
    assert_eq!(members.assignment, paper.assignment);
    assert_eq!(every_layer.assignment, paper.assignment);
    assert_eq!((paper.signature_len, members.signature_len), (850, 44_426));
    let centroids = &every_layer.clustering.as_ref().unwrap().centroids;
    assert_eq!(members.models.len(), centroids.len());
    for (k, (m, c)) in members.models.iter().zip(centroids).enumerate() {
        let worst = m
            .values
            .iter()
            .zip(c)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            worst < 1e-6,
            "cluster {k}: start differs from the members' mean by {worst}"
        );
        // Not θ⁰: the paper's run starts (and, after no round, ends) there.
        assert_ne!(m.values, paper.models[k].values);
    }
}

use crate::real_data;

/// FedClust on CIFAR-10 (its JPEG copy, the first 200 training and 50 test images of each class):
/// the colour LeNet-5 trains, its 850-float final layer separates two label groups exactly, and
/// after three rounds the clusters' models beat the 20 % of chance on their five labels (a
/// check that it learns, not a figure: BENCHMARKS has those). Reads `../shared/data`.
#[test]
fn fedclust_on_cifar10_recovers_label_groups_with_the_colour_lenet5() {
    use edgecfl_shared::data::{DatasetKind, Splits};
    use edgecfl_shared::model::ModelKind;
    let Some(dir) = real_data::cifar10_jpg() else {
        return;
    };
    let full = edgecfl_shared::data::load(DatasetKind::Cifar10, Some(&dir)).unwrap();
    let first = |set: &edgecfl_shared::data::Dataset, per_class: usize| {
        let mut seen = [0usize; 10];
        let idx: Vec<usize> = (0..set.len())
            .filter(|&i| {
                let c = &mut seen[usize::from(set.labels[i])];
                *c += 1;
                *c <= per_class
            })
            .collect();
        set.select(&idx)
    };
    let data = Splits {
        train: first(&full.train, 200),
        test: first(&full.test, 50),
        ..full
    };
    let spec: PartitionSpec = "groups:01234-56789".parse().unwrap();
    let part = partition(&spec, &data.train.labels, 8, 3).unwrap();
    let truth = part.truth.clone().unwrap();
    let mut pool = SimPool::new(&data, &part, Backend::Flex).unwrap();
    let mut cfg = config(Algorithm::FedClust);
    cfg.federation.dataset = DatasetKind::Cifar10;
    cfg.federation.model = ModelKind::LeNet5Rgb;
    cfg.federation.epochs = 4;
    cfg.federation.rounds = 3;
    cfg.federation.lr = 0.05;
    cfg.federation.frac = 1.0;
    let r = algorithms::run(&cfg, &mut pool, &RunContext::with_truth(truth), &mut Quiet).unwrap();
    assert_eq!(r.ari, Some(1.0), "assignment {:?}", r.assignment);
    assert_eq!(r.signature_len, 850);
    let acc = r.final_accuracy().unwrap();
    eprintln!("CIFAR-10 accuracy {acc}");
    assert!(acc > 0.25, "accuracy {acc}");
}

/// FedClust on a CIFAR-100 written in its binary format (coarse label, fine label, image) and
/// read with its 20 coarse labels: Fashion-MNIST's images framed to 3×32×32, every other one
/// relabelled `label + 10`. The colour LeNet-5 gets 20 outputs (a 1 700-float final layer),
/// FedClust separates the two groups of ten coarse labels exactly, and the clusters' models beat
/// the 10 % of chance on their labels (a check that it learns).
#[test]
fn fedclust_on_cifar100_coarse_labels_recovers_label_groups() {
    use edgecfl_shared::data::{DatasetKind, partition_of};
    use edgecfl_shared::model::ModelKind;
    let fm = FashionMnist::bundled().unwrap();
    let dir = std::env::temp_dir().join(format!("edgecfl-c100-sim-{}", std::process::id()));
    let bin = dir.join("cifar-100-binary");
    std::fs::create_dir_all(&bin).unwrap();
    for (name, set, n) in [("train.bin", &fm.train, 2000), ("test.bin", &fm.test, 600)] {
        let mut bytes = Vec::new();
        for j in 0..n {
            let coarse = set.labels[j] + 10 * (j % 2) as u8;
            bytes.extend([coarse, coarse * 5]);
            crate::common::grey28_to_rgb32(set.image(j), &mut bytes);
        }
        std::fs::write(bin.join(name), bytes).unwrap();
    }
    let data = edgecfl_shared::data::load(DatasetKind::Cifar100Coarse, Some(&dir)).unwrap();
    assert_eq!(data.train.labels.iter().max(), Some(&19));
    let spec: PartitionSpec = "groups:0,1,2,3,4,10,11,12,13,14-5,6,7,8,9,15,16,17,18,19"
        .parse()
        .unwrap();
    let part = partition_of(&spec, &data.train.labels, 20, None, 6, 3).unwrap();
    let truth = part.truth.clone().unwrap();
    let mut pool = SimPool::new(&data, &part, Backend::Flex).unwrap();
    let mut cfg = config(Algorithm::FedClust);
    cfg.federation.dataset = DatasetKind::Cifar100Coarse;
    cfg.federation.model = ModelKind::LeNet5Rgb;
    cfg.federation.epochs = 3;
    cfg.federation.lr = 0.05;
    cfg.federation.frac = 1.0;
    let r = algorithms::run(&cfg, &mut pool, &RunContext::with_truth(truth), &mut Quiet).unwrap();
    assert_eq!(r.ari, Some(1.0), "assignment {:?}", r.assignment);
    assert_eq!(r.signature_len, 84 * 20 + 20);
    assert!(r.models.iter().all(|m| m.classes() == 20));
    let acc = r.final_accuracy().unwrap();
    eprintln!("CIFAR-100 (coarse) accuracy {acc}");
    assert!(acc > 0.2, "accuracy {acc}");
    std::fs::remove_dir_all(&dir).unwrap();
}
