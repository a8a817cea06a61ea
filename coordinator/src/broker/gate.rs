//! The embedded broker's front door when security is on: TLS, logins and per-user ACLs in front
//! of rumqttd.
//!
//! rumqttd 0.20 has a connect-time authentication hook (`ConnectionSettings::external_auth`:
//! client id, username and password in, yes or no out) but no hook on PUBLISH or SUBSCRIBE: the
//! only topic restriction it has is a per-tenant prefix (`/tenants/<O of the client
//! certificate>/`, feature `validate-tenant-prefix`), which cannot express "a client may publish
//! only under its own id" in edgecfl's topic scheme. So the gate does it, MQTT-aware:
//!
//! - It listens on the public address, terminates TLS (rustls, ring provider; optionally verifies
//!   client certificates against a CA), and reads the CONNECT packet.
//! - It checks the login against a mosquitto `password_file` (refused with CONNACK 4, bad
//!   username or password, or 5, not authorized, without one), binds the MQTT client id to the
//!   username (the id must be the username, or `<name>@<username>`: no client can take over
//!   another's session or fire its last will; CONNACK 2 otherwise), and checks the last will's
//!   topic against the ACL (CONNACK 5).
//! - It forwards the CONNECT to rumqttd on a loopback port with the password replaced by a
//!   per-process secret: rumqttd's `external_auth` accepts nothing else, so connecting to that
//!   port directly gets nowhere. The coordinator's own links use that door (they are the broker's
//!   own process).
//! - Then every packet from the client is framed and checked: a PUBLISH whose topic the ACL does
//!   not let this user write, a SUBSCRIBE with a filter it may not read, or a second CONNECT
//!   closes the connection (logged with the user and the topic). Packets from rumqttd to the
//!   client pass unchanged.
//! - What a connection can make the gate hold is bounded before it is buffered: a CONNECT or any
//!   other packet but PUBLISH of more than [`MAX_CONTROL`] bytes, and a PUBLISH whose declared
//!   length is over its topic's payload bound (or that the ACL refuses), close the connection as
//!   soon as the fixed header and the topic have arrived, not once the packet is whole; a login
//!   holds at most [`MAX_CONNECTIONS_PER_LOGIN`] connections besides the one whose client id is
//!   the login (a new one with the client id of a live one takes its place, as MQTT specifies;
//!   one more is refused with CONNACK 3, server unavailable). So a login buffers at most that
//!   many times its largest bound, and its extra connections cannot lock out its own session.
//! - The pace ([`Rate`]) is each connection's own, so one login's extra connections cannot
//!   starve its honest session (whose pings would wait behind their debt); it counts every byte
//!   read, unfinished packets included, and a login's next connection starts with the debt its
//!   last one left, so waves of fresh connections go no faster than one.
//!
//! mosquitto, for comparison, drops a forbidden publish silently and answers a forbidden
//! subscription with a failure code; closing is stricter and visible in both logs.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use edgecfl_shared::mqtt::MAX_PACKET;
use rumqttc::{ConnAck, ConnectReturnCode, Login, Packet, Protocol};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::warn;

use super::acl::{self, Acl};
use super::passwd::PasswordDb;
use crate::log_throttle::LogThrottle;

/// Time a new connection has for the TLS handshake and its CONNECT packet.
const HANDSHAKE: Duration = Duration::from_secs(15);

/// The largest CONNECT (last will included), SUBSCRIBE or other packet but PUBLISH the gate
/// takes, in bytes: an edge client's are a few hundred bytes (its will is a status message,
/// at most [`edgecfl_shared::protocol::MAX_STATUS_PAYLOAD`]).
pub const MAX_CONTROL: usize = 64 << 10;

/// Connections with client ids `<name>@<login>` a login may hold at once, besides the one whose
/// client id is the login itself (an edge client's, which extra connections therefore cannot
/// lock out; the coordinator's remote LPS and GPS processes share its login as `<name>@`).
pub const MAX_CONNECTIONS_PER_LOGIN: usize = 8;

/// What the gate enforces.
pub struct GateConfig {
    /// TLS server settings; `None`: plain TCP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Logins; `None`: anonymous clients allowed (and client ids not bound).
    pub passwords: Option<PasswordDb>,
    /// Topic access; `None`: every admitted client may publish and subscribe anywhere.
    pub acl: Option<Acl>,
    /// Payload bounds: a PUBLISH on a topic matching a filter here may carry at most that many
    /// bytes (the first matching filter counts; other topics up to [`MAX_PACKET`]).
    pub payload_limits: Vec<(String, usize)>,
    /// The pace of the publishes on those topics: per logged-in user over all its connections
    /// (per connection without a password file).
    pub rate: Option<Rate>,
}

/// A user's pace: two token buckets, `bytes_per_second` sustained up to `burst` bytes at once,
/// and `messages_per_second` up to `message_burst` messages at once, so that neither large
/// messages nor a flood of small (even empty) ones go faster.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Sustained rate.
    pub bytes_per_second: f64,
    /// Bytes that may go at once after a quiet spell.
    pub burst: f64,
    /// Sustained messages a second.
    pub messages_per_second: f64,
    /// Messages that may go at once after a quiet spell.
    pub message_burst: f64,
}

/// A token bucket: its tokens (negative: owed) as of `at`.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: f64) -> Self {
        Bucket {
            tokens: burst,
            at: Instant::now(),
        }
    }

    /// Takes `amount` at `now` from a bucket refilled at `per_second` up to `burst`; returns how
    /// long the taker must wait before it may go on (zero while the bucket holds enough). Debts
    /// add up, so concurrent takers queue behind each other.
    fn take(&mut self, per_second: f64, burst: f64, amount: f64, now: Instant) -> Duration {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * per_second;
        self.tokens = (self.tokens + refill).min(burst) - amount;
        self.at = now;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / per_second)
        }
    }
}

/// A user's two buckets ([`Rate`]).
#[derive(Debug, Clone, Copy)]
struct Pace {
    bytes: Bucket,
    messages: Bucket,
}

