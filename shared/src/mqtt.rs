//! The MQTT link both runtimes (and the system tests) use: one rumqttc connection whose event
//! loop runs in a tokio task that only polls and forwards, so the caller's thread can block in
//! training or in the round loop while keepalives go on.
//!
//! This is transport only: it moves payloads between topics and a channel. The algorithm modules
//! never import it; the protocol it carries is [`crate::protocol`]. Built with the `mqtt` feature.
//!
//! After a connection error the loop waits ([`Backoff`]: 1 s, doubling up to 15 s by default) and
//! polls again, which reconnects; every failed attempt is reported as [`Inbound::Disconnected`]
//! with its reason (and [`Link::next_attempt`] tells when the next one starts); every
//! (re)connection re-subscribes and is reported as [`Inbound::Connected`], so a client can
//! announce itself again.
//!
//! Security ([`Security`]): TLS with rustls on the `ring` provider for `mqtts://` brokers (the
//! broker's certificate is checked against `--ca`, or the system's roots; an optional client
//! certificate), and a username and password. A refusal that retrying cannot fix (bad
//! credentials, a certificate that does not verify) is a [`Link::refused`] error with a plain
//! explanation; [`Link::wait_connected`] returns it at once.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rumqttc::{
    AsyncClient, ConnectReturnCode, ConnectionError, Event, LastWill, MqttOptions, Packet, QoS,
    SubscribeReasonCode, TlsConfiguration, Transport,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::runtime::Runtime;

use crate::protocol::{BrokerAddr, MAX_PAYLOAD};
use tracing::warn;

/// Largest MQTT packet either side sends or accepts: the largest payload plus room for the
/// topic and headers. Brokers must allow at least this much (mosquitto: `max_packet_size`).
pub const MAX_PACKET: usize = MAX_PAYLOAD + 4096;

/// Environment variable holding the MQTT password when no `--password-file` is given.
pub const PASSWORD_ENV: &str = "EDGECFL_PASSWORD";

/// Errors of the link.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// The tokio runtime could not start.
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[from] std::io::Error),
    /// The request could not be queued (the event loop is gone).
    #[error("MQTT request failed: {0}")]
    Client(#[from] rumqttc::ClientError),
    /// No connection within the time allowed.
    #[error("no connection to the broker at {addr} after {seconds:.0}s (last error: {last})")]
    Connect {
        /// Broker.
        addr: BrokerAddr,
        /// Seconds waited.
        seconds: f64,
        /// The last connection error seen.
        last: String,
    },
    /// The broker (or its certificate) refused this link in a way retrying cannot fix.
    #[error("the broker at {addr} refused the connection: {reason}")]
    Refused {
        /// Broker.
        addr: BrokerAddr,
        /// What was refused, in plain words.
        reason: String,
    },
    /// The TLS or login settings cannot be used (a file missing or unreadable, no password).
    #[error("{0}")]
    Settings(String),
}

/// What the event loop forwards.
#[derive(Debug, Clone)]
pub enum Inbound {
    /// Connected (or reconnected) and subscribed.
    Connected,
    /// A connection attempt failed or the connection dropped (the reason); the loop retries at
    /// [`Link::next_attempt`] unless [`Link::refused`] says it is hopeless.
    Disconnected(String),
    /// A message on a subscribed topic.
    Message {
        /// Its topic.
        topic: String,
        /// Its payload.
        payload: Vec<u8>,
        /// True when the broker delivered it as a retained message.
        retained: bool,
    },
}

/// A username and password for the broker.
#[derive(Clone, PartialEq, Eq)]
pub struct Login {
    /// Username.
    pub username: String,
    /// Password.
    pub password: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("username", &self.username)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// TLS and authentication of a link (all off by default: plain TCP, anonymous).
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// CA certificates (PEM) the broker's certificate must chain to (`mqtts://` only); `None`:
    /// the operating system's roots.
    pub ca: Option<PathBuf>,
    /// Client certificate chain and its private key (PEM), for brokers that ask for one.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// Username and password.
    pub login: Option<Login>,
}

