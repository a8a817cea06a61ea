//! # edgecfl-shared
//!
//! The algorithms, data handling and models of edgecfl, a clustered federated learning system for
//! edge devices. Nothing in this crate knows about MQTT or any other transport: the coordinator and
//! the edge client (the runtimes) call into it.
//!
//! ## Module map
//!
//! | module | what it holds |
//! | --- | --- |
//! | [`data`] | Fashion-MNIST IDX reader, the bundled subset, NIID-Bench partitions, local test sets |
//! | [`model`] | LeNet-5 and the MLP on burn, and the named, ordered parameter view ([`model::ParamLayout`]) |
//! | [`atomic_file`] | files written whole or not at all (checkpoints, models) |
//! | [`model_file`] | trained models as safetensors files that load into the PyTorch modules, and read back |
//! | [`train`] | local SGD training and evaluation |
//! | [`cohort`] | many clients' local trainings as one batched model (a cohort step: grouped convolutions, batched matrix products over the client axis) |
//! | [`cluster`] | agglomerative hierarchical clustering equal to scipy, distances, adjusted Rand index; the one-shot clustering the methods share ([`cluster::clustering`]) and MT-HFL's Gram signature and relevance ([`cluster::spectral`]) |
//! | [`algorithms`] | one file per method: [`algorithms::fedclust`] (one-shot HC on final-layer weights, newcomers), [`algorithms::mthfl`] (HAC on 1 − R of the clients' data relevance; LPS/GPS), ...; the registry and a run's whole configuration ([`algorithms::MethodConfig`], run by [`algorithms::run`]) |
//! | [`malloc`] | glibc's allocator settings for training, set by the binaries at start-up |
//! | [`jobs`] | one file per kind of client job ([`jobs::JobKind`]: messages, the server's judgement, the client's work) and the registry ([`jobs::Job`], [`jobs::Answer`]) |
//! | [`client`] | a client's data and the error of a job |
//! | [`aggregate`] | sample-weighted FedAvg |
//! | [`hierarchy`] | MT-HFL's LPS/GPS step: sample-weighted average of the common layers only |
//! | [`federation`] | the method interface ([`federation::Strategy`]), client pools, and the generic round driver, which takes a [`federation::Plan`] and knows no method by name |
//! | [`sim`] | the in-process client pool used by `coordinator simulate` |
//! | [`protocol`] | the wire protocol: postcard messages, tensors, MQTT topic scheme (`no_std`) |
//! | `mqtt` | (feature `mqtt`) the MQTT link of the runtimes: an event loop task and a channel |
//! | `logging` | (feature `logging`) `--log`/`--log-format` of the binaries and their `tracing` subscriber |
//!
//! Without the default `std` feature only [`protocol`] is built, with `no_std` + `alloc`.

#![cfg_attr(not(feature = "std"), no_std)]

extern crate alloc;

pub mod protocol;

#[cfg(feature = "std")]
pub mod aggregate;
#[cfg(feature = "std")]
pub mod algorithms;
#[cfg(feature = "std")]
pub mod atomic_file;
#[cfg(feature = "std")]
pub mod client;
#[cfg(feature = "std")]
pub mod cluster;
#[cfg(feature = "std")]
pub mod cohort;
#[cfg(feature = "std")]
pub mod data;
#[cfg(feature = "std")]
pub mod federation;
#[cfg(feature = "std")]
pub mod hierarchy;
#[cfg(feature = "std")]
pub mod jobs;
#[cfg(feature = "logging")]
pub mod logging;
#[cfg(feature = "std")]
pub mod malloc;
#[cfg(feature = "std")]
pub mod model;
#[cfg(feature = "std")]
pub mod model_file;
#[cfg(feature = "mqtt")]
pub mod mqtt;
#[cfg(feature = "std")]
pub mod parallel;
#[cfg(feature = "std")]
pub mod sim;
#[cfg(feature = "std")]
pub mod train;

/// `#[derive(Settings)]`: a configuration struct's command-line flags declared on its fields
/// (see the `edgecfl-derive` crate; [`federation::FederationConfig`] is the example).
#[cfg(feature = "std")]
pub use edgecfl_derive::Settings;
