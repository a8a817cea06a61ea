//! The wire protocol between the coordinator and edge clients: messages, their postcard encoding,
//! tensors on the wire, and the MQTT topic scheme.
//!
//! This module builds without `std` (`no_std` + `alloc`, with [`heapless`] strings for ids), so a
//! microcontroller-class client can reuse it: `cargo build -p edgecfl-shared --no-default-features`.
//! It knows topics as strings but nothing of any MQTT library.
//!
//! ## Messages
//!
//! Every payload is an [`Envelope`]: protocol [`VERSION`], run id, round, and a body, encoded with
//! postcard. The coordinator sends [`ToClient`], clients send [`ToCoordinator`]. A decode of any
//! byte string gives a message or a typed [`ProtocolError`], never a panic (property-tested).
//!
//! ```text
//!  client                                   coordinator
//!    │ ── status: Hello (retained) ───────────▶ │  (last will: Gone, retained)
//!    │ ◀── down: Ping ───────────────────────── │  joining: only clients that answer join
//!    │ ── up: Pong ───────────────────────────▶ │  (a stale or forged Hello never does)
//!    │ ◀── down: Signature{job, layers} ─────── │  round 0: warm-up, upload the layers
//!    │ ── up: Signature{values} ──────────────▶ │  → one-shot clustering
//!    │ ◀── down: Train{job} ─────────────────── │  round t ≥ 1, sampled clients only
//!    │ ── up: Update{params, samples, loss} ──▶ │  → cluster-wise FedAvg
//!    │ ◀── down: Evaluate{params} ───────────── │
//!    │ ── up: Evaluation{per_label} ──────────▶ │
//!    │ ◀── down: Finish ─────────────────────── │
//! ```
//!
//! MT-HFL replaces the round-0 `Signature` exchange by a data signature and, in the paper's way
//! (`--relevance client`), a relay of all `n` signatures and one relevance row per client. The
//! relay goes out once, on the fleet-wide broadcast topic, instead of `n` times to `n` clients
//! (`n²` signatures); each client's own job only says "answer the relay of this round". With
//! `--relevance server` the coordinator computes the rows itself and the second exchange is
//! skipped.
//!
//! ```text
//!  client i                                 coordinator
//!    │ ◀── down: GramSignature{k, upload} ───── │  round 0
//!    │ ── up: Eigenpairs{k, d, λ, V} ─────────▶ │  (k eigenvalues, k×d eigenvectors)
//!    │ ◀── broadcast: Relay(Eigenpairs of all n) │  once for the whole fleet
//!    │ ◀── down: Relevance{clients, estimate} ─ │  "answer the relay of this round"
//!    │ ── up: RelevanceRow{r(i,·)} ───────────▶ │  → R = (r + rᵀ)/2, HAC on 1 − R
//! ```
//!
//! The relay and the job that asks for it travel on different topics, so they may arrive in
//! either order: a client keeps the latest relay and answers once it holds both with the same run
//! and round. A client that reconnects while its row is awaited gets the relay again along with
//! its job. A relay larger than [`MAX_PAYLOAD`] is refused by the coordinator with an error that
//! names the remedies (`f16` signatures, a smaller `k`, server-side relevance).
//!
//! ## Topics
//!
//! All topics live under a prefix, `edgecfl/<fleet>` by default `edgecfl/default`
//! (see [`Topics`]). QoS 1 everywhere.
//!
//! | topic | direction | retained | payload |
//! | --- | --- | --- | --- |
//! | `<prefix>/clients/<id>/status` | client → coordinator | yes | `Hello` on connect, `Gone` as last will and on exit |
//! | `<prefix>/clients/<id>/up` | client → coordinator | no | `Signature`, `Update`, `Evaluation`, `Eigenpairs`, `RelevanceRow`, `Failed`, `Pong` |
//! | `<prefix>/clients/<id>/down` | coordinator → client | no | `ToClient` |
//! | `<prefix>/lps/<id>/status` | LPS → GPS | yes | [`ToGps::Hello`] on connect, `Gone` as last will and on exit |
//! | `<prefix>/lps/<id>/up` | LPS → GPS | no | [`ToGps`]: `Common`, `Done`, `Failed` |
//! | `<prefix>/lps/<id>/down` | GPS → LPS | no | [`ToLps`]: `Assign`, `Common`, `Finish` |
//! | `<prefix>/broadcast` | coordinator → every client | no | `ToClient::Relay` (MT-HFL) |
//!
//! Status messages are retained so a coordinator that starts after its clients still learns of
//! them; the last will tells it at once when a client dies. A client that reconnects publishes
//! `Hello` again and the coordinator re-sends the job it is waiting for.
//!
//! The `lps` topics carry MT-HFL's hierarchy when the local parameter servers run as processes of
//! their own: the GPS assigns each LPS a cluster ([`LpsAssignment`]), the LPS trains with its
//! members over their client topics, and every `lps_rounds` rounds the two exchange only the
//! common layers ([`ToGps::Common`], [`ToLps::Common`]; the envelope's round is the GPS round).
//!
//! ## Tensors
//!
//! A [`Tensor`] is raw little-endian `f32` by default, or `f16` ([`Encoding::F16`]) to halve the
//! bytes of uploads.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Protocol version carried by every envelope. A peer with another version is refused.
pub const VERSION: u16 = 1;