impl Pace {
    fn full(rate: Rate) -> Self {
        Pace {
            bytes: Bucket::full(rate.burst),
            messages: Bucket::full(rate.message_burst),
        }
    }

    /// `bytes` read at `now`: how long to wait before reading on.
    fn take_bytes(&mut self, rate: Rate, bytes: usize, now: Instant) -> Duration {
        self.bytes
            .take(rate.bytes_per_second, rate.burst, bytes as f64, now)
    }

    /// One message at `now`: how long to wait before it goes.
    fn take_message(&mut self, rate: Rate, now: Instant) -> Duration {
        self.messages
            .take(rate.messages_per_second, rate.message_burst, 1.0, now)
    }

    /// One message of `bytes` at `now`: how long to wait before it goes (the longer of the two
    /// buckets' waits).
    #[cfg(test)]
    fn take(&mut self, rate: Rate, bytes: usize, now: Instant) -> Duration {
        let b = self.take_bytes(rate, bytes, now);
        b.max(self.take_message(rate, now))
    }
}

/// A live connection of a login ([`Gate::sessions`]).
struct Live {
    /// Which connection (a counter).
    serial: u64,
    /// Its MQTT client id.
    client_id: String,
    /// Told when a new connection with the same client id takes over.
    taken_over: Arc<tokio::sync::Notify>,
}

/// A connection's place in [`Gate::sessions`], given back when the connection ends (with its
/// pace, which the login's next connection starts from).
struct Place<'a> {
    gate: &'a Gate,
    login: String,
    serial: u64,
    pace: Option<Pace>,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        if let Ok(mut s) = self.gate.sessions.lock()
            && let Some(live) = s.get_mut(&self.login)
        {
            live.retain(|l| l.serial != self.serial);
            if live.is_empty() {
                s.remove(&self.login);
            }
        }
        if let (Some(p), Ok(mut b)) = (self.pace, self.gate.buckets.lock()) {
            b.insert(self.login.clone(), p);
        }
    }
}

/// The gate: its settings, rumqttd's loopback address and the secret that opens it.
pub struct Gate {
    cfg: GateConfig,
    inner: SocketAddr,
    secret: String,
    /// The pace the last ended connection of each logged-in user left (at most one per user of
    /// the password file): that user's next connection starts from it.
    buckets: Mutex<HashMap<String, Pace>>,
    /// The live connections of each logged-in user.
    sessions: Mutex<HashMap<String, Vec<Live>>>,
    /// The serial number of the next connection.
    serials: std::sync::atomic::AtomicU64,
    /// Refused connections and closed sessions, logged once per interval per peer address.
    refusals: Mutex<LogThrottle>,
}

/// Why a connection was refused at CONNECT, with the CONNACK code sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The code.
    pub code: ConnectReturnCode,
    /// The reason, for the broker's log.
    pub reason: String,
}

fn refuse(code: ConnectReturnCode, reason: impl Into<String>) -> Refusal {
    Refusal {
        code,
        reason: reason.into(),
    }
}

/// Is `client_id` allowed for `user`: the username itself, or `<name>@<username>` with a
/// non-empty name?
pub fn client_id_allowed(client_id: &str, user: &str) -> bool {
    client_id == user
        || client_id
            .strip_suffix(user)
            .and_then(|n| n.strip_suffix('@'))
            .is_some_and(|n| !n.is_empty())
}

impl Gate {
    /// A gate in front of rumqttd at `inner`, opened by `secret`.
    pub fn new(cfg: GateConfig, inner: SocketAddr, secret: String) -> Self {
        Gate {
            cfg,
            inner,
            secret,
            buckets: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            serials: std::sync::atomic::AtomicU64::new(0),
            refusals: Mutex::new(LogThrottle::default()),
        }
    }