/// Command-line flags of a runtime's broker security, shared by `edge-client run`,
/// `coordinator serve` and `coordinator lps`. The password never has to be on the command line:
/// it comes from `--password-file` or the `EDGECFL_PASSWORD` environment variable.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SecurityArgs {
    /// CA certificate(s), PEM, that sign the broker's certificate (for mqtts:// brokers;
    /// default: the system's trusted roots).
    #[arg(long, value_name = "FILE", env = "EDGECFL_CA")]
    pub ca: Option<PathBuf>,
    /// Client certificate, PEM, for brokers that require one (with --key).
    #[arg(long, value_name = "FILE", requires = "key", env = "EDGECFL_CERT")]
    pub cert: Option<PathBuf>,
    /// Private key of --cert, PEM.
    #[arg(long, value_name = "FILE", requires = "cert", env = "EDGECFL_KEY")]
    pub key: Option<PathBuf>,
    /// MQTT username (default, when a password is given: this process's id).
    #[arg(long, env = "EDGECFL_USERNAME")]
    pub username: Option<String>,
    /// File whose first line is the MQTT password (or set EDGECFL_PASSWORD). Keep it mode 0600.
    #[arg(long, value_name = "FILE", env = "EDGECFL_PASSWORD_FILE")]
    pub password_file: Option<PathBuf>,
}

impl SecurityArgs {
    /// The link settings: reads the password (file first, then `EDGECFL_PASSWORD`) and checks
    /// that the certificate files exist. `default_username` is used when a password is given
    /// without `--username`.
    pub fn resolve(&self, default_username: &str) -> Result<Security, LinkError> {
        let password = match &self.password_file {
            Some(f) => Some(read_password(f)?),
            None => std::env::var(PASSWORD_ENV).ok().filter(|p| !p.is_empty()),
        };
        let login = match (&self.username, password) {
            (_, Some(password)) => Some(Login {
                username: self
                    .username
                    .clone()
                    .unwrap_or_else(|| default_username.to_string()),
                password,
            }),
            (Some(u), None) => {
                return Err(LinkError::Settings(format!(
                    "--username {u} without a password: give --password-file FILE or set {PASSWORD_ENV}"
                )));
            }
            (None, None) => None,
        };
        for f in [&self.ca, &self.cert, &self.key].into_iter().flatten() {
            if !f.is_file() {
                return Err(LinkError::Settings(format!(
                    "{} does not exist or is not a file",
                    f.display()
                )));
            }
        }
        Ok(Security {
            ca: self.ca.clone(),
            client_cert: self.cert.clone().zip(self.key.clone()),
            login,
        })
    }
}

/// The first line of a password file (a trailing newline is not part of the password).
pub fn read_password(path: &Path) -> Result<String, LinkError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        LinkError::Settings(format!(
            "cannot read the password file {}: {e}",
            path.display()
        ))
    })?;
    let password = text.lines().next().unwrap_or("").to_string();
    if password.is_empty() {
        return Err(LinkError::Settings(format!(
            "the password file {} is empty",
            path.display()
        )));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(m) = std::fs::metadata(path)
            && m.permissions().mode() & 0o077 != 0
        {
            warn!(
                "the password file {} is readable by other users (chmod 600 it)",
                path.display()
            );
        }
    }
    Ok(password)
}

/// Reconnection delays: `first`, doubling after each consecutive failure, at most `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Delay after the first failure.
    pub first: Duration,
    /// Largest delay.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            first: Duration::from_secs(1),
            max: Duration::from_secs(15),
        }
    }
}

impl Backoff {
    /// The delay after `failures` consecutive failures (1 = the first).
    pub fn delay(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(16);
        self.first.saturating_mul(1 << doublings).min(self.max)
    }
}

