//! FedClust's newcomers (Algorithm 2) in process, on the bundled Fashion-MNIST subset: clients
//! held out of round 0 train θ⁰ with round 0's warm-up, join the cluster of nearest centroid, and
//! are trained and evaluated from their join round on; a newcomer with a bad upload is dropped
//! with its reason while the run completes.

use std::collections::BTreeSet;

use edgecfl_shared::algorithms::{self, Algorithm, MethodConfig};
use edgecfl_shared::cluster::clustering::Lambda;
use edgecfl_shared::cluster::hc::Linkage;
use edgecfl_shared::data::fmnist::FashionMnist;
use edgecfl_shared::data::partition::{PartitionSpec, partition};
use edgecfl_shared::federation::{
    self, Answer, ClientInfo, ClientPool, FederationConfig, Job, NewcomerError, Observer,
    PoolError, RunContext, RunResult,
};
use edgecfl_shared::sim::SimPool;
use edgecfl_shared::train::Backend;

/// 12 clients in 4 label groups (client `i` in group `i % 4`); the last 4 (one per group) are
/// the newcomers.
const CLIENTS: usize = 12;
const NEWCOMERS: usize = 4;

fn config(algorithm: Algorithm, rounds: usize) -> MethodConfig {
    MethodConfig::new(
        algorithm,
        FederationConfig {
            rounds,
            frac: 1.0,
            epochs: 1,
            warmup_epochs: 1,
            lambda: Lambda::Auto,
            linkage: Linkage::Average,
            seed: 7,
            ..FederationConfig::default()
        },
    )
}

/// A [`SimPool`] that records who it was asked to train and evaluate in each round, and can
/// replace the round-0 upload of chosen clients (a faulty newcomer device).
struct Recording {
    inner: SimPool,
    trained: Vec<(usize, Vec<usize>)>,
    evaluated: Vec<(usize, Vec<usize>)>,
    corrupt: Vec<(usize, Vec<f32>)>,
}

impl Recording {
    fn new(newcomers: usize, join_round: usize, partition_clients: usize) -> (Self, Vec<usize>) {
        let data = FashionMnist::bundled().unwrap();
        let spec: PartitionSpec = "groups:012-34-56-789".parse().unwrap();
        let part = partition(&spec, &data.train.labels, partition_clients, 7).unwrap();
        let truth = part.truth.clone().unwrap();
        let mut inner = SimPool::new(&data, &part, Backend::Flex).unwrap();
        inner.hold_out(newcomers, join_round).unwrap();
        let pool = Recording {
            inner,
            trained: Vec::new(),
            evaluated: Vec::new(),
            corrupt: Vec::new(),
        };
        (pool, truth)
    }

    fn in_round(log: &[(usize, Vec<usize>)], round: usize) -> BTreeSet<usize> {
        log.iter()
            .filter(|(r, _)| *r == round)
            .flat_map(|(_, c)| c.iter().copied())
            .collect()
    }
}

