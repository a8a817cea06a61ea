//! The live view's HTTP server: axum on a tokio runtime of its own thread, so the round loop
//! (blocking) never waits for it and it never waits for the round loop.
//!
//! | route | what |
//! | --- | --- |
//! | `GET /` | the page (`page.html`), which loads `page.js` and follows `/events` |
//! | `GET /events` | server-sent events: `state` (the JSON of `/state`) on every change, at most 10 a second |
//! | `GET /state` | the run now, as JSON |
//! | `GET /metrics` | OpenMetrics text, or Prometheus' classic format 0.0.4 for `Accept: text/plain` ([`super::Metrics`]) |
//! | `GET /dendrogram.svg` | the dendrogram with its cut, once round 0 is done (404 before) |
//!
//! Every route answers 401 without the login when [`Access`] asks for one. Unknown paths get
//! 404, other methods 405; nothing a request carries reaches the run.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::WatchStream;
use tracing::{info, warn};

use super::Live;
use crate::broker::BrokerSecurity;
use crate::broker::passwd::PasswordDb;

const PAGE: &str = include_str!("page.html");
const SCRIPT: &str = include_str!("page.js");

/// Who may look at the live view.
#[derive(Debug, Clone, Default)]
pub enum Access {
    /// Anyone who reaches the address (an unsecured run).
    #[default]
    Open,
    /// HTTP Basic: `user` with their password in the broker's password file.
    PasswordFile {
        /// The password file (mosquitto format), as the embedded broker checks it.
        db: PasswordDb,
        /// The user allowed.
        user: String,
    },
    /// HTTP Basic: exactly this username and password (the coordinator's login at an external
    /// broker).
    Login {
        /// Username.
        username: String,
        /// Password.
        password: String,
    },
}

impl Access {
    /// The same credentials as the run's broker: its password file (embedded broker, `user`
    /// must be in it), else the coordinator's login at an external broker, else open.
    pub fn of_broker(
        embedded: &BrokerSecurity,
        login: Option<&edgecfl_shared::mqtt::Login>,
        user: &str,
    ) -> anyhow::Result<Access> {
        let resolved = embedded.resolved()?;
        if let Some(file) = &resolved.broker_passwd {
            return Self::password_file(file, user);
        }
        Ok(match login {
            Some(l) => Access::Login {
                username: l.username.clone(),
                password: l.password.clone(),
            },
            None => Access::Open,
        })
    }

    /// HTTP Basic with `user`'s password in `file`.
    pub fn password_file(file: &Path, user: &str) -> anyhow::Result<Access> {
        let db = PasswordDb::load(file)?;
        anyhow::ensure!(
            db.users().any(|u| u == user),
            "--http-user {user} is not in the password file {} (its users: {})",
            file.display(),
            db.users().collect::<Vec<_>>().join(", ")
        );
        Ok(Access::PasswordFile {
            db,
            user: user.to_string(),
        })
    }

    /// Whether it asks for a login.
    pub fn is_open(&self) -> bool {
        matches!(self, Access::Open)
    }

    /// Whether a request with this `Authorization` header may look.
    pub fn allows(&self, authorization: Option<&HeaderValue>) -> bool {
        if self.is_open() {
            return true;
        }
        let Some((user, password)) = authorization.and_then(basic_credentials) else {
            return false;
        };
        match self {
            Access::Open => true,
            Access::PasswordFile { db, user: allowed } => {
                user == *allowed && db.verify(&user, &password)
            }
            Access::Login {
                username,
                password: p,
            } => {
                // Both compared in full, whatever the first says.
                let u = ct_eq(user.as_bytes(), username.as_bytes());
                let w = ct_eq(password.as_bytes(), p.as_bytes());
                u & w
            }
        }
    }
}

/// Constant-time equality (lengths are not secret).
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `Basic base64(user:password)` → (user, password).
fn basic_credentials(v: &HeaderValue) -> Option<(String, String)> {
    let v = v.to_str().ok()?;
    let (scheme, rest) = v.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let bytes = B64.decode(rest.trim()).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

#[derive(Clone)]
struct App {
    live: Live,
    access: std::sync::Arc<Access>,
}

async fn login(State(app): State<App>, req: Request, next: Next) -> Response {
    if app.access.allows(req.headers().get(header::AUTHORIZATION)) {
        return next.run(req).await;
    }
    let mut r = (
        StatusCode::UNAUTHORIZED,
        "401 Unauthorized: this run's live view needs the broker login (HTTP Basic)\n",
    )
        .into_response();
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"edgecfl live view\", charset=\"UTF-8\""),
    );
    r
}

async fn page() -> Html<&'static str> {
    Html(PAGE)
}

async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        SCRIPT,
    )
}

async fn state(State(app): State<App>) -> impl IntoResponse {
    axum::Json(app.live.snapshot())
}

