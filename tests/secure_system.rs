//! System tests of transport security and identity: a fleet over TLS with a password per client,
//! on the embedded broker (behind its gate, running StoCFL, whose pair of models is the largest
//! upload of any method) and on mosquitto (FedClust) configured from the files
//! `coordinator credentials` writes (the same generator as the shipped examples in `cross/`).
//!
//! Each run: bad logins (wrong password, none, wrong CA) are refused with a clear error on the
//! client side; a credentialed intruder ("mallory", a user of the fleet) tries to speak for other
//! clients (a forged upload, a retained `Gone`, a `Finish`, a subscription to every client's
//! commands, a connection under another client's id), and the broker refuses all of it; a
//! `Finish` of another run, published with the coordinator's own rights, is ignored by the client;
//! and the run's result equals the in-process `coordinator simulate` run (the clean run). The
//! hierarchy (GPS and two LPSs, each with its own login) on both brokers: a client cannot register
//! as an LPS, end the run as one or finish one; an LPS cannot speak for another LPS or a client;
//! an LPS pinned to a run ignores another run's `Finish`. `coordinator demo --secure` end to end.
//! Kept short for CI: 4 clients, 1-2 rounds, 1 epoch.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use edgecfl_shared::model::{ModelKind, ParamLayout};
use edgecfl_shared::mqtt::{Inbound, Link, LinkOptions, Login, Security, read_password};
use edgecfl_shared::protocol::{
    self, BrokerAddr, Encoding, Envelope, Tensor, ToClient, ToCoordinator, ToGps, ToLps, TopicKind,
    Topics,
};
use edgecfl_tests::*;
use serde_json::Value;

const PARTITION: &str = "groups:01234-56789";
const CLIENTS: usize = 4;
const TOLERANCE: f64 = 0.005;

fn ids() -> Vec<String> {
    (0..CLIENTS).map(|i| format!("c{i}")).collect()
}

fn flags(seed: u64) -> Vec<String> {
    [
        "--partition",
        PARTITION,
        "--clients",
        &CLIENTS.to_string(),
        "--rounds",
        "2",
        "--frac",
        "1.0",
        "--epochs",
        "1",
        "--warmup-epochs",
        "1",
        "--lr",
        "0.05",
        "--seed",
        &seed.to_string(),
        "--data",
        bundled_data().to_str().expect("utf-8 path"),
    ]
    .map(String::from)
    .to_vec()
}

