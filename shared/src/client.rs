//! What a client computes for a [`Job`], on its own data: one function for every runtime that
//! holds a client's data (the in-process pool and the edge client), so a simulated client and a
//! device compute the same thing.
//!
//! MT-HFL's two jobs ([`Job::GramSignature`], [`Job::Relevance`]) keep state between messages (the
//! exact own signature, the relay) and are done by the runtimes with [`crate::cluster::spectral`];
//! [`execute`] answers everything else.

use crate::federation::{Answer, Job, LabelStats, Training, Update};
use crate::model::{ParamLayout, Params};
use crate::train::{
    Device, EvalReport, LocalData, Proximal, TrainError, evaluate, gradient, train_local,
    train_local_prox,
};

/// Batch size of evaluations and loss passes (no effect on the result).
pub const EVAL_BATCH: usize = 500;

/// Classes holding less than this share of a client's samples are not counted in AdaCFL's L
/// (see [`LabelStats::of`]).
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
    /// The job is stateful and done by the runtime, not here.
    #[error("job {0} is done by the runtime")]
    Stateful(&'static str),
}

/// A client's data.
#[derive(Debug, Clone, Copy)]
pub struct ClientData<'a> {
    /// Training samples.
    pub train: &'a LocalData,
    /// Local test samples (None where evaluation is done elsewhere).
    pub test: Option<&'a LocalData>,
}

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

/// Mean cross-entropy of `params` on `data`.
///
/// # Errors
///
/// As [`evaluate`].
pub fn mean_loss(params: &Params, data: &LocalData, device: &Device) -> Result<f64, TrainError> {
    let r = evaluate(params, data, EVAL_BATCH, device)?;
    Ok(r.loss_sum / r.total.max(1) as f64)
}

/// Does `job` on `data` (see the module docs for the jobs done elsewhere).
///
/// # Errors
///
/// [`ClientError`] when training fails, the job is malformed for this client, or it is one of
/// MT-HFL's stateful jobs.
pub fn execute(
    job: &Job<'_>,
    data: ClientData<'_>,
    device: &Device,
) -> Result<Answer, ClientError> {
    if data.train.is_empty() && !matches!(job, Job::Evaluate { .. }) {
        return Err(ClientError::NoData("no training samples"));
    }
    Ok(match job {
        Job::Train(t) => Answer::Update(train_one(t, data.train, device)?),
        Job::Signature {
            train,
            layers,
            stats,
        } => {
            let selection = ParamLayout::of(train.start.model).select(layers)?;
            let trained = train_one(train, data.train, device)?;
            Answer::Signature {
                values: selection.extract(&trained.params.values),
                stats: stats.then(|| LabelStats::of(&data.train.labels, LABEL_STATS_MIN_SHARE)),
            }
        }
        Job::TrainPair { global, cluster } => Answer::Pair {
            global: train_one(global, data.train, device)?,
            cluster: train_one(cluster, data.train, device)?,
        },
        Job::Pick { candidates, train } => {
            if candidates.is_empty() {
                return Err(ClientError::NoData("no candidate model"));
            }
            let losses: Vec<f64> = candidates
                .iter()
                .map(|c| mean_loss(c, data.train, device))
                .collect::<Result<_, _>>()?;
            let mut choice = 0;
            for (k, l) in losses.iter().enumerate() {
                if *l < losses[choice] {
                    choice = k;
                }
            }
            let chosen = Training {
                start: candidates[choice],
                ..*train
            };
            Answer::Picked {
                choice,
                update: train_one(&chosen, data.train, device)?,
                losses,
            }
        }
        Job::Gradient { at, batch_size } => {
            let mut g = gradient(at, data.train, *batch_size, device)?;
            let norm = g.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>().sqrt();
            if norm > 0.0 {
                for v in &mut g {
                    *v = (f64::from(*v) / norm) as f32;
                }
            }
            Answer::Gradient(g)
        }
        Job::Evaluate { model } => {
            let test = data.test.ok_or(ClientError::NoData("no local test set"))?;
            let r: EvalReport = evaluate(model, test, EVAL_BATCH, device)?;
            Answer::Evaluation(Box::new(r.with_training_labels(&data.train.labels)))
        }
        Job::GramSignature { .. } | Job::Relevance { .. } => {
            return Err(ClientError::Stateful(job.name()));
        }
    })
}
