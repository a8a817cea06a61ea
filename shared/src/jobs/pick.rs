//! IFCA's job: the mean training loss of each candidate model on the local training data, then
//! the candidate of lowest loss (ties: the lower index) is trained and uploaded with its index
//! ([`ToClient::Pick`], answered by [`ToCoordinator::Picked`]).

use crate::client::{ClientData, ClientError};
use crate::model::Params;
use crate::protocol::{Encoding, Tensor, ToClient, ToCoordinator};
use crate::train::Device;

use super::train::{check_samples_loss, config_of, decode_params, finite, model_of, settings_of};
use super::{
    Alone, JobKind, Rejected, Rejection, Trainer, Training, Update, Uploads, WireError, unexpected,
};

/// IFCA: the candidate of lowest loss, trained with `train` (whose `start` is ignored).
#[derive(Debug, Clone)]
pub struct PickJob<'a> {
    /// The candidate models.
    pub candidates: Vec<&'a Params>,
    /// Settings of the training of the chosen one (`start` is replaced by the choice).
    pub train: Training<'a>,
}

/// The answer to a [`PickJob`].
#[derive(Debug, Clone)]
pub struct Picked {
    /// Index of the chosen candidate.
    pub choice: usize,
    /// Mean training loss of each candidate before training.
    pub losses: Vec<f64>,
    /// The trained choice.
    pub update: Update,
}

/// IFCA's pick.
#[derive(Debug, Clone, Copy)]
pub struct Pick;

impl JobKind for Pick {
    const NAME: &'static str = "pick";
    const TRAINS: bool = true;
    const UPLOADS: Uploads = Uploads::Models;
    type Job<'a> = PickJob<'a>;
    type Answer = Picked;

    fn floats_down(job: &PickJob<'_>) -> usize {
        job.candidates.iter().map(|c| c.values.len()).sum()
    }

    fn floats_up(a: &Picked) -> usize {
        a.update.params.values.len() + a.losses.len()
    }

    fn command(job: &PickJob<'_>, upload: Encoding) -> Result<ToClient, WireError> {
        if job.train.prox.is_some() {
            return Err(WireError::new::<Self>(
                "a proximal pick is not carried over MQTT",
            ));
        }
        let mut settings = settings_of(&job.train, upload);
        settings.params = Tensor::encode(&[], Encoding::F32);
        Ok(ToClient::Pick {
            job: settings,
            candidates: job
                .candidates
                .iter()
                .map(|c| Tensor::encode(&c.values, Encoding::F32))
                .collect(),
        })
    }

    fn reply(_: &PickJob<'_>, a: &Picked, upload: Encoding) -> Result<ToCoordinator, WireError> {
        Ok(ToCoordinator::Picked {
            choice: a.choice as u32,
            losses: a.losses.clone(),
            model: a.update.params.model,
            params: Tensor::encode(&a.update.params.values, upload),
            samples: a.update.samples,
            loss: a.update.loss,
        })
    }

    /// A choice among the candidates, a finite loss for each.
    fn accept(job: &PickJob<'_>, body: ToCoordinator) -> Result<Picked, Rejected> {
        let ToCoordinator::Picked {
            choice,
            losses,
            model,
            params,
            samples,
            loss,
        } = body
        else {
            return Err(unexpected(&body));
        };
        let k = job.candidates.len();
        check_samples_loss(samples, loss)?;
        if choice as usize >= k || losses.len() != k || losses.iter().any(|l| !l.is_finite()) {
            return Err(Rejected::new(
                Rejection::Malformed,
                format!(
                    "choice {choice} with {} losses of {k} candidates",
                    losses.len()
                ),
            ));
        }
        Ok(Picked {
            choice: choice as usize,
            losses,
            update: Update {
                client: 0,
                params: model_of(job.train.start.model, model, &params)?,
                samples,
                loss,
            },
        })
    }

    fn execute(
        job: &PickJob<'_>,
        data: ClientData<'_>,
        device: &Device,
        trainer: &mut dyn Trainer,
    ) -> Result<Picked, ClientError> {
        if job.candidates.is_empty() {
            return Err(ClientError::NoData("no candidate model"));
        }
        let losses: Vec<f64> = job
            .candidates
            .iter()
            .map(|c| trainer.mean_loss(c, data.train, device))
            .collect::<Result<_, _>>()?;
        let mut choice = 0;
        for (k, l) in losses.iter().enumerate() {
            if *l < losses[choice] {
                choice = k;
            }
        }
        let chosen = Training {
            start: job.candidates[choice],
            ..job.train
        };
        Ok(Picked {
            choice,
            update: trainer.train(&chosen, data.train, device)?,
            losses,
        })
    }

    fn serve(
        cmd: &ToClient,
        data: ClientData<'_>,
        device: &Device,
        threads: usize,
    ) -> Option<Result<ToCoordinator, ClientError>> {
        let ToClient::Pick { job, candidates } = cmd else {
            return None;
        };
        Some((|| {
            let models: Vec<Params> = candidates
                .iter()
                .map(|c| decode_params(job.model, c))
                .collect::<Result<_, _>>()?;
            let first = models
                .first()
                .ok_or(ClientError::NoData("no candidate model"))?;
            let pick = PickJob {
                candidates: models.iter().collect(),
                train: Training {
                    start: first,
                    cfg: config_of(job, threads),
                    prox: None,
                },
            };
            let a = Self::execute(&pick, data, device, &mut Alone)?;
            finite(&a.update)?;
            Ok(Self::reply(&pick, &a, job.upload)?)
        })())
    }

    fn starts<'a>(job: &Self::Job<'a>, a: &Picked) -> Option<Vec<&'a Params>> {
        (a.losses.len() == job.candidates.len())
            .then(|| job.candidates.get(a.choice).map(|&c| vec![c]))
            .flatten()
    }

    fn updates(a: &mut Picked) -> Vec<&mut Update> {
        vec![&mut a.update]
    }
}
