//! PACFL in process on the bundled Fashion-MNIST subset: its subspaces and angles against numpy
//! (`tests/python/pacfl_angles.py`), the known partition recovered from them, and newcomers
//! placed in their group's cluster.

use std::process::Command;

use edgecfl_shared::algorithms::{self, Algorithm, MethodConfig};
use edgecfl_shared::cluster::clustering::Lambda;
use edgecfl_shared::cluster::subspace::{Angle, client_subspace, proximity};
use edgecfl_shared::data::fmnist::FashionMnist;
use edgecfl_shared::data::partition::{PartitionSpec, partition};
use edgecfl_shared::federation::{FederationConfig, Quiet, RunContext};
use edgecfl_shared::sim::SimPool;
use edgecfl_shared::train::{Backend, LocalData, to_unit};
use serde_json::json;

fn config(angle: Angle) -> MethodConfig {
    let mut cfg = MethodConfig::new(
        Algorithm::Pacfl,
        FederationConfig {
            rounds: 1,
            frac: 0.5,
            epochs: 1,
            lambda: Lambda::Auto,
            seed: 5,
            ..FederationConfig::default()
        },
    );
    cfg.methods.pacfl.pacfl_angle = Some(angle);
    cfg
}

/// Each client's subspace (per label, top 3 left singular vectors) is numpy's SVD of its images,
/// and both proximities are numpy's on them. Skipped, with a line, without python3 and numpy.
#[test]
fn subspaces_and_angles_equal_numpys() {
    let numpy = Command::new("python3")
        .args(["-c", "import numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !numpy {
        eprintln!("skipped: needs python3 with numpy (.ci/run installs it)");
        return;
    }
    let data = FashionMnist::bundled().unwrap();
    let spec: PartitionSpec = "label:2".parse().unwrap();
    let part = partition(&spec, &data.train.labels, 4, 1).unwrap();
    let p = 3;
    let mut clients = Vec::new();
    let mut subspaces = Vec::new();
    for shard in &part.clients {
        // 40 images each: a small file, distinct singular values.
        let local = LocalData::from_dataset(&data.train, &shard.train[..40], 0);
        let s = client_subspace(&local, p).unwrap();
        let px = local.pixels().unwrap();
        let images: Vec<Vec<f32>> = px
            .chunks_exact(784)
            .map(|i| i.iter().map(|&v| to_unit(v)).collect())
            .collect();
        clients.push(json!({
            "images": images,
            "labels": local.labels,
            "subspace_labels": s.labels,
            "columns": s.columns,
        }));
        subspaces.push(s);
    }
    let mut pairs = Vec::new();
    for i in 0..subspaces.len() {
        for j in i + 1..subspaces.len() {
            pairs.push(json!({
                "i": i,
                "j": j,
                "entries": proximity(&subspaces[i], &subspaces[j], Angle::Entries),
                "principal": proximity(&subspaces[i], &subspaces[j], Angle::Principal),
            }));
        }
    }
    let file = std::env::temp_dir().join(format!("edgecfl-pacfl-{}.json", std::process::id()));
    std::fs::write(
        &file,
        serde_json::to_vec(&json!({"d": 784, "p": p, "clients": clients, "pairs": pairs})).unwrap(),
    )
    .unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/pacfl_angles.py");
    let o = Command::new("python3")
        .arg(script)
        .arg(&file)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    let text = String::from_utf8_lossy(&o.stdout);
    print!("{text}");
    assert!(
        o.status.success(),
        "numpy check failed:\n{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Four label groups over 12 clients: PACFL's angles recover them exactly before any training,
/// cut as PACFL cuts, at a threshold in degrees (here the clients of one group are 2.6° to 5.7°
/// apart by PACFL's measure, of two groups 8.5° or more: λ = 7°), or into k = 4 clusters by the
/// smallest principal angle; the run trains on.
#[test]
fn pacfl_recovers_label_groups() {
    let data = FashionMnist::bundled().unwrap();
    let spec: PartitionSpec = "groups:012-34-56-789".parse().unwrap();
    let part = partition(&spec, &data.train.labels, 12, 7).unwrap();
    let truth = part.truth.clone().unwrap();
    for (angle, cut) in [
        (Angle::Entries, Lambda::Distance(7.0)),
        (Angle::Principal, Lambda::Clusters(4)),
    ] {
        let mut pool = SimPool::new(&data, &part, Backend::Flex).unwrap();
        let mut cfg = config(angle);
        cfg.federation.lambda = cut;
        let r = algorithms::run(
            &cfg,
            &mut pool,
            &RunContext::with_truth(truth.clone()),
            &mut Quiet,
        )
        .unwrap();
        assert_eq!(r.ari, Some(1.0), "{angle}: assignment {:?}", r.assignment);
        assert_eq!(r.n_clusters, 4);
        assert_eq!(r.rounds.len(), 1);
    }
}

/// The last two clients join at round 1 as newcomers: each goes to the cluster of its group.
#[test]
fn newcomers_join_their_groups_cluster() {
    let data = FashionMnist::bundled().unwrap();
    let spec: PartitionSpec = "groups:01234-56789".parse().unwrap();
    let part = partition(&spec, &data.train.labels, 10, 3).unwrap();
    let truth = part.truth.clone().unwrap();
    let mut pool = SimPool::new(&data, &part, Backend::Flex).unwrap();
    pool.hold_out(2, 1).unwrap();
    let r = algorithms::run(
        &config(Angle::Entries),
        &mut pool,
        &RunContext::default(),
        &mut Quiet,
    )
    .unwrap();
    assert_eq!(r.newcomers.len(), 2);
    let cluster_of = |client: usize| {
        let p = r.clients.iter().position(|c| c.index == client).unwrap();
        r.assignment[p]
    };
    for newcomer in [8, 9] {
        let mate = (0..8).find(|&c| truth[c] == truth[newcomer]).unwrap();
        assert_eq!(cluster_of(newcomer), cluster_of(mate), "client {newcomer}");
    }
}
