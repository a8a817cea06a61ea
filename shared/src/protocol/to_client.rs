//! Coordinator → client: [`ToClient`] and the training job it carries.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use serde::{Deserialize, Serialize};

#[cfg(doc)]
use super::ToCoordinator;
use super::{Eigenpairs, Encoding, Tensor, Text};

/// The model architectures edgecfl trains (see `model` for their layouts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// LeNet-5 for 28×28 grey images (NIID-Bench `SimpleCNNMNIST`).
    LeNet5,
    /// MLP 784→32→10 (MT-HFL's FMNIST model).
    Mlp,
    /// LeNet-5 for 32×32 colour images (NIID-Bench `SimpleCNN`: CIFAR-10, SVHN).
    #[serde(alias = "lenet5-rgb")]
    LeNet5Rgb,
    /// AdaCFL's `MnistCNN` (28×28 grey): conv 1→20, conv 20→50, one fully connected layer.
    #[serde(rename = "mnist-cnn", alias = "mnistcnn")]
    MnistCnn,
    /// AdaCFL's `CifarCNN` (32×32 colour): conv 3→6, conv 6→16, one fully connected layer.
    #[serde(rename = "cifar-cnn", alias = "cifarcnn")]
    CifarCnn,
    /// AdaCFL's `FmnistCNN` (28×28 grey): conv 1→16 (padded), conv 16→32, one fully connected
    /// layer.
    #[serde(rename = "fmnist-cnn", alias = "fmnistcnn")]
    FmnistCnn,
    /// ResNet-9 (32×32 colour; FedClust's CIFAR-100 model) with GroupNorm: eight 3×3
    /// convolutions in six blocks, two of them residual, and one fully connected layer.
    #[serde(rename = "resnet9", alias = "resnet-9")]
    ResNet9,
}

/// How client `i` estimates the eigenvalue of client `j`'s eigenvector `v` under its own Gram
/// matrix `Gᵢ` (MT-HFL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Estimate {
    /// `‖Gᵢ v‖`, the paper's eq. (2).
    #[default]
    Norm,
    /// `vᵀ Gᵢ v`, the Rayleigh quotient (the data's variance along `v`).
    Rayleigh,
}

impl fmt::Display for Estimate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Estimate::Norm => "norm",
            Estimate::Rayleigh => "rayleigh",
        })
    }
}

impl core::str::FromStr for Estimate {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "norm" => Ok(Estimate::Norm),
            "rayleigh" => Ok(Estimate::Rayleigh),
            _ => Err(format!(
                "unknown estimate {s:?} (expected norm or rayleigh)"
            )),
        }
    }
}

/// A training job: the model to start from and the local-training settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainJob {
    /// Architecture of `params`.
    pub model: ModelKind,
    /// The starting parameters (f32).
    pub params: Tensor,
    /// Local epochs.
    pub epochs: u32,
    /// Mini-batch size.
    pub batch_size: u32,
    /// Learning rate.
    pub lr: f64,
    /// SGD momentum.
    pub momentum: f64,
    /// Seed of the sample order (the coordinator derives it per client and round).
    pub seed: u64,
    /// Encoding the client uses for its upload.
    pub upload: Encoding,
}

