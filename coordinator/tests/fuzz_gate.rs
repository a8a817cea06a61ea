//! Fuzzing the embedded broker's gate (`coordinator::broker::gate`) as a client meets it: byte
//! streams of MQTT packets (CONNECTs with good and bad logins, client ids and last wills, then
//! PUBLISHes, SUBSCRIBEs, pings, second CONNECTs, MQTT 5 levels, garbage; now and then a stream
//! with bytes flipped, cut or inserted) sent over loopback to a gate with a password file, an
//! ACL and payload bounds, in front of a stand-in for rumqttd that records what it is handed.
//!
//! What must hold: the gate never panics and answers every connection (no hang); what it forwards
//! is whole packets, the first a CONNECT carrying the gate's secret for a user of the password
//! file under a client id that user may take, with no last will the user may not write or over
//! its topic's bound; after it no CONNECT, and only PUBLISHes on the user's own topics within
//! their bounds and SUBSCRIBEs to what it may read (as rumqttc's decoder reads them). And the
//! gate's own parsers agree with that decoder on every packet of every stream: `frame_len` ends
//! a packet where it does, `publish_parts` reads its topic and payload length.
//!
//! `EDGECFL_FUZZ_EXECS` (connections, default 1 500), `EDGECFL_FUZZ_SECONDS`, `EDGECFL_FUZZ_SEED`
//! as in `fuzz_wire`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use coordinator::broker::acl::Acl;
use coordinator::broker::gate::{Gate, GateConfig, connect_level, frame_len, publish_parts};
use coordinator::broker::passwd::{PasswordDb, hash_line};
use edgecfl_shared::mqtt::MAX_PACKET;
use rumqttc::{Connect, LastWill, Packet, Publish, QoS, Subscribe};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

mod fuzz_common;
use fuzz_common::{Rng, env_var};

const USERS: [&str; 3] = ["c1", "c2", "coordinator"];
const ACL: &str = "pattern write f/clients/%u/up\npattern write f/clients/%u/status\n\
                   pattern read f/clients/%u/down\n";
const UP_BOUND: usize = 200;
const STATUS_BOUND: usize = 10;
const SECRET: &str = "the-gates-secret";

fn password(user: &str) -> String {
    format!("pw-{user}")
}

/// The payload bound of `topic` when `user` may write it (the ACL and the bounds above, written
/// out again by hand), `None` when it may not.
fn may_write(user: &str, topic: &str) -> Option<usize> {
    if topic == format!("f/clients/{user}/up") {
        Some(UP_BOUND)
    } else if topic == format!("f/clients/{user}/status") {
        Some(STATUS_BOUND)
    } else {
        None
    }
}

fn encode(p: Packet) -> Vec<u8> {
    let mut b = BytesMut::new();
    p.write(&mut b, MAX_PACKET).expect("encodable");
    b.to_vec()
}

/// A topic: half of the time one of `user`'s own, else anyone's or none.
fn topic(rng: &mut Rng, user: &str) -> String {
    let user = if rng.chance(2) {
        user
    } else {
        rng.pick(&["c1", "c2", "coordinator", "", "+", "#"])
    };
    let kind = rng.pick(&["up", "status", "down", "up/x", ""]);
    match rng.below(8) {
        0 => rng.pick(&["f/#", "#", "f/clients/c1", "", "f//up"]).into(),
        _ => format!("f/clients/{user}/{kind}"),
    }
}

/// One packet after the CONNECT of `user`.
fn packet(rng: &mut Rng, user: &str) -> Vec<u8> {
    match rng.below(10) {
        0..=4 => {
            let qos = rng.pick(&[QoS::AtMostOnce, QoS::AtLeastOnce]);
            let n = rng.pick(&[0, 1, STATUS_BOUND, STATUS_BOUND + 1, UP_BOUND, UP_BOUND + 1]);
            let mut p = Publish::new(topic(rng, user), qos, vec![0x5A; n]);
            p.pkid = u16::from(qos != QoS::AtMostOnce);
            encode(Packet::Publish(p))
        }
        5 | 6 => {
            let mut s = Subscribe::new(topic(rng, user), QoS::AtLeastOnce);
            s.pkid = 1;
            encode(Packet::Subscribe(s))
        }
        7 => encode(Packet::PingReq),
        8 => connect(rng, user),
        _ => (0..rng.below(12)).map(|_| rng.next() as u8).collect(),
    }
}

