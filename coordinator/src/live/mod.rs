//! The live view of a run (`--http ADDR` of `serve`, `demo` and `simulate`): a page that
//! updates itself over server-sent events, and `/metrics` in Prometheus' text format.
//!
//! | module | what it holds |
//! | --- | --- |
//! | `state` | [`State`]: clients and their state, round and phase, accuracy, dendrogram, rejections |
//! | `metrics` | [`Metrics`]: the Prometheus families (prometheus-client) |
//! | `server` | the HTTP server (axum): routes, HTTP Basic login, the event stream |
//! | `page.html`, `page.js` | the page, embedded in the binary |
//!
//! The run feeds it through a [`Live`] handle: [`Live::observer`] wraps the run's
//! [`Observer`] (rounds, clustering, newcomers: what every runtime reports), and the MQTT
//! runtime ([`crate::cmd::serve`]) calls the handle where clients join, phases begin and end,
//! answers arrive and messages are rejected. A handle made by [`Live::default`] is off: every
//! call is a no-op, so the runtimes call it unconditionally. The algorithms in `edgecfl_shared`
//! know nothing of it.

mod metrics;
mod server;
mod state;

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use clap::Args;
use edgecfl_shared::cluster::clustering::Clustering;
use edgecfl_shared::federation::{
    ClientInfo, DroppedNewcomer, DroppedUpdate, Newcomer, Observer, RoundRecord,
};
use serde::Serialize;
use tokio::sync::watch;

pub use metrics::Metrics;
pub use server::{Access, Server};
pub use state::{ClientState, State};

use crate::rounds::Phase;

/// Where the live view listens: the `--http` flag.
#[derive(Debug, Clone, Default, Args)]
pub struct HttpArgs {
    /// Serve a live view of the run at ADDR: a page (/) that follows the clients, rounds,
    /// accuracy per cluster, the dendrogram and the rejections as they happen, and /metrics in
    /// Prometheus' text format. ADDR is PORT (on 127.0.0.1) or HOST:PORT (0.0.0.0:PORT to
    /// reach it from other machines). With a password file on the embedded broker
    /// (--broker-passwd, --broker-config, demo --secure), or a login at an external broker, the
    /// page asks for the same credentials (HTTP Basic): the user --http-user.
    #[arg(long, value_name = "ADDR", value_parser = parse_http_addr)]
    pub http: Option<SocketAddr>,
    /// The broker user whose password opens the live view when the run is secured.
    #[arg(
        long,
        value_name = "USER",
        default_value = "coordinator",
        requires = "http"
    )]
    pub http_user: String,
    /// Seconds the live view stays up after the run, showing its end (a demo on a small data
    /// set is over in seconds).
    #[arg(long, value_name = "SECS", default_value_t = 0.0, requires = "http")]
    pub http_linger: f64,
}

impl HttpArgs {
    /// After the run: keeps `server` up for `--http-linger` seconds, then stops it.
    pub fn linger(&self, server: Option<Server>) {
        let Some(server) = server else { return };
        if self.http_linger > 0.0 && self.http_linger.is_finite() {
            tracing::info!(
                "live view: {} stays up for {:.0} s (--http-linger)",
                server.url(),
                self.http_linger
            );
            std::thread::sleep(std::time::Duration::from_secs_f64(self.http_linger));
        }
        drop(server);
    }
}

/// `PORT` (loopback) or `HOST:PORT`.
fn parse_http_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Some(port) = s.strip_prefix("localhost:")
        && let Ok(port) = port.parse::<u16>()
    {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    Err(format!(
        "{s:?} is not PORT or IP:PORT (e.g. 8080, 127.0.0.1:8080, 0.0.0.0:8080)"
    ))
}

struct Inner {
    state: Mutex<State>,
    metrics: Metrics,
    start: Instant,
    version: watch::Sender<u64>,
}

/// The handle the run feeds the live view through (cheap to clone; off by default).
#[derive(Clone, Default)]
pub struct Live(Option<Arc<Inner>>);

