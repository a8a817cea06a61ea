//! # edge-client
//!
//! The edge-client runtime: what runs on a Raspberry Pi or a Jetson. `main.rs` only parses
//! arguments.
//!
//! | module | subcommand |
//! | --- | --- |
//! | [`run`] | `edge-client run`: join a federation over MQTT and answer the coordinator |
//! | [`shard`] | where a client's data come from (its own IDX files, or one shard of a partition) |
//! | [`signature`] | `edge-client signature`: the round-0 upload (final-layer weights) written to a file |
//! | [`bench`] | `edge-client bench`: local training (and, with `--predict`, inference) throughput of this device |
//! | [`predict`] | `edge-client predict`: a trained model (safetensors) on images: probabilities, accuracy, confusion matrix |

pub mod bench;
pub mod predict;
pub mod run;
pub mod shard;
pub mod signature;
