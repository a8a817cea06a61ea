//! Attacks by one credentialed fleet member, run as the attacker would: the real edge client,
//! modified where it sends (`edge_client::run::run_with`), on a secured fleet (`coordinator
//! credentials`, `serve --broker-config`, the embedded broker behind its gate, TLS and a login
//! per client), acting only on its own topics and within the rules (issue 28).
//!
//! The scaled signature: the attacker sends its honest round-0 upload multiplied by 10 (on the
//! bundled data ×3 only isolates the attacker; on the demo's full data ×3 already merged every
//! honest cluster, issue 28). Under
//! `--signature-guard paper` (the papers' clustering of the uploads as they came) it wrecks the
//! clustering of everybody; under the default `robust` guard (`cluster::robust`) the honest
//! clients' clusters are those of the clean run (the in-process `simulate` of the same settings,
//! which equals an honest served run: tests/system.rs, tests/methods_system.rs) and their final
//! accuracy is within 2 points of it. The same signature turned around (×−10) is quarantined.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use clap::Parser;
use edge_client::run::{RunArgs, run_with};
use edgecfl_shared::protocol::{Encoding, Tensor, ToCoordinator};
use edgecfl_tests::*;
use serde_json::Value;

/// The demo's fleet: 8 clients in 4 label groups.
const PARTITION: &str = "groups:012-34-56-789";
const CLIENTS: usize = 8;
/// The attacker (group 56, with c4).
const ATTACKER: usize = 5;
const SEED: u64 = 0;

fn ids() -> Vec<String> {
    (0..CLIENTS).map(|i| format!("c{i}")).collect()
}

fn flags() -> Vec<String> {
    run_flags(PARTITION, CLIENTS, 2, 1.0, SEED)
}

#[derive(Parser)]
struct Client {
    #[command(flatten)]
    run: RunArgs,
}

/// A served, secured run of `flags` with client `ATTACKER` sending what `tamper` makes of each
/// of its messages; returns the run's summary.
fn attacked_run(
    name: &str,
    flags: &[String],
    tamper: impl FnMut(&mut ToCoordinator) + Send + 'static,
) -> Value {
    let dir = scratch(name);
    let prefix = format!("edgecfl/t-{name}");
    let creds = dir.join("credentials");
    let o = Command::new(bin("coordinator"))
        .args([
            "credentials",
            "--ids",
            &ids().join(","),
            "--prefix",
            &prefix,
        ])
        .arg("--out")
        .arg(&creds)
        .output()
        .expect("coordinator credentials");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let port = free_port();
    let mut cmd = Command::new(bin("coordinator"));
    cmd.arg("serve")
        .args(flags)
        .args(["--prefix", &prefix, "--run-id", "attacked"])
        .args([
            "--min-clients",
            &CLIENTS.to_string(),
            "--join-timeout",
            "120",
        ])
        .args(["--phase-timeout", "120"])
        .args(["--port", &port.to_string(), "--listen", "127.0.0.1"])
        .arg("--broker-config")
        .arg(creds.join("broker.toml"))
        .arg("--out")
        .arg(dir.join("out"))
        .env_remove("EDGECFL_PASSWORD");
    let coordinator_log = dir.join("coordinator.log");
    let mut coordinator = Proc::spawn(cmd, "coordinator serve", &coordinator_log);
    wait_listening(port, Duration::from_secs(60));

    let broker = format!("mqtts://127.0.0.1:{port}");
    let client_args = |i: usize| -> Vec<String> {
        let id = format!("c{i}");
        let mut a: Vec<String> = ["run", "--broker", &broker, "--id", &id, "--prefix", &prefix]
            .map(String::from)
            .to_vec();
        a.extend(
            [
                "--partition",
                PARTITION,
                "--seed",
                &SEED.to_string(),
                "--index",
                &i.to_string(),
                "--of",
                &CLIENTS.to_string(),
            ]
            .map(String::from),
        );
        for (flag, path) in [
            ("--data", bundled_data()),
            ("--ca", creds.join("ca.pem")),
            (
                "--password-file",
                creds.join("users").join(format!("{id}.password")),
            ),
        ] {
            a.push(flag.into());
            a.push(path.to_str().expect("utf-8 path").into());
        }
        a
    };
    let mut honest: Vec<(Proc, std::path::PathBuf)> = (0..CLIENTS)
        .filter(|&i| i != ATTACKER)
        .map(|i| {
            let log = dir.join(format!("c{i}.log"));
            let mut cmd = Command::new(bin("edge-client"));
            cmd.args(client_args(i)).env_remove("EDGECFL_PASSWORD");
            (Proc::spawn(cmd, &format!("c{i}"), &log), log)
        })
        .collect();
    // The attacker: the same client, its outgoing messages rewritten.
    let attacker_args = client_args(ATTACKER);
    let attacker = std::thread::spawn(move || {
        let cli = Client::try_parse_from(std::iter::once("edge-client".to_string()).chain(
            attacker_args.into_iter().skip(1), // "run" is the subcommand, not an argument here
        ))
        .expect("attacker's arguments");
        let mut tamper = tamper;
        run_with(&cli.run, &mut tamper).map(|_| ())
    });
    coordinator.wait_ok(Duration::from_secs(600), &coordinator_log);
    for (p, log) in &mut honest {
        p.wait_ok(Duration::from_secs(60), log);
    }
    attacker
        .join()
        .expect("the attacker's thread")
        .expect("the attacker's client");
    summary(&dir.join("out"))
}

