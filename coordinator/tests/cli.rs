//! The `coordinator` binary end to end: `simulate` writes its result files; bad input gives a
//! clear error and a failure exit code, never a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn coordinator(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_coordinator"))
        .args(args)
        .output()
        .expect("run coordinator")
}

fn subset() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/fmnist-subset")
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("edgecfl-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn simulate_writes_summary_csv_clusters_and_plots() {
    let out = temp_dir("simulate");
    let data = subset();
    let o = coordinator(&[
        "simulate",
        "--partition",
        "groups:01234-56789",
        "--clients",
        "6",
        "--rounds",
        "2",
        "--epochs",
        "1",
        "--frac",
        "0.5",
        "--seed",
        "3",
        "--data",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    for key in [
        "algorithm",
        "partition",
        "n_clients",
        "n_clusters",
        "ari",
        "accuracy_per_round",
        "final_accuracy",
        "upload_bytes_clustering_per_client",
        "wall_seconds",
    ] {
        assert!(summary.get(key).is_some(), "summary.json lacks {key}");
    }
    assert_eq!(summary["algorithm"], "fedclust");
    assert_eq!(summary["partition"], "groups:01234-56789");
    assert_eq!(summary["n_clients"], 6);
    assert_eq!(summary["upload_bytes_clustering_per_client"], 850 * 4);
    assert_eq!(summary["accuracy_per_round"].as_array().unwrap().len(), 2);
    let csv = std::fs::read_to_string(out.join("rounds.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
    assert!(csv.starts_with("round,sampled,received,train_loss,accuracy"));
    for f in [
        "clusters.json",
        "accuracy.svg",
        "dendrogram.svg",
        "distances.svg",
    ] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn on_the_cpu_the_mlp_trains_in_cohorts_of_ten_unless_told_and_lenet_alone() {
    let data = subset();
    let run = |model: &str, extra: &[&str]| {
        let out = temp_dir(&format!("cohort-{model}-{}", extra.len()));
        let mut args = vec![
            "simulate",
            "--algorithm",
            "fedavg",
            "--model",
            model,
            "--partition",
            "label:2",
            "--clients",
            "12",
            "--rounds",
            "1",
            "--epochs",
            "1",
            "--frac",
            "1",
            "--seed",
            "1",
            "--data",
            data.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let o = coordinator(&args);
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{stderr}");
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        let _ = std::fs::remove_dir_all(&out);
        (stderr, summary["final_accuracy"].as_f64().unwrap())
    };
    let (default, acc_default) = run("mlp", &[]);
    assert!(default.contains("cohorts: up to 10 clients"), "{default}");
    let (alone, acc_alone) = run("mlp", &["--cohort", "1"]);
    assert!(!alone.contains("cohorts:"), "{alone}");
    assert!(
        (acc_default - acc_alone).abs() < 0.01,
        "{acc_default} vs {acc_alone}"
    );
    let (lenet, _) = run("lenet5", &[]);
    assert!(!lenet.contains("cohorts:"), "{lenet}");
}

/// FEMNIST from LEAF's JSON (written by `shared/tests/python/leaf_femnist.py`; skipped, with a
/// line, without python3 and numpy), one writer a client: a FedAvg run of three writers trains
/// the 62-way LeNet-5 and reports every client.
#[test]
fn simulate_runs_femnist_one_writer_a_client() {
    if !Command::new("python3")
        .args(["-c", "import numpy"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("skipped: needs python3 with numpy (.ci/run installs it)");
        return;
    }
    let (data, out) = (temp_dir("femnist-data"), temp_dir("femnist"));
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/tests/python/leaf_femnist.py");
    let run = Command::new("python3")
        .arg(&script)
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let femnist = |clients: &str, more: &[&str]| {
        let mut args = vec![
            "simulate",
            "--dataset",
            "femnist",
            "--data",
            data.to_str().unwrap(),
            "--partition",
            "writers",
            "--clients",
            clients,
        ];
        args.extend_from_slice(more);
        coordinator(&args)
    };
    let o = femnist(
        "3",
        &[
            "--algorithm",
            "fedavg",
            "--frac",
            "1",
            "--rounds",
            "1",
            "--epochs",
            "1",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["partition"], "writers");
    assert_eq!(summary["n_clients"], 3);
    assert_eq!(summary["client_accuracy"].as_array().unwrap().len(), 3);
    let o = femnist("4", &[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && stderr.contains("only 3 writers"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_dir_all(&data);
}

#[test]
fn bad_flags_and_missing_data_fail_cleanly() {
    let cases: &[(&[&str], &str)] = &[
        (&["simulate", "--frac", "1.5"], "frac"),
        // The flags only simulate takes (issue 53 §3): refused by serve and demo before anything
        // starts.
        (
            &["serve", "--newcomers", "2"],
            "unexpected argument '--newcomers'",
        ),
        (
            &["serve", "--join-round", "2"],
            "unexpected argument '--join-round'",
        ),
        (
            &["serve", "--cohort", "4"],
            "unexpected argument '--cohort'",
        ),
        (
            &["demo", "--newcomers", "2"],
            "unexpected argument '--newcomers'",
        ),
        (
            &["demo", "--join-round", "2"],
            "unexpected argument '--join-round'",
        ),
        (&["demo", "--cohort", "4"], "unexpected argument '--cohort'"),
        (&["simulate", "--cohort", "0"], "cohort"),
        (&["bench", "--cohorts", "0"], "cohort"),
        (
            &["simulate", "--clients", "4", "--newcomers", "3"],
            "newcomers",
        ),
        (
            &[
                "simulate",
                "--newcomers",
                "2",
                "--rounds",
                "2",
                "--join-round",
                "3",
            ],
            "join-round",
        ),
        (&["simulate", "--partition", "label:0"], "label"),
        (
            &["serve", "--partition", "writers"],
            "writers needs a data set that records its writers (femnist)",
        ),
        (&["simulate", "--lambda=-3"], "lambda"),
        (
            &["simulate", "--data", "/nonexistent/fmnist", "--rounds", "1"],
            "/nonexistent/fmnist",
        ),
        (
            &["simulate", "--config", "/nonexistent/run.toml"],
            "/nonexistent/run.toml",
        ),
        // Checked before any process starts: the demo's 4 label groups, 3 clients.
        (
            &["demo", "--clients", "3"],
            "4 label groups need at least 4 clients, got 3",
        ),
        (
            &["serve", "--clients", "2", "--partition", "pairs"],
            "label groups need at least",
        ),
        // A served run starts with 2 clients: one is refused at once, not after the join's
        // timeout (300 s by default).
        (
            &["serve", "--clients", "1", "--partition", "iid"],
            "--clients 1: a served run needs at least 2 clients",
        ),
        (
            &["demo", "--clients", "1", "--partition", "iid"],
            "--clients 1: a served run needs at least 2 clients",
        ),
        (
            &[
                "serve",
                "--clients",
                "4",
                "--min-clients",
                "5",
                "--partition",
                "iid",
            ],
            "--min-clients 5: must be between 2 and --clients (4)",
        ),
    ];
    for (args, needle) in cases {
        let o = coordinator(args);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[test]
fn generate_config_round_trips() {
    let o = coordinator(&["generate-config"]);
    assert!(o.status.success());
    let dir = temp_dir("config");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("run.toml");
    std::fs::write(&path, &o.stdout).unwrap();
    // A config with an unknown key is rejected with the file name.
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        format!("{}\nbogus = 1\n", String::from_utf8_lossy(&o.stdout)),
    )
    .unwrap();
    let o = coordinator(&["simulate", "--config", bad.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(stderr.contains("bad.toml"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `demo` with fewer clients than its partition has groups fails at once, naming both, before
/// any process starts (it waited 120 s for clients that could never join).
#[test]
fn demo_with_too_few_clients_for_its_groups_fails_at_once() {
    let out = temp_dir("demo-3");
    let started = std::time::Instant::now();
    let o = coordinator(&[
        "demo",
        "--clients",
        "3",
        "--data",
        subset().to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{stderr}");
    assert!(
        stderr.contains("over --clients 3") && stderr.contains("need at least 4 clients, got 3"),
        "{stderr}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    assert!(!out.join("logs").exists(), "no client was started");
}

/// An edge client of the demo that fails at start-up ends the demo at once, with its error and
/// the end of its log, and its fleet with it (it waited for the join's 120 s, then said "only 7
/// client(s) joined", the client's own error only in its log file). The failing client is a
/// program that writes an error as edge-client does and exits 2 (clap's usage status), for
/// every client but one: the others are real edge clients.
#[test]
fn a_demo_client_that_fails_at_start_ends_the_demo_with_its_error() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("demo-failing-client");
    std::fs::create_dir_all(&dir).unwrap();
    let real = Path::new(env!("CARGO_BIN_EXE_coordinator")).with_file_name("edge-client");
    assert!(
        real.is_file(),
        "{} (built with the workspace)",
        real.display()
    );
    // client-002 fails; the others run the real edge client.
    let client = dir.join("edge-client");
    std::fs::write(
        &client,
        format!(
            "#!/bin/sh\ncase \"$*\" in *client-002*) echo 'error: the data of this board cannot be \
             read (test)' >&2; exit 2;; esac\nexec '{}' \"$@\"\n",
            real.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&client, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = dir.join("out");
    let started = std::time::Instant::now();
    let o = coordinator(&[
        "demo",
        "--client-bin",
        client.to_str().unwrap(),
        "--data",
        subset().to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("edge client client-002 exited (exit status: 2) before the run ended")
            && stderr.contains("error: the data of this board cannot be read (test)")
            && stderr.contains("nothing to resume"),
        "{stderr}"
    );
    // At once: not after the join's 120 s.
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
}