/// Longest client or run id, in bytes.
pub const MAX_ID_LEN: usize = 32;

/// Largest payload either side accepts: a LeNet-5 in f32 is 178 KB; this leaves room for larger
/// models while refusing absurd sizes before decoding. MQTT packet limits are set to this plus
/// headroom for the topic.
pub const MAX_PAYLOAD: usize = 4 << 20;

/// A client or run id: 1 to 32 bytes of `A-Z a-z 0-9 - _ .` (safe as an MQTT topic level).
pub type Id = heapless::String<MAX_ID_LEN>;

/// Free text in a message (backend names, failure reasons), cut to 64 bytes.
pub type Text = heapless::String<64>;

/// The model architectures edgecfl trains (see `model` for their layouts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// LeNet-5 for 28×28 grey images (NIID-Bench `SimpleCNNMNIST`).
    LeNet5,
    /// MLP 784→32→10 (MT-HFL's FMNIST model).
    Mlp,
}

/// Errors of decoding or validating a message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The payload is larger than [`MAX_PAYLOAD`].
    #[error("payload of {len} bytes exceeds the limit of {max}")]
    Oversized {
        /// Payload length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The payload ended before the message did.
    #[error("truncated message")]
    Truncated,
    /// The payload is not a message of this protocol.
    #[error("malformed message: {0}")]
    Malformed(postcard::Error),
    /// Bytes left over after the message.
    #[error("{0} trailing bytes after the message")]
    TrailingBytes(usize),
    /// The sender speaks another protocol version.
    #[error("protocol version {got}, expected {expected}")]
    Version {
        /// Version in the message.
        got: u16,
        /// Ours.
        expected: u16,
    },
    /// A tensor's byte length is not a whole number of elements.
    #[error("tensor of {bytes} bytes is not a whole number of {encoding} elements")]
    TensorBytes {
        /// Byte length.
        bytes: usize,
        /// Its encoding.
        encoding: Encoding,
    },
    /// A tensor has the wrong number of elements.
    #[error("tensor has {got} elements, expected {expected}")]
    TensorLength {
        /// Expected elements.
        expected: usize,
        /// Elements received.
        got: usize,
    },
    /// A tensor holds NaN or an infinity.
    #[error("tensor element {0} is not finite")]
    NotFinite(usize),
    /// An id that is empty, too long, or not safe as a topic level.
    #[error("invalid id {0:?} (1-32 characters of A-Z a-z 0-9 - _ .)")]
    BadId(String),
    /// Eigenpairs with another `k`, `d` or number of signatures than asked for.
    #[error(
        "{count} signature(s) with k = {k}, d = {d}; expected {expected_count} with k = {expected_k}, d = {expected_d}"
    )]
    EigenShape {
        /// Signatures in the message.
        count: usize,
        /// Eigenpairs per signature in the message.
        k: u32,
        /// Dimension in the message.
        d: u32,
        /// Signatures expected.
        expected_count: usize,
        /// Eigenpairs expected.
        expected_k: usize,
        /// Dimension expected.
        expected_d: usize,
    },
    /// Values that cannot be an MT-HFL signature (negative eigenvalue, zero eigenvector).
    #[error("invalid signature {index}: {reason}")]
    BadSignature {
        /// Which signature of the message.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// A relevance value outside `[0, 1]`.
    #[error("relevance value {index} = {value} is outside [0, 1]")]
    OutOfRange {
        /// Position in the row.
        index: usize,
        /// The value.
        value: f32,
    },
}

