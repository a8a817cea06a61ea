//! System tests: the coordinator and edge clients as separate processes over real brokers
//! (the coordinator's embedded rumqttd and Debian's mosquitto), on the bundled FMNIST subset.
//!
//! A served run must equal the in-process `coordinator simulate` run with the same seed and
//! settings: same clusters, and accuracy per round within 0.5 percentage points (the clients
//! train exactly as the simulator does; only floating-point summation order in evaluation batches
//! may differ).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use edgecfl_shared::model::{ModelKind, Params};
use edgecfl_shared::protocol::{
    Encoding, Envelope, Hello, Id, MAX_PAYLOAD, Tensor, ToCoordinator, Topics,
};
use edgecfl_tests::*;
use serde_json::Value;

const PARTITION: &str = "groups:012-34-56-789";
const CLIENTS: usize = 8;
const TOLERANCE: f64 = 0.005;

fn finish(dir: &Path, mut coordinator: Proc, clients: Vec<(Proc, std::path::PathBuf)>) -> Value {
    coordinator.wait_ok(Duration::from_secs(600), &dir.join("coordinator.log"));
    for (mut p, log) in clients {
        p.wait_ok(Duration::from_secs(30), &log);
    }
    summary(&dir.join("out"))
}

/// Same clusters as the truth, and the same accuracy as the in-process run.
fn assert_matches_simulate(served: &Value, flags: &[String], dir: &Path) {
    assert_eq!(served["n_clients"], CLIENTS);
    assert_eq!(served["n_clusters"], 4, "{served:#}");
    assert_eq!(served["ari"].as_f64(), Some(1.0));
    let twin = simulate(flags, &dir.join("simulate"));
    assert_eq!(served["assignment"], twin["assignment"]);
    // The messages both ways, byte for byte as many (`tests/methods_system.rs` checks them
    // against the wire).
    for key in ["bytes_up", "bytes_down"] {
        assert_eq!(served[key], twin[key], "{key}");
    }
    // Both local test views: the proportional one needs each client's training label counts,
    // which travel with its evaluation.
    for key in ["accuracy_per_round", "accuracy_proportional_per_round"] {
        let (a, b) = (per_round(served, key), per_round(&twin, key));
        assert_eq!(a.len(), b.len(), "{key}");
        for (round, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(
                (x - y).abs() <= TOLERANCE,
                "{key} round {}: served {x}, simulated {y}",
                round + 1
            );
        }
    }
    let a = accuracies(served);
    // Training helped: chance level within a group is at most 1/2.
    assert!(a.last().copied().unwrap_or(0.0) > 0.6, "{a:?}");
}

#[test]
fn embedded_broker_run_recovers_groups_and_equals_simulate() {
    let dir = scratch("embedded");
    let port = free_port();
    let prefix = "edgecfl/t-embedded";
    let flags = run_flags(PARTITION, CLIENTS, 2, 0.5, 1);
    let net: Vec<String> = ["--port", &port.to_string(), "--listen", "127.0.0.1"]
        .into_iter()
        .chain(["--prefix", prefix, "--run-id", "embedded"])
        .map(String::from)
        .collect();
    let coordinator = serve(&dir, CLIENTS, &net, &flags);
    wait_listening(port, Duration::from_secs(60));
    let clients = fleet(&dir, port, prefix, PARTITION, CLIENTS, 1);
    let s = finish(&dir, coordinator, clients);
    assert_eq!(s["rejected_total"], 0, "{:#}", s["rejected"]);
    assert_eq!(s["broker"], format!("mqtt://127.0.0.1:{port}"));
    // A clean run logs no error: not even rumqttd's routine ones (`logging::BrokerNoise`) for
    // the probe above and the clients' disconnects.
    let log = std::fs::read_to_string(dir.join("coordinator.log")).unwrap();
    assert!(!log.contains(" ERROR "), "{log}");
    // Round 0 moved final layers only: 850 floats (+ a small envelope) per client.
    let sig = s["wire_bytes"]["signature_up"].as_u64().unwrap();
    assert!(
        (CLIENTS as u64 * 3400..CLIENTS as u64 * 3500).contains(&sig),
        "{sig}"
    );
    assert_matches_simulate(&s, &flags, &dir);
    // Every device kept its cluster's final model.
    assert_clients_kept_their_models(&dir, &s, &|id| kept_model(&dir, id));
}

