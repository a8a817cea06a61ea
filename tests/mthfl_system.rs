//! System tests of MT-HFL's round 0 over MQTT: `coordinator serve --algorithm mthfl` and ten
//! `edge-client run` processes on the bundled FMNIST subset split into the paper's three tasks
//! (`tasks:fmnist3`, 5/3/2 clients).
//!
//! The independent truth is the in-process run: `coordinator simulate` with the same partition,
//! seed and k computes every relevance row in one process ([`SimPool`]); the served run computes
//! them on the clients against the relay (or on the coordinator from the uploads) and must write
//! the same relevance matrix to 1e-4 and find the three tasks.
//!
//! [`SimPool`]: edgecfl_shared::sim::SimPool

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use edgecfl_shared::mqtt::{Inbound, Link};
use edgecfl_shared::protocol::{
    Eigenpairs, Encoding, Envelope, Tensor, ToClient, ToCoordinator, Topics,
};
use edgecfl_tests::*;
use serde_json::Value;

const PARTITION: &str = "tasks:fmnist3";
const CLIENTS: usize = 10;
/// Eigenpairs per client.
const K: usize = 3;
const D: usize = 784;

/// The served run's settings, also given to its in-process twin.
fn flags(seed: u64, extra: &[&str]) -> Vec<String> {
    let mut f = run_flags(PARTITION, CLIENTS, 1, 1.0, seed);
    // One local epoch is enough: round 0 is what is tested.
    let epochs = f.iter().position(|x| x == "--epochs").expect("--epochs") + 1;
    f[epochs] = "1".into();
    f.extend(
        [
            "--algorithm",
            "mthfl",
            "--model",
            "mlp",
            "--lambda",
            "k=3",
            "--eigenvectors",
            &K.to_string(),
        ]
        .iter()
        .chain(extra)
        .map(|s| s.to_string()),
    );
    f
}

fn serve(dir: &Path, net: &[String], flags: &[String]) -> Proc {
    let mut cmd = Command::new(bin("coordinator"));
    cmd.arg("serve")
        .args(flags)
        .args(net)
        .args(["--min-clients", &CLIENTS.to_string()])
        .args(["--join-timeout", "120", "--phase-timeout", "120"])
        .arg("--out")
        .arg(dir.join("out"));
    Proc::spawn(cmd, "coordinator serve", &dir.join("coordinator.log"))
}

fn finish(dir: &Path, mut coordinator: Proc, clients: Vec<(Proc, PathBuf)>) -> Value {
    coordinator.wait_ok(Duration::from_secs(300), &dir.join("coordinator.log"));
    for (mut p, log) in clients {
        p.wait_ok(Duration::from_secs(30), &log);
    }
    summary(&dir.join("out"))
}

/// `relevance.csv` of a run: row `i` = client `i`.
fn relevance(out: &Path) -> Vec<Vec<f64>> {
    let text = std::fs::read_to_string(out.join("relevance.csv")).expect("relevance.csv");
    text.lines()
        .skip(1)
        .map(|l| {
            l.split(',')
                .skip(1)
                .map(|v| v.parse().expect("a number"))
                .collect()
        })
        .collect()
}

