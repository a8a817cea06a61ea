//! Fuzzing the coordinator's handling of a decoded message: [`Awaiting::accept`], the rules that
//! decide whether an upload answers the phase or is rejected (and why), for every kind of phase.
//! The bytes-to-message decoders are fuzzed in `shared/tests/fuzz_wire.rs`; this feeds the
//! state machine with what decoding can produce (every message kind with lengths around the
//! expected ones, NaN and infinities, zero and huge sample counts, foreign run ids and rounds,
//! out-of-range statistics, decode errors) from asked and unasked clients.
//!
//! What must hold after every message: no panic; an answer only from a client that was asked and
//! has not answered, in this run and round; every answer of the phase's kind, of the expected
//! length, finite and in its range; a failure ends the wait for that client; nobody answers twice.
//!
//! `EDGECFL_FUZZ_EXECS` (messages, default 100 000), `EDGECFL_FUZZ_SECONDS`, `EDGECFL_FUZZ_SEED`
//! as in `fuzz_wire`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use coordinator::rounds::{Awaiting, Phase};
use edgecfl_shared::cluster::spectral::{Estimate, Signature};
use edgecfl_shared::federation::FederationConfig;
use edgecfl_shared::federation::{Answer, Job, Training};
use edgecfl_shared::jobs::{
    EvaluateJob, GradientJob, GramJob, PairJob, PickJob, Prox, RelevanceJob, SignatureJob,
};
use edgecfl_shared::model::{LayerSet, ModelKind, ParamLayout, Params};
use edgecfl_shared::protocol::{
    Eigenpairs, Encoding, Envelope, Hello, Id, LabelEval, ProtocolError, Tensor, ToCoordinator, id,
    text,
};

mod fuzz_common;
use fuzz_common::{Rng, env_var};

/// LeNet-5's final layer, the signature of the signature phases.
const SIGNATURE: usize = 850;
const K: usize = 2;
const D: usize = edgecfl_shared::data::ImageShape::GREY_28.pixels();
const ROW: usize = 6;
const CANDIDATES: usize = 3;

/// What the phases' jobs lend: models and signatures.
struct Owned {
    mlp: Params,
    lenet: Params,
    signatures: Vec<Signature>,
}

impl Owned {
    fn new() -> Self {
        let values: Vec<f32> = (0..K).map(|i| (K - i) as f32).collect();
        let mut vectors = vec![0.0f32; K * D];
        for m in 0..K {
            vectors[m * D + m] = 1.0;
        }
        let wire = Eigenpairs::encode(K, D, &values, &vectors, Encoding::F32);
        let one = Signature::from_wire(&wire, K, D).unwrap();
        Owned {
            mlp: Params::init(ModelKind::Mlp, 1),
            lenet: Params::init(ModelKind::LeNet5, 1),
            signatures: vec![one; ROW],
        }
    }

    /// Every kind of phase, with small shapes: one job, asked of every client of the phase.
    fn jobs(&self) -> Vec<Job<'_>> {
        let training = |start| Training {
            start,
            cfg: FederationConfig::default().train_config(0),
            prox: None,
        };
        let signature = |stats| {
            Job::Signature(SignatureJob {
                train: training(&self.lenet),
                layers: &LayerSet::Final,
                stats,
            })
        };
        vec![
            signature(false),
            Job::Train(training(&self.mlp)),
            Job::Train(training(&self.lenet)),
            Job::Evaluate(EvaluateJob { model: &self.mlp }),
            Job::GramSignature(GramJob {
                d: D,
                k: K,
                encoding: Encoding::F32,
            }),
            Job::Relevance(RelevanceJob {
                all: &self.signatures,
                estimate: Estimate::Norm,
            }),
            signature(true),
            Job::TrainPair(PairJob {
                global: training(&self.mlp),
                cluster: Training {
                    prox: Some(Prox {
                        anchor: &self.mlp,
                        mu: 0.1,
                    }),
                    ..training(&self.mlp)
                },
            }),
            Job::Pick(PickJob {
                candidates: vec![&self.mlp; CANDIDATES],
                train: training(&self.mlp),
            }),
            Job::Gradient(GradientJob {
                at: &self.mlp,
                batch_size: 500,
            }),
        ]
    }
}