#[test]
fn mosquitto_run_ignores_bad_input_and_equals_simulate() {
    let dir = scratch("mosquitto");
    let (_broker, port) = mosquitto(&dir);
    let prefix = "edgecfl/t-mosquitto";
    let topics = Topics::new(prefix).unwrap();
    let flags = run_flags(PARTITION, CLIENTS, 2, 0.5, 2);
    let net: Vec<String> = [
        "--broker",
        &format!("mqtt://127.0.0.1:{port}"),
        "--prefix",
        prefix,
    ]
    .map(String::from)
    .to_vec();
    let link = spy(port, "intruder", vec![format!("{prefix}/clients/+/down")]);
    // Retained announcements under ids no client can have (too long; a '!'), waiting for the
    // coordinator as it joins clients: refused, counted, and the run goes on.
    let fake_hello = Envelope::new(
        Id::new(),
        0,
        ToCoordinator::Hello(Hello {
            samples: 100,
            test_samples: 10,
            backend: edgecfl_shared::protocol::text("flex"),
            shard: None,
        }),
    )
    .to_bytes();
    for bad_id in ["x".repeat(40), "mallory!".to_string()] {
        link.publish(
            &format!("{prefix}/clients/{bad_id}/status"),
            fake_hello.clone(),
            true,
        )
        .unwrap();
    }
    let coordinator = serve(&dir, CLIENTS, &net, &flags);
    let clients = fleet(&dir, port, prefix, PARTITION, CLIENTS, 2);

    // While round 1 trains, publish bad uploads straight to the coordinator's topics.
    let (run, target) = first_training_command(&link, &topics);
    let good = Params::init(ModelKind::LeNet5, 0).values;
    let update = |values: &[f32], round: u32| {
        Envelope::new(
            run.clone(),
            round,
            ToCoordinator::Update {
                model: ModelKind::LeNet5,
                params: Tensor::encode(values, Encoding::F32),
                samples: 100,
                loss: 0.1,
            },
        )
        .to_bytes()
    };
    let mut nan = good.clone();
    nan[123] = f32::NAN;
    let mut wrong_version = update(&good, 1);
    wrong_version[0] = 9;
    let valid = update(&good, 1);
    let mut noise = vec![0u8; 512];
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for b in &mut noise {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let bad: Vec<(String, Vec<u8>)> = vec![
        (topics.up(&target), noise),
        (topics.up(&target), valid[..valid.len() / 2].to_vec()),
        (topics.up(&target), wrong_version),
        (topics.up(&target), update(&good[..good.len() - 10], 1)),
        (topics.up(&target), update(&nan, 1)),
        (topics.up(&target), vec![1u8; MAX_PAYLOAD + 1]),
        (topics.up("intruder"), valid.clone()),
        (topics.up(&target), update(&good, 0)),
    ];
    for (topic, payload) in bad {
        link.publish(&topic, payload, false).unwrap();
    }

    let s = finish(&dir, coordinator, clients);
    let r = &s["rejected"];
    assert_eq!(s["rejected_total"], 10, "{r:#}");
    for reason in ["truncated", "wrong_version", "oversized", "unknown_client"] {
        assert_eq!(r[reason], 1, "{reason}: {r:#}");
    }
    assert_eq!(r["bad_id"], 2, "{r:#}");
    // Per client of the run: the 7 bad uploads on the target's topic; ids outside the run
    // (the intruder, the bad ids) only in the totals.
    let per_client = s["rejected_per_client"].as_object().unwrap();
    assert_eq!(per_client.len(), 1, "{per_client:#?}");
    let target_counts = per_client[&target].as_object().unwrap();
    assert_eq!(
        target_counts
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum::<u64>(),
        7,
        "{target_counts:#?}"
    );
    let log = std::fs::read_to_string(dir.join("coordinator.log")).unwrap();
    assert!(
        // Ids from topics are quoted (Debug), so a made-up id cannot forge log lines.
        log.contains("ignored message from \"intruder\": UnknownClient"),
        "{log}"
    );
    assert_matches_simulate(&s, &flags, &dir);
    assert_clients_kept_their_models(&dir, &s, &|id| kept_model(&dir, id));

    // A device that missed the end (here: lost its model file, and starts again after the run)
    // gets its model from the broker, which keeps it retained, when it next connects.
    let lost = kept_model(&dir, "c3");
    std::fs::remove_file(&lost).unwrap();
    std::fs::create_dir_all(dir.join("again")).unwrap();
    let mut again = fleet_of(
        &dir.join("again"),
        port,
        prefix,
        PARTITION,
        3..4,
        CLIENTS,
        2,
    );
    let until = std::time::Instant::now() + Duration::from_secs(60);
    let path = kept_model(&dir.join("again"), "c3");
    while !path.exists() {
        assert!(std::time::Instant::now() < until, "c3 fetched no model");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_clients_kept_their_models(&dir, &s, &|id| {
        if id == "c3" {
            path.clone()
        } else {
            kept_model(&dir, id)
        }
    });
    let (proc, log) = &mut again[0];
    // It has no run to serve: it waits for the next one, having said so.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        proc.is_running(),
        "{}",
        std::fs::read_to_string(&*log).unwrap()
    );
    let log = std::fs::read_to_string(&*log).unwrap();
    assert!(
        log.contains("had finished; kept the model of cluster"),
        "{log}"
    );
}

#[test]
fn killed_client_does_not_stop_the_round() {
    let dir = scratch("killed");
    let port = free_port();
    let prefix = "edgecfl/t-killed";
    let topics = Topics::new(prefix).unwrap();
    // Every client trains every round, so the killed client's cluster partner trains too.
    let flags = run_flags(PARTITION, CLIENTS, 2, 1.0, 3);
    let net: Vec<String> = ["--port", &port.to_string(), "--listen", "127.0.0.1"]
        .into_iter()
        .chain(["--prefix", prefix, "--phase-timeout", "60"])
        .map(String::from)
        .collect();
    let coordinator = serve(&dir, CLIENTS, &net, &flags);
    wait_listening(port, Duration::from_secs(60));
    let link = spy(port, "observer", vec![format!("{prefix}/clients/+/down")]);
    let mut clients = fleet(&dir, port, prefix, PARTITION, CLIENTS, 3);

    let (_, target) = first_training_command(&link, &topics);
    let victim: usize = target.trim_start_matches('c').parse().unwrap();
    let (mut killed, _) = clients.remove(victim);
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();

    let s = finish(&dir, coordinator, clients);
    let csv = std::fs::read_to_string(dir.join("out/rounds.csv")).unwrap();
    let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    // round,sampled,received,...
    assert_eq!(&rows[1][..3], &["1", "8", "7"], "{csv}");
    assert_eq!(&rows[2][..3], &["2", "8", "7"], "{csv}");
    // The last will normally ends the wait at once; at worst each phase waits out its timeout.
    assert!(s["phase_timeouts"].as_u64().unwrap() <= 4, "{s:#}");
    // The victim's cluster still trained: its partner's accuracy after the last round is well
    // above chance (at most 1/2 within a group). Not after round 1: the victim is whichever
    // client's command the observer sees first, and one group's model is still at chance after
    // round 1 even with both its members alive (0.500 measured, the others above 0.74).
    let assignment: Vec<u64> = s["assignment"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let cluster = assignment[victim] as usize;
    let col = rows[0]
        .iter()
        .position(|h| *h == format!("cluster{cluster}_accuracy"))
        .unwrap();
    let acc: f64 = rows[2][col].parse().unwrap();
    assert!(
        acc > 0.6,
        "cluster {cluster} accuracy {acc} after round 2:\n{csv}"
    );
    assert_eq!(s["n_clusters"], 4);
}

/// Samples a process's peak RSS until it exits; returns the last (largest) value seen.
fn watch_peak_rss(pid: u32) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut peak = 0;
        while let Some(kb) = peak_rss_kb(pid) {
            peak = peak.max(kb);
            std::thread::sleep(Duration::from_millis(20));
        }
        peak
    })
}

