//! A [`Job`] and its [`Answer`] as messages of the wire protocol: the one mapping the
//! coordinator uses to send a job ([`command`]), the edge client to send its answer
//! ([`reply`]), and the driver to count the bytes a run moves ([`Env::run`], in `simulate` as
//! over MQTT), so that the counts are the sizes of the messages the runtimes encode.
//!
//! [`Env::run`]: super::Env::run

use crate::cluster::spectral;
use crate::protocol::{self, Encoding, LabelEval, Tensor, ToClient, ToCoordinator, TrainJob};
use crate::train::CLASSES;

use super::pool::{Answer, Job, Training};

/// A job or answer that has no message of the wire protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{job}: {reason}")]
pub struct WireError {
    /// The job's name ([`Job::name`]).
    pub job: &'static str,
    /// Why.
    pub reason: String,
}

impl WireError {
    fn new(job: &Job<'_>, reason: impl Into<String>) -> Self {
        WireError {
            job: job.name(),
            reason: reason.into(),
        }
    }
}

/// The training settings of `t` as sent to a client, its upload in `upload`.
fn train_job(t: &Training<'_>, upload: Encoding) -> TrainJob {
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

/// The command that asks a client to do `job`, models sent in f32 and its upload of models and
/// layers asked in `upload`. MT-HFL's relevance job also needs the relay of every signature,
/// sent once to all ([`relay`]).
///
/// # Errors
///
/// [`WireError`] for a job the protocol cannot express: a proximal term toward another model
/// than the one sent (except StoCFL's pair, whose anchor is its global model), or a proximal
/// term on a signature or pick job.
pub fn command(job: &Job<'_>, upload: Encoding) -> Result<ToClient, WireError> {
    let unsupported = || WireError::new(job, "not carried over MQTT");
    Ok(match job {
        Job::Train(t) => match t.prox {
            None => ToClient::Train(train_job(t, upload)),
            Some(p) if p.anchor == t.start => ToClient::TrainProx {
                job: train_job(t, upload),
                mu: p.mu,
            },
            Some(_) => return Err(unsupported()),
        },
        Job::Signature {
            train,
            layers,
            stats,
        } if train.prox.is_none() => {
            let (job, layers) = (
                train_job(train, upload),
                protocol::text(&layers.to_string()),
            );
            if *stats {
                ToClient::SignatureStats { job, layers }
            } else {
                ToClient::Signature { job, layers }
            }
        }
        Job::TrainPair { global, cluster } => match (global.prox, cluster.prox) {
            (None, Some(p)) if p.anchor == global.start => ToClient::TrainPair {
                global: train_job(global, upload),
                cluster: train_job(cluster, upload),
                mu: p.mu,
            },
            _ => return Err(unsupported()),
        },
        Job::Pick { candidates, train } if train.prox.is_none() => {
            let mut settings = train_job(train, upload);
            settings.params = Tensor::encode(&[], Encoding::F32);
            ToClient::Pick {
                job: settings,
                candidates: candidates
                    .iter()
                    .map(|c| Tensor::encode(&c.values, Encoding::F32))
                    .collect(),
            }
        }
        Job::Gradient { at, batch_size } => ToClient::Gradient {
            model: at.model,
            params: Tensor::encode(&at.values, Encoding::F32),
            batch_size: *batch_size as u32,
            upload,
        },
        Job::Evaluate { model } => ToClient::Evaluate {
            model: model.model,
            params: Tensor::encode(&model.values, Encoding::F32),
        },
        Job::GramSignature { k, encoding } => ToClient::GramSignature {
            k: *k as u32,
            upload: *encoding,
        },
        Job::Relevance { all, estimate } => ToClient::Relevance {
            clients: all.len() as u32,
            estimate: *estimate,
        },
        Job::Signature { .. } | Job::Pick { .. } => return Err(unsupported()),
    })
}

/// MT-HFL's relay of every client's signature, which a [`Job::Relevance`] needs beside its
/// command (one broadcast for the whole fleet; `None` for every other job).
///
/// # Errors
///
/// [`WireError`] when the signatures cannot be relayed (none, or of different shapes).
pub fn relay(job: &Job<'_>) -> Result<Option<ToClient>, WireError> {
    match job {
        Job::Relevance { all, .. } => spectral::relay(all)
            .map(|wire| Some(ToClient::Relay(wire)))
            .map_err(|e| WireError::new(job, e.to_string())),
        _ => Ok(None),
    }
}

/// The message a client sends for `answer` to `job`: models, layers and gradients in `upload`
/// (the encoding `job`'s [`command`] asked for), MT-HFL's eigenpairs in the job's own encoding,
/// relevance rows in f32.
///
/// # Errors
///
/// [`WireError`] when `answer` is not of `job`'s kind, or AdaCFL's label statistics are missing.
pub fn reply(job: &Job<'_>, answer: &Answer, upload: Encoding) -> Result<ToCoordinator, WireError> {
    Ok(match (job, answer) {
        (Job::Train(_), Answer::Update(u)) => ToCoordinator::Update {
            model: u.params.model,
            params: Tensor::encode(&u.params.values, upload),
            samples: u.samples,
            loss: u.loss,
        },
        (Job::Signature { stats: false, .. }, Answer::Signature { values, .. }) => {
            ToCoordinator::Signature {
                values: Tensor::encode(values, upload),
            }
        }
        (
            Job::Signature { stats: true, .. },
            Answer::Signature {
                values,
                stats: Some(stats),
            },
        ) => ToCoordinator::SignatureStats {
            values: Tensor::encode(values, upload),
            classes: stats.classes,
            entropy: stats.entropy,
        },
        (Job::TrainPair { .. }, Answer::Pair { global, cluster }) => ToCoordinator::Pair {
            model: global.params.model,
            global: Tensor::encode(&global.params.values, upload),
            cluster: Tensor::encode(&cluster.params.values, upload),
            samples: global.samples,
            global_loss: global.loss,
            cluster_loss: cluster.loss,
        },
        (
            Job::Pick { .. },
            Answer::Picked {
                choice,
                losses,
                update,
            },
        ) => ToCoordinator::Picked {
            choice: *choice as u32,
            losses: losses.clone(),
            model: update.params.model,
            params: Tensor::encode(&update.params.values, upload),
            samples: update.samples,
            loss: update.loss,
        },
        (Job::Gradient { .. }, Answer::Gradient(g)) => ToCoordinator::Gradient {
            values: Tensor::encode(g, upload),
        },
        (Job::GramSignature { encoding, .. }, Answer::Eigenpairs(s)) => {
            ToCoordinator::Eigenpairs(s.to_wire(*encoding))
        }
        (Job::Relevance { .. }, Answer::Row(row)) => {
            let row: Vec<f32> = row.iter().map(|&r| r as f32).collect();
            ToCoordinator::RelevanceRow {
                row: Tensor::encode(&row, Encoding::F32),
            }
        }
        (Job::Evaluate { .. }, Answer::Evaluation(r)) => ToCoordinator::Evaluation {
            per_label: (0..CLASSES)
                .filter(|&l| r.total_per_label[l] > 0)
                .map(|l| LabelEval {
                    label: l as u8,
                    correct: r.correct_per_label[l] as u32,
                    total: r.total_per_label[l] as u32,
                    loss_sum: r.loss_per_label[l],
                    trained: r.trained_per_label[l] as u32,
                })
                .collect(),
        },
        _ => {
            return Err(WireError::new(
                job,
                format!("{} does not answer it", answer.name()),
            ));
        }
    })
}

/// Bytes of a message's postcard encoding (the body of its envelope: without the version, run
/// id and round, which every message carries alike).
pub fn encoded_len<M: serde::Serialize>(message: &M) -> u64 {
    postcard::experimental::serialized_size(message).map_or(0, |n| n as u64)
}
