//! Crash and fault tolerance over real brokers (issue 11 §5): a failed run tells its fleet to
//! finish; a stale or forged retained `Hello` never blocks a run; clients killed in round 0 or
//! mid-round are named and the run completes without them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use edgecfl_shared::mqtt::{Inbound, Link};
use edgecfl_shared::protocol::{
    Envelope, Hello, Id, ToClient, ToCoordinator, TopicKind, Topics, text,
};
use edgecfl_tests::*;

/// `coordinator serve` on the embedded broker at `port` (loopback) with `flags`, `extra` and
/// the run's files in `dir/out`, its output in `dir/<log>`.
fn serve_embedded(
    dir: &Path,
    port: u16,
    prefix: &str,
    flags: &[String],
    extra: &[&str],
    log: &str,
) -> Proc {
    let mut cmd = Command::new(bin("coordinator"));
    cmd.arg("serve")
        .args(flags)
        .args(["--port", &port.to_string(), "--listen", "127.0.0.1"])
        .args(["--prefix", prefix])
        .args(extra)
        .arg("--out")
        .arg(dir.join("out"));
    Proc::spawn(cmd, "coordinator serve", &dir.join(log))
}

/// Waits for the first command on a client's `down` topic that `wanted`; returns the client.
fn first_job(link: &Link, topics: &Topics, wanted: impl Fn(&Envelope<ToClient>) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(300);
    while let Some(ev) = link.recv_until(deadline) {
        if let Inbound::Message { topic, payload, .. } = ev
            && let Some((id, TopicKind::Down)) = topics.parse(&topic)
            && let Ok(env) = Envelope::<ToClient>::from_bytes(&payload)
            && wanted(&env)
        {
            return id.to_string();
        }
    }
    panic!("no such job within 300 s");
}

/// Wait for `n` clients (2 minutes at most), and at most a minute for each phase.
fn patient(n: usize) -> Vec<String> {
    [
        "--min-clients",
        &n.to_string(),
        "--join-timeout",
        "120",
        "--phase-timeout",
        "60",
    ]
    .map(String::from)
    .to_vec()
}

/// A served run named `name` on a fresh embedded broker: its scratch directory, port, prefix
/// (`edgecfl/t-<name>`) and coordinator, once the broker listens.
fn start<S: AsRef<str>>(name: &str, flags: &[String], extra: &[S]) -> (PathBuf, u16, String, Proc) {
    let dir = scratch(name);
    let port = free_port();
    let prefix = format!("edgecfl/t-{name}");
    let extra: Vec<&str> = extra.iter().map(AsRef::as_ref).collect();
    let coordinator = serve_embedded(&dir, port, &prefix, flags, &extra, "coordinator.log");
    wait_listening(port, Duration::from_secs(60));
    (dir, port, prefix, coordinator)
}

/// The run fails and every edge client it knew exits cleanly (told to finish), none left
/// reconnecting.
fn assert_failed_and_fleet_finished(
    dir: &Path,
    mut coordinator: Proc,
    clients: Vec<(Proc, PathBuf)>,
) {
    let log = dir.join("coordinator.log");
    assert!(
        !coordinator
            .wait_exit(Duration::from_secs(300), &log)
            .success(),
        "the run should have failed: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    for (mut p, log) in clients {
        assert!(
            p.wait_exit(Duration::from_secs(30), &log).success(),
            "{} failed: {}",
            p.name,
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("finished"), "{text}");
    }
}

/// Too few clients by the join timeout: `serve` fails, and the one client that joined is told
/// to finish instead of waiting (and reconnecting) forever.
#[test]
fn failed_join_tells_the_joined_client_to_finish() {
    let flags = run_flags("groups:012-34-56-789", 4, 1, 1.0, 11);
    let (dir, port, prefix, coordinator) = start("fault-join", &flags, &["--join-timeout", "10"]);
    let clients = fleet_of(&dir, port, &prefix, "groups:012-34-56-789", 0..1, 4, 11);
    assert_failed_and_fleet_finished(&dir, coordinator, clients);
    let text = std::fs::read_to_string(dir.join("coordinator.log")).unwrap();
    assert!(text.contains("only 1 client(s) joined"), "{text}");
}

