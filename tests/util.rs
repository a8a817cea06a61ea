//! Helpers of the system tests: the project's binaries, real brokers (mosquitto, or the
//! coordinator's embedded rumqttd) on free ports, and child processes that die with the test.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use edgecfl_shared::mqtt::{Inbound, Link, LinkOptions, MAX_PACKET};
use edgecfl_shared::protocol::{BrokerAddr, Envelope, Id, ToClient, TopicKind, Topics};
use serde_json::Value;

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the repository")
        .to_path_buf()
}

/// The bundled Fashion-MNIST subset (fast, and the same on every machine).
pub fn bundled_data() -> PathBuf {
    root().join("shared/data/fmnist-subset")
}

/// Path of one of the workspace's binaries, built once per test process with the test's
/// profile (`cargo test` of one package does not build the other packages' binaries). The
/// build is `cargo test --workspace --no-run`, the feature set of `scripts/test.sh`, so under
/// the test suite it is a no-op and never rebuilds burn with other features. It runs without
/// the variables cargo set for this test process ([`cargo_test_env`]).
///
/// `EDGECFL_BIN_DIR` names a directory of ready binaries instead (no build).
pub fn bin(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        if let Some(dir) = std::env::var_os("EDGECFL_BIN_DIR") {
            return PathBuf::from(dir);
        }
        // target/<profile>/deps/system-… → target/<profile>
        let exe = std::env::current_exe().expect("test executable path");
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>/deps")
            .to_path_buf();
        let release = dir.file_name().is_some_and(|n| n == "release");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(root())
            .args(["test", "--workspace", "--no-run", "-q"]);
        for (name, _) in std::env::vars_os().filter(|(n, _)| cargo_test_env(n)) {
            cmd.env_remove(name);
        }
        if release {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("cannot run cargo build");
        assert!(status.success(), "building the binaries failed");
        dir
    });
    dir.join(name)
}

/// Whether `name` is one of the variables cargo sets for the test process it runs
/// (`CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME`, ...), not one a user set for cargo itself (`CARGO`,
/// `CARGO_HOME`, `CARGO_TARGET_DIR`, `CARGO_INCREMENTAL`, ...). A nested cargo must not see them:
/// `ring`'s build script declares `rerun-if-env-changed` for `CARGO_MANIFEST_DIR`, `CARGO_PKG_*`
/// and others, and cargo compares those with its own environment, so a nested cargo that
/// inherited the test's values rebuilt ring and everything above it (rustls, the coordinator,
/// the edge client: five minutes on a 2-core CI machine), and the next top-level cargo rebuilt
/// them back.
fn cargo_test_env(name: &std::ffi::OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_BIN_EXE_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
                | "OUT_DIR"
        )
}

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("no free port")
        .port()
}

