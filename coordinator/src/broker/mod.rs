//! The embedded MQTT broker (rumqttd), started in-process by `serve` and `demo` unless
//! `--broker` points at an external one.
//!
//! Without security settings rumqttd listens on the given address itself (plain MQTT, anyone may
//! connect and publish anywhere: closed testbed networks only). With any of TLS, a password file
//! or an ACL ([`BrokerSecurity`]), rumqttd listens on a loopback port that only opens with a
//! per-process secret, and the [`gate`] listens on the given address: TLS, logins checked against
//! a mosquitto `password_file`, client ids bound to usernames, and every PUBLISH, SUBSCRIBE and
//! last will checked against a mosquitto `acl_file` ([`acl`], [`passwd`]). The coordinator's own
//! links use the loopback door ([`local_login`]).

pub mod acl;
pub mod gate;
pub mod passwd;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use edgecfl_shared::mqtt::{Login, MAX_PACKET, Security, fleet_backlog};
use edgecfl_shared::protocol::{BrokerAddr, MAX_STATUS_PAYLOAD, Topics};
use ring::rand::SecureRandom;
use rumqttd::{Broker, Config, ConnectionSettings, RouterConfig, SegmentConfig, ServerSettings};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;

use self::acl::Acl;
use self::gate::{Gate, GateConfig, Rate};
use self::passwd::PasswordDb;
use tracing::{error, warn};

/// How much the embedded broker keeps in memory, and how large a message it takes where.
///
/// rumqttd keeps the messages of each subscription filter (and of each topic published to before
/// anyone subscribed to it) in an in-memory log that it trims by size only: a log keeps its newest
/// `count + 1` segments, and a segment is closed once it holds `size` bytes (so it may exceed
/// `size` by its last message). A reader that falls further behind than that skips ahead (its
/// messages are lost); a log nobody reads any more stays at its bound. Besides the logs, rumqttd
/// holds up to 100 messages per reading connection that it sent and the reader has not yet
/// acknowledged (`MAX_INFLIGHT`, a constant of rumqttd 0.20). Nothing else bounds the broker's
/// memory, so these are the bounds (rumqttd 0.20's defaults, 64 MiB × 10 per log, made
/// `coordinator serve` on the embedded broker grow by every model it ever sent: 798 MB after 10
/// rounds of 200 simulated clients).
///
/// * Every topic and filter except the coordinator's fleet-wide ones (a client's `down` topic, the
///   broadcast topic, an LPS's topics, any other topic): [`TOPIC_SEGMENT_BYTES`] segments,
///   [`TOPIC_SEGMENTS`] + 1 kept: the 3 newest messages of a model's size, never more than
///   3 × (64 KiB + [`MAX_PACKET`]) ≈ 12.8 MB per topic however it is flooded. Their readers (edge
///   clients, LPSs) drain them at once into their own inboxes, and the coordinator sends a client
///   at most 2 messages before it waits for its answer.
/// * The coordinator's filters over the whole fleet (`<prefix>/clients/+/status` and `…/up`, and
///   the LPS ones): [`FLEET_SEGMENT_BYTES`] segments, enough of them for
///   [`fleet_backlog`]`(clients)` bytes (512 KiB per client, at least 16 MiB; the coordinator's
///   link holds as much before it pauses reading), so that every client of the fleet answering
///   at once is never skipped.
/// * Behind the [`gate`] (any security setting on), the payloads the coordinator reads are
///   bounded by what the run can send: [`MAX_STATUS_PAYLOAD`] on the status topics, `upload` on
///   the `up` topics (the largest upload of the run's method,
///   [`upload_limit`](edgecfl_shared::protocol::upload_limit)); a larger one closes the
///   publisher's connection. So the unacknowledged messages rumqttd holds for the coordinator are
///   at most 100 × `upload` (LeNet-5: 100 × 194 KB, 100 × 372 KB with StoCFL) instead of 100 × [`MAX_PACKET`] (~420 MB).
///   The gate also paces each user's publishes there ([`Limits::rate`]), so that one user's
///   flood comes at that pace, not at the network's (past the fleet log's backlog, a reader
///   that falls behind is skipped ahead, and honest uploads in between are lost).
#[derive(Debug, Clone)]
pub struct Limits {
    /// The status filters (clients' and LPSs').
    pub status_filters: Vec<String>,
    /// The upload filters (clients' and LPSs').
    pub up_filters: Vec<String>,
    /// Clients of the fleet (sizes the backlog of the fleet-wide filters).
    pub clients: usize,
    /// Largest upload payload in bytes.
    pub upload: usize,
}

