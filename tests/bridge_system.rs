//! A fleet on two bridged brokers: Debian's mosquitto as broker A, serving the GPS
//! (`coordinator serve --lps remote`), and as broker B, serving two `coordinator lps` processes
//! and their eight edge clients, B bridged to A by the shipped `cross/mosquitto-bridge.conf`.
//! Both brokers run the shipped `cross/mosquitto-edgecfl.conf`; the test only substitutes the
//! listeners, the bridge's address and the run's prefix, so the files users copy are the ones
//! tested.
//!
//! The run is MT-HFL with client-side relevance, so every topic family crosses: the clients'
//! statuses and round-0 uploads and the LPSs' statuses and common layers go B → A, round 0's jobs,
//! the signature relay (`broadcast`), the assignments and the averages go A → B.
//!
//! The independent truth is the same run on one broker (same seed, settings and run id, the same
//! start order): the bridged run must write the same results, bit for bit (summaries less wall
//! times and broker addresses, relevance, clusters, per-round accuracies and losses, each LPS's
//! final model). Spies on both brokers check what crossed: everything the GPS and the LPSs
//! exchange, a 4 MiB payload (the runtimes' limit) both ways, and none of the LPSs' jobs to their
//! members, which stay on B.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use edgecfl_shared::mqtt::{Inbound, Link};
use edgecfl_shared::protocol::{
    Envelope, MAX_PAYLOAD, ToClient, ToCoordinator, ToGps, ToLps, TopicKind, Topics,
};
use edgecfl_tests::*;
use serde_json::Value;

const PARTITION: &str = "groups:01234-56789";
const CLIENTS: usize = 8;
const SEED: u64 = 6;
const ROUNDS: usize = 2;
const RUN_ID: &str = "bridge-run";
const LPS_IDS: [&str; 2] = ["lps-a", "lps-b"];
/// The prefix the shipped bridge configuration is written for (the default `--prefix`).
const SHIPPED_PREFIX: &str = "edgecfl/default/";
/// Messages of the test's own, on topics that cross, under an id no process of the run uses.
const PROBE: &str = "bridge-probe";

/// The run's settings: MT-HFL (hierarchical), client-side relevance, two clusters, one LPS
/// round per GPS round.
fn flags() -> Vec<String> {
    let mut f = run_flags(PARTITION, CLIENTS, ROUNDS, 1.0, SEED);
    let epochs = f.iter().position(|x| x == "--epochs").expect("--epochs") + 1;
    f[epochs] = "1".into();
    f.extend(
        [
            "--algorithm",
            "mthfl",
            "--relevance",
            "client",
            "--eigenvectors",
            "3",
            "--model",
            "mlp",
            "--lambda",
            "k=2",
            "--lps-rounds",
            "1",
        ]
        .map(String::from),
    );
    f
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `text` with `from` replaced by `to`, which must occur exactly once.
fn replace_once(text: &str, from: &str, to: &str, file: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "{file} should hold `{from}` once"
    );
    text.replace(from, to)
}

/// `cross/mosquitto-edgecfl.conf` listening on loopback `port`.
fn edgecfl_conf(port: u16) -> String {
    let file = "cross/mosquitto-edgecfl.conf";
    replace_once(
        &read(&root().join(file)),
        "listener 1883 0.0.0.0",
        &format!("listener {port} 127.0.0.1"),
        file,
    )
}

/// `cross/mosquitto-bridge.conf` bridging to A on loopback `a_port`, for `prefix`.
fn bridge_conf(a_port: u16, prefix: &str) -> String {
    let file = "cross/mosquitto-bridge.conf";
    let text = replace_once(
        &read(&root().join(file)),
        "address broker-a.example:1883",
        &format!("address 127.0.0.1:{a_port}"),
        file,
    );
    let text = text.replace(SHIPPED_PREFIX, &format!("{prefix}/"));
    let topics: Vec<&str> = text.lines().filter(|l| l.starts_with("topic ")).collect();
    assert!(!topics.is_empty(), "{file} bridges no topic");
    for t in &topics {
        assert!(
            t.starts_with(&format!("topic {prefix}/")),
            "{file}: `{t}` is not under the prefix"
        );
    }
    text
}