/// A client killed during round 0 (before its signature is sent) is left out: FedClust
/// clusters the other three, offers it once more in round 1 (turned away: it is gone), the run
/// completes with the three, and `summary.json` names it.
#[test]
fn client_killed_in_round_zero_is_left_out_and_the_run_completes() {
    let partition = "groups:012-34-56-789";
    let flags = run_flags(partition, 4, 2, 1.0, 12);
    let (dir, port, prefix, mut coordinator) = start("fault-round0", &flags, &patient(4));
    let topics = Topics::new(&prefix).unwrap();
    let link = spy(port, "observer", vec![format!("{prefix}/clients/+/down")]);
    let mut clients = fleet(&dir, port, &prefix, partition, 4, 12);
    // The first round-0 job seen: its client is killed before it can answer.
    let victim = first_job(&link, &topics, |env| {
        matches!(env.body, ToClient::Signature { .. })
    });
    let v: usize = victim.trim_start_matches('c').parse().unwrap();
    let (mut killed, _) = clients.remove(v);
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();
    let log = dir.join("coordinator.log");
    coordinator.wait_ok(Duration::from_secs(600), &log);
    for (mut p, log) in clients {
        p.wait_ok(Duration::from_secs(30), &log);
    }
    let s = summary(&dir.join("out"));
    assert_eq!(s["left_out"], serde_json::json!([victim]), "{s:#}");
    assert_eq!(s["n_clients"], 3, "{s:#}");
    let ids = s["client_ids"].as_array().unwrap();
    assert!(!ids.iter().any(|i| i == victim.as_str()), "{s:#}");
    assert_eq!(s["dropped_clients"][&victim]["round"], 0, "{s:#}");
    // Offered once more as a newcomer of round 1, and turned away: it is gone.
    assert_eq!(s["dropped_newcomers"][0]["id"], victim.as_str(), "{s:#}");
    assert_eq!(s["dropped_newcomers"][0]["round"], 1, "{s:#}");
    // Both rounds trained the three that are left.
    let csv = std::fs::read_to_string(dir.join("out/rounds.csv")).unwrap();
    let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 3, "{csv}");
    for row in &rows[1..] {
        assert_eq!(&row[1..3], &["3", "3"], "{csv}");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(&format!("{victim} sent no round-0 upload")),
        "{text}"
    );
}

/// Retained `Hello`s of clients that are not there (a forged one under a fresh id, a stale one
/// under an id that sorts first) wait for the coordinator before the real clients join: they
/// are pinged, never answer, and never take a slot; the four real clients fill the four slots
/// and the run completes (over mosquitto).
#[test]
fn stale_or_forged_retained_hello_never_blocks_the_join() {
    let dir = scratch("fault-ghost");
    let (_broker, port) = mosquitto(&dir);
    let prefix = "edgecfl/t-fault-ghost";
    let partition = "groups:012-34-56-789";
    let link = spy(port, "mallory", vec![]);
    let hello = |samples| {
        Envelope::new(
            Id::new(),
            0,
            ToCoordinator::Hello(Hello {
                samples,
                test_samples: 100,
                backend: text("flex"),
                shard: None,
            }),
        )
        .to_bytes()
    };
    for (ghost, samples) in [("ghost", 600), ("a-stale-one", 10_000)] {
        link.publish(
            &format!("{prefix}/clients/{ghost}/status"),
            hello(samples),
            true,
        )
        .unwrap();
    }
    link.disconnect();
    let flags = run_flags(partition, 4, 1, 1.0, 13);
    let mut cmd = Command::new(bin("coordinator"));
    cmd.arg("serve")
        .args(&flags)
        .args(["--broker", &format!("mqtt://127.0.0.1:{port}")])
        .args(["--prefix", prefix, "--min-clients", "4"])
        .args(["--join-timeout", "120", "--phase-timeout", "60"])
        .arg("--out")
        .arg(dir.join("out"));
    let log = dir.join("coordinator.log");
    let mut coordinator = Proc::spawn(cmd, "coordinator serve", &log);
    let clients = fleet(&dir, port, prefix, partition, 4, 13);
    coordinator.wait_ok(Duration::from_secs(600), &log);
    for (mut p, log) in clients {
        p.wait_ok(Duration::from_secs(30), &log);
    }
    let s = summary(&dir.join("out"));
    assert_eq!(s["n_clients"], 4, "{s:#}");
    let ids: Vec<&str> = s["client_ids"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c.as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, ["c0", "c1", "c2", "c3"], "{s:#}");
    assert_eq!(s["phase_timeouts"], 0, "{s:#}");
    assert_eq!(s["rejected_total"], 0, "{:#}", s["rejected"]);
    assert!(s["wire_bytes"]["probe_down"].as_u64().unwrap() > 0, "{s:#}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("no answer to the ping from a-stale-one, ghost"),
        "{text}"
    );
}

