//! MT-HFL's hierarchy across processes: `coordinator serve --lps remote` as the GPS, two
//! `coordinator lps` processes as the LPSs and eight edge clients, all separate OS processes on
//! Debian's mosquitto.
//!
//! A spy connection of the test's own sees every LPS ⇄ GPS payload on the broker and checks them
//! against independent truth: each carries exactly the common layers (the tensor's float count,
//! and the payload's byte count computed from postcard's specification), and each average the GPS
//! sends equals the sample-weighted mean of the uploads, computed here. At the end both LPSs hold
//! bitwise the same common layers (the last average) and different other layers. An LPS that dies
//! ends the run with an error naming it, not a hang.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use edgecfl_shared::hierarchy::CommonLayers;
use edgecfl_shared::model::{ModelKind, ParamLayout};
use edgecfl_shared::mqtt::{Inbound, Link, LinkOptions};
use edgecfl_shared::protocol::{BrokerAddr, Envelope, ToGps, ToLps, TopicKind, Topics};
use edgecfl_tests::*;

const PARTITION: &str = "groups:01234-56789";
const CLIENTS: usize = 8;
const SEED: u64 = 5;
const ROUNDS: usize = 2;

fn flags() -> Vec<String> {
    [
        "--algorithm",
        "fedclust",
        "--hierarchy",
        "--lps-rounds",
        "1",
        "--model",
        "mlp",
        "--lambda",
        "k=2",
        "--partition",
        PARTITION,
        "--clients",
        &CLIENTS.to_string(),
        "--rounds",
        &ROUNDS.to_string(),
        "--frac",
        "1.0",
        "--epochs",
        "1",
        "--warmup-epochs",
        "1",
        "--lr",
        "0.05",
        "--seed",
        &SEED.to_string(),
        "--data",
        bundled_data().to_str().expect("utf-8 path"),
    ]
    .map(String::from)
    .to_vec()
}

/// Bytes of `n` as a postcard varint.
fn varint_len(mut n: u64) -> usize {
    let mut len = 1;
    while n >= 0x80 {
        n >>= 7;
        len += 1;
    }
    len
}

/// Payload bytes of an f32 common-layer message by postcard's rules: version, run id, round,
/// variant, the body's fields before the tensor (`head`), encoding, byte length, the floats.
fn expected_len(run: &str, round: u32, head: usize, floats: usize) -> usize {
    varint_len(1)
        + varint_len(run.len() as u64)
        + run.len()
        + varint_len(u64::from(round))
        + 1
        + head
        + 1
        + varint_len(4 * floats as u64)
        + 4 * floats
}