/// `coordinator credentials` for the fleet and the intruder.
fn credentials(dir: &Path, prefix: &str, extra: &[&str]) -> PathBuf {
    let out = dir.join("credentials");
    let mut all = ids();
    all.push("mallory".into());
    let o = Command::new(bin("coordinator"))
        .args(["credentials", "--ids", &all.join(","), "--prefix", prefix])
        .arg("--out")
        .arg(&out)
        .args(extra)
        .output()
        .expect("coordinator credentials");
    assert!(
        o.status.success(),
        "credentials failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn password_file(creds: &Path, user: &str) -> PathBuf {
    creds.join("users").join(format!("{user}.password"))
}

/// An edge client of the fleet; `seed` is the partition seed, the coordinator's.
fn edge_client(
    broker: &str,
    ca: &Path,
    id: &str,
    index: usize,
    prefix: &str,
    seed: u64,
) -> Command {
    let mut cmd = Command::new(bin("edge-client"));
    cmd.args(["run", "--broker", broker, "--id", id, "--prefix", prefix])
        .args(["--partition", PARTITION, "--seed", &seed.to_string()])
        .args(["--index", &index.to_string(), "--of", &CLIENTS.to_string()])
        .arg("--data")
        .arg(bundled_data())
        .arg("--ca")
        .arg(ca)
        .env_remove("EDGECFL_PASSWORD")
        // The final models go under the tests' scratch directory, not the user's home.
        .env("XDG_DATA_HOME", root().join("target/system-tests/devices"));
    cmd
}

/// A link of the test's own with `user`'s credentials.
fn link_as(
    broker: &BrokerAddr,
    creds: &Path,
    user: &str,
    client_id: &str,
    subscribe: Vec<String>,
) -> Link {
    let security = Security {
        ca: Some(creds.join("ca.pem")),
        client_cert: None,
        login: Some(Login {
            username: user.into(),
            password: read_password(&password_file(creds, user)).unwrap(),
        }),
    };
    Link::start(LinkOptions {
        subscribe,
        security,
        ..LinkOptions::new(broker.clone(), client_id)
    })
    .expect("link")
}

/// A wrong password, none, and the wrong CA: each client exits at once with the reason.
fn bad_logins_are_refused(dir: &Path, broker: &str, creds: &Path, prefix: &str) {
    let wrong = dir.join("wrong.password");
    std::fs::write(&wrong, "not-the-password\n").unwrap();
    let other_ca = credentials(&dir.join("other"), prefix, &[]).join("ca.pem");
    let ca = creds.join("ca.pem");
    let cases: Vec<(&str, &Path, Vec<std::ffi::OsString>, &[&str])> = vec![
        (
            "wrong password",
            &ca,
            vec!["--password-file".into(), wrong.into()],
            &["bad username or password", "not authorized"],
        ),
        ("no password", &ca, vec![], &["not authorized"]),
        (
            "wrong CA",
            &other_ca,
            vec!["--password-file".into(), password_file(creds, "c0").into()],
            &["not signed by a trusted CA"],
        ),
    ];
    for (what, ca, args, expected) in cases {
        let start = Instant::now();
        let o = edge_client(broker, ca, "c0", 0, prefix, 0)
            .args(["--connect-retries", "3"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{what}: the client was let in:\n{err}");
        assert!(
            err.contains("refused this client") && expected.iter().any(|e| err.contains(e)),
            "{what}: unclear error:\n{err}"
        );
        // Refusals that retrying cannot fix end the client at the first attempt.
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{what}: took {:?}",
            start.elapsed()
        );
    }
}

/// Credentials for the fleet (and `extra` arguments of `coordinator credentials`) and, for
/// mosquitto, the broker started from the generated mosquitto.conf: (the edge clients' port, the
/// coordinator's and LPSs' port, the credentials directory, mosquitto). The embedded broker is
/// started by `serve` on the first port.
fn brokers(
    kind: &Broker,
    dir: &Path,
    prefix: &str,
    extra: &[&str],
) -> (u16, u16, PathBuf, Option<Proc>) {
    brokers_with(kind, dir, prefix, extra, &|conf| conf.to_string())
}

/// [`brokers`], with mosquitto started on `edit` of the generated mosquitto.conf.
fn brokers_with(
    kind: &Broker,
    dir: &Path,
    prefix: &str,
    extra: &[&str],
    edit: &dyn Fn(&str) -> String,
) -> (u16, u16, PathBuf, Option<Proc>) {
    match kind {
        Broker::Embedded => {
            let port = free_port();
            let creds = credentials(dir, prefix, extra);
            (port, port, creds, None)
        }
        Broker::Mosquitto => {
            let port = free_port_pair();
            let p = port.to_string();
            let mut args = vec!["--port", &p, "--bind", "127.0.0.1"];
            args.extend_from_slice(extra);
            let creds = credentials(dir, prefix, &args);
            let proc = mosquitto_from(&creds, dir, port, edit);
            (port, port + 1, creds, Some(proc))
        }
    }
}

fn secure_run(kind: Broker, name: &str, seed: u64, method: &[&str]) {
    let dir = scratch(name);
    let prefix = format!("edgecfl/t-{name}");
    let topics = Topics::new(&prefix).unwrap();
    let run_id = "secure";
    let mut flags = flags(seed);
    flags.extend(method.iter().map(|s| s.to_string()));
    // Ports: edge clients on `port`; the coordinator on `port` (embedded) or `port + 1`
    // (mosquitto's coordinator/LPS listener).
    let (port, infra_port, creds, _mosquitto) = brokers(&kind, &dir, &prefix, &[]);
    let client_url = format!("mqtts://127.0.0.1:{port}");
    let infra = BrokerAddr {
        host: "127.0.0.1".into(),
        port: infra_port,
        tls: true,
    };
    let clients_broker: BrokerAddr = client_url.parse().unwrap();

    let mut cmd = Command::new(bin("coordinator"));
    cmd.arg("serve")
        .args(&flags)
        .args(["--prefix", &prefix, "--run-id", run_id])
        .args([
            "--min-clients",
            &CLIENTS.to_string(),
            "--join-timeout",
            "120",
        ])
        .args(["--phase-timeout", "120"])
        .arg("--out")
        .arg(dir.join("out"))
        .env_remove("EDGECFL_PASSWORD");
    coordinator_broker(&mut cmd, &kind, port, &infra, &creds);
    let coordinator_log = dir.join("coordinator.log");
    let mut coordinator = Proc::spawn(cmd, "coordinator serve", &coordinator_log);
    wait_listening(port, Duration::from_secs(60));

    bad_logins_are_refused(&dir, &client_url, &creds, &prefix);

    // The coordinator's eye on the broker (its own credentials; everything under the prefix).
    let spy = link_as(
        &infra,
        &creds,
        "coordinator",
        "spy",
        vec![
            format!("{prefix}/clients/+/up"),
            format!("{prefix}/clients/+/status"),
            format!("{prefix}/clients/+/down"),
        ],
    );
    spy.wait_connected(&infra, Duration::from_secs(10)).unwrap();

    // Every client but c0 joins; the coordinator waits for c0, so the attacks below all happen
    // while the others are connected and the run is pending, however fast the run is.
    let spawn = |i: usize, id: &str| {
        let log = dir.join(format!("{id}.log"));
        let mut cmd = edge_client(&client_url, &creds.join("ca.pem"), id, i, &prefix, seed);
        cmd.arg("--password-file").arg(password_file(&creds, id));
        (Proc::spawn(cmd, id, &log), log)
    };
    let mut clients: Vec<(Proc, PathBuf)> = ids()
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, id)| spawn(i, id))
        .collect();
    wait_for_hellos(&spy, &topics, &ids()[1..]);

    // mallory (a legitimate user of the fleet) speaks for others.
    let run = protocol::id(run_id).unwrap();
    let params = vec![0.25f32; ParamLayout::of(ModelKind::LeNet5).len()];
    let forged_update = Envelope::new(
        run.clone(),
        1,
        ToCoordinator::Update {
            model: ModelKind::LeNet5,
            params: Tensor::encode(&params, Encoding::F32),
            samples: 1_000_000,
            loss: 0.01,
        },
    )
    .to_bytes();
    let forged_gone = Envelope::new(run.clone(), 0, ToCoordinator::Gone).to_bytes();
    let forged_finish = Envelope::new(run.clone(), 1, ToClient::Finish).to_bytes();
    let forgeries: Vec<(String, Vec<u8>, bool)> = vec![
        (topics.up("c1"), forged_update.clone(), false),
        (topics.status("c2"), forged_gone.clone(), true),
        (topics.down("c3"), forged_finish.clone(), false),
    ];
    let mut closed_by_broker = 0;
    for (topic, payload, retain) in &forgeries {
        let m = link_as(&clients_broker, &creds, "mallory", "mallory", vec![]);
        m.wait_connected(&clients_broker, Duration::from_secs(10))
            .unwrap();
        m.publish(topic, payload.clone(), *retain).unwrap();
        if let Some(Inbound::Disconnected(_)) =
            m.recv_until(Instant::now() + Duration::from_secs(2))
        {
            closed_by_broker += 1;
        }
    }
    // Reading every client's commands.
    let m = link_as(
        &clients_broker,
        &creds,
        "mallory",
        "mallory",
        vec![format!("{prefix}/clients/+/down")],
    );
    let deadline = Instant::now() + Duration::from_secs(3);
    while let Some(ev) = m.recv_until(deadline) {
        assert!(
            !matches!(ev, Inbound::Message { .. }),
            "mallory read another client's commands: {ev:?}"
        );
    }
    drop(m);
    // Taking over c1's session (its MQTT client id): refused by the embedded broker; mosquitto
    // replaces the client id with the username. Either way c1 stays connected (a takeover
    // would fire its last will, and the run would lose it).
    takeover_attempt(&kind, &dir, &topics, port, &creds);
    let until = Instant::now() + Duration::from_secs(2);
    while let Some(ev) = spy.recv_until(until) {
        if let Inbound::Message { topic, payload, .. } = ev {
            assert_ne!(
                topic,
                topics.status("c1"),
                "c1's status changed: its session was taken"
            );
            assert!(
                !forgeries.iter().any(|(_, f, _)| *f == payload),
                "a forgery was delivered on {topic}"
            );
        }
    }

    // c0 joins and the run starts.
    clients.insert(0, spawn(0, "c0"));
    // A `Finish` of another run, with the coordinator's rights, once c3 serves this run: c3
    // ignores it.
    first_command_to(&spy, &topics, "c3");
    let foreign = Envelope::new(protocol::id("another-run").unwrap(), 0, ToClient::Finish);
    spy.publish(&topics.down("c3"), foreign.to_bytes(), false)
        .unwrap();

    coordinator.wait_ok(Duration::from_secs(600), &coordinator_log);
    for (p, log) in &mut clients {
        p.wait_ok(Duration::from_secs(60), log);
    }
    let c3 = std::fs::read_to_string(dir.join("c3.log")).unwrap();
    assert!(
        c3.contains("ignored a command of run another-run"),
        "c3 did not ignore the foreign Finish:\n{c3}"
    );
    // No forgery reached anyone.
    while let Some(ev) = spy.recv_until(Instant::now() + Duration::from_secs(1)) {
        if let Inbound::Message { topic, payload, .. } = ev {
            assert!(
                !forgeries.iter().any(|(_, f, _)| *f == payload),
                "a forgery was delivered on {topic}"
            );
        }
    }
    if matches!(kind, Broker::Embedded) {
        assert_eq!(
            closed_by_broker, 3,
            "the embedded broker closes a connection that publishes outside its ACL"
        );
        let log = std::fs::read_to_string(&coordinator_log).unwrap();
        for t in ["clients/c1/up", "clients/c2/status", "clients/c3/down"] {
            assert!(
                log.contains(&format!("may not publish on \"{prefix}/{t}\"")),
                "{t}:\n{log}"
            );
        }
    } else {
        let log = std::fs::read_to_string(dir.join("mosquitto.log")).unwrap();
        assert!(log.contains("Denied PUBLISH from mallory"), "{log}");
    }
    let s = summary(&dir.join("out"));
    assert_eq!(s["broker"], infra.to_string());
    assert_matches_simulate(&s, &flags, &dir);
}