impl From<postcard::Error> for ProtocolError {
    fn from(e: postcard::Error) -> Self {
        match e {
            postcard::Error::DeserializeUnexpectedEnd => ProtocolError::Truncated,
            e => ProtocolError::Malformed(e),
        }
    }
}

/// Checks an id and makes an [`Id`] of it.
pub fn id(s: &str) -> Result<Id, ProtocolError> {
    let ok = !s.is_empty()
        && s.len() <= MAX_ID_LEN
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !ok {
        return Err(ProtocolError::BadId(s.into()));
    }
    let mut out = Id::new();
    out.push_str(s)
        .map_err(|_| ProtocolError::BadId(s.into()))?;
    Ok(out)
}

/// Makes a [`Text`] of `s`, cut at a character boundary to fit.
pub fn text(s: &str) -> Text {
    let mut out = Text::new();
    for c in s.chars() {
        if out.push(c).is_err() {
            break;
        }
    }
    out
}

/// How a tensor's elements are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// IEEE 754 binary32, little-endian (4 bytes per element).
    F32,
    /// IEEE 754 binary16, little-endian (2 bytes per element; uploads only).
    F16,
}

impl Encoding {
    /// Bytes per element.
    pub fn width(self) -> usize {
        match self {
            Encoding::F32 => 4,
            Encoding::F16 => 2,
        }
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Encoding::F32 => "f32",
            Encoding::F16 => "f16",
        })
    }
}

impl core::str::FromStr for Encoding {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "f32" => Ok(Encoding::F32),
            "f16" => Ok(Encoding::F16),
            _ => Err(format!("unknown encoding {s:?} (expected f32 or f16)")),
        }
    }
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

/// A flat vector of floats on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tensor {
    /// Element encoding.
    pub encoding: Encoding,
    /// The elements, little-endian.
    pub bytes: Vec<u8>,
}

impl Tensor {
    /// Encodes `values` (f16 rounds to nearest).
    pub fn encode(values: &[f32], encoding: Encoding) -> Tensor {
        let mut bytes = Vec::with_capacity(values.len() * encoding.width());
        for &v in values {
            match encoding {
                Encoding::F32 => bytes.extend_from_slice(&v.to_le_bytes()),
                Encoding::F16 => bytes.extend_from_slice(&half::f16::from_f32(v).to_le_bytes()),
            }
        }
        Tensor { encoding, bytes }
    }

    /// Number of elements (rounded down).
    pub fn len(&self) -> usize {
        self.bytes.len() / self.encoding.width()
    }

    /// True without elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decodes to f32, checking the element count (when `expected` is given) and that every
    /// value is finite.
    pub fn decode(&self, expected: Option<usize>) -> Result<Vec<f32>, ProtocolError> {
        let w = self.encoding.width();
        if !self.bytes.len().is_multiple_of(w) {
            return Err(ProtocolError::TensorBytes {
                bytes: self.bytes.len(),
                encoding: self.encoding,
            });
        }
        if let Some(expected) = expected
            && expected != self.len()
        {
            return Err(ProtocolError::TensorLength {
                expected,
                got: self.len(),
            });
        }
        let mut out = Vec::with_capacity(self.len());
        for (i, c) in self.bytes.chunks_exact(w).enumerate() {
            let v = match self.encoding {
                Encoding::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                Encoding::F16 => half::f16::from_le_bytes([c[0], c[1]]).to_f32(),
            };
            if !v.is_finite() {
                return Err(ProtocolError::NotFinite(i));
            }
            out.push(v);
        }
        Ok(out)
    }
}

/// `n ≥ 1` MT-HFL data signatures of one shape: each the `k` leading eigenvalues (largest first)
/// and unit eigenvectors (`k × d`, row-major) of a client's Gram matrix. One client uploads its
/// own (`n = 1`); the relay carries everyone's, client `j`'s at position `j`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Eigenpairs {
    /// Eigenpairs per signature.
    pub k: u32,
    /// Dimension of the feature space.
    pub d: u32,
    /// `n·k` eigenvalues; signature `j`'s at `j·k .. (j + 1)·k`.
    pub values: Tensor,
    /// `n·k·d` eigenvector floats; signature `j`'s at `j·k·d .. (j + 1)·k·d`.
    pub vectors: Tensor,
}

