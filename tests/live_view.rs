//! The live view (`--http`, issue 29 §2) in a real browser: `coordinator demo --http` with its
//! edge-client processes over MQTT, the page driven in headless Chromium (Debian's `chromium`
//! and `chromium-driver`, over WebDriver with fantoccini), and `/metrics` read with a Prometheus
//! text parser (prometheus-parse) and, in the classic format, checked by `promtool check metrics`
//! (Debian's `prometheus`). A secured `serve` asks for the broker's login.
//!
//! The page is checked as it changes, without reloading: the fleet's clients appear, the round
//! moves on, the accuracy curve gains points, the dendrogram appears after round 0. Screenshots
//! go to `target/system-tests/live-view/` (`scripts/live-view-screenshots.sh` copies them to
//! `docs/live-view/`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use edgecfl_tests::{Proc, bin, bundled_data, free_port, scratch, wait_listening};
use fantoccini::{Client, ClientBuilder};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use prometheus_parse::{Scrape, Value};
use serde_json::json;

const CLIENTS: usize = 8;
// Rounds of ~2 s each on the bundled data: long enough to watch the curve grow.
const ROUNDS: usize = 10;

fn find_exe(names: &[&str]) -> PathBuf {
    for n in names {
        for dir in ["/usr/bin", "/usr/local/bin", "/usr/lib/chromium"] {
            let p = Path::new(dir).join(n);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "none of {names:?} is installed: apt-get install chromium chromium-driver prometheus (.ci/run installs them)"
    );
}

/// chromedriver on a free port, and a headless Chromium session with a fresh profile.
async fn browser(dir: &Path) -> (Proc, Client) {
    let driver = find_exe(&["chromedriver"]);
    let chromium = find_exe(&["chromium", "chromium-browser"]);
    let port = free_port();
    let mut cmd = Command::new(driver);
    cmd.arg(format!("--port={port}"));
    let proc = Proc::spawn(cmd, "chromedriver", &dir.join("chromedriver.log"));
    wait_listening(port, Duration::from_secs(30));
    let profile = dir.join("chromium-profile");
    let _ = std::fs::remove_dir_all(&profile);
    let caps = json!({
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": chromium,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1400,1200",
                format!("--user-data-dir={}", profile.display()),
            ],
        },
    });
    let serde_json::Value::Object(caps) = caps else {
        unreachable!()
    };
    let client = ClientBuilder::new(HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("a Chromium session over chromedriver");
    (proc, client)
}

/// What the page shows now, read from its DOM.
async fn shown(page: &Client) -> serde_json::Value {
    page.execute(
        r#"
        const q = (s) => document.querySelector(s);
        const mean = q('#accuracy polyline[data-series="mean"]');
        const img = q('#dendrogram img');
        return {
          round: q('#round').textContent,
          planned: q('#rounds-planned').textContent,
          phase: q('#phase').textContent,
          conn: q('#conn').textContent,
          clients: [...document.querySelectorAll('#clients tbody tr')].map((r) => ({
            id: r.dataset.client, state: r.dataset.state,
            cluster: r.cells[2] ? r.cells[2].textContent : null })),
          mean_points: mean ? mean.getAttribute('points').trim().split(/\s+/).length : 0,
          cluster_lines: document.querySelectorAll('#accuracy polyline[data-series^="cluster-"]').length,
          dendrogram: img ? (img.complete && img.naturalWidth > 0) : false,
          received: Number(document.body.dataset.received || 0),
          y_ticks: [...document.querySelectorAll('#accuracy text[data-tick="y"]')].map((t) => t.textContent),
        };
        "#,
        vec![],
    )
    .await
    .expect("the page answers scripts")
}

type Http = HttpClient<HttpConnector, Full<Bytes>>;

fn http() -> Http {
    HttpClient::builder(TokioExecutor::new()).build_http()
}