/// Waits (up to 120 s) until each of `ids` (clients or LPSs) has announced itself on its status
/// topic.
fn wait_for_hellos(spy: &Link, topics: &Topics, ids: &[String]) {
    let mut missing: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !missing.is_empty() {
        match spy.recv_until(deadline) {
            Some(Inbound::Message { topic, .. }) => {
                let who = topics.parse(&topic).or_else(|| topics.parse_lps(&topic));
                if let Some((id, TopicKind::Status)) = who {
                    missing.remove(id);
                }
            }
            Some(_) => {}
            None => panic!("no hello from {missing:?} within 120 s"),
        }
    }
}

/// Waits (up to 300 s) for the first command the coordinator sends to `client`.
fn first_command_to(spy: &Link, topics: &Topics, client: &str) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while let Some(ev) = spy.recv_until(deadline) {
        if let Inbound::Message { topic, .. } = ev
            && let Some((c, TopicKind::Down)) = topics.parse(&topic)
            && c == client
        {
            return;
        }
    }
    panic!("no command to {client} within 300 s");
}

/// mosquitto_pub (Debian's mosquitto-clients) as mallory under c1's client id: the takeover is
/// refused. The embedded broker refuses the connection ("identifier rejected"); mosquitto
/// (`use_username_as_clientid`) accepts it only under mallory's own id and leaves c1's
/// connection alone (the caller checks that c1's last will, its `Gone`, did not fire).
fn takeover_attempt(kind: &Broker, dir: &Path, topics: &Topics, port: u16, creds: &Path) {
    let password = read_password(&password_file(creds, "mallory")).unwrap();
    let o = Command::new("mosquitto_pub")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .arg("--cafile")
        .arg(creds.join("ca.pem"))
        .args(["-u", "mallory", "-P", &password, "-i", "c1", "-q", "1"])
        .args(["-t", &topics.up("mallory"), "-m", "x"])
        .output()
        .expect("mosquitto_pub (apt-get install mosquitto-clients)");
    let err = String::from_utf8_lossy(&o.stderr);
    match kind {
        Broker::Embedded => assert!(
            !o.status.success() && err.contains("identifier rejected"),
            "the embedded broker accepted mallory under c1's client id ({}): {err}",
            o.status
        ),
        Broker::Mosquitto => {
            assert!(o.status.success(), "{err}");
            let log = std::fs::read_to_string(dir.join("mosquitto.log")).unwrap();
            assert!(
                log.lines()
                    .any(|l| l.contains(" as mallory (p2, c1,") && l.contains("u'mallory'")),
                "mosquitto did not replace the client id c1 with the username mallory:\n{log}"
            );
            assert!(
                !log.contains("Client c1 already connected"),
                "mallory took over c1's session:\n{log}"
            );
        }
    }
}

