//! Checkpoints of the round driver, in process: a run interrupted after any round and resumed
//! from that round's checkpoint (through its JSON text) ends exactly as the uninterrupted run:
//! same clusters, models, records, evaluations and newcomers.

use edgecfl_shared::algorithms::{self, Algorithm, MethodConfig};
use edgecfl_shared::cluster::clustering::Lambda;
use edgecfl_shared::cluster::hc::Linkage;
use edgecfl_shared::data::fmnist::FashionMnist;
use edgecfl_shared::data::partition::{PartitionSpec, partition};
use edgecfl_shared::federation::{
    self, Answer, Checkpoint, ClientInfo, ClientPool, FederationConfig, Job, Observer, PoolError,
    RunContext, RunResult,
};
use edgecfl_shared::model::ModelKind;
use edgecfl_shared::sim::SimPool;
use edgecfl_shared::train::Backend;

const CLIENTS: usize = 10;
const ROUNDS: usize = 3;
/// The last two clients join at round 2 (FedClust places them).
const JOIN_ROUND: usize = 2;

/// A [`SimPool`] that keeps every checkpoint as JSON text.
struct Saving {
    inner: SimPool,
    saved: Vec<String>,
}

impl ClientPool for Saving {
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
        self.inner.run(round, jobs)
    }
    fn wants_checkpoints(&self) -> bool {
        true
    }
    fn checkpoint(&mut self, c: &Checkpoint) -> Result<(), PoolError> {
        self.saved.push(c.to_json().expect("checkpoint JSON"));
        Ok(())
    }
}

struct Quiet;
impl Observer for Quiet {}

fn pool(newcomers: bool) -> (Saving, Vec<usize>) {
    let data = FashionMnist::bundled().unwrap();
    let spec: PartitionSpec = "groups:012-34-56-789".parse().unwrap();
    let part = partition(&spec, &data.train.labels, CLIENTS, 3).unwrap();
    let truth = part.truth.clone().unwrap();
    let mut inner = SimPool::new(&data, &part, Backend::Flex).unwrap();
    if newcomers {
        inner.hold_out(2, JOIN_ROUND).unwrap();
    }
    let pool = Saving {
        inner,
        saved: Vec::new(),
    };
    (pool, truth)
}

fn same(a: &RunResult, b: &RunResult) {
    assert_eq!(a.assignment, b.assignment);
    assert_eq!(a.clients, b.clients);
    assert_eq!(a.models, b.models);
    assert_eq!(a.newcomers, b.newcomers);
    assert_eq!(a.dropped_newcomers, b.dropped_newcomers);
    assert_eq!(a.dropped_updates, b.dropped_updates);
    assert_eq!((a.floats_up, a.floats_down), (b.floats_up, b.floats_down));
    assert_eq!((a.bytes_up, a.bytes_down), (b.bytes_up, b.bytes_down));
    assert_eq!(a.ari, b.ari);
    assert_eq!(a.rounds.len(), b.rounds.len());
    for (x, y) in a.rounds.iter().zip(&b.rounds) {
        let mut y = y.clone();
        y.seconds = x.seconds;
        assert_eq!(*x, y);
    }
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(&a.final_client_accuracy),
        bits(&b.final_client_accuracy)
    );
    assert_eq!(bits(&a.best_client_accuracy), bits(&b.best_client_accuracy));
}

fn resume_after_every_round(algorithm: Algorithm, newcomers: bool) -> RunResult {
    resume_after_every_round_with(algorithm, newcomers, |_| {})
}