/// A CONNECT: users and client ids right and wrong, wills on own and other topics, within and
/// over their bounds; now and then MQTT 5's level.
fn connect(rng: &mut Rng, user: &str) -> Vec<u8> {
    let id = match rng.below(6) {
        0 => format!("x@{user}"),
        1 => rng.pick(&["c1", "c2", "@c1", "", "c1x", "x@c10"]).into(),
        _ => user.to_string(),
    };
    let mut c = Connect::new(id);
    match rng.below(8) {
        0 => {}
        1 => {
            c.set_login(user, "wrong");
        }
        _ => {
            c.set_login(user, password(user));
        }
    }
    if rng.chance(2) {
        let n = rng.pick(&[0, STATUS_BOUND, STATUS_BOUND + 1, UP_BOUND + 1]);
        c.last_will = Some(LastWill::new(
            topic(rng, user),
            vec![1; n],
            QoS::AtLeastOnce,
            false,
        ));
    }
    let mut bytes = encode(Packet::Connect(c));
    if rng.chance(16) {
        // The protocol level: the byte after the 2-byte length and "MQTT".
        let at = 1 + header_len(&bytes) + 6;
        bytes[at] = rng.pick(&[3, 5, 0, 255]);
    }
    bytes
}

/// The bytes of the fixed header's remaining length.
fn header_len(frame: &[u8]) -> usize {
    frame[1..]
        .iter()
        .position(|b| b & 0x80 == 0)
        .expect("length")
        + 1
}

/// A connection's stream: mostly a CONNECT first, then some packets; now and then mutated.
fn stream(rng: &mut Rng) -> Vec<u8> {
    let user = rng.pick(&["c1", "c2", "coordinator", "nobody"]);
    let mut s = if rng.chance(10) {
        packet(rng, user)
    } else {
        connect(rng, user)
    };
    for _ in 0..rng.below(6) {
        s.extend(packet(rng, user));
    }
    if rng.chance(4) && !s.is_empty() {
        let i = rng.below(s.len());
        match rng.below(3) {
            0 => s[i] ^= 1 << rng.below(8),
            1 => s.truncate(i),
            _ => {
                let junk: Vec<u8> = (0..1 + rng.below(4)).map(|_| rng.next() as u8).collect();
                s.splice(i..i, junk);
            }
        }
    }
    s
}

/// The length of the packet at the start of `buf` by its fixed header (written again here, to
/// check the gate's `frame_len`), `None` when incomplete or malformed.
fn packet_len(buf: &[u8]) -> Option<usize> {
    let mut len = 0usize;
    for i in 1..5 {
        let b = *buf.get(i)?;
        len |= usize::from(b & 0x7f) << (7 * (i - 1));
        if b & 0x80 == 0 {
            return Some(1 + i + len).filter(|&n| n <= buf.len());
        }
    }
    None
}

/// The gate's parsers against rumqttc's decoder on every whole packet of `s`; returns how many
/// PUBLISHes were compared.
fn parsers_agree(s: &[u8]) -> usize {
    let mut compared = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let _ = connect_level(rest);
        let Ok(framed) = frame_len(rest) else {
            return compared;
        };
        let n = packet_len(rest);
        match framed {
            Some(f) => assert_eq!(Some(f), n, "frame_len on {rest:02x?}"),
            None => {
                assert!(n.is_none() || n > Some(MAX_PACKET), "{rest:02x?}");
                return compared;
            }
        }
        let n = n.expect("whole");
        let frame = &rest[..n];
        if let Ok(Packet::Publish(p)) = Packet::read(&mut BytesMut::from(frame), MAX_PACKET) {
            assert_eq!(
                publish_parts(frame),
                Some((p.topic.as_str(), p.payload.len())),
                "publish_parts on {frame:02x?}"
            );
            compared += 1;
        }
        rest = &rest[n..];
    }
    compared
}