/// Same clusters and accuracy as the in-process run with the same seed and settings.
fn assert_matches_simulate(served: &Value, flags: &[String], dir: &Path) {
    assert_eq!(served["n_clients"], CLIENTS, "{served:#}");
    let twin = simulate(flags, &dir.join("simulate"));
    assert_eq!(served["assignment"], twin["assignment"], "{served:#}");
    let (a, b) = (accuracies(served), accuracies(&twin));
    assert_eq!(a.len(), b.len());
    for (round, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            (x - y).abs() <= TOLERANCE,
            "round {}: served {x}, simulated {y}",
            round + 1
        );
    }
}

#[test]
fn embedded_broker_tls_logins_and_acl() {
    // StoCFL: its pair of models is the largest upload of any method, and must pass the gate,
    // which bounds each upload by the run's method.
    secure_run(
        Broker::Embedded,
        "secure-embedded",
        11,
        &["--algorithm", "stocfl"],
    );
}

#[test]
fn mosquitto_tls_logins_and_acl_from_generated_files() {
    secure_run(Broker::Mosquitto, "secure-mosquitto", 12, &[]);
}

/// A credentialed client floods the topics its ACL lets it write and the coordinator reads (its
/// own `up` and `status`): the gate takes payloads up to the run's bounds (the largest upload of
/// the run; `MAX_STATUS_PAYLOAD`) and closes the connection of anything larger, and it paces each
/// connection (2 largest uploads a second, 4 at once: `broker::UPLOADS_PER_SECOND`,
/// `BURST_UPLOADS`; a login's connections bounded in number, `gate::MAX_CONNECTIONS_PER_LOGIN`,
/// and each with a pace of its own since issue 56 §3, so that a user's extra connections cannot
/// starve its own session), so the embedded broker's memory stays bounded and a flood cannot
/// outrun the coordinator (issue 11 §4: 1.26 GB of 4 MiB messages on these topics
/// grew the coordinator by 684 MB before the bounds).
#[test]
fn embedded_broker_bounds_and_paces_what_a_client_may_flood() {
    use edgecfl_shared::algorithms::MethodConfig;
    use edgecfl_shared::protocol::{MAX_PAYLOAD, MAX_STATUS_PAYLOAD, upload_limit};
    const PER_SECOND: f64 = 2.0;
    const BURST: f64 = 4.0;
    const EACH: usize = 8;
    let name = "secure-flood";
    let dir = scratch(name);
    let prefix = format!("edgecfl/t-{name}");
    let topics = Topics::new(&prefix).unwrap();
    let (port, _, creds, _) = brokers(&Broker::Embedded, &dir, &prefix, &[]);
    let broker: BrokerAddr = format!("mqtts://127.0.0.1:{port}").parse().unwrap();
    let mut cmd = Command::new(bin("coordinator"));
    cmd.arg("serve")
        .args(flags(0))
        .args(["--prefix", &prefix, "--min-clients", "4"])
        .args(["--join-timeout", "300", "--out"])
        .arg(dir.join("out"))
        .env_remove("EDGECFL_PASSWORD");
    coordinator_broker(&mut cmd, &Broker::Embedded, port, &broker, &creds);
    let log = dir.join("coordinator.log");
    let coordinator = Proc::spawn(cmd, "coordinator serve", &log);
    wait_listening(port, Duration::from_secs(60));
    let pid = coordinator.child.id();
    std::thread::sleep(Duration::from_millis(500));
    let before = peak_rss_kb(pid).expect("coordinator running");

    // The run's bounds: FedClust with LeNet-5 (the flags' defaults) and the 4 clients.
    let upload = upload_limit(MethodConfig::default().largest_upload_floats(CLIENTS));
    let up = topics.up("mallory");
    let status = topics.status("mallory");
    // Each flood on a connection of its own (one MQTT client id each, `<n>@mallory`): `count`
    // payloads of `size` bytes, then one of `last` bytes.
    let links = std::cell::Cell::new(0);
    let flood = |topic: &str, size: usize, count: usize, last: usize| {
        links.set(links.get() + 1);
        let id = format!("{}@mallory", links.get());
        let m = link_as(&broker, &creds, "mallory", &id, vec![]);
        m.wait_connected(&broker, Duration::from_secs(10)).unwrap();
        for _ in 0..count {
            m.publish(topic, vec![0x5A; size], false).unwrap();
        }
        m.publish(topic, vec![0x5A; last], false).unwrap();
        m
    };
    // The gate closes a connection at its first payload over the bound, after forwarding the
    // ones before it: a connection's end marks its flood as taken.
    let closed = |m: &Link, topic: &str, size: usize| {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            match m.recv_until(deadline) {
                Some(Inbound::Disconnected(_)) => break,
                Some(_) => {}
                None => panic!("a payload of {size} bytes on {topic} did not close the connection"),
            }
        }
        let want = format!("a payload of {size} bytes on \"{topic}\"");
        let logged = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(&log).unwrap().contains(&want) {
            assert!(
                Instant::now() < logged,
                "not logged: {want}:\n{}",
                std::fs::read_to_string(&log).unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };

    // Two connections of one user, each EACH uploads at the bound and one over it: each
    // connection at its pace.
    let start = Instant::now();
    let paced = [
        flood(&up, upload, EACH, upload + 1),
        flood(&up, upload, EACH, upload + 1),
    ];
    for m in &paced {
        closed(m, &up, upload + 1);
    }
    let took = start.elapsed().as_secs_f64();
    let pace = (EACH as f64 - BURST) / PER_SECOND;
    assert!(
        took >= 0.95 * pace,
        "{EACH} uploads of {upload} bytes on each of two connections went through in {took:.1} s \
         (paced: ≥ {pace:.1} s)"
    );
    // Every user of the fleet at once, each on its own `up` topic from two connections: a bucket
    // each connection, and the memory bound below holds for all of them together.
    let start = Instant::now();
    let mut together: Vec<(String, Link)> = Vec::new();
    for user in ids() {
        for k in 0..2 {
            let m = link_as(&broker, &creds, &user, &format!("{k}@{user}"), vec![]);
            m.wait_connected(&broker, Duration::from_secs(10)).unwrap();
            together.push((topics.up(&user), m));
        }
    }
    for (topic, m) in &together {
        for _ in 0..EACH {
            m.publish(topic, vec![0x5A; upload], false).unwrap();
        }
        m.publish(topic, vec![0x5A; upload + 1], false).unwrap();
    }
    for (topic, m) in &together {
        closed(m, topic, upload + 1);
    }
    let took_all = start.elapsed().as_secs_f64();
    let mut report = format!(
        "{} uploads of {upload} bytes by one user over two connections: {took:.1} s (each \
         connection paced: ≥ {pace:.1} s)\n{CLIENTS} users × {} uploads of {upload} bytes at \
         once: {took_all:.1} s\n",
        2 * EACH,
        2 * EACH,
    );
    eprint!("{report}");
    // A bucket per connection: all users at once take about one connection's pace, not the
    // (4 × 16 − 4) / 2 = 30 s of one bucket shared by the fleet, nor less than each
    // connection's own pace.
    let shared = (CLIENTS as f64 * 2.0 * EACH as f64 - BURST) / PER_SECOND;
    assert!(
        took_all >= 0.95 * pace && took_all < 0.5 * shared,
        "{CLIENTS} users × {} uploads at once took {took_all:.1} s: a bucket per connection \
         takes ≥ {pace:.1} s, one shared bucket {shared:.1} s",
        2 * EACH
    );
    // 4 MiB on its own upload topic, and a status message over 1 KiB after 50 at the bound.
    closed(&flood(&up, upload, 0, MAX_PAYLOAD), &up, MAX_PAYLOAD);
    let s = flood(&status, MAX_STATUS_PAYLOAD, 50, MAX_STATUS_PAYLOAD + 1);
    closed(&s, &status, MAX_STATUS_PAYLOAD + 1);
    let text = std::fs::read_to_string(&log).unwrap();
    for at_bound in [upload, MAX_STATUS_PAYLOAD] {
        assert!(
            !text.contains(&format!("a payload of {at_bound} bytes")),
            "a payload at the bound closed a connection:\n{text}"
        );
    }

    std::thread::sleep(Duration::from_secs(2));
    let after = peak_rss_kb(pid).expect("coordinator still running");
    let grown_mb = after.saturating_sub(before) as f64 * 1024.0 / 1e6;
    // The bound (docs/src/security.md): the two fleet logs (16 MiB backlog each: 3 segments of 8 MiB
    // plus a message), rumqttd's 100 unacknowledged messages of `upload` bytes, the coordinator's
    // 16 MiB of unread messages, and the gate's and TLS buffers.
    let bound_mb =
        (2.0 * 3.0 * (8.0 * 1048576.0 + upload as f64) + 100.0 * upload as f64) / 1e6 + 16.8 + 16.0;
    let memory = format!(
        "coordinator peak RSS (VmHWM) {:.1} MiB before the floods, {:.1} MiB after: +{grown_mb:.1} \
         MB (bound {bound_mb:.1} MB)\n",
        before as f64 / 1024.0,
        after as f64 / 1024.0
    );
    eprint!("{memory}");
    report += &memory;
    std::fs::write(dir.join("report.txt"), &report).unwrap();
    assert!(
        grown_mb < bound_mb,
        "the coordinator grew by {grown_mb:.0} MB (bound {bound_mb:.0} MB)"
    );
}

#[test]
fn unreachable_broker_logs_each_attempt_and_gives_up() {
    let dir = scratch("connect-retries");
    let port = free_port(); // nothing listens there
    let exe = bin("edge-client");
    let start = Instant::now();
    let o = Command::new(exe)
        .args(["run", "--broker", &format!("mqtt://127.0.0.1:{port}")])
        .args([
            "--id",
            "x",
            "--partition",
            "label:2",
            "--index",
            "0",
            "--of",
            "2",
        ])
        .args(["--seed", "0", "--connect-retries", "3"])
        .arg("--data")
        .arg(bundled_data())
        .current_dir(&dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    for attempt in 1..=3 {
        assert!(
            err.contains(&format!("connection attempt {attempt} to mqtt://127.0.0.1:{port} failed: nothing accepts connections")),
            "attempt {attempt}:\n{err}"
        );
    }
    // Backoff 1 s then 2 s, each announced with its time; none after the last attempt.
    assert!(err.contains("next attempt in 1 s ("), "{err}");
    assert!(err.contains("next attempt in 2 s ("), "{err}");
    assert_eq!(err.matches("next attempt in").count(), 2, "{err}");
    assert!(
        err.contains("gave up after 3 failed connection attempts")
            && err.contains("--connect-retries 3"),
        "{err}"
    );
    let took = start.elapsed();
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(60),
        "{took:?}"
    );
}

/// A forgery: broker, username, client id, topic, payload, retained.
type Attempt<'a> = (&'a BrokerAddr, &'a str, &'a str, String, Vec<u8>, bool);

