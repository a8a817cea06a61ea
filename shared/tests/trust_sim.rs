//! What the round loop does not take on a client's word (issue 11 §3), in process on the bundled
//! Fashion-MNIST subset, with one lying client wrapped around the in-process pool:
//!
//! - an update claiming more samples than its client declared when it joined is dropped and
//!   recorded, and the run is then the run without that client's updates, bit for bit;
//! - `Weighting::Equal` makes the cluster average the plain mean of the updates, `Samples` the
//!   sample-weighted one (computed here from the updates the pool returned);
//! - an update whose change from the model it was sent is above `max_update_norm` is dropped and
//!   recorded with its norm.

use edgecfl_shared::algorithms::{self, Algorithm, MethodConfig};
use edgecfl_shared::data::fmnist::FashionMnist;
use edgecfl_shared::data::partition::{PartitionSpec, partition};
use edgecfl_shared::federation::{
    Answer, ClientInfo, ClientPool, DroppedUpdate, FederationConfig, Job, NormBound, Observer,
    PoolError, RunContext, RunResult, UpdateRejection, Weighting,
};
use edgecfl_shared::model::{ModelKind, Params};
use edgecfl_shared::sim::SimPool;
use edgecfl_shared::train::Backend;

const CLIENTS: usize = 4;
/// The lying client (pool index).
const LIAR: usize = 1;

#[derive(Clone, Copy)]
enum Attack {
    /// Honest.
    None,
    /// Its updates never come back.
    Silent,
    /// Its updates claim this many samples.
    Samples(u64),
    /// Its updates claim its declared count plus this.
    AboveDeclared(u64),
    /// Its updates are the model it was sent plus this in every parameter.
    Shift(f32),
}

/// A [`SimPool`] whose client [`LIAR`] lies as `attack` says; records every update it returns
/// (round, pool index, parameters, samples).
struct Liar {
    inner: SimPool,
    attack: Attack,
    returned: Vec<(usize, usize, Params, u64)>,
}

impl Liar {
    fn new(spec: &str, attack: Attack) -> Self {
        let data = FashionMnist::bundled().unwrap();
        let spec: PartitionSpec = spec.parse().unwrap();
        let part = partition(&spec, &data.train.labels, CLIENTS, 3).unwrap();
        Liar {
            inner: SimPool::new(&data, &part, Backend::Flex).unwrap(),
            attack,
            returned: Vec::new(),
        }
    }
}

impl ClientPool for Liar {
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
        let declared = self.inner.clients()[LIAR].samples;
        let mut out = Vec::new();
        for (i, mut a) in self.inner.run(round, jobs)? {
            if i == LIAR
                && let Answer::Update(u) = &mut a
            {
                match self.attack {
                    Attack::None => {}
                    Attack::Silent => continue,
                    Attack::Samples(n) => u.samples = n,
                    Attack::AboveDeclared(n) => u.samples = declared + n,
                    Attack::Shift(d) => {
                        let Some((_, Job::Train(t))) = jobs.iter().find(|(j, _)| *j == i) else {
                            panic!("client {i} answered a job it was not given");
                        };
                        u.params.values = t.start.values.iter().map(|v| v + d).collect();
                    }
                }
            }
            if let Answer::Update(u) = &a {
                self.returned.push((round, i, u.params.clone(), u.samples));
            }
            out.push((i, a));
        }
        Ok(out)
    }
}

/// Counts what the observer was told.
#[derive(Default)]
struct Told(Vec<DroppedUpdate>);
impl Observer for Told {
    fn update_dropped(&mut self, d: &DroppedUpdate) {
        self.0.push(d.clone());
    }
}

fn config(rounds: usize) -> MethodConfig {
    MethodConfig::new(
        Algorithm::FedAvg,
        FederationConfig {
            model: ModelKind::Mlp,
            rounds,
            frac: 1.0,
            epochs: 1,
            seed: 5,
            ..FederationConfig::default()
        },
    )
}

fn run(cfg: &MethodConfig, pool: &mut Liar) -> (RunResult, Vec<DroppedUpdate>) {
    let mut told = Told::default();
    let r = algorithms::run(cfg, pool, &RunContext::default(), &mut told).unwrap();
    (r, told.0)
}

fn values(r: &RunResult) -> Vec<&[f32]> {
    r.models.iter().map(|m| m.values.as_slice()).collect()
}

#[test]
fn updates_claiming_more_than_declared_are_dropped_and_counted() {
    let cfg = config(2);
    let (without, told) = run(&cfg, &mut Liar::new("iid", Attack::Silent));
    assert!(without.dropped_updates.is_empty() && told.is_empty());
    let declared = Liar::new("iid", Attack::None).clients()[LIAR].samples;
    // One more than declared is refused as surely as 2⁶⁴ − 1.
    for attack in [Attack::AboveDeclared(1), Attack::Samples(u64::MAX)] {
        let mut pool = Liar::new("iid", attack);
        let (r, told) = run(&cfg, &mut pool);
        let claimed = pool.returned.iter().find(|x| x.1 == LIAR).unwrap().3;
        let expected: Vec<DroppedUpdate> = (1..=2)
            .map(|round| DroppedUpdate {
                client: r.clients[LIAR].id.clone(),
                round,
                reason: UpdateRejection::TooManySamples {
                    samples: claimed,
                    declared,
                },
            })
            .collect();
        assert_eq!(r.dropped_updates, expected);
        assert_eq!(told, expected, "the observer hears of each drop");
        // The lie changed nothing: the run is the one without the liar's updates.
        assert_eq!(values(&r), values(&without));
        assert_eq!(r.rounds[0].received, CLIENTS - 1);
    }
    // The declared count itself is accepted: the honest run drops nothing and differs.
    let (honest, _) = run(&cfg, &mut Liar::new("iid", Attack::Samples(declared)));
    assert!(honest.dropped_updates.is_empty());
    assert_eq!(honest.rounds[0].received, CLIENTS);
    assert_ne!(values(&honest), values(&without));
}

