//! Every method over MQTT (FedClust's and MT-HFL's own runs are in `system.rs` and
//! `mthfl_system.rs`): `coordinator serve` on its embedded broker with real `edge-client`
//! processes, against the in-process `coordinator simulate` with the same seed and settings. The
//! served run must find the same clusters in every round, reach the same accuracy per round
//! (within 0.5 points: only the summation order of evaluation batches may differ), and count the
//! same message bytes both ways as the simulated one; those counts must be what the wire carried
//! (`wire_bytes`, less each envelope's header). This exercises each method's jobs and answers on
//! the wire (proximal training, model pairs, picks among K models, anchor gradients, signatures
//! with label statistics, FedClust's whole-model round 0 under `--cluster-start members`),
//! PACFL's subspaces on CIFAR-10 with the colour LeNet-5 (real images, read by every client from
//! the data set's own folder), and FedClust on real MNIST digits.

use std::time::Duration;

use std::path::PathBuf;

use edgecfl_tests::*;
use serde_json::Value;

#[path = "../shared/tests/real_data/mod.rs"]
mod real_data;

const PARTITION: &str = "groups:012-34-56-789";
const CLIENTS: usize = 8;
const TOLERANCE: f64 = 0.005;

/// Serves `method` with `extra` flags (and `net`, flags of `serve` only) to a fleet of
/// [`CLIENTS`]; returns the summary and the flags of its in-process twin.
fn serve(method: &str, extra: &[&str], net: &[&str]) -> (Value, Vec<String>, std::path::PathBuf) {
    let name = run_id(method, net);
    // One method's tests with other flags run at the same time: each gets its own directory
    // and topics (the run id stays the method's: the byte counts depend on its length).
    let place = if extra.is_empty() {
        name.clone()
    } else {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        extra.hash(&mut h);
        format!("{name}-{:08x}", h.finish() as u32)
    };
    let dir = scratch(&format!("method-{place}"));
    let port = free_port();
    let prefix = format!("edgecfl/t-{place}");
    let mut flags = run_flags(PARTITION, CLIENTS, 2, 0.5, 3);
    if extra.contains(&"--data") {
        // Another data set's directory instead of the bundled subset's.
        let at = flags
            .iter()
            .position(|f| f == "--data")
            .expect("run_flags names --data");
        flags.drain(at..at + 2);
    }
    flags.extend(["--algorithm", method].map(String::from));
    flags.extend(extra.iter().map(|s| s.to_string()));
    let mut net: Vec<String> = net.iter().map(|s| s.to_string()).collect();
    net.extend(
        ["--port", &port.to_string(), "--listen", "127.0.0.1"]
            .into_iter()
            .chain(["--prefix", &prefix, "--run-id", &name])
            .map(String::from),
    );
    let mut coordinator = edgecfl_tests::serve(&dir, CLIENTS, &net, &flags);
    wait_listening(port, Duration::from_secs(60));
    // The clients read the data set the run names, from the same directory.
    let data: Vec<String> = flags
        .windows(2)
        .filter(|w| w[0] == "--data" || w[0] == "--dataset")
        .flat_map(|w| w.to_vec())
        .collect();
    let clients = fleet_on(
        &dir,
        port,
        &prefix,
        PARTITION,
        0..CLIENTS,
        CLIENTS,
        3,
        &data,
    );
    coordinator.wait_ok(Duration::from_secs(600), &dir.join("coordinator.log"));
    for (mut p, log) in clients {
        p.wait_ok(Duration::from_secs(30), &log);
    }
    (summary(&dir.join("out")), flags, dir)
}

/// The run id (and scratch name) of `method` served with `net`.
fn run_id(method: &str, net: &[&str]) -> String {
    format!("{method}{}", net.concat())
}

