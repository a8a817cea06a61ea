//! StoCFL's anchor gradient Ψ: the gradient of the mean cross-entropy over all local training
//! data at the model sent, normalised to unit L2 norm ([`ToClient::Gradient`], answered by
//! [`ToCoordinator::Gradient`]).

use crate::client::{ClientData, ClientError};
use crate::model::Params;
use crate::protocol::{Encoding, Tensor, ToClient, ToCoordinator};
use crate::train::Device;

use super::train::decode_params;
use super::{Alone, JobKind, Rejected, Trainer, Uploads, WireError, unexpected};

/// The normalised gradient at `at`.
#[derive(Debug, Clone, Copy)]
pub struct GradientJob<'a> {
    /// Where the gradient is taken (the anchor model).
    pub at: &'a Params,
    /// Batch size of the forward passes (no effect on the result beyond rounding).
    pub batch_size: usize,
}

/// StoCFL's anchor gradient.
#[derive(Debug, Clone, Copy)]
pub struct Gradient;

impl JobKind for Gradient {
    const NAME: &'static str = "gradient";
    const TRAINS: bool = true;
    const UPLOADS: Uploads = Uploads::Signatures;
    type Job<'a> = GradientJob<'a>;
    type Answer = Vec<f32>;

    fn floats_down(job: &GradientJob<'_>) -> usize {
        job.at.values.len()
    }

    fn floats_up(g: &Vec<f32>) -> usize {
        g.len()
    }

    fn command(job: &GradientJob<'_>, upload: Encoding) -> Result<ToClient, WireError> {
        Ok(ToClient::Gradient {
            model: job.at.model,
            params: Tensor::encode(&job.at.values, Encoding::F32),
            batch_size: job.batch_size as u32,
            upload,
        })
    }

    fn reply(
        _: &GradientJob<'_>,
        g: &Vec<f32>,
        upload: Encoding,
    ) -> Result<ToCoordinator, WireError> {
        Ok(ToCoordinator::Gradient {
            values: Tensor::encode(g, upload),
        })
    }

    /// One finite value per parameter of the model.
    fn accept(job: &GradientJob<'_>, body: ToCoordinator) -> Result<Vec<f32>, Rejected> {
        match body {
            ToCoordinator::Gradient { values } => Ok(values.decode(Some(job.at.values.len()))?),
            body => Err(unexpected(&body)),
        }
    }

    fn execute(
        job: &GradientJob<'_>,
        data: ClientData<'_>,
        device: &Device,
        trainer: &mut dyn Trainer,
    ) -> Result<Vec<f32>, ClientError> {
        let mut g = trainer.gradient(job.at, data.train, job.batch_size, device)?;
        let norm = g.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>().sqrt();
        if norm > 0.0 {
            for v in &mut g {
                *v = (f64::from(*v) / norm) as f32;
            }
        }
        Ok(g)
    }

    fn serve(
        cmd: &ToClient,
        data: ClientData<'_>,
        device: &Device,
        _threads: usize,
    ) -> Option<Result<ToCoordinator, ClientError>> {
        let ToClient::Gradient {
            model,
            params,
            batch_size,
            upload,
        } = cmd
        else {
            return None;
        };
        Some((|| {
            let at = decode_params(*model, params)?;
            let job = GradientJob {
                at: &at,
                batch_size: (*batch_size).max(1) as usize,
            };
            let g = Self::execute(&job, data, device, &mut Alone)?;
            Ok(Self::reply(&job, &g, *upload)?)
        })())
    }
}