/// Expected FedAvg of round 1's updates, accumulated in f64 as the aggregation does.
fn mean(updates: &[(usize, usize, Params, u64)], weight: impl Fn(u64) -> f64) -> Vec<f32> {
    let total: f64 = updates.iter().map(|u| weight(u.3)).sum();
    let mut acc = vec![0f64; updates[0].2.values.len()];
    for (_, _, p, s) in updates {
        let w = weight(*s) / total;
        for (a, v) in acc.iter_mut().zip(&p.values) {
            *a += w * f64::from(*v);
        }
    }
    acc.into_iter().map(|a| a as f32).collect()
}

#[test]
fn equal_weighting_is_the_plain_mean_of_the_updates() {
    // Dirichlet shards: unequal sample counts, so the two weightings differ.
    let spec = "dir:0.3";
    let mut expected = Vec::new();
    for weighting in [Weighting::Samples, Weighting::Equal] {
        let mut cfg = config(1);
        cfg.federation.weighting = weighting;
        let mut pool = Liar::new(spec, Attack::None);
        let sizes: Vec<u64> = pool.clients().iter().map(|c| c.samples).collect();
        assert!(sizes.iter().any(|&s| s != sizes[0]), "{sizes:?}");
        let (r, _) = run(&cfg, &mut pool);
        assert_eq!(pool.returned.len(), CLIENTS);
        let want = match weighting {
            Weighting::Equal => mean(&pool.returned, |_| 1.0),
            _ => mean(&pool.returned, |s| s as f64),
        };
        let got = &r.models[0].values;
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst < 1e-6, "{weighting}: max difference {worst}");
        expected.push(want);
    }
    let apart = expected[0]
        .iter()
        .zip(&expected[1])
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(apart > 1e-4, "the weightings should differ here: {apart}");
}

/// Issue 56 §1: the default bound, `median:100` (a hundred times the median change of the round's
/// updates), drops an update moved by 1 per coordinate (~1 000 times an honest one-epoch change
/// here) with no number set by hand, and no honest update; with the bound off it gets through.
#[test]
fn a_huge_update_is_dropped_by_the_default_bound() {
    let cfg = config(2);
    assert_eq!(cfg.federation.max_update_norm, NormBound::Median(100.0));
    let (without, _) = run(&cfg, &mut Liar::new("iid", Attack::Silent));
    let (r, told) = run(&cfg, &mut Liar::new("iid", Attack::Shift(1.0)));
    assert_eq!(r.dropped_updates, told);
    assert_eq!(r.dropped_updates.len(), 2, "{:?}", r.dropped_updates);
    for d in &r.dropped_updates {
        assert_eq!(d.client, r.clients[LIAR].id);
        let UpdateRejection::NormAbove { norm, bound } = d.reason else {
            panic!("{d:?}");
        };
        assert!(norm > bound, "norm {norm}, bound {bound}");
    }
    assert_eq!(values(&r), values(&without));
    let mut off = config(2);
    off.federation.max_update_norm = NormBound::Off;
    let (r, _) = run(&off, &mut Liar::new("iid", Attack::Shift(1.0)));
    assert!(r.dropped_updates.is_empty());
    assert_ne!(values(&r), values(&without));
}

#[test]
fn updates_beyond_the_norm_bound_are_dropped_with_their_norm() {
    let n = Params::init(ModelKind::Mlp, 0).values.len();
    // Every parameter moved by 1: the change's norm is √n, far above honest one-epoch changes.
    let bound = (n as f64).sqrt() / 4.0;
    let mut cfg = config(2);
    cfg.federation.max_update_norm = NormBound::Fixed(bound);
    let (without, _) = run(&config(2), &mut Liar::new("iid", Attack::Silent));
    let (honest, _) = run(&cfg, &mut Liar::new("iid", Attack::None));
    assert!(
        honest.dropped_updates.is_empty(),
        "{:?}",
        honest.dropped_updates
    );
    let (r, told) = run(&cfg, &mut Liar::new("iid", Attack::Shift(1.0)));
    assert_eq!(r.dropped_updates, told);
    assert_eq!(r.dropped_updates.len(), 2);
    for (d, round) in r.dropped_updates.iter().zip(1..) {
        assert_eq!(
            (d.client.as_str(), d.round),
            (r.clients[LIAR].id.as_str(), round)
        );
        let UpdateRejection::NormAbove { norm, bound: b } = d.reason else {
            panic!("{d:?}");
        };
        assert_eq!(b, bound);
        let root = (n as f64).sqrt();
        assert!((norm - root).abs() < 1e-3 * root, "norm {norm}, √n {root}");
    }
    assert_eq!(values(&r), values(&without));
    // A bound below every honest change drops every update: the model stays θ⁰.
    let mut cfg = config(1);
    cfg.federation.max_update_norm = NormBound::Fixed(1e-9);
    let (r, _) = run(&cfg, &mut Liar::new("iid", Attack::None));
    assert_eq!(r.dropped_updates.len(), CLIENTS);
    assert_eq!(r.rounds[0].received, 0);
    assert_eq!(r.models[0], Params::init(ModelKind::Mlp, 5));
}