/// [`resume_after_every_round`] with the configuration changed by `tweak`; returns the
/// uninterrupted run's result.
fn resume_after_every_round_with(
    algorithm: Algorithm,
    newcomers: bool,
    tweak: impl FnOnce(&mut MethodConfig),
) -> RunResult {
    let mthfl = algorithm == Algorithm::MtHfl;
    let mut cfg = MethodConfig::new(
        algorithm,
        FederationConfig {
            model: if mthfl {
                ModelKind::Mlp
            } else {
                ModelKind::LeNet5
            },
            rounds: ROUNDS,
            frac: 0.5,
            epochs: 1,
            warmup_epochs: 1,
            lambda: if mthfl {
                Lambda::Clusters(4)
            } else {
                Lambda::Auto
            },
            linkage: Linkage::Average,
            seed: 3,
            ..FederationConfig::default()
        },
    );
    tweak(&mut cfg);
    let (mut full_pool, truth) = pool(newcomers);
    let ctx = RunContext {
        truth: Some(truth),
        ..RunContext::default()
    };
    let full = algorithms::run_resumable(&cfg, &mut full_pool, &ctx, &mut Quiet, None).unwrap();
    // After round 0 and after every training round.
    assert_eq!(full_pool.saved.len(), ROUNDS + 1);
    for (k, text) in full_pool.saved.iter().enumerate() {
        let checkpoint = Checkpoint::from_json(text).unwrap();
        assert_eq!(checkpoint.round, k);
        // The pool of a resumed run knows the clients placed before the checkpoint already.
        let (mut again, _) = pool(newcomers && k < JOIN_ROUND);
        let resumed =
            algorithms::run_resumable(&cfg, &mut again, &ctx, &mut Quiet, Some(checkpoint))
                .unwrap();
        same(&full, &resumed);
        // It goes on checkpointing from there.
        assert_eq!(again.saved.len(), ROUNDS - k);
    }
    full
}

#[test]
fn fedclust_with_newcomers_resumes_after_any_round_to_the_same_result() {
    resume_after_every_round(Algorithm::FedClust, true);
}

#[test]
fn mthfl_with_newcomers_resumes_after_any_round_to_the_same_result() {
    resume_after_every_round(Algorithm::MtHfl, true);
}

#[test]
fn fedavg_resumes_after_any_round_to_the_same_result() {
    resume_after_every_round(Algorithm::FedAvg, false);
}

#[test]
fn fedprox_resumes_after_any_round_to_the_same_result() {
    resume_after_every_round_with(Algorithm::FedProx, false, |c| c.federation.mu = Some(0.1));
}

#[test]
fn local_resumes_after_any_round_to_the_same_result() {
    let full = resume_after_every_round(Algorithm::Local, false);
    assert_eq!(full.models.len(), CLIENTS);
}

#[test]
fn random_resumes_after_any_round_to_the_same_result() {
    let full = resume_after_every_round_with(Algorithm::Random, false, |c| {
        c.federation.lambda = Lambda::Clusters(3);
    });
    assert_eq!(full.models.len(), 3);
}

/// IFCA's clients pick among the K models every round: the K models and the picks must survive.
#[test]
fn ifca_resumes_after_any_round_to_the_same_result() {
    let full =
        resume_after_every_round_with(Algorithm::Ifca, false, |c| c.federation.clusters = Some(3));
    assert_eq!(full.models.len(), 3);
}

/// FeSEM re-assigns every client by distance to the K centres every round.
#[test]
fn fesem_resumes_after_any_round_to_the_same_result() {
    let full =
        resume_after_every_round_with(Algorithm::FeSem, false, |c| c.federation.clusters = Some(3));
    assert_eq!(full.models.len(), 3);
}

/// CFL with ε₁ above and ε₂ below every norm splits every cluster with two updates in every
/// round, so the parameter tree and the pending clients (half are sampled) must survive; the
/// newcomers descend that tree.
#[test]
fn cfl_with_splits_and_newcomers_resumes_after_any_round_to_the_same_result() {
    let full = resume_after_every_round_with(Algorithm::Cfl, true, |c| {
        c.methods.cfl.eps1 = Some(1e9);
        c.methods.cfl.eps2 = Some(0.0);
    });
    // Round 1 splits cluster 0 (5 updates), round 2 splits again.
    assert!(full.models.len() >= 3, "{} clusters", full.models.len());
    assert!(
        full.rounds
            .windows(2)
            .any(|w| w[1].clusters > w[0].clusters)
    );
}