/// The summary's message byte counts (`bytes_up`, `bytes_down`) against what the coordinator
/// measured on the wire: every payload is an envelope (version, run id `run`, round below 128:
/// 3 + its length bytes) around one message.
fn assert_bytes_are_the_wire(s: &Value, run: &str) {
    let header = 3 + run.len() as u64;
    let w = &s["wire_bytes"];
    let field = |k: &str| {
        w[k].as_u64()
            .unwrap_or_else(|| panic!("wire_bytes.{k}: {w:#}"))
    };
    let up =
        field("signature_up") + field("update_up") + field("evaluation_up") + field("relevance_up");
    assert_eq!(
        s["bytes_up"].as_u64(),
        Some(up - field("answers_up") * header),
        "{run}: {w:#}"
    );
    assert_eq!(field("broadcast"), 0, "{run}: no relay here");
    assert_eq!(
        s["bytes_down"].as_u64(),
        Some(field("down") - field("messages_down") * header),
        "{run}: {w:#}"
    );
    assert_eq!(
        s["bytes_up_per_client"].as_u64(),
        Some(s["bytes_up"].as_u64().unwrap() / CLIENTS as u64)
    );
}

/// Serves `method` with `extra` flags to a fleet of [`CLIENTS`] and compares with `simulate`.
fn served_equals_simulated(method: &str, extra: &[&str]) -> Value {
    served_equals_simulated_in(method, extra).0
}

/// [`served_equals_simulated`], with the run's scratch directory.
fn served_equals_simulated_in(method: &str, extra: &[&str]) -> (Value, PathBuf) {
    let (served, flags, dir) = serve(method, extra, &[]);
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
        "bytes_up",
        "bytes_down",
    ] {
        assert_eq!(served[key], twin[key], "{method}: {key}");
    }
    assert_bytes_are_the_wire(&served, &run_id(method, &[]));
    let (a, b) = (accuracies(&served), accuracies(&twin));
    assert_eq!(a.len(), b.len());
    for (round, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            (x - y).abs() <= TOLERANCE,
            "{method} round {}: served {x}, simulated {y}",
            round + 1
        );
    }
    (served, dir)
}

fn final_clusters(s: &Value) -> u64 {
    s["n_clusters"].as_u64().unwrap_or(0)
}

#[test]
fn fedavg_over_mqtt_equals_simulate() {
    let s = served_equals_simulated("fedavg", &[]);
    assert_eq!(final_clusters(&s), 1);
}

#[test]
fn local_over_mqtt_equals_simulate() {
    let s = served_equals_simulated("local", &[]);
    assert_eq!(final_clusters(&s), CLIENTS as u64);
}

