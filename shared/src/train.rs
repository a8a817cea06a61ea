//! Local training (SGD with momentum) and evaluation on burn.
//!
//! Everything here is seeded: the initial weights come from [`Params::init`], the order of the
//! samples from a ChaCha8 stream seeded by [`TrainConfig::seed`]. Batches keep the last partial
//! batch (PyTorch's `drop_last=False`, as NIID-Bench does). Momentum follows PyTorch's SGD
//! (`v ← μ·v + g`, no dampening).

use std::fmt;
use std::str::FromStr;
use std::time::Instant;

use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, SgdConfig};
use burn::prelude::*;
use burn::tensor::TensorData;

/// The burn device training runs on (re-exported so the runtimes need not depend on burn).
pub use burn::prelude::Device;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::data::fmnist::Dataset;
use crate::data::partition::rotate_image;
use crate::model::{Net, Params};

/// Pixels per image (28×28).
pub const PIXELS: usize = 28 * 28;
/// Number of classes.
pub const CLASSES: usize = 10;

/// The burn backend local training runs on. Chosen at run time among those compiled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// burn-flex, the pure-Rust CPU backend (default; ~10× faster than ndarray here).
    #[default]
    Flex,
    /// burn-ndarray (cargo feature `ndarray`).
    Ndarray,
}

impl Backend {
    /// The burn device, or an error when the backend was not compiled in.
    pub fn device(self) -> Result<Device, TrainError> {
        match self {
            Backend::Flex => Ok(Device::flex()),
            #[cfg(feature = "ndarray")]
            Backend::Ndarray => Ok(Device::ndarray()),
            #[cfg(not(feature = "ndarray"))]
            Backend::Ndarray => Err(TrainError::BackendMissing {
                backend: self,
                feature: "ndarray",
            }),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Flex => "flex",
            Backend::Ndarray => "ndarray",
        })
    }
}

impl FromStr for Backend {
    type Err = TrainError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "flex" | "cpu" => Ok(Backend::Flex),
            "ndarray" => Ok(Backend::Ndarray),
            _ => Err(TrainError::UnknownBackend(s.to_string())),
        }
    }
}

/// Errors of local training.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrainError {
    /// The backend is not compiled into this binary.
    #[error("backend {backend} is not compiled in; rebuild with `--features {feature}`")]
    BackendMissing {
        /// Requested backend.
        backend: Backend,
        /// Cargo feature that enables it.
        feature: &'static str,
    },
    /// Unknown backend name.
    #[error("unknown backend {0:?} (expected flex or ndarray)")]
    UnknownBackend(String),
    /// Hyper-parameters out of range.
    #[error("invalid training configuration: {0}")]
    InvalidConfig(String),
    /// Training produced NaN or infinite weights (learning rate too high?).
    #[error("training diverged: the loss or the weights became NaN/Inf")]
    Diverged,
}

/// Hyper-parameters of one local training call.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// Passes over the local data.
    pub epochs: usize,
    /// Mini-batch size.
    pub batch_size: usize,
    /// Learning rate.
    pub lr: f64,
    /// SGD momentum (0 disables it).
    pub momentum: f64,
    /// Seed of the sample order.
    pub seed: u64,
}

impl TrainConfig {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), TrainError> {
        if self.batch_size == 0 {
            return Err(TrainError::InvalidConfig("batch size must be ≥ 1".into()));
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(TrainError::InvalidConfig(format!(
                "learning rate must be > 0, got {}",
                self.lr
            )));
        }
        if !(0.0..1.0).contains(&self.momentum) {
            return Err(TrainError::InvalidConfig(format!(
                "momentum must be in [0, 1), got {}",
                self.momentum
            )));
        }
        Ok(())
    }
}

/// A client's samples, ready for training: pixels scaled to [0, 1], rotation applied.
#[derive(Debug, Clone, Default)]
pub struct LocalData {
    /// `len() * 784` floats.
    pub pixels: Vec<f32>,
    /// One label per sample.
    pub labels: Vec<u8>,
}

impl LocalData {
    /// Takes `indices` of `data`, rotated by `quarter_turns` × 90°.
    pub fn from_dataset(data: &Dataset, indices: &[usize], quarter_turns: u8) -> Self {
        let mut pixels = Vec::with_capacity(indices.len() * PIXELS);
        let mut labels = Vec::with_capacity(indices.len());
        for &i in indices {
            let img = data.image(i);
            if quarter_turns.is_multiple_of(4) {
                pixels.extend(img.iter().map(|&p| f32::from(p) / 255.0));
            } else {
                let r = rotate_image(img, quarter_turns);
                pixels.extend(r.iter().map(|&p| f32::from(p) / 255.0));
            }
            labels.push(data.labels[i]);
        }
        LocalData { pixels, labels }
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// True without samples.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    fn images(&self, idx: &[usize], device: &Device) -> Tensor<4> {
        let mut px = Vec::with_capacity(idx.len() * PIXELS);
        for &i in idx {
            px.extend_from_slice(&self.pixels[i * PIXELS..(i + 1) * PIXELS]);
        }
        Tensor::<4>::from_data(TensorData::new(px, [idx.len(), 1, 28, 28]), device)
    }

    fn targets(&self, idx: &[usize], device: &Device) -> Tensor<1, Int> {
        let lb: Vec<i64> = idx.iter().map(|&i| i64::from(self.labels[i])).collect();
        Tensor::<1, Int>::from_data(TensorData::new(lb, [idx.len()]), device)
    }
}