/// Connection settings.
#[derive(Debug, Clone)]
pub struct LinkOptions {
    /// Broker address.
    pub broker: BrokerAddr,
    /// MQTT client id. With a login whose username differs, the link connects as
    /// `<client_id>@<username>` (brokers that bind client ids to usernames accept that form; see
    /// [`client_id_for`]).
    pub client_id: String,
    /// Filters to subscribe to on every connection (QoS 1).
    pub subscribe: Vec<String>,
    /// Last will: (topic, payload), published retained with QoS 1.
    pub last_will: Option<(String, Vec<u8>)>,
    /// Keepalive interval.
    pub keep_alive: Duration,
    /// TLS and login.
    pub security: Security,
    /// Delays between connection attempts.
    pub reconnect: Backoff,
    /// Keep at most one pending message per topic (a newer one replaces the queued one, which
    /// [`Link::dropped`] counts) and at most one pending connection event, so that a flood
    /// cannot grow the process while the caller is busy: the inbox then holds at most one
    /// payload per subscribed topic. Off (every event queued, unbounded) by default.
    pub latest_per_topic: bool,
    /// Stop reading from the broker while this many payload bytes wait unread (the broker then
    /// holds the rest, within its own limits), so that the link's queue never holds more than
    /// this plus one message. `None` (the default): unbounded, every message read at once.
    pub max_unread_bytes: Option<usize>,
}

impl LinkOptions {
    /// Options with no subscription, no last will, a 30 s keepalive, no TLS or login and the
    /// default backoff; set the rest with struct update syntax.
    pub fn new(broker: BrokerAddr, client_id: impl Into<String>) -> Self {
        LinkOptions {
            broker,
            client_id: client_id.into(),
            subscribe: Vec::new(),
            last_will: None,
            keep_alive: Duration::from_secs(30),
            security: Security::default(),
            reconnect: Backoff::default(),
            latest_per_topic: false,
            max_unread_bytes: None,
        }
    }
}

/// Unread bytes a link that hears a whole fleet may hold per client before it pauses reading
/// ([`LinkOptions::max_unread_bytes`], [`fleet_backlog`]): two LeNet-5 updates in f32 (178 KB
/// each) and then some.
pub const BACKLOG_BYTES_PER_CLIENT: usize = 512 << 10;

/// Smallest [`fleet_backlog`].
pub const MIN_BACKLOG_BYTES: usize = 16 << 20;

/// The backlog a link hearing `clients` clients must be able to hold so that all of them
/// answering at once never waits: `clients` × [`BACKLOG_BYTES_PER_CLIENT`], at least
/// [`MIN_BACKLOG_BYTES`]. The coordinator's, LPS's and GPS's links stop reading past it, and the
/// embedded broker keeps that much of the coordinator's fleet-wide filters.
pub fn fleet_backlog(clients: usize) -> usize {
    clients
        .saturating_mul(BACKLOG_BYTES_PER_CLIENT)
        .max(MIN_BACKLOG_BYTES)
}

/// The MQTT client id a link uses: `client_id` itself, or `<client_id>@<username>` when it logs in
/// under another username. `@` is not allowed in edgecfl ids, so no client's id can be
/// mistaken for another user's; the embedded broker requires this form.
pub fn client_id_for(client_id: &str, login: Option<&Login>) -> String {
    match login {
        Some(l) if l.username != client_id => format!("{client_id}@{}", l.username),
        _ => client_id.to_string(),
    }
}

/// The rustls client settings of `security` (ring provider, TLS 1.2 and 1.3).
fn tls_config(security: &Security) -> Result<rustls::ClientConfig, LinkError> {
    let settings = |what: &str, path: &Path, e: &dyn std::fmt::Display| {
        LinkError::Settings(format!("{what} {}: {e}", path.display()))
    };
    let mut roots = rustls::RootCertStore::empty();
    match &security.ca {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| settings("cannot read the CA file", path, &e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| settings("bad PEM in the CA file", path, &e))?;
            if certs.is_empty() {
                return Err(settings("no certificate in the CA file", path, &"empty"));
            }
            for c in certs {
                roots
                    .add(c)
                    .map_err(|e| settings("unusable CA certificate in", path, &e))?;
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            for c in native.certs {
                let _ = roots.add(c);
            }
            if roots.is_empty() {
                return Err(LinkError::Settings(
                    "no trusted CA certificate: the system has none; give --ca FILE".into(),
                ));
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| LinkError::Settings(format!("TLS settings: {e}")))?
        .with_root_certificates(roots);
    Ok(match &security.client_cert {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .map_err(|e| settings("cannot read the client certificate", cert, &e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| settings("bad PEM in the client certificate", cert, &e))?;
            let key_der = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| settings("cannot read the client key", key, &e))?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| settings("unusable client certificate/key", cert, &e))?
        }
    })
}

