//! MT-HFL round 0: the `k` leading eigenpairs of the Gram matrix of the client's training data,
//! its data signature (the paper's eq. 1; [`ToClient::GramSignature`], answered by
//! [`ToCoordinator::Eigenpairs`]). The maths is in [`crate::cluster::spectral`].
//!
//! Stateful on a device: the edge client's worker keeps the exact signature and the Gram matrix
//! for the [`super::relevance`] job that follows, and the simulator keeps the exact signature;
//! [`JobKind::execute`] is the stateless computation.

use crate::client::{ClientData, ClientError};
use crate::cluster::spectral::{self, Signature};
use crate::protocol::{Encoding, ToClient, ToCoordinator};
use crate::train::Device;

use super::{JobKind, Rejected, Trainer, Uploads, WireError, unexpected};

/// The `k` leading eigenpairs, uploaded in `encoding`.
#[derive(Debug, Clone, Copy)]
pub struct GramJob {
    /// Eigenpairs.
    pub k: usize,
    /// The dimension the eigenvectors must have: the pixels of one image of the run's model.
    pub d: usize,
    /// Upload encoding.
    pub encoding: Encoding,
}

/// MT-HFL's data signature.
#[derive(Debug, Clone, Copy)]
pub struct GramSignature;

impl JobKind for GramSignature {
    const NAME: &'static str = "gram-signature";
    const UPLOADS: Uploads = Uploads::Signatures;
    type Job<'a> = GramJob;
    /// The signature as the coordinator received it (upload rounding applied).
    type Answer = Signature;

    fn floats_down(_: &GramJob) -> usize {
        0
    }

    fn floats_up(s: &Signature) -> usize {
        s.k * s.d + s.k
    }

    fn command(job: &GramJob, _upload: Encoding) -> Result<ToClient, WireError> {
        Ok(ToClient::GramSignature {
            k: job.k as u32,
            upload: job.encoding,
        })
    }

    /// In the job's own encoding.
    fn reply(job: &GramJob, s: &Signature, _upload: Encoding) -> Result<ToCoordinator, WireError> {
        Ok(ToCoordinator::Eigenpairs(s.to_wire(job.encoding)))
    }

    /// `k` eigenpairs in the image dimension, finite, eigenvalues non-negative and descending,
    /// eigenvectors of unit length ([`Signature::from_wire`]).
    fn accept(job: &GramJob, body: ToCoordinator) -> Result<Signature, Rejected> {
        match body {
            ToCoordinator::Eigenpairs(wire) => Ok(Signature::from_wire(&wire, job.k, job.d)?),
            body => Err(unexpected(&body)),
        }
    }

    fn execute(
        job: &GramJob,
        data: ClientData<'_>,
        _: &Device,
        _: &mut dyn Trainer,
    ) -> Result<Signature, ClientError> {
        let exact = spectral::signature_of(data.train, job.k)
            .map_err(|e| ClientError::Command(e.to_string()))?;
        Ok(exact.rounded(job.encoding))
    }

    /// Done by the edge client's worker (it keeps state for the relevance job).
    fn serve(
        _: &ToClient,
        _: ClientData<'_>,
        _: &Device,
        _: usize,
    ) -> Option<Result<ToCoordinator, ClientError>> {
        None
    }
}