/// Largest uploads a second a user may publish on the coordinator's topics, sustained (a client
/// answers each job with one upload, and a training job takes at least a local epoch).
pub const UPLOADS_PER_SECOND: f64 = 2.0;
/// Largest uploads a user may publish at once on the coordinator's topics.
pub const BURST_UPLOADS: f64 = 4.0;
/// Messages a second a user may publish on the coordinator's topics, sustained, whatever their
/// size (a client sends one answer per job and a status message when it (re)connects).
pub const MESSAGES_PER_SECOND: f64 = 10.0;
/// Messages a user may publish at once there.
pub const BURST_MESSAGES: f64 = 20.0;

/// Segment size of an ordinary topic's log (see [`Limits`]).
pub const TOPIC_SEGMENT_BYTES: usize = 64 << 10;
/// Closed segments an ordinary topic's log keeps besides the one being written.
pub const TOPIC_SEGMENTS: usize = 2;
/// Segment size of a fleet-wide filter's log.
pub const FLEET_SEGMENT_BYTES: usize = 8 << 20;

impl Limits {
    /// The limits of a run of `clients` clients (newcomers included) under `topics` whose largest
    /// upload is `upload` bytes.
    pub fn fleet(topics: &Topics, clients: usize, upload: usize) -> Self {
        Self {
            status_filters: vec![topics.all_status(), topics.all_lps_status()],
            up_filters: vec![topics.all_up(), topics.all_lps_up()],
            clients,
            upload,
        }
    }

    /// The coordinator's fleet-wide filters.
    fn fleet_filters(&self) -> impl Iterator<Item = &String> {
        self.status_filters.iter().chain(&self.up_filters)
    }

    /// Closed segments a fleet-wide filter's log keeps besides the one being written.
    fn fleet_segments(&self) -> usize {
        fleet_backlog(self.clients).div_ceil(FLEET_SEGMENT_BYTES)
    }

    /// The pace of each user's publishes (and last wills) on the coordinator's topics:
    /// [`UPLOADS_PER_SECOND`] largest uploads a second, [`BURST_UPLOADS`] at once, and
    /// [`MESSAGES_PER_SECOND`] messages a second, [`BURST_MESSAGES`] at once.
    pub fn rate(&self) -> Rate {
        Rate {
            bytes_per_second: UPLOADS_PER_SECOND * self.upload as f64,
            burst: BURST_UPLOADS * self.upload as f64,
            messages_per_second: MESSAGES_PER_SECOND,
            message_burst: BURST_MESSAGES,
        }
    }

    /// The gate's payload bounds.
    fn payload_limits(&self) -> Vec<(String, usize)> {
        let status = self
            .status_filters
            .iter()
            .map(|f| (f.clone(), MAX_STATUS_PAYLOAD));
        let up = self.up_filters.iter().map(|f| (f.clone(), self.upload));
        status.chain(up).collect()
    }
}

/// rumqttd's settings for an edgecfl fleet: packets up to [`MAX_PACKET`] (a LeNet-5 in f32 is
/// 178 KB; rumqttd's default limit is 20 KB), up to 10 000 connections, logs bounded as
/// [`Limits`] says.
pub fn config(listen: SocketAddr, limits: &Limits) -> Config {
    let connections = ConnectionSettings {
        connection_timeout_ms: 60_000,
        max_payload_size: MAX_PACKET,
        max_inflight_count: 500,
        auth: None,
        external_auth: None,
        dynamic_filters: true,
    };
    let server = ServerSettings {
        name: "v4".into(),
        listen,
        tls: None,
        next_connection_delay_ms: 1,
        connections,
    };
    let fleet = SegmentConfig {
        max_segment_size: FLEET_SEGMENT_BYTES,
        max_segment_count: limits.fleet_segments(),
    };
    Config {
        id: 0,
        router: RouterConfig {
            max_connections: 10_010,
            max_outgoing_packet_count: 200,
            max_segment_size: TOPIC_SEGMENT_BYTES,
            max_segment_count: TOPIC_SEGMENTS,
            custom_segment: Some(
                limits
                    .fleet_filters()
                    .map(|f| (f.clone(), fleet.clone()))
                    .collect(),
            ),
            initialized_filters: None,
            shared_subscriptions_strategy: Default::default(),
        },
        v4: Some(HashMap::from([("1".to_string(), server)])),
        ..Default::default()
    }
}

