//! The diagnostics of the binaries (feature `logging`): `--log FILTER` and `--log-format
//! text|json`, global options of `coordinator` and `edge-client`, and the `tracing` subscriber
//! they install. Diagnostics go to stderr; what a command prints on stdout (results, JSON,
//! `generate-config`) is its output and does not pass through here.
//!
//! The filter is [`Targets`]: a default level and `target=level` directives, comma-separated
//! (`info,edgecfl_shared::mqtt=debug,rumqttd=off`). It needs no regex engine, which keeps the
//! edge client small.

use clap::{Args, ValueEnum};
use tracing::field::{Field, Visit};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata};
use tracing_subscriber::filter::{FilterExt, LevelFilter, Targets};
use tracing_subscriber::fmt;
use tracing_subscriber::layer::{Context, Filter};
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
        help_heading = "Common options",
        env = "EDGECFL_LOG",
        value_name = "FILTER",
        default_value = DEFAULT_FILTER
    )]
    pub filter: Targets,
    /// `text`, or `json` (one JSON object per line, for a fleet's log collector)
    #[arg(
        long = "log-format",
        global = true,
        help_heading = "Common options",
        env = "EDGECFL_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text
    )]
    pub format: LogFormat,
}

impl LogArgs {
    /// Installs the subscriber for the rest of the process (once; a second call does nothing).
    pub fn init(&self) {
        let filter = self.filter.clone().and(BrokerNoise);
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

/// The embedded broker's routine events that rumqttd 0.20 logs at ERROR, dropped so that a clean
/// run logs no error. From its connections (`rumqttd::server::broker`):
/// - `router-drop` with `Recv(Disconnected)`: every connection that ends with an MQTT DISCONNECT
///   (each edge client at the end of a run);
/// - `Error while handling MQTT connect packet` with `connection closed by peer`: a TCP
///   connection closed before its CONNECT (the coordinator's own check that the broker listens,
///   or a port scan).
///
/// From its router (`rumqttd::router::routing`), the races of a connection's end: a client that
/// sends DISCONNECT and closes its socket makes two disconnection events (the router's own
/// comment says so), and data or a scheduled send may still be queued for it:
/// - `no-connection id N is already gone` (the second disconnection, or data after the first);
/// - `Connection is already disconnected` (a send scheduled before the disconnection).
///
/// Every other rumqttd event goes through `--log` as usual.
#[derive(Debug, Clone, Copy)]
pub struct BrokerNoise;

/// rumqttd's target for its connections' events.
const BROKER_TARGET: &str = "rumqttd::server::broker";
/// rumqttd's target for its router's events.
const ROUTER_TARGET: &str = "rumqttd::router::routing";

impl BrokerNoise {
    /// Is an event of `target` with this `message` and `error` field one of the routine ones.
    fn is_routine(target: &str, message: &str, error: &str) -> bool {
        match target {
            BROKER_TARGET => {
                (message == "router-drop" && error == "Recv(Disconnected)")
                    || (message == "Error while handling MQTT connect packet"
                        && error.contains("connection closed by peer"))
            }
            ROUTER_TARGET => {
                message == "Connection is already disconnected"
                    || message
                        .strip_prefix("no-connection id ")
                        .and_then(|m| m.strip_suffix(" is already gone"))
                        .is_some_and(|id| id.parse::<usize>().is_ok())
            }
            _ => false,
        }
    }

    /// Is this one of the targets whose events are looked at.
    fn watches(target: &str) -> bool {
        target == BROKER_TARGET || target == ROUTER_TARGET
    }
}

impl<S> Filter<S> for BrokerNoise {
    fn enabled(&self, _meta: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        true
    }

    /// Only rumqttd's connection and router events are looked at one by one; every other call site keeps
    /// the interest `--log` gives it (cached, not asked again per event).
    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if Self::watches(meta.target()) {
            Interest::sometimes()
        } else {
            Interest::always()
        }
    }

    /// No level limit of its own, so the combined filter keeps `--log`'s level hint (without
    /// one, tracing's fast level check before each disabled `debug!` would be lost).
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::TRACE)
    }

    fn event_enabled(&self, event: &Event<'_>, _cx: &Context<'_, S>) -> bool {
        let target = event.metadata().target();
        if !Self::watches(target) {
            return true;
        }
        #[derive(Default)]
        struct Fields {
            message: String,
            error: String,
        }
        impl Visit for Fields {
            fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
                match field.name() {
                    "message" => self.message = format!("{value:?}"),
                    "error" => self.error = format!("{value:?}"),
                    _ => {}
                }
            }
        }
        let mut f = Fields::default();
        event.record(&mut f);
        !Self::is_routine(target, &f.message, &f.error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing::Level;

    /// What `BrokerNoise` lets through, written by a subscriber built as [`LogArgs::init`]
    /// builds it (with the default filter).
    fn logged(emit: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let writer = buf.clone();
        let filter = DEFAULT_FILTER.parse::<Targets>().unwrap().and(BrokerNoise);
        let layer = fmt::layer()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_filter(filter);
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), emit);
        let bytes = buf.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    /// Debug-formats as rumqttd's errors do.
    struct Shown(&'static str);
    impl std::fmt::Debug for Shown {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    #[test]
    fn routine_broker_errors_are_dropped_and_others_kept() {
        let out = logged(|| {
            tracing::error!(target: "rumqttd::server::broker", error = ?Shown("Recv(Disconnected)"), "router-drop");
            tracing::error!(target: "rumqttd::server::broker",
                error = ?Shown(r#"Network(Io(Custom { kind: ConnectionAborted, error: "connection closed by peer" }))"#),
                "Error while handling MQTT connect packet");
            // Not routine: kept.
            tracing::error!(target: "rumqttd::server::broker", error = ?Shown("PayloadSizeLimitExceeded(5000000)"), "disconnected");
            tracing::error!(target: "rumqttd::server::broker", error = ?Shown("Recv(Timeout)"), "router-drop");
            // The same words from another target: kept.
            tracing::error!(target: "coordinator::serve", error = ?Shown("Recv(Disconnected)"), "router-drop");
            // The router's races at a connection's end, written as rumqttd writes them.
            let id = 0usize;
            tracing::error!(target: "rumqttd::router::routing", "no-connection id {} is already gone", id);
            tracing::error!(target: "rumqttd::router::routing", "Connection is already disconnected");
            // Not routine: kept.
            tracing::error!(target: "rumqttd::router::routing", pkid = 3, "Unsolicited/ooo ack received for pkid {}", 3);
            tracing::error!(target: "rumqttd::router::routing", "no-connection id {} is already gone again", id);
        });
        assert_eq!(out.lines().count(), 5, "{out}");
        assert!(out.contains("Unsolicited/ooo ack"), "{out}");
        assert!(out.contains("is already gone again"), "{out}");
        assert!(!out.contains("already disconnected"), "{out}");
        assert!(out.contains("PayloadSizeLimitExceeded"), "{out}");
        assert!(out.contains("Recv(Timeout)"), "{out}");
        assert!(out.contains("coordinator::serve"), "{out}");
        assert!(!out.contains("connection closed by peer"), "{out}");
    }

    #[test]
    fn broker_noise_keeps_the_level_hint_and_interest_of_the_filter() {
        type S = tracing_subscriber::Registry;
        let filter = DEFAULT_FILTER.parse::<Targets>().unwrap().and(BrokerNoise);
        assert_eq!(
            Filter::<S>::max_level_hint(&filter),
            Some(LevelFilter::INFO)
        );
    }

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