/// `/metrics`: OpenMetrics, unless the request accepts the classic text format
/// (`text/plain`) and not OpenMetrics (`application/openmetrics-text`), as `promtool` and older
/// scrapers ask.
async fn metrics(State(app): State<App>, headers: axum::http::HeaderMap) -> impl IntoResponse {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let classic = accept.contains("text/plain") && !accept.contains("application/openmetrics-text");
    let kind = if classic {
        "text/plain; version=0.0.4; charset=utf-8"
    } else {
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    };
    ([(header::CONTENT_TYPE, kind)], app.live.metrics(classic))
}

async fn dendrogram(State(app): State<App>) -> Response {
    match app.live.dendrogram() {
        Some(svg) => ([(header::CONTENT_TYPE, "image/svg+xml")], svg).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            "404 Not Found: no dendrogram yet (round 0 is not done, or the method draws none)\n",
        )
            .into_response(),
    }
}

async fn events(State(app): State<App>) -> Response {
    let Some(rx) = app.live.subscribe() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "the live view is off\n").into_response();
    };
    let live = app.live.clone();
    let stream = WatchStream::new(rx)
        .throttle(Duration::from_millis(100))
        .map(move |_| Event::default().event("state").json_data(live.snapshot()));
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        "404 Not Found: the live view serves /, /events, /state, /metrics and /dendrogram.svg\n",
    )
        .into_response()
}

fn router(live: Live, access: Access) -> Router {
    let app = App {
        live,
        access: std::sync::Arc::new(access),
    };
    Router::new()
        .route("/", get(page))
        .route("/page.js", get(script))
        .route("/state", get(state))
        .route("/events", get(events))
        .route("/metrics", get(metrics))
        .route("/dendrogram.svg", get(dendrogram))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(app.clone(), login))
        .with_state(app)
}

/// The running server; stops when dropped (open event streams end with it).
pub struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Binds `addr` now (an error names it), then serves on a thread of its own.
    pub fn start(addr: SocketAddr, live: Live, access: Access) -> anyhow::Result<Server> {
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("--http: cannot listen on {addr}"))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        if !addr.ip().is_loopback() && access.is_open() {
            warn!(
                "the live view on {addr} is reachable from other machines without a login (the run is not secured)"
            );
        }
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("live view: cannot start its runtime")?;
        let app = router(live, access);
        let thread = std::thread::Builder::new()
            .name("live-view".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            warn!("live view: {e}");
                            return;
                        }
                    };
                    tokio::select! {
                        r = axum::serve(listener, app) => {
                            if let Err(e) = r {
                                warn!("live view stopped: {e}");
                            }
                        }
                        _ = stopped => {}
                    }
                });
            })
            .context("live view: cannot start its thread")?;
        info!("live view: {}", Self::url_of(addr));
        Ok(Server {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn url_of(addr: SocketAddr) -> String {
        let host = if addr.ip().is_unspecified() {
            "127.0.0.1".to_string()
        } else if addr.is_ipv6() {
            format!("[{}]", addr.ip())
        } else {
            addr.ip().to_string()
        };
        format!("http://{host}:{}/", addr.port())
    }

    /// The page's URL (loopback when it listens on every address).
    pub fn url(&self) -> String {
        Self::url_of(self.addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(user: &str, pw: &str) -> HeaderValue {
        HeaderValue::from_str(&format!("Basic {}", B64.encode(format!("{user}:{pw}")))).unwrap()
    }

    #[test]
    fn basic_login_is_checked_against_the_password_file() {
        let rng = ring::rand::SystemRandom::new();
        let text = format!(
            "{}\n{}\n",
            crate::broker::passwd::hash_line("coordinator", "op-pass", &rng).unwrap(),
            crate::broker::passwd::hash_line("client-000", "c-pass", &rng).unwrap()
        );
        let access = Access::PasswordFile {
            db: PasswordDb::parse(&text).unwrap(),
            user: "coordinator".into(),
        };
        assert!(access.allows(Some(&basic("coordinator", "op-pass"))));
        assert!(!access.allows(Some(&basic("coordinator", "c-pass"))));
        // A fleet client's own login does not open the operator's view.
        assert!(!access.allows(Some(&basic("client-000", "c-pass"))));
        assert!(!access.allows(None));
        for bad in ["Bearer x", "Basic !!!", "Basic", "Basic Y29vcmRpbmF0b3I="] {
            assert!(
                !access.allows(Some(&HeaderValue::from_static(bad))),
                "{bad}"
            );
        }
        assert!(Access::Open.allows(None));
        let login = Access::Login {
            username: "coordinator".into(),
            password: "p:w".into(),
        };
        assert!(login.allows(Some(&basic("coordinator", "p:w"))));
        assert!(!login.allows(Some(&basic("coordinator", "p"))));
    }

    #[test]
    fn urls_name_a_reachable_host() {
        assert_eq!(
            Server::url_of("0.0.0.0:80".parse().unwrap()),
            "http://127.0.0.1:80/"
        );
        assert_eq!(
            Server::url_of("[::1]:8".parse().unwrap()),
            "http://[::1]:8/"
        );
    }
}
