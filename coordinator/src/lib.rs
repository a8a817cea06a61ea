//! # coordinator
//!
//! The coordinator runtime. `main.rs` only parses arguments; each subcommand lives in a module:
//!
//! | module | subcommand |
//! | --- | --- |
//! | [`simulate`] | `coordinator simulate`: FedClust / FedAvg / Local with in-process clients |
//! | [`offline`] | `coordinator cluster`: HC on signatures from a `.npy`/`.csv` file |
//! | [`config`] | the TOML configuration and the flags that override it |
//! | [`plots`] | SVG plots: accuracy per round, dendrogram with the cut, distance heatmap |
//! | [`report`] | `summary.json`, `rounds.csv`, `clusters.json`, progress bars |

pub mod config;
pub mod offline;
pub mod plots;
pub mod report;
pub mod simulate;