/// The three tasks found, and the served relevance equal to the in-process one.
fn assert_matches_simulate(served: &Value, flags: &[String], dir: &Path) {
    assert_eq!(served["n_clients"], CLIENTS);
    assert_eq!(served["n_clusters"], 3, "{served:#}");
    assert_eq!(served["ari"].as_f64(), Some(1.0), "{served:#}");
    // The clusters are the tasks: clients 0-4 clothes, 5-7 shoes, 8-9 bags.
    let a: Vec<u64> = served["assignment"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    for (i, j) in [(0, 4), (5, 7), (8, 9)] {
        assert!(a[i..=j].iter().all(|&x| x == a[i]), "{a:?}");
    }
    assert!(a[0] != a[5] && a[5] != a[8] && a[0] != a[8], "{a:?}");

    // Round 0 decides the relevance and the clusters; the twin skips the training rounds.
    let mut flags = flags.to_vec();
    let rounds = flags
        .iter()
        .position(|x| x == "--rounds")
        .expect("--rounds")
        + 1;
    flags[rounds] = "0".into();
    let twin = simulate(&flags, &dir.join("simulate"));
    assert_eq!(served["assignment"], twin["assignment"]);
    let (r, t) = (
        relevance(&dir.join("out")),
        relevance(&dir.join("simulate")),
    );
    assert_eq!(r.len(), CLIENTS);
    assert_eq!(t.len(), CLIENTS);
    for i in 0..CLIENTS {
        assert_eq!(r[i].len(), CLIENTS);
        for j in 0..CLIENTS {
            assert!(
                (r[i][j] - t[i][j]).abs() <= 1e-4,
                "R[{i}][{j}]: served {}, simulated {}",
                r[i][j],
                t[i][j]
            );
        }
    }
    // Not a degenerate matrix: the tasks are told apart.
    assert!(r[0][1] > r[0][5] + 0.2 && r[5][6] > r[5][8] + 0.2, "{r:?}");
}

/// Waits for the first message on the link whose command `pick` accepts.
fn wait_for<T>(link: &Link, mut pick: impl FnMut(Envelope<ToClient>) -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(120);
    while let Some(ev) = link.recv_until(deadline) {
        if let Inbound::Message { payload, .. } = ev
            && let Ok(env) = Envelope::<ToClient>::from_bytes(&payload)
            && let Some(t) = pick(env)
        {
            return t;
        }
    }
    panic!("the awaited command did not come within 120 s");
}

/// The paper's way over mosquitto: signatures up, one relay on the broadcast topic, one row per
/// client up. Malformed signatures and rows published in the clients' names are ignored with
/// their reasons, and the run goes on to the right clustering.
#[test]
fn client_relevance_over_mosquitto_equals_simulate() {
    let dir = scratch("mthfl-client");
    let (_broker, port) = mosquitto(&dir);
    let prefix = "edgecfl/t-mthfl";
    let topics = Topics::new(prefix).unwrap();
    let flags = flags(4, &["--relevance", "client"]);
    let net: Vec<String> = [
        "--broker",
        &format!("mqtt://127.0.0.1:{port}"),
        "--prefix",
        prefix,
    ]
    .map(String::from)
    .to_vec();
    let link = spy(port, "spy", vec![topics.down("c1"), topics.broadcast()]);
    let coordinator = serve(&dir, &net, &flags);
    let clients = fleet(&dir, port, prefix, PARTITION, CLIENTS, 4);

    // Round 0, step 1: a signature of the wrong k, and one with a NaN, in c1's name.
    let run = wait_for(&link, |env| {
        matches!(env.body, ToClient::GramSignature { .. }).then_some(env.run)
    });
    let up = |body: ToCoordinator| Envelope::new(run.clone(), 0, body).to_bytes();
    let eig = |k: usize, v: f32| {
        ToCoordinator::Eigenpairs(Eigenpairs::encode(
            k,
            D,
            &vec![1.0; k],
            &vec![v; k * D],
            Encoding::F32,
        ))
    };
    link.publish(&topics.up("c1"), up(eig(K + 1, 0.1)), false)
        .unwrap();
    link.publish(&topics.up("c1"), up(eig(K, f32::NAN)), false)
        .unwrap();

    // Step 2: the relay comes once, on the broadcast topic; bad rows in c1's name.
    let relay = wait_for(&link, |env| match env.body {
        ToClient::Relay(r) => Some(r),
        _ => None,
    });
    assert_eq!((relay.k as usize, relay.d as usize), (K, D));
    let row = |v: Vec<f32>| {
        up(ToCoordinator::RelevanceRow {
            row: Tensor::encode(&v, Encoding::F32),
        })
    };
    let mut garbage = row(vec![0.5; CLIENTS]);
    garbage.truncate(garbage.len() - 3);
    for bad in [
        row(vec![0.5; CLIENTS - 1]),
        row(vec![f32::NAN; CLIENTS]),
        row(vec![1.5; CLIENTS]),
        garbage,
    ] {
        link.publish(&topics.up("c1"), bad, false).unwrap();
    }

    let s = finish(&dir, coordinator, clients);
    assert_eq!(s["relevance"], "client");
    assert_eq!(s["rejected_total"], 6, "{:#}", s["rejected"]);
    assert_eq!(s["rejected"]["truncated"], 1, "{:#}", s["rejected"]);
    assert_matches_simulate(&s, &flags, &dir);

    // The relay went out once (n signatures of k·d + k f32), not once per client.
    let w = &s["wire_bytes"];
    let relay_bytes = (CLIENTS * (K * D + K) * 4) as u64;
    let broadcast = w["broadcast"].as_u64().unwrap();
    assert!(
        (relay_bytes..relay_bytes + 64).contains(&broadcast),
        "{broadcast}"
    );
    assert!(
        w["down"].as_u64().unwrap() < 2 * relay_bytes + 2_000_000,
        "{w}"
    );
    let sig = w["signature_up"].as_u64().unwrap();
    assert!(
        (relay_bytes..relay_bytes + CLIENTS as u64 * 64).contains(&sig),
        "{sig}"
    );
    let rows = w["relevance_up"].as_u64().unwrap();
    let row_bytes = (CLIENTS * CLIENTS * 4) as u64;
    assert!(
        (row_bytes..row_bytes + CLIENTS as u64 * 32).contains(&rows),
        "{rows}"
    );
}

/// Server-side relevance over the embedded broker, with f16 signatures: no relay, no rows.
#[test]
fn server_relevance_over_embedded_broker_equals_simulate() {
    let dir = scratch("mthfl-server");
    let port = free_port();
    let prefix = "edgecfl/t-mthfl-server";
    let flags = flags(5, &["--relevance", "server", "--signature-encoding", "f16"]);
    let net: Vec<String> = ["--port", &port.to_string(), "--listen", "127.0.0.1"]
        .into_iter()
        .chain(["--prefix", prefix])
        .map(String::from)
        .collect();
    let coordinator = serve(&dir, &net, &flags);
    wait_listening(port, Duration::from_secs(60));
    let clients = fleet(&dir, port, prefix, PARTITION, CLIENTS, 5);
    let s = finish(&dir, coordinator, clients);
    assert_eq!(s["relevance"], "server");
    assert_eq!(s["rejected_total"], 0, "{:#}", s["rejected"]);
    let w = &s["wire_bytes"];
    assert_eq!(w["broadcast"], 0, "{w}");
    assert_eq!(w["relevance_up"], 0, "{w}");
    let f16 = (CLIENTS * (K * D + K) * 2) as u64;
    let sig = w["signature_up"].as_u64().unwrap();
    assert!((f16..f16 + CLIENTS as u64 * 64).contains(&sig), "{sig}");
    assert_matches_simulate(&s, &flags, &dir);
}
