//! The client side as the server sees it: a [`ClientPool`] runs [`Job`]s on clients and returns
//! their [`Answer`]s.
//!
//! The jobs and answers are [`crate::jobs`]' registry, one file per kind of job; a method file
//! builds jobs and reads answers, and the runtimes (the in-process [`crate::sim::SimPool`], the
//! coordinator's MQTT pool) only carry them.

use serde::{Deserialize, Serialize};

use crate::jobs::{Answer, Job};
use crate::protocol::Encoding;

/// What the pool knows about a client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientInfo {
    /// Index in `0..n`.
    pub index: usize,
    /// Human-readable id (the MQTT client id on a real fleet).
    pub id: String,
    /// Training samples, as the client declared when it joined (its `Hello` on a real fleet). The
    /// one number a client reports about itself that weights an average: every update it sends
    /// must claim at most this many ([`crate::federation::Env::run`] drops the others), and the
    /// GPS weighs clusters by their members' declared counts; `Weighting::Equal` removes it from
    /// every average.
    pub samples: u64,
}

/// Why the pool could not run a set of jobs (a client that fails or drops out is not an error:
/// its answer is simply missing).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// The transport failed (broker connection lost for good, a message that cannot be sent).
    #[error("transport: {0}")]
    Transport(String),
    /// A job cannot be sent as asked (too large for the wire, not supported by this pool).
    #[error("job {job}: {reason}")]
    Job {
        /// The job's name ([`Job::name`]).
        job: &'static str,
        /// Why.
        reason: String,
    },
    /// A client in this process failed its job (in-process pools stop the run: the failure is
    /// a bug or bad data, not a dropout).
    #[error("client {client}: {reason}")]
    Client {
        /// Client index.
        client: usize,
        /// Why.
        reason: String,
    },
    /// A job named a client the pool does not have.
    #[error("no client {0}")]
    NoClient(usize),
}

/// The client side of the federation, as the server sees it.
pub trait ClientPool {
    /// The clients of round 0, indexed `0..n`.
    fn clients(&self) -> Vec<ClientInfo>;

    /// Runs `jobs` (at most one per client) in round `round` (0: the clustering round), and
    /// returns the answers it got, in any order. A client that dropped out, failed or timed out
    /// has no answer; the caller carries on with those it got.
    fn run(
        &mut self,
        round: usize,
        jobs: &[(usize, Job<'_>)],
    ) -> Result<Vec<(usize, Answer)>, PoolError>;

    /// Clients that joined after round 0 and are waiting to be placed, asked at the start of
    /// every training round `round`. Each returned client's `index` is the one the pool knows
    /// it by in later calls and must not be one of the run's clients yet. A client is handed
    /// over once. The default has no newcomers.
    fn newcomers(&mut self, _round: usize) -> Vec<ClientInfo> {
        Vec::new()
    }

    /// The encoding clients upload models, layers and gradients in (the default: f32), for the
    /// byte counts of [`super::Env::run`].
    fn upload(&self) -> Encoding {
        Encoding::F32
    }

    /// Whether [`ClientPool::checkpoint`] should be called after every round (the default: no).
    fn wants_checkpoints(&self) -> bool {
        false
    }

    /// Keeps the driver's state after a completed round (a runtime writes it, with its own
    /// state, where a resumed run finds it). The default keeps nothing.
    ///
    /// # Errors
    ///
    /// The checkpoint cannot be kept (the run stops: a run asked to be resumable is not run
    /// unprotected).
    fn checkpoint(&mut self, _checkpoint: &super::Checkpoint) -> Result<(), PoolError> {
        Ok(())
    }
}