/// StoCFL merges the singletons of the sampled clients whose Ψ point the same way (label
/// groups at the LeNet-5 anchor), so ω, the Ψ, the merge weights and the merged clusters must
/// survive; the newcomers join by Ψ.
#[test]
fn stocfl_with_merges_and_newcomers_resumes_after_any_round_to_the_same_result() {
    let full = resume_after_every_round(Algorithm::StoCfl, true);
    // Some clients were merged: fewer clusters than clients.
    assert!(
        full.models.len() < full.assignment.len(),
        "{} clusters for {} clients",
        full.models.len(),
        full.assignment.len()
    );
}

/// AdaCFL with ε = 0: every newcomer founds a cluster of its own, so the representations grow
/// after the checkpoints before round 2 and the pre-clustering must survive.
#[test]
fn adacfl_with_founding_newcomers_resumes_after_any_round_to_the_same_result() {
    let full = resume_after_every_round_with(Algorithm::AdaCfl, true, |c| {
        c.methods.adacfl.epsilon = Some(0.0);
    });
    assert_eq!(full.newcomers.len(), 2);
    assert!(full.models.len() > full.assignment[..CLIENTS - 2].iter().max().unwrap() + 1);
}

/// A one-round run of `algorithm` (no newcomers): its configuration, context and checkpoints.
fn one_round(algorithm: Algorithm) -> (MethodConfig, RunContext, Vec<String>) {
    let (mut p, truth) = pool(false);
    let cfg = MethodConfig::new(
        algorithm,
        FederationConfig {
            rounds: 1,
            epochs: 1,
            warmup_epochs: 1,
            seed: 3,
            ..FederationConfig::default()
        },
    );
    let ctx = RunContext {
        truth: Some(truth),
        ..RunContext::default()
    };
    algorithms::run_resumable(&cfg, &mut p, &ctx, &mut Quiet, None).unwrap();
    (cfg, ctx, p.saved)
}

/// A checkpoint whose method state does not fit the method (of another method, or damaged) is
/// refused with an error when resuming, never a panic.
#[test]
fn a_bad_method_state_is_refused() {
    for algorithm in [Algorithm::Cfl, Algorithm::StoCfl, Algorithm::AdaCfl] {
        let (cfg, ctx, saved) = one_round(algorithm);
        let good: serde_json::Value = serde_json::from_str(&saved[1]).unwrap();
        let mut bads = vec![serde_json::json!("nonsense"), serde_json::json!([1, 2])];
        // Every part of the state damaged in turn (a float where a list is, …).
        for i in 0..good["strategy"].as_array().map_or(0, Vec::len) {
            let mut s = good["strategy"].clone();
            s[i] = serde_json::json!(0.5);
            bads.push(s);
        }
        for bad in bads {
            let mut v = good.clone();
            v["strategy"] = bad.clone();
            let c = Checkpoint::from_json(&v.to_string()).unwrap();
            let (mut q, _) = pool(false);
            let r = algorithms::run_resumable(&cfg, &mut q, &ctx, &mut Quiet, Some(c));
            assert!(
                matches!(r, Err(federation::FederationError::Config(_))),
                "{algorithm:?} {bad}"
            );
        }
    }
}

