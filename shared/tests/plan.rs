//! The round loop knows no method by name: a method that is in no registry (written here, in a
//! test) runs through `federation::run` from a hand-made [`Plan`], with the loop's sampling,
//! cluster-wise FedAvg round, evaluation and records, as a registered method does.

use edgecfl_shared::data::fmnist::FashionMnist;
use edgecfl_shared::data::partition::{PartitionSpec, partition};
use edgecfl_shared::federation::{
    self, Env, FederationConfig, FederationError, Init, Plan, Quiet, RunContext, Strategy,
};
use edgecfl_shared::sim::SimPool;
use edgecfl_shared::train::Backend;

/// Two clusters, fixed: the first half of the clients and the second, each from θ⁰; every
/// round is the default (cluster-wise FedAvg).
struct Halves;

impl Strategy for Halves {
    fn init(&mut self, env: &mut Env<'_>) -> Result<Init, FederationError> {
        let n = env.clients.len();
        let assignment = (0..n).map(|p| usize::from(p >= n / 2)).collect();
        Ok(Init::plain(assignment, env.initial, true))
    }
}

#[test]
fn a_method_outside_the_registry_runs_through_the_loop() {
    let data = FashionMnist::bundled().unwrap();
    let spec: PartitionSpec = "groups:01234-56789".parse().unwrap();
    let part = partition(&spec, &data.train.labels, 6, 1).unwrap();
    let cfg = FederationConfig {
        rounds: 2,
        frac: 1.0,
        epochs: 1,
        seed: 5,
        ..FederationConfig::default()
    };
    let plan = |hierarchical| Plan {
        cfg: &cfg,
        method: "halves",
        strategy: Box::new(Halves),
        hierarchical,
        config: serde_json::json!({ "algorithm": "halves" }),
    };
    let mut pool = SimPool::new(&data, &part, Backend::Flex).unwrap();
    let ctx = RunContext::of_partition(&part);
    let r = federation::run(plan(false), &mut pool, &ctx, &mut Quiet).unwrap();
    assert_eq!(r.method, "halves");
    assert_eq!(r.assignment, [0, 0, 0, 1, 1, 1]);
    assert_eq!((r.n_clusters, r.models.len(), r.rounds.len()), (2, 2, 2));
    assert_ne!(
        r.models[0].values, r.models[1].values,
        "each cluster trained its own model"
    );
    assert!(
        r.rounds
            .iter()
            .all(|x| x.accuracy.is_some() && x.sampled == 6)
    );
    assert!(!r.hierarchical() && r.gps_rounds == 0);
    // A clustering found (`Init::clusters_found`) is scored against the ground truth.
    assert!(r.ari.is_some());

    // The same plan made hierarchical: the loop's GPS step averages the common layers.
    let mut pool = SimPool::new(&data, &part, Backend::Flex).unwrap();
    let h = federation::run(plan(true), &mut pool, &ctx, &mut Quiet).unwrap();
    assert!(h.hierarchical() && h.gps_rounds == 2, "{}", h.gps_rounds);
}