/// 30 % of the fleet (3 of 10 clients, one in each of three groups) killed with SIGKILL while
/// round 1 trains: every round completes (their last wills end the waits, at worst a phase
/// timeout), and `summary.json` names who dropped in which round.
#[test]
fn a_third_of_the_fleet_killed_mid_round_the_run_completes_and_names_them() {
    const N: usize = 10;
    let partition = "groups:012-34-56-789";
    let flags = run_flags(partition, N, 3, 1.0, 14);
    let (dir, port, prefix, coordinator) = start("fault-killed", &flags, &patient(N));
    let topics = Topics::new(&prefix).unwrap();
    let link = spy(port, "observer", vec![format!("{prefix}/clients/+/down")]);
    let mut clients: Vec<Option<(Proc, PathBuf)>> = fleet(&dir, port, &prefix, partition, N, 14)
        .into_iter()
        .map(Some)
        .collect();
    first_training_command(&link, &topics);
    let victims = [1usize, 4, 7];
    for &v in &victims {
        let (mut p, _) = clients[v].take().unwrap();
        p.child.kill().unwrap();
        p.child.wait().unwrap();
    }
    let mut coordinator = coordinator;
    let log = dir.join("coordinator.log");
    coordinator.wait_ok(Duration::from_secs(600), &log);
    for (mut p, log) in clients.into_iter().flatten() {
        p.wait_ok(Duration::from_secs(30), &log);
    }
    let s = summary(&dir.join("out"));
    let csv = std::fs::read_to_string(dir.join("out/rounds.csv")).unwrap();
    let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    // round,sampled,received,...: every round completed with the 7 survivors.
    assert_eq!(rows.len(), 4, "{csv}");
    for (r, row) in rows[1..].iter().enumerate() {
        assert_eq!(&row[..3], &[&(r + 1).to_string(), "10", "7"], "{csv}");
    }
    assert!(s["phase_timeouts"].as_u64().unwrap() <= 6, "{s:#}");
    // Named: who, when, how.
    let dropped = s["dropped_clients"].as_object().unwrap();
    let names: Vec<&str> = dropped.keys().map(String::as_str).collect();
    assert_eq!(names, ["c1", "c4", "c7"], "{s:#}");
    for d in dropped.values() {
        assert_eq!(d["round"], 1, "{s:#}");
        assert_eq!(d["phase"], "training (round 1)", "{s:#}");
    }
    // In the later phases they are not asked (absent), not waited for.
    let dropouts = s["dropouts"].as_array().unwrap();
    for v in victims {
        let id = format!("c{v}");
        let absent = dropouts
            .iter()
            .filter(|d| d["id"] == id.as_str() && d["reason"] == "absent")
            .count();
        assert!(absent >= 2, "{id}: {dropouts:#?}");
    }
    assert!(s["final_accuracy"].as_f64().unwrap() > 0.5, "{s:#}");
}

