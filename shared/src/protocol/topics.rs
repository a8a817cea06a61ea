//! The MQTT topic scheme (clients, LPSs, broadcast) and broker addresses.

use alloc::format;
use alloc::string::String;
use core::fmt;

use super::ProtocolError;

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