/// Security of the embedded broker: the `coordinator serve`/`demo` flags, or a `broker.toml`
/// written by `coordinator credentials` (`--broker-config`).
#[derive(Debug, Clone, Default, Args)]
pub struct BrokerSecurity {
    /// The embedded broker's certificate chain (PEM); with --tls-key it speaks MQTT over TLS
    /// only (port 8883 by default).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// Private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// CA (PEM) that signs client certificates: the embedded broker verifies any certificate a
    /// client presents against it.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Refuse clients without a certificate signed by --tls-client-ca.
    #[arg(long, requires = "tls_client_ca")]
    pub require_client_cert: bool,
    /// mosquitto password_file (mosquitto_passwd format) the embedded broker checks logins
    /// against; every client then needs a username and password, and its MQTT client id must be
    /// its username (or <name>@<username>).
    #[arg(long, value_name = "FILE")]
    pub broker_passwd: Option<PathBuf>,
    /// mosquitto acl_file (user/topic/pattern lines, %u and %c) the embedded broker enforces on
    /// every publish, subscription and last will.
    #[arg(long, value_name = "FILE")]
    pub broker_acl: Option<PathBuf>,
    /// All of the above from a TOML file (`coordinator credentials` writes one: broker.toml);
    /// its paths are relative to the file.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["tls_cert", "tls_key", "tls_client_ca", "require_client_cert", "broker_passwd", "broker_acl"])]
    pub broker_config: Option<PathBuf>,
}

/// The keys of `broker.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BrokerToml {
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_client_ca: Option<PathBuf>,
    #[serde(default)]
    require_client_cert: bool,
    password_file: Option<PathBuf>,
    acl_file: Option<PathBuf>,
    /// The CA of `tls_cert` (informational: what clients give as --ca).
    #[allow(dead_code)]
    ca: Option<PathBuf>,
}

impl BrokerSecurity {
    /// The settings with `--broker-config` read in (paths made relative to its directory).
    pub fn resolved(&self) -> anyhow::Result<BrokerSecurity> {
        let Some(file) = &self.broker_config else {
            return Ok(self.clone());
        };
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let t: BrokerToml =
            toml::from_str(&text).with_context(|| format!("bad {}", file.display()))?;
        let dir = file.parent().unwrap_or(Path::new("."));
        let at = |p: Option<PathBuf>| p.map(|p| dir.join(p));
        Ok(BrokerSecurity {
            tls_cert: at(t.tls_cert),
            tls_key: at(t.tls_key),
            tls_client_ca: at(t.tls_client_ca),
            require_client_cert: t.require_client_cert,
            broker_passwd: at(t.password_file),
            broker_acl: at(t.acl_file),
            broker_config: None,
        })
    }

    /// True when anything is set (the gate runs).
    pub fn is_on(&self) -> bool {
        self.tls_cert.is_some()
            || self.broker_passwd.is_some()
            || self.broker_acl.is_some()
            || self.broker_config.is_some()
    }

    /// True when the broker speaks TLS.
    pub fn tls(&self) -> bool {
        self.tls_cert.is_some()
    }

    fn gate_config(&self, limits: &Limits) -> anyhow::Result<GateConfig> {
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(c), Some(k)) => Some(Arc::new(server_tls(
                c,
                k,
                self.tls_client_ca.as_deref(),
                self.require_client_cert,
            )?)),
            _ => None,
        };
        let passwords = self
            .broker_passwd
            .as_deref()
            .map(PasswordDb::load)
            .transpose()?;
        if let Some(db) = &passwords {
            anyhow::ensure!(!db.is_empty(), "the broker's password file has no user");
        }
        let acl = self.broker_acl.as_deref().map(Acl::load).transpose()?;
        Ok(GateConfig {
            tls,
            passwords,
            acl,
            payload_limits: limits.payload_limits(),
            rate: Some(limits.rate()),
        })
    }
}

/// rustls server settings (ring provider) from PEM files; with `client_ca`, client certificates
/// are verified against it (and required when `require`).
pub fn server_tls(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
    require: bool,
) -> anyhow::Result<rustls::ServerConfig> {
    let chain = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("cannot read {}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("bad PEM in {}", cert.display()))?;
    anyhow::ensure!(!chain.is_empty(), "no certificate in {}", cert.display());
    let key_der = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("no private key in {}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca)
                .with_context(|| format!("cannot read {}", ca.display()))?
            {
                roots.add(c.with_context(|| format!("bad PEM in {}", ca.display()))?)?;
            }
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            );
            let v = if require {
                v
            } else {
                v.allow_unauthenticated()
            };
            builder.with_client_cert_verifier(v.build()?)
        }
    };
    builder
        .with_single_cert(chain, key_der)
        .with_context(|| format!("{} does not match {}", key.display(), cert.display()))
}

/// The loopback doors of the secured embedded brokers of this process: (public address,
/// rumqttd's loopback address, the login that opens it).
static LOCAL_DOORS: Mutex<Vec<(BrokerAddr, BrokerAddr, Login)>> = Mutex::new(Vec::new());