/// mosquitto on a fixed port killed while round 1 trains and started again 3 s later (no
/// persistence: retained `Hello`s and sessions are lost): the coordinator and the clients
/// reconnect with backoff, the clients announce themselves again, the awaited jobs are sent
/// again, and the run completes, at the cost of at most one phase timeout.
#[test]
fn broker_restarted_mid_round_the_run_completes() {
    const N: usize = 4;
    let dir = scratch("fault-broker");
    let (broker, port) = mosquitto(&dir);
    let conf = std::fs::read_to_string(dir.join("mosquitto.conf")).unwrap();
    let prefix = "edgecfl/t-fault-broker";
    let topics = Topics::new(prefix).unwrap();
    let partition = "groups:01234-56789";
    let flags = run_flags(partition, N, 3, 1.0, 15);
    let mut cmd = Command::new(bin("coordinator"));
    cmd.arg("serve")
        .args(&flags)
        .args(["--broker", &format!("mqtt://127.0.0.1:{port}")])
        .args(["--prefix", prefix, "--min-clients", "4"])
        .args(["--join-timeout", "120", "--phase-timeout", "40"])
        .arg("--out")
        .arg(dir.join("out"));
    let log = dir.join("coordinator.log");
    let mut coordinator = Proc::spawn(cmd, "coordinator serve", &log);
    let clients = fleet(&dir, port, prefix, partition, N, 15);
    let link = spy(port, "observer", vec![format!("{prefix}/clients/+/down")]);
    first_training_command(&link, &topics);
    drop(link);
    drop(broker); // SIGKILL
    std::thread::sleep(Duration::from_secs(3));
    let _broker = mosquitto_with(&dir, "mosquitto-restarted", &conf, port);
    coordinator.wait_ok(Duration::from_secs(600), &log);
    for (mut p, log) in clients {
        p.wait_ok(Duration::from_secs(60), &log);
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("lost the broker"), "{text}");
    }
    let s = summary(&dir.join("out"));
    let csv = std::fs::read_to_string(dir.join("out/rounds.csv")).unwrap();
    assert_eq!(csv.lines().count(), 4, "{csv}");
    assert!(s["phase_timeouts"].as_u64().unwrap() <= 1, "{s:#}");
    // Every round's evaluation has every client: nobody was lost for good.
    assert_eq!(s["client_accuracy"].as_array().unwrap().len(), N);
    assert!(
        s["client_accuracy"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a.as_f64().is_some_and(|a| a > 0.0)),
        "{s:#}"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("reconnected to the broker"), "{text}");
}

/// `summary.json` without what differs between two runs of the same experiment: timings, the
/// broker traffic and its incidents (a resumed run pings its clients again and hears the
/// interrupted run's last answers), and where the files went.
fn comparable(mut s: serde_json::Value) -> serde_json::Value {
    let map = s.as_object_mut().unwrap();
    for key in [
        "wall_seconds",
        "wire_bytes",
        "rejected",
        "rejected_total",
        "rejected_per_client",
        "phase_timeouts",
        "dropouts",
        "dropped_clients",
        "config",
        "broker",
    ] {
        map.remove(key);
    }
    s
}

/// A step of a round at which a test kills the coordinator: when the first training job of
/// round `k` is on a client's `down` topic, when the first trained model of round `k` is on a
/// client's `up` topic, or when the first evaluation job of round `k` is sent.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Step {
    Train(u32),
    Trained(u32),
    Evaluate(u32),
}

impl Step {
    fn round(self) -> u32 {
        match self {
            Step::Train(k) | Step::Trained(k) | Step::Evaluate(k) => k,
        }
    }
}