impl ClientPool for Recording {
    fn clients(&self) -> Vec<ClientInfo> {
        self.inner.clients()
    }
    fn newcomers(&mut self, round: usize) -> Vec<ClientInfo> {
        self.inner.newcomers(round)
    }
    fn run(
        &mut self,
        round: usize,
        jobs: &[(usize, Job<'_>)],
    ) -> Result<Vec<(usize, Answer)>, PoolError> {
        let of = |pred: fn(&Job<'_>) -> bool| -> Vec<usize> {
            jobs.iter()
                .filter(|(_, j)| pred(j))
                .map(|(c, _)| *c)
                .collect()
        };
        let trained = of(|j| matches!(j, Job::Train(_)));
        if !trained.is_empty() {
            self.trained.push((round, trained));
        }
        let evaluated = of(|j| matches!(j, Job::Evaluate(_)));
        if !evaluated.is_empty() {
            self.evaluated.push((round, evaluated));
        }
        let mut answers = self.inner.run(round, jobs)?;
        for (c, a) in &mut answers {
            if let (Answer::Signature(s), Some((_, bad))) =
                (a, self.corrupt.iter().find(|(b, _)| b == c))
            {
                s.values = bad.clone();
            }
        }
        Ok(answers)
    }
}

/// Counts what the observer is told.
#[derive(Default)]
struct Told {
    placed: Vec<usize>,
    dropped: Vec<usize>,
}

impl Observer for Told {
    fn newcomer(&mut self, n: &federation::Newcomer) {
        self.placed.push(n.client.index);
    }
    fn newcomer_dropped(&mut self, d: &federation::DroppedNewcomer) {
        self.dropped.push(d.client.index);
    }
}

fn run(pool: &mut Recording, cfg: &MethodConfig, truth: &[usize]) -> (RunResult, Told) {
    let mut told = Told::default();
    let r = algorithms::run(
        cfg,
        pool,
        &RunContext::with_truth(truth.to_vec()),
        &mut told,
    )
    .unwrap();
    (r, told)
}

#[test]
fn newcomers_join_their_groups_cluster_and_then_train() {
    let (mut pool, truth) = Recording::new(NEWCOMERS, 2, CLIENTS);
    let cfg = config(Algorithm::FedClust, 2);
    let (r, told) = run(&mut pool, &cfg, &truth);
    let round_zero = CLIENTS - NEWCOMERS;
    // Round 0 saw only the first 8 clients and found the 4 groups.
    assert_eq!(r.n_clusters, 4, "{:?}", r.assignment);
    assert_eq!(r.ari, Some(1.0));
    assert!(r.dropped_newcomers.is_empty(), "{:?}", r.dropped_newcomers);
    assert_eq!(r.newcomers.len(), NEWCOMERS);
    assert_eq!(told.placed, (round_zero..CLIENTS).collect::<Vec<_>>());
    for n in &r.newcomers {
        let i = n.client.index;
        // The cluster of the round-0 members of its group.
        let mate = (0..round_zero).find(|&j| truth[j] == truth[i]).unwrap();
        assert_eq!(n.cluster, r.assignment[mate], "newcomer {i}");
        assert_eq!(n.truth_match, Some(true), "newcomer {i}");
        assert_eq!(n.round, 2);
        assert!(n.distance.is_some_and(|d| d.is_finite() && d >= 0.0));
    }
    assert_eq!(r.clients.len(), CLIENTS);
    assert_eq!(r.assignment.len(), CLIENTS);
    // Round 1: the newcomers were not there yet; round 2 trained and evaluated them.
    let newcomers: BTreeSet<usize> = (round_zero..CLIENTS).collect();
    let t1 = Recording::in_round(&pool.trained, 1);
    let t2 = Recording::in_round(&pool.trained, 2);
    assert_eq!(t1, (0..round_zero).collect(), "round 1 trained {t1:?}");
    assert!(newcomers.is_subset(&t2), "round 2 trained {t2:?}");
    assert!(Recording::in_round(&pool.evaluated, 1).is_disjoint(&newcomers));
    let e2 = Recording::in_round(&pool.evaluated, 2);
    assert!(newcomers.is_subset(&e2), "round 2 evaluated {e2:?}");
    assert_eq!(r.final_client_accuracy.len(), CLIENTS);
    for (i, a) in r.final_client_accuracy.iter().enumerate() {
        assert!(a.is_finite() && *a > 0.0, "client {i}: {a}");
    }
    // Per-task accuracy covers the newcomers too.
    assert_eq!(r.n_tasks(), 4);
}

#[test]
fn bad_newcomer_uploads_are_dropped_and_the_run_completes() {
    let (mut pool, truth) = Recording::new(3, 1, 11);
    // 11 clients, the last 3 (8, 9, 10) join at round 1; 9 uploads a NaN, 10 a short layer.
    let mut nan = vec![0.0f32; 850];
    nan[17] = f32::NAN;
    pool.corrupt = vec![(9, nan), (10, vec![0.0; 849])];
    let cfg = config(Algorithm::FedClust, 1);
    let (r, told) = run(&mut pool, &cfg, &truth);
    assert_eq!(r.rounds.len(), 1);
    assert!(r.final_accuracy().is_some());
    assert_eq!(told.placed, vec![8]);
    assert_eq!(told.dropped, vec![9, 10]);
    let reasons: Vec<(usize, NewcomerError)> = r
        .dropped_newcomers
        .iter()
        .map(|d| (d.client.index, d.reason.clone()))
        .collect();
    assert_eq!(
        reasons,
        vec![
            (9, NewcomerError::NotFinite { index: 17 }),
            (
                10,
                NewcomerError::WrongLength {
                    expected: 850,
                    got: 849
                }
            ),
        ]
    );
    // The dropped ones are never asked anything again; the good one trains in round 1.
    let t1 = Recording::in_round(&pool.trained, 1);
    assert!(
        t1.contains(&8) && !t1.contains(&9) && !t1.contains(&10),
        "{t1:?}"
    );
    assert!(!Recording::in_round(&pool.evaluated, 1).contains(&9));
    assert_eq!(r.clients.len(), 9);
    assert_eq!(r.newcomers[0].truth_match, Some(true));
}

#[test]
fn other_algorithms_place_or_drop_newcomers() {
    for algorithm in [Algorithm::FedAvg, Algorithm::Local] {
        let (mut pool, truth) = Recording::new(1, 1, 4);
        let mut cfg = config(algorithm, 1);
        cfg.federation.frac = 0.25;
        let (r, _) = run(&mut pool, &cfg, &truth);
        assert_eq!(r.newcomers.len(), 1, "{algorithm}");
        let n = &r.newcomers[0];
        assert_eq!(n.distance, None);
        match algorithm {
            Algorithm::FedAvg => assert_eq!((n.cluster, r.n_clusters), (0, 1)),
            _ => assert_eq!((n.cluster, r.n_clusters, r.models.len()), (3, 4, 4)),
        }
        // Its first evaluation happened.
        assert!(r.final_client_accuracy[3].is_finite(), "{algorithm}");
    }
    // Random: the smallest group (3 round-0 clients in k = 2 groups of 2 and 1).
    let (mut pool, truth) = Recording::new(1, 1, 4);
    let mut cfg = config(Algorithm::Random, 1);
    cfg.federation.lambda = Lambda::Clusters(2);
    let (r, _) = run(&mut pool, &cfg, &truth);
    let small = usize::from(r.assignment[..3].iter().filter(|&&a| a == 0).count() == 2);
    assert_eq!(r.newcomers[0].cluster, small, "{:?}", r.assignment);
    // MT-HFL places it by relevance (tests/mthfl_sim.rs checks where); the run goes on.
    let (mut pool, truth) = Recording::new(1, 1, 4);
    let mut cfg = config(Algorithm::MtHfl, 1);
    cfg.federation.model = edgecfl_shared::model::ModelKind::Mlp;
    cfg.federation.lambda = Lambda::Clusters(2);
    let (r, told) = run(&mut pool, &cfg, &truth);
    assert!(told.dropped.is_empty(), "{:?}", r.dropped_newcomers);
    assert_eq!(
        (r.clients.len(), r.newcomers.len(), r.rounds.len()),
        (4, 1, 1)
    );
    // Nothing held out is nothing handed over.
    let (mut pool, _) = Recording::new(0, 1, 4);
    assert!(pool.newcomers(1).is_empty());
    assert_eq!(pool.clients().len(), 4);
    assert!(pool.inner.hold_out(3, 1).is_err());
    assert!(pool.inner.hold_out(1, 0).is_err());
}

/// FedClust's Table 6: newcomers join after the federation (`join_round = rounds + 1`), take
/// their cluster's model, personalise it for a few epochs and are scored on the result.
#[test]
fn newcomers_join_after_the_federation_and_personalise() {
    let (mut pool, truth) = Recording::new(NEWCOMERS, 3, CLIENTS);
    let mut cfg = config(Algorithm::FedClust, 2);
    cfg.federation.epochs = 3;
    cfg.federation.personalize_epochs = Some(5);
    let (r, told) = run(&mut pool, &cfg, &truth);
    let round_zero = CLIENTS - NEWCOMERS;
    let newcomers: BTreeSet<usize> = (round_zero..CLIENTS).collect();
    assert_eq!(told.placed, newcomers.iter().copied().collect::<Vec<_>>());
    // Two recorded rounds, neither of which trained or evaluated a newcomer; the pass after
    // them trained (personalised) and evaluated exactly the newcomers.
    assert_eq!(r.rounds.len(), 2);
    for round in 1..=2 {
        assert!(Recording::in_round(&pool.trained, round).is_disjoint(&newcomers));
        assert!(Recording::in_round(&pool.evaluated, round).is_disjoint(&newcomers));
    }
    assert_eq!(Recording::in_round(&pool.trained, 3), newcomers);
    assert_eq!(Recording::in_round(&pool.evaluated, 3), newcomers);
    for n in &r.newcomers {
        assert_eq!((n.round, n.truth_match), (3, Some(true)));
        // A group holds 2 to 4 labels: chance is at most 1/2; these models are well above it.
        let a = n.personalized_accuracy.expect("personalised");
        assert!(a > 0.75 && a <= 1.0, "newcomer {}: {a}", n.client.index);
    }
    let mean = r.mean_personalized_accuracy().unwrap();
    assert!(mean > 0.75, "{mean}");
    // One accuracy per client; the newcomers were never evaluated under the final clusters.
    assert_eq!(r.final_client_accuracy.len(), CLIENTS);
    assert!(
        r.final_client_accuracy[round_zero..]
            .iter()
            .all(|a| a.is_nan())
    );
    // Without personalisation nobody gets a personalised figure.
    let (mut pool, truth) = Recording::new(NEWCOMERS, 2, CLIENTS);
    let (r, _) = run(&mut pool, &config(Algorithm::FedClust, 2), &truth);
    assert!(
        r.newcomers
            .iter()
            .all(|n| n.personalized_accuracy.is_none())
    );
    assert_eq!(r.mean_personalized_accuracy(), None);
    let mut cfg = config(Algorithm::FedClust, 2);
    cfg.federation.personalize_epochs = Some(0);
    assert!(cfg.validate().is_err());
}