/// Publishes `payload` on `topic` as `user` (client id `client_id`); whether the broker closed
/// the connection within 2 s.
fn forge(
    broker: &BrokerAddr,
    creds: &Path,
    user: &str,
    client_id: &str,
    topic: &str,
    payload: Vec<u8>,
    retain: bool,
) -> bool {
    let m = link_as(broker, creds, user, client_id, vec![]);
    m.wait_connected(broker, Duration::from_secs(10)).unwrap();
    m.publish(topic, payload, retain).unwrap();
    matches!(
        m.recv_until(Instant::now() + Duration::from_secs(2)),
        Some(Inbound::Disconnected(_))
    )
}

/// The hierarchy over TLS with a login per LPS: `serve --lps remote` as the GPS, two
/// `coordinator lps` processes with their own credentials, four edge clients. Before the run
/// starts, a client (mallory) tries to register as an LPS, to end the run by publishing `Failed`
/// for an LPS and to finish an LPS; an LPS (lps-b) tries to speak for the other LPS and for a
/// client. The broker refuses each, and the run completes with both LPSs.
fn secure_hierarchy(kind: Broker, name: &str) {
    let dir = scratch(name);
    let prefix = format!("edgecfl/t-{name}");
    let topics = Topics::new(&prefix).unwrap();
    let run_id = "secure-h";
    let seed = 5;
    let mut flags = flags(seed);
    flags.extend(
        [
            "--hierarchy",
            "--lps-rounds",
            "1",
            "--model",
            "mlp",
            "--lambda",
            "k=2",
        ]
        .map(String::from),
    );
    let (port, infra_port, creds, _mosquitto) =
        brokers(&kind, &dir, &prefix, &["--lps", "lps-a,lps-b"]);
    let client_url = format!("mqtts://127.0.0.1:{port}");
    let clients_broker: BrokerAddr = client_url.parse().unwrap();
    let infra = BrokerAddr {
        host: "127.0.0.1".into(),
        port: infra_port,
        tls: true,
    };

    let mut cmd = Command::new(bin("coordinator"));
    cmd.arg("serve")
        .args(&flags)
        .args(["--prefix", &prefix, "--run-id", run_id, "--lps", "remote"])
        .args(["--min-clients", &CLIENTS.to_string()])
        .args(["--join-timeout", "120", "--phase-timeout", "120"])
        .arg("--out")
        .arg(dir.join("gps"))
        .env_remove("EDGECFL_PASSWORD");
    coordinator_broker(&mut cmd, &kind, port, &infra, &creds);
    let gps_log = dir.join("coordinator.log");
    let mut gps = Proc::spawn(cmd, "coordinator serve --lps remote", &gps_log);
    wait_listening(port, Duration::from_secs(60));

    let mut lps: Vec<(Proc, PathBuf)> = ["lps-a", "lps-b"]
        .iter()
        .map(|id| {
            let log = dir.join(format!("{id}.log"));
            let mut cmd = Command::new(bin("coordinator"));
            cmd.args(["lps", "--broker", &infra.to_string(), "--id", id])
                .args(["--prefix", &prefix, "--run-id", run_id])
                .args(["--assign-timeout", "300", "--gps-timeout", "120"])
                .arg("--out")
                .arg(dir.join(id))
                .arg("--ca")
                .arg(creds.join("ca.pem"))
                .arg("--password-file")
                .arg(password_file(&creds, id))
                .env_remove("EDGECFL_PASSWORD");
            (Proc::spawn(cmd, id, &log), log)
        })
        .collect();
    let spawn = |i: usize, id: &str| {
        let log = dir.join(format!("{id}.log"));
        let mut cmd = edge_client(&client_url, &creds.join("ca.pem"), id, i, &prefix, seed);
        cmd.arg("--password-file").arg(password_file(&creds, id));
        (Proc::spawn(cmd, id, &log), log)
    };
    let spy = link_as(
        &infra,
        &creds,
        "coordinator",
        "spy",
        vec![
            format!("{prefix}/clients/+/status"),
            format!("{prefix}/lps/+/status"),
        ],
    );
    spy.wait_connected(&infra, Duration::from_secs(10)).unwrap();
    let mut clients: Vec<(Proc, PathBuf)> = ids()
        .iter()
        .enumerate()
        .skip(1)
        .map(|(i, id)| spawn(i, id))
        .collect();
    let mut waiting: Vec<String> = ids()[1..].to_vec();
    waiting.extend(["lps-a".to_string(), "lps-b".to_string()]);
    wait_for_hellos(&spy, &topics, &waiting);
    // A `Finish` of another run, with the GPS's rights: lps-a (pinned to this run) ignores it.
    let foreign = Envelope::new(protocol::id("another-run").unwrap(), 0, ToLps::Finish);
    spy.publish(&topics.lps_down("lps-a"), foreign.to_bytes(), false)
        .unwrap();

    let run = protocol::id(run_id).unwrap();
    let failed = |who: &str| {
        Envelope::new(
            run.clone(),
            u32::MAX,
            ToGps::Failed {
                reason: protocol::text(&format!("forged by {who}")),
            },
        )
        .to_bytes()
    };
    let params = vec![0.25f32; ParamLayout::of(ModelKind::Mlp).len()];
    let forged_update = Envelope::new(
        run.clone(),
        1,
        ToCoordinator::Update {
            model: ModelKind::Mlp,
            params: Tensor::encode(&params, Encoding::F32),
            samples: 1_000_000,
            loss: 0.01,
        },
    )
    .to_bytes();
    let hello = Envelope::new(protocol::Id::new(), 0, ToGps::Hello).to_bytes();
    let finish = Envelope::new(run.clone(), 0, ToLps::Finish).to_bytes();
    let attempts: Vec<Attempt> = vec![
        // A client registers as an LPS.
        (
            &clients_broker,
            "mallory",
            "mallory",
            topics.lps_status("mallory"),
            hello,
            true,
        ),
        // A client ends the run as lps-a.
        (
            &clients_broker,
            "mallory",
            "mallory",
            topics.lps_up("lps-a"),
            failed("mallory"),
            false,
        ),
        // A client finishes lps-a as if it were the GPS.
        (
            &clients_broker,
            "mallory",
            "mallory",
            topics.lps_down("lps-a"),
            finish,
            false,
        ),
        // An LPS speaks for the other LPS, and for a client.
        (
            &infra,
            "lps-b",
            "x",
            topics.lps_up("lps-a"),
            failed("lps-b"),
            false,
        ),
        (&infra, "lps-b", "x", topics.up("c1"), forged_update, false),
    ];
    let mut closed = 0;
    for (broker, user, client_id, topic, payload, retain) in &attempts {
        if forge(
            broker,
            &creds,
            user,
            client_id,
            topic,
            payload.clone(),
            *retain,
        ) {
            closed += 1;
        }
    }

    clients.insert(0, spawn(0, "c0"));
    gps.wait_ok(Duration::from_secs(600), &gps_log);
    for (p, log) in &mut lps {
        p.wait_ok(Duration::from_secs(60), log);
    }
    for (p, log) in &mut clients {
        p.wait_ok(Duration::from_secs(60), log);
    }

    match kind {
        Broker::Embedded => {
            assert_eq!(closed, attempts.len(), "the gate closes every forger");
            let log = std::fs::read_to_string(&gps_log).unwrap();
            for (_, user, _, topic, _, _) in &attempts {
                let user = format!("(user \"{user}\"");
                let denied = format!("may not publish on \"{topic}\"");
                assert!(
                    log.lines()
                        .any(|l| l.contains(&user) && l.contains(&denied)),
                    "{user} on {topic}:\n{log}"
                );
            }
        }
        Broker::Mosquitto => {
            // The edge-client listener replaces the client id with the username.
            let log = std::fs::read_to_string(dir.join("mosquitto.log")).unwrap();
            for (broker, user, client_id, topic, _, _) in &attempts {
                let who = if **broker == clients_broker {
                    format!("Denied PUBLISH from {user} ")
                } else {
                    format!("Denied PUBLISH from {client_id}@{user} ")
                };
                let topic = format!("'{topic}'");
                assert!(
                    log.lines().any(|l| l.contains(&who) && l.contains(&topic)),
                    "{who}on {topic}:\n{log}"
                );
            }
        }
    }
    let lps_a = std::fs::read_to_string(&lps[0].1).unwrap();
    assert!(
        lps_a.contains("ignored a GPS message of run another-run"),
        "{lps_a}"
    );
    let s = summary(&dir.join("gps"));
    assert_eq!(s["lps"], "remote");
    assert_eq!(s["n_clusters"], 2, "{s:#}");
    assert_eq!(s["ari"].as_f64(), Some(1.0), "{s:#}");
    let records = s["gps"]["lps"].as_array().unwrap();
    let mut served: Vec<&str> = records.iter().map(|r| r["id"].as_str().unwrap()).collect();
    served.sort_unstable();
    assert_eq!(served, ["lps-a", "lps-b"], "{s:#}");
    for r in records {
        assert!(r["done"]["final_accuracy"].as_f64().unwrap() > 0.5, "{r:#}");
    }
}