impl fmt::Debug for Live {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Live(on)"
        } else {
            "Live(off)"
        })
    }
}

/// A phase's kind (`clustering`, `training`, `evaluation`, …) and round.
pub fn phase_kind(p: Phase) -> (&'static str, usize) {
    match p {
        Phase::Joining => ("joining", 0),
        Phase::Clustering => ("clustering", 0),
        Phase::Training(t) => ("training", t as usize),
        Phase::Evaluating(t) => ("evaluation", t as usize),
        Phase::Finished => ("finished", 0),
    }
}

/// The serde name of an enum value (`snake_case` unit variant or the tag of a struct variant).
fn variant_name(v: &impl Serialize) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(serde_json::Value::Object(m)) => m
            .get("reason")
            .and_then(|r| r.as_str().map(str::to_string))
            .or_else(|| m.keys().next().cloned())
            .unwrap_or_default(),
        _ => String::from("other"),
    }
}

impl Live {
    /// A live view of a `runtime` run of `algorithm` with `rounds` training rounds.
    pub fn new(runtime: &str, algorithm: &str, rounds: usize) -> Live {
        let state = State {
            runtime: runtime.into(),
            algorithm: algorithm.into(),
            rounds_planned: rounds,
            ..State::default()
        };
        let metrics = Metrics::new();
        metrics.progress(0, rounds, 0, 0);
        Live(Some(Arc::new(Inner {
            state: Mutex::new(state),
            metrics,
            start: Instant::now(),
            version: watch::channel(0).0,
        })))
    }

    /// Whether it is on.
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    fn lock(inner: &Inner) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves plain data: go on with it.
        inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the state and metrics, then refreshes the derived metrics and tells the
    /// page's streams.
    fn update(&self, f: impl FnOnce(&mut State, &Metrics, f64)) {
        let Some(inner) = &self.0 else { return };
        let now = inner.start.elapsed().as_secs_f64();
        {
            let mut s = Self::lock(inner);
            f(&mut s, &inner.metrics, now);
            inner.metrics.clients(s.counts());
            inner
                .metrics
                .progress(s.rounds_done, s.rounds_planned, s.round(), s.clusters);
        }
        inner.version.send_modify(|v| *v += 1);
    }

    /// An in-process run (`simulate`) begins round `round` (0: the clustering).
    pub fn in_process_round(&self, round: usize) {
        self.update(|s, m, now| next_round(s, m, round, now));
    }

    /// The run's id (MQTT runs).
    pub fn run_id(&self, id: &str) {
        self.update(|s, _, _| s.run_id = Some(id.to_string()));
    }

    /// Client `id` joined before round 0 (answered the coordinator's ping).
    pub fn joined(&self, id: &str) {
        self.update(|s, m, _| {
            if !s.clients.contains_key(id) {
                m.joined(false);
            }
            s.joined(id);
        });
    }

    /// Client `id` left while clients joined.
    pub fn left(&self, id: &str) {
        self.update(|s, m, _| {
            s.left(id);
            m.dropped("gone");
        });
    }

    /// The round-0 clients, in the run's order.
    pub fn fleet(&self, clients: &[ClientInfo]) {
        self.update(|s, m, _| {
            for c in clients {
                if !s.clients.contains_key(&c.id) {
                    m.joined(false);
                }
            }
            let ids: Vec<String> = clients.iter().map(|c| c.id.clone()).collect();
            s.fleet(&ids);
        });
    }

    /// A phase began, asking `asked`.
    pub fn phase_started(&self, phase: Phase, asked: impl IntoIterator<Item = String>) {
        let (kind, round) = phase_kind(phase);
        let asked: Vec<String> = asked.into_iter().collect();
        self.update(|s, _, now| s.phase_started(kind, round, &asked, now));
    }

