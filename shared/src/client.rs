//! What a client holds and how its jobs fail: its data ([`ClientData`]), the error of a job
//! ([`ClientError`]) and the helpers the jobs share. What a client computes for each kind of job
//! is in that job's file under [`crate::jobs`]; the in-process pool and the edge client run it
//! through the registry ([`crate::jobs::Job::execute`], [`crate::jobs::serve`]), so a simulated
//! client and a device compute the same thing.

use crate::model::Params;
use crate::train::{Device, LocalData, TrainError, evaluate};

/// Batch size of evaluations and loss passes (no effect on the result).
pub const EVAL_BATCH: usize = 500;

/// Classes holding less than this share of a client's samples are not counted in AdaCFL's L
/// (see [`crate::jobs::LabelStats::of`]).
pub const LABEL_STATS_MIN_SHARE: f64 = 0.0;

/// Why a client could not do a job.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Local training or a forward/backward pass failed.
    #[error(transparent)]
    Train(#[from] TrainError),
    /// A model or layer selection was malformed.
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    /// The job needs data this client does not have (no local test set, no samples).
    #[error("{0}")]
    NoData(&'static str),
    /// The command could not be decoded into a job (a model of the wrong length, a pair of
    /// two architectures).
    #[error("{0}")]
    Command(String),
    /// The answer has no message on the wire.
    #[error(transparent)]
    Wire(#[from] crate::jobs::WireError),
    /// Local training diverged: a device does not upload it.
    #[error("training diverged (loss {0})")]
    Diverged(f64),
}

/// A client's data.
#[derive(Debug, Clone, Copy)]
pub struct ClientData<'a> {
    /// Training samples.
    pub train: &'a LocalData,
    /// Local test samples (None where evaluation is done elsewhere).
    pub test: Option<&'a LocalData>,
}

/// Mean cross-entropy of `params` on `data`.
///
/// # Errors
///
/// As [`evaluate`].
pub fn mean_loss(params: &Params, data: &LocalData, device: &Device) -> Result<f64, TrainError> {
    Ok(evaluate(params, data, EVAL_BATCH, device)?.loss())
}
