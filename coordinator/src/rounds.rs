//! The phases of `coordinator serve` as an explicit state machine, and the rules that decide
//! whether an inbound message answers the phase or is ignored (and why).
//!
//! ```text
//!  Joining ──(min clients joined, or join timeout)──▶ Clustering (round 0)
//!                                                        │ all signatures, or phase timeout
//!                                                        ▼
//!          ┌──────────────────────────────────▶ Training (round t) ── sampled clients
//!          │                                             │ all updates, or phase timeout
//!          │                                             ▼
//!          └──────── t < T ◀──────────────────── Evaluating (round t) ── clients of changed clusters
//!                                                        │ t = T
//!                                                        ▼
//!                                                     Finished
//! ```
//!
//! MT-HFL's round 0 is two awaiting phases in `Clustering`: the Gram signatures
//! ([`Expect::Eigenpairs`]), then, with relevance on the clients, the rows against the relay
//! ([`Expect::RelevanceRow`]); an answer of one is `Unexpected` in the other.
//!
//! A client that says `Hello` after round 0 is planned is queued as a newcomer (FedClust
//! Algorithm 2) and handed to the round loop at the start of the next training round; its
//! round-0 signature is then one more `Clustering` exchange (round 0's job, for it alone)
//! before that round's `Training`.
//!
//! An awaiting phase ([`Awaiting`]) holds the clients it asked. It ends when each of them has
//! answered, failed, or dropped out (its last will arrived), or when the phase timeout fires; the
//! round loop then goes on with the answers it has. Everything else that arrives is a
//! [`Rejection`]: counted, logged with its reason, and otherwise ignored, so it cannot change the
//! run's result.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use edgecfl_shared::cluster::spectral::Signature;
use edgecfl_shared::model::{ModelError, ModelKind, Params};
use edgecfl_shared::protocol::{Envelope, Id, ProtocolError, Tensor, ToCoordinator, decode_row};
use edgecfl_shared::train::{CLASSES, EvalReport};
use serde::{Deserialize, Serialize};

/// Where the run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for clients to announce themselves.
    Joining,
    /// Round 0: waiting for signatures.
    Clustering,
    /// Waiting for the updates of round t.
    Training(u32),
    /// Waiting for the evaluations of round t.
    Evaluating(u32),
    /// Done.
    Finished,
}

impl Phase {
    /// The round messages of this phase carry.
    pub fn round(self) -> u32 {
        match self {
            Phase::Joining | Phase::Clustering => 0,
            Phase::Training(t) | Phase::Evaluating(t) => t,
            Phase::Finished => u32::MAX,
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Phase::Joining => f.write_str("joining"),
            Phase::Clustering => f.write_str("clustering (round 0)"),
            Phase::Training(t) => write!(f, "training (round {t})"),
            Phase::Evaluating(t) => write!(f, "evaluation (round {t})"),
            Phase::Finished => f.write_str("finished"),
        }
    }
}

/// Why a message was ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rejection {
    /// Not a message of this protocol (random bytes, unknown variant, trailing bytes).
    Malformed,
    /// The payload ended early.
    Truncated,
    /// Larger than the protocol's limit.
    Oversized,
    /// Another protocol version.
    WrongVersion,
    /// From a client id that is not in this run.
    UnknownClient,
    /// On a topic whose client id is not a valid id (empty, longer than 32 bytes, or with
    /// characters other than A-Z a-z 0-9 - _ .).
    BadId,
    /// For another run.
    WrongRun,
    /// For another round (late, or from the future).
    WrongRound,
    /// From a client that was not asked in this phase.
    NotAsked,
    /// A second answer from a client that already answered.
    Duplicate,
    /// A message of the wrong kind for the phase.
    Unexpected,
    /// A tensor of the wrong size (or the wrong model).
    WrongSize,
    /// NaN or infinite values.
    NotFinite,
    /// Finite values that cannot be what was asked for (a negative eigenvalue, a relevance
    /// outside `[0, 1]`).
    BadValue,
    /// The client reported that it could not do the job.
    ClientFailed,
    /// A client announced itself after the clients were fixed, where the clients cannot grow (an
    /// LPS's cluster; `serve` queues it as a newcomer instead).
    LateJoiner,
    /// A testbed client claimed a shard (partition, seed, index) that another client holds.
    ShardTaken,
    /// An evaluation of more test samples than the client declared (or its shard holds).
    TooManyTestSamples,
}