/// A checkpoint of another configuration, or one whose parts do not fit, is refused with an
/// error, never a panic.
#[test]
fn a_bad_checkpoint_is_refused() {
    let (cfg, ctx, saved) = one_round(Algorithm::FedClust);
    let text = saved[0].clone();
    let mut other = cfg.clone();
    other.federation.seed = 4;
    other.federation.frac = 0.25;
    let c = Checkpoint::from_json(&text).unwrap();
    // Named before anything runs, each setting with both values.
    let early = other.check_resumes(&c.config).unwrap_err().to_string();
    let (mut q, _) = pool(false);
    let err = algorithms::run_resumable(&other, &mut q, &ctx, &mut Quiet, Some(c)).unwrap_err();
    for e in [early, err.to_string()] {
        assert!(e.contains("seed: checkpoint 3, now 4"), "{e}");
        assert!(e.contains("frac: checkpoint 0.1, now 0.25"), "{e}");
    }
    cfg.check_resumes(&Checkpoint::from_json(&text).unwrap().config)
        .unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["assignment"][0] = serde_json::json!(99);
    assert!(Checkpoint::from_json(&v.to_string()).is_err());
    v["assignment"] = serde_json::json!([0]);
    assert!(Checkpoint::from_json(&v.to_string()).is_err());
    assert!(Checkpoint::from_json("{").is_err());
    assert!(Checkpoint::from_json(&text[..text.len() / 2]).is_err());
}

/// A checkpoint written before the cut's key was renamed (`threshold`, now `lambda`) resumes the
/// run it was written by, and finishes it as the run without the interruption.
#[test]
fn a_checkpoint_with_the_old_key_resumes() {
    let (cfg, ctx, saved) = one_round(Algorithm::FedClust);
    let mut v: serde_json::Value = serde_json::from_str(&saved[0]).unwrap();
    let config = v["config"].as_object_mut().unwrap();
    let lambda = config.remove("lambda").expect("the key is lambda now");
    config.insert("threshold".into(), lambda);
    let c = Checkpoint::from_json(&v.to_string()).unwrap();
    let (mut q, _) = pool(false);
    let resumed = algorithms::run_resumable(&cfg, &mut q, &ctx, &mut Quiet, Some(c)).unwrap();
    let (mut p, _) = pool(false);
    let whole = algorithms::run_resumable(&cfg, &mut p, &ctx, &mut Quiet, None).unwrap();
    assert_eq!(resumed.assignment, whole.assignment);
    assert_eq!(resumed.models, whole.models);
}

/// A round in which no sampled client answers does not count: the run stops with
/// [`federation::FederationError::NoAnswers`], nothing of that round is checkpointed, and the
/// checkpoint of the round before resumes the run to the uninterrupted result.
#[test]
fn a_round_nobody_answers_is_not_counted() {
    /// A [`Saving`] pool whose clients all fall silent from round `from` on.
    struct Silent {
        inner: Saving,
        from: usize,
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
            if round >= self.from {
                return Ok(Vec::new());
            }
            self.inner.run(round, jobs)
        }
        fn wants_checkpoints(&self) -> bool {
            true
        }
        fn checkpoint(&mut self, c: &Checkpoint) -> Result<(), PoolError> {
            self.inner.checkpoint(c)
        }
    }
    let (cfg, ctx, _) = one_round(Algorithm::FedAvg);
    let mut cfg = cfg;
    cfg.federation.rounds = 3;
    let (inner, _) = pool(false);
    let mut silent = Silent { inner, from: 2 };
    let err = algorithms::run_resumable(&cfg, &mut silent, &ctx, &mut Quiet, None).unwrap_err();
    assert!(
        matches!(
            err,
            federation::FederationError::NoAnswers { round: 2, sampled } if sampled > 0
        ),
        "{err}"
    );
    let saved = &silent.inner.saved;
    assert_eq!(saved.len(), 2, "checkpoints of rounds 0 and 1 only");
    let last = Checkpoint::from_json(saved.last().unwrap()).unwrap();
    assert_eq!(last.round, 1);
    assert_eq!(last.rounds.len(), 1);
    let (mut q, _) = pool(false);
    let resumed = algorithms::run_resumable(&cfg, &mut q, &ctx, &mut Quiet, Some(last)).unwrap();
    let (mut p, _) = pool(false);
    let whole = algorithms::run_resumable(&cfg, &mut p, &ctx, &mut Quiet, None).unwrap();
    same(&resumed, &whole);
}