fn read_f32(path: &Path) -> Vec<f32> {
    std::fs::read(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// One LPS upload seen on the broker.
struct Upload {
    lps: String,
    round: u32,
    samples: u64,
    values: Vec<f32>,
}

#[test]
fn remote_lps_processes_share_only_the_common_layers() {
    let start = Instant::now();
    let dir = scratch("lps");
    let (_broker, port) = mosquitto(&dir);
    let prefix = "edgecfl/t-lps";
    let topics = Topics::new(prefix).unwrap();
    let broker = BrokerAddr {
        host: "127.0.0.1".into(),
        port,
        tls: false,
    };
    let url = format!("mqtt://127.0.0.1:{port}");
    let spy = Link::start(LinkOptions {
        subscribe: vec![topics.all_lps_up(), format!("{prefix}/lps/+/down")],
        ..LinkOptions::new(broker.clone(), "spy")
    })
    .unwrap();
    spy.wait_connected(&broker, Duration::from_secs(10))
        .unwrap();

    let lps_ids = ["lps-a", "lps-b"];
    let mut lps: Vec<(Proc, PathBuf, PathBuf)> = lps_ids
        .iter()
        .map(|id| {
            let out = dir.join(id);
            let log = dir.join(format!("{id}.log"));
            let mut cmd = Command::new(bin("coordinator"));
            cmd.args(["lps", "--broker", &url, "--id", id, "--prefix", prefix])
                .args(["--assign-timeout", "120", "--gps-timeout", "120"])
                .arg("--out")
                .arg(&out);
            (Proc::spawn(cmd, id, &log), log, out)
        })
        .collect();
    let gps_log = dir.join("coordinator.log");
    let mut cmd = Command::new(bin("coordinator"));
    cmd.arg("serve")
        .args(flags())
        .args(["--broker", &url, "--prefix", prefix, "--run-id", "lps-run"])
        .args(["--lps", "remote", "--min-clients", &CLIENTS.to_string()])
        .args(["--join-timeout", "120", "--phase-timeout", "60"])
        .arg("--out")
        .arg(dir.join("gps"));
    let mut gps = Proc::spawn(cmd, "coordinator serve --lps remote", &gps_log);
    let clients = fleet(&dir, port, prefix, PARTITION, CLIENTS, SEED);

    gps.wait_ok(Duration::from_secs(300), &gps_log);
    for (p, log, _) in &mut lps {
        p.wait_ok(Duration::from_secs(30), log);
    }
    for (mut p, log) in clients {
        p.wait_ok(Duration::from_secs(30), &log);
    }

    let common = CommonLayers::new(ModelKind::Mlp, None).unwrap();
    let common_len = common.len();
    assert_eq!(common_len, 784 * 32 + 32);
    let model_len = ParamLayout::of(ModelKind::Mlp).len();

    // Every LPS ⇄ GPS payload the broker carried.
    let mut uploads: Vec<Upload> = Vec::new();
    let mut averages: Vec<(String, u32, Vec<f32>)> = Vec::new();
    let mut assigned = 0;
    let mut up_bytes = Vec::new();
    while let Some(ev) = spy.recv_until(Instant::now() + Duration::from_millis(500)) {
        let Inbound::Message { topic, payload, .. } = ev else {
            continue;
        };
        let (lps, kind) = topics.parse_lps(&topic).expect("an LPS topic");
        match kind {
            TopicKind::Up => {
                let env = Envelope::<ToGps>::from_bytes(&payload).unwrap();
                if let ToGps::Common {
                    samples,
                    accuracy,
                    values,
                } = &env.body
                {
                    let floats = values.decode(None).unwrap();
                    assert_eq!(floats.len(), common_len, "{lps} round {}", env.round);
                    let head = varint_len(*samples) + accuracy.map_or(1, |_| 9);
                    assert_eq!(
                        payload.len(),
                        expected_len("lps-run", env.round, head, common_len),
                        "{lps}: only the common layers go up"
                    );
                    up_bytes.push((lps.to_string(), env.round, payload.len() as u64));
                    uploads.push(Upload {
                        lps: lps.into(),
                        round: env.round,
                        samples: *samples,
                        values: floats,
                    });
                }
            }
            TopicKind::Down => {
                let env = Envelope::<ToLps>::from_bytes(&payload).unwrap();
                match env.body {
                    ToLps::Assign(a) => {
                        assigned += 1;
                        assert_eq!(a.initial.len(), model_len);
                    }
                    ToLps::Common { values } => {
                        let floats = values.decode(None).unwrap();
                        assert_eq!(
                            payload.len(),
                            expected_len("lps-run", env.round, 0, common_len),
                            "{lps}: only the common layers come down"
                        );
                        averages.push((lps.to_string(), env.round, floats));
                    }
                    ToLps::Finish | ToLps::Resend => {}
                }
            }
            TopicKind::Status => unreachable!("not subscribed"),
        }
    }
    assert_eq!(assigned, 2);
    assert_eq!(
        uploads.len(),
        2 * ROUNDS,
        "one upload per LPS per GPS round"
    );
    assert_eq!(
        averages.len(),
        2 * ROUNDS,
        "one average per LPS per GPS round"
    );

    // Each average is the sample-weighted mean of that round's uploads (computed here in f64),
    // and both LPSs got the same one.
    for g in 1..=ROUNDS as u32 {
        let ups: Vec<&Upload> = uploads.iter().filter(|u| u.round == g).collect();
        assert_eq!(ups.len(), 2);
        assert_ne!(ups[0].lps, ups[1].lps);
        let total: u64 = ups.iter().map(|u| u.samples).sum();
        let downs: Vec<&(String, u32, Vec<f32>)> = averages.iter().filter(|a| a.1 == g).collect();
        assert_eq!(downs.len(), 2);
        assert_eq!(
            downs[0].2, downs[1].2,
            "GPS round {g}: same average to every LPS"
        );
        for (i, &avg) in downs[0].2.iter().enumerate() {
            let want = ups
                .iter()
                .map(|u| u.samples as f64 * f64::from(u.values[i]))
                .sum::<f64>()
                / total as f64;
            assert!(
                (f64::from(avg) - want).abs() <= 1e-6 * (1.0 + want.abs()),
                "GPS round {g}, float {i}: {avg} vs {want}"
            );
        }
    }
    let last_average = &averages.iter().find(|a| a.1 == ROUNDS as u32).unwrap().2;

    // The GPS's own account.
    let s = summary(&dir.join("gps"));
    assert_eq!(s["lps"], "remote");
    assert_eq!(s["n_clusters"], 2, "{s:#}");
    assert_eq!(s["ari"].as_f64(), Some(1.0), "{s:#}");
    let g = &s["gps"];
    assert_eq!(g["gps_rounds"], ROUNDS);
    assert_eq!(g["common_len"], common_len);
    assert_eq!(g["common_layers"], "fc1");
    let records = g["lps"].as_array().unwrap();
    assert_eq!(records.len(), 2);
    let mut members = 0;
    for r in records {
        let id = r["id"].as_str().unwrap();
        assert_eq!(r["up_floats"], serde_json::json!([common_len, common_len]));
        let seen: Vec<u64> = up_bytes
            .iter()
            .filter(|(l, _, _)| l == id)
            .map(|(_, _, b)| *b)
            .collect();
        let counted: Vec<u64> = r["up_bytes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(
            counted, seen,
            "{id}: the GPS counts the bytes the broker carried"
        );
        assert!(r["done"]["final_accuracy"].as_f64().unwrap() > 0.5, "{r:#}");
        members += r["members"].as_array().unwrap().len();
    }
    assert_eq!(members, CLIENTS);
    assert!(g["final_accuracy"].as_f64().unwrap() > 0.5, "{g:#}");

    // The LPSs' final models: the same common layers (the last average, bit for bit), their own
    // other layers.
    let mut models = Vec::new();
    for (_, _, out) in &lps {
        let ls = summary(out);
        assert_eq!(ls["gps_rounds"], ROUNDS);
        assert_eq!(ls["accuracy_per_round"].as_array().unwrap().len(), ROUNDS);
        let model = read_f32(&out.join("model.f32"));
        let part = read_f32(&out.join("common.f32"));
        assert_eq!(model.len(), model_len);
        assert_eq!(part.len(), common_len);
        assert_eq!(
            common
                .selection()
                .extract(&model)
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>(),
            part.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        // Its members kept its model, sent by the LPS at the end.
        for id in ls["members"].as_array().unwrap() {
            let id = id.as_str().unwrap();
            let kept = edgecfl_shared::model_file::read(&kept_model(&dir, id)).unwrap();
            assert!(
                kept.params
                    .values
                    .iter()
                    .map(|v| v.to_bits())
                    .eq(model.iter().map(|v| v.to_bits())),
                "{id} kept another model than its LPS's"
            );
            assert_eq!(kept.meta.run_id.as_deref(), Some("lps-run"));
        }
        models.push((model, part));
    }
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(&models[0].1),
        bits(&models[1].1),
        "identical common layers"
    );
    assert_eq!(
        bits(&models[0].1),
        bits(last_average),
        "= the last GPS average"
    );
    // The other layers: the model with its common layers zeroed.
    let rest = |m: &[f32]| {
        let mut m = m.to_vec();
        common.selection().insert(&mut m, &vec![0.0; common_len]);
        m
    };
    assert_ne!(
        bits(&rest(&models[0].0)),
        bits(&rest(&models[1].0)),
        "each LPS keeps its own other layers"
    );

    // The GPS heard none of the clients' LPS traffic: its log shows no ignored message.
    let log = std::fs::read_to_string(&gps_log).unwrap();
    assert!(!log.contains("ignored"), "{log}");
    assert_eq!(s["rejected_total"], 0);
    assert!(
        start.elapsed() < Duration::from_secs(120),
        "took {:?}",
        start.elapsed()
    );
}

#[test]
fn dead_lps_ends_the_run_with_an_error_that_names_it() {
    let dir = scratch("lps-dead");
    let (_broker, port) = mosquitto(&dir);
    let prefix = "edgecfl/t-lps-dead";
    let topics = Topics::new(prefix).unwrap();
    let broker = BrokerAddr {
        host: "127.0.0.1".into(),
        port,
        tls: false,
    };
    let url = format!("mqtt://127.0.0.1:{port}");
    let spy = Link::start(LinkOptions {
        subscribe: vec![format!("{prefix}/lps/+/down")],
        ..LinkOptions::new(broker.clone(), "spy")
    })
    .unwrap();
    spy.wait_connected(&broker, Duration::from_secs(10))
        .unwrap();
    let mut lps: Vec<(Proc, PathBuf)> = ["lps-a", "lps-b"]
        .iter()
        .map(|id| {
            let log = dir.join(format!("{id}.log"));
            let mut cmd = Command::new(bin("coordinator"));
            cmd.args(["lps", "--broker", &url, "--id", id, "--prefix", prefix])
                .arg("--out")
                .arg(dir.join(id));
            (Proc::spawn(cmd, id, &log), log)
        })
        .collect();
    let clients_n = 4;
    let gps_log = dir.join("coordinator.log");
    let mut flags = flags();
    let at = flags.iter().position(|f| f == "--clients").unwrap();
    flags[at + 1] = clients_n.to_string();
    let mut cmd = Command::new(bin("coordinator"));
    cmd.arg("serve")
        .args(flags)
        .args(["--broker", &url, "--prefix", prefix, "--lps", "remote"])
        .args(["--min-clients", &clients_n.to_string()])
        .args(["--join-timeout", "120", "--phase-timeout", "60"])
        .arg("--out")
        .arg(dir.join("gps"));
    let mut gps = Proc::spawn(cmd, "coordinator serve --lps remote", &gps_log);
    let clients = fleet(&dir, port, prefix, PARTITION, clients_n, SEED);

    // Kill lps-b as soon as it has its cluster.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let Some(ev) = spy.recv_until(deadline) else {
            panic!("no assignment for lps-b");
        };
        if let Inbound::Message { topic, payload, .. } = ev
            && topics.parse_lps(&topic) == Some(("lps-b", TopicKind::Down))
            && matches!(
                Envelope::<ToLps>::from_bytes(&payload).map(|e| e.body),
                Ok(ToLps::Assign(_))
            )
        {
            break;
        }
    }
    let killed_at = Instant::now();
    let (mut victim, _) = lps.remove(1);
    victim.child.kill().unwrap();
    victim.child.wait().unwrap();

    // Its last will ends the run at once (not after the 60 s phase budget).
    let status = gps.wait_exit(Duration::from_secs(50), &gps_log);
    assert!(!status.success());
    assert!(killed_at.elapsed() < Duration::from_secs(30));
    let log = std::fs::read_to_string(&gps_log).unwrap();
    assert!(log.contains("LPS lps-b (cluster 1) is gone"), "{log}");
    // The survivor and the clients are told to finish.
    let (mut survivor, log_a) = lps.remove(0);
    let status = survivor.wait_exit(Duration::from_secs(30), &log_a);
    let a = std::fs::read_to_string(&log_a).unwrap();
    assert!(
        !status.success() && a.contains("the GPS finished the run"),
        "{a}"
    );
    for (mut p, log) in clients {
        p.wait_ok(Duration::from_secs(30), &log);
    }
}