impl Rejection {
    fn of(e: &ProtocolError) -> Rejection {
        match e {
            ProtocolError::Oversized { .. } => Rejection::Oversized,
            ProtocolError::Truncated => Rejection::Truncated,
            ProtocolError::Version { .. } => Rejection::WrongVersion,
            ProtocolError::TensorLength { .. }
            | ProtocolError::TensorBytes { .. }
            | ProtocolError::EigenShape { .. } => Rejection::WrongSize,
            ProtocolError::NotFinite(_) => Rejection::NotFinite,
            ProtocolError::BadId(_) => Rejection::BadId,
            ProtocolError::BadSignature { .. } | ProtocolError::OutOfRange { .. } => {
                Rejection::BadValue
            }
            _ => Rejection::Malformed,
        }
    }
}

/// A rejection with its details, for the log.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejected {
    /// The reason.
    pub reason: Rejection,
    /// Details.
    pub detail: String,
}

impl Rejected {
    pub(crate) fn new(reason: Rejection, detail: impl Into<String>) -> Self {
        Rejected {
            reason,
            detail: detail.into(),
        }
    }
}

impl From<ProtocolError> for Rejected {
    fn from(e: ProtocolError) -> Self {
        Rejected::new(Rejection::of(&e), e.to_string())
    }
}

/// Counts of ignored messages by reason (written to `summary.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally(pub BTreeMap<Rejection, u64>);

impl Tally {
    /// Counts one.
    pub fn add(&mut self, r: Rejection) {
        *self.0.entry(r).or_default() += 1;
    }
    /// All counted.
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }
    /// Count of one reason.
    pub fn get(&self, r: Rejection) -> u64 {
        self.0.get(&r).copied().unwrap_or(0)
    }
}

/// What the phase waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Signatures of this many floats.
    Signature(usize),
    /// Models of this kind.
    Update(ModelKind),
    /// Evaluations.
    Evaluation,
    /// MT-HFL data signatures of `k` eigenpairs in dimension `d`.
    Eigenpairs {
        /// Eigenpairs.
        k: usize,
        /// Dimension.
        d: usize,
    },
    /// MT-HFL relevance rows of this many values.
    RelevanceRow(usize),
    /// AdaCFL signatures of this many floats with label statistics.
    SignatureStats(usize),
    /// StoCFL pairs of models of this kind.
    Pair(ModelKind),
    /// IFCA picks among this many candidates of this kind.
    Picked(ModelKind, usize),
    /// StoCFL anchor gradients of this many values.
    Gradient(usize),
}

/// A valid answer.
#[derive(Debug, Clone)]
pub enum Answer {
    /// Round-0 signature.
    Signature(Vec<f32>),
    /// Trained model.
    Update {
        /// Parameters.
        params: Params,
        /// Samples.
        samples: u64,
        /// Last-epoch loss.
        loss: f64,
    },
    /// Evaluation counts (boxed: ten labels' counts dwarf the other variants).
    Evaluation(Box<EvalReport>),
    /// MT-HFL data signature, checked ([`Signature::from_wire`]).
    Eigenpairs(Signature),
    /// MT-HFL relevance row, checked (length, finite, in `[0, 1]`).
    RelevanceRow(Vec<f64>),
    /// AdaCFL signature with label statistics (classes ≤ 10, entropy finite in `[0, log₂ 10]`).
    SignatureStats {
        /// The layers' values.
        values: Vec<f32>,
        /// Classes present.
        classes: u32,
        /// Label entropy in bits.
        entropy: f64,
    },
    /// StoCFL's two trained models.
    Pair {
        /// Global model.
        global: Params,
        /// Cluster model.
        cluster: Params,
        /// Samples.
        samples: u64,
        /// Last-epoch losses (global, cluster).
        losses: (f64, f64),
    },
    /// IFCA's choice and trained model.
    Picked {
        /// Chosen candidate.
        choice: usize,
        /// Loss of each candidate.
        losses: Vec<f64>,
        /// Trained model.
        params: Params,
        /// Samples.
        samples: u64,
        /// Last-epoch loss.
        loss: f64,
    },
    /// StoCFL's anchor gradient (finite, of the model's length).
    Gradient(Vec<f32>),
}

