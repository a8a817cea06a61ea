//! Why a server ignores a message from a client: [`Rejection`], with its details ([`Rejected`]).

use serde::{Deserialize, Serialize};

use crate::protocol::{ProtocolError, ToCoordinator};

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
    /// A testbed client claimed a shard that `serve --shard-owners` gives to another client.
    ShardNotOwned,
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
    /// A rejection for `reason`, with `detail` for the log.
    pub fn new(reason: Rejection, detail: impl Into<String>) -> Self {
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

/// A message's kind, for the log.
pub fn kind_name(m: &ToCoordinator) -> &'static str {
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
        ToCoordinator::Custom { .. } => "custom answer",
    }
}