/// Coordinator → client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToClient {
    /// Round 0: train for the warm-up and upload the `layers` (`final`, `smallest-fc`, `all` or
    /// names such as `conv1,conv2`) of the result.
    Signature {
        /// Warm-up training.
        job: TrainJob,
        /// Which layers to upload.
        layers: Text,
    },
    /// Train the cluster model and upload the result.
    Train(TrainJob),
    /// Evaluate a model on the local test set.
    Evaluate {
        /// Architecture.
        model: ModelKind,
        /// Parameters.
        params: Tensor,
    },
    /// The run is over.
    Finish,
    /// MT-HFL round 0: form the Gram matrix of the training data (eq. 1) and upload its `k`
    /// leading eigenpairs ([`ToCoordinator::Eigenpairs`]).
    GramSignature {
        /// Eigenpairs to upload.
        k: u32,
        /// Encoding of the upload.
        upload: Encoding,
    },
    /// MT-HFL round 0, on the broadcast topic only: every client's signature, client `j`'s at
    /// position `j`, as the coordinator received them. Not a job: it waits for [`Self::Relevance`].
    Relay(Eigenpairs),
    /// MT-HFL round 0: compute the relevance row `r(i, ·)` (eq. 2-4) against the relay of this
    /// run and round, with the exact Gram matrix, and upload it ([`ToCoordinator::RelevanceRow`]).
    Relevance {
        /// Signatures in the relay (the row's length).
        clients: u32,
        /// How to estimate the others' eigenvalues under the own Gram matrix.
        estimate: Estimate,
    },
    /// Train with a proximal term `μ/2 · ‖θ − θ_sent‖²` toward the model sent (FedProx, FeSEM)
    /// and upload the result ([`ToCoordinator::Update`]).
    TrainProx {
        /// The training.
        job: TrainJob,
        /// μ ≥ 0.
        mu: f64,
    },
    /// StoCFL's bi-level step: train `global` plainly and `cluster` with the proximal term
    /// `μ/2 · ‖θ − ω‖²` toward `global`'s parameters ω; upload both ([`ToCoordinator::Pair`]).
    TrainPair {
        /// The global model's training.
        global: TrainJob,
        /// The cluster model's training.
        cluster: TrainJob,
        /// μ ≥ 0 (StoCFL's λ).
        mu: f64,
    },
    /// IFCA: the mean training loss of each candidate model, then the candidate of lowest loss
    /// (ties: the lower index) is trained with `job`'s settings (`job.params` is empty) and
    /// uploaded with its index ([`ToCoordinator::Picked`]).
    Pick {
        /// Settings of the training (`params` empty).
        job: TrainJob,
        /// The candidates, of `job.model`.
        candidates: Vec<Tensor>,
    },
    /// StoCFL: the gradient of the mean cross-entropy over all training data at the model sent,
    /// normalised to unit length ([`ToCoordinator::Gradient`]).
    Gradient {
        /// Architecture.
        model: ModelKind,
        /// The anchor model.
        params: Tensor,
        /// Batch size of the passes (no effect beyond rounding).
        batch_size: u32,
        /// Encoding of the upload.
        upload: Encoding,
    },
    /// AdaCFL round 0: [`Self::Signature`], plus the label statistics of the training data
    /// ([`ToCoordinator::SignatureStats`]).
    SignatureStats {
        /// Warm-up training.
        job: TrainJob,
        /// Which layers to upload.
        layers: Text,
    },
    /// "Are you there?": the coordinator asks every client that announced itself (its
    /// retained `Hello`, possibly stale or forged) to answer [`ToCoordinator::Pong`] on its `up`
    /// topic before it counts it as joined. Not a job: answered at once.
    Ping,
    /// The run is over ([`Self::Finish`]), and this is the final model of the client's cluster,
    /// for the client to keep. Sent retained, so that a client that missed the end of the run
    /// gets it when it next connects (while the broker keeps it). Not a job: not answered.
    FinalModel(FinalModel),
    /// A job of a kind that has no message of its own in this protocol: the kind's name and the
    /// job's own message, postcard-encoded by the job's file (`shared/src/jobs/`). How a job
    /// added after these messages travels, so that adding a job does not touch the protocol.
    /// Answered by [`ToCoordinator::Custom`].
    Custom {
        /// The job kind's name.
        kind: Text,
        /// The job's message, postcard-encoded.
        body: Vec<u8>,
    },
}

/// A cluster's final model as a client keeps it ([`ToClient::FinalModel`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinalModel {
    /// Architecture of `params`.
    pub model: ModelKind,
    /// The parameters (f32, exact).
    pub params: Tensor,
    /// The cluster (or LPS) index in the run.
    pub cluster: u32,
    /// Training rounds done.
    pub rounds: u32,
    /// The method that trained it.
    pub method: Text,
    /// The cluster members' mean local test accuracy at their last evaluation (as reported by
    /// them), if any.
    pub accuracy: Option<f64>,
}