/// Waits for a message on `topic` with exactly `payload` on `to`, publishing it on `from` every
/// `every` until then (a bridge connects, and a spy subscribes, a moment after it is up).
fn cross(from: &Link, to: &Link, topic: &str, payload: &[u8], every: Duration) -> Duration {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(120);
    let mut next = start;
    loop {
        if Instant::now() >= next {
            from.publish(topic, payload.to_vec(), false).unwrap();
            next = Instant::now() + every;
        }
        let wait = next.min(deadline);
        match to.recv_until(wait) {
            Some(Inbound::Message {
                topic: t,
                payload: p,
                ..
            }) if t == topic && p == payload => return start.elapsed(),
            _ => assert!(
                Instant::now() < deadline,
                "{} bytes on {topic} did not cross the bridge within 120 s",
                payload.len()
            ),
        }
    }
}

/// Starts a run with the GPS on broker `a` and the LPSs and clients on broker `b` (the same port
/// for the single-broker run) into `dir`, and waits for every process to end well. The LPSs and
/// clients start first and the GPS only once all their statuses have reached A, so it joins them
/// by the retained statuses A holds (as when the boards come up before the GPS).
fn run(dir: &Path, a: u16, b: u16, prefix: &str) {
    let topics = Topics::new(prefix).unwrap();
    let watch = spy(
        a,
        "watch",
        vec![topics.all_status(), topics.all_lps_status()],
    );
    let b_url = format!("mqtt://127.0.0.1:{b}");
    let mut lps: Vec<(Proc, PathBuf)> = LPS_IDS
        .iter()
        .map(|id| {
            let log = dir.join(format!("{id}.log"));
            let mut cmd = Command::new(bin("coordinator"));
            cmd.args(["lps", "--broker", &b_url, "--id", id, "--prefix", prefix])
                .args(["--assign-timeout", "600", "--gps-timeout", "600"])
                .args(["--join-timeout", "300", "--phase-timeout", "300"])
                .arg("--out")
                .arg(dir.join(id));
            (Proc::spawn(cmd, id, &log), log)
        })
        .collect();
    let clients = fleet(dir, b, prefix, PARTITION, CLIENTS, SEED);

    let mut waiting: Vec<String> = (0..CLIENTS)
        .map(|i| format!("c{i}"))
        .chain(LPS_IDS.map(String::from))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(300);
    while !waiting.is_empty() {
        let Some(ev) = watch.recv_until(deadline) else {
            panic!("no status from {waiting:?} on broker A within 300 s");
        };
        let Inbound::Message { topic, payload, .. } = ev else {
            continue;
        };
        let hello = match (topics.parse(&topic), topics.parse_lps(&topic)) {
            (Some((id, TopicKind::Status)), _) => Envelope::<ToCoordinator>::from_bytes(&payload)
                .is_ok_and(|e| matches!(e.body, ToCoordinator::Hello(_)))
                .then_some(id),
            (_, Some((id, TopicKind::Status))) => Envelope::<ToGps>::from_bytes(&payload)
                .is_ok_and(|e| matches!(e.body, ToGps::Hello))
                .then_some(id),
            _ => None,
        };
        if let Some(id) = hello {
            waiting.retain(|w| w != id);
        }
    }
    watch.disconnect();

    let gps_log = dir.join("gps.log");
    let mut cmd = Command::new(bin("coordinator"));
    cmd.arg("serve")
        .args(flags())
        .args(["--broker", &format!("mqtt://127.0.0.1:{a}")])
        .args(["--prefix", prefix, "--run-id", RUN_ID, "--lps", "remote"])
        .args(["--min-clients", &CLIENTS.to_string()])
        .args(["--join-timeout", "300", "--phase-timeout", "300"])
        .arg("--out")
        .arg(dir.join("gps"));
    let mut gps = Proc::spawn(cmd, "coordinator serve --lps remote", &gps_log);
    gps.wait_ok(Duration::from_secs(1200), &gps_log);
    for (p, log) in &mut lps {
        p.wait_ok(Duration::from_secs(120), log);
    }
    for (mut p, log) in clients {
        p.wait_ok(Duration::from_secs(120), &log);
    }
}

