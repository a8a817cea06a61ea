//! PACFL round 0 (and a newcomer's): the client's data subspaces, the top `p` left singular
//! vectors of each of its classes ([`crate::cluster::subspace::client_subspace`]). Its messages
//! travel in [`ToClient::Custom`] and [`ToCoordinator::Custom`] ([`super::custom`]); the upload
//! is in `f32`, `d × (p · labels)` floats.

use serde::{Deserialize, Serialize};

use crate::client::{ClientData, ClientError};
use crate::cluster::subspace::{Subspace, client_subspace};
use crate::protocol::{Encoding, ToClient, ToCoordinator};
use crate::train::Device;

use super::{Alone, JobKind, Rejected, Rejection, Trainer, Uploads, WireError, custom};

/// Send the top `p` left singular vectors of each class's images, of dimension `d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubspaceJob {
    /// Singular vectors per class.
    pub p: u32,
    /// The dimension they must have: the pixels of one image of the run's model.
    pub d: u32,
    /// The data set's classes: every label is below it.
    pub classes: u32,
}

/// PACFL's data signature.
#[derive(Debug, Clone, Copy)]
pub struct SubspaceSignature;

/// The reply on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Reply {
    d: u32,
    labels: Vec<u8>,
    columns: Vec<f32>,
}

impl JobKind for SubspaceSignature {
    const NAME: &'static str = "subspace";
    const UPLOADS: Uploads = Uploads::Signatures;
    type Job<'a> = SubspaceJob;
    type Answer = Subspace;

    fn floats_down(_: &SubspaceJob) -> usize {
        0
    }

    fn floats_up(s: &Subspace) -> usize {
        s.columns.len()
    }

    fn command(job: &SubspaceJob, _: Encoding) -> Result<ToClient, WireError> {
        custom::command::<Self, _>(job)
    }

    fn reply(_: &SubspaceJob, s: &Subspace, _: Encoding) -> Result<ToCoordinator, WireError> {
        custom::reply::<Self, _>(&Reply {
            d: s.d as u32,
            labels: s.labels.clone(),
            columns: s.columns.clone(),
        })
    }

    /// Columns of the job's dimension, finite and of unit length, labels below the number of
    /// classes, at most `p` of each label.
    fn accept(job: &SubspaceJob, body: ToCoordinator) -> Result<Subspace, Rejected> {
        let r: Reply = custom::of_reply::<Self, _>(body)?;
        let wrong = |reason: String| Rejected::new(Rejection::WrongSize, reason);
        if r.d != job.d {
            return Err(wrong(format!(
                "columns of {}, the run's images have {}",
                r.d, job.d
            )));
        }
        let mut per_label = [0u32; 256];
        for &l in &r.labels {
            per_label[usize::from(l)] += 1;
            if u32::from(l) >= job.classes || per_label[usize::from(l)] > job.p {
                return Err(wrong(format!(
                    "label {l}: more than {} columns, or no class",
                    job.p
                )));
            }
        }
        Subspace::checked(job.d as usize, r.labels, r.columns)
            .map_err(|e| Rejected::new(Rejection::BadValue, e))
    }

    fn execute(
        job: &SubspaceJob,
        data: ClientData<'_>,
        _: &Device,
        _: &mut dyn Trainer,
    ) -> Result<Subspace, ClientError> {
        client_subspace(data.train, job.p as usize).map_err(|e| ClientError::Command(e.to_string()))
    }

    fn serve(
        cmd: &ToClient,
        data: ClientData<'_>,
        device: &Device,
        _: usize,
    ) -> Option<Result<ToCoordinator, ClientError>> {
        let job = custom::of_command::<Self, SubspaceJob>(cmd)?;
        Some((|| {
            let job = job?;
            let s = Self::execute(&job, data, device, &mut Alone)?;
            Ok(Self::reply(&job, &s, Encoding::F32)?)
        })())
    }
}
