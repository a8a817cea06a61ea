//! # coordinator
//!
//! The coordinator runtime. `main.rs` only parses arguments; each subcommand lives in a module:
//!
//! | module | subcommand |
//! | --- | --- |
//! | [`simulate`] | `coordinator simulate`: FedClust / FedAvg / Local with in-process clients |
//! | [`serve`] | `coordinator serve`: the same round loop over MQTT with edge clients |
//! | [`gps`] | `coordinator serve --lps remote`: the GPS of a hierarchy whose LPSs are processes |
//! | [`lps`] | `coordinator lps`: one LPS (a cluster's FedAvg under a remote GPS) |
//! | [`rounds`] | the phases of `serve` as a state machine; which messages count and which are ignored |
//! | [`broker`] | the embedded MQTT broker (rumqttd), behind a TLS/login/ACL gate when secured |
//! | [`credentials`] | `coordinator credentials`: CA, certificates, passwords, ACL, broker configs |
//! | [`demo`] | `coordinator demo`: broker, coordinator and edge-client processes on one machine |
//! | [`export`] | `coordinator export`: a checkpoint's cluster models as safetensors; the same files at the end of every run |
//! | [`offline`] | `coordinator cluster`: HC on signatures from a `.npy`/`.csv` file |
//! | [`inspect`] | `coordinator partition`: each client's labels; clusters found vs label sets |
//! | [`config`] | the TOML configuration and the flags that override it |
//! | [`live`] | `--http`: the live view of a run (page over server-sent events, `/metrics`) |
//! | [`plots`] | SVG plots: accuracy per round, dendrogram with the cut, distance heatmap |
//! | [`report`] | `summary.json`, `rounds.csv`, `clusters.json`, progress bars |

pub mod broker;
pub mod config;
pub mod credentials;
pub mod demo;
pub mod export;
pub mod gps;
pub mod inspect;
pub mod live;
pub mod log_throttle;
pub mod lps;
pub mod offline;
pub mod plots;
pub mod report;
pub mod rounds;
pub mod serve;
pub mod simulate;