#[test]
fn embedded_broker_hierarchy_lps_and_gps_identities() {
    secure_hierarchy(Broker::Embedded, "secure-h-embedded");
}

#[test]
fn mosquitto_hierarchy_lps_and_gps_identities() {
    secure_hierarchy(Broker::Mosquitto, "secure-h-mosquitto");
}

/// `coordinator demo --secure`: credentials written, the embedded broker behind its gate, each
/// client over TLS with its own login, and the demo's result.
#[test]
fn demo_secure_runs_over_tls_with_a_login_per_client() {
    let dir = scratch("secure-demo");
    let out = dir.join("out");
    let o = Command::new(bin("coordinator"))
        .args(["demo", "--secure", "--partition", PARTITION])
        .args([
            "--clients",
            &CLIENTS.to_string(),
            "--rounds",
            "1",
            "--epochs",
            "1",
        ])
        .args(["--warmup-epochs", "1", "--lr", "0.05", "--seed", "3"])
        .arg("--data")
        .arg(bundled_data())
        .arg("--out")
        .arg(&out)
        .env_remove("EDGECFL_PASSWORD")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("(TLS, logins checked, ACL enforced)"), "{err}");
    let creds = out.join("credentials");
    for f in [
        "ca.pem",
        "acl",
        "passwd",
        "broker.toml",
        "users/client-000.password",
    ] {
        assert!(creds.join(f).is_file(), "{f}");
    }
    let logs: Vec<PathBuf> = std::fs::read_dir(out.join("logs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(logs.len(), CLIENTS, "{logs:?}");
    for log in &logs {
        let text = std::fs::read_to_string(log).unwrap();
        assert!(
            text.contains("connected to mqtts://"),
            "{}:\n{text}",
            log.display()
        );
    }
    let s = summary(&out);
    assert_eq!(s["n_clients"], CLIENTS, "{s:#}");
    assert_eq!(s["ari"].as_f64(), Some(1.0), "{s:#}");
    // Each device kept its cluster's model, and the demo says where, with a command that
    // uses one.
    let device = |id: &str| out.join("devices").join(id).join("model.safetensors");
    assert_clients_kept_their_models(&dir, &s, &device);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let ids = s["client_ids"].as_array().unwrap();
    for (id, k) in ids.iter().zip(s["assignment"].as_array().unwrap()) {
        let id = id.as_str().unwrap();
        let line = format!("  {id} (cluster {k}): {}", device(id).display());
        assert!(stdout.contains(&line), "{line} not in\n{stdout}");
    }
    // The command runs as printed: the edge client by its full path.
    let try_line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("try: "))
        .unwrap_or_else(|| panic!("{stdout}"));
    let mut words = try_line.split_whitespace();
    let program = std::path::PathBuf::from(words.next().unwrap());
    assert!(program.is_absolute() && program.is_file(), "{try_line}");
    assert_eq!(
        program.file_name(),
        bin("edge-client").file_name(),
        "{try_line}"
    );
    let p = Command::new(&program).args(words).output().unwrap();
    let printed = String::from_utf8_lossy(&p.stdout);
    assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
    assert!(printed.contains("accuracy"), "{printed}");
}

