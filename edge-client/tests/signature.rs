//! `edge-client signature` end to end: four clients of a two-group partition each write their
//! round-0 upload; clustering the rows recovers the groups.

use std::path::Path;
use std::process::Command;

use edgecfl_shared::cluster::Linkage;
use edgecfl_shared::cluster::clustering::{Lambda, cluster_signatures};
use edgecfl_shared::cluster::metrics::adjusted_rand_index;
use edgecfl_shared::cluster::robust::Guard;

#[test]
fn signatures_from_separate_processes_cluster_by_group() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/fmnist-subset");
    let csv = std::env::temp_dir().join(format!("edgecfl-sig-{}.csv", std::process::id()));
    let _ = std::fs::remove_file(&csv);
    for i in 0..4 {
        let o = Command::new(env!("CARGO_BIN_EXE_edge-client"))
            .args([
                "signature",
                "--partition",
                "groups:01234-56789",
                "--of",
                "4",
            ])
            .args([
                "--index",
                &i.to_string(),
                "--seed",
                "5",
                "--model-seed",
                "5",
            ])
            .args([
                "--data",
                data.to_str().unwrap(),
                "--out",
                csv.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let rows: Vec<Vec<f32>> = std::fs::read_to_string(&csv)
        .unwrap()
        .lines()
        .map(|l| l.split(',').map(|v| v.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), 4);
    assert!(rows.iter().all(|r| r.len() == 850));
    let (c, _) =
        cluster_signatures(&rows, Linkage::Average, Lambda::Clusters(2), Guard::Paper).unwrap();
    // groups:… puts client i in group i % 2.
    assert_eq!(adjusted_rand_index(&c.assignment, &[0, 1, 0, 1]), 1.0);
    let _ = std::fs::remove_file(&csv);
}

#[test]
fn bad_shard_arguments_fail_cleanly() {
    let o = Command::new(env!("CARGO_BIN_EXE_edge-client"))
        .args([
            "signature",
            "--partition",
            "label:2",
            "--index",
            "4",
            "--of",
            "4",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        stderr.contains("--index 4 must be below --of 4"),
        "{stderr}"
    );
}