    /// Takes a place among `login`'s live connections for one with `client_id`: a live one with
    /// the same client id is told to end (taken over); with [`MAX_CONNECTIONS_PER_LOGIN`] others
    /// live, refused. The place holds the connection's pace: the one the login's last connection
    /// left, or a full one.
    fn take_place(&self, login: &str, client_id: &str) -> Result<Place<'_>, Refusal> {
        let serial = self
            .serials
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let poisoned = || {
            refuse(
                ConnectReturnCode::ServiceUnavailable,
                "the gate's table is poisoned",
            )
        };
        {
            let mut sessions = self.sessions.lock().map_err(|_| poisoned())?;
            let live = sessions.entry(login.to_string()).or_default();
            if let Some(i) = live.iter().position(|l| l.client_id == client_id) {
                live.swap_remove(i).taken_over.notify_one();
            } else if client_id != login
                && live.iter().filter(|l| l.client_id != login).count() >= MAX_CONNECTIONS_PER_LOGIN
            {
                return Err(refuse(
                    ConnectReturnCode::ServiceUnavailable,
                    format!(
                        "user {login:?} already holds {MAX_CONNECTIONS_PER_LOGIN} connections \
                         (the most a login may)"
                    ),
                ));
            }
            live.push(Live {
                serial,
                client_id: client_id.to_string(),
                taken_over: Arc::new(tokio::sync::Notify::new()),
            });
        }
        let pace = match self.cfg.rate {
            Some(rate) => Some(
                self.buckets
                    .lock()
                    .map_err(|_| poisoned())?
                    .remove(login)
                    .unwrap_or_else(|| Pace::full(rate)),
            ),
            None => None,
        };
        Ok(Place {
            gate: self,
            login: login.to_string(),
            serial,
            pace,
        })
    }

    /// Told when the connection of `place` is taken over.
    fn taken_over(&self, place: &Place<'_>) -> Option<Arc<tokio::sync::Notify>> {
        let sessions = self.sessions.lock().ok()?;
        sessions
            .get(&place.login)?
            .iter()
            .find(|l| l.serial == place.serial)
            .map(|l| l.taken_over.clone())
    }

    /// Checks a CONNECT; returns the authenticated username (`None`: anonymous).
    pub fn admit(&self, c: &rumqttc::Connect) -> Result<Option<String>, Refusal> {
        if c.protocol != Protocol::V4 {
            return Err(refuse(
                ConnectReturnCode::RefusedProtocolVersion,
                "only MQTT 3.1.1 is served",
            ));
        }
        let user = match (&self.cfg.passwords, &c.login) {
            (None, l) => l
                .as_ref()
                .map(|l| l.username.clone())
                .filter(|u| !u.is_empty()),
            (Some(_), None) => {
                return Err(refuse(
                    ConnectReturnCode::NotAuthorized,
                    "no username/password",
                ));
            }
            (Some(db), Some(l)) => {
                if !db.verify(&l.username, &l.password) {
                    return Err(refuse(
                        ConnectReturnCode::BadUserNamePassword,
                        format!("bad username or password for user {:?}", l.username),
                    ));
                }
                if !client_id_allowed(&c.client_id, &l.username) {
                    return Err(refuse(
                        ConnectReturnCode::BadClientId,
                        format!(
                            "client id {:?} is not user {:?}'s (must be the username or <name>@<username>)",
                            c.client_id, l.username
                        ),
                    ));
                }
                Some(l.username.clone())
            }
        };
        if let Some(will) = &c.last_will {
            if let Some(acl) = &self.cfg.acl
                && !acl.may_publish(user.as_deref(), &c.client_id, &will.topic)
            {
                return Err(refuse(
                    ConnectReturnCode::NotAuthorized,
                    format!("last will on {:?} is outside the ACL", will.topic),
                ));
            }
            // A will is a PUBLISH the broker makes for the client later: the same bound.
            if let Some(max) = self.payload_limit(&will.topic)
                && will.message.len() > max
            {
                return Err(refuse(
                    ConnectReturnCode::NotAuthorized,
                    format!(
                        "a last will of {} bytes on {:?} (at most {max} there)",
                        will.message.len(),
                        will.topic
                    ),
                ));
            }
        }
        Ok(user)
    }

    /// The payload bound of `topic` ([`GateConfig::payload_limits`]): `None` where none applies
    /// (nor the pace).
    fn payload_limit(&self, topic: &str) -> Option<usize> {
        self.cfg
            .payload_limits
            .iter()
            .find(|(f, _)| acl::filter_matches(f, topic))
            .map(|&(_, max)| max)
    }

    /// Accepts connections on `listener` forever (run on a tokio runtime).
    pub async fn run(self: Arc<Self>, listener: TcpListener) {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(x) => x,
                Err(e) => {
                    warn!("broker: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let gate = self.clone();
            tokio::spawn(async move {
                let mut user = None;
                if let Err(e) = gate.connection(tcp, peer, &mut user).await {
                    gate.log_refusal(peer, user.as_deref(), &e);
                }
            });
        }
    }

    /// Logs why a connection from `peer` was refused or closed, throttled per user (`user`, the
    /// login its CONNECT gave, checked or not) or else per address ([`LogThrottle`]), so a
    /// client that reconnects in a loop cannot flood the log.
    fn log_refusal(&self, peer: SocketAddr, user: Option<&str>, e: &str) {
        let Ok(mut t) = self.refusals.lock() else {
            return;
        };
        let source = user.map_or_else(|| peer.ip().to_string(), |u| format!("user {u}"));
        if let Some(held) = t.admit(&source, Instant::now()) {
            warn!("broker: {peer}: {e}{}", t.held_back(held));
        }
    }

    /// One connection; `user` is set to the username of its CONNECT once read.
    async fn connection(
        &self,
        tcp: TcpStream,
        peer: SocketAddr,
        user: &mut Option<String>,
    ) -> Result<(), String> {
        match &self.cfg.tls {
            None => self.session(tcp, peer, user).await,
            Some(cfg) => {
                let acceptor = tokio_rustls::TlsAcceptor::from(cfg.clone());
                let tls = tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp))
                    .await
                    .map_err(|_| "TLS handshake timed out".to_string())?
                    .map_err(|e| format!("TLS handshake failed: {e}"))?;
                self.session(tls, peer, user).await
            }
        }
    }

    async fn session<S>(
        &self,
        client: S,
        peer: SocketAddr,
        login: &mut Option<String>,
    ) -> Result<(), String>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let (mut cr, mut cw) = tokio::io::split(client);
        let mut buf = BytesMut::with_capacity(4096);
        let first = tokio::time::timeout(
            HANDSHAKE,
            read_frame(
                &mut cr,
                &mut buf,
                |_| Ok(Some(MAX_CONTROL)),
                |_| Duration::ZERO,
            ),
        )
        .await
        .map_err(|_| "no CONNECT in time".to_string())??;
        let Some(first) = first else {
            return Ok(());
        };
        if first[0] >> 4 != 1 {
            return Err("the first packet is not CONNECT".into());
        }
        // rumqttc's 3.1.1 parser takes level 5 and then fails on its properties, so the level
        // is read first: any other than 4 gets the CONNACK refusal MQTT 3.1.1 defines (0x01).
        if let Some(level) = connect_level(&first).filter(|&l| l != 4) {
            send_connack(&mut cw, ConnectReturnCode::RefusedProtocolVersion).await;
            return Err(format!(
                "refused: MQTT protocol level {level} (only 3.1.1, level 4, is served)"
            ));
        }
        let mut connect = match Packet::read(&mut first.clone(), MAX_PACKET) {
            Ok(Packet::Connect(c)) => c,
            Ok(_) => return Err("the first packet is not CONNECT".into()),
            Err(rumqttc::Error::InvalidProtocolLevel(l)) => {
                send_connack(&mut cw, ConnectReturnCode::RefusedProtocolVersion).await;
                return Err(format!(
                    "refused: MQTT protocol level {l} (only 3.1.1 is served)"
                ));
            }
            Err(e) => return Err(format!("malformed CONNECT: {e}")),
        };
        *login = connect.login.as_ref().map(|l| l.username.clone());
        let refused = |r: Refusal, client_id: &str| {
            format!(
                "refused client id {client_id:?}: {} (CONNACK {:?})",
                r.reason, r.code
            )
        };
        let user = match self.admit(&connect) {
            Ok(u) => u,
            Err(r) => {
                send_connack(&mut cw, r.code).await;
                return Err(refused(r, &connect.client_id));
            }
        };
        // A checked login's place among its connections; an anonymous connection (or an
        // unchecked username) shares nothing and has a pace of its own.
        let place = match user.as_deref().filter(|_| self.cfg.passwords.is_some()) {
            Some(u) => match self.take_place(u, &connect.client_id) {
                Ok(p) => Some(p),
                Err(r) => {
                    send_connack(&mut cw, r.code).await;
                    return Err(refused(r, &connect.client_id));
                }
            },
            None => None,
        };
        let taken_over = place.as_ref().and_then(|p| self.taken_over(p));
        let mut pace = match &place {
            Some(p) => p.pace,
            None => self.cfg.rate.map(Pace::full),
        };
        let rate = self.cfg.rate;
        // The will is published when the connection ends, outside the gate's reading: it is
        // paid for now, on the connection's pace, before the CONNECT goes on (500 connections
        // with a will each get through at the pace of 500 publishes).
        if let Some(will) = &connect.last_will
            && self.payload_limit(&will.topic).is_some()
            && let (Some(rate), Some(p)) = (rate, pace.as_mut())
        {
            let now = Instant::now();
            let wait = p
                .take_bytes(rate, will.message.len(), now)
                .max(p.take_message(rate, now));
            tokio::time::sleep(wait).await;
        }
        let client_id = connect.client_id.clone();
        let who = format!(
            "client {client_id:?} (user {:?}, {peer})",
            user.as_deref().unwrap_or("<anonymous>")
        );
        connect.login = Some(Login::new(
            user.clone().unwrap_or_else(|| "anonymous".into()),
            self.secret.clone(),
        ));
        let inner = TcpStream::connect(self.inner)
            .await
            .map_err(|e| format!("{who}: cannot reach rumqttd: {e}"))?;
        let _ = inner.set_nodelay(true);
        let (mut ir, mut iw) = inner.into_split();
        let mut out = BytesMut::new();
        Packet::Connect(connect)
            .write(&mut out, MAX_PACKET)
            .map_err(|e| format!("{who}: cannot re-encode CONNECT: {e}"))?;
        iw.write_all(&out)
            .await
            .map_err(|e| format!("{who}: rumqttd: {e}"))?;
        let upstream = async {
            loop {
                let read = read_frame(
                    &mut cr,
                    &mut buf,
                    |head| self.bound(head, user.as_deref(), &client_id),
                    |n| match (rate, pace.as_mut()) {
                        (Some(rate), Some(p)) => p.take_bytes(rate, n, Instant::now()),
                        _ => Duration::ZERO,
                    },
                )
                .await
                .map_err(|e| format!("closed {who}: {e}"))?;
                let Some(frame) = read else {
                    return Ok(());
                };
                let paced = self
                    .check(&frame, user.as_deref(), &client_id)
                    .map_err(|e| format!("closed {who}: {e}"))?;
                if let (Some(_), Some(rate), Some(p)) = (paced, rate, pace.as_mut()) {
                    // Not reading from the client meanwhile: TCP holds the rest back.
                    tokio::time::sleep(p.take_message(rate, Instant::now())).await;
                }
                iw.write_all(&frame)
                    .await
                    .map_err(|e| format!("{who}: rumqttd: {e}"))?;
            }
        };
        let downstream = async {
            tokio::io::copy(&mut ir, &mut cw)
                .await
                .map(|_| ())
                .map_err(|e| format!("{who}: to client: {e}"))?;
            let _ = cw.shutdown().await;
            Ok::<(), String>(())
        };
        let taken = async {
            match &taken_over {
                Some(n) => n.notified().await,
                None => std::future::pending().await,
            }
        };
        // Whichever side ends first ends the session; dropping the halves closes both sockets
        // (rumqttd then publishes the client's last will unless it sent DISCONNECT).
        let end = tokio::select! {
            r = upstream => r,
            r = downstream => r,
            () = taken => Err(format!("closed {who}: a new connection with its client id took over")),
        };
        if let Some(mut p) = place {
            p.pace = pace;
        }
        end
    }

    /// The largest length the packet starting with `head` may have, once `head` tells it
    /// (`Ok(None)`: more bytes needed): [`MAX_CONTROL`] but for a PUBLISH, whose bound is its
    /// topic's payload bound plus its headers (or [`MAX_PACKET`] on a topic without one), known
    /// once its topic has arrived; a topic the ACL does not let `user` write is an error then.
    fn bound(
        &self,
        head: &[u8],
        user: Option<&str>,
        client_id: &str,
    ) -> Result<Option<usize>, String> {
        if head[0] >> 4 != 3 {
            return Ok(Some(MAX_CONTROL));
        }
        let Some((header, topic)) = publish_topic(head)? else {
            return Ok(None);
        };
        if let Some(acl) = &self.cfg.acl
            && !acl.may_publish(user, client_id, topic)
        {
            return Err(format!("may not publish on {topic:?}"));
        }
        // The packet id follows the topic at QoS 1 and 2.
        let pkid = if head[0] & 0b0110 != 0 { 2 } else { 0 };
        let Some(max) = self.payload_limit(topic) else {
            return Ok(Some(MAX_PACKET));
        };
        if let Some((_, total)) = packet_head(head)? {
            let payload = total.saturating_sub(header + 2 + topic.len() + pkid);
            if payload > max {
                return Err(format!(
                    "a payload of {payload} bytes on {topic:?} (at most {max} there), refused \
                     after {} bytes",
                    head.len()
                ));
            }
        }
        Ok(Some(header + 2 + topic.len() + pkid + max))
    }

    /// Checks one packet from an admitted client; `Ok(Some(bytes))` for a PUBLISH on a topic
    /// with a payload bound (paced by [`GateConfig::rate`]).
    fn check(
        &self,
        frame: &[u8],
        user: Option<&str>,
        client_id: &str,
    ) -> Result<Option<usize>, String> {
        match frame[0] >> 4 {
            1 => Err("a second CONNECT".into()),
            3 => {
                let (topic, payload) = publish_parts(frame).ok_or("malformed PUBLISH")?;
                if let Some(acl) = &self.cfg.acl
                    && !acl.may_publish(user, client_id, topic)
                {
                    return Err(format!("may not publish on {topic:?}"));
                }
                match self.payload_limit(topic) {
                    Some(max) if payload > max => Err(format!(
                        "a payload of {payload} bytes on {topic:?} (at most {max} there)"
                    )),
                    Some(_) => Ok(Some(payload)),
                    None => Ok(None),
                }
            }
            8 => {
                let Some(acl) = &self.cfg.acl else {
                    return Ok(None);
                };
                match Packet::read(&mut BytesMut::from(frame), MAX_PACKET) {
                    Ok(Packet::Subscribe(s)) => {
                        match s
                            .filters
                            .iter()
                            .find(|f| !acl.may_subscribe(user, client_id, &f.path))
                        {
                            Some(f) => Err(format!("may not subscribe to {:?}", f.path)),
                            None => Ok(None),
                        }
                    }
                    _ => Err("malformed SUBSCRIBE".into()),
                }
            }
            _ => Ok(None),
        }
    }
}

