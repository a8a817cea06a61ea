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
//! MT-HFL's round 0 is two awaiting phases in `Clustering`: the Gram signatures, then, with
//! relevance on the clients, the rows against the relay; an answer of one is `Unexpected` in the
//! other.
//!
//! A client that says `Hello` after round 0 is planned is queued as a newcomer (FedClust
//! Algorithm 2) and handed to the round loop at the start of the next training round; its
//! round-0 signature is then one more `Clustering` exchange (round 0's job, for it alone)
//! before that round's `Training`.
//!
//! An awaiting phase ([`Awaiting`]) holds the clients it asked. It ends when each of them has
//! answered, failed, or dropped out (its last will arrived), or when the phase timeout fires; the
//! round loop then goes on with the answers it has. Whether an upload answers its client's job is
//! the job's own judgement ([`Job::accept`], in the job's file); everything else that arrives is
//! a [`Rejection`]: counted, logged with its reason, and otherwise ignored, so it cannot change
//! the run's result.
//!
//! Every runtime waits for its fleet the same way, with [`wait`]: `serve`'s phases and joins, the
//! GPS waiting for its LPSs, an LPS waiting for its GPS. Each hands the events to its own judge,
//! which keeps that runtime's rules (what answers, what is ignored, what ends the run).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::ControlFlow;
use std::time::Instant;

use edgecfl_shared::federation::{Answer, Job};
use edgecfl_shared::mqtt::{Inbound, Link};
use edgecfl_shared::protocol::{Envelope, Id, ProtocolError, ToCoordinator};
use serde::{Deserialize, Serialize};

pub use edgecfl_shared::jobs::{Rejected, Rejection};

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

/// An awaiting phase: which clients were asked (with their jobs), which answered.
#[derive(Debug)]
pub struct Awaiting<'j, 'a> {
    /// The phase.
    pub phase: Phase,
    run: Id,
    jobs: BTreeMap<usize, &'j Job<'a>>,
    pending: BTreeSet<usize>,
    answered: BTreeSet<usize>,
}