/// What a spy saw, per topic family: messages, bytes, largest payload.
#[derive(Default, Debug, Clone, Copy, PartialEq)]
struct Count {
    messages: usize,
    bytes: usize,
    largest: usize,
}

/// Everything a spy saw on one broker (the test's probes left out).
#[derive(Default, Debug)]
struct Seen {
    families: BTreeMap<&'static str, Count>,
    /// Jobs on clients' `down` topics by round: 0 (the GPS's round 0), 1.. (the LPSs' rounds).
    jobs_by_round: BTreeMap<u32, usize>,
    /// Pings of the join (not jobs).
    pings: usize,
    /// `Finish` on clients' `down` topics.
    client_finishes: usize,
    /// Model updates of rounds ≥ 1 on clients' `up` topics, and their payload bytes.
    updates: usize,
    update_bytes: usize,
    /// On `lps/+/up`: common-layer uploads; on `lps/+/down`: assignments and averages.
    lps_common_up: usize,
    lps_assign: usize,
    lps_common_down: usize,
    relays: usize,
}

/// Reads what `link` saw until it has been quiet for 5 s (the processes have all exited; the
/// last statuses may still be crossing the bridge).
fn drain(link: &Link, topics: &Topics) -> Seen {
    let mut seen = Seen::default();
    while let Some(ev) = link.recv_until(Instant::now() + Duration::from_secs(5)) {
        let Inbound::Message { topic, payload, .. } = ev else {
            continue;
        };
        let family = if topic == topics.broadcast() {
            if Envelope::<ToClient>::from_bytes(&payload)
                .is_ok_and(|e| matches!(e.body, ToClient::Relay(_)))
            {
                seen.relays += 1;
            }
            "broadcast"
        } else if let Some((id, kind)) = topics.parse(&topic) {
            if id == PROBE {
                continue;
            }
            match kind {
                TopicKind::Status => "clients/+/status",
                TopicKind::Up => {
                    let env = Envelope::<ToCoordinator>::from_bytes(&payload).unwrap();
                    if env.round >= 1 && matches!(env.body, ToCoordinator::Update { .. }) {
                        seen.updates += 1;
                        seen.update_bytes += payload.len();
                    }
                    "clients/+/up"
                }
                TopicKind::Down => {
                    let env = Envelope::<ToClient>::from_bytes(&payload).unwrap();
                    if matches!(env.body, ToClient::Finish | ToClient::FinalModel(_)) {
                        seen.client_finishes += 1;
                    } else if matches!(env.body, ToClient::Ping) {
                        seen.pings += 1;
                    } else {
                        *seen.jobs_by_round.entry(env.round).or_default() += 1;
                    }
                    "clients/+/down"
                }
            }
        } else if let Some((id, kind)) = topics.parse_lps(&topic) {
            if id == PROBE {
                continue;
            }
            match kind {
                TopicKind::Status => "lps/+/status",
                TopicKind::Up => {
                    if Envelope::<ToGps>::from_bytes(&payload)
                        .is_ok_and(|e| matches!(e.body, ToGps::Common { .. }))
                    {
                        seen.lps_common_up += 1;
                    }
                    "lps/+/up"
                }
                TopicKind::Down => {
                    match Envelope::<ToLps>::from_bytes(&payload).unwrap().body {
                        ToLps::Assign(_) => seen.lps_assign += 1,
                        ToLps::Common { .. } => seen.lps_common_down += 1,
                        ToLps::Finish | ToLps::Resend => {}
                    }
                    "lps/+/down"
                }
            }
        } else {
            panic!("a message on {topic}, outside edgecfl's topics");
        };
        let c = seen.families.entry(family).or_default();
        c.messages += 1;
        c.bytes += payload.len();
        c.largest = c.largest.max(payload.len());
    }
    seen
}

/// A summary without what differs between two equal runs: wall times, the broker's address and
/// the output directory.
fn stripped(mut v: Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(map) => {
                for key in ["wall_seconds", "broker", "out"] {
                    map.remove(key);
                }
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut v);
    v
}