async fn send_connack<W: AsyncWrite + Unpin>(w: &mut W, code: ConnectReturnCode) {
    let mut out = BytesMut::new();
    if Packet::ConnAck(ConnAck::new(code, false))
        .write(&mut out, 16)
        .is_ok()
    {
        let _ = w.write_all(&out).await;
        let _ = w.flush().await;
        let _ = w.shutdown().await;
    }
}

/// The protocol level of a CONNECT frame (4: MQTT 3.1.1, 5: MQTT 5, 3: MQTT 3.1 as `MQIsdp`),
/// read from its variable header; `None` when the frame is too short to hold one.
pub fn connect_level(frame: &[u8]) -> Option<u8> {
    // Fixed header: the type byte, then 1-4 bytes of remaining length (the last below 0x80).
    let len_bytes = frame.iter().skip(1).take(4).position(|b| b & 0x80 == 0)? + 1;
    let rest = frame.get(1 + len_bytes..)?;
    let name_len = usize::from(u16::from_be_bytes([*rest.first()?, *rest.get(1)?]));
    rest.get(2 + name_len).copied()
}

/// The fixed header's length and the whole packet's declared length of the MQTT packet at the
/// start of `buf`, once its fixed header has arrived (`Ok(None)` before).
fn packet_head(buf: &[u8]) -> Result<Option<(usize, usize)>, String> {
    let mut len = 0usize;
    for i in 1..5 {
        let Some(&b) = buf.get(i) else {
            return Ok(None);
        };
        len |= ((b & 0x7f) as usize) << (7 * (i - 1));
        if b & 0x80 == 0 {
            return Ok(Some((1 + i, 1 + i + len)));
        }
    }
    Err("malformed remaining length".into())
}