/// Multiplies a round-0 signature by `factor` (values only; the encoding kept).
fn scale_signature(factor: f32) -> impl FnMut(&mut ToCoordinator) + Send + 'static {
    move |m| {
        if let ToCoordinator::Signature { values } = m {
            let v: Vec<f32> = values
                .decode(None)
                .expect("own signature")
                .iter()
                .map(|x| x * factor)
                .collect();
            *values = Tensor::encode(&v, Encoding::F32);
        }
    }
}

/// The clusters of the clients other than the attacker, as a partition (labels renumbered in
/// order of first appearance).
fn honest_partition(s: &Value) -> Vec<usize> {
    let labels: Vec<u64> = s["assignment"]
        .as_array()
        .expect("assignment")
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != ATTACKER)
        .map(|(_, v)| v.as_u64().expect("label"))
        .collect();
    let mut seen: Vec<u64> = Vec::new();
    labels
        .iter()
        .map(|l| {
            seen.iter().position(|x| x == l).unwrap_or_else(|| {
                seen.push(*l);
                seen.len() - 1
            })
        })
        .collect()
}

/// The honest clients' mean final accuracy.
fn honest_accuracy(s: &Value) -> f64 {
    let acc: Vec<f64> = s["client_accuracy"]
        .as_array()
        .expect("client_accuracy")
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != ATTACKER)
        .map(|(_, v)| v.as_f64().expect("accuracy"))
        .collect();
    acc.iter().sum::<f64>() / acc.len() as f64
}

fn clean_run(dir: &Path, flags: &[String]) -> Value {
    simulate(flags, &dir.join("clean"))
}

#[test]
fn a_scaled_signature_cannot_change_the_honest_clusters() {
    let flags = flags();
    let clean = clean_run(&scratch("attack-clean"), &flags);
    assert_eq!(
        clean["ari"], 1.0,
        "the clean run finds the 4 groups: {clean:#}"
    );

    // The papers' clustering: the attacker against everybody else.
    let mut paper = flags.clone();
    paper.extend(["--signature-guard".into(), "paper".into()]);
    let broken = attacked_run("attack-scale-paper", &paper, scale_signature(10.0));
    assert_ne!(
        honest_partition(&broken),
        honest_partition(&clean),
        "unguarded, the scaled signature is expected to change the honest clusters: {broken:#}"
    );

    // The default guard: the honest clusters and accuracy of the clean run.
    let guarded = attacked_run("attack-scale-robust", &flags, scale_signature(10.0));
    assert_eq!(
        honest_partition(&guarded),
        honest_partition(&clean),
        "honest clusters, attacked {} vs clean {}",
        guarded["assignment"],
        clean["assignment"]
    );
    let (a, c) = (honest_accuracy(&guarded), honest_accuracy(&clean));
    assert!(
        (a - c).abs() <= 0.02,
        "honest clients' final accuracy {a} vs the clean run's {c}"
    );
    println!(
        "scaled signature ×10: ARI paper {} → robust {}; honest accuracy paper {:.4}, robust {a:.4}, clean {c:.4}; rescaled {}, quarantined {}",
        broken["ari"],
        guarded["ari"],
        honest_accuracy(&broken),
        guarded["rescaled"],
        guarded["quarantined"]
    );

    // Turned around as well (×−10): rescaled, it is still far from everybody, so it is
    // quarantined, a cluster of its own, and the others are cut as in the clean run.
    let turned = attacked_run("attack-turn-robust", &flags, scale_signature(-10.0));
    assert_eq!(
        turned["quarantined"],
        serde_json::json!([format!("c{ATTACKER}")])
    );
    assert_eq!(honest_partition(&turned), honest_partition(&clean));
    let t = honest_accuracy(&turned);
    assert!(
        (t - c).abs() <= 0.02,
        "honest clients' final accuracy {t} vs the clean run's {c}"
    );
    println!(
        "turned signature ×−10: robust: honest clusters as clean, honest accuracy {t:.4} (clean {c:.4}); rescaled {}, quarantined {}",
        turned["rescaled"], turned["quarantined"]
    );
}
