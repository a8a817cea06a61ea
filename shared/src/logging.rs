//! The diagnostics of the binaries (feature `logging`): `--log FILTER` and `--log-format
//! text|json`, global options of `coordinator` and `edge-client`, and the `tracing` subscriber
//! they install. Diagnostics go to stderr; what a command prints on stdout (results, JSON,
//! `generate-config`) is its output and does not pass through here.
//!
//! The filter is [`Targets`]: a default level and `target=level` directives, comma-separated
//! (`info,edgecfl_shared::mqtt=debug,rumqttd=off`). It needs no regex engine, which keeps the
//! edge client small.

use clap::{Args, ValueEnum};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt;
use tracing_subscriber::prelude::*;

/// The default `--log`: info for everything, warnings only from the embedded broker (rumqttd
/// reports every connection at info, which a fleet of thousands would drown in).
pub const DEFAULT_FILTER: &str = "info,rumqttd=warn";

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One line of text per event: time, level, target, message.
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `target`, `fields.message`, ...), for
    /// collecting the logs of a fleet.
    Json,
}

/// `--log` and `--log-format`.
#[derive(Args, Clone, Debug)]
pub struct LogArgs {
    /// Which diagnostics to write on stderr: a level (off, error, warn, info, debug, trace) and
    /// `target=level` directives, comma-separated, e.g. `warn`, `info,edgecfl_shared::mqtt=debug`
    #[arg(
        long = "log",
        global = true,
        env = "EDGECFL_LOG",
        value_name = "FILTER",
        default_value = DEFAULT_FILTER
    )]
    pub filter: Targets,
    /// `text`, or `json` (one JSON object per line, for a fleet's log collector)
    #[arg(
        long = "log-format",
        global = true,
        env = "EDGECFL_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text
    )]
    pub format: LogFormat,
}

impl LogArgs {
    /// Installs the subscriber for the rest of the process (once; a second call does nothing).
    pub fn init(&self) {
        let filter = self.filter.clone();
        // No colours: `ansi` may be on through another crate (rumqttd) when the workspace builds.
        let layer = fmt::layer().with_writer(std::io::stderr).with_ansi(false);
        // `try_init`: a subscriber already set (a second call) stays.
        let _ = match self.format {
            LogFormat::Text => tracing_subscriber::registry()
                .with(layer.with_filter(filter))
                .try_init(),
            LogFormat::Json => tracing_subscriber::registry()
                .with(layer.json().with_filter(filter))
                .try_init(),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    #[test]
    fn default_filter_is_info_with_a_quiet_broker() {
        let t: Targets = DEFAULT_FILTER.parse().unwrap();
        assert!(t.would_enable("coordinator::serve", &Level::INFO));
        assert!(!t.would_enable("coordinator::serve", &Level::DEBUG));
        assert!(!t.would_enable("rumqttd::router", &Level::INFO));
        assert!(t.would_enable("rumqttd::router", &Level::WARN));
    }

    #[test]
    fn directives_override_per_target() {
        let t: Targets = "warn,edgecfl_shared::mqtt=debug".parse().unwrap();
        assert!(t.would_enable("edgecfl_shared::mqtt", &Level::DEBUG));
        assert!(!t.would_enable("edge_client::run", &Level::INFO));
        assert!(t.would_enable("edge_client::run", &Level::WARN));
    }
}