/// mosquitto as `coordinator credentials` configures it: a credentialed client floods its own
/// `up` topic (which its ACL allows) with 4 MiB messages while the coordinator's connection,
/// subscribed to every upload, reads nothing. mosquitto holds at most the conf's per-reader
/// bounds for it (`max_queued_bytes` queued, `max_inflight_bytes` in flight, which it may pass by
/// one message), drops the rest and says so in its log. A message in flight is held twice (the
/// stored message and its outgoing packet), so mosquitto's peak RSS may grow by
/// 2 × (in flight + one message) + queued + the message being received, plus a 16 MB margin
/// for its own buffers. `--nocapture` prints the growth.
#[test]
fn mosquitto_bounds_what_a_client_floods_at_a_reader() {
    // 24 × 4 MiB: 101 MB, well past the bounds.
    let (grown, bound) = mosquitto_flood("mosquitto-flood", 24, true);
    assert!(
        grown < bound,
        "mosquitto grew by {:.0} MB (bound {:.0} MB)",
        grown / 1e6,
        bound / 1e6
    );
}

/// The same flood (48 × 4 MiB) on the same conf without `max_inflight_bytes`: mosquitto's
/// default in-flight bound, 20 messages whatever their size, lets it grow past the bound the
/// conf's byte bounds give (176 MB against 79 MB when measured). What the conf's line is for.
#[test]
fn mosquitto_without_its_in_flight_byte_bound_grows_past_it() {
    let (grown, bound) = mosquitto_flood("mosquitto-flood-no-inflight", 48, false);
    assert!(
        grown > bound,
        "without max_inflight_bytes mosquitto grew by only {:.0} MB (bound with it {:.0} MB)",
        grown / 1e6,
        bound / 1e6
    );
}

