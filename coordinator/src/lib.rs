//! # coordinator
//!
//! The coordinator runtime. `main.rs` only parses arguments; each subcommand lives in a module of
//! [`cmd`]:
//!
//! | module | what it holds |
//! | --- | --- |
//! | [`cmd`] | one module per subcommand, named as on the command line: [`cmd::simulate`], [`cmd::serve`] (with the GPS of `serve --lps remote`, [`cmd::serve::gps`]), [`cmd::lps`], [`cmd::demo`], [`cmd::cluster`], [`cmd::partition`], [`cmd::export`] (also the cluster models every run writes), [`cmd::credentials`] |
//! | [`rounds`] | the phases of `serve` as a state machine; which messages count and which are ignored; [`rounds::wait`], the one wait for the fleet of every runtime |
//! | [`broker`] | the embedded MQTT broker (rumqttd), behind a TLS/login/ACL gate when secured |
//! | [`config`] | the TOML configuration and the flags that override it |
//! | [`live`] | `--http`: the live view of a run (page over server-sent events, `/metrics`) |
//! | [`plots`] | SVG plots: accuracy per round, dendrogram with the cut, distance heatmap |
//! | [`report`] | `summary.json`, `rounds.csv`, `clusters.json`, progress bars |
//! | [`log_throttle`] | the rate limit on repeated warnings about one client |
//! | [`interrupt`] | SIGINT/SIGTERM: the hooks a runtime registers for a stop (say how to resume, end child processes) |

pub mod broker;
pub mod cmd;
pub mod config;
pub mod interrupt;
pub mod live;
pub mod log_throttle;
pub mod plots;
pub mod report;
pub mod rounds;