/// A float: mostly ordinary, sometimes not finite or extreme.
fn float(rng: &mut Rng) -> f64 {
    match rng.below(16) {
        0 => f64::NAN,
        1 => f64::INFINITY,
        2 => f64::NEG_INFINITY,
        3 => -1.0,
        4 => 1e300,
        5 => 0.0,
        _ => (rng.next() % 10_000) as f64 / 10_000.0,
    }
}

/// About `len` values (mostly exactly `len`) in `[0, 1)`, now and then one not finite or out of
/// range, in f32 or f16, now and then with a stray byte.
fn tensor(rng: &mut Rng, len: usize) -> Tensor {
    let len = match rng.below(6) {
        0 => len.saturating_sub(1),
        1 => len + 1,
        2 => rng.below(8),
        _ => len,
    };
    let mut v: Vec<f32> = (0..len)
        .map(|_| (rng.next() % 1000) as f32 / 1000.0)
        .collect();
    if !v.is_empty() && rng.chance(8) {
        let i = rng.below(v.len());
        v[i] = [f32::NAN, f32::INFINITY, 2.0, -0.5][rng.below(4)];
    }
    let encoding = if rng.chance(3) {
        Encoding::F16
    } else {
        Encoding::F32
    };
    let mut t = Tensor::encode(&v, encoding);
    if rng.chance(20) {
        t.bytes.push(0); // not a whole number of elements
    }
    t
}

fn model(rng: &mut Rng) -> ModelKind {
    if rng.chance(4) {
        ModelKind::LeNet5
    } else {
        ModelKind::Mlp
    }
}

fn samples(rng: &mut Rng) -> u64 {
    rng.pick(&[0, 1, 600, u64::MAX])
}

/// A message shaped near what `job` wants: of its kind half of the time, else of any kind.
fn body(rng: &mut Rng, job: &Job<'_>) -> ToCoordinator {
    let (kind, trains) = match job {
        Job::Signature(s) if s.stats => (11, None),
        Job::Signature(_) => (1, None),
        Job::Train(t) => (2, Some(t.start.model)),
        Job::Evaluate(_) => (3, None),
        Job::GramSignature(_) => (6, None),
        Job::Relevance(_) => (7, None),
        Job::TrainPair(p) => (8, Some(p.global.start.model)),
        Job::Pick(p) => (9, Some(p.train.start.model)),
        Job::Gradient(_) => (10, None),
        _ => unreachable!("a job kind the fuzzer does not know"),
    };
    let kind = if rng.chance(2) { kind } else { rng.below(12) };
    // The model the run trains most of the time, with parameters of that model's length.
    let m = match trains {
        Some(m) if !rng.chance(5) => m,
        _ => model(rng),
    };
    let len = ParamLayout::of(m).len();
    match kind {
        0 => ToCoordinator::Hello(Hello {
            samples: samples(rng),
            test_samples: 10,
            backend: text("flex"),
            shard: None,
        }),
        1 => ToCoordinator::Signature {
            values: tensor(rng, SIGNATURE),
        },
        2 => ToCoordinator::Update {
            model: m,
            params: tensor(rng, len),
            samples: samples(rng),
            loss: float(rng),
        },
        3 => ToCoordinator::Evaluation {
            per_label: (0..rng.below(12))
                .map(|_| {
                    let total = rng.pick(&[0u32, 1, 100, u32::MAX]);
                    LabelEval {
                        label: rng.below(12) as u8,
                        correct: if rng.chance(5) {
                            total.saturating_add(1)
                        } else {
                            total / 2
                        },
                        total,
                        loss_sum: float(rng),
                        trained: rng.pick(&[0u32, 1, 600, u32::MAX]),
                    }
                })
                .collect(),
        },
        4 => ToCoordinator::Failed {
            reason: text("out of memory"),
        },
        5 => ToCoordinator::Gone,
        6 => {
            let (k, d) = if rng.chance(4) { (K + 1, D) } else { (K, D) };
            let mut values: Vec<f32> = (0..k).map(|i| (k - i) as f32).collect();
            if rng.chance(5) {
                values.reverse(); // not largest first
            }
            let mut vectors = vec![0.0f32; k * d];
            for m in 0..k {
                vectors[m * d + m] = if rng.chance(10) { 2.0 } else { 1.0 };
            }
            let mut e = Eigenpairs::encode(k, d, &values, &vectors, Encoding::F32);
            if rng.chance(6) {
                e.vectors = tensor(rng, k * d);
            }
            ToCoordinator::Eigenpairs(e)
        }
        7 => ToCoordinator::RelevanceRow {
            row: tensor(rng, ROW),
        },
        8 => ToCoordinator::Pair {
            model: m,
            global: tensor(rng, len),
            cluster: tensor(rng, len),
            samples: samples(rng),
            global_loss: float(rng),
            cluster_loss: float(rng),
        },
        9 => ToCoordinator::Picked {
            choice: rng.below(CANDIDATES + 2) as u32,
            losses: (0..CANDIDATES + rng.below(3) - 1)
                .map(|_| float(rng))
                .collect(),
            model: m,
            params: tensor(rng, len),
            samples: samples(rng),
            loss: float(rng),
        },
        10 => ToCoordinator::Gradient {
            values: tensor(rng, ParamLayout::of(ModelKind::Mlp).len()),
        },
        _ => ToCoordinator::SignatureStats {
            values: tensor(rng, SIGNATURE),
            classes: rng.below(12) as u32,
            entropy: match rng.below(4) {
                0 => float(rng),
                1 => 3.33,
                _ => 1.0,
            },
        },
    }
}