impl Eigenpairs {
    /// Encodes `values` (`n·k`) and `vectors` (`n·k·d`) of `n` signatures.
    pub fn encode(k: usize, d: usize, values: &[f32], vectors: &[f32], encoding: Encoding) -> Self {
        Eigenpairs {
            k: k as u32,
            d: d as u32,
            values: Tensor::encode(values, encoding),
            vectors: Tensor::encode(vectors, encoding),
        }
    }

    /// Decodes `count` signatures of `k` eigenpairs in dimension `d`: the shape must be the one
    /// expected, the tensors must hold exactly `count·k` and `count·k·d` finite floats. Returns
    /// (eigenvalues, eigenvectors).
    pub fn decode(
        &self,
        count: usize,
        k: usize,
        d: usize,
    ) -> Result<(Vec<f32>, Vec<f32>), ProtocolError> {
        let width = self.values.encoding.width();
        let got = if self.k == 0 {
            0
        } else {
            self.values.bytes.len() / width / self.k as usize
        };
        if self.k as usize != k || self.d as usize != d || got != count {
            return Err(ProtocolError::EigenShape {
                count: got,
                k: self.k,
                d: self.d,
                expected_count: count,
                expected_k: k,
                expected_d: d,
            });
        }
        let values = self.values.decode(Some(count * k))?;
        let vectors = self.vectors.decode(Some(count * k * d))?;
        Ok((values, vectors))
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
}

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

/// What every payload carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope<B> {
    /// Protocol version ([`VERSION`]).
    pub version: u16,
    /// The run this message belongs to (empty in `Hello` and `Gone`).
    pub run: Id,
    /// The round (0 is the clustering round).
    pub round: u32,
    /// The message.
    pub body: B,
}

impl<B: Serialize + DeserializeOwned> Envelope<B> {
    /// An envelope of the current version.
    pub fn new(run: Id, round: u32, body: B) -> Self {
        Envelope {
            version: VERSION,
            run,
            round,
            body,
        }
    }

    /// Encodes with postcard.
    pub fn to_bytes(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("postcard cannot fail on these types")
    }

    /// Encodes with postcard, refusing a payload larger than [`MAX_PAYLOAD`] (which no peer
    /// would accept, and the MQTT packet limits would drop).
    pub fn to_bytes_checked(&self) -> Result<Vec<u8>, ProtocolError> {
        let bytes = self.to_bytes();
        if bytes.len() > MAX_PAYLOAD {
            return Err(ProtocolError::Oversized {
                len: bytes.len(),
                max: MAX_PAYLOAD,
            });
        }
        Ok(bytes)
    }

    /// Decodes a payload: size limit, version (read first, so a future version is reported as
    /// such rather than as garbage), the message, and no trailing bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ProtocolError> {
        if bytes.len() > MAX_PAYLOAD {
            return Err(ProtocolError::Oversized {
                len: bytes.len(),
                max: MAX_PAYLOAD,
            });
        }
        let (version, _) = postcard::take_from_bytes::<u16>(bytes)?;
        if version != VERSION {
            return Err(ProtocolError::Version {
                got: version,
                expected: VERSION,
            });
        }
        let (env, rest) = postcard::take_from_bytes::<Self>(bytes)?;
        if !rest.is_empty() {
            return Err(ProtocolError::TrailingBytes(rest.len()));
        }
        // heapless checks the capacity; the character set is ours to check.
        if !env.run.is_empty() {
            id(&env.run)?;
        }
        Ok(env)
    }
}

/// The topic scheme under a prefix (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topics {
    prefix: String,
}

impl Topics {
    /// Default prefix.
    pub const DEFAULT_PREFIX: &'static str = "edgecfl/default";

    /// Topics under `prefix` (no trailing slash, no wildcard).
    pub fn new(prefix: &str) -> Result<Self, ProtocolError> {
        let p = prefix.trim_end_matches('/');
        if p.is_empty() || p.contains(['+', '#']) {
            return Err(ProtocolError::BadId(prefix.into()));
        }
        Ok(Topics { prefix: p.into() })
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A client's retained status (`Hello` / `Gone`).
    pub fn status(&self, client: &str) -> String {
        format!("{}/clients/{client}/status", self.prefix)
    }

    /// A client's uploads.
    pub fn up(&self, client: &str) -> String {
        format!("{}/clients/{client}/up", self.prefix)
    }

    /// A client's commands.
    pub fn down(&self, client: &str) -> String {
        format!("{}/clients/{client}/down", self.prefix)
    }

    /// The fleet-wide broadcast topic (MT-HFL's signature relay); every client subscribes.
    pub fn broadcast(&self) -> String {
        format!("{}/broadcast", self.prefix)
    }

    /// Filter matching every client's status.
    pub fn all_status(&self) -> String {
        self.status("+")
    }

    /// Filter matching every client's uploads.
    pub fn all_up(&self) -> String {
        self.up("+")
    }

    /// Splits a client topic into (client id, kind), or `None` for a topic outside the scheme.
    pub fn parse<'t>(&self, topic: &'t str) -> Option<(&'t str, TopicKind)> {
        self.parse_in(topic, "/clients/")
    }

