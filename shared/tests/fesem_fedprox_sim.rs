//! FeSEM and FedProx end to end in process, on the bundled Fashion-MNIST subset.
//!
//! - FeSEM's K-means initialisation recovers a known label-group structure (ARI 1), its EM keeps
//!   it while training, and a newcomer joins its group's centre.
//! - FedProx with μ = 0 is FedAvg exactly (the proximal term vanishes, bit for bit), and a large μ
//!   keeps the global model closer to θ⁰ than FedAvg's.

use edgecfl_shared::algorithms::{self, Algorithm, MethodConfig};
use edgecfl_shared::data::fmnist::FashionMnist;
use edgecfl_shared::data::partition::{PartitionSpec, partition};
use edgecfl_shared::federation::{
    Answer, ClientInfo, ClientPool, FederationConfig, Job, PoolError, Quiet, RunContext,
};
use edgecfl_shared::model::{LayerSet, Params};
use edgecfl_shared::protocol::Encoding;
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
            seed: 7,
            ..FederationConfig::default()
        },
    )
}

#[test]
fn fesem_recovers_label_groups_keeps_them_and_places_newcomers() {
    let data = FashionMnist::bundled().unwrap();
    let spec: PartitionSpec = "groups:012-34-56-789".parse().unwrap();
    // 16 clients: the last 4 (one per group) join at round 2.
    let part = partition(&spec, &data.train.labels, 16, 7).unwrap();
    let truth = part.truth.clone().unwrap();
    for layers in [LayerSet::All, LayerSet::Final] {
        let mut pool = SimPool::new(&data, &part, Backend::Flex).unwrap();
        pool.hold_out(4, 2).unwrap();
        let mut cfg = config(Algorithm::FeSem);
        cfg.federation.clusters = Some(4);
        cfg.federation.rounds = 3;
        cfg.federation.epochs = 3;
        cfg.methods.fesem.fesem_layers = Some(layers.clone());
        let r = algorithms::run(
            &cfg,
            &mut pool,
            &RunContext::with_truth(truth.clone()),
            &mut Quiet,
        )
        .unwrap();
        assert_eq!(r.ari, Some(1.0), "{layers}: {:?}", r.assignment);
        assert_eq!(r.n_clusters, 4);
        // Every round's clusters (newcomers included) still match the groups.
        for rec in &r.rounds {
            assert_eq!(rec.ari, Some(1.0), "{layers} round {}", rec.round);
        }
        assert_eq!(r.newcomers.len(), 4);
        assert!(r.newcomers.iter().all(|n| n.truth_match == Some(true)));
        let acc = r.final_accuracy().unwrap();
        assert!(acc > 0.5, "{layers}: accuracy {acc}");
    }
}

fn distance(a: &Params, b: &Params) -> f64 {
    a.values
        .iter()
        .zip(&b.values)
        .map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2))
        .sum::<f64>()
        .sqrt()
}

#[test]
fn fedprox_with_zero_mu_is_fedavg_and_a_large_mu_stays_near_the_start() {
    let data = FashionMnist::bundled().unwrap();
    let spec: PartitionSpec = "label:2".parse().unwrap();
    let part = partition(&spec, &data.train.labels, 6, 1).unwrap();
    let run = |algorithm, mu| {
        let mut cfg = config(algorithm);
        cfg.federation.mu = mu;
        let mut pool = SimPool::new(&data, &part, Backend::Flex).unwrap();
        algorithms::run(&cfg, &mut pool, &RunContext::default(), &mut Quiet).unwrap()
    };
    let fedavg = run(Algorithm::FedAvg, None);
    let zero = run(Algorithm::FedProx, Some(0.0));
    assert_eq!(zero.models[0].values, fedavg.models[0].values);
    assert_eq!(zero.final_accuracy(), fedavg.final_accuracy());
    let strong = run(Algorithm::FedProx, Some(10.0));
    let cfg = config(Algorithm::FedAvg).federation;
    let start = Params::init(cfg.model, cfg.seed);
    let (d_avg, d_prox) = (
        distance(&fedavg.models[0], &start),
        distance(&strong.models[0], &start),
    );
    assert!(
        d_prox < d_avg,
        "FedProx μ=10 moved {d_prox}, FedAvg {d_avg}"
    );
}

/// A pool whose clients upload in f16 (as `serve --upload f16`'s fleet does), otherwise `P`.
struct F16<P>(P);

impl<P: ClientPool> ClientPool for F16<P> {
    fn clients(&self) -> Vec<ClientInfo> {
        self.0.clients()
    }
    fn run(
        &mut self,
        round: usize,
        jobs: &[(usize, Job<'_>)],
    ) -> Result<Vec<(usize, Answer)>, PoolError> {
        self.0.run(round, jobs)
    }
    fn newcomers(&mut self, round: usize) -> Vec<ClientInfo> {
        self.0.newcomers(round)
    }
    fn upload(&self) -> Encoding {
        Encoding::F16
    }
}

/// Round 0's upload is counted in the pool's upload encoding by the method itself: FeSEM's whole
/// model (44 426 floats for LeNet-5, whatever layers it clusters on) and FedClust's final layer
/// (850 floats), at 4 bytes a float in f32 and 2 in f16.
#[test]
fn round0_bytes_are_counted_in_the_pools_upload_encoding() {
    let data = FashionMnist::bundled().unwrap();
    let spec: PartitionSpec = "groups:012-34-56-789".parse().unwrap();
    let part = partition(&spec, &data.train.labels, 8, 7).unwrap();
    for (algorithm, floats) in [(Algorithm::FeSem, 44_426), (Algorithm::FedClust, 850)] {
        let mut cfg = config(algorithm);
        cfg.federation.rounds = 1;
        cfg.federation.clusters = (algorithm == Algorithm::FeSem).then_some(4);
        cfg.methods.fesem.fesem_layers = Some(LayerSet::Final);
        for (f16, width) in [(false, 4), (true, 2)] {
            let pool = SimPool::new(&data, &part, Backend::Flex).unwrap();
            let r = if f16 {
                algorithms::run(&cfg, &mut F16(pool), &RunContext::default(), &mut Quiet)
            } else {
                let mut pool = pool;
                algorithms::run(&cfg, &mut pool, &RunContext::default(), &mut Quiet)
            }
            .unwrap();
            assert_eq!(r.signature_bytes, floats * width, "{algorithm}, f16 {f16}");
        }
    }
}