/// A connection error in plain words, and whether retrying cannot fix it (the broker refused
/// the credentials, or a certificate does not verify).
pub fn describe(e: &ConnectionError, broker: &BrokerAddr, connected: bool) -> (String, bool) {
    use std::io::ErrorKind;
    fn rustls_of(io: &std::io::Error) -> Option<&rustls::Error> {
        io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>())
    }
    fn tls(e: &rustls::Error, broker: &BrokerAddr) -> (String, bool) {
        use rustls::{AlertDescription as A, CertificateError as C, Error as E};
        match e {
            E::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => (
                format!(
                    "TLS: the broker's certificate is not signed by a trusted CA (check --ca) ({e})"
                ),
                true,
            ),
            E::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => (
                format!(
                    "TLS: the broker's certificate is not valid for the host name {:?} ({e})",
                    broker.host
                ),
                true,
            ),
            E::InvalidCertificate(_) => (
                format!("TLS: the broker's certificate is not acceptable ({e})"),
                true,
            ),
            E::AlertReceived(
                A::CertificateRequired
                | A::BadCertificate
                | A::UnknownCA
                | A::CertificateUnknown
                | A::CertificateExpired
                | A::CertificateRevoked
                | A::AccessDenied,
            ) => (
                format!(
                    "TLS: the broker refused this client's certificate, or wants one (--cert/--key) ({e})"
                ),
                true,
            ),
            _ => (format!("TLS handshake failed: {e}"), false),
        }
    }
    match e {
        ConnectionError::ConnectionRefused(code) => match code {
            ConnectReturnCode::BadUserNamePassword => (
                "bad username or password (the broker refused the credentials)".into(),
                true,
            ),
            ConnectReturnCode::NotAuthorized => (
                "not authorized: the broker refused the login (no, unknown or wrong username/password), or a last will outside this user's ACL"
                    .into(),
                true,
            ),
            ConnectReturnCode::BadClientId => (
                "client id rejected (with a login, the client id must be the username, or <id>@<username>)"
                    .into(),
                true,
            ),
            ConnectReturnCode::RefusedProtocolVersion => (
                "the broker does not speak MQTT 3.1.1".into(),
                true,
            ),
            c => (format!("connection refused by the broker ({c:?})"), false),
        },
        ConnectionError::Tls(rumqttc::TlsError::TLS(t)) => tls(t, broker),
        ConnectionError::Tls(rumqttc::TlsError::Io(io)) | ConnectionError::Io(io)
            if rustls_of(io).is_some() =>
        {
            tls(rustls_of(io).expect("checked"), broker)
        }
        ConnectionError::Io(io) if io.kind() == ErrorKind::ConnectionRefused => (
            format!("nothing accepts connections at {}:{} ({io})", broker.host, broker.port),
            false,
        ),
        ConnectionError::Io(io)
            if !connected
                && matches!(
                    io.kind(),
                    ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
                ) =>
        {
            (
                format!(
                    "the broker closed the connection before accepting it ({io}){}",
                    if broker.tls {
                        ""
                    } else {
                        "; is it a TLS port (use mqtts://)?"
                    }
                ),
                false,
            )
        }
        ConnectionError::MqttState(_) if !connected && !broker.tls => (
            format!("{e}; the broker did not answer in MQTT: is it a TLS port (use mqtts://)?"),
            false,
        ),
        other => (other.to_string(), false),
    }
}