    /// The current phase ended (its duration goes to the histogram).
    pub fn phase_ended(&self) {
        self.update(|s, m, now| {
            if let Some((kind, secs)) = s.phase_ended(now) {
                m.phase(&kind, secs);
            }
        });
    }

    /// Client `id` answered `phase` with `bytes` of payload.
    pub fn answered(&self, id: &str, phase: Phase, bytes: u64) {
        self.update(|s, m, _| {
            s.answered(id, bytes);
            m.answered(phase_kind(phase).0);
        });
    }

    /// Client `id` did not answer `phase` in time.
    pub fn late(&self, id: &str, phase: Phase) {
        self.update(|s, m, _| {
            s.late(id);
            m.late(phase_kind(phase).0);
        });
    }

    /// Client `id` disconnected (`absent`: it was not asked, being gone already).
    pub fn gone(&self, id: &str, absent: bool) {
        self.update(|s, m, _| {
            s.gone(id);
            m.dropped(if absent { "absent" } else { "gone" });
        });
    }

    /// Client `id` came back.
    pub fn back(&self, id: &str) {
        self.update(|s, _, _| s.back(id));
    }

    /// A message under client id `client` was rejected (`reason`: its serde name).
    pub fn rejected(&self, client: &str, reason: &impl Serialize, detail: &str) {
        let reason = variant_name(reason);
        self.update(|s, m, now| {
            m.rejected("message", &reason);
            s.rejected("message", client, &reason, detail, now);
        });
    }

    /// MQTT payload bytes received and sent so far.
    pub fn bytes(&self, up: u64, down: u64) {
        let Some(inner) = &self.0 else { return };
        let changed = {
            let mut s = Self::lock(inner);
            let changed = s.bytes != Some((up, down));
            s.bytes = Some((up, down));
            changed
        };
        inner.metrics.bytes(up, down);
        if changed {
            inner.version.send_modify(|v| *v += 1);
        }
    }

    /// The run ended: `Ok` finished, or the error.
    pub fn finished<T>(&self, result: &anyhow::Result<T>) {
        let outcome = match result {
            Ok(_) => "finished".to_string(),
            Err(e) => format!("failed: {e:#}"),
        };
        self.update(|s, m, now| {
            if let Some((kind, secs)) = s.phase_ended(now) {
                m.phase(&kind, secs);
            }
            s.finished(&outcome, now);
        });
    }

    /// An observer that reports to this view and to `inner`.
    pub fn observer<'a>(&self, inner: &'a mut dyn Observer) -> LiveObserver<'a> {
        LiveObserver {
            inner,
            live: self.clone(),
        }
    }

    /// The page's JSON.
    pub fn snapshot(&self) -> serde_json::Value {
        let Some(inner) = &self.0 else {
            return serde_json::Value::Null;
        };
        let version = *inner.version.borrow();
        Self::lock(inner).snapshot(inner.start.elapsed().as_secs_f64(), version)
    }

    /// The metrics' text exposition: OpenMetrics, or with `classic` Prometheus' format 0.0.4.
    pub fn metrics(&self, classic: bool) -> String {
        self.0.as_ref().map_or_else(String::new, |i| {
            if classic {
                i.metrics.render_classic()
            } else {
                i.metrics.render()
            }
        })
    }

    /// The dendrogram with its cut (SVG), once round 0 is done.
    pub fn dendrogram(&self) -> Option<String> {
        self.0
            .as_ref()
            .and_then(|i| Self::lock(i).dendrogram.clone())
    }

    /// A receiver that wakes on every change.
    fn subscribe(&self) -> Option<watch::Receiver<u64>> {
        self.0.as_ref().map(|i| i.version.subscribe())
    }
}

/// In-process runs (`simulate`) have no phases of their own: each round is one, every client
/// in it. Ends the current one and begins round `round` (0: `clustering`), unless the run has
/// fewer rounds.
fn next_round(s: &mut State, m: &Metrics, round: usize, now: f64) {
    if let Some((kind, secs)) = s.phase_ended(now) {
        m.phase(&kind, secs);
    }
    if round > s.rounds_planned {
        return;
    }
    let ids = s.order.clone();
    let kind = if round == 0 { "clustering" } else { "round" };
    s.phase_started(kind, round, &ids, now);
}

