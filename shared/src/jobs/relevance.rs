//! MT-HFL round 0 with the relevance computed on the clients: the row `r(i, ·)` of client `i`
//! against every client's signature (the paper's eq. 2-4), with the client's exact Gram matrix.
//! The signatures travel once to all as a relay on the broadcast topic ([`ToClient::Relay`]);
//! each client's command ([`ToClient::Relevance`]) waits for it; the answer is
//! [`ToCoordinator::RelevanceRow`]. The maths is in [`crate::cluster::spectral`].
//!
//! Stateful on a device (the relay and the command arrive apart): the edge client's worker pairs
//! them; [`JobKind::execute`] is the stateless computation.

use crate::client::{ClientData, ClientError};
use crate::cluster::spectral::{self, Estimate, Gram, Signature};
use crate::protocol::{Encoding, Tensor, ToClient, ToCoordinator, decode_row};
use crate::train::Device;

use super::{Broadcast, JobKind, Rejected, Trainer, Uploads, WireError, unexpected};

/// The relevance row against `all`.
#[derive(Debug, Clone, Copy)]
pub struct RelevanceJob<'a> {
    /// Every client's signature, client `j`'s at position `j`.
    pub all: &'a [Signature],
    /// How to estimate eigenvalues under the own Gram matrix.
    pub estimate: Estimate,
}

/// MT-HFL's relevance row.
#[derive(Debug, Clone, Copy)]
pub struct Relevance;

impl JobKind for Relevance {
    const NAME: &'static str = "relevance";
    const UPLOADS: Uploads = Uploads::RelevanceRows;
    type Job<'a> = RelevanceJob<'a>;
    type Answer = Vec<f64>;

    /// The relay, as each client receives it.
    fn floats_down(job: &RelevanceJob<'_>) -> usize {
        job.all.iter().map(|s| s.k * s.d + s.k).sum()
    }

    fn floats_up(row: &Vec<f64>) -> usize {
        row.len()
    }

    fn command(job: &RelevanceJob<'_>, _upload: Encoding) -> Result<ToClient, WireError> {
        Ok(ToClient::Relevance {
            clients: job.all.len() as u32,
            estimate: job.estimate,
        })
    }

    /// The relay of every signature.
    fn broadcast(job: &RelevanceJob<'_>) -> Result<Option<Broadcast>, WireError> {
        let wire = spectral::relay(job.all).map_err(|e| WireError::new::<Self>(e.to_string()))?;
        let too_large = format!(
            "the relay of {} signatures (k = {}, {}) is too large; use --signature-encoding f16, \
             fewer --eigenvectors, or --relevance server",
            job.all.len(),
            job.all.first().map_or(0, |s| s.k),
            wire.values.encoding
        );
        Ok(Some(Broadcast {
            message: ToClient::Relay(wire),
            too_large,
        }))
    }

    /// In f32: it is small, and f16 would blur the clustering.
    fn reply(
        _: &RelevanceJob<'_>,
        row: &Vec<f64>,
        _: Encoding,
    ) -> Result<ToCoordinator, WireError> {
        let row: Vec<f32> = row.iter().map(|&r| r as f32).collect();
        Ok(ToCoordinator::RelevanceRow {
            row: Tensor::encode(&row, Encoding::F32),
        })
    }

    /// One value per relayed signature, each finite and in `[0, 1]`.
    fn accept(job: &RelevanceJob<'_>, body: ToCoordinator) -> Result<Vec<f64>, Rejected> {
        match body {
            ToCoordinator::RelevanceRow { row } => Ok(decode_row(&row, job.all.len())?
                .into_iter()
                .map(f64::from)
                .collect()),
            body => Err(unexpected(&body)),
        }
    }

    fn execute(
        job: &RelevanceJob<'_>,
        data: ClientData<'_>,
        _: &Device,
        _: &mut dyn Trainer,
    ) -> Result<Vec<f64>, ClientError> {
        let k = job.all.first().map_or(1, |s| s.k);
        let row = Gram::from_local_data(data.train)
            .and_then(|gram| {
                let own = gram.signature(k)?;
                spectral::client_row(&gram, &own, job.all, job.estimate)
            })
            .map_err(|e| ClientError::Command(e.to_string()))?;
        Ok(row)
    }

    /// Done by the edge client's worker (the relay and the command arrive apart).
    fn serve(
        _: &ToClient,
        _: ClientData<'_>,
        _: &Device,
        _: usize,
    ) -> Option<Result<ToCoordinator, ClientError>> {
        None
    }
}
