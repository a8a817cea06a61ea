//! StoCFL's bi-level step: two trainings on the same data, both uploaded — the global model ω
//! plainly, the cluster model θₖ with the proximal term `μ/2 · ‖θ − ω‖²` toward ω
//! ([`ToClient::TrainPair`], answered by [`ToCoordinator::Pair`]).

use crate::client::{ClientData, ClientError};
use crate::model::Params;
use crate::protocol::{Encoding, Tensor, ToClient, ToCoordinator};
use crate::train::Device;

use super::train::{check_samples_loss, config_of, decode_params, finite, model_of, settings_of};
use super::{
    Alone, JobKind, Prox, Rejected, Trainer, Training, Update, Uploads, WireError, unexpected,
};

/// Two trainings on the same data, both uploaded (StoCFL: ω plainly, θₖ with a proximal term
/// toward ω).
#[derive(Debug, Clone, Copy)]
pub struct PairJob<'a> {
    /// The global model's training.
    pub global: Training<'a>,
    /// The cluster model's training.
    pub cluster: Training<'a>,
}

/// The answer to a [`PairJob`].
#[derive(Debug, Clone)]
pub struct Pair {
    /// The trained global model.
    pub global: Update,
    /// The trained cluster model.
    pub cluster: Update,
}

/// StoCFL's bi-level step.
#[derive(Debug, Clone, Copy)]
pub struct TrainPair;

impl JobKind for TrainPair {
    const NAME: &'static str = "train-pair";
    const TRAINS: bool = true;
    const UPLOADS: Uploads = Uploads::Models;
    type Job<'a> = PairJob<'a>;
    type Answer = Pair;

    /// The cluster's anchor is the global model, which travels once.
    fn floats_down(job: &PairJob<'_>) -> usize {
        job.global.start.values.len() + job.cluster.start.values.len()
    }

    fn floats_up(a: &Pair) -> usize {
        a.global.params.values.len() + a.cluster.params.values.len()
    }

    /// Only a plain global training and a cluster training anchored at the global model.
    fn command(job: &PairJob<'_>, upload: Encoding) -> Result<ToClient, WireError> {
        match (job.global.prox, job.cluster.prox) {
            (None, Some(p)) if p.anchor == job.global.start => Ok(ToClient::TrainPair {
                global: settings_of(&job.global, upload),
                cluster: settings_of(&job.cluster, upload),
                mu: p.mu,
            }),
            _ => Err(WireError::new::<Self>(
                "only a cluster training anchored at the global model is carried over MQTT",
            )),
        }
    }

    fn reply(_: &PairJob<'_>, a: &Pair, upload: Encoding) -> Result<ToCoordinator, WireError> {
        Ok(ToCoordinator::Pair {
            model: a.global.params.model,
            global: Tensor::encode(&a.global.params.values, upload),
            cluster: Tensor::encode(&a.cluster.params.values, upload),
            samples: a.global.samples,
            global_loss: a.global.loss,
            cluster_loss: a.cluster.loss,
        })
    }

    fn accept(job: &PairJob<'_>, body: ToCoordinator) -> Result<Pair, Rejected> {
        let ToCoordinator::Pair {
            model,
            global,
            cluster,
            samples,
            global_loss,
            cluster_loss,
        } = body
        else {
            return Err(unexpected(&body));
        };
        check_samples_loss(samples, global_loss)?;
        check_samples_loss(samples, cluster_loss)?;
        let kind = job.global.start.model;
        let update = |params, loss| Update {
            client: 0,
            params,
            samples,
            loss,
        };
        Ok(Pair {
            global: update(model_of(kind, model, &global)?, global_loss),
            cluster: update(model_of(kind, model, &cluster)?, cluster_loss),
        })
    }

    fn execute(
        job: &PairJob<'_>,
        data: ClientData<'_>,
        device: &Device,
        trainer: &mut dyn Trainer,
    ) -> Result<Pair, ClientError> {
        Ok(Pair {
            global: trainer.train(&job.global, data.train, device)?,
            cluster: trainer.train(&job.cluster, data.train, device)?,
        })
    }

    fn serve(
        cmd: &ToClient,
        data: ClientData<'_>,
        device: &Device,
        threads: usize,
    ) -> Option<Result<ToCoordinator, ClientError>> {
        let ToClient::TrainPair {
            global,
            cluster,
            mu,
        } = cmd
        else {
            return None;
        };
        Some((|| {
            if global.model != cluster.model {
                return Err(ClientError::Command(format!(
                    "pair of {} and {}",
                    global.model, cluster.model
                )));
            }
            let omega = decode_params(global.model, &global.params)?;
            let theta = decode_params(cluster.model, &cluster.params)?;
            let job = PairJob {
                global: Training {
                    start: &omega,
                    cfg: config_of(global, threads),
                    prox: None,
                },
                cluster: Training {
                    start: &theta,
                    cfg: config_of(cluster, threads),
                    prox: Some(Prox {
                        anchor: &omega,
                        mu: *mu,
                    }),
                },
            };
            let a = Self::execute(&job, data, device, &mut Alone)?;
            finite(&a.global)?;
            finite(&a.cluster)?;
            Ok(Self::reply(&job, &a, global.upload)?)
        })())
    }

    fn starts<'a>(job: &Self::Job<'a>, _: &Pair) -> Option<Vec<&'a Params>> {
        Some(vec![job.global.start, job.cluster.start])
    }

    fn updates(a: &mut Pair) -> Vec<&mut Update> {
        vec![&mut a.global, &mut a.cluster]
    }
}