/// A flood of 1 MiB garbage on a training client's `down` topic: the client keeps at most one
/// pending command per topic (the rest are dropped and counted), its memory stays within a
/// bound of the unflooded client's, and it still serves the next round's job.
#[test]
fn flooded_client_keeps_one_pending_command_and_its_memory_bound() {
    const FLOOD: usize = 100;
    const FLOOD_BYTES: usize = 1 << 20;
    let dir = scratch("flood");
    let (_broker, port) = mosquitto(&dir);
    let prefix = "edgecfl/t-flood";
    let topics = Topics::new(prefix).unwrap();
    let partition = "groups:01234-56789";
    let mut flags = run_flags(partition, 2, 2, 1.0, 6);
    // Training long enough (1 500 images × 20 epochs, seconds even on a fast machine) for the
    // whole flood to arrive while the target trains, and before its next real command.
    let epochs = flags.iter().position(|f| f == "--epochs").unwrap() + 1;
    flags[epochs] = "20".into();
    let net: Vec<String> = [
        "--broker",
        &format!("mqtt://127.0.0.1:{port}"),
        "--prefix",
        prefix,
        "--phase-timeout",
        "120",
    ]
    .map(String::from)
    .to_vec();
    let link = spy(port, "flooder", vec![format!("{prefix}/clients/+/down")]);
    let mut cmd = Command::new(bin("coordinator"));
    cmd.arg("serve")
        .args(&flags)
        .args(&net)
        .args(["--min-clients", "2", "--join-timeout", "120"])
        .arg("--out")
        .arg(dir.join("out"));
    let coordinator = Proc::spawn(cmd, "coordinator serve", &dir.join("coordinator.log"));
    let clients = fleet(&dir, port, prefix, partition, 2, 6);
    let watchers: Vec<_> = clients
        .iter()
        .map(|(p, _)| watch_peak_rss(p.child.id()))
        .collect();

    // Round 1 trains; the target took its job at once (it was idle, waiting for it).
    let (_, target) = first_training_command(&link, &topics);
    let victim: usize = target.trim_start_matches('c').parse().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let down = topics.down(&target);
    for _ in 0..FLOOD {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        link.publish(&down, vec![x as u8; FLOOD_BYTES], false)
            .unwrap();
    }
    // The broker queued the whole flood for the target before the next real command (it
    // delivered it all back to this spy), so that command is the newest on its topic.
    let mut seen = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while seen < FLOOD {
        match link.recv_until(deadline) {
            Some(edgecfl_shared::mqtt::Inbound::Message { topic, payload, .. }) => {
                if topic == down && payload.len() == FLOOD_BYTES {
                    seen += 1;
                } else if topic == down {
                    panic!("a command reached {target} before the flood was through");
                }
            }
            Some(_) => {}
            None => panic!("only {seen} of the flood's {FLOOD} messages came back"),
        }
    }

    let s = finish(&dir, coordinator, clients);
    assert_eq!(s["phase_timeouts"], 0, "a real command was lost: {s:#}");
    let peaks: Vec<u64> = watchers.into_iter().map(|w| w.join().unwrap()).collect();
    let log = std::fs::read_to_string(dir.join(format!("{target}.log"))).unwrap();
    let dropped: u64 = log
        .lines()
        .find_map(|l| l.split(" commands ignored, ").nth(1))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no summary line in {target}'s log:\n{log}"));
    eprintln!(
        "flood: {target} dropped {dropped} of {FLOOD}; peak RSS {} kB flooded, {} kB not",
        peaks[victim],
        peaks[1 - victim]
    );
    // It trained while most of the flood arrived: nearly all of it was replaced unread.
    assert!(dropped >= FLOOD as u64 / 2, "{log}");
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("unread command(s) replaced")),
        "{log}"
    );
    // The bound: at most one pending payload per topic (here ≤ 2 MiB of flood) plus the link's
    // read buffers; unbounded, the flood would add 100 MiB.
    let bound_kb = 48 * 1024;
    assert!(
        peaks[victim] < peaks[1 - victim] + bound_kb,
        "peak RSS {} kB flooded vs {} kB not",
        peaks[victim],
        peaks[1 - victim]
    );
}

