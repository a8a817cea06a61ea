//! Newcomers over a real broker: `coordinator serve` with its embedded broker and 9 edge-client
//! processes; a 10th edge client is started only once round 1's training began (round 0 is
//! over). It is queued, not rejected, placed at the next round into the cluster of its group
//! (FedClust: the nearest round-0 centroid; MT-HFL: the highest mean relevance), evaluated, and
//! told to finish; and the run equals `coordinator simulate --newcomers 1 --join-round R` with
//! the same seed.

use std::process::Command;
use std::time::Duration;

use edgecfl_shared::protocol::Topics;
use edgecfl_tests::*;

/// Shards of the partition; shards 0..9 start with the run, shard 9 is the newcomer.
const SHARDS: usize = 10;
const ROUND_ZERO: usize = 9;

#[test]
fn late_edge_client_joins_its_groups_cluster() {
    // Shard `i` is in group `i % 4`: shard 9 is in group 1 (not the first cluster) with 1 and 5.
    // After the last round it personalises its cluster's model for one epoch (Table 6).
    let extra = ["--personalize", "1"];
    late_joiner("newcomer", "groups:012-34-56-789", &extra, 4, &[1, 5], 0);
}

#[test]
fn late_mthfl_client_joins_its_tasks_cluster() {
    // Clothes 0-4, shoes 5-7, bags 8-9: shard 9 is a bags user like shard 8.
    let extra = ["--algorithm", "mthfl", "--lambda", "k=3"];
    late_joiner("newcomer-mthfl", "tasks:fmnist3", &extra, 3, &[8], 5);
}

/// Serves `partition` over [`SHARDS`] shards with `extra` flags, starting the last shard late;
/// the run must find `clusters` clusters (ARI 1) and place the newcomer with the round-0 shards
/// `mates`, not with shard `other`.
fn late_joiner(
    name: &str,
    partition: &str,
    extra: &[&str],
    clusters: usize,
    mates: &[usize],
    other: usize,
) {
    let dir = scratch(name);
    let port = free_port();
    let prefix = &format!("edgecfl/t-{name}");
    let topics = Topics::new(prefix).unwrap();
    let mut flags = run_flags(partition, SHARDS, 3, 0.5, 5);
    flags.extend(extra.iter().map(|s| s.to_string()));
    let mut cmd = Command::new(bin("coordinator"));
    cmd.arg("serve")
        .args(&flags)
        .args(["--port", &port.to_string(), "--listen", "127.0.0.1"])
        .args(["--prefix", prefix, "--run-id", name])
        .args(["--min-clients", &ROUND_ZERO.to_string()])
        .args(["--join-timeout", "120", "--phase-timeout", "60"])
        .arg("--out")
        .arg(dir.join("out"));
    let log = dir.join("coordinator.log");
    let mut coordinator = Proc::spawn(cmd, "coordinator serve", &log);
    wait_listening(port, Duration::from_secs(60));
    let link = spy(port, "observer", vec![format!("{prefix}/clients/+/down")]);
    let clients = fleet_of(&dir, port, prefix, partition, 0..ROUND_ZERO, SHARDS, 5);

    // Round 0 is over once round 1's training commands go out.
    first_training_command(&link, &topics);
    let late = fleet_of(&dir, port, prefix, partition, ROUND_ZERO..SHARDS, SHARDS, 5);

    coordinator.wait_ok(Duration::from_secs(600), &log);
    for (mut p, log) in clients.into_iter().chain(late) {
        p.wait_ok(Duration::from_secs(30), &log);
    }
    let s = summary(&dir.join("out"));
    // Joining late is not a bad message.
    assert_eq!(s["rejected_total"], 0, "{:#}", s["rejected"]);
    assert_eq!(s["n_clusters"], clusters, "{s:#}");
    assert_eq!(s["ari"].as_f64(), Some(1.0));
    assert_eq!(s["n_clients"], SHARDS);
    let newcomers = s["newcomers"].as_array().unwrap();
    assert_eq!(newcomers.len(), 1, "{s:#}");
    let n = &newcomers[0];
    assert_eq!(n["id"], "c9");
    assert_eq!(n["client"], ROUND_ZERO);
    let round = n["round"].as_u64().unwrap();
    assert!((2..=3).contains(&round), "joined at round {round}");
    for &m in mates {
        assert_eq!(n["cluster"], s["assignment"][m], "{s:#}");
    }
    assert_ne!(n["cluster"], s["assignment"][other], "{s:#}");
    assert_eq!(n["truth_match"], true);
    assert_eq!(s["assignment"][ROUND_ZERO], n["cluster"]);
    assert!(s["dropped_newcomers"].as_array().unwrap().is_empty());
    // It was evaluated under its cluster's model after joining.
    let acc = s["client_accuracy"][ROUND_ZERO].as_f64().unwrap();
    assert!(acc > 0.0, "newcomer accuracy {acc}");
    let clusters: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("out/clusters.json")).unwrap())
            .unwrap();
    assert_eq!(clusters["newcomers"][0]["id"], "c9");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("newcomer c9 queued"), "{text}");

    // `simulate --newcomers 1 --join-round R` is the same experiment in process: same clusters,
    // same placement, same accuracy per round.
    let mut twin_flags = flags.clone();
    twin_flags.extend(["--newcomers".into(), "1".into()]);
    twin_flags.extend(["--join-round".into(), round.to_string()]);
    let twin = simulate(&twin_flags, &dir.join("simulate"));
    assert_eq!(twin["assignment"], s["assignment"]);
    assert_eq!(twin["newcomers"][0]["cluster"], n["cluster"]);
    assert_eq!(twin["newcomers"][0]["round"], round);
    assert_eq!(twin["newcomers"][0]["truth_match"], true);
    if extra.contains(&"--personalize") {
        // Trained and scored over MQTT as in process.
        let served = n["personalized_accuracy"].as_f64().expect("personalised");
        let simulated = twin["newcomers"][0]["personalized_accuracy"]
            .as_f64()
            .unwrap();
        assert!(served > 0.5, "{served}");
        assert!(
            (served - simulated).abs() <= 0.005,
            "{served} vs {simulated}"
        );
        assert_eq!(s["newcomers_personalized_accuracy"].as_f64(), Some(served));
    }
    let (a, b) = (accuracies(&s), accuracies(&twin));
    assert_eq!(a.len(), b.len());
    for (r, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            (x - y).abs() <= 0.005,
            "round {}: served {x}, simulated {y}",
            r + 1
        );
    }
}