/// The run's [`Observer`] with the live view beside it ([`Live::observer`]).
pub struct LiveObserver<'a> {
    inner: &'a mut dyn Observer,
    live: Live,
}

impl Observer for LiveObserver<'_> {
    fn clustered(&mut self, c: &Clustering, ari: Option<f64>) {
        self.inner.clustered(c, ari);
        if !self.live.is_on() {
            return;
        }
        let svg = crate::plots::dendrogram_svg(c)
            .map_err(|e| tracing::warn!("live view: cannot draw the dendrogram: {e:#}"))
            .ok();
        self.live.update(|s, m, now| {
            s.clustered(
                &c.assignment,
                c.n_clusters,
                Some((c.threshold, c.linkage.to_string())),
                svg,
            );
            if s.runtime == "simulate" {
                next_round(s, m, 1, now);
            }
        });
    }

    fn round(&mut self, r: &RoundRecord, of: usize) {
        self.inner.round(r, of);
        self.live.update(|s, m, now| {
            let per: Vec<f64> = r.cluster_accuracy.clone().unwrap_or_default();
            s.round_done(
                r.round,
                of,
                r.accuracy.map(|a| (a, per.as_slice())),
                r.clusters,
            );
            if let Some(p) = s.accuracy.last().filter(|p| p.round == r.round) {
                m.accuracy(p.mean, &p.clusters);
            }
            if s.runtime == "simulate" {
                next_round(s, m, r.round + 1, now);
            }
        });
    }

    fn newcomer(&mut self, n: &Newcomer) {
        self.inner.newcomer(n);
        self.live.update(|s, m, _| {
            m.joined(true);
            s.newcomer(&n.client.id, n.round, n.cluster);
        });
    }

    fn newcomer_dropped(&mut self, d: &DroppedNewcomer) {
        self.inner.newcomer_dropped(d);
        let reason = variant_name(&d.reason);
        self.live.update(|s, m, now| {
            m.rejected("newcomer", &reason);
            s.newcomer_dropped(&d.client.id, d.round, &reason, now);
            if let Some(e) = s.log.back_mut() {
                e.detail = d.reason.to_string();
            }
        });
    }

    fn left_out(&mut self, c: &ClientInfo) {
        self.inner.left_out(c);
        self.live.update(|s, m, _| {
            m.dropped("left_out");
            s.left_out(&c.id);
        });
    }

    fn update_dropped(&mut self, d: &DroppedUpdate) {
        self.inner.update_dropped(d);
        let reason = d.reason.name();
        self.live.update(|s, m, now| {
            m.rejected("update", reason);
            s.rejected("update", &d.client, reason, &d.reason.to_string(), now);
        });
    }
}

/// [`start`] for a run over MQTT (`serve`, `demo`): behind the same credentials as its broker
/// ([`Access::of_broker`]).
pub fn start_served(
    args: &HttpArgs,
    net: &crate::cmd::serve::NetFlags,
    cfg: &crate::config::RunConfig,
    runtime: &str,
) -> anyhow::Result<(Live, Option<Server>)> {
    if args.http.is_none() {
        return Ok((Live::default(), None));
    }
    // The coordinator's own login at an external broker (an embedded broker's password file
    // comes first).
    let login = match &net.broker {
        Some(_) if !net.embedded.is_on() => net.login.resolve("coordinator")?.login,
        _ => None,
    };
    let access = Access::of_broker(&net.embedded, login.as_ref(), &args.http_user)?;
    start(
        args,
        access,
        runtime,
        &cfg.method.algorithm.to_string(),
        cfg.method.federation.rounds,
    )
}

