//! Clients lost in round 0 (issue 11 §5), in process on the bundled Fashion-MNIST subset: a
//! one-shot method clusters the clients whose round-0 upload came back and the run goes on
//! without the others, who are named (`RunResult::left_out`, the observer) and never asked
//! again. Checked against the known groups and against the full run's relevance matrix.

use edgecfl_shared::algorithms::{self, Algorithm, MethodConfig};
use edgecfl_shared::cluster::clustering::Lambda;
use edgecfl_shared::data::fmnist::FashionMnist;
use edgecfl_shared::data::partition::{PartitionSpec, partition};
use edgecfl_shared::federation::{
    Answer, ClientInfo, ClientPool, FederationConfig, FederationError, Job, Observer, PoolError,
    RunContext, RunResult,
};
use edgecfl_shared::model::ModelKind;
use edgecfl_shared::sim::SimPool;
use edgecfl_shared::train::Backend;

/// A [`SimPool`] whose `silent` clients send nothing back (only their relevance rows with
/// `rows_only`): for good, or only their first answer with `comes_back` (a board that died in
/// round 0 and was restarted); records every (round, client, job) it was asked.
struct Silent {
    inner: SimPool,
    silent: Vec<usize>,
    rows_only: bool,
    comes_back: bool,
    lost: Vec<usize>,
    asked: Vec<(usize, usize, &'static str)>,
}

impl Silent {
    fn new(spec: &str, clients: usize, silent: &[usize], rows_only: bool) -> (Self, RunContext) {
        let data = FashionMnist::bundled().unwrap();
        let spec: PartitionSpec = spec.parse().unwrap();
        let part = partition(&spec, &data.train.labels, clients, 7).unwrap();
        let pool = Silent {
            inner: SimPool::new(&data, &part, Backend::Flex).unwrap(),
            silent: silent.to_vec(),
            rows_only,
            comes_back: false,
            lost: Vec::new(),
            asked: Vec::new(),
        };
        (pool, RunContext::of_partition(&part))
    }
}

impl ClientPool for Silent {
    fn clients(&self) -> Vec<ClientInfo> {
        self.inner.clients()
    }
    fn run(
        &mut self,
        round: usize,
        jobs: &[(usize, Job<'_>)],
    ) -> Result<Vec<(usize, Answer)>, PoolError> {
        self.asked
            .extend(jobs.iter().map(|(i, j)| (round, *i, j.name())));
        let mut out = Vec::new();
        for (i, a) in self.inner.run(round, jobs)? {
            let silent = self.silent.contains(&i)
                && (!self.rows_only || matches!(a, Answer::Row(_)))
                && !(self.comes_back && self.lost.contains(&i));
            if silent {
                self.lost.push(i);
            } else {
                out.push((i, a));
            }
        }
        Ok(out)
    }
}

/// The clients the observer was told were left out.
#[derive(Default)]
struct Told(Vec<usize>);
impl Observer for Told {
    fn left_out(&mut self, client: &ClientInfo) {
        self.0.push(client.index);
    }
}

fn config(algorithm: Algorithm) -> MethodConfig {
    MethodConfig::new(
        algorithm,
        FederationConfig {
            rounds: 2,
            frac: 1.0,
            epochs: 1,
            warmup_epochs: 1,
            clusters: (algorithm == Algorithm::FeSem).then_some(4),
            seed: 7,
            ..FederationConfig::default()
        },
    )
}

fn indices(clients: &[ClientInfo]) -> Vec<usize> {
    clients.iter().map(|c| c.index).collect()
}

/// Clients 2 and 9 never answer: FedClust, AdaCFL and FeSEM cluster the other ten, offer the
/// two once more as newcomers of round 1 (turned away: no signature), and never give them
/// training or evaluation.
#[test]
fn one_shot_methods_go_on_without_the_clients_silent_in_round_0() {
    const N: usize = 12;
    let silent = [2, 9];
    for algorithm in [Algorithm::FedClust, Algorithm::AdaCfl, Algorithm::FeSem] {
        let (mut pool, ctx) = Silent::new("groups:012-34-56-789", N, &silent, false);
        let mut told = Told::default();
        let r = algorithms::run(&config(algorithm), &mut pool, &ctx, &mut told).unwrap();
        let present: Vec<usize> = (0..N).filter(|i| !silent.contains(i)).collect();
        assert_eq!(indices(&r.left_out), silent, "{algorithm}");
        assert_eq!(told.0, silent, "{algorithm}: the observer hears of each");
        assert_eq!(indices(&r.clients), present, "{algorithm}");
        assert_eq!(r.assignment.len(), N - 2, "{algorithm}");
        assert_eq!(r.final_client_accuracy.len(), N - 2, "{algorithm}");
        assert!(
            r.final_client_accuracy.iter().all(|a| a.is_finite()),
            "{algorithm}: every present client evaluated"
        );
        let turned_away: Vec<(usize, usize)> = r
            .dropped_newcomers
            .iter()
            .map(|d| (d.client.index, d.round))
            .collect();
        assert_eq!(turned_away, [(2, 1), (9, 1)], "{algorithm}");
        assert!(r.newcomers.is_empty(), "{algorithm}");
        // Only their round-0 job and the newcomer's second chance, nothing else.
        let asked: Vec<_> = pool
            .asked
            .iter()
            .filter(|(_, i, _)| silent.contains(i))
            .collect();
        assert_eq!(asked.len(), 4, "{algorithm}: {asked:?}");
        for rec in &r.rounds {
            assert_eq!((rec.sampled, rec.received), (N - 2, N - 2), "{algorithm}");
        }
        if algorithm == Algorithm::FedClust {
            // The ten present clients' groups, found with the automatic cut.
            assert_eq!(r.ari, Some(1.0), "{:?}", r.assignment);
        }
    }
}

/// Clients 2 and 9 miss round 0 and answer again by round 1 (restarted): FedClust clusters the
/// other ten, then places the two as newcomers of round 1, each in its own group's cluster, and
/// they train and are evaluated from then on.
#[test]
fn clients_back_after_round_0_join_as_newcomers_of_round_1() {
    const N: usize = 12;
    let silent = [2, 9];
    let (mut pool, ctx) = Silent::new("groups:012-34-56-789", N, &silent, false);
    pool.comes_back = true;
    let r = algorithms::run(
        &config(Algorithm::FedClust),
        &mut pool,
        &ctx,
        &mut Told::default(),
    )
    .unwrap();
    assert_eq!(indices(&r.left_out), silent);
    assert!(r.dropped_newcomers.is_empty(), "{:?}", r.dropped_newcomers);
    let placed: Vec<(usize, usize, Option<bool>)> = r
        .newcomers
        .iter()
        .map(|n| (n.client.index, n.round, n.truth_match))
        .collect();
    assert_eq!(placed, [(2, 1, Some(true)), (9, 1, Some(true))]);
    assert_eq!(r.clients.len(), N);
    assert!(r.final_client_accuracy.iter().all(|a| a.is_finite()));
    assert_eq!((r.rounds[0].sampled, r.rounds[0].received), (N, N));
}

/// MT-HFL with the relevance on the clients: a client that sent its signature but no relevance
/// row leaves too, and the run's relevance matrix is the full run's without its row and column.
#[test]
fn mthfl_client_without_its_relevance_row_is_left_out() {
    const N: usize = 10;
    let mut cfg = config(Algorithm::MtHfl);
    cfg.federation = FederationConfig {
        model: ModelKind::Mlp,
        lambda: Lambda::Clusters(3),
        batch_size: 10,
        lr: 0.05,
        rounds: 1,
        ..cfg.federation
    };
    let run = |silent: &[usize]| -> RunResult {
        let (mut pool, ctx) = Silent::new("tasks:fmnist3", N, silent, true);
        algorithms::run(&cfg, &mut pool, &ctx, &mut Told::default()).unwrap()
    };
    let full = run(&[]);
    let lost = 4;
    let r = run(&[lost]);
    assert_eq!(indices(&r.left_out), [lost]);
    let (all, rel) = (full.relevance.unwrap(), r.relevance.unwrap());
    let keep: Vec<usize> = (0..N).filter(|&i| i != lost).collect();
    assert_eq!(rel.len(), N - 1);
    for (a, &i) in keep.iter().enumerate() {
        for (b, &j) in keep.iter().enumerate() {
            assert_eq!(rel[a][b], all[i][j], "R({i}, {j})");
        }
    }
    assert_eq!(r.ari, Some(1.0), "{:?}", r.assignment);
}

#[test]
fn fewer_than_two_round_0_uploads_fail_the_run() {
    const N: usize = 4;
    let (mut pool, ctx) = Silent::new("groups:012-34-56-789", N, &[0, 1, 3], false);
    let err = algorithms::run(
        &config(Algorithm::FedClust),
        &mut pool,
        &ctx,
        &mut Told::default(),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            FederationError::TooFewSignatures {
                expected: N,
                got: 1
            }
        ),
        "{err}"
    );
}