/// One run of the hierarchy on its own mosquitto: 2 LPS processes, `CLIENTS` edge clients and
/// `serve --lps remote` as the GPS, with the run id `gps-resume` and `--out` `dir/gps`.
struct Hierarchy {
    dir: PathBuf,
    port: u16,
    _broker: Proc,
    gps: Proc,
    lps: Vec<(Proc, PathBuf, PathBuf)>,
    clients: Vec<(Proc, PathBuf)>,
}

const RESUME_PREFIX: &str = "edgecfl/t-gps-resume";

fn gps_serve(dir: &Path, port: u16, log: &str, resume: bool) -> Proc {
    let mut cmd = Command::new(bin("coordinator"));
    cmd.arg("serve")
        .args(flags())
        .args(["--broker", &format!("mqtt://127.0.0.1:{port}")])
        .args(["--prefix", RESUME_PREFIX, "--run-id", "gps-resume"])
        .args(["--lps", "remote", "--min-clients", &CLIENTS.to_string()])
        .args(["--join-timeout", "120", "--phase-timeout", "60"])
        .arg("--out")
        .arg(dir.join("gps"));
    if resume {
        cmd.arg("--resume").arg(dir.join("gps"));
    }
    Proc::spawn(cmd, "coordinator serve --lps remote", &dir.join(log))
}

