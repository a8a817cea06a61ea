//! Every method after FedClust and MT-HFL over MQTT: `coordinator serve` on its embedded broker
//! with real `edge-client` processes, against the in-process `coordinator simulate` with the same
//! seed and settings. The served run must find the same clusters in every round and reach the
//! same accuracy per round (within 0.5 points: only the summation order of evaluation batches may
//! differ), which exercises each method's jobs and answers on the wire (proximal training, model
//! pairs, picks among K models, anchor gradients, signatures with label statistics).

use std::process::Command;
use std::time::Duration;

use edgecfl_tests::*;
use serde_json::Value;

const PARTITION: &str = "groups:012-34-56-789";
const CLIENTS: usize = 8;
const TOLERANCE: f64 = 0.005;

/// Serves `method` with `extra` flags to a fleet of [`CLIENTS`] and compares with `simulate`.
fn served_equals_simulated(method: &str, extra: &[&str]) -> Value {
    let dir = scratch(&format!("method-{method}"));
    let port = free_port();
    let prefix = format!("edgecfl/t-{method}");
    let mut flags = run_flags(PARTITION, CLIENTS, 2, 0.5, 3);
    flags.extend(["--algorithm", method].map(String::from));
    flags.extend(extra.iter().map(|s| s.to_string()));
    let mut cmd = Command::new(bin("coordinator"));
    cmd.arg("serve")
        .args(&flags)
        .args(["--port", &port.to_string(), "--listen", "127.0.0.1"])
        .args(["--prefix", &prefix, "--run-id", method])
        .args([
            "--min-clients",
            &CLIENTS.to_string(),
            "--join-timeout",
            "120",
        ])
        .arg("--out")
        .arg(dir.join("out"));
    let mut coordinator = Proc::spawn(cmd, "coordinator serve", &dir.join("coordinator.log"));
    wait_listening(port, Duration::from_secs(60));
    let clients = fleet(&dir, port, &prefix, PARTITION, CLIENTS, 3);
    coordinator.wait_ok(Duration::from_secs(600), &dir.join("coordinator.log"));
    for (mut p, log) in clients {
        p.wait_ok(Duration::from_secs(30), &log);
    }
    let served = summary(&dir.join("out"));
    let twin = simulate(&flags, &dir.join("simulate"));
    assert_eq!(
        served["rejected_total"], 0,
        "{method}: {:#}",
        served["rejected"]
    );
    assert_eq!(served["n_clients"], CLIENTS);
    for key in [
        "assignment",
        "clusters_per_round",
        "ari",
        "ari_per_round",
        "n_clusters",
    ] {
        assert_eq!(served[key], twin[key], "{method}: {key}");
    }
    let (a, b) = (accuracies(&served), accuracies(&twin));
    assert_eq!(a.len(), b.len());
    for (round, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            (x - y).abs() <= TOLERANCE,
            "{method} round {}: served {x}, simulated {y}",
            round + 1
        );
    }
    served
}

fn final_clusters(s: &Value) -> u64 {
    s["n_clusters"].as_u64().unwrap_or(0)
}

#[test]
fn fedprox_over_mqtt_equals_simulate() {
    let s = served_equals_simulated("fedprox", &["--mu", "0.1"]);
    assert_eq!(final_clusters(&s), 1);
}

#[test]
fn fesem_over_mqtt_equals_simulate() {
    let s = served_equals_simulated("fesem", &["--clusters", "4"]);
    assert_eq!(s["ari"].as_f64(), Some(1.0), "{s:#}");
}