/// Waits on `link` (subscribed to every client's `down` and `up` topics) for `step`.
fn wait_for(link: &Link, topics: &Topics, step: Step) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while let Some(ev) = link.recv_until(deadline) {
        let Inbound::Message { topic, payload, .. } = ev else {
            continue;
        };
        let at = match topics.parse(&topic) {
            Some((_, TopicKind::Down)) => {
                Envelope::<ToClient>::from_bytes(&payload).is_ok_and(|env| {
                    env.round == step.round()
                        && match step {
                            Step::Train(_) => {
                                matches!(env.body, ToClient::Train(_) | ToClient::TrainPair { .. })
                            }
                            Step::Evaluate(_) => matches!(env.body, ToClient::Evaluate { .. }),
                            Step::Trained(_) => false,
                        }
                })
            }
            Some((_, TopicKind::Up)) => {
                Envelope::<ToCoordinator>::from_bytes(&payload).is_ok_and(|env| {
                    step == Step::Trained(env.round)
                        && matches!(
                            env.body,
                            ToCoordinator::Update { .. } | ToCoordinator::Pair { .. }
                        )
                })
            }
            _ => false,
        };
        if at {
            return;
        }
    }
    panic!("{step:?} did not come within 300 s");
}

/// `kill -9` of the coordinator (and with it its embedded broker) at every step of every round
/// in turn ([`Step`]: training sent, the first model in, evaluation sent; rounds 1 to 3 of 3),
/// each time resumed by `serve --resume`: the clients reconnect to the new broker on the same
/// port, answer its ping, the run goes on from the last checkpoint, and after the last resume
/// it ends with the same `summary.json` as an uninterrupted run with the same seed (timings
/// aside). FedClust (the default method). Every step, not one drawn from the clock (issue 53 §1).
#[test]
fn coordinator_killed_at_every_step_and_resumed_gives_the_uninterrupted_result() {
    let steps: Vec<Step> = (1..=3)
        .flat_map(|k| [Step::Train(k), Step::Trained(k), Step::Evaluate(k)])
        .collect();
    killed_and_resumed("fault-resume", 3, 1.0, &[], "KILL", &steps);
}

/// StoCFL, whose checkpoint holds the most state (the global model ω, the merged clusters and
/// which clients were seen), stopped by SIGTERM in round 2 of 4 and resumed by `--resume DIR`
/// alone.
#[test]
fn stocfl_coordinator_killed_and_resumed_gives_the_uninterrupted_result() {
    killed_and_resumed(
        "fault-resume-stocfl",
        4,
        0.5,
        &["--algorithm", "stocfl"],
        "TERM",
        &[Step::Train(2)],
    );
}