/// An awaiting phase: which clients were asked, which answered.
#[derive(Debug)]
pub struct Awaiting {
    /// The phase.
    pub phase: Phase,
    run: Id,
    expect: Expect,
    pending: BTreeSet<usize>,
    answered: BTreeSet<usize>,
}

impl Awaiting {
    /// Waits for `asked` in `phase`.
    pub fn new(
        phase: Phase,
        run: Id,
        expect: Expect,
        asked: impl IntoIterator<Item = usize>,
    ) -> Self {
        Awaiting {
            phase,
            run,
            expect,
            pending: asked.into_iter().collect(),
            answered: BTreeSet::new(),
        }
    }

    /// True when nobody is pending.
    pub fn done(&self) -> bool {
        self.pending.is_empty()
    }

    /// Clients still pending.
    pub fn pending(&self) -> &BTreeSet<usize> {
        &self.pending
    }

    /// True when `client` is pending.
    pub fn is_pending(&self, client: usize) -> bool {
        self.pending.contains(&client)
    }

    /// Stops waiting for `client` (it dropped out).
    pub fn give_up(&mut self, client: usize) -> bool {
        self.pending.remove(&client)
    }

    /// Judges an upload from `client` (already decoded from the payload, or the decode error).
    /// `Ok` answers remove the client from the pending set.
    pub fn accept(
        &mut self,
        client: usize,
        msg: Result<Envelope<ToCoordinator>, ProtocolError>,
    ) -> Result<Answer, Rejected> {
        let env = msg?;
        if env.run != self.run {
            return Err(Rejected::new(
                Rejection::WrongRun,
                format!(
                    "run {:?}, this run is {:?}",
                    env.run.as_str(),
                    self.run.as_str()
                ),
            ));
        }
        if env.round != self.phase.round() {
            return Err(Rejected::new(
                Rejection::WrongRound,
                format!("round {}, now in {}", env.round, self.phase),
            ));
        }
        if self.answered.contains(&client) {
            return Err(Rejected::new(Rejection::Duplicate, "already answered"));
        }
        if !self.pending.contains(&client) {
            return Err(Rejected::new(
                Rejection::NotAsked,
                format!("not asked in {}", self.phase),
            ));
        }
        let answer = match (self.expect, env.body) {
            (_, ToCoordinator::Failed { reason }) => {
                self.pending.remove(&client);
                return Err(Rejected::new(Rejection::ClientFailed, reason.as_str()));
            }
            (Expect::Signature(len), ToCoordinator::Signature { values }) => {
                Answer::Signature(values.decode(Some(len))?)
            }
            (
                Expect::Update(kind),
                ToCoordinator::Update {
                    model,
                    params,
                    samples,
                    loss,
                },
            ) => {
                check_samples_loss(samples, loss)?;
                let params = model_of(kind, model, &params)?;
                Answer::Update {
                    params,
                    samples,
                    loss,
                }
            }
            (Expect::Eigenpairs { k, d }, ToCoordinator::Eigenpairs(wire)) => {
                Answer::Eigenpairs(Signature::from_wire(&wire, k, d)?)
            }
            (Expect::RelevanceRow(n), ToCoordinator::RelevanceRow { row }) => {
                Answer::RelevanceRow(decode_row(&row, n)?.into_iter().map(f64::from).collect())
            }
            (Expect::Evaluation, ToCoordinator::Evaluation { per_label }) => {
                let mut r = EvalReport::default();
                for l in per_label {
                    let i = usize::from(l.label);
                    // A cross-entropy sum is finite and non-negative.
                    let loss_ok = l.loss_sum.is_finite() && l.loss_sum >= 0.0;
                    if i >= CLASSES || l.correct > l.total || !loss_ok {
                        return Err(Rejected::new(
                            Rejection::Malformed,
                            format!("evaluation entry {l:?}"),
                        ));
                    }
                    r.correct_per_label[i] += l.correct as usize;
                    r.total_per_label[i] += l.total as usize;
                    r.loss_per_label[i] += l.loss_sum;
                    r.trained_per_label[i] += l.trained as usize;
                }
                r.correct = r.correct_per_label.iter().sum();
                r.total = r.total_per_label.iter().sum();
                r.loss_sum = r.loss_per_label.iter().sum();
                if !r.loss_sum.is_finite() {
                    return Err(Rejected::new(
                        Rejection::Malformed,
                        "evaluation losses sum to infinity",
                    ));
                }
                Answer::Evaluation(Box::new(r))
            }
            (
                Expect::SignatureStats(len),
                ToCoordinator::SignatureStats {
                    values,
                    classes,
                    entropy,
                },
            ) => {
                if classes == 0
                    || classes as usize > CLASSES
                    || !(0.0..=(CLASSES as f64).log2() + 1e-9).contains(&entropy)
                {
                    return Err(Rejected::new(
                        Rejection::Malformed,
                        format!("label statistics: {classes} classes, entropy {entropy}"),
                    ));
                }
                Answer::SignatureStats {
                    values: values.decode(Some(len))?,
                    classes,
                    entropy,
                }
            }
            (
                Expect::Pair(kind),
                ToCoordinator::Pair {
                    model,
                    global,
                    cluster,
                    samples,
                    global_loss,
                    cluster_loss,
                },
            ) => {
                check_samples_loss(samples, global_loss)?;
                check_samples_loss(samples, cluster_loss)?;
                Answer::Pair {
                    global: model_of(kind, model, &global)?,
                    cluster: model_of(kind, model, &cluster)?,
                    samples,
                    losses: (global_loss, cluster_loss),
                }
            }
            (
                Expect::Picked(kind, k),
                ToCoordinator::Picked {
                    choice,
                    losses,
                    model,
                    params,
                    samples,
                    loss,
                },
            ) => {
                check_samples_loss(samples, loss)?;
                if choice as usize >= k
                    || losses.len() != k
                    || losses.iter().any(|l| !l.is_finite())
                {
                    return Err(Rejected::new(
                        Rejection::Malformed,
                        format!(
                            "choice {choice} with {} losses of {k} candidates",
                            losses.len()
                        ),
                    ));
                }
                Answer::Picked {
                    choice: choice as usize,
                    losses,
                    params: model_of(kind, model, &params)?,
                    samples,
                    loss,
                }
            }
            (Expect::Gradient(len), ToCoordinator::Gradient { values }) => {
                Answer::Gradient(values.decode(Some(len))?)
            }
            (_, other) => {
                return Err(Rejected::new(
                    Rejection::Unexpected,
                    format!("{} during {}", kind_name(&other), self.phase),
                ));
            }
        };
        self.pending.remove(&client);
        self.answered.insert(client);
        Ok(answer)
    }
}