/// Floods of 4 MiB messages on the embedded broker (inside `coordinator serve`, waiting for its
/// clients), on topics nobody reads: one somebody subscribed to and left, one nobody ever
/// subscribed to, and a client's `down` topic. rumqttd keeps every topic's messages in a log
/// trimmed by size only; with the limits edgecfl used before (64 MiB × 10 per log) these floods
/// grew the coordinator by 377 MB. Now (`coordinator::broker::Limits`) a topic holds at most
/// 3 × (64 KiB + 4 MiB) ≈ 12.8 MB whatever is published. (Floods of topics the coordinator reads
/// are bounded differently: see docs/src/security.md.)
#[test]
fn embedded_broker_memory_is_bounded_under_floods() {
    const FLOOD: usize = 60;
    let dir = scratch("broker-flood");
    let port = free_port();
    let prefix = "edgecfl/t-broker-flood";
    let topics = Topics::new(prefix).unwrap();
    let mut cmd = Command::new(bin("coordinator"));
    cmd.arg("serve")
        .args(run_flags("label:2", 2, 1, 1.0, 0))
        .args(["--port", &port.to_string(), "--listen", "127.0.0.1"])
        .args([
            "--prefix",
            prefix,
            "--min-clients",
            "2",
            "--join-timeout",
            "300",
        ])
        .arg("--out")
        .arg(dir.join("out"));
    let coordinator = Proc::spawn(cmd, "coordinator serve", &dir.join("coordinator.log"));
    wait_listening(port, Duration::from_secs(30));
    let pid = coordinator.child.id();
    std::thread::sleep(Duration::from_millis(500));
    let before = peak_rss_kb(pid).expect("coordinator running");

    // A subscriber that leaves: its filter's log stays behind.
    spy(port, "leaver", vec!["flood/left".into()]).disconnect();
    let flooder = spy(port, "flooder", vec!["flood/done".into()]);
    let big = vec![0x5Au8; edgecfl_shared::protocol::MAX_PAYLOAD];
    let targets = [
        "flood/left".to_string(),
        "flood/nobody".into(),
        topics.down("c0"),
    ];
    for topic in &targets {
        for _ in 0..FLOOD {
            flooder.publish(topic, big.clone(), false).unwrap();
        }
    }
    // Publishes of one connection are processed in order: once this one comes back, the broker
    // has taken the whole flood.
    flooder
        .publish("flood/done", b"done".to_vec(), false)
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    loop {
        match flooder.recv_until(deadline) {
            Some(edgecfl_shared::mqtt::Inbound::Message { topic, .. }) if topic == "flood/done" => {
                break;
            }
            Some(_) => {}
            None => panic!("the flood did not get through the broker in 300 s"),
        }
    }
    let after = peak_rss_kb(pid).expect("coordinator still running");
    let grown_mb = (after.saturating_sub(before)) as f64 / 1024.0;
    let flooded_mb = (targets.len() * FLOOD * big.len()) as f64 / 1e6;
    eprintln!(
        "coordinator peak RSS {:.1} MB before, {:.1} MB after {flooded_mb:.0} MB of floods on {} topics",
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        targets.len()
    );
    assert!(
        grown_mb < 64.0,
        "the coordinator grew by {grown_mb:.0} MB under a {flooded_mb:.0} MB flood (bound: 3 × 12.8 MB plus buffers)"
    );
    // It is still waiting for its clients, and counted the garbage it read.
    assert!(
        coordinator.child.id() == pid && peak_rss_kb(pid).is_some(),
        "the coordinator died under the flood"
    );
    drop(coordinator);
}