/// Runs `name` with `method` flags, `rounds` and `frac` uninterrupted, then again stopped by
/// `signal` (`KILL`: a crash, resumed with every flag; `TERM`: a stop, which says how to resume,
/// resumed by `--resume DIR` alone) at each of `steps` in turn, resumed after each, and compares
/// the two summaries. After the first stop it also checks that a resume with a changed flag is
/// refused at once and that one no client answers fails and leaves the checkpoint as it was.
fn killed_and_resumed(
    name: &str,
    rounds: u32,
    frac: f64,
    method: &[&str],
    signal: &str,
    steps: &[Step],
) {
    const N: usize = 4;
    let partition = "groups:01234-56789";
    let mut flags = run_flags(partition, N, rounds as usize, frac, 16);
    flags.extend(method.iter().map(|f| f.to_string()));
    let mut extra = patient(N);
    extra.extend(["--run-id".to_string(), "resumed".to_string()]);

    // The uninterrupted run.
    let (clean, port, prefix, mut coordinator) = start(&format!("{name}-clean"), &flags, &extra);
    let clients = fleet(&clean, port, &prefix, partition, N, 16);
    coordinator.wait_ok(Duration::from_secs(600), &clean.join("coordinator.log"));
    for (mut p, log) in clients {
        p.wait_ok(Duration::from_secs(30), &log);
    }
    let expected = summary(&clean.join("out"));

    // The same run, stopped at each step in turn.
    let (dir, port, prefix, mut coordinator) = start(name, &flags, &extra);
    let topics = Topics::new(&prefix).unwrap();
    let resume_dir = dir.join("out");
    let mut resume_extra: Vec<String> = extra.clone();
    resume_extra.extend([
        "--resume".to_string(),
        resume_dir.to_str().unwrap().to_string(),
    ]);
    let resume_extra: Vec<&str> = resume_extra.iter().map(String::as_str).collect();
    // After a stop, `--resume DIR` alone: the run's settings come from the checkpoint (only the
    // broker's and the pool's flags are given). After a crash, every flag again.
    let run: &[String] = if signal == "TERM" { &[] } else { &flags };
    // Each coordinator's broker is watched from before its clients can connect to it.
    let watch = |i: usize| {
        spy(
            port,
            &format!("observer-{i}"),
            vec![
                format!("{prefix}/clients/+/down"),
                format!("{prefix}/clients/+/up"),
            ],
        )
    };
    let mut link = watch(0);
    let clients = fleet(&dir, port, &prefix, partition, N, 16);
    for (i, &step) in steps.iter().enumerate() {
        let k = step.round();
        eprintln!("{name}: stopping the coordinator at {step:?}");
        wait_for(&link, &topics, step);
        send_signal(&coordinator, signal);
        let status = coordinator.child.wait().unwrap();
        drop(link);
        let log = dir.join(if i == 0 {
            "coordinator.log".to_string()
        } else {
            format!("resumed-{i}.log")
        });
        if signal == "TERM" {
            // 128 + 15, and it says where the run stands and how to go on; no client is told
            // to finish.
            assert_eq!(status.code(), Some(143));
            let log = std::fs::read_to_string(&log).unwrap();
            assert!(
                log.contains(&format!(
                    "SIGTERM: stopped; the run is paused after round {}",
                    k - 1
                )),
                "{log}"
            );
            assert!(log.contains("coordinator serve --resume"), "{log}");
            assert!(!log.contains("telling its clients to finish"), "{log}");
        }
        let checkpoint: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(resume_dir.join("checkpoint.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(
            checkpoint["federation"]["round"],
            k - 1,
            "stopped at {step:?}"
        );
        if i == 0 {
            refused_resumes(&dir, port, &prefix, &flags, &extra, &resume_dir, frac);
        }
        coordinator = serve_embedded(
            &dir,
            port,
            &prefix,
            run,
            &resume_extra,
            &format!("resumed-{}.log", i + 1),
        );
        wait_listening(port, Duration::from_secs(60));
        link = watch(i + 1);
    }
    drop(link);
    let log = dir.join(format!("resumed-{}.log", steps.len()));
    coordinator.wait_ok(Duration::from_secs(600), &log);
    for (mut p, log) in clients {
        p.wait_ok(Duration::from_secs(60), &log);
    }
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("resuming run resumed"), "{log}");
    let got = summary(&dir.join("out"));
    assert_eq!(
        comparable(got.clone()),
        comparable(expected.clone()),
        "resumed:\n{got:#}\nuninterrupted:\n{expected:#}"
    );
}