/// An uploaded model of `model` checked against the run's `kind`: decoded, of the right size,
/// finite.
fn model_of(kind: ModelKind, model: ModelKind, params: &Tensor) -> Result<Params, Rejected> {
    if model != kind {
        return Err(Rejected::new(
            Rejection::WrongSize,
            format!("model {model}, the run trains {kind}"),
        ));
    }
    let values = params.decode(None)?;
    Params::new(model, values).map_err(|e| match e {
        ModelError::NotFinite { .. } => Rejected::new(Rejection::NotFinite, e.to_string()),
        e => Rejected::new(Rejection::WrongSize, e.to_string()),
    })
}

/// A trained model's sample count (> 0) and loss (finite).
fn check_samples_loss(samples: u64, loss: f64) -> Result<(), Rejected> {
    if samples == 0 || !loss.is_finite() {
        return Err(Rejected::new(
            Rejection::NotFinite,
            format!("samples {samples}, loss {loss}"),
        ));
    }
    Ok(())
}

fn kind_name(m: &ToCoordinator) -> &'static str {
    match m {
        ToCoordinator::Hello(_) => "hello",
        ToCoordinator::Signature { .. } => "signature",
        ToCoordinator::Update { .. } => "update",
        ToCoordinator::Evaluation { .. } => "evaluation",
        ToCoordinator::Failed { .. } => "failure",
        ToCoordinator::Gone => "gone",
        ToCoordinator::Pong => "pong",
        ToCoordinator::Eigenpairs(_) => "eigenpairs",
        ToCoordinator::RelevanceRow { .. } => "relevance row",
        ToCoordinator::Pair { .. } => "model pair",
        ToCoordinator::Picked { .. } => "pick",
        ToCoordinator::Gradient { .. } => "gradient",
        ToCoordinator::SignatureStats { .. } => "signature with statistics",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgecfl_shared::protocol::{Encoding, LabelEval, Tensor, id, text};

    fn env(
        run: &str,
        round: u32,
        body: ToCoordinator,
    ) -> Result<Envelope<ToCoordinator>, ProtocolError> {
        Ok(Envelope::new(id(run).unwrap(), round, body))
    }

    fn update(values: &[f32]) -> ToCoordinator {
        ToCoordinator::Update {
            model: ModelKind::Mlp,
            params: Tensor::encode(values, Encoding::F32),
            samples: 10,
            loss: 0.5,
        }
    }

    #[test]
    fn method_answers_are_checked() {
        let good = Params::init(ModelKind::Mlp, 1).values;
        let t = |v: &[f32]| Tensor::encode(v, Encoding::F32);
        let judge = |expect: Expect, body: ToCoordinator| {
            let mut aw = Awaiting::new(Phase::Training(1), id("r").unwrap(), expect, [0]);
            aw.accept(0, env("r", 1, body))
        };
        let pair = |cluster: &[f32], loss: f64| ToCoordinator::Pair {
            model: ModelKind::Mlp,
            global: t(&good),
            cluster: t(cluster),
            samples: 10,
            global_loss: 0.5,
            cluster_loss: loss,
        };
        assert!(matches!(
            judge(Expect::Pair(ModelKind::Mlp), pair(&good, 0.4)),
            Ok(Answer::Pair {
                losses: (0.5, 0.4),
                ..
            })
        ));
        let reason = |r: Result<Answer, Rejected>| r.unwrap_err().reason;
        assert_eq!(
            reason(judge(Expect::Pair(ModelKind::Mlp), pair(&good[1..], 0.4))),
            Rejection::WrongSize
        );
        assert_eq!(
            reason(judge(Expect::Pair(ModelKind::Mlp), pair(&good, f64::NAN))),
            Rejection::NotFinite
        );
        let picked = |choice: u32, losses: Vec<f64>| ToCoordinator::Picked {
            choice,
            losses,
            model: ModelKind::Mlp,
            params: t(&good),
            samples: 10,
            loss: 0.5,
        };
        assert!(matches!(
            judge(Expect::Picked(ModelKind::Mlp, 2), picked(1, vec![0.9, 0.3])),
            Ok(Answer::Picked { choice: 1, .. })
        ));
        for (choice, losses) in [
            (2, vec![0.9, 0.3]),
            (0, vec![0.9]),
            (0, vec![f64::NAN, 1.0]),
        ] {
            assert_eq!(
                reason(judge(
                    Expect::Picked(ModelKind::Mlp, 2),
                    picked(choice, losses)
                )),
                Rejection::Malformed
            );
        }
        let gradient = ToCoordinator::Gradient {
            values: t(&[0.6, 0.8]),
        };
        assert!(matches!(
            judge(Expect::Gradient(2), gradient.clone()),
            Ok(Answer::Gradient(_))
        ));
        assert_eq!(
            reason(judge(Expect::Gradient(3), gradient)),
            Rejection::WrongSize
        );
        let stats = |classes: u32, entropy: f64| ToCoordinator::SignatureStats {
            values: t(&[1.0, 2.0]),
            classes,
            entropy,
        };
        assert!(matches!(
            judge(Expect::SignatureStats(2), stats(2, 1.0)),
            Ok(Answer::SignatureStats { classes: 2, .. })
        ));
        // 0 or 11 classes, negative entropy, entropy above log2(10): refused.
        for (c, e) in [(0, 0.0), (11, 1.0), (2, -0.1), (10, 3.4)] {
            assert_eq!(
                reason(judge(Expect::SignatureStats(2), stats(c, e))),
                Rejection::Malformed
            );
        }
    }

    #[test]
    fn training_phase_rules() {
        let good = Params::init(ModelKind::Mlp, 1).values;
        let mut aw = Awaiting::new(
            Phase::Training(2),
            id("r").unwrap(),
            Expect::Update(ModelKind::Mlp),
            [0, 1],
        );
        let reason = |r: Result<Answer, Rejected>| r.unwrap_err().reason;
        let mut aw_accept = |c, m| reason(aw.accept(c, m));
        assert_eq!(
            aw_accept(0, env("other", 2, update(&good))),
            Rejection::WrongRun
        );
        assert_eq!(
            aw_accept(0, env("r", 1, update(&good))),
            Rejection::WrongRound
        );
        assert_eq!(
            aw_accept(5, env("r", 2, update(&good))),
            Rejection::NotAsked
        );
        assert_eq!(
            aw_accept(0, env("r", 2, update(&good[1..]))),
            Rejection::WrongSize
        );
        let mut nan = good.clone();
        nan[7] = f32::NAN;
        assert_eq!(
            aw_accept(0, env("r", 2, update(&nan))),
            Rejection::NotFinite
        );
        assert_eq!(
            aw_accept(
                0,
                env("r", 2, ToCoordinator::Evaluation { per_label: vec![] })
            ),
            Rejection::Unexpected
        );
        assert_eq!(
            aw_accept(0, Err(ProtocolError::Truncated)),
            Rejection::Truncated
        );
        // None of that moved the phase on.
        assert_eq!(aw.pending().len(), 2);
        assert!(matches!(
            aw.accept(0, env("r", 2, update(&good))),
            Ok(Answer::Update { samples: 10, .. })
        ));
        assert_eq!(
            reason(aw.accept(0, env("r", 2, update(&good)))),
            Rejection::Duplicate
        );
        assert!(!aw.done());
        assert_eq!(
            reason(aw.accept(
                1,
                env(
                    "r",
                    2,
                    ToCoordinator::Failed {
                        reason: text("oom")
                    }
                )
            )),
            Rejection::ClientFailed
        );
        assert!(aw.done());
    }

    /// MT-HFL's round 0: a malformed signature or relevance row is a typed rejection that keeps
    /// the client pending (it may still send a good one); a failure ends its wait.
    #[test]
    fn mthfl_round_zero_rules() {
        use edgecfl_shared::cluster::spectral::Gram;
        let features: Vec<f32> = (0..60).map(|i| ((i * 7) % 11) as f32 / 10.0).collect();
        let sig = Gram::from_features(&features, 6)
            .unwrap()
            .signature(2)
            .unwrap();
        let eig = |s: &Signature| ToCoordinator::Eigenpairs(s.to_wire(Encoding::F32));
        let mut aw = Awaiting::new(
            Phase::Clustering,
            id("r").unwrap(),
            Expect::Eigenpairs { k: 2, d: 6 },
            [0, 1],
        );
        let mut reason = |c, m| aw.accept(c, env("r", 0, m)).unwrap_err().reason;
        let mut nan = sig.clone();
        nan.values[1] = f32::NAN;
        let mut negative = sig.clone();
        negative.values[0] = -1.0;
        assert_eq!(reason(0, eig(&nan)), Rejection::NotFinite);
        assert_eq!(reason(0, eig(&negative)), Rejection::BadValue);
        assert_eq!(reason(0, eig(&sig.truncated(1))), Rejection::WrongSize);
        let row = |v: &[f32]| ToCoordinator::RelevanceRow {
            row: Tensor::encode(v, Encoding::F32),
        };
        assert_eq!(reason(0, row(&[1.0, 0.5])), Rejection::Unexpected);
        assert_eq!(aw.pending().len(), 2);
        let Ok(Answer::Eigenpairs(got)) = aw.accept(0, env("r", 0, eig(&sig))) else {
            panic!("a good signature was refused");
        };
        assert_eq!(got, sig);

        let mut aw = Awaiting::new(
            Phase::Clustering,
            id("r").unwrap(),
            Expect::RelevanceRow(3),
            [0, 1, 2],
        );
        let mut reason = |c, m| aw.accept(c, env("r", 0, m)).unwrap_err().reason;
        assert_eq!(reason(0, row(&[1.0, 0.5])), Rejection::WrongSize);
        assert_eq!(reason(0, row(&[1.0, f32::NAN, 0.5])), Rejection::NotFinite);
        assert_eq!(reason(0, row(&[1.0, 2.0, 0.5])), Rejection::BadValue);
        assert_eq!(reason(0, eig(&sig)), Rejection::Unexpected);
        assert_eq!(
            aw.accept(0, Err(ProtocolError::Truncated))
                .unwrap_err()
                .reason,
            Rejection::Truncated
        );
        assert_eq!(aw.pending().len(), 3);
        let Ok(Answer::RelevanceRow(r)) = aw.accept(0, env("r", 0, row(&[1.0, 0.25, 0.5]))) else {
            panic!("a good row was refused");
        };
        assert_eq!(r, vec![1.0, 0.25, 0.5]);
        let failed = ToCoordinator::Failed {
            reason: text("bad relay"),
        };
        assert_eq!(
            aw.accept(1, env("r", 0, failed)).unwrap_err().reason,
            Rejection::ClientFailed
        );
        assert_eq!(aw.pending().iter().copied().collect::<Vec<_>>(), vec![2]);
    }

    #[test]
    fn evaluation_is_rebuilt_from_label_counts() {
        let mut aw = Awaiting::new(
            Phase::Evaluating(1),
            id("r").unwrap(),
            Expect::Evaluation,
            [3],
        );
        let per_label = vec![
            LabelEval {
                label: 1,
                correct: 8,
                total: 10,
                loss_sum: 1.0,
                trained: 30,
            },
            LabelEval {
                label: 4,
                correct: 1,
                total: 10,
                loss_sum: 3.0,
                trained: 10,
            },
        ];
        let Ok(Answer::Evaluation(r)) =
            aw.accept(3, env("r", 1, ToCoordinator::Evaluation { per_label }))
        else {
            panic!("evaluation refused");
        };
        assert_eq!((r.correct, r.total), (9, 20));
        assert!((r.accuracy() - 0.45).abs() < 1e-12 && (r.loss() - 0.2).abs() < 1e-12);
        // Proportional view: label 1 weighs 30 / 40, label 4 10 / 40: 0.75·0.8 + 0.25·0.1.
        let p = r.proportional_accuracy().unwrap();
        assert!((p - 0.625).abs() < 1e-12, "{p}");
        let mut aw = Awaiting::new(
            Phase::Evaluating(1),
            id("r").unwrap(),
            Expect::Evaluation,
            [3],
        );
        // Label 10 does not exist; a negative cross-entropy; finite losses summing to infinity.
        let entry = |label, loss_sum| LabelEval {
            label,
            correct: 1,
            total: 1,
            loss_sum,
            trained: 1,
        };
        for bad in [
            vec![entry(10, 0.0)],
            vec![entry(2, -1.0)],
            vec![entry(2, f64::MAX), entry(3, f64::MAX)],
        ] {
            assert_eq!(
                aw.accept(3, env("r", 1, ToCoordinator::Evaluation { per_label: bad }))
                    .unwrap_err()
                    .reason,
                Rejection::Malformed
            );
        }
        assert!(aw.is_pending(3));
    }
}