/// A link with `max_unread_bytes` stops reading from the broker while its reader is behind, and
/// loses nothing: the broker (mosquitto) holds the rest until the reader catches up.
#[test]
fn link_with_a_byte_bound_pauses_reading_and_loses_nothing() {
    const COUNT: usize = 40;
    const SIZE: usize = 1 << 20;
    let dir = scratch("unread-bound");
    let (_broker, port) = mosquitto(&dir);
    let addr = edgecfl_shared::protocol::BrokerAddr {
        host: "127.0.0.1".into(),
        port,
        tls: false,
    };
    let slow = edgecfl_shared::mqtt::Link::start(edgecfl_shared::mqtt::LinkOptions {
        subscribe: vec!["bound/x".into()],
        max_unread_bytes: Some(4 * SIZE),
        ..edgecfl_shared::mqtt::LinkOptions::new(addr.clone(), "slow-reader")
    })
    .unwrap();
    slow.wait_connected(&addr, Duration::from_secs(10)).unwrap();
    let sender = spy(port, "sender", vec![]);
    for i in 0..COUNT {
        sender
            .publish("bound/x", vec![i as u8; SIZE], false)
            .unwrap();
    }
    // Everything has been sent; the reader has not read anything yet.
    std::thread::sleep(Duration::from_secs(3));
    let held = slow.unread_bytes();
    assert!(
        (4 * SIZE..=5 * SIZE).contains(&held),
        "{held} bytes unread: the link should hold 4 MiB plus at most one message"
    );
    // Now read: every message arrives, in order.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut next = 0usize;
    while next < COUNT {
        match slow.recv_until(deadline) {
            Some(edgecfl_shared::mqtt::Inbound::Message { payload, .. }) => {
                assert_eq!((payload.len(), payload[0]), (SIZE, next as u8));
                next += 1;
            }
            Some(_) => {}
            None => panic!("only {next} of {COUNT} messages arrived"),
        }
    }
}