/// `rounds.csv` without its `seconds` column.
fn rounds_csv(out: &Path) -> String {
    let text = read(&out.join("rounds.csv"));
    let header: Vec<&str> = text.lines().next().expect("a header").split(',').collect();
    let col = header
        .iter()
        .position(|h| *h == "seconds")
        .expect("a seconds column");
    text.lines()
        .map(|l| {
            l.split(',')
                .enumerate()
                .filter(|(i, _)| *i != col)
                .map(|(_, f)| f)
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn bridged_brokers_give_the_single_broker_results() {
    let dir = scratch("bridge");
    let prefix = "edgecfl/t-bridge";
    let topics = Topics::new(prefix).unwrap();

    // The truth: the same run on one broker.
    let single = dir.join("single");
    std::fs::create_dir_all(&single).unwrap();
    let port = free_port();
    let broker = mosquitto_with(&single, "broker", &edgecfl_conf(port), port);
    run(&single, port, port, prefix);
    drop(broker);

    // Two brokers: A first, so that B's bridge connects at its first attempt.
    let bridged = dir.join("bridged");
    std::fs::create_dir_all(&bridged).unwrap();
    let a = free_port();
    let _broker_a = mosquitto_with(&bridged, "broker-a", &edgecfl_conf(a), a);
    let b = loop {
        let p = free_port();
        if p != a {
            break p;
        }
    };
    let b_conf = format!("{}\n{}", edgecfl_conf(b), bridge_conf(a, prefix));
    let _broker_b = mosquitto_with(&bridged, "broker-b", &b_conf, b);
    let everything = vec![format!("{prefix}/#")];
    let spy_a = spy(a, "spy-a", everything.clone());
    let spy_b = spy(b, "spy-b", everything);

    // The bridge is up once a probe crosses both ways; then the largest payload the runtimes
    // send (protocol::MAX_PAYLOAD) crosses both ways too.
    let every = Duration::from_millis(500);
    let up = topics.up(PROBE);
    let down = topics.down(PROBE);
    let t = cross(&spy_b, &spy_a, &up, b"probe", every);
    eprintln!("bridge B -> A carried a probe after {t:?}");
    cross(&spy_a, &spy_b, &down, b"probe", every);
    let big: Vec<u8> = (0..MAX_PAYLOAD).map(|i| (i % 251) as u8).collect();
    cross(&spy_b, &spy_a, &up, &big, Duration::from_secs(60));
    cross(&spy_a, &spy_b, &down, &big, Duration::from_secs(60));
    // Nothing else of the probes may be left for the accounting below.
    while spy_a
        .recv_until(Instant::now() + Duration::from_millis(500))
        .is_some()
    {}
    while spy_b
        .recv_until(Instant::now() + Duration::from_millis(500))
        .is_some()
    {}

    run(&bridged, a, b, prefix);

    // What crossed.
    let on_a = drain(&spy_a, &topics);
    let on_b = drain(&spy_b, &topics);
    let mut report = format!(
        "MT-HFL, {CLIENTS} clients, 2 LPSs, {ROUNDS} rounds; GPS on broker A, LPSs and clients \
         on broker B\n{:<18} {:>22} {:>22}\n",
        "topic family", "on A: msgs/bytes/max", "on B: msgs/bytes/max"
    );
    let families: std::collections::BTreeSet<&str> = on_a
        .families
        .keys()
        .chain(on_b.families.keys())
        .copied()
        .collect();
    for f in families {
        let (x, y) = (
            on_a.families.get(f).copied().unwrap_or_default(),
            on_b.families.get(f).copied().unwrap_or_default(),
        );
        report += &format!(
            "{f:<18} {:>22} {:>22}\n",
            format!("{}/{}/{}", x.messages, x.bytes, x.largest),
            format!("{}/{}/{}", y.messages, y.bytes, y.largest)
        );
    }
    report += &format!(
        "clients' jobs by round on A {:?}, on B {:?}\n",
        on_a.jobs_by_round, on_b.jobs_by_round
    );
    report += &format!(
        "members' updates to their LPS (rounds >= 1, on clients/+/up): on A {}/{} B, on B {}/{} B\n",
        on_a.updates, on_a.update_bytes, on_b.updates, on_b.update_bytes
    );
    std::fs::write(dir.join("report.txt"), &report).unwrap();
    eprintln!("{report}");

    // B → A: every status and upload of the clients and LPSs reached A.
    for f in [
        "clients/+/status",
        "clients/+/up",
        "lps/+/status",
        "lps/+/up",
    ] {
        assert!(on_b.families.contains_key(f), "{f} on B\n{report}");
        assert_eq!(on_a.families.get(f), on_b.families.get(f), "{f}\n{report}");
    }
    assert_eq!(on_a.lps_common_up, 2 * ROUNDS, "{report}");
    // The members' updates to their LPS cross too (they share round 0's topics).
    assert_eq!(on_b.updates, CLIENTS * ROUNDS, "{report}");
    assert_eq!(on_a.updates, on_b.updates, "{report}");
    // A → B: the relay, the assignments, the averages, round 0's jobs and the final Finish.
    for f in ["broadcast", "lps/+/down"] {
        assert!(on_a.families.contains_key(f), "{f} on A\n{report}");
        assert_eq!(on_a.families.get(f), on_b.families.get(f), "{f}\n{report}");
    }
    assert_eq!(on_b.relays, 1, "{report}");
    assert_eq!(on_b.lps_assign, 2, "{report}");
    assert_eq!(on_b.lps_common_down, 2 * ROUNDS, "{report}");
    let round0 = |s: &Seen| s.jobs_by_round.get(&0).copied().unwrap_or(0);
    assert!(round0(&on_a) >= 2 * CLIENTS, "{report}");
    assert_eq!(round0(&on_a), round0(&on_b), "{report}");
    assert!(on_a.client_finishes >= CLIENTS, "{report}");
    // The join's pings cross A → B like the jobs.
    assert!(on_a.pings >= CLIENTS, "{report}");
    assert!(on_b.pings >= on_a.pings, "{report}");
    assert!(on_b.client_finishes >= on_a.client_finishes, "{report}");
    // The LPSs' jobs to their members stay on B.
    let later = |s: &Seen| -> usize { s.jobs_by_round.range(1..).map(|(_, n)| n).sum() };
    assert!(later(&on_b) >= CLIENTS * ROUNDS, "{report}");
    assert_eq!(later(&on_a), 0, "{report}");

    // The results: those of the single-broker run.
    let (s1, s2) = (summary(&single.join("gps")), summary(&bridged.join("gps")));
    assert_eq!(s2["lps"], "remote");
    assert_eq!(s2["n_clusters"], 2, "{s2:#}");
    assert_eq!(s2["ari"].as_f64(), Some(1.0), "{s2:#}");
    assert_eq!(s2["rejected_total"], 0, "{s2:#}");
    assert!(s2["final_accuracy"].as_f64().unwrap() > 0.5, "{s2:#}");
    assert_eq!(stripped(s1), stripped(s2), "the GPS's summary");
    for file in ["relevance.csv", "clusters.json", "rounds.csv"] {
        assert_eq!(
            read(&single.join("gps").join(file)),
            read(&bridged.join("gps").join(file)),
            "the GPS's {file}"
        );
    }
    for id in LPS_IDS {
        let (o1, o2) = (single.join(id), bridged.join(id));
        let s = summary(&o2);
        assert_eq!(s["gps_rounds"], ROUNDS, "{s:#}");
        assert_eq!(
            s["accuracy_per_round"].as_array().map(Vec::len),
            Some(ROUNDS)
        );
        assert_eq!(stripped(summary(&o1)), stripped(s), "{id}'s summary");
        assert_eq!(rounds_csv(&o1), rounds_csv(&o2), "{id}'s rounds.csv");
        assert_eq!(
            read(&o1.join("clusters.json")),
            read(&o2.join("clusters.json")),
            "{id}'s clusters.json"
        );
        for file in ["model.f32", "common.f32"] {
            let (m1, m2) = (bytes(&o1.join(file)), bytes(&o2.join(file)));
            assert!(!m1.is_empty());
            assert!(m1 == m2, "{id}'s {file} differs between the runs");
        }
    }
    // Both LPSs end with the same common layers (the last average), so the comparison above
    // covers what crossed the bridge last.
    assert_eq!(
        bytes(&bridged.join(LPS_IDS[0]).join("common.f32")),
        bytes(&bridged.join(LPS_IDS[1]).join("common.f32"))
    );
}
