//! Evaluation of a model on the client's local test set ([`ToClient::Evaluate`], answered by
//! [`ToCoordinator::Evaluation`]: the counts per label, from which the server rebuilds the
//! report).

use crate::client::{ClientData, ClientError, EVAL_BATCH};
use crate::model::Params;
use crate::protocol::{Encoding, LabelEval, Tensor, ToClient, ToCoordinator};
use crate::train::{Device, EvalReport, evaluate};

use super::train::decode_params;
use super::{Alone, JobKind, Rejected, Rejection, Trainer, Uploads, WireError, unexpected};

/// Evaluate `model` on the local test set.
#[derive(Debug, Clone, Copy)]
pub struct EvaluateJob<'a> {
    /// The model.
    pub model: &'a Params,
}

/// Evaluation on the local test set.
#[derive(Debug, Clone, Copy)]
pub struct Evaluate;

impl JobKind for Evaluate {
    const NAME: &'static str = "evaluate";
    const UPLOADS: Uploads = Uploads::Evaluations;
    const NEEDS_TRAINING_DATA: bool = false;
    type Job<'a> = EvaluateJob<'a>;
    type Answer = Box<EvalReport>;

    fn floats_down(job: &EvaluateJob<'_>) -> usize {
        job.model.values.len()
    }

    fn floats_up(_: &Box<EvalReport>) -> usize {
        0
    }

    fn command(job: &EvaluateJob<'_>, _upload: Encoding) -> Result<ToClient, WireError> {
        Ok(ToClient::Evaluate {
            model: job.model.model,
            params: Tensor::encode(&job.model.values, Encoding::F32),
        })
    }

    fn reply(
        _: &EvaluateJob<'_>,
        r: &Box<EvalReport>,
        _: Encoding,
    ) -> Result<ToCoordinator, WireError> {
        Ok(ToCoordinator::Evaluation {
            per_label: (0..r.classes())
                .filter(|&l| r.total_per_label[l] > 0)
                .map(|l| LabelEval {
                    label: l as u8,
                    correct: r.correct_per_label[l] as u32,
                    total: r.total_per_label[l] as u32,
                    loss_sum: r.loss_per_label[l],
                    trained: r.trained_per_label.get(l).copied().unwrap_or(0) as u32,
                })
                .collect(),
        })
    }

    /// The report rebuilt from the label counts: labels among the model's classes, at most as
    /// many correct as samples, cross-entropy sums finite and non-negative (and finite in sum).
    fn accept(job: &EvaluateJob<'_>, body: ToCoordinator) -> Result<Box<EvalReport>, Rejected> {
        let ToCoordinator::Evaluation { per_label } = body else {
            return Err(unexpected(&body));
        };
        let classes = job.model.classes();
        let mut r = EvalReport::new(classes);
        for l in per_label {
            let i = usize::from(l.label);
            let loss_ok = l.loss_sum.is_finite() && l.loss_sum >= 0.0;
            if i >= classes || l.correct > l.total || !loss_ok {
                return Err(Rejected::new(
                    Rejection::Malformed,
                    format!("evaluation entry {l:?}"),
                ));
            }
            r.correct_per_label[i] += l.correct as usize;
            r.total_per_label[i] += l.total as usize;
            r.loss_per_label[i] += l.loss_sum;
            r.trained_per_label[i] += l.trained as usize;
        }
        r.correct = r.correct_per_label.iter().sum();
        r.total = r.total_per_label.iter().sum();
        r.loss_sum = r.loss_per_label.iter().sum();
        if !r.loss_sum.is_finite() {
            return Err(Rejected::new(
                Rejection::Malformed,
                "evaluation losses sum to infinity",
            ));
        }
        Ok(Box::new(r))
    }

    fn execute(
        job: &EvaluateJob<'_>,
        data: ClientData<'_>,
        device: &Device,
        _: &mut dyn Trainer,
    ) -> Result<Box<EvalReport>, ClientError> {
        let test = data.test.ok_or(ClientError::NoData("no local test set"))?;
        let r = evaluate(job.model, test, EVAL_BATCH, device)?;
        Ok(Box::new(r.with_training_labels(&data.train.labels)))
    }

    fn serve(
        cmd: &ToClient,
        data: ClientData<'_>,
        device: &Device,
        _threads: usize,
    ) -> Option<Result<ToCoordinator, ClientError>> {
        let ToClient::Evaluate { model, params } = cmd else {
            return None;
        };
        Some((|| {
            let model = decode_params(*model, params)?;
            let job = EvaluateJob { model: &model };
            let r = Self::execute(&job, data, device, &mut Alone)?;
            Ok(Self::reply(&job, &r, Encoding::F32)?)
        })())
    }
}