fn hierarchy(name: &str) -> Hierarchy {
    let dir = scratch(name);
    let (broker, port) = mosquitto(&dir);
    let url = format!("mqtt://127.0.0.1:{port}");
    let lps = ["lps-a", "lps-b"]
        .iter()
        .map(|id| {
            let out = dir.join(id);
            let log = dir.join(format!("{id}.log"));
            let mut cmd = Command::new(bin("coordinator"));
            cmd.args([
                "lps",
                "--broker",
                &url,
                "--id",
                id,
                "--prefix",
                RESUME_PREFIX,
            ])
            .args(["--assign-timeout", "120", "--gps-timeout", "120"])
            .arg("--out")
            .arg(&out);
            (Proc::spawn(cmd, id, &log), log, out)
        })
        .collect();
    let gps = gps_serve(&dir, port, "coordinator.log", false);
    let clients = fleet(&dir, port, RESUME_PREFIX, PARTITION, CLIENTS, SEED);
    Hierarchy {
        dir,
        port,
        _broker: broker,
        gps,
        lps,
        clients,
    }
}

impl Hierarchy {
    /// Waits for every process to end well; returns the GPS's summary without its timings, and
    /// each LPS's summary (timings aside) and final model.
    fn outcome(mut self) -> (serde_json::Value, Vec<(serde_json::Value, Vec<u32>)>) {
        for (p, log, _) in &mut self.lps {
            p.wait_ok(Duration::from_secs(120), log);
        }
        for (p, log) in &mut self.clients {
            p.wait_ok(Duration::from_secs(60), log);
        }
        let mut gps = summary(&self.dir.join("gps"));
        let g = gps.as_object_mut().unwrap();
        for key in ["wall_seconds", "config", "broker", "wire_bytes"] {
            g.remove(key);
        }
        for r in g["gps"]["lps"].as_array_mut().unwrap() {
            r["done"].as_object_mut().unwrap().remove("wall_seconds");
        }
        let lps = self
            .lps
            .iter()
            .map(|(_, _, out)| {
                let mut s = summary(out);
                let m = s.as_object_mut().unwrap();
                for key in ["wall_seconds", "config", "broker", "wire_bytes"] {
                    m.remove(key);
                }
                let bits = read_f32(&out.join("model.f32"))
                    .iter()
                    .map(|v| v.to_bits())
                    .collect();
                (s, bits)
            })
            .collect();
        (gps, lps)
    }
}