/// Waits until something listens on `port`.
pub fn wait_listening(port: u16, timeout: Duration) {
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(start.elapsed() < timeout, "nothing listens on port {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A child process killed when dropped.
pub struct Proc {
    /// The child.
    pub child: Child,
    /// What it is, for messages.
    pub name: String,
}

impl Proc {
    /// Starts `cmd`, its output going to `log`.
    pub fn spawn(mut cmd: Command, name: &str, log: &Path) -> Proc {
        let f = std::fs::File::create(log).expect("log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("log file"))
            .stderr(f)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc {
            child,
            name: name.into(),
        }
    }

    /// Whether it has not exited yet.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("wait").is_none()
    }

    /// Waits for the exit, up to `timeout`; panics on timeout or failure.
    pub fn wait_ok(&mut self, timeout: Duration, log: &Path) {
        let status = self.wait_exit(timeout, log);
        assert!(
            status.success(),
            "{} failed ({status}); its log:\n{}",
            self.name,
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }

    /// Waits for the exit, up to `timeout` (panics after it, with `log`); returns its status.
    pub fn wait_exit(&mut self, timeout: Duration, log: &Path) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                start.elapsed() < timeout,
                "{} still running after {timeout:?}; its log:\n{}",
                self.name,
                std::fs::read_to_string(log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// mosquitto from Debian on a free loopback port, with the packet limit edgecfl needs.
pub fn mosquitto(dir: &Path) -> (Proc, u16) {
    let port = free_port();
    let conf = format!(
        "listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n\
         max_packet_size {MAX_PACKET}\nmax_inflight_messages 100\nmax_queued_messages 10000\n"
    );
    (mosquitto_with(dir, "mosquitto", &conf, port), port)
}

/// mosquitto from Debian with the configuration `conf` (written to `dir/<name>.conf`, its log to
/// `dir/<name>.log`), once it listens on `port` (which `conf` must name).
pub fn mosquitto_with(dir: &Path, name: &str, conf: &str, port: u16) -> Proc {
    let path = dir.join(format!("{name}.conf"));
    std::fs::write(&path, conf).expect("mosquitto configuration");
    let exe = ["/usr/sbin/mosquitto", "/usr/bin/mosquitto"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("mosquitto is not installed (apt-get install mosquitto); .ci/run installs it");
    let mut cmd = Command::new(exe);
    cmd.arg("-c").arg(&path);
    let p = Proc::spawn(cmd, name, &dir.join(format!("{name}.log")));
    wait_listening(port, Duration::from_secs(10));
    p
}

/// A fresh scratch directory under target/.
pub fn scratch(name: &str) -> PathBuf {
    let d = root().join("target/system-tests").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// The settings shared by a served run and its in-process twin.
pub fn run_flags(
    partition: &str,
    clients: usize,
    rounds: usize,
    frac: f64,
    seed: u64,
) -> Vec<String> {
    [
        "--partition",
        partition,
        "--clients",
        &clients.to_string(),
        "--rounds",
        &rounds.to_string(),
        "--frac",
        &frac.to_string(),
        "--epochs",
        "2",
        "--lr",
        "0.05",
        "--warmup-epochs",
        "1",
        "--seed",
        &seed.to_string(),
        "--data",
        bundled_data().to_str().expect("utf-8 path"),
    ]
    .map(String::from)
    .to_vec()
}

/// Starts `n` edge clients holding shards `0..n` of `partition`.
pub fn fleet(
    dir: &Path,
    broker_port: u16,
    prefix: &str,
    partition: &str,
    n: usize,
    seed: u64,
) -> Vec<(Proc, PathBuf)> {
    fleet_of(dir, broker_port, prefix, partition, 0..n, n, seed)
}

/// Starts edge clients `c{i}` holding shards `i ∈ shards` of `partition` into `of` clients.
/// Odd-numbered clients keep their training images in a scratch file in `dir`
/// (`--spill-above 0`), so every run that must equal `simulate` also checks that training from
/// the file gives the same models as from memory.
pub fn fleet_of(
    dir: &Path,
    broker_port: u16,
    prefix: &str,
    partition: &str,
    shards: std::ops::Range<usize>,
    of: usize,
    seed: u64,
) -> Vec<(Proc, PathBuf)> {
    let data = ["--data".to_string(), bundled_data().display().to_string()];
    fleet_on(dir, broker_port, prefix, partition, shards, of, seed, &data)
}

/// [`fleet_of`] on the data set `data` names (`--dataset NAME --data DIR`, or `--data DIR`).
#[allow(clippy::too_many_arguments)]
pub fn fleet_on(
    dir: &Path,
    broker_port: u16,
    prefix: &str,
    partition: &str,
    shards: std::ops::Range<usize>,
    of: usize,
    seed: u64,
    data: &[String],
) -> Vec<(Proc, PathBuf)> {
    shards
        .map(|i| {
            let id = format!("c{i}");
            let log = dir.join(format!("{id}.log"));
            let mut cmd = Command::new(bin("edge-client"));
            cmd.args([
                "run",
                "--broker",
                &format!("mqtt://127.0.0.1:{broker_port}"),
            ])
            .args(["--id", &id, "--prefix", prefix, "--partition", partition])
            .args(["--seed", &seed.to_string(), "--index", &i.to_string()])
            .args(["--of", &of.to_string()])
            .args(data)
            .arg("--model-out")
            .arg(kept_model(dir, &id));
            if i % 2 == 1 {
                cmd.args(["--spill-above", "0", "--spill-dir"]).arg(dir);
            }
            (Proc::spawn(cmd, &id, &log), log)
        })
        .collect()
}

/// `edge-client predict --json` of the model client `id` kept in `dir` on its local test set
/// (`shard`: `--partition`, `--index`, `--of`, `--seed`, the data flags) scores what the client
/// reported in `summary` at the run's last evaluation, up to one image whose two top logits swap
/// with the summation order; returns predict's report.
pub fn assert_kept_model_scores_its_report(
    dir: &Path,
    summary: &serde_json::Value,
    id: &str,
    shard: &[String],
) -> serde_json::Value {
    let o = Command::new(bin("edge-client"))
        .args(["predict", "--json", "--model"])
        .arg(kept_model(dir, id))
        .args(shard)
        .output()
        .expect("edge-client predict");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("predict --json");
    let p = summary["client_ids"]
        .as_array()
        .and_then(|ids| ids.iter().position(|x| x.as_str() == Some(id)))
        .unwrap_or_else(|| panic!("{id} in the summary's client_ids"));
    let (got, n) = (
        v["accuracy"].as_f64().unwrap(),
        v["images"].as_f64().unwrap(),
    );
    let reported = summary["client_accuracy"][p].as_f64().unwrap();
    assert!(
        (got - reported).abs() <= 1.0 / n + 1e-12,
        "{id}: predict {got}, run {reported}"
    );
    v
}

/// Where a client `id` of [`fleet_of`] keeps its final model (`--model-out`).
pub fn kept_model(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.safetensors"))
}

/// Every client of the served run in `summary` (results in `dir/out`) kept the model of its
/// cluster, bit for bit the coordinator's `cluster-<k>.safetensors`, headed with the run and the
/// cluster, at `path(id)`.
pub fn assert_clients_kept_their_models(
    dir: &Path,
    summary: &Value,
    path: &dyn Fn(&str) -> PathBuf,
) {
    use edgecfl_shared::model_file;
    let ids = summary["client_ids"].as_array().expect("client_ids");
    let assignment = summary["assignment"].as_array().expect("assignment");
    assert_eq!(ids.len(), assignment.len());
    for (id, k) in ids.iter().zip(assignment) {
        let (id, k) = (id.as_str().unwrap(), k.as_u64().unwrap() as usize);
        let kept = model_file::read(&path(id)).unwrap_or_else(|e| panic!("{id}: {e}"));
        let cluster = dir.join("out").join(format!("cluster-{k}.safetensors"));
        let theirs = model_file::read(&cluster).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            kept.params.values.iter().map(|v| v.to_bits()).eq(theirs
                .params
                .values
                .iter()
                .map(|v| v.to_bits())),
            "{id} kept another model than {}",
            cluster.display()
        );
        assert_eq!(kept.meta.cluster, Some(k), "{id}");
        assert_eq!(
            kept.meta.run_id.as_deref(),
            summary["run_id"].as_str(),
            "{id}"
        );
        assert_eq!(kept.meta.round, theirs.meta.round, "{id}");
    }
}

/// Starts `coordinator serve` with `flags` and `net` (broker, prefix, run id), waiting for
/// `clients` clients (join timeout 120 s), results into `dir/out`, its log `dir/coordinator.log`.
pub fn serve(dir: &Path, clients: usize, net: &[String], flags: &[String]) -> Proc {
    let mut cmd = Command::new(bin("coordinator"));
    cmd.arg("serve")
        .args(flags)
        .args(net)
        .args([
            "--min-clients",
            &clients.to_string(),
            "--join-timeout",
            "120",
        ])
        .arg("--out")
        .arg(dir.join("out"));
    Proc::spawn(cmd, "coordinator serve", &dir.join("coordinator.log"))
}

/// Runs `coordinator simulate` with `flags` into `out` and returns its summary.
pub fn simulate(flags: &[String], out: &Path) -> Value {
    let o: Output = Command::new(bin("coordinator"))
        .arg("simulate")
        .args(flags)
        // Each client trained alone, as the edge clients of the served runs it is compared with.
        .args(["--cohort", "1"])
        .arg("--out")
        .arg(out)
        .output()
        .expect("coordinator simulate");
    assert!(
        o.status.success(),
        "simulate failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    summary(out)
}

/// Reads `summary.json` of a run.
pub fn summary(out: &Path) -> Value {
    let text = std::fs::read_to_string(out.join("summary.json")).expect("summary.json");
    serde_json::from_str(&text).expect("summary.json is JSON")
}

/// `summary.json`'s accuracy per round.
pub fn accuracies(s: &Value) -> Vec<f64> {
    per_round(s, "accuracy_per_round")
}

/// A per-round series of `summary.json` (`accuracy_per_round`, `accuracy_proportional_per_round`,
/// ...), every round evaluated.
pub fn per_round(s: &Value, key: &str) -> Vec<f64> {
    s[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key}"))
        .iter()
        .map(|v| v.as_f64().unwrap_or_else(|| panic!("{key}: {v}")))
        .collect()
}

/// A connection of the test's own to the broker.
pub fn spy(port: u16, name: &str, subscribe: Vec<String>) -> Link {
    let broker = BrokerAddr {
        host: "127.0.0.1".into(),
        port,
        tls: false,
    };
    let link = Link::start(LinkOptions {
        subscribe,
        ..LinkOptions::new(broker.clone(), name)
    })
    .expect("spy link");
    link.wait_connected(&broker, Duration::from_secs(10))
        .expect("spy connects");
    link
}

/// Waits for the first training command of round 1 seen on the clients' `down` topics; returns
/// the run id and the client it went to.
pub fn first_training_command(link: &Link, topics: &Topics) -> (Id, String) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while let Some(ev) = link.recv_until(deadline) {
        if let Inbound::Message { topic, payload, .. } = ev
            && let Some((client, TopicKind::Down)) = topics.parse(&topic)
            && let Ok(env) = Envelope::<ToClient>::from_bytes(&payload)
            && matches!(env.body, ToClient::Train(_))
        {
            return (env.run, client.to_string());
        }
    }
    panic!("no training command within 300 s");
}

/// Peak resident memory (`VmHWM`, kB) of a running process, `None` once it is gone.
pub fn peak_rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Two consecutive free ports (mosquitto's from `coordinator credentials --port P`: P for the
/// edge clients, P + 1 for the coordinator and LPSs).
pub fn free_port_pair() -> u16 {
    for _ in 0..100 {
        let p = free_port();
        if p < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            return p;
        }
    }
    panic!("no two consecutive free ports");
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// mosquitto started from `edit` of the `mosquitto.conf` that `coordinator credentials --port
/// PORT --bind 127.0.0.1` wrote into `creds`, logging to `dir/mosquitto.log`; returns once both
/// its listeners (`port`, `port + 1`) are up.
pub fn mosquitto_from(creds: &Path, dir: &Path, port: u16, edit: &dyn Fn(&str) -> String) -> Proc {
    let conf = creds.join("mosquitto.conf");
    let mut text = edit(&std::fs::read_to_string(&conf).unwrap());
    if running_as_root() {
        // mosquitto started as root switches to the user `mosquitto`, which cannot read the
        // 0600 key and password files written by root.
        text.push_str("user root\n");
    }
    std::fs::write(&conf, text).unwrap();
    let exe = ["/usr/sbin/mosquitto", "/usr/bin/mosquitto"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("mosquitto is not installed (apt-get install mosquitto)");
    let mut cmd = Command::new(exe);
    cmd.arg("-c").arg(&conf).arg("-v");
    let proc = Proc::spawn(cmd, "mosquitto", &dir.join("mosquitto.log"));
    wait_listening(port, Duration::from_secs(10));
    wait_listening(port + 1, Duration::from_secs(10));
    proc
}

/// Which broker a secured fleet uses: the embedded one behind its gate, or mosquitto configured
/// from the files `coordinator credentials` writes ([`mosquitto_from`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Broker {
    /// `serve`'s embedded broker (rumqttd behind the gate).
    Embedded,
    /// Debian's mosquitto.
    Mosquitto,
}

/// `serve`'s broker flags on a secured fleet: the embedded broker behind its gate on `port`
/// (`creds/broker.toml`), or mosquitto's coordinator listener `infra` with the coordinator's
/// login from `creds`.
pub fn coordinator_broker(
    cmd: &mut Command,
    kind: &Broker,
    port: u16,
    infra: &BrokerAddr,
    creds: &Path,
) {
    match kind {
        Broker::Embedded => {
            cmd.args(["--port", &port.to_string(), "--listen", "127.0.0.1"])
                .arg("--broker-config")
                .arg(creds.join("broker.toml"));
        }
        Broker::Mosquitto => {
            cmd.args(["--broker", &infra.to_string()])
                .arg("--ca")
                .arg(creds.join("ca.pem"))
                .args(["--username", "coordinator", "--password-file"])
                .arg(creds.join("users").join("coordinator.password"));
        }
    }
}