    /// Splits `<prefix><scope><id>/<kind>` into (id, kind).
    fn parse_in<'t>(&self, topic: &'t str, scope: &str) -> Option<(&'t str, TopicKind)> {
        let rest = topic.strip_prefix(self.prefix.as_str())?;
        let rest = rest.strip_prefix(scope)?;
        let (id, kind) = rest.split_once('/')?;
        let kind = match kind {
            "status" => TopicKind::Status,
            "up" => TopicKind::Up,
            "down" => TopicKind::Down,
            _ => return None,
        };
        Some((id, kind))
    }
}

/// The kind of a client topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicKind {
    /// `…/status`
    Status,
    /// `…/up`
    Up,
    /// `…/down`
    Down,
}

/// A broker address: `mqtt://host:port`, `tcp://host:port` or `host[:port]` (plain TCP, port 1883
/// by default), or `mqtts://host:port` / `ssl://host:port` (TLS, port 8883 by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerAddr {
    /// Host name or IP.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// TLS (`mqtts://`): the link verifies the broker's certificate and encrypts everything.
    pub tls: bool,
}

impl BrokerAddr {
    /// Default port of plain MQTT.
    pub const MQTT_PORT: u16 = 1883;
    /// Default port of MQTT over TLS.
    pub const MQTTS_PORT: u16 = 8883;
}

impl core::str::FromStr for BrokerAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (rest, tls) = if let Some(r) = s
            .strip_prefix("mqtts://")
            .or_else(|| s.strip_prefix("ssl://"))
        {
            (r, true)
        } else {
            (
                s.strip_prefix("mqtt://")
                    .or_else(|| s.strip_prefix("tcp://"))
                    .unwrap_or(s),
                false,
            )
        };
        let rest = rest.trim_end_matches('/');
        if rest.contains("://") {
            return Err(format!(
                "unsupported broker URL {s:?} (expected mqtt://HOST:PORT or mqtts://HOST:PORT)"
            ));
        }
        let (host, port) = match rest.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(':') => (
                h,
                p.parse::<u16>()
                    .map_err(|_| format!("bad port {p:?} in broker URL {s:?}"))?,
            ),
            _ => (
                rest,
                if tls {
                    BrokerAddr::MQTTS_PORT
                } else {
                    BrokerAddr::MQTT_PORT
                },
            ),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(format!("no host in broker URL {s:?}"));
        }
        Ok(BrokerAddr {
            host: host.into(),
            port,
            tls,
        })
    }
}

impl fmt::Display for BrokerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "mqtts" } else { "mqtt" };
        if self.host.contains(':') {
            write!(f, "{scheme}://[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{scheme}://{}:{}", self.host, self.port)
        }
    }
}

// ───────────────────────────── LPS ⇄ GPS: MT-HFL's hierarchy across processes ─────────────────────────────
//
// A local parameter server (LPS, `coordinator lps`) runs FedAvg with the clients of one cluster
// and exchanges only the common layers with the global parameter server (GPS, `coordinator serve
// --lps remote`), which may run on another machine behind the same broker:
//
//  LPS                                                     GPS
//   │ ── lps/<id>/status: Hello (retained) ───────────────▶ │  (last will: Gone, retained)
//   │ ◀── lps/<id>/down: Assign{cluster, members, θ⁰, …} ── │  after round 0 (clustering)
//   │     FedAvg with the members for L rounds (their own client topics)
//   │ ── lps/<id>/up: Common{samples, accuracy, values} ──▶ │  round = GPS round g (1, 2, …)
//   │ ◀── lps/<id>/down: Common{values} ─────────────────── │  Σ_c N_c θ_c / Σ_c N_c
//   │     … every L rounds …
//   │ ── lps/<id>/up: Done{…} ────────────────────────────▶ │
//   │ ◀── lps/<id>/down: Finish ─────────────────────────── │
//
// `values` holds the common layers only (`hierarchy::CommonLayers`), in f32: both directions of
// one GPS round move `common_len × 4` bytes of tensor plus the envelope.

