//! Round 0's signature (FedClust, AdaCFL): train the warm-up, upload only some layers of the
//! result ([`ToClient::Signature`], answered by [`ToCoordinator::Signature`]); AdaCFL adds the
//! label statistics of the training data ([`ToClient::SignatureStats`], answered by
//! [`ToCoordinator::SignatureStats`]).

use serde::{Deserialize, Serialize};

use crate::client::{ClientData, ClientError, LABEL_STATS_MIN_SHARE};
use crate::model::LayerSet;
use crate::protocol::{self, Encoding, Tensor, ToClient, ToCoordinator};
use crate::train::Device;

use super::train::{config_of, decode_params, settings_of};
use super::{
    Alone, JobKind, Rejected, Rejection, Trainer, Training, Uploads, WireError, unexpected,
};

/// Label statistics of a client's training data (AdaCFL's pre-clustering, its eq. 4).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LabelStats {
    /// Number of classes present (L).
    pub classes: u32,
    /// Shannon entropy of the label histogram in bits (s = −Σ p log₂ p).
    pub entropy: f64,
}

impl LabelStats {
    /// The statistics of `labels`, counting only classes that hold at least `min_share` of the
    /// samples (0 counts every class present).
    pub fn of(labels: &[u8], min_share: f64) -> LabelStats {
        let mut counts = [0usize; 256];
        for &l in labels {
            counts[usize::from(l)] += 1;
        }
        let n = labels.len().max(1) as f64;
        let mut classes = 0;
        let mut entropy = 0.0;
        for &c in counts.iter().filter(|&&c| c > 0) {
            let p = c as f64 / n;
            if p >= min_share {
                classes += 1;
            }
            entropy -= p * p.log2();
        }
        LabelStats {
            classes,
            entropy: entropy.max(0.0),
        }
    }
}

/// Train, then upload only `layers` of the result; with `stats`, also the label statistics of
/// the training data ([`LabelStats`]).
#[derive(Debug, Clone, Copy)]
pub struct SignatureJob<'a> {
    /// The training (round 0's warm-up; no proximal term over the wire).
    pub train: Training<'a>,
    /// Layers to upload.
    pub layers: &'a LayerSet,
    /// Also upload [`LabelStats`].
    pub stats: bool,
}

/// The answer to a [`SignatureJob`].
#[derive(Debug, Clone)]
pub struct SignatureUpload {
    /// The selected layers' values.
    pub values: Vec<f32>,
    /// Label statistics, when asked.
    pub stats: Option<LabelStats>,
}

/// Round 0's signature.
#[derive(Debug, Clone, Copy)]
pub struct Signature;

impl JobKind for Signature {
    const NAME: &'static str = "signature";
    const TRAINS: bool = true;
    const UPLOADS: Uploads = Uploads::Signatures;
    type Job<'a> = SignatureJob<'a>;
    type Answer = SignatureUpload;

    fn floats_down(job: &SignatureJob<'_>) -> usize {
        <super::train::Train as JobKind>::floats_down(&job.train)
    }

    fn floats_up(a: &SignatureUpload) -> usize {
        a.values.len() + 2 * usize::from(a.stats.is_some())
    }

    fn command(job: &SignatureJob<'_>, upload: Encoding) -> Result<ToClient, WireError> {
        if job.train.prox.is_some() {
            return Err(WireError::new::<Self>(
                "a proximal warm-up is not carried over MQTT",
            ));
        }
        job.train
            .start
            .layout()
            .select(job.layers)
            .map_err(|e| WireError::new::<Self>(e.to_string()))?;
        let (job_, layers) = (
            settings_of(&job.train, upload),
            protocol::text(&job.layers.to_string()),
        );
        Ok(if job.stats {
            ToClient::SignatureStats { job: job_, layers }
        } else {
            ToClient::Signature { job: job_, layers }
        })
    }

    fn reply(
        job: &SignatureJob<'_>,
        a: &SignatureUpload,
        upload: Encoding,
    ) -> Result<ToCoordinator, WireError> {
        let values = Tensor::encode(&a.values, upload);
        match (job.stats, a.stats) {
            (false, _) => Ok(ToCoordinator::Signature { values }),
            (true, Some(stats)) => Ok(ToCoordinator::SignatureStats {
                values,
                classes: stats.classes,
                entropy: stats.entropy,
            }),
            (true, None) => Err(WireError::new::<Self>("the label statistics are missing")),
        }
    }

    /// Of the selected layers' length; label statistics of 1 to C classes (the model's) and an
    /// entropy in `[0, log₂ C]`.
    fn accept(job: &SignatureJob<'_>, body: ToCoordinator) -> Result<SignatureUpload, Rejected> {
        let most = job.train.start.classes();
        let len = job
            .train
            .start
            .layout()
            .select(job.layers)
            .map_err(|e| Rejected::new(Rejection::Malformed, e.to_string()))?
            .len();
        match (job.stats, body) {
            (false, ToCoordinator::Signature { values }) => Ok(SignatureUpload {
                values: values.decode(Some(len))?,
                stats: None,
            }),
            (
                true,
                ToCoordinator::SignatureStats {
                    values,
                    classes,
                    entropy,
                },
            ) => {
                if classes == 0
                    || classes as usize > most
                    || !(0.0..=(most as f64).log2() + 1e-9).contains(&entropy)
                {
                    return Err(Rejected::new(
                        Rejection::Malformed,
                        format!("label statistics: {classes} classes, entropy {entropy}"),
                    ));
                }
                Ok(SignatureUpload {
                    values: values.decode(Some(len))?,
                    stats: Some(LabelStats { classes, entropy }),
                })
            }
            (_, body) => Err(unexpected(&body)),
        }
    }

    fn execute(
        job: &SignatureJob<'_>,
        data: ClientData<'_>,
        device: &Device,
        trainer: &mut dyn Trainer,
    ) -> Result<SignatureUpload, ClientError> {
        let selection = job.train.start.layout().select(job.layers)?;
        let trained = trainer.train(&job.train, data.train, device)?;
        Ok(SignatureUpload {
            values: selection.extract(&trained.params.values),
            stats: job
                .stats
                .then(|| LabelStats::of(&data.train.labels, LABEL_STATS_MIN_SHARE)),
        })
    }

    fn serve(
        cmd: &ToClient,
        data: ClientData<'_>,
        device: &Device,
        threads: usize,
    ) -> Option<Result<ToCoordinator, ClientError>> {
        let (job, layers, stats) = match cmd {
            ToClient::Signature { job, layers } => (job, layers, false),
            ToClient::SignatureStats { job, layers } => (job, layers, true),
            _ => return None,
        };
        Some((|| {
            let start = decode_params(job.model, &job.params)?;
            let layers: LayerSet = layers.parse()?;
            let s = SignatureJob {
                train: Training {
                    start: &start,
                    cfg: config_of(job, threads),
                    prox: None,
                },
                layers: &layers,
                stats,
            };
            let a = Self::execute(&s, data, device, &mut Alone)?;
            Ok(Self::reply(&s, &a, job.upload)?)
        })())
    }
}