/// `method path` at `port`, with an optional Basic login: status, headers, body.
async fn request(
    c: &Http,
    method: &str,
    port: u16,
    path: &str,
    login: Option<(&str, &str)>,
) -> (u16, http::HeaderMap, String) {
    let mut req = http::Request::builder()
        .method(method)
        .uri(format!("http://127.0.0.1:{port}{path}"));
    if let Some((u, p)) = login {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
        req = req.header("authorization", format!("Basic {token}"));
    }
    let resp = c
        .request(req.body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

fn parse_metrics(text: &str) -> Scrape {
    Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("Prometheus text format")
}

fn sample(s: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    s.samples
        .iter()
        .find(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .and_then(|x| match x.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => Some(v),
            _ => None,
        })
}

fn screenshot(png: &[u8], dir: &Path, name: &str) {
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    std::fs::write(dir.join(name), png).expect("screenshot");
}

/// `coordinator demo --http`: the page follows the run in Chromium; `/metrics` parses and
/// agrees with it; bad requests get HTTP errors and the run goes on.
#[test]
fn demo_live_view_in_headless_chromium() {
    let dir = scratch("live-view");
    let port = free_port();
    let out = dir.join("out");
    let mut cmd = Command::new(bin("coordinator"));
    cmd.args([
        "demo",
        "--http",
        &format!("127.0.0.1:{port}"),
        "--http-linger",
        "5",
    ])
    .args([
        "--clients",
        &CLIENTS.to_string(),
        "--rounds",
        &ROUNDS.to_string(),
    ])
    .args(["--frac", "1", "--epochs", "1", "--warmup-epochs", "1"])
    .args(["--lr", "0.05", "--seed", "3"])
    .arg("--data")
    .arg(bundled_data())
    .arg("--out")
    .arg(&out);
    let log = dir.join("demo.log");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The browser first: the demo on the bundled data takes seconds.
    let (_driver, page) = rt.block_on(browser(&dir));
    let mut demo = Proc::spawn(cmd, "coordinator demo", &log);
    wait_listening(port, Duration::from_secs(120));
    rt.block_on(async {
        let url = format!("http://127.0.0.1:{port}/");
        page.goto(&url).await.expect("the page loads");
        let c = http();
        let start = Instant::now();
        let mut rounds_seen = std::collections::BTreeSet::new();
        let mut phases_seen = std::collections::BTreeSet::new();
        let mut all_clients = false;
        let mut mean_points = 0;
        let mut grew = false;
        let mut dendrogram = false;
        let mut shot_training = false;
        let mut metrics_checked = false;
        let mut last = json!(null);
        let mut last_png: Option<Vec<u8>> = None;
        while start.elapsed() < Duration::from_secs(900) {
            if demo.child.try_wait().expect("wait").is_some() {
                break;
            }
            let s = shown(&page).await;
            totals_hold(&c, port).await;
            let round: usize = s["round"].as_str().unwrap_or("").parse().unwrap_or(0);
            rounds_seen.insert(round);
            phases_seen.insert(
                s["phase"]
                    .as_str()
                    .unwrap_or("")
                    .split(' ')
                    .next()
                    .unwrap_or("")
                    .to_string(),
            );
            let clients = s["clients"].as_array().map_or(0, Vec::len);
            if s["phase"] != last["phase"] || s["mean_points"] != last["mean_points"] {
                eprintln!(
                    "{:5.1} s: round {round}, {}, {clients} clients, {} points",
                    start.elapsed().as_secs_f64(),
                    s["phase"],
                    s["mean_points"]
                );
            }
            all_clients |= clients == CLIENTS;
            let points = s["mean_points"].as_u64().unwrap_or(0) as usize;
            grew |= mean_points >= 1 && points > mean_points;
            mean_points = mean_points.max(points);
            if s["dendrogram"].as_bool() == Some(true) && !dendrogram {
                dendrogram = true;
                // Round 0 is done: every client has its cluster on the page.
                let clustered = s["clients"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|c| c["cluster"].as_str().is_some_and(|k| k != "–"))
                    .count();
                assert_eq!(clustered, CLIENTS, "{s:#}");
            }
            if points >= ROUNDS / 2 && !shot_training {
                shot_training = true;
                let png = page.screenshot().await.expect("screenshot");
                screenshot(&png, &dir, "live-view-training.png");
            }
            if points >= 1 && !metrics_checked {
                metrics_checked = true;
                check_metrics(&c, port).await;
                check_bad_requests(&c, port).await;
            }
            let finished = s["phase"].as_str().is_some_and(|p| p.starts_with("finished"));
            if finished {
                last_png = page.screenshot().await.ok();
            }
            last = s;
            if finished {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // The run's end as the page shows it (its server goes with the demo).
        if let Some(png) = last_png.as_deref() {
            screenshot(png, &dir, "live-view-finished.png");
        }
        let _ = page.clone().close().await;
        assert!(all_clients, "the page never listed {CLIENTS} clients; last: {last:#}");
        assert!(dendrogram, "no dendrogram on the page; last: {last:#}");
        assert!(metrics_checked, "no evaluated round while the run went on");
        assert!(
            grew,
            "the accuracy curve never grew without a reload (most points {mean_points}); last: {last:#}"
        );
        assert!(
            rounds_seen.len() >= 3,
            "the round shown did not move on: {rounds_seen:?}"
        );
        // Round 0 is over in about a second here: the clustering phase may come and go before
        // the page loads (the dendrogram and the clusters show that it happened).
        for p in ["training", "evaluation", "finished"] {
            assert!(phases_seen.contains(p), "{p} never shown: {phases_seen:?}");
        }
        assert!(last["received"].as_u64().unwrap_or(0) > 10, "{last:#}");
        assert!(last_png.is_some(), "the page never showed the run finished; last: {last:#}");
        // Finished: the header says so and every client is done (issue 53 §5).
        assert_eq!(last["conn"], "finished", "{last:#}");
        let states: Vec<&str> = last["clients"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["state"].as_str())
            .collect();
        assert_eq!(states, vec!["done"; CLIENTS], "{last:#}");
        // The accuracy axis' ticks are whole multiples of 5 %.
        let ticks: Vec<&str> = last["y_ticks"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t.as_str())
            .collect();
        assert!(ticks.len() >= 3, "{ticks:?}");
        assert!(
            ticks.iter().all(|t| t
                .strip_suffix('%')
                .and_then(|v| v.parse::<u32>().ok())
                .is_some_and(|v| v % 5 == 0)),
            "{ticks:?}"
        );
    });
    demo.wait_ok(Duration::from_secs(600), &log);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(&format!("live view: http://127.0.0.1:{port}/")),
        "demo prints the URL:\n{text}"
    );
}

/// The run's byte totals, as `/state` gives them, count every byte its client rows show, in
/// round 0 and in every phase (issue 53 §5: the totals were brought up to date only when a phase
/// ended).
async fn totals_hold(c: &Http, port: u16) {
    let req = http::Request::get(format!("http://127.0.0.1:{port}/state"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    // The run may be ending, its server gone.
    let Ok(resp) = c.request(req).await else {
        return;
    };
    let Ok(body) = resp.into_body().collect().await else {
        return;
    };
    let state: serde_json::Value = serde_json::from_slice(&body.to_bytes()).expect("JSON");
    let rows: u64 = state["clients"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["bytes_up"].as_u64())
        .sum();
    let total = state["bytes_up"].as_u64().unwrap_or(0);
    assert!(
        total >= rows,
        "the header's bytes up ({total}) lag its clients' rows ({rows}): {state:#}"
    );
}

/// `/metrics` during the demo: parsed, and what it says of the fleet holds.
async fn check_metrics(c: &Http, port: u16) {
    let (status, headers, body) = request(c, "GET", port, "/metrics", None).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text"),
        "{headers:?}"
    );
    let s = parse_metrics(&body);
    let v = |n: &str, l: &[(&str, &str)]| sample(&s, n, l);
    assert_eq!(
        v("edgecfl_clients_joined_total", &[("when", "start")]),
        Some(CLIENTS as f64),
        "{body}"
    );
    let in_states: f64 = s
        .samples
        .iter()
        .filter(|x| x.metric == "edgecfl_clients")
        .filter_map(|x| match x.value {
            Value::Gauge(v) => Some(v),
            _ => None,
        })
        .sum();
    assert_eq!(in_states, CLIENTS as f64, "{body}");
    assert_eq!(v("edgecfl_rounds_planned", &[]), Some(ROUNDS as f64));
    assert!(
        v("edgecfl_rounds_done", &[]).is_some_and(|r| r >= 1.0),
        "{body}"
    );
    assert!(
        v("edgecfl_bytes_up_total", &[]).is_some_and(|b| b > 0.0),
        "{body}"
    );
    assert!(
        v("edgecfl_bytes_down_total", &[]).is_some_and(|b| b > 0.0),
        "{body}"
    );
    assert!(
        v("edgecfl_answers_total", &[("phase", "clustering")]) == Some(CLIENTS as f64),
        "{body}"
    );
    let clusters = v("edgecfl_clusters", &[]).expect("clusters") as usize;
    assert!(clusters >= 2, "{body}");
    let per_cluster: Vec<f64> = (0..clusters)
        .filter_map(|k| v("edgecfl_cluster_accuracy", &[("cluster", &k.to_string())]))
        .collect();
    assert_eq!(per_cluster.len(), clusters, "{body}");
    assert!(
        per_cluster.iter().all(|a| (0.0..=1.0).contains(a)),
        "{body}"
    );
    let accuracy = v("edgecfl_accuracy", &[]).expect("accuracy");
    assert!(accuracy > 0.1 && accuracy <= 1.0, "{body}");
    // Every phase so far has its duration in the histogram.
    assert!(
        s.samples.iter().any(|x| x.metric == "edgecfl_phase_duration_seconds"
            && x.labels.get("phase") == Some("training")
            && matches!(&x.value, Value::Histogram(h) if h.last().is_some_and(|b| b.count >= 1.0))),
        "{body}"
    );
    // The classic text format when asked, as `promtool check metrics` (Debian's `prometheus`,
    // which .ci/run installs) reads it: it passes the check, with the same samples.
    let req = http::Request::builder()
        .uri(format!("http://127.0.0.1:{port}/metrics"))
        .header("accept", "text/plain;version=0.0.4")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = c.request(req).await.expect("GET /metrics (classic)");
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let classic = resp.into_body().collect().await.expect("body").to_bytes();
    let classic = String::from_utf8_lossy(&classic).into_owned();
    let promtool = find_exe(&["promtool"]);
    let mut check = std::process::Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool");
    {
        use std::io::Write as _;
        let mut stdin = check.stdin.take().expect("stdin");
        stdin.write_all(classic.as_bytes()).expect("to promtool");
    }
    let out = check.wait_with_output().expect("promtool's answer");
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{classic}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let c_scrape = parse_metrics(&classic);
    assert_eq!(
        sample(
            &c_scrape,
            "edgecfl_clients_joined_total",
            &[("when", "start")]
        ),
        Some(CLIENTS as f64),
        "{classic}"
    );
    // The page's JSON agrees.
    let (status, _, state) = request(c, "GET", port, "/state", None).await;
    assert_eq!(status, 200);
    let state: serde_json::Value = serde_json::from_str(&state).expect("JSON");
    assert_eq!(state["clients"].as_array().map(Vec::len), Some(CLIENTS));
    assert_eq!(state["algorithm"], "fedclust");
}

/// Unknown paths, other methods and junk headers get HTTP errors; the run is not disturbed.
async fn check_bad_requests(c: &Http, port: u16) {
    let (status, _, body) = request(c, "GET", port, "/nope", None).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("/metrics"), "{body}");
    let (status, _, _) = request(c, "POST", port, "/metrics", None).await;
    assert_eq!(status, 405);
    let (status, _, _) = request(c, "DELETE", port, "/", None).await;
    assert_eq!(status, 405);
    // An open view ignores a login it did not ask for.
    let (status, _, _) = request(c, "GET", port, "/metrics", Some(("x", "y"))).await;
    assert_eq!(status, 200);
}

/// `serve --broker-config` (a password file on the embedded broker): the view asks for the
/// coordinator's login, and a fleet client's own login does not open it. While it waits for
/// clients, so no fleet is needed.
#[test]
fn secured_serve_asks_for_the_broker_login() {
    let dir = scratch("live-view-secure");
    let creds = dir.join("creds");
    let o = Command::new(bin("coordinator"))
        .args(["credentials", "--clients", "2", "--force", "--out"])
        .arg(&creds)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let read = |user: &str| {
        std::fs::read_to_string(creds.join("users").join(format!("{user}.password")))
            .unwrap()
            .trim()
            .to_string()
    };
    let coordinator_pw = read("coordinator");
    let client_user = std::fs::read_dir(creds.join("users"))
        .unwrap()
        .filter_map(|e| {
            let n = e.unwrap().file_name().into_string().ok()?;
            let u = n.strip_suffix(".password")?.to_string();
            (u != "coordinator").then_some(u)
        })
        .next()
        .expect("a client's password");
    let client_pw = read(&client_user);

    // A user that is not in the password file is refused at the start.
    let o = Command::new(bin("coordinator"))
        .args(["serve", "--port", &free_port().to_string()])
        .arg("--broker-config")
        .arg(creds.join("broker.toml"))
        .args(["--http", &free_port().to_string(), "--http-user", "nobody"])
        .arg("--out")
        .arg(dir.join("out-nobody"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("--http-user nobody is not in the password file"),
        "{err}"
    );

    let port = free_port();
    let mut cmd = Command::new(bin("coordinator"));
    cmd.args(["serve", "--port", &free_port().to_string()])
        .arg("--broker-config")
        .arg(creds.join("broker.toml"))
        .args(["--http", &port.to_string(), "--join-timeout", "120"])
        .arg("--data")
        .arg(bundled_data())
        .arg("--out")
        .arg(dir.join("out"));
    let log = dir.join("serve.log");
    let _serve = Proc::spawn(cmd, "coordinator serve", &log);
    wait_listening(port, Duration::from_secs(60));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = http();
        for path in ["/", "/metrics", "/events", "/state", "/nope"] {
            let (status, headers, _) = request(&c, "GET", port, path, None).await;
            assert_eq!(status, 401, "{path} without a login");
            assert!(
                headers["www-authenticate"]
                    .to_str()
                    .unwrap()
                    .starts_with("Basic"),
                "{headers:?}"
            );
        }
        for (user, pw) in [
            ("coordinator", "wrong"),
            (client_user.as_str(), client_pw.as_str()),
            ("coordinator", ""),
        ] {
            let (status, _, _) = request(&c, "GET", port, "/metrics", Some((user, pw))).await;
            assert_eq!(status, 401, "{user}");
        }
        let login = Some(("coordinator", coordinator_pw.as_str()));
        let (status, _, body) = request(&c, "GET", port, "/metrics", login).await;
        assert_eq!(status, 200, "{body}");
        let s = parse_metrics(&body);
        assert_eq!(sample(&s, "edgecfl_rounds_done", &[]), Some(0.0), "{body}");
        assert_eq!(
            sample(&s, "edgecfl_clients", &[("state", "waiting")]),
            Some(0.0)
        );
        let (status, _, page) = request(&c, "GET", port, "/", login).await;
        assert_eq!(status, 200);
        assert!(page.contains("edgecfl live view"), "{page}");
        let (status, _, state) = request(&c, "GET", port, "/state", login).await;
        assert_eq!(status, 200);
        let state: serde_json::Value = serde_json::from_str(&state).unwrap();
        assert_eq!(state["runtime"], "serve");
        assert!(
            state["run_id"]
                .as_str()
                .is_some_and(|r| r.starts_with("run-")),
            "{state}"
        );
    });
}