/// One LPS's job, sent by the GPS after round 0: the cluster it serves, its members (client ids,
/// in the GPS's client order), the starting model θ⁰, and the settings of its FedAvg loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LpsAssignment {
    /// The cluster (0-based).
    pub cluster: u32,
    /// Clusters in the run (each has its own LPS).
    pub clusters: u32,
    /// The cluster's clients.
    pub members: Vec<Id>,
    /// Architecture.
    pub model: ModelKind,
    /// θ⁰, the model every cluster starts from (f32).
    pub initial: Tensor,
    /// The common layers, as `LayerSet` text (`fc1`, `conv1,conv2`).
    pub common_layers: Text,
    /// Training rounds of the LPS.
    pub rounds: u32,
    /// FedAvg rounds between two GPS rounds.
    pub lps_rounds: u32,
    /// Evaluate every this many rounds (and after the last).
    pub eval_every: u32,
    /// Fraction of the members sampled per round, in (0, 1].
    pub frac: f64,
    /// Local epochs.
    pub epochs: u32,
    /// Mini-batch size.
    pub batch_size: u32,
    /// Learning rate.
    pub lr: f64,
    /// SGD momentum.
    pub momentum: f64,
    /// Seed of the LPS's client sampling and its clients' sample order (the GPS derives one per
    /// cluster).
    pub seed: u64,
    /// Encoding of the members' model uploads.
    pub upload: Encoding,
    /// Weigh every member's update equally in the cluster's FedAvg (`--weighting equal`) instead
    /// of by its training samples.
    pub equal_weights: bool,
    /// Drop a member's update whose change from the model it was sent is above this L2 norm
    /// (`--max-update-norm`); None: no bound.
    pub max_update_norm: Option<f64>,
}

/// Errors of validating an LPS/GPS message beyond its decoding.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LpsMessageError {
    /// A tensor or an id that does not decode or check.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// An assignment without members.
    #[error("assignment without members")]
    NoMembers,
    /// A client listed twice.
    #[error("member {0:?} is listed twice")]
    DuplicateMember(String),
    /// A setting out of its range.
    #[error("{name} = {value} is out of range")]
    Setting {
        /// The setting.
        name: &'static str,
        /// Its value.
        value: String,
    },
    /// A `Common` upload with zero samples (its weight in the GPS average).
    #[error("common layers with zero samples")]
    ZeroSamples,
    /// An accuracy that is not a number in [0, 1].
    #[error("accuracy {0} is not in [0, 1]")]
    BadAccuracy(f64),
}

impl LpsAssignment {
    /// Checks what the LPS relies on: member ids (safe topic levels, unique), cluster index,
    /// settings in range, θ⁰ finite. The length of θ⁰ against the model's layout and the common
    /// layer names are checked by the LPS, which knows the models.
    ///
    /// # Errors
    ///
    /// The first problem found.
    pub fn validate(&self) -> Result<Vec<f32>, LpsMessageError> {
        if self.members.is_empty() {
            return Err(LpsMessageError::NoMembers);
        }
        for (i, m) in self.members.iter().enumerate() {
            id(m)?;
            if self.members[..i].contains(m) {
                return Err(LpsMessageError::DuplicateMember(m.as_str().into()));
            }
        }
        let setting = |name: &'static str, ok: bool, value: String| {
            if ok {
                Ok(())
            } else {
                Err(LpsMessageError::Setting { name, value })
            }
        };
        setting(
            "cluster",
            self.cluster < self.clusters,
            format!("{} of {}", self.cluster, self.clusters),
        )?;
        setting(
            "lps_rounds",
            self.lps_rounds >= 1,
            format!("{}", self.lps_rounds),
        )?;
        setting(
            "eval_every",
            self.eval_every >= 1,
            format!("{}", self.eval_every),
        )?;
        setting("epochs", self.epochs >= 1, format!("{}", self.epochs))?;
        setting(
            "batch_size",
            self.batch_size >= 1,
            format!("{}", self.batch_size),
        )?;
        setting(
            "frac",
            self.frac > 0.0 && self.frac <= 1.0,
            format!("{}", self.frac),
        )?;
        setting(
            "lr",
            self.lr.is_finite() && self.lr > 0.0,
            format!("{}", self.lr),
        )?;
        setting(
            "momentum",
            self.momentum.is_finite() && (0.0..1.0).contains(&self.momentum),
            format!("{}", self.momentum),
        )?;
        if let Some(b) = self.max_update_norm {
            setting("max_update_norm", b.is_finite() && b > 0.0, format!("{b}"))?;
        }
        Ok(self.initial.decode(None)?)
    }
}