/// What the gate forwarded on one connection, checked: returns the PUBLISHes in it.
fn check_forwarded(bytes: &[u8]) -> usize {
    let mut buf = BytesMut::from(bytes);
    let first = Packet::read(&mut buf, MAX_PACKET);
    let Ok(Packet::Connect(c)) = first else {
        panic!("the gate forwarded {first:?} first ({bytes:02x?})");
    };
    let login = c.login.as_ref().expect("a login");
    let user = login.username.as_str();
    assert_eq!(login.password, SECRET, "forwarded without the secret");
    assert!(USERS.contains(&user), "user {user:?}");
    let id = c.client_id.as_str();
    assert!(
        id == user
            || id
                .strip_suffix(user)
                .and_then(|n| n.strip_suffix('@'))
                .is_some_and(|n| !n.is_empty()),
        "user {user:?} as client id {id:?}"
    );
    if let Some(w) = &c.last_will {
        let bound = may_write(user, &w.topic);
        assert!(
            bound.is_some_and(|b| w.message.len() <= b),
            "{user}'s will of {} bytes on {:?}",
            w.message.len(),
            w.topic
        );
    }
    let mut publishes = 0;
    let mut rest: &[u8] = &buf;
    while !rest.is_empty() {
        let n = packet_len(rest).expect("whole packets");
        let frame = &rest[..n];
        match Packet::read(&mut BytesMut::from(frame), MAX_PACKET) {
            Ok(Packet::Connect(_)) => panic!("a second CONNECT forwarded"),
            Ok(Packet::Publish(p)) => {
                let bound = may_write(user, &p.topic);
                assert!(
                    bound.is_some_and(|b| p.payload.len() <= b),
                    "{user} published {} bytes on {:?}",
                    p.payload.len(),
                    p.topic
                );
                publishes += 1;
            }
            Ok(Packet::Subscribe(s)) => {
                for f in &s.filters {
                    assert_eq!(
                        f.path,
                        format!("f/clients/{user}/down"),
                        "{user} subscribed"
                    );
                }
            }
            // rumqttd decodes the rest itself and refuses what it cannot read.
            _ => assert_ne!(frame[0] >> 4, 1, "a CONNECT forwarded: {frame:02x?}"),
        }
        rest = &rest[n..];
    }
    publishes
}

static PANICS: AtomicUsize = AtomicUsize::new(0);

/// The gate in front of a stand-in for rumqttd that sends back each connection's bytes once the
/// gate closes it.
async fn gate() -> (SocketAddr, mpsc::UnboundedReceiver<Vec<u8>>) {
    let rng = ring::rand::SystemRandom::new();
    let lines: Vec<String> = USERS
        .iter()
        .map(|u| hash_line(u, &password(u), &rng).expect("hash"))
        .collect();
    let inner = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let inner_addr = inner.local_addr().expect("address");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = inner.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                let _ = tcp.read_to_end(&mut got).await;
                let _ = tx.send(got);
            });
        }
    });
    let g = Gate::new(
        GateConfig {
            tls: None,
            passwords: Some(PasswordDb::parse(&lines.join("\n")).expect("passwords")),
            acl: Some(Acl::parse(ACL).expect("ACL")),
            payload_limits: vec![
                ("f/clients/+/up".into(), UP_BOUND),
                ("f/clients/+/status".into(), STATUS_BOUND),
            ],
            rate: None,
        },
        inner_addr,
        SECRET.into(),
    );
    let outer = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = outer.local_addr().expect("address");
    tokio::spawn(Arc::new(g).run(outer));
    (addr, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gate_forwards_only_what_the_user_may_send() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::Relaxed);
        default_hook(info);
    }));
    let execs: u64 = env_var("EDGECFL_FUZZ_EXECS").unwrap_or(1_500);
    let budget = env_var::<u64>("EDGECFL_FUZZ_SECONDS").map(Duration::from_secs);
    let seed: u64 = env_var("EDGECFL_FUZZ_SEED").unwrap_or(0);
    let mut rng = Rng(seed);
    let (addr, mut forwarded) = gate().await;
    let start = Instant::now();
    let (mut done, mut compared) = (0u64, 0usize);
    while done < execs && budget.is_none_or(|b| start.elapsed() < b) {
        done += 1;
        let s = stream(&mut rng);
        compared += parsers_agree(&s);
        let mut tcp = TcpStream::connect(addr).await.expect("connect");
        // The gate may close early (a refusal): later writes may fail.
        let _ = tcp.write_all(&s).await;
        let _ = tcp.shutdown().await;
        let mut reply = Vec::new();
        let answered =
            tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut reply)).await;
        assert!(answered.is_ok(), "no answer to {s:02x?}");
    }
    // The stand-in hands over each connection once the gate has closed it.
    let (mut sessions, mut publishes) = (0, 0);
    while let Ok(Some(bytes)) = tokio::time::timeout(Duration::from_secs(1), forwarded.recv()).await
    {
        sessions += 1;
        publishes += check_forwarded(&bytes);
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "fuzz_gate: {done} connections (seed {seed}) in {secs:.1} s, 0 panics; {sessions} \
         admitted, {publishes} publishes forwarded; publish_parts = rumqttc on {compared} PUBLISHes"
    );
    assert_eq!(PANICS.load(Ordering::Relaxed), 0, "the gate panicked");
    // A run that admits nothing or forwards nothing proves little.
    assert!(sessions > 0 && publishes > 0 && compared > 0);
}
