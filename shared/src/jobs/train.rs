//! Local training: start from the cluster's model, train, upload the whole model
//! ([`ToClient::Train`], or [`ToClient::TrainProx`] with a proximal term toward the model sent:
//! FedProx, FeSEM), answered by [`ToCoordinator::Update`].
//!
//! The helpers every training job shares live here too: the [`TrainJob`] settings on the wire,
//! the server's checks of an uploaded model, a client's one training.

use crate::client::{ClientData, ClientError};
use crate::model::{ModelError, ModelKind, Params};
use crate::protocol::{Encoding, Tensor, ToClient, ToCoordinator, TrainJob};
use crate::train::{Device, LocalData, Proximal, TrainConfig, train_local, train_local_prox};

use super::{JobKind, Rejected, Rejection, Uploads, WireError, unexpected};

/// A proximal term `μ/2 · ‖θ − anchor‖²` added to a client's local objective (FedProx, FeSEM's
/// distance regulariser, StoCFL's λ).
#[derive(Debug, Clone, Copy)]
pub struct Prox<'a> {
    /// The model the local one is pulled toward.
    pub anchor: &'a Params,
    /// Strength μ ≥ 0.
    pub mu: f64,
}

/// One local training: start from `start`, train with `cfg` (epochs, batch, lr, momentum, seed of
/// the sample order), optionally with a proximal term.
#[derive(Debug, Clone, Copy)]
pub struct Training<'a> {
    /// The starting model.
    pub start: &'a Params,
    /// Local-training settings.
    pub cfg: TrainConfig,
    /// Proximal term, if any.
    pub prox: Option<Prox<'a>>,
}

/// A trained model coming back from a client.
#[derive(Debug, Clone)]
pub struct Update {
    /// Client (its position in the run, set by [`crate::federation::Env::run`]).
    pub client: usize,
    /// New parameters.
    pub params: Params,
    /// Samples it trained on (the FedAvg weight), at most its client's declared
    /// [`crate::federation::ClientInfo::samples`]; 1 under `Weighting::Equal`.
    pub samples: u64,
    /// Its mean training loss over the last local epoch.
    pub loss: f64,
}

/// Train and upload the whole model.
#[derive(Debug, Clone, Copy)]
pub struct Train;

impl JobKind for Train {
    const NAME: &'static str = "train";
    const TRAINS: bool = true;
    const UPLOADS: Uploads = Uploads::Models;
    type Job<'a> = Training<'a>;
    type Answer = Update;

    fn floats_down(t: &Training<'_>) -> usize {
        t.start.values.len()
            + t.prox.map_or(0, |p| {
                usize::from(!std::ptr::eq(p.anchor, t.start)) * p.anchor.values.len()
            })
    }

    fn floats_up(u: &Update) -> usize {
        u.params.values.len()
    }

    /// A proximal term toward another model than the one sent cannot be expressed.
    fn command(t: &Training<'_>, upload: Encoding) -> Result<ToClient, WireError> {
        Ok(match t.prox {
            None => ToClient::Train(settings_of(t, upload)),
            Some(p) if p.anchor == t.start => ToClient::TrainProx {
                job: settings_of(t, upload),
                mu: p.mu,
            },
            Some(_) => {
                return Err(WireError::new::<Self>(
                    "a proximal term toward another model than the one sent is not carried over MQTT",
                ));
            }
        })
    }

    fn reply(_: &Training<'_>, u: &Update, upload: Encoding) -> Result<ToCoordinator, WireError> {
        Ok(ToCoordinator::Update {
            model: u.params.model,
            params: Tensor::encode(&u.params.values, upload),
            samples: u.samples,
            loss: u.loss,
        })
    }

    fn accept(t: &Training<'_>, body: ToCoordinator) -> Result<Update, Rejected> {
        let ToCoordinator::Update {
            model,
            params,
            samples,
            loss,
        } = body
        else {
            return Err(unexpected(&body));
        };
        check_samples_loss(samples, loss)?;
        Ok(Update {
            client: 0,
            params: model_of(t.start.model, model, &params)?,
            samples,
            loss,
        })
    }

    fn execute(
        t: &Training<'_>,
        data: ClientData<'_>,
        device: &Device,
        trainer: &mut dyn Trainer,
    ) -> Result<Update, ClientError> {
        trainer.train(t, data.train, device)
    }

    fn serve(
        cmd: &ToClient,
        data: ClientData<'_>,
        device: &Device,
        threads: usize,
    ) -> Option<Result<ToCoordinator, ClientError>> {
        let (job, mu) = match cmd {
            ToClient::Train(job) => (job, None),
            ToClient::TrainProx { job, mu } => (job, Some(*mu)),
            _ => return None,
        };
        Some((|| {
            let start = decode_params(job.model, &job.params)?;
            let t = Training {
                start: &start,
                cfg: config_of(job, threads),
                prox: mu.map(|mu| Prox { anchor: &start, mu }),
            };
            let u = Self::execute(&t, data, device, &mut Alone)?;
            finite(&u)?;
            Ok(Self::reply(&t, &u, job.upload)?)
        })())
    }

    fn starts<'a>(t: &Self::Job<'a>, _: &Update) -> Option<Vec<&'a Params>> {
        Some(vec![t.start])
    }

    fn updates(u: &mut Update) -> Vec<&mut Update> {
        vec![u]
    }
}