/// Checks an accepted answer against the job asked.
fn check(job: &Job<'_>, answer: &Answer) {
    let finite = |v: &[f32]| v.iter().all(|x| x.is_finite());
    let model = |p: &Params, kind: ModelKind| {
        assert_eq!(p.model, kind);
        assert_eq!(p.values.len(), ParamLayout::of(kind).len());
        assert!(finite(&p.values));
    };
    match (job, answer) {
        (Job::Signature(j), Answer::Signature(s)) => {
            assert_eq!(s.values.len(), SIGNATURE);
            assert!(finite(&s.values));
            assert_eq!(s.stats.is_some(), j.stats);
            if let Some(st) = s.stats {
                assert!((1..=10).contains(&st.classes));
                assert!(
                    st.entropy.is_finite() && (0.0..=10f64.log2() + 1e-9).contains(&st.entropy)
                );
            }
        }
        (Job::Gradient(g), Answer::Gradient(v)) => {
            assert_eq!(v.len(), g.at.values.len());
            assert!(finite(v));
        }
        (Job::Train(t), Answer::Update(u)) => {
            model(&u.params, t.start.model);
            assert!(u.samples > 0 && u.loss.is_finite());
        }
        (Job::Evaluate(_), Answer::Evaluation(r)) => {
            for l in 0..r.total_per_label.len() {
                assert!(r.correct_per_label[l] <= r.total_per_label[l]);
                assert!(r.loss_per_label[l].is_finite() && r.loss_per_label[l] >= 0.0);
            }
            assert!(r.correct <= r.total);
            assert!(
                r.loss_sum.is_finite() && r.loss_sum >= 0.0,
                "loss {}",
                r.loss_sum
            );
        }
        (Job::GramSignature(g), Answer::Eigenpairs(s)) => {
            assert_eq!(
                (s.k, s.d, s.values.len(), s.vectors.len()),
                (g.k, D, g.k, g.k * D)
            );
            assert!(finite(&s.values) && finite(&s.vectors));
        }
        (Job::Relevance(r), Answer::Row(row)) => {
            assert_eq!(row.len(), r.all.len());
            assert!(row.iter().all(|r| (0.0..=1.0).contains(r)));
        }
        (Job::TrainPair(p), Answer::Pair(a)) => {
            for u in [&a.global, &a.cluster] {
                model(&u.params, p.global.start.model);
                assert!(u.samples > 0 && u.loss.is_finite());
            }
        }
        (Job::Pick(p), Answer::Picked(a)) => {
            let k = p.candidates.len();
            assert!(a.choice < k);
            assert_eq!(a.losses.len(), k);
            assert!(a.losses.iter().all(|l| l.is_finite()));
            model(&a.update.params, p.train.start.model);
            assert!(a.update.samples > 0 && a.update.loss.is_finite());
        }
        (j, a) => panic!("{a:?} accepted for a {} job", j.name()),
    }
}