/// `kill -9` of the GPS (`serve --lps remote`) at every point of its GPS rounds in turn (when
/// the first LPS's common layers of GPS round k reach the broker, k = 1..ROUNDS, and when its
/// first final report does), each time followed by `serve --resume`: the LPS processes wait, the
/// resumed GPS sends its last decision again and asks them to send again what it may have lost,
/// and after the last resume the run ends exactly as an uninterrupted one: the same GPS summary
/// (timings aside) and bitwise the same final LPS models. Every step, not one drawn from the
/// clock (issue 53 §1).
#[test]
fn gps_killed_at_every_step_and_resumed_gives_the_uninterrupted_result() {
    let clean = hierarchy("gps-resume-clean");
    let mut gps = clean.gps;
    let log = clean.dir.join("coordinator.log");
    gps.wait_ok(Duration::from_secs(300), &log);
    let clean = Hierarchy { gps, ..clean };
    let (expected_gps, expected_lps) = clean.outcome();

    let mut run = hierarchy("gps-resume");
    let topics = Topics::new(RESUME_PREFIX).unwrap();
    // k in 1..=ROUNDS: at GPS round k's first upload; ROUNDS + 1: at the first final report.
    // The broker is not the GPS's: one watcher sees every GPS in turn.
    let link = spy(run.port, "observer", vec![topics.all_lps_up()]);
    let mut log = run.dir.join("coordinator.log");
    let mut resumed = Vec::new();
    for k in 1..=ROUNDS as u32 + 1 {
        eprintln!("killing the GPS at step {k}");
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let Some(ev) = link.recv_until(deadline) else {
                panic!("step {k} never came");
            };
            let Inbound::Message { payload, .. } = ev else {
                continue;
            };
            let env = Envelope::<ToGps>::from_bytes(&payload).unwrap();
            let at = match env.body {
                ToGps::Common { .. } => env.round == k,
                ToGps::Done(_) => k == ROUNDS as u32 + 1,
                _ => false,
            };
            if at {
                break;
            }
        }
        run.gps.child.kill().unwrap(); // SIGKILL
        run.gps.child.wait().unwrap();
        let saved: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(run.dir.join("gps/gps-checkpoint.json")).unwrap(),
        )
        .unwrap();
        let g = saved["gps_round"].as_u64().unwrap() as u32;
        assert!(
            g + 1 == k || g == k.min(ROUNDS as u32),
            "checkpoint of GPS round {g}, killed at step {k} ({})",
            log.display()
        );
        let name = format!("resumed-{k}.log");
        run.gps = gps_serve(&run.dir, run.port, &name, true);
        log = run.dir.join(&name);
        resumed.push((log.clone(), g));
    }
    run.gps.wait_ok(Duration::from_secs(300), &log);
    drop(link);
    for (log, g) in resumed {
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.contains(&format!("resumed after GPS round {g}")),
            "{text}"
        );
    }
    let (got_gps, got_lps) = run.outcome();
    assert_eq!(
        got_gps, expected_gps,
        "resumed:\n{got_gps:#}\nuninterrupted:\n{expected_gps:#}"
    );
    for ((got, got_model), (want, want_model)) in got_lps.iter().zip(&expected_lps) {
        assert_eq!(got, want, "LPS summary");
        assert!(got_model == want_model, "LPS final model differs");
    }
}