impl<'j, 'a> Awaiting<'j, 'a> {
    /// Waits in `phase` for the clients of `jobs`, each for the answer to its job.
    pub fn new(
        phase: Phase,
        run: Id,
        jobs: impl IntoIterator<Item = (usize, &'j Job<'a>)>,
    ) -> Self {
        let jobs: BTreeMap<usize, &'j Job<'a>> = jobs.into_iter().collect();
        Awaiting {
            phase,
            run,
            pending: jobs.keys().copied().collect(),
            jobs,
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

    /// The job `client` was asked.
    pub fn job(&self, client: usize) -> Option<&'j Job<'a>> {
        self.jobs.get(&client).copied()
    }

    /// Stops waiting for `client` (it dropped out).
    pub fn give_up(&mut self, client: usize) -> bool {
        self.pending.remove(&client)
    }

    /// Judges an upload from `client` (already decoded from the payload, or the decode error):
    /// of this run and round, from a client asked that has not answered, and an answer to its
    /// job ([`Job::accept`]). `Ok` answers remove the client from the pending set; so does a
    /// reported failure.
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
        let (true, Some(job)) = (self.pending.contains(&client), self.job(client)) else {
            return Err(Rejected::new(
                Rejection::NotAsked,
                format!("not asked in {}", self.phase),
            ));
        };
        if let ToCoordinator::Failed { reason } = env.body {
            self.pending.remove(&client);
            return Err(Rejected::new(Rejection::ClientFailed, reason.as_str()));
        }
        let answer = job.accept(env.body).map_err(|mut r| {
            if r.reason == Rejection::Unexpected {
                r.detail = format!("{} during {}", r.detail, self.phase);
            }
            r
        })?;
        self.pending.remove(&client);
        self.answered.insert(client);
        Ok(answer)
    }
}

/// What receives the fleet's messages: a [`Link`], or a runtime that owns one.
pub trait Inbox {
    /// The next inbound event, waiting at most until `deadline` (`None` when it passed).
    fn recv_until(&self, deadline: Instant) -> Option<Inbound>;
}

impl Inbox for Link {
    fn recv_until(&self, deadline: Instant) -> Option<Inbound> {
        Link::recv_until(self, deadline)
    }
}

impl<T: Inbox + ?Sized> Inbox for &T {
    fn recv_until(&self, deadline: Instant) -> Option<Inbound> {
        (**self).recv_until(deadline)
    }
}

/// The one way to wait for the fleet: hands every event arriving on `s`'s link to `judge` until
/// the judge ends the wait (`Break`: everyone awaited has answered, failed or dropped out, or a
/// message ends the run) or `deadline` passes (`None`). The judge keeps its runtime's rules: what
/// answers, what is rejected (and counted), what is ignored, what is fatal. A caller with nobody
/// to wait for does not call it.
pub fn wait<S: Inbox + ?Sized, B>(
    s: &mut S,
    deadline: Instant,
    mut judge: impl FnMut(&mut S, Inbound) -> ControlFlow<B>,
) -> Option<B> {
    while let Some(ev) = s.recv_until(deadline) {
        if let ControlFlow::Break(b) = judge(s, ev) {
            return Some(b);
        }
    }
    None
}

/// `Break` once `done`: the judge's verdict after an event that may have completed the wait.
pub fn until(done: bool) -> ControlFlow<()> {
    if done {
        ControlFlow::Break(())
    } else {
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgecfl_shared::federation::FederationConfig;
    use edgecfl_shared::federation::Training;
    use edgecfl_shared::jobs::EvaluateJob;
    use edgecfl_shared::model::{ModelKind, Params};
    use edgecfl_shared::protocol::{Encoding, Tensor, id, text};
    use std::collections::VecDeque;

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

    fn train(start: &Params) -> Job<'_> {
        Job::Train(Training {
            start,
            cfg: FederationConfig::default().train_config(0),
            prox: None,
        })
    }

    #[test]
    fn training_phase_rules() {
        let start = Params::init(ModelKind::Mlp, 1);
        let good = start.values.clone();
        let job = train(&start);
        let mut aw = Awaiting::new(Phase::Training(2), id("r").unwrap(), [(0, &job), (1, &job)]);
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
            Ok(Answer::Update(u)) if u.samples == 10
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

    /// Each client's upload is judged against the job that client was asked: in one phase, an
    /// evaluation answers client 0's evaluation job and is unexpected from client 1, asked to
    /// train.
    #[test]
    fn each_answer_is_judged_against_its_clients_job() {
        let start = Params::init(ModelKind::Mlp, 1);
        let (eval, job) = (Job::Evaluate(EvaluateJob { model: &start }), train(&start));
        let mut aw = Awaiting::new(
            Phase::Evaluating(1),
            id("r").unwrap(),
            [(0, &eval), (1, &job)],
        );
        let evaluation = || env("r", 1, ToCoordinator::Evaluation { per_label: vec![] });
        let r = aw.accept(1, evaluation()).unwrap_err();
        assert_eq!(r.reason, Rejection::Unexpected);
        assert_eq!(r.detail, "evaluation during evaluation (round 1)");
        assert!(matches!(
            aw.accept(0, evaluation()),
            Ok(Answer::Evaluation(_))
        ));
        assert_eq!(aw.pending().iter().copied().collect::<Vec<_>>(), [1]);
    }

    /// A fleet whose events are queued up front; the deadline passes when they run out.
    struct Queued(std::cell::RefCell<VecDeque<Inbound>>);

    impl Inbox for Queued {
        fn recv_until(&self, _deadline: Instant) -> Option<Inbound> {
            self.0.borrow_mut().pop_front()
        }
    }

    /// The wait hands each event to the judge in order, with the state it waits on; it ends at
    /// the judge's `Break` (leaving later events unread) or at the deadline (`None`).
    #[test]
    fn the_wait_ends_at_the_judges_break_or_the_deadline() {
        let lost = || Inbound::Disconnected("lost".into());
        let fleet =
            || Queued(VecDeque::from([Inbound::Connected, lost(), Inbound::Connected]).into());
        let (mut f, mut seen) = (fleet(), 0);
        let ended = wait(&mut f, Instant::now(), |_, ev| {
            seen += 1;
            until(matches!(ev, Inbound::Disconnected(_)))
        });
        assert_eq!((ended, seen, f.0.borrow().len()), (Some(()), 2, 1));
        let ended = wait(&mut fleet(), Instant::now(), |f, _| {
            until(f.0.borrow().len() > 5)
        });
        assert_eq!(ended, None, "the deadline");
    }
}