/// How this process's own links reach a secured embedded broker it started at `public`: its
/// loopback address and the login that opens it (`None` for any other broker).
pub fn local_login(public: &BrokerAddr) -> Option<(BrokerAddr, Security)> {
    let doors = LOCAL_DOORS.lock().ok()?;
    doors
        .iter()
        .find(|(p, ..)| p == public)
        .map(|(_, inner, login)| {
            (
                inner.clone(),
                Security {
                    login: Some(login.clone()),
                    ..Security::default()
                },
            )
        })
}

fn free_loopback_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")
        .context("cannot find a free loopback port")?
        .local_addr()?
        .port())
}

fn spawn_rumqttd(cfg: Config) -> anyhow::Result<()> {
    std::thread::Builder::new()
        .name("rumqttd".into())
        .spawn(move || {
            let mut broker = Broker::new(cfg);
            if let Err(e) = broker.start() {
                error!("embedded broker stopped: {e}");
            }
        })
        .context("cannot start the embedded broker thread")?;
    Ok(())
}

fn wait_accepting(probe: SocketAddr, listen: SocketAddr) -> anyhow::Result<()> {
    let start = Instant::now();
    while TcpStream::connect_timeout(&probe, Duration::from_millis(200)).is_err() {
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(10),
            "the embedded broker did not start listening on {listen}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Starts rumqttd on `ip:port` in background threads and waits until it accepts connections;
/// with `security` on, behind the [`gate`]. Returns the address this process's clients use
/// (loopback when `ip` is unspecified; `mqtts://` with TLS). The broker lives as long as the
/// process.
pub fn start(
    ip: IpAddr,
    port: u16,
    security: &BrokerSecurity,
    limits: &Limits,
) -> anyhow::Result<BrokerAddr> {
    let listen = SocketAddr::new(ip, port);
    // Refuse a taken port up front (rumqttd would only log it from its thread).
    let listener = std::net::TcpListener::bind(listen)
        .with_context(|| format!("cannot listen on {listen} for the embedded broker (is another broker running? use --port or --broker)"))?;
    let probe_ip: IpAddr = if ip.is_unspecified() {
        [127, 0, 0, 1].into()
    } else {
        ip
    };
    let public = BrokerAddr {
        host: probe_ip.to_string(),
        port,
        tls: security.tls(),
    };
    if !security.is_on() {
        drop(listener);
        spawn_rumqttd(config(listen, limits))?;
        wait_accepting(SocketAddr::new(probe_ip, port), listen)?;
        return Ok(public);
    }
    let gate_cfg = security.gate_config(limits)?;
    if gate_cfg.passwords.is_some() && gate_cfg.tls.is_none() && !probe_ip.is_loopback() {
        warn!(
            "embedded broker: passwords without TLS cross the network in clear text (--tls-cert/--tls-key)"
        );
    }
    if gate_cfg.passwords.is_none() {
        warn!("embedded broker: no password file, anyone who reaches {listen} may connect");
    }
    // rumqttd on loopback, opened only by a secret of this process.
    let mut secret = [0u8; 24];
    ring::rand::SystemRandom::new()
        .fill(&mut secret)
        .map_err(|_| anyhow::anyhow!("no randomness for the broker's secret"))?;
    let secret: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    let inner_port = free_loopback_port()?;
    let inner = SocketAddr::new([127, 0, 0, 1].into(), inner_port);
    let mut cfg = config(inner, limits);
    if let Some(servers) = cfg.v4.as_mut() {
        for s in servers.values_mut() {
            let expected = secret.clone();
            s.set_auth_handler(move |_client_id, _user, password: String| {
                let ok = ring_eq(password.as_bytes(), expected.as_bytes());
                async move { ok }
            });
        }
    }
    spawn_rumqttd(cfg)?;
    wait_accepting(inner, inner)?;
    let gate = Arc::new(Gate::new(gate_cfg, inner, secret.clone()));
    listener
        .set_nonblocking(true)
        .context("cannot set up the broker's listener")?;
    std::thread::Builder::new()
        .name("broker-gate".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("broker-gate")
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    error!("embedded broker gate: {e}");
                    return;
                }
            };
            rt.block_on(async move {
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => gate.run(l).await,
                    Err(e) => error!("embedded broker gate: {e}"),
                }
            });
        })
        .context("cannot start the broker gate thread")?;
    if let Ok(mut doors) = LOCAL_DOORS.lock() {
        doors.push((
            public.clone(),
            BrokerAddr {
                host: "127.0.0.1".into(),
                port: inner_port,
                tls: false,
            },
            Login {
                username: "coordinator".into(),
                password: secret,
            },
        ));
    }
    Ok(public)
}

fn ring_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
