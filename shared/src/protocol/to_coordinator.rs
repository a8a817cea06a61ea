//! Client → coordinator: [`ToCoordinator`], the `Hello` it starts with, and answers' checks.

use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

#[cfg(doc)]
use super::ToClient;
use super::{Eigenpairs, ModelKind, ProtocolError, Tensor, Text};

/// Accuracy counts of one label on a client's test set.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LabelEval {
    /// The label.
    pub label: u8,
    /// Correct predictions.
    pub correct: u32,
    /// Samples.
    pub total: u32,
    /// Summed cross-entropy.
    pub loss_sum: f64,
    /// The client's training samples of this label: the label's weight in the proportional
    /// view (`LocalTest::Proportional`). This discloses the client's label histogram to the
    /// coordinator, beside the label set that `label` already discloses.
    pub trained: u32,
}

/// Where a testbed client's data came from: shard `index` of `of` of a seeded partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardInfo {
    /// The partition (`label:2`, `groups:012-34-56-789`, ...).
    pub partition: Text,
    /// Its seed.
    pub seed: u64,
    /// Shard index.
    pub index: u32,
    /// Number of shards.
    pub of: u32,
    /// Ground-truth group of the shard, when the partition has one (`groups:`, `rotate:`); used
    /// only to score the clustering.
    pub group: Option<u32>,
}

/// A client's announcement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// Training samples. Taken on trust, it bounds the `samples` of every update this client
    /// sends (an update claiming more is dropped) and weights its updates unless the run weighs
    /// equally (`--weighting equal`).
    pub samples: u64,
    /// Local test samples.
    pub test_samples: u64,
    /// Training backend (`flex`, `ndarray`, ...).
    pub backend: Text,
    /// Set by testbed clients that hold a shard of a known partition.
    pub shard: Option<ShardInfo>,
}

/// Client → coordinator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToCoordinator {
    /// "I am here" (retained status message).
    Hello(Hello),
    /// Round-0 upload: the selected layers after the warm-up.
    Signature {
        /// The layers' values.
        values: Tensor,
    },
    /// A trained model.
    Update {
        /// Architecture.
        model: ModelKind,
        /// The parameters.
        params: Tensor,
        /// Samples trained on (the FedAvg weight).
        samples: u64,
        /// Mean training loss of the last epoch.
        loss: f64,
    },
    /// Evaluation counts per label.
    Evaluation {
        /// Labels present in the test set.
        per_label: Vec<LabelEval>,
    },
    /// The job could not be done (the reason is for the log).
    Failed {
        /// Why.
        reason: Text,
    },
    /// The client is gone (last will, or a clean exit).
    Gone,
    /// MT-HFL round 0: the client's data signature (`n = 1`).
    Eigenpairs(Eigenpairs),
    /// MT-HFL round 0: the relevance row `r(i, ·)`, one value in `[0, 1]` per relayed signature.
    RelevanceRow {
        /// The row (uploaded in `f32`: it is small, and `f16` would blur the clustering).
        row: Tensor,
    },
    /// StoCFL: both trained models of a [`ToClient::TrainPair`].
    Pair {
        /// Architecture.
        model: ModelKind,
        /// The trained global model.
        global: Tensor,
        /// The trained cluster model.
        cluster: Tensor,
        /// Samples trained on (the FedAvg weight of both).
        samples: u64,
        /// Mean training loss of the global model's last epoch.
        global_loss: f64,
        /// Mean training loss of the cluster model's last epoch.
        cluster_loss: f64,
    },
    /// IFCA: the answer to a [`ToClient::Pick`].
    Picked {
        /// Index of the chosen candidate.
        choice: u32,
        /// Mean training loss of each candidate before training.
        losses: Vec<f64>,
        /// Architecture.
        model: ModelKind,
        /// The trained choice.
        params: Tensor,
        /// Samples trained on.
        samples: u64,
        /// Mean training loss of the last epoch.
        loss: f64,
    },
    /// StoCFL: the normalised anchor gradient.
    Gradient {
        /// The gradient (one value per parameter).
        values: Tensor,
    },
    /// AdaCFL round 0: the signature and the label statistics.
    SignatureStats {
        /// The layers' values.
        values: Tensor,
        /// Classes present in the training data (L).
        classes: u32,
        /// Shannon entropy of the label histogram in bits.
        entropy: f64,
    },
    /// The answer to a [`ToClient::Ping`], with the ping's run and round: this client is live
    /// and serves that run.
    Pong,
    /// The answer to a [`ToClient::Custom`]: the job kind's name and the answer's own message,
    /// postcard-encoded by the job's file.
    Custom {
        /// The job kind's name.
        kind: Text,
        /// The answer's message, postcard-encoded.
        body: Vec<u8>,
    },
}

/// Decodes a relevance row of `n` values, each finite and in `[0, 1]`.
pub fn decode_row(row: &Tensor, n: usize) -> Result<Vec<f32>, ProtocolError> {
    let values = row.decode(Some(n))?;
    if let Some((index, &value)) = values
        .iter()
        .enumerate()
        .find(|&(_, v)| !(0.0..=1.0).contains(v))
    {
        return Err(ProtocolError::OutOfRange { index, value });
    }
    Ok(values)
}