/// Floods `flood` messages of 4 MiB at a reader that reads nothing, on mosquitto with the
/// generated conf (`inflight_bound`) or that conf without its `max_inflight_bytes` line; writes
/// `target/system-tests/NAME/report.txt` and returns mosquitto's peak RSS growth and the bound
/// of the doc comment above, in bytes.
fn mosquitto_flood(name: &str, flood: usize, inflight_bound: bool) -> (f64, f64) {
    use edgecfl_shared::protocol::MAX_PAYLOAD;
    let dir = scratch(name);
    let prefix = format!("edgecfl/t-{name}");
    let topics = Topics::new(&prefix).unwrap();
    let conf = std::cell::RefCell::new(String::new());
    let edit = |text: &str| -> String {
        *conf.borrow_mut() = text.to_string();
        text.lines()
            .filter(|l| inflight_bound || !l.starts_with("max_inflight_bytes "))
            .map(|l| format!("{l}\n"))
            .collect()
    };
    let (port, infra, creds, broker) = brokers_with(&Broker::Mosquitto, &dir, &prefix, &[], &edit);
    let broker = broker.expect("mosquitto runs");
    let pid = broker.child.id();
    let conf = conf.into_inner();
    let setting = |key: &str| -> f64 {
        conf.lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key} in mosquitto.conf"))
    };
    let (queued, inflight) = (setting("max_queued_bytes "), setting("max_inflight_bytes "));

    // The coordinator's connection: it stops reading once 1 MiB waits unread, and nobody reads.
    let infra: BrokerAddr = format!("mqtts://127.0.0.1:{infra}").parse().unwrap();
    let reader = Link::start(LinkOptions {
        subscribe: vec![topics.all_up()],
        security: Security {
            ca: Some(creds.join("ca.pem")),
            client_cert: None,
            login: Some(Login {
                username: "coordinator".into(),
                password: read_password(&password_file(&creds, "coordinator")).unwrap(),
            }),
        },
        max_unread_bytes: Some(1 << 20),
        ..LinkOptions::new(infra.clone(), "reader")
    })
    .unwrap();
    reader
        .wait_connected(&infra, Duration::from_secs(10))
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let before = peak_rss_kb(pid).expect("mosquitto running");

    let edge: BrokerAddr = format!("mqtts://127.0.0.1:{port}").parse().unwrap();
    let c0 = link_as(&edge, &creds, "c0", "c0", vec![]);
    c0.wait_connected(&edge, Duration::from_secs(10)).unwrap();
    for _ in 0..flood {
        c0.publish(&topics.up("c0"), vec![0x5A; MAX_PAYLOAD], false)
            .unwrap();
    }
    let log = dir.join("mosquitto.log");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains("Outgoing messages are being dropped for client reader@coordinator")
    {
        assert!(
            Instant::now() < deadline,
            "mosquitto never dropped anything for the reader:\n{}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Let the rest of the flood arrive (and be dropped).
    std::thread::sleep(Duration::from_secs(5));
    let after = peak_rss_kb(pid).expect("mosquitto still running");
    let grown = after.saturating_sub(before) as f64 * 1024.0;
    let message = MAX_PAYLOAD as f64;
    let bound = 2.0 * (inflight + message) + queued + message + 16e6;
    let report = format!(
        "{flood} × {MAX_PAYLOAD} bytes flooded at a reader that reads nothing \
         (max_queued_bytes {queued}, max_inflight_bytes {}): mosquitto peak RSS (VmHWM) \
         {:.1} → {:.1} MiB (+{:.1} MB; bound with both byte bounds {:.1} MB)\n",
        if inflight_bound {
            format!("{inflight}")
        } else {
            "not set".into()
        },
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        grown / 1e6,
        bound / 1e6
    );
    eprint!("{report}");
    std::fs::write(dir.join("report.txt"), &report).unwrap();
    drop(c0);
    drop(reader);
    (grown, bound)
}