/// On a stopped run's checkpoint in `resume_dir`: a resume with one flag changed (`--frac`) is
/// refused at once (before any client is waited for), the flag named with both values, and no
/// client is told to finish (they serve the real resume after); a resume that no client answers
/// (they listen under another prefix) stops with an error and leaves the checkpoint as it was.
fn refused_resumes(
    dir: &Path,
    port: u16,
    prefix: &str,
    flags: &[String],
    extra: &[String],
    resume_dir: &Path,
    frac: f64,
) {
    let saved = std::fs::read(resume_dir.join("checkpoint.json")).unwrap();
    let resume = ["--resume", resume_dir.to_str().unwrap()];
    let mut changed = flags.to_vec();
    let at = changed.iter().position(|f| f == "--frac").unwrap() + 1;
    changed[at] = "0.75".into();
    let mut wrong: Vec<&str> = extra.iter().map(String::as_str).collect();
    wrong.extend(resume);
    let started = Instant::now();
    let mut refused = serve_embedded(dir, port, prefix, &changed, &wrong, "wrong-flag.log");
    let log = dir.join("wrong-flag.log");
    assert!(!refused.wait_exit(Duration::from_secs(60), &log).success());
    assert!(started.elapsed() < Duration::from_secs(60));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(&format!("frac: checkpoint {frac:?}, now 0.75")),
        "{text}"
    );
    assert!(!text.contains("telling its clients to finish"), "{text}");

    let nobody = [
        "--run-id",
        "resumed",
        "--join-timeout",
        "2",
        "--resume",
        resume[1],
    ];
    let mut alone = serve_embedded(
        dir,
        port,
        &format!("{prefix}-nobody"),
        flags,
        &nobody,
        "nobody.log",
    );
    let log = dir.join("nobody.log");
    assert!(!alone.wait_exit(Duration::from_secs(60), &log).success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("0 of its 4 live clients answered"), "{text}");
    assert_eq!(
        std::fs::read(resume_dir.join("checkpoint.json")).unwrap(),
        saved
    );
    assert!(!resume_dir.join("summary.json").exists());
}

/// Sends `kill -SIGNAL` to `p`.
fn send_signal(p: &Proc, signal: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(p.child.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{signal} {}", p.child.id());
}

/// The processes whose command line mentions `needle` (from /proc).
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(needle) {
                found.push(cmdline);
            }
        }
    }
    found
}

/// `kill -INT` of `coordinator demo` mid-run ends its edge-client processes with it (none left
/// reconnecting to a broker that is gone), with status 130 and a line that says so and how to go
/// on; `coordinator demo --resume DIR` then finishes the run.
#[test]
fn demo_stopped_by_sigint_ends_its_clients_and_resumes() {
    let dir = scratch("fault-demo-sigint");
    let out = dir.join("out");
    let mut cmd = Command::new(bin("coordinator"));
    cmd.args([
        "demo",
        "--partition",
        "groups:01234-56789",
        "--clients",
        "4",
    ])
    .args(["--rounds", "10", "--epochs", "1", "--warmup-epochs", "1"])
    .arg("--data")
    .arg(bundled_data())
    .arg("--out")
    .arg(&out);
    let log = dir.join("demo.log");
    let mut demo = Proc::spawn(cmd, "coordinator demo", &log);
    let needle = out.to_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    // Under way: its clients run and round 0 is done (checkpointed).
    while !out.join("checkpoint.json").exists() {
        assert!(
            demo.is_running(),
            "{}",
            std::fs::read_to_string(&log).unwrap()
        );
        assert!(Instant::now() < deadline, "no round 0 in 120 s");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        processes_mentioning(&needle).len(),
        4 + 1,
        "the demo and its 4 clients"
    );
    send_signal(&demo, "INT");
    let status = demo.wait_exit(Duration::from_secs(30), &log);
    assert_eq!(status.code(), Some(130));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("SIGINT: the demo stopped, and its edge clients with it"),
        "{text}"
    );
    let left = processes_mentioning(&needle);
    assert!(left.is_empty(), "still running: {left:?}");
    // It says how to go on, and `demo --resume DIR` alone does: the checkpoint's settings, its
    // clients started again, the run to its last round (issue 53 §1).
    let again = format!("coordinator demo --resume {}", out.display());
    assert!(text.contains(&again), "{text}");
    let mut cmd = Command::new(bin("coordinator"));
    cmd.args(["demo", "--resume"]).arg(&out);
    let log = dir.join("resumed.log");
    let mut resumed = Proc::spawn(cmd, "coordinator demo --resume", &log);
    resumed.wait_ok(Duration::from_secs(300), &log);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("resuming run"), "{text}");
    let s = summary(&out);
    assert_eq!(
        s["accuracy_per_round"].as_array().map(Vec::len),
        Some(10),
        "{s:#}"
    );
    let left = processes_mentioning(&needle);
    assert!(
        left.is_empty(),
        "still running after the resumed demo: {left:?}"
    );
}
