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
//!    │ ◀── down: FinalModel (retained) ──────── │  the run is over: its cluster's model
//! ```
//!
//! A client whose cluster has a model gets [`ToClient::FinalModel`] at the end (the run's
//! `Finish` carrying the model to keep, retained on its `down` topic so that it is fetched on the
//! next connect if the client missed it); others get a plain [`ToClient::Finish`].
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
//! | `<prefix>/clients/<id>/down` | coordinator → client | `FinalModel` only | `ToClient` |
//! | `<prefix>/lps/<id>/status` | LPS → GPS | yes | [`ToGps::Hello`] on connect, `Gone` as last will and on exit |
//! | `<prefix>/lps/<id>/up` | LPS → GPS | no | [`ToGps`]: `Common`, `Done`, `Failed` |
//! | `<prefix>/lps/<id>/down` | GPS → LPS | no | [`ToLps`]: `Assign`, `Common`, `Finish`, `Resend` |
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

mod envelope;
mod error;
mod hierarchy;
mod ids;
mod tensor;
mod to_client;
mod to_coordinator;
mod topics;

pub use envelope::{
    Envelope, MAX_PAYLOAD, MAX_STATUS_PAYLOAD, UPLOAD_OVERHEAD, VERSION, upload_limit,
};
pub use error::ProtocolError;
pub use hierarchy::{LpsAssignment, LpsDone, LpsMessageError, NormBound, ToGps, ToLps};
pub use ids::{Id, MAX_ID_LEN, Text, id, text};
pub use tensor::{Eigenpairs, Encoding, Tensor};
pub use to_client::{Estimate, FinalModel, ModelKind, ToClient, TrainJob};
pub use to_coordinator::{Hello, LabelEval, ShardInfo, ToCoordinator, decode_row};
pub use topics::{BrokerAddr, TopicKind, Topics};