/// Starts the live view's server when `--http` is given: the handle to feed and the server
/// (stopped when dropped). `access` says who may look. Off (`Live::default()`, no server)
/// without `--http`.
pub fn start(
    args: &HttpArgs,
    access: Access,
    runtime: &str,
    algorithm: &str,
    rounds: usize,
) -> anyhow::Result<(Live, Option<Server>)> {
    let Some(addr) = args.http else {
        return Ok((Live::default(), None));
    };
    let live = Live::new(runtime, algorithm, rounds);
    let server = Server::start(addr, live.clone(), access)?;
    Ok((live, Some(server)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_addresses_default_to_loopback() {
        assert_eq!(
            parse_http_addr("8080").unwrap(),
            "127.0.0.1:8080".parse().unwrap()
        );
        assert_eq!(
            parse_http_addr("localhost:9").unwrap(),
            "127.0.0.1:9".parse().unwrap()
        );
        assert_eq!(
            parse_http_addr("0.0.0.0:80").unwrap(),
            "0.0.0.0:80".parse().unwrap()
        );
        assert_eq!(
            parse_http_addr("[::1]:80").unwrap(),
            "[::1]:80".parse().unwrap()
        );
        assert!(parse_http_addr("example.org:80").is_err());
        assert!(parse_http_addr("70000").is_err());
    }

    #[test]
    fn an_off_handle_does_nothing() {
        let live = Live::default();
        live.joined("c0");
        live.phase_started(Phase::Training(1), ["c0".to_string()]);
        live.bytes(1, 2);
        assert!(live.snapshot().is_null());
        assert!(live.metrics(false).is_empty());
    }

    #[test]
    fn the_observer_reports_rounds_to_the_view_and_the_inner_observer() {
        struct Count(usize);
        impl Observer for Count {
            fn round(&mut self, _: &RoundRecord, _: usize) {
                self.0 += 1;
            }
        }
        let live = Live::new("simulate", "fedclust", 2);
        live.fleet(&[
            ClientInfo {
                index: 0,
                id: "a".into(),
                samples: 1,
            },
            ClientInfo {
                index: 1,
                id: "b".into(),
                samples: 1,
            },
        ]);
        let mut count = Count(0);
        let mut obs = live.observer(&mut count);
        let rec = RoundRecord {
            round: 1,
            sampled: 2,
            received: 2,
            train_loss: 0.1,
            accuracy: Some(0.8),
            accuracy_labels: None,
            accuracy_proportional: None,
            cluster_accuracy: Some(vec![0.7, 0.9]),
            task_accuracy: None,
            gps: false,
            clusters: 2,
            ari: None,
            seconds: 1.5,
        };
        obs.round(&rec, 2);
        assert_eq!(count.0, 1);
        let snap = live.snapshot();
        assert_eq!(snap["rounds_done"], 1);
        assert_eq!(snap["accuracy"][0]["clusters"][1], 0.9);
        assert_eq!(snap["phase"]["kind"], "round");
        assert_eq!(snap["phase"]["round"], 2);
        assert_eq!(snap["counts"]["working"], 2);
        assert!(snap["version"].as_u64().unwrap() >= 2);
        let text = live.metrics(false);
        assert!(
            text.contains("edgecfl_cluster_accuracy{cluster=\"1\"} 0.9"),
            "{text}"
        );
        assert!(
            text.contains("edgecfl_clients_joined_total{when=\"start\"} 2"),
            "{text}"
        );
        live.finished(&Ok(()));
        assert_eq!(live.snapshot()["outcome"], "finished");
    }

    #[test]
    fn reasons_are_their_serde_names() {
        use crate::rounds::Rejection;
        use edgecfl_shared::federation::UpdateRejection;
        assert_eq!(variant_name(&Rejection::WrongRound), "wrong_round");
        assert_eq!(
            variant_name(&UpdateRejection::NormAbove {
                norm: 1.0,
                bound: 0.5
            }),
            "norm_above"
        );
    }
}