/// The training settings of `t` as sent to a client, its upload in `upload`.
pub(crate) fn settings_of(t: &Training<'_>, upload: Encoding) -> TrainJob {
    TrainJob {
        model: t.start.model,
        params: Tensor::encode(&t.start.values, Encoding::F32),
        epochs: t.cfg.epochs as u32,
        batch_size: t.cfg.batch_size as u32,
        lr: t.cfg.lr,
        momentum: t.cfg.momentum,
        seed: t.cfg.seed,
        upload,
    }
}

/// The local-training settings of a command's `job`, trained with `threads` threads.
pub(crate) fn config_of(job: &TrainJob, threads: usize) -> TrainConfig {
    TrainConfig {
        epochs: job.epochs as usize,
        batch_size: job.batch_size as usize,
        lr: job.lr,
        momentum: job.momentum,
        seed: job.seed,
        threads,
    }
}

/// A model sent by the coordinator, decoded: its architecture's length (for some class count,
/// [`Params::new`]), finite.
pub fn decode_params(model: ModelKind, params: &Tensor) -> Result<Params, ClientError> {
    let values = params
        .decode(None)
        .map_err(|e| ClientError::Command(format!("model from the coordinator: {e}")))?;
    Ok(Params::new(model, values)?)
}

/// How a job's local trainings run: a job's [`JobKind::execute`] hands each of its trainings (and
/// IFCA's losses, StoCFL's gradients) to one, so the in-process pool can gather many clients'
/// into cohorts ([`crate::cohort`]) while a device computes them [`Alone`].
pub trait Trainer {
    /// Trains `t` on `data`.
    ///
    /// # Errors
    ///
    /// [`ClientError`] when the training fails.
    fn train(
        &mut self,
        t: &Training<'_>,
        data: &LocalData,
        device: &Device,
    ) -> Result<Update, ClientError>;

    /// The mean loss of `model` on `data` (IFCA's pick measures its candidates with it), computed
    /// here unless the trainer already knows it: the in-process pool's second pass of a job
    /// gives back what its first pass measured instead of evaluating every candidate again.
    ///
    /// # Errors
    ///
    /// [`ClientError`] when the evaluation fails.
    fn mean_loss(
        &mut self,
        model: &Params,
        data: &LocalData,
        device: &Device,
    ) -> Result<f64, ClientError> {
        Ok(crate::client::mean_loss(model, data, device)?)
    }

    /// The gradient of the mean loss of `at` over all of `data` in batches of `batch_size`
    /// (StoCFL's anchor gradient, before normalisation; [`crate::train::gradient`]), computed
    /// here unless the trainer gathers them: the in-process pool computes a round's gradients
    /// together, stacked on a GPU ([`crate::cohort::gradient_cohort`]).
    ///
    /// # Errors
    ///
    /// [`ClientError`] when the computation fails.
    fn gradient(
        &mut self,
        at: &Params,
        data: &LocalData,
        batch_size: usize,
        device: &Device,
    ) -> Result<Vec<f32>, ClientError> {
        Ok(crate::train::gradient(at, data, batch_size, device)?)
    }
}

/// Each training on its own, at once ([`train_local_prox`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Alone;

impl Trainer for Alone {
    fn train(
        &mut self,
        t: &Training<'_>,
        data: &LocalData,
        device: &Device,
    ) -> Result<Update, ClientError> {
        train_one(t, data, device)
    }
}

/// One training of `t` on `data`: the update (its `client` left 0).
fn train_one(t: &Training<'_>, data: &LocalData, device: &Device) -> Result<Update, ClientError> {
    let (params, report) = match t.prox {
        None => train_local(t.start, data, &t.cfg, device)?,
        Some(p) => train_local_prox(
            t.start,
            data,
            &t.cfg,
            Some(Proximal {
                anchor: p.anchor,
                mu: p.mu,
            }),
            device,
        )?,
    };
    Ok(Update {
        client: 0,
        params,
        samples: data.len() as u64,
        loss: report.last_epoch_loss,
    })
}

/// A device does not upload a diverged training.
pub(crate) fn finite(u: &Update) -> Result<(), ClientError> {
    if u.loss.is_finite() {
        Ok(())
    } else {
        Err(ClientError::Diverged(u.loss))
    }
}

/// An uploaded model of `model` checked against the run's `kind`: decoded, of the right size,
/// finite.
pub(crate) fn model_of(
    kind: ModelKind,
    model: ModelKind,
    params: &Tensor,
) -> Result<Params, Rejected> {
    if model != kind {
        return Err(Rejected::new(
            Rejection::WrongSize,
            format!("model {model}, the run trains {kind}"),
        ));
    }
    let values = params.decode(None)?;
    Params::new(model, values).map_err(|e| match e {
        ModelError::NotFinite { .. } => Rejected::new(Rejection::NotFinite, e.to_string()),
        e => Rejected::new(Rejection::WrongSize, e.to_string()),
    })
}

/// A trained model's sample count (> 0) and loss (finite).
pub(crate) fn check_samples_loss(samples: u64, loss: f64) -> Result<(), Rejected> {
    if samples == 0 || !loss.is_finite() {
        return Err(Rejected::new(
            Rejection::NotFinite,
            format!("samples {samples}, loss {loss}"),
        ));
    }
    Ok(())
}