#[test]
fn random_over_mqtt_equals_simulate() {
    let s = served_equals_simulated("random", &["--lambda", "k=3"]);
    assert_eq!(final_clusters(&s), 3);
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

#[test]
fn stocfl_over_mqtt_equals_simulate() {
    served_equals_simulated("stocfl", &["--tau", "0.5", "--mu", "0.1"]);
}

#[test]
fn ifca_over_mqtt_equals_simulate() {
    let s = served_equals_simulated("ifca", &["--clusters", "4"]);
    assert_eq!(final_clusters(&s), 4);
}

#[test]
fn adacfl_over_mqtt_equals_simulate() {
    let s = served_equals_simulated("adacfl", &[]);
    assert_eq!(s["ari"].as_f64(), Some(1.0), "{s:#}");
}

#[test]
fn cfl_over_mqtt_equals_simulate() {
    // ε₁ huge and ε₂ zero: every cluster with two or more sampled members splits each round,
    // so the run exercises the bi-partition and the cluster ids sent with every model.
    let s = served_equals_simulated("cfl", &["--eps1", "1000", "--eps2", "0"]);
    assert!(final_clusters(&s) >= 2, "{s:#}");
}

#[test]
fn fedclust_members_start_over_mqtt_equals_simulate() {
    // Round 0 uploads the whole warmed-up LeNet-5 (44 426 floats); the server cuts the final
    // layer out of it to cluster and starts each cluster from its members' mean.
    let s = served_equals_simulated("fedclust", &["--cluster-start", "members"]);
    assert_eq!(s["ari"].as_f64(), Some(1.0), "{s:#}");
    let model = 44_426 * 4;
    assert_eq!(
        s["upload_bytes_clustering_per_client"].as_u64(),
        Some(model),
        "{s:#}"
    );
    let wire = s["wire_bytes"]["signature_up"].as_u64().unwrap_or(0) / CLIENTS as u64;
    assert!(
        (model..model + 200).contains(&wire),
        "{wire} B per client on the wire"
    );
}

#[test]
fn f16_uploads_are_counted_at_their_wire_size() {
    // AdaCFL: round 0 uploads the smallest FC layer (850 floats) and the label statistics (L as
    // u32, s as f64), then every round trains whole models (44 426 floats), all in f16 here.
    let f16 = ["--upload", "f16"];
    let (s, _, _) = serve("adacfl", &[], &f16);
    let per_client = s["upload_bytes_clustering_per_client"].as_u64();
    assert_eq!(per_client, Some(850 * 2 + 12), "{s:#}");
    // What the coordinator received: that payload plus the envelope (ids, round, framing).
    let wire = s["wire_bytes"]["signature_up"].as_u64().unwrap_or(0) / CLIENTS as u64;
    assert!(
        (850 * 2..850 * 2 + 200).contains(&wire),
        "{wire} B per client on the wire"
    );
    // The summary's byte counts are the f16 messages that came, not 4 bytes a float.
    assert_bytes_are_the_wire(&s, &run_id("adacfl", &f16));
    let updates = s["wire_bytes"]["updates"].as_u64().unwrap();
    assert!(updates > 0);
    let up = s["bytes_up"].as_u64().unwrap();
    let models_f32 = updates * 44_426 * 4;
    assert!(
        up < models_f32 * 6 / 10,
        "{up} B up for {updates} updates: f32-sized ({models_f32} B of models)"
    );
}

/// The first `train` and `test` images (by file name) of each class of CIFAR-10's JPEG copy,
/// linked into an image folder of their own; `None` (the test skipped) without the real data.
fn cifar10_subset(train: usize, test: usize) -> Option<PathBuf> {
    let full = real_data::cifar10_jpg()?;
    let out = scratch(&format!("cifar10-{train}-{test}"));
    for (split, n) in [("train", train), ("test", test)] {
        for class in std::fs::read_dir(full.join(split)).expect("the JPEG copy's classes") {
            let class = class.expect("a class folder").path();
            let mut files: Vec<PathBuf> = std::fs::read_dir(&class)
                .expect("a class folder")
                .map(|e| e.expect("an image").path())
                .collect();
            files.sort();
            let dest = out.join(split).join(class.file_name().expect("a name"));
            std::fs::create_dir_all(&dest).expect("a folder");
            for f in files.iter().take(n) {
                let to = dest.join(f.file_name().expect("a name"));
                std::fs::hard_link(f, &to)
                    .or_else(|_| std::fs::copy(f, &to).map(|_| ()))
                    .expect("an image linked or copied");
            }
        }
    }
    Some(out)
}

/// PACFL on real CIFAR-10 images over MQTT equals simulate and finds the four label groups:
/// `--dataset cifar10` picks the colour LeNet-5, every edge client reads only its shard's JPEGs,
/// and the round-0 subspaces (3 × 3 072 floats per label) cross the wire. 200 training and 50
/// test images a class (300 images a client). On these images the true pairs of clients merge
/// at angles 2.41°, 2.65°, 3.07° and 4.15° and the groups at 4.31° (average linkage, the
/// smallest entry's angle), so `--lambda 4.2` cuts between them; the silhouette's own cut keeps
/// one cluster here (it under-splits, as on the bundled Fashion-MNIST).
#[test]
fn pacfl_on_cifar10_over_mqtt_equals_simulate() {
    let Some(data) = cifar10_subset(200, 50) else {
        return;
    };
    let data = data.display().to_string();
    let (s, dir) = served_equals_simulated_in(
        "pacfl",
        &["--dataset", "cifar10", "--data", &data, "--lambda", "4.2"],
    );
    assert_eq!(s["ari"].as_f64(), Some(1.0), "{s:#}");
    assert_eq!(
        s["config"]["federation"]["dataset"].as_str(),
        Some("cifar10"),
        "{s:#}"
    );
    assert_eq!(s["model"].as_str(), Some("lenet5-rgb"), "{s:#}");
    assert_eq!(final_clusters(&s), 4, "{s:#}");
    // The model a device kept scores, under `edge-client predict` on that device's local test
    // JPEGs (the data set named by the model file), what the device reported at the last round.
    for id in ["c0", "c5"] {
        let shard: Vec<String> = ["--partition", PARTITION, "--seed", "3", "--of", "8"]
            .into_iter()
            .chain(["--index", &id[1..], "--data", &data])
            .map(String::from)
            .collect();
        let v = assert_kept_model_scores_its_report(&dir, &s, id, &shard);
        assert_eq!(v["classes"][0].as_str(), Some("airplane"), "{v}");
    }
}

/// The first `per_class` training and `per_class / 3` test images of each digit of the real
/// MNIST (`../shared/data/mnist`), written as the four IDX files (big-endian magic and sizes,
/// then the bytes); `None` (the test skipped) without the real data.
fn mnist_subset(per_class: usize) -> Option<PathBuf> {
    use edgecfl_shared::data::{DatasetKind, load};
    let full = load(DatasetKind::Mnist, Some(&real_data::real_data("mnist")?)).expect("MNIST");
    let out = scratch(&format!("mnist-{per_class}"));
    for (set, n, images, labels) in [
        (
            &full.train,
            per_class,
            "train-images-idx3-ubyte",
            "train-labels-idx1-ubyte",
        ),
        (
            &full.test,
            per_class / 3,
            "t10k-images-idx3-ubyte",
            "t10k-labels-idx1-ubyte",
        ),
    ] {
        let mut taken = [0; 10];
        let chosen: Vec<usize> = (0..set.len())
            .filter(|&i| {
                let l = usize::from(set.labels[i]);
                taken[l] += 1;
                taken[l] <= n
            })
            .collect();
        let count = (chosen.len() as u32).to_be_bytes();
        let mut img = [
            &0x0803u32.to_be_bytes()[..],
            &count,
            &28u32.to_be_bytes(),
            &28u32.to_be_bytes(),
        ]
        .concat();
        let mut lab = [&0x0801u32.to_be_bytes()[..], &count].concat();
        for &i in &chosen {
            img.extend_from_slice(set.image(i));
            lab.push(set.labels[i]);
        }
        std::fs::write(out.join(images), img).expect("an IDX file");
        std::fs::write(out.join(labels), lab).expect("an IDX file");
    }
    Some(out)
}

/// FedClust on real MNIST digits over MQTT equals simulate and finds the four label groups:
/// `--dataset mnist` on the edge clients (each reads its shard's images from the IDX files) and
/// in the coordinator's summary, 300 training images a digit.
#[test]
fn fedclust_on_mnist_over_mqtt_equals_simulate() {
    let Some(data) = mnist_subset(300) else {
        return;
    };
    let data = data.display().to_string();
    let (s, _) = served_equals_simulated_in("fedclust", &["--dataset", "mnist", "--data", &data]);
    assert_eq!(s["ari"].as_f64(), Some(1.0), "{s:#}");
    assert_eq!(
        s["config"]["federation"]["dataset"].as_str(),
        Some("mnist"),
        "{s:#}"
    );
    assert_eq!(final_clusters(&s), 4, "{s:#}");
}