/// The length of the MQTT packet at the start of `buf` (fixed header included) once it is
/// complete; `Ok(None)` while more bytes are needed.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, String> {
    let Some((_, total)) = packet_head(buf)? else {
        return Ok(None);
    };
    if total > MAX_PACKET {
        return Err(format!(
            "packet of {total} bytes over the limit {MAX_PACKET}"
        ));
    }
    Ok((buf.len() >= total).then_some(total))
}

/// The fixed header's length and the topic of the PUBLISH at the start of `head`, once its topic
/// has arrived (`Ok(None)` before); an error for a topic that is not UTF-8.
fn publish_topic(head: &[u8]) -> Result<Option<(usize, &str)>, String> {
    let Some((header, _)) = packet_head(head)? else {
        return Ok(None);
    };
    let Some(n) = head.get(header..header + 2) else {
        return Ok(None);
    };
    let n = usize::from(u16::from_be_bytes([n[0], n[1]]));
    match head.get(header + 2..header + 2 + n) {
        None => Ok(None),
        Some(t) => std::str::from_utf8(t)
            .map(|t| Some((header, t)))
            .map_err(|_| "a PUBLISH topic that is not UTF-8".into()),
    }
}

/// Reads the next whole packet; `None` at a clean end of stream. `bound` says, from the packet's
/// first bytes, the largest length it may have (`Ok(None)` while they do not tell yet): a packet
/// declared longer is refused before the rest of it is read, and so is one whose first bytes
/// cannot tell within [`MAX_CONTROL`] bytes (a PUBLISH's topic is at most 65 535). `pace` is
/// paid for every chunk of bytes read, before the next read.
async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut BytesMut,
    bound: impl Fn(&[u8]) -> Result<Option<usize>, String>,
    mut pace: impl FnMut(usize) -> Duration,
) -> Result<Option<BytesMut>, String> {
    let mut bounded = false;
    loop {
        if let Some(n) = frame_len(buf)? {
            if !bounded
                && let Some(max) = bound(&buf[..n])?
                && n > max
            {
                return Err(format!("a packet of {n} bytes (at most {max} there)"));
            }
            return Ok(Some(buf.split_to(n)));
        }
        if !bounded && let Some((_, total)) = packet_head(buf)? {
            match bound(buf)? {
                Some(max) if total > max => {
                    return Err(format!(
                        "a packet declared {total} bytes long (at most {max} there), refused \
                         after {} bytes",
                        buf.len()
                    ));
                }
                Some(_) => bounded = true,
                None if buf.len() > MAX_CONTROL + 8 => {
                    return Err(format!("no topic within the first {} bytes", buf.len()));
                }
                None => {}
            }
        }
        match r.read_buf(buf).await {
            Ok(0) if buf.is_empty() => return Ok(None),
            Ok(0) => return Err("connection closed inside a packet".into()),
            Ok(n) => {
                let wait = pace(n);
                if !wait.is_zero() {
                    // Not reading from the client meanwhile: TCP holds the rest back.
                    tokio::time::sleep(wait).await;
                }
            }
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

/// The topic and the payload's length of a PUBLISH packet (whole frame, MQTT 3.1.1: the packet
/// id follows the topic at QoS 1 and 2).
pub fn publish_parts(frame: &[u8]) -> Option<(&str, usize)> {
    let mut i = 1;
    while frame.get(i)? & 0x80 != 0 {
        i += 1;
    }
    let mut rest = frame.get(i + 1..)?;
    if rest.len() < 2 {
        return None;
    }
    let n = rest.get_u16() as usize;
    let topic = std::str::from_utf8(rest.get(..n)?).ok()?;
    let pkid = if frame[0] & 0b0110 != 0 { 2 } else { 0 };
    let payload = rest.len().checked_sub(n + pkid)?;
    Some((topic, payload))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rumqttc::{LastWill, Publish, QoS};

    fn gate(acl: &str, passwd: Option<&str>) -> Gate {
        let rng = ring::rand::SystemRandom::new();
        let passwords = passwd.map(|users| {
            let lines: Vec<String> = users
                .split(',')
                .map(|u| super::super::passwd::hash_line(u, &format!("pw-{u}"), &rng).unwrap())
                .collect();
            PasswordDb::parse(&lines.join("\n")).unwrap()
        });
        Gate::new(
            GateConfig {
                tls: None,
                passwords,
                acl: Some(Acl::parse(acl).unwrap()),
                payload_limits: vec![("f/clients/+/status".into(), 10)],
                rate: None,
            },
            "127.0.0.1:1".parse().unwrap(),
            "s".into(),
        )
    }

    fn connect(id: &str, login: Option<(&str, &str)>, will: Option<&str>) -> rumqttc::Connect {
        let mut c = rumqttc::Connect::new(id);
        if let Some((u, p)) = login {
            c.set_login(u, p);
        }
        c.last_will = will.map(|t| LastWill::new(t, b"x".to_vec(), QoS::AtLeastOnce, true));
        c
    }

    const ACL: &str = "pattern write f/clients/%u/up\npattern write f/clients/%u/status\npattern read f/clients/%u/down\n";

    #[test]
    fn logins_are_checked_and_client_ids_bound_to_usernames() {
        let g = gate(ACL, Some("c1,c2,coordinator"));
        assert_eq!(
            g.admit(&connect(
                "c1",
                Some(("c1", "pw-c1")),
                Some("f/clients/c1/status")
            )),
            Ok(Some("c1".into()))
        );
        assert_eq!(
            g.admit(&connect(
                "gps-r@coordinator",
                Some(("coordinator", "pw-coordinator")),
                None
            )),
            Ok(Some("coordinator".into()))
        );
        let code = |c| g.admit(&c).unwrap_err().code;
        assert_eq!(
            code(connect("c1", Some(("c1", "pw-c2")), None)),
            ConnectReturnCode::BadUserNamePassword
        );
        assert_eq!(
            code(connect("c1", Some(("nobody", "pw-nobody")), None)),
            ConnectReturnCode::BadUserNamePassword
        );
        assert_eq!(
            code(connect("c1", None, None)),
            ConnectReturnCode::NotAuthorized
        );
        // c1 taking over c2's session, or an empty name before the @.
        assert_eq!(
            code(connect("c2", Some(("c1", "pw-c1")), None)),
            ConnectReturnCode::BadClientId
        );
        assert_eq!(
            code(connect("@c1", Some(("c1", "pw-c1")), None)),
            ConnectReturnCode::BadClientId
        );
        assert_eq!(
            code(connect("", Some(("c1", "pw-c1")), None)),
            ConnectReturnCode::BadClientId
        );
        // A last will on another client's status.
        assert_eq!(
            code(connect(
                "c1",
                Some(("c1", "pw-c1")),
                Some("f/clients/c2/status")
            )),
            ConnectReturnCode::NotAuthorized
        );
        // A will on its own status within the topic's payload bound (10 bytes here) passes, a
        // larger one is refused like a PUBLISH of it would be (issue 28: 65 000-byte wills).
        let mut big = connect("c1", Some(("c1", "pw-c1")), Some("f/clients/c1/status"));
        big.last_will.as_mut().unwrap().message = vec![0; 10].into();
        assert!(g.admit(&big).is_ok());
        big.last_will.as_mut().unwrap().message = vec![0; 11].into();
        let refused = g.admit(&big).unwrap_err();
        assert_eq!(refused.code, ConnectReturnCode::NotAuthorized);
        assert!(
            refused.reason.contains("last will of 11 bytes"),
            "{refused:?}"
        );
        let mut v5 = connect("c1", Some(("c1", "pw-c1")), None);
        v5.protocol = Protocol::V5;
        assert_eq!(code(v5), ConnectReturnCode::RefusedProtocolVersion);
    }

    #[test]
    fn buckets_pace_by_the_rate_after_the_burst() {
        let (per_second, burst) = (100.0, 200.0);
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut b = Bucket {
            tokens: burst,
            at: t0,
        };
        let mut take = |n: f64, now| b.take(per_second, burst, n, now);
        // 150 of the 200 banked: no wait; 150 more: 100 owed, 1 s at 100 B/s.
        assert_eq!(take(150.0, t0), Duration::ZERO);
        assert_eq!(take(150.0, t0), Duration::from_secs(1));
        // Another taker right behind queues after the debt: 100 + 50 owed, 1.5 s.
        assert_eq!(take(50.0, t0), Duration::from_millis(1500));
        // 3.5 s later the debt (150) is paid and 200 banked (the burst caps the 350 refilled).
        assert_eq!(take(200.0, at(3500)), Duration::ZERO);
        assert_eq!(take(0.0, at(3500)), Duration::ZERO);
        // Half a second refills 50.
        assert_eq!(take(100.0, at(4000)), Duration::from_millis(500));
    }

    /// Empty messages cost no bytes but count as messages: past the message burst they wait
    /// at the message rate (issue 28: 50 000 empty publishes went through at ~1 700/s).
    #[test]
    fn empty_messages_are_paced_by_the_message_bucket() {
        let rate = Rate {
            bytes_per_second: 1e6,
            burst: 1e6,
            messages_per_second: 10.0,
            message_burst: 20.0,
        };
        let t0 = Instant::now();
        let mut p = Pace {
            bytes: Bucket {
                tokens: rate.burst,
                at: t0,
            },
            messages: Bucket {
                tokens: rate.message_burst,
                at: t0,
            },
        };
        for i in 0..20 {
            assert_eq!(p.take(rate, 0, t0), Duration::ZERO, "message {i}");
        }
        // The 21st owes one message: 0.1 s; 100 more queue behind it: 10.1 s.
        assert_eq!(p.take(rate, 0, t0), Duration::from_millis(100));
        for _ in 0..99 {
            p.take(rate, 0, t0);
        }
        assert_eq!(p.take(rate, 0, t0), Duration::from_millis(10_100));
        // A large message waits by the byte bucket, whichever is longer.
        let mut q = Pace::full(rate);
        assert_eq!(
            q.take(rate, 3_000_000, Instant::now())
                .as_secs_f64()
                .round(),
            2.0
        );
    }

    #[test]
    fn client_id_binding() {
        assert!(client_id_allowed("c1", "c1"));
        assert!(client_id_allowed("x@c1", "c1"));
        assert!(!client_id_allowed("c1x", "c1"));
        assert!(!client_id_allowed("x@c10", "c1"));
        assert!(!client_id_allowed("@c1", "c1"));
        assert!(!client_id_allowed("c2", "c1"));
    }

    fn encode(p: Packet) -> BytesMut {
        let mut b = BytesMut::new();
        p.write(&mut b, MAX_PACKET).unwrap();
        b
    }

    #[test]
    fn publishes_and_subscriptions_are_checked_per_packet() {
        let g = gate(ACL, Some("c1"));
        let publish = |t: &str, n: usize| {
            let mut p = Publish::new(t, QoS::AtLeastOnce, vec![7u8; n]);
            p.pkid = 1;
            encode(Packet::Publish(p))
        };
        for n in [0, 100, 200_000] {
            let own = publish("f/clients/c1/up", n);
            assert_eq!(frame_len(&own), Ok(Some(own.len())));
            assert_eq!(publish_parts(&own), Some(("f/clients/c1/up", n)));
            assert!(g.check(&own, Some("c1"), "c1").is_ok());
            let forged = publish("f/clients/c2/up", n);
            assert!(
                g.check(&forged, Some("c1"), "c1")
                    .unwrap_err()
                    .contains("c2")
            );
        }
        // Within the ACL but over the status topics' payload bound (10 bytes here), at either QoS.
        for qos in [QoS::AtMostOnce, QoS::AtLeastOnce] {
            let mut p = Publish::new("f/clients/c1/status", qos, vec![7u8; 10]);
            p.pkid = u16::from(qos != QoS::AtMostOnce);
            assert!(
                g.check(&encode(Packet::Publish(p.clone())), Some("c1"), "c1")
                    .is_ok()
            );
            p.payload = vec![7u8; 11].into();
            let e = g
                .check(&encode(Packet::Publish(p)), Some("c1"), "c1")
                .unwrap_err();
            assert!(e.contains("11 bytes") && e.contains("at most 10"), "{e}");
        }
        let sub = |f: &str| {
            let mut s = rumqttc::Subscribe::new(f, QoS::AtLeastOnce);
            s.pkid = 1;
            encode(Packet::Subscribe(s))
        };
        assert!(g.check(&sub("f/clients/c1/down"), Some("c1"), "c1").is_ok());
        assert!(g.check(&sub("f/clients/+/up"), Some("c1"), "c1").is_err());
        assert!(g.check(&encode(Packet::PingReq), Some("c1"), "c1").is_ok());
        assert!(
            g.check(
                &encode(Packet::Connect(connect("c1", None, None))),
                Some("c1"),
                "c1"
            )
            .is_err()
        );
    }

    #[test]
    fn the_protocol_level_is_read_from_the_connect() {
        let v4 = encode(Packet::Connect(connect("c0", None, None)));
        assert_eq!(connect_level(&v4), Some(4));
        // An MQTT 5 CONNECT as a v5 client writes it: name, level 5, flags, keepalive, an empty
        // property block, the client id.
        let v5 = [
            0x10, 0x10, 0x00, 0x04, b'M', b'Q', b'T', b'T', 0x05, 0x02, 0x00, 0x3c, 0x00, 0x00,
            0x03, b'c', b'0', b'1',
        ];
        assert_eq!(connect_level(&v5), Some(5));
        // MQTT 3.1.
        let v3 = [
            0x10, 0x0c, 0x00, 0x06, b'M', b'Q', b'I', b's', b'd', b'p', 0x03, 0x02, 0x00, 0x3c,
        ];
        assert_eq!(connect_level(&v3), Some(3));
        for short in [
            &[0x10][..],
            &[0x10, 0x80],
            &[0x10, 0x02, 0x00],
            &[0x10, 0x06, 0x00, 0x04, b'M'],
        ] {
            assert_eq!(connect_level(short), None, "{short:?}");
        }
    }

    /// Over a socket: an MQTT 5 CONNECT gets CONNACK "unacceptable protocol version" (0x01) and
    /// the connection is closed, as MQTT 3.1.1 §3.2.2.3 says, not dropped without a word.
    #[tokio::test]
    async fn an_mqtt5_connect_is_refused_with_its_return_code() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(Arc::new(gate(ACL, Some("c1"))).run(listener));
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        let v5 = [
            0x10, 0x10, 0x00, 0x04, b'M', b'Q', b'T', b'T', 0x05, 0x02, 0x00, 0x3c, 0x00, 0x00,
            0x03, b'c', b'0', b'1',
        ];
        tcp.write_all(&v5).await.unwrap();
        let mut reply = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut reply))
            .await
            .expect("the gate answers and closes")
            .unwrap();
        assert_eq!(reply, [0x20, 0x02, 0x00, 0x01]);
    }

    #[test]
    fn framing_waits_for_whole_packets_and_bounds_their_size() {
        let p = encode(Packet::Publish(Publish::new(
            "a/b",
            QoS::AtMostOnce,
            vec![1u8; 300],
        )));
        for cut in 0..p.len() {
            assert_eq!(frame_len(&p[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(frame_len(&p), Ok(Some(p.len())));
        // Remaining length 2^28 - 1 (0xff ff ff 7f) is over MAX_PACKET; five length bytes are malformed.
        assert!(frame_len(&[0x30, 0xff, 0xff, 0xff, 0x7f]).is_err());
        assert!(frame_len(&[0x30, 0xff, 0xff, 0xff, 0xff, 0x01]).is_err());
        assert_eq!(publish_parts(&[0x30, 0x01, 0x00]), None);
        assert_eq!(publish_parts(&p), Some(("a/b", 300)));
    }

    /// The first bytes of a QoS 0 PUBLISH on `topic` declaring `remaining` bytes after its fixed
    /// header (encoded by rumqttc): its fixed header and its topic, nothing more.
    fn publish_head(topic: &str, remaining: usize) -> Vec<u8> {
        let payload = vec![0x5A; remaining - 2 - topic.len()];
        let whole = encode(Packet::Publish(Publish::new(
            topic,
            QoS::AtMostOnce,
            payload,
        )));
        let header = whole.len() - remaining;
        whole[..header + 2 + topic.len()].to_vec()
    }

    /// Reads one frame from what `written` holds (the writer stays open, as a client that holds
    /// an unfinished packet), bounded as the gate bounds `c1`'s packets; gives up after 5 s.
    async fn read_one(g: &Gate, written: &[u8]) -> (Result<Option<BytesMut>, String>, usize) {
        let (mut client, mut server) = tokio::io::duplex(1 << 20);
        client.write_all(written).await.unwrap();
        let mut buf = BytesMut::new();
        let mut paid = 0;
        let r = tokio::time::timeout(
            Duration::from_secs(5),
            read_frame(
                &mut server,
                &mut buf,
                |h| g.bound(h, Some("c1"), "c1"),
                |n| {
                    paid += n;
                    Duration::ZERO
                },
            ),
        )
        .await
        .expect("the gate decides without the rest of the packet");
        drop(client);
        (r, paid)
    }

    /// Issue 56 §3: a PUBLISH declared longer than its topic's bound (10 bytes on the status
    /// topic here), on a topic the user may not write, or another packet over MAX_CONTROL is
    /// refused as soon as its fixed header and topic are in, not once 4 MB have been buffered;
    /// a packet within its bound comes whole, every byte read paid for.
    #[tokio::test]
    async fn packets_are_bounded_before_they_are_buffered() {
        let g = gate(ACL, Some("c1"));
        let head = publish_head("f/clients/c1/status", 4_190_000);
        let (r, _) = read_one(&g, &head).await;
        assert_eq!(
            r.unwrap_err(),
            format!(
                "a payload of 4189979 bytes on \"f/clients/c1/status\" (at most 10 there), \
                 refused after {} bytes",
                head.len()
            )
        );
        let (r, _) = read_one(&g, &publish_head("f/clients/c2/up", 4_190_000)).await;
        assert_eq!(r.unwrap_err(), "may not publish on \"f/clients/c2/up\"");
        // A SUBSCRIBE (type 8) declared 100 000 bytes long.
        let (r, _) = read_one(&g, &[0x82, 0xa0, 0x8d, 0x06, 0x00, 0x01]).await;
        assert!(r.unwrap_err().contains("at most 65536"));
        // Within the bound (10 bytes of payload): whole, and paid for.
        let ok = encode(Packet::Publish(Publish::new(
            "f/clients/c1/status",
            QoS::AtMostOnce,
            vec![7u8; 10],
        )));
        let (r, paid) = read_one(&g, &ok).await;
        assert_eq!(r.unwrap().unwrap().as_ref(), &ok[..]);
        assert_eq!(paid, ok.len());
        // One byte over it: refused.
        let over = encode(Packet::Publish(Publish::new(
            "f/clients/c1/status",
            QoS::AtMostOnce,
            vec![7u8; 11],
        )));
        assert!(read_one(&g, &over[..over.len() - 5]).await.0.is_err());
    }

    /// Issue 56 §3: a login holds at most MAX_CONNECTIONS_PER_LOGIN connections `<name>@login`;
    /// one more is refused (CONNACK 3) while other logins and the login's own client id are not; a new connection with a live one's client
    /// id takes over (the old one is told); a place given back frees it, and the login's next
    /// connection starts with the pace debt its last one left.
    #[tokio::test]
    async fn a_login_holds_a_bounded_number_of_connections() {
        let mut g = gate(ACL, Some("c1,c2"));
        let rate = Rate {
            bytes_per_second: 100.0,
            burst: 100.0,
            messages_per_second: 10.0,
            message_burst: 10.0,
        };
        g.cfg.rate = Some(rate);
        let mut places: Vec<_> = (0..MAX_CONNECTIONS_PER_LOGIN)
            .map(|i| g.take_place("c1", &format!("x{i}@c1")).unwrap())
            .collect();
        let refused = g.take_place("c1", "one-more@c1").err().unwrap();
        assert_eq!(refused.code, ConnectReturnCode::ServiceUnavailable);
        assert!(
            refused.reason.contains("already holds 8 connections"),
            "{}",
            refused.reason
        );
        let other = g.take_place("c2", "c2").unwrap();
        // The login's own client id is never locked out by the others.
        let own = g.take_place("c1", "c1").unwrap();
        let told = g.taken_over(&places[0]).unwrap();
        let again = g.take_place("c1", "x0@c1").unwrap();
        tokio::time::timeout(Duration::from_secs(1), told.notified())
            .await
            .expect("the connection taken over is told");
        assert!(g.taken_over(&places[0]).is_none());
        // Giving a place back frees it; the pace it leaves (200 bytes owed: 3 s at 100 B/s)
        // is where the login's next connection starts.
        let mut last = places.pop().unwrap();
        let mut p = last.pace.unwrap();
        assert_eq!(
            p.take_bytes(rate, 300, Instant::now()),
            Duration::from_secs(2)
        );
        last.pace = Some(p);
        drop(last);
        let mut next = g.take_place("c1", "new@c1").unwrap();
        let wait = next
            .pace
            .as_mut()
            .unwrap()
            .take_bytes(rate, 0, Instant::now());
        assert!(wait > Duration::from_millis(1900), "{wait:?}");
        drop((places, again, other, next, own));
        assert!(g.sessions.lock().unwrap().is_empty());
    }
}