/// GPS → LPS, on `<prefix>/lps/<id>/down`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToLps {
    /// Serve this cluster (envelope round 0).
    Assign(alloc::boxed::Box<LpsAssignment>),
    /// The GPS average of the common layers of GPS round `g` (the envelope's round): insert it
    /// and go on.
    Common {
        /// The averaged common layers (f32).
        values: Tensor,
    },
    /// The run is over (also sent to an LPS that got no cluster).
    Finish,
}

/// What an LPS reports at the end of its loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LpsDone {
    /// Training rounds done.
    pub rounds: u32,
    /// GPS rounds done.
    pub gps_rounds: u32,
    /// Members with an evaluation.
    pub evaluated: u32,
    /// Mean local test accuracy over those members after the last round.
    pub final_accuracy: Option<f64>,
    /// Seconds from the assignment to the end.
    pub wall_seconds: f64,
}

/// LPS → GPS: `Hello` / `Gone` on `<prefix>/lps/<id>/status` (retained), the rest on
/// `<prefix>/lps/<id>/up`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToGps {
    /// "I am here, give me a cluster" (retained status message).
    Hello,
    /// The LPS's common layers after GPS round `g`'s local rounds (the envelope's round).
    Common {
        /// The cluster's training samples: the LPS's weight in the GPS average.
        samples: u64,
        /// The LPS's latest mean local test accuracy (None before its first evaluation).
        accuracy: Option<f64>,
        /// The common layers only (f32).
        values: Tensor,
    },
    /// The LPS finished its rounds.
    Done(LpsDone),
    /// The LPS cannot go on (the reason is for the log).
    Failed {
        /// Why.
        reason: Text,
    },
    /// The LPS is gone (last will, or a clean exit).
    Gone,
}

impl ToGps {
    /// Checks a `Common` upload and decodes its layers: `common_len` finite floats, samples ≥ 1,
    /// accuracy in [0, 1].
    ///
    /// # Errors
    ///
    /// [`LpsMessageError::Protocol`] for a tensor of the wrong length or with NaN, and the
    /// others as named. `Ok(None)` for a message that is not `Common`.
    pub fn common(&self, common_len: usize) -> Result<Option<(u64, Vec<f32>)>, LpsMessageError> {
        let ToGps::Common {
            samples,
            accuracy,
            values,
        } = self
        else {
            return Ok(None);
        };
        if *samples == 0 {
            return Err(LpsMessageError::ZeroSamples);
        }
        if let Some(a) = accuracy
            && !(0.0..=1.0).contains(a)
        {
            return Err(LpsMessageError::BadAccuracy(*a));
        }
        Ok(Some((*samples, values.decode(Some(common_len))?)))
    }
}

impl Topics {
    /// An LPS's retained status (`Hello` / `Gone`).
    pub fn lps_status(&self, lps: &str) -> String {
        format!("{}/lps/{lps}/status", self.prefix)
    }

    /// An LPS's uploads to the GPS.
    pub fn lps_up(&self, lps: &str) -> String {
        format!("{}/lps/{lps}/up", self.prefix)
    }

    /// The GPS's messages to an LPS.
    pub fn lps_down(&self, lps: &str) -> String {
        format!("{}/lps/{lps}/down", self.prefix)
    }

    /// Filter matching every LPS's status.
    pub fn all_lps_status(&self) -> String {
        self.lps_status("+")
    }

    /// Filter matching every LPS's uploads.
    pub fn all_lps_up(&self) -> String {
        self.lps_up("+")
    }

    /// Splits an LPS topic into (LPS id, kind), or `None` for a topic outside the LPS scheme.
    pub fn parse_lps<'t>(&self, topic: &'t str) -> Option<(&'t str, TopicKind)> {
        self.parse_in(topic, "/lps/")
    }
}
