//! IFCA end to end in process, on the bundled Fashion-MNIST subset: every client ends in the
//! cluster it picked, clients never sampled stay in cluster 0, the K models are kept, and
//! accuracy rises.

use std::collections::HashMap;

use edgecfl_shared::algorithms::{self, Algorithm, MethodConfig};
use edgecfl_shared::cluster::metrics::adjusted_rand_index;
use edgecfl_shared::data::fmnist::FashionMnist;
use edgecfl_shared::data::partition::{PartitionSpec, partition};
use edgecfl_shared::federation::{
    Answer, ClientInfo, ClientPool, FederationConfig, Job, PoolError, Quiet, RunContext,
};
use edgecfl_shared::sim::SimPool;
use edgecfl_shared::train::Backend;

fn config(rounds: usize, frac: f64) -> MethodConfig {
    MethodConfig::new(
        Algorithm::Ifca,
        FederationConfig {
            clusters: Some(4),
            rounds,
            frac,
            epochs: 1,
            lr: 0.05,
            seed: 7,
            ..FederationConfig::default()
        },
    )
}

/// A [`SimPool`] that records each client's latest pick and the losses behind it.
struct Picks {
    inner: SimPool,
    last: HashMap<usize, (usize, Vec<f64>)>,
    per_round: Vec<Vec<(usize, usize)>>,
}

impl Picks {
    fn new(spec: &str, clients: usize) -> (Self, Vec<usize>) {
        let data = FashionMnist::bundled().unwrap();
        let spec: PartitionSpec = spec.parse().unwrap();
        let part = partition(&spec, &data.train.labels, clients, 7).unwrap();
        let truth = part.truth.clone().unwrap();
        let inner = SimPool::new(&data, &part, Backend::Flex).unwrap();
        (
            Picks {
                inner,
                last: HashMap::new(),
                per_round: Vec::new(),
            },
            truth,
        )
    }
}

impl ClientPool for Picks {
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
        let answers = self.inner.run(round, jobs)?;
        let mut this = Vec::new();
        for (c, a) in &answers {
            if let Answer::Picked(a) = a {
                self.last.insert(*c, (a.choice, a.losses.clone()));
                this.push((*c, a.choice));
            }
        }
        if !this.is_empty() {
            this.sort_unstable();
            self.per_round.push(this);
        }
        Ok(answers)
    }
}

/// Rotated images, K = 4, every client sampled, 4 rounds. From one random start IFCA does not
/// recover the four rotations with 12 clients: with seed 7 the picks settle by round 3 on two
/// clusters, 0° + 180° and 90° + 270°, leaving two models unused (ARI 0.42; 8 rounds do not change
/// it; the paper's remedy is random restarts). What holds regardless: each client sits in the
/// cluster it picked, its pick is the model of lowest loss, the K models stay, and accuracy rises.
#[test]
fn clients_end_in_the_cluster_they_picked_and_accuracy_rises() {
    let (mut pool, truth) = Picks::new("rotate:4", 12);
    let mut cfg = config(4, 1.0);
    cfg.federation.epochs = 2;
    let r = algorithms::run(&cfg, &mut pool, &RunContext::default(), &mut Quiet).unwrap();
    let acc: Vec<f64> = r.rounds.iter().filter_map(|x| x.accuracy).collect();
    let ari = adjusted_rand_index(&r.assignment, &truth);
    eprintln!(
        "rotate:4 K=4: picks per round {:?}\nassignment {:?} (truth {truth:?}), ARI {ari:.3}, \
         accuracy {acc:?}",
        pool.per_round, r.assignment
    );
    // K models throughout, whatever the clients picked.
    assert_eq!(r.n_clusters, 4);
    assert!(r.rounds.iter().all(|x| x.clusters == 4));
    assert_eq!(r.ari, None);
    // Every client was sampled in the last round: its cluster is its pick there, the model of
    // lowest loss (ties: the lower index).
    assert_eq!(pool.last.len(), 12);
    for (c, (choice, losses)) in &pool.last {
        assert_eq!(r.assignment[*c], *choice, "client {c}");
        let best = losses
            .iter()
            .enumerate()
            .fold(0, |b, (k, l)| if *l < losses[b] { k } else { b });
        assert_eq!(*choice, best, "client {c}: losses {losses:?}");
    }
    // Better than a random split of the clients, though not the truth (see above).
    assert!(ari > 0.0, "ARI {ari}");
    // All ten classes in every client: chance is 10 %.
    assert!(acc.last().unwrap() > acc.first().unwrap(), "{acc:?}");
    assert!(*acc.last().unwrap() > 0.3, "{acc:?}");
}

#[test]
fn unsampled_clients_and_newcomers_are_in_cluster_zero() {
    let (mut pool, _) = Picks::new("rotate:4", 12);
    pool.inner.hold_out(2, 1).unwrap();
    // 12 clients (10 + 2 newcomers at round 1), a quarter sampled: 3 pick, the others stay in 0.
    let cfg = config(1, 0.25);
    let r = algorithms::run(&cfg, &mut pool, &RunContext::default(), &mut Quiet).unwrap();
    assert_eq!(r.newcomers.len(), 2);
    assert!(r.newcomers.iter().all(|n| n.cluster == 0));
    assert_eq!(pool.last.len(), 3);
    for (p, &c) in r.assignment.iter().enumerate() {
        match pool.last.get(&r.clients[p].index) {
            Some((choice, _)) => assert_eq!(c, *choice),
            None => assert_eq!(c, 0, "client {p} was never sampled"),
        }
    }
}