/// What a local training call did.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrainReport {
    /// Samples seen (epochs × local samples).
    pub samples: usize,
    /// Optimiser steps.
    pub steps: usize,
    /// Mean training loss over the last epoch.
    pub last_epoch_loss: f64,
    /// Wall-clock seconds.
    pub seconds: f64,
}

/// Trains `params` on `data` and returns the new parameters.
///
/// `device` is the plain device (e.g. [`Backend::device`]); autodiff is added here.
pub fn train_local(
    params: &Params,
    data: &LocalData,
    cfg: &TrainConfig,
    device: &Device,
) -> Result<(Params, TrainReport), TrainError> {
    cfg.validate()?;
    let start = Instant::now();
    let ad = device.clone().autodiff();
    let mut net = Net::from_params(params, &ad);
    let momentum = (cfg.momentum > 0.0).then_some(MomentumConfig {
        momentum: cfg.momentum,
        dampening: 0.0,
        nesterov: false,
    });
    let mut optim = SgdConfig::new().with_momentum(momentum).init();
    let loss_fn = CrossEntropyLossConfig::new().init(&ad);
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut order: Vec<usize> = (0..data.len()).collect();
    let mut steps = 0;
    let mut last_epoch_loss = 0.0;
    for _ in 0..cfg.epochs {
        order.shuffle(&mut rng);
        let mut loss_sum = 0.0;
        for chunk in order.chunks(cfg.batch_size) {
            let logits = net.forward(data.images(chunk, &ad));
            let loss = loss_fn.forward(logits, data.targets(chunk, &ad));
            loss_sum += f64::from(loss.clone().into_scalar::<f32>()) * chunk.len() as f64;
            let grads = GradientsParams::from_grads(loss.backward(), &net);
            net = optim.step(cfg.lr, net, grads);
            steps += 1;
        }
        last_epoch_loss = loss_sum / data.len().max(1) as f64;
        if !last_epoch_loss.is_finite() {
            return Err(TrainError::Diverged);
        }
    }
    let out = net.to_params();
    if out.values.iter().any(|v| !v.is_finite()) {
        return Err(TrainError::Diverged);
    }
    Ok((
        out,
        TrainReport {
            samples: cfg.epochs * data.len(),
            steps,
            last_epoch_loss,
            seconds: start.elapsed().as_secs_f64(),
        },
    ))
}

/// Loss and accuracy of a model on some samples, with per-label counts.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct EvalReport {
    /// Sum of the per-sample cross-entropy.
    pub loss_sum: f64,
    /// Correct predictions.
    pub correct: usize,
    /// Samples evaluated.
    pub total: usize,
    /// Correct predictions per true label.
    pub correct_per_label: [usize; CLASSES],
    /// Samples per true label.
    pub total_per_label: [usize; CLASSES],
    /// Summed cross-entropy per true label.
    pub loss_per_label: [f64; CLASSES],
}

impl EvalReport {
    /// Fraction correct (0 when empty).
    pub fn accuracy(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.correct as f64 / self.total as f64
        }
    }
    /// Mean loss (0 when empty).
    pub fn loss(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.loss_sum / self.total as f64
        }
    }
    /// The report restricted to samples whose label is in `labels` (the per-label counts make
    /// this exact: a client's local test set is every test sample of its labels).
    pub fn restrict(&self, labels: &[u8]) -> EvalReport {
        let mut out = EvalReport::default();
        for &l in labels {
            let l = usize::from(l);
            if l >= CLASSES {
                continue;
            }
            out.correct_per_label[l] = self.correct_per_label[l];
            out.total_per_label[l] = self.total_per_label[l];
            out.loss_per_label[l] = self.loss_per_label[l];
        }
        out.correct = out.correct_per_label.iter().sum();
        out.total = out.total_per_label.iter().sum();
        out.loss_sum = out.loss_per_label.iter().sum();
        out
    }

    /// Adds another report's counts.
    pub fn merge(&mut self, other: &EvalReport) {
        self.loss_sum += other.loss_sum;
        self.correct += other.correct;
        self.total += other.total;
        for l in 0..CLASSES {
            self.correct_per_label[l] += other.correct_per_label[l];
            self.total_per_label[l] += other.total_per_label[l];
            self.loss_per_label[l] += other.loss_per_label[l];
        }
    }
}

/// Evaluates `params` on `data` in batches of `batch_size`.
pub fn evaluate(
    params: &Params,
    data: &LocalData,
    batch_size: usize,
    device: &Device,
) -> EvalReport {
    let net = Net::from_params(params, device);
    let mut rep = EvalReport::default();
    let idx: Vec<usize> = (0..data.len()).collect();
    for chunk in idx.chunks(batch_size.max(1)) {
        let logits = net.forward(data.images(chunk, device));
        let logp = burn::tensor::activation::log_softmax(logits.clone(), 1);
        let pred = logits.argmax(1).into_data();
        let logp = logp.into_data();
        let logp: Vec<f32> = logp.iter::<f32>().collect();
        for (k, (&i, p)) in chunk.iter().zip(pred.iter::<i64>()).enumerate() {
            let label = usize::from(data.labels[i]);
            let loss = -f64::from(logp[k * CLASSES + label]);
            rep.loss_sum += loss;
            rep.loss_per_label[label] += loss;
            rep.total += 1;
            rep.total_per_label[label] += 1;
            if p == label as i64 {
                rep.correct += 1;
                rep.correct_per_label[label] += 1;
            }
        }
    }
    rep
}