#[test]
fn awaiting_accepts_only_valid_answers_from_asked_clients() {
    let execs: u64 = env_var("EDGECFL_FUZZ_EXECS").unwrap_or(100_000);
    let budget = env_var::<u64>("EDGECFL_FUZZ_SECONDS").map(Duration::from_secs);
    let seed: u64 = env_var("EDGECFL_FUZZ_SEED").unwrap_or(0);
    let mut rng = Rng(seed);
    let run: Id = id("run-7").unwrap();
    let owned = Owned::new();
    let jobs = owned.jobs();
    let start = Instant::now();
    let (mut done, mut accepted) = (0u64, vec![0u64; jobs.len()]);
    'phases: loop {
        // A phase: 4 asked clients of 6 known ones, then up to 24 messages.
        let e = rng.below(jobs.len());
        let job = &jobs[e];
        let phase = match rng.below(3) {
            0 => Phase::Clustering,
            1 => Phase::Training(1 + rng.below(5) as u32),
            _ => Phase::Evaluating(1 + rng.below(5) as u32),
        };
        let asked: BTreeSet<usize> = (0..6).filter(|_| !rng.chance(3)).collect();
        let mut aw = Awaiting::new(phase, run.clone(), asked.iter().map(|&c| (c, job)));
        let mut answered = BTreeSet::new();
        for _ in 0..24 {
            if done >= execs
                || (done.is_multiple_of(1024) && budget.is_some_and(|b| start.elapsed() >= b))
            {
                break 'phases;
            }
            done += 1;
            let client = rng.below(7);
            let msg_run = match rng.below(10) {
                0 => Default::default(),
                1 => id("run-8").unwrap(),
                _ => run.clone(),
            };
            let round = match rng.below(10) {
                0 => phase.round().wrapping_add(1),
                1 => phase.round().wrapping_sub(1),
                _ => phase.round(),
            };
            let msg = if rng.chance(15) {
                Err(ProtocolError::TrailingBytes(1))
            } else {
                Ok(Envelope::new(msg_run.clone(), round, body(&mut rng, job)))
            };
            let failed = matches!(
                msg,
                Ok(Envelope {
                    body: ToCoordinator::Failed { .. },
                    ..
                })
            );
            let was_pending = aw.is_pending(client);
            match aw.accept(client, msg) {
                Ok(answer) => {
                    assert!(
                        was_pending && asked.contains(&client),
                        "client {client} not asked"
                    );
                    assert!(answered.insert(client), "client {client} answered twice");
                    assert!(msg_run == run && round == phase.round());
                    assert!(!aw.is_pending(client));
                    check(job, &answer);
                    accepted[e] += 1;
                }
                Err(_) => {
                    // A failure of an asked client in this run and round ends the wait for it.
                    if failed && was_pending && msg_run == run && round == phase.round() {
                        assert!(!aw.is_pending(client));
                    } else {
                        assert_eq!(aw.is_pending(client), was_pending);
                    }
                }
            }
            assert!(aw.pending().is_subset(&asked));
            assert!(aw.pending().is_disjoint(&answered));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "fuzz_rounds: {done} messages (seed {seed}) in {secs:.1} s, 0 crashes; accepted per phase kind: {:?}",
        jobs.iter()
            .map(Job::name)
            .zip(&accepted)
            .collect::<Vec<_>>()
    );
    // Every kind of phase must have accepted some answers, or the run proves little.
    assert!(accepted.iter().all(|&n| n > 0), "{accepted:?}");
}