/// The queue between the event loop and the [`Link`]'s reader: unbounded, or (`latest`) at most
/// one pending [`Inbound::Message`] per topic and one pending connection event.
#[derive(Debug)]
struct Inbox {
    latest: bool,
    state: Mutex<InboxState>,
    ready: Condvar,
}

#[derive(Debug, Default)]
struct InboxState {
    queue: VecDeque<Inbound>,
    /// Payload bytes of the queued messages.
    bytes: usize,
    /// Messages replaced by a newer one of their topic before they were read.
    dropped: u64,
    /// The event loop is gone: nothing more will come.
    closed: bool,
}

impl Inbox {
    fn new(latest: bool) -> Self {
        Inbox {
            latest,
            state: Mutex::new(InboxState::default()),
            ready: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, InboxState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `ev`; in `latest` mode it first removes the pending message of the same topic
    /// (counted as dropped), or the pending connection event, which `ev` supersedes.
    fn push(&self, ev: Inbound) {
        let mut st = self.lock();
        if self.latest {
            let stale = st.queue.iter().position(|q| match (q, &ev) {
                (Inbound::Message { topic: a, .. }, Inbound::Message { topic: b, .. }) => a == b,
                (Inbound::Message { .. }, _) | (_, Inbound::Message { .. }) => false,
                _ => true, // both connection events
            });
            if let Some(i) = stale
                && let Some(old) = st.queue.remove(i)
                && let Inbound::Message { payload, .. } = old
            {
                st.dropped += 1;
                st.bytes -= payload.len();
            }
        }
        if let Inbound::Message { payload, .. } = &ev {
            st.bytes += payload.len();
        }
        st.queue.push_back(ev);
        drop(st);
        self.ready.notify_one();
    }

    /// Marks the end of the stream: readers get what is queued, then `None`.
    fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }

    /// The next event, waiting at most until `deadline` (forever when `None`).
    fn pop(&self, deadline: Option<Instant>) -> Option<Inbound> {
        let mut st = self.lock();
        loop {
            if let Some(ev) = st.queue.pop_front() {
                if let Inbound::Message { payload, .. } = &ev {
                    st.bytes -= payload.len();
                }
                return Some(ev);
            }
            if st.closed {
                return None;
            }
            st = match deadline {
                None => self.ready.wait(st).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    self.ready
                        .wait_timeout(st, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
    }

    fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    /// Payload bytes waiting unread.
    fn bytes(&self) -> usize {
        self.lock().bytes
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().queue.len()
    }
}

/// Closes the inbox when the event loop's task ends (or is dropped with the runtime).
struct CloseOnDrop(Arc<Inbox>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// What the event loop shares with the [`Link`].
#[derive(Debug, Default)]
struct LinkState {
    /// Consecutive failed attempts since the last connection.
    failures: AtomicU32,
    /// When the next attempt starts (ms since the Unix epoch; 0 = none pending).
    next_attempt_ms: AtomicU64,
    /// A refusal retrying cannot fix.
    refused: Mutex<Option<String>>,
}

/// A live MQTT connection.
pub struct Link {
    client: AsyncClient,
    inbox: Arc<Inbox>,
    runtime: Runtime,
    state: Arc<LinkState>,
}

/// "; next attempt in 4 s (12:00:05 UTC)" for a connection attempt planned at `at`
/// ([`Link::next_attempt`]).
pub fn retry_note(at: SystemTime) -> String {
    let wait = at
        .duration_since(SystemTime::now())
        .unwrap_or(Duration::ZERO)
        .as_secs_f64();
    let secs = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    format!("; next attempt in {wait:.0} s ({h:02}:{m:02}:{s:02} UTC)")
}

impl Link {
    /// Starts the event loop. Returns at once; wait for [`Inbound::Connected`] (or use
    /// [`Link::wait_connected`]). Errors only on unusable TLS settings or a runtime that cannot
    /// start.
    pub fn start(opts: LinkOptions) -> Result<Link, LinkError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("mqtt")
            .enable_all()
            .build()?;
        let login = opts.security.login.as_ref();
        let client_id = client_id_for(&opts.client_id, login);
        let mut mqtt = MqttOptions::new(&client_id, &opts.broker.host, opts.broker.port);
        mqtt.set_max_packet_size(MAX_PACKET, MAX_PACKET)
            .set_keep_alive(opts.keep_alive)
            .set_clean_session(true)
            .set_request_channel_capacity(64)
            .set_inflight(100);
        if let Some(l) = login {
            mqtt.set_credentials(&l.username, &l.password);
        }
        if opts.broker.tls {
            let config = tls_config(&opts.security)?;
            mqtt.set_transport(Transport::Tls(TlsConfiguration::Rustls(Arc::new(config))));
        } else if opts.security.client_cert.is_some() || opts.security.ca.is_some() {
            warn!(
                "--ca/--cert given for the plain-TCP broker {}: not used (mqtts:// for TLS)",
                opts.broker
            );
        }
        if let Some((topic, payload)) = &opts.last_will {
            mqtt.set_last_will(LastWill::new(
                topic,
                payload.clone(),
                QoS::AtLeastOnce,
                true,
            ));
        }
        let (client, mut eventloop) = AsyncClient::new(mqtt, 64);
        let inbox = Arc::new(Inbox::new(opts.latest_per_topic));
        let tx = CloseOnDrop(inbox.clone());
        let sub_client = client.clone();
        let subscribe = opts.subscribe;
        let state = Arc::new(LinkState::default());
        let shared = state.clone();
        let broker = opts.broker.clone();
        let backoff = opts.reconnect;
        let max_unread = opts.max_unread_bytes;
        runtime.spawn(async move {
            // Sends to the Link; false once the Link is gone (this task holds the only other
            // reference).
            let send = |ev: Inbound| {
                if Arc::strong_count(&tx.0) < 2 {
                    return false;
                }
                tx.0.push(ev);
                true
            };
            let mut connected = false;
            loop {
                let forward = match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::ConnAck(_))) => {
                        connected = true;
                        if let Ok(mut r) = shared.refused.lock() {
                            *r = None;
                        }
                        shared.failures.store(0, Ordering::Relaxed);
                        shared.next_attempt_ms.store(0, Ordering::Relaxed);
                        for f in &subscribe {
                            // try_: this task is the one that drains the request channel.
                            if let Err(e) = sub_client.try_subscribe(f, QoS::AtLeastOnce) {
                                send(Inbound::Disconnected(e.to_string()));
                            }
                        }
                        Some(Inbound::Connected)
                    }
                    Ok(Event::Incoming(Packet::SubAck(ack))) => {
                        if ack
                            .return_codes
                            .iter()
                            .any(|c| matches!(c, SubscribeReasonCode::Failure))
                        {
                            warn!(
                                "the broker {broker} refused a subscription of {client_id} ({:?}; its ACL does not allow reading {:?})",
                                ack.return_codes, subscribe
                            );
                        }
                        None
                    }
                    Ok(Event::Incoming(Packet::Publish(p))) => Some(Inbound::Message {
                        topic: p.topic,
                        payload: p.payload.to_vec(),
                        retained: p.retain,
                    }),
                    Ok(_) => None,
                    Err(e) => {
                        let (reason, fatal) = describe(&e, &broker, connected);
                        connected = false;
                        if fatal && let Ok(mut r) = shared.refused.lock() {
                            *r = Some(reason.clone());
                        }
                        let failures = shared.failures.fetch_add(1, Ordering::Relaxed) + 1;
                        let delay = backoff.delay(failures);
                        let at = SystemTime::now() + delay;
                        let ms = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
                        shared.next_attempt_ms.store(ms, Ordering::Relaxed);
                        if !send(Inbound::Disconnected(reason)) {
                            break;
                        }
                        tokio::time::sleep(delay).await;
                        None
                    }
                };
                // Backpressure: while the reader is this far behind, leave the rest with the broker.
                if let (Some(max), Some(Inbound::Message { .. })) = (max_unread, &forward)
                    && tx.0.bytes() >= max
                {
                    warn!(
                        "{client_id}: {} MB unread; reading from the broker paused until the queue drains",
                        tx.0.bytes() >> 20
                    );
                    while tx.0.bytes() >= max && Arc::strong_count(&tx.0) >= 2 {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                }
                if let Some(m) = forward
                    && !send(m)
                {
                    break; // the Link was dropped
                }
            }
        });
        Ok(Link {
            client,
            inbox,
            runtime,
            state,
        })
    }

    /// Consecutive failed connection attempts since the last connection (0 while connected).
    pub fn failures(&self) -> u32 {
        self.state.failures.load(Ordering::Relaxed)
    }

    /// Messages dropped unread because a newer one of their topic replaced them (only with
    /// [`LinkOptions::latest_per_topic`]).
    pub fn dropped(&self) -> u64 {
        self.inbox.dropped()
    }

    /// Payload bytes received and not read yet (bounded by [`LinkOptions::max_unread_bytes`]
    /// plus one message when that is set).
    pub fn unread_bytes(&self) -> usize {
        self.inbox.bytes()
    }

    /// When the next connection attempt starts, after a failure.
    pub fn next_attempt(&self) -> Option<SystemTime> {
        match self.state.next_attempt_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(UNIX_EPOCH + Duration::from_millis(ms)),
        }
    }

    /// The reason the broker refused this link for good (bad credentials, a certificate that
    /// does not verify), once it happened.
    pub fn refused(&self) -> Option<String> {
        self.state.refused.lock().ok().and_then(|r| r.clone())
    }

    /// Waits for the first connection, logging each failed attempt (a warning with the error and
    /// when the next attempt is); errors after `timeout` with the last connection error, or at
    /// once when the broker refuses the link for good ([`Link::refused`]).
    pub fn wait_connected(&self, broker: &BrokerAddr, timeout: Duration) -> Result<(), LinkError> {
        let start = Instant::now();
        let mut last = String::from("none");
        loop {
            match self.inbox.pop(Some(start + timeout)) {
                Some(Inbound::Connected) => return Ok(()),
                Some(Inbound::Disconnected(e)) => {
                    if let Some(reason) = self.refused() {
                        return Err(LinkError::Refused {
                            addr: broker.clone(),
                            reason,
                        });
                    }
                    let next = match self.next_attempt() {
                        Some(at) if start.elapsed() < timeout => retry_note(at),
                        _ => String::new(),
                    };
                    warn!(
                        "connection attempt {} to {broker} failed: {e}{next} (giving up after {:.0} s)",
                        self.failures(),
                        timeout.as_secs_f64()
                    );
                    last = e;
                }
                Some(Inbound::Message { .. }) => {}
                None => {
                    return Err(LinkError::Connect {
                        addr: broker.clone(),
                        seconds: start.elapsed().as_secs_f64(),
                        last,
                    });
                }
            }
        }
    }

    /// The next inbound event, waiting at most until `deadline` (`None` when it passed).
    pub fn recv_until(&self, deadline: Instant) -> Option<Inbound> {
        self.inbox.pop(Some(deadline))
    }

    /// The next inbound event, blocking.
    pub fn recv(&self) -> Option<Inbound> {
        self.inbox.pop(None)
    }

    /// Publishes with QoS 1 (blocks while the request queue is full).
    pub fn publish(&self, topic: &str, payload: Vec<u8>, retain: bool) -> Result<(), LinkError> {
        self.runtime
            .block_on(
                self.client
                    .publish(topic, QoS::AtLeastOnce, retain, payload),
            )
            .map_err(LinkError::from)
    }

    /// Disconnects cleanly (no last will). Queued publishes go out first: the disconnect request
    /// queues behind them.
    pub fn disconnect(self) {
        let _ = self.runtime.block_on(async {
            let r = self.client.disconnect().await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            r
        });
        self.runtime.shutdown_timeout(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(topic: &str, payload: &[u8]) -> Inbound {
        Inbound::Message {
            topic: topic.into(),
            payload: payload.to_vec(),
            retained: false,
        }
    }

    fn drain(inbox: &Inbox) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(ev) = inbox.pop(Some(Instant::now())) {
            out.push(match ev {
                Inbound::Connected => "connected".into(),
                Inbound::Disconnected(e) => format!("disconnected {e}"),
                Inbound::Message { topic, payload, .. } => {
                    format!("{topic} {}", String::from_utf8_lossy(&payload))
                }
            });
        }
        out
    }

    #[test]
    fn latest_inbox_keeps_the_newest_message_of_each_topic() {
        let inbox = Inbox::new(true);
        inbox.push(msg("a", b"1"));
        inbox.push(msg("b", b"1"));
        inbox.push(msg("a", b"2"));
        inbox.push(msg("a", b"3"));
        assert_eq!(inbox.len(), 2);
        assert_eq!(inbox.dropped(), 2);
        // The kept ones in the order they arrived.
        assert_eq!(drain(&inbox), ["b 1", "a 3"]);
        inbox.push(msg("a", b"4"));
        inbox.push(msg("b", b"2"));
        assert_eq!(drain(&inbox), ["a 4", "b 2"]);
        assert_eq!(inbox.dropped(), 2);
    }

    #[test]
    fn inbox_counts_unread_payload_bytes() {
        let inbox = Inbox::new(false);
        inbox.push(msg("a", b"12345"));
        inbox.push(Inbound::Connected);
        inbox.push(msg("a", b"123"));
        assert_eq!(inbox.bytes(), 8);
        assert_eq!(drain(&inbox).len(), 3);
        assert_eq!(inbox.bytes(), 0);
        // A replaced message no longer counts.
        let latest = Inbox::new(true);
        latest.push(msg("a", b"12345"));
        latest.push(msg("a", b"12"));
        latest.push(msg("b", b"1"));
        assert_eq!(latest.bytes(), 3);
        assert_eq!(drain(&latest), ["a 12", "b 1"]);
        assert_eq!(latest.bytes(), 0);
    }

    #[test]
    fn fleet_backlog_scales_with_the_fleet() {
        assert_eq!(fleet_backlog(0), MIN_BACKLOG_BYTES);
        assert_eq!(fleet_backlog(10), MIN_BACKLOG_BYTES);
        assert_eq!(fleet_backlog(1000), 1000 * (512 << 10));
        assert_eq!(fleet_backlog(usize::MAX), usize::MAX);
    }

    #[test]
    fn latest_inbox_coalesces_connection_events() {
        let inbox = Inbox::new(true);
        for i in 0..1000 {
            inbox.push(Inbound::Disconnected(format!("{i}")));
            inbox.push(msg("down", b"x"));
        }
        inbox.push(Inbound::Connected);
        assert_eq!(inbox.len(), 2);
        assert_eq!(inbox.dropped(), 999); // connection events are not counted
        assert_eq!(drain(&inbox), ["down x", "connected"]);
    }

    #[test]
    fn default_inbox_keeps_everything_and_ends_after_close() {
        let inbox = Arc::new(Inbox::new(false));
        for i in 0..5 {
            inbox.push(msg("a", format!("{i}").as_bytes()));
        }
        inbox.push(Inbound::Connected);
        inbox.push(Inbound::Connected);
        assert_eq!(inbox.len(), 7);
        assert_eq!(inbox.dropped(), 0);
        // A blocked reader wakes on a push, then on close.
        let reader = {
            let inbox = inbox.clone();
            std::thread::spawn(move || {
                let mut n = 0;
                while inbox.pop(None).is_some() {
                    n += 1;
                }
                n
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        inbox.push(msg("b", b"late"));
        drop(CloseOnDrop(inbox.clone()));
        assert_eq!(reader.join().expect("reader"), 8);
        // A deadline that passed with nothing queued.
        assert!(inbox.pop(Some(Instant::now())).is_none());
    }
}
