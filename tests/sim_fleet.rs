//! `sim-fleet`: N lightweight simulated edge clients in one process, for measuring the
//! coordinator's per-round overhead beyond training (`scripts/bench-overhead.sh`).
//!
//! Each client is a real MQTT connection speaking the real protocol, but answers at once without
//! training: a signature is the selected layers of the model it was sent, an update echoes the
//! model back, an evaluation reports fixed counts. So a round's wall time is all overhead:
//! encoding, the broker, decoding, aggregation.
//!
//! At exit it prints one JSON line of totals over the fleet (`commands` received including the
//! final `Finish` but not the join's pings, `answers` published (not the pongs), payload bytes both ways), so that a benchmark can check
//! that no message was lost against the coordinator's `wire_bytes` counts.
//!
//! Usage: `sim-fleet BROKER_PORT N [PREFIX]`

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use edgecfl_shared::model::{LayerSet, ParamLayout};
use edgecfl_shared::mqtt::{Inbound, Link, LinkOptions};
use edgecfl_shared::protocol::{
    BrokerAddr, Envelope, Hello, Id, LabelEval, Tensor, ToClient, ToCoordinator, Topics, text,
};

/// Totals over the fleet (see the module doc).
static COMMANDS: AtomicU64 = AtomicU64::new(0);
static FINISHES: AtomicU64 = AtomicU64::new(0);
static ANSWERS: AtomicU64 = AtomicU64::new(0);
static BYTES_DOWN: AtomicU64 = AtomicU64::new(0);
static BYTES_UP: AtomicU64 = AtomicU64::new(0);

fn answer(cmd: &ToClient) -> Option<ToCoordinator> {
    Some(match cmd {
        ToClient::Signature { job, layers } => {
            let layers: LayerSet = layers.parse().ok()?;
            let sel = ParamLayout::of(job.model).select(&layers).ok()?;
            let values = job.params.decode(None).ok()?;
            ToCoordinator::Signature {
                values: Tensor::encode(&sel.extract(&values), job.upload),
            }
        }
        ToClient::Train(job) => ToCoordinator::Update {
            model: job.model,
            params: Tensor::encode(&job.params.decode(None).ok()?, job.upload),
            samples: 600,
            loss: 0.5,
        },
        ToClient::Evaluate { .. } => ToCoordinator::Evaluation {
            per_label: vec![LabelEval {
                label: 0,
                correct: 50,
                total: 100,
                loss_sum: 70.0,
                trained: 600,
            }],
        },
        ToClient::Ping => ToCoordinator::Pong,
        // The overhead benchmark runs FedClust; the other methods' jobs are not echoed.
        _ => return None,
    })
}

fn client(port: u16, id: String, topics: Topics) {
    let gone = Envelope::new(Id::new(), 0, ToCoordinator::Gone).to_bytes();
    let hello = Envelope::new(
        Id::new(),
        0,
        ToCoordinator::Hello(Hello {
            samples: 600,
            test_samples: 100,
            backend: text("none"),
            shard: None,
        }),
    )
    .to_bytes();
    let broker = BrokerAddr {
        host: "127.0.0.1".into(),
        port,
        tls: false,
    };
    let link = Link::start(LinkOptions {
        subscribe: vec![topics.down(&id)],
        last_will: Some((topics.status(&id), gone.clone())),
        keep_alive: Duration::from_secs(60),
        ..LinkOptions::new(broker, id.clone())
    })
    .expect("link");
    while let Some(ev) = link.recv() {
        match ev {
            Inbound::Connected => link
                .publish(&topics.status(&id), hello.clone(), true)
                .expect("hello"),
            Inbound::Disconnected(_) => {}
            Inbound::Message { payload, .. } => {
                BYTES_DOWN.fetch_add(payload.len() as u64, Relaxed);
                let Ok(env) = Envelope::<ToClient>::from_bytes(&payload) else {
                    COMMANDS.fetch_add(1, Relaxed);
                    continue;
                };
                // Pings (the join's liveness probe) are counted apart by the coordinator too
                // (`wire_bytes.probe_down`), and their `Pong`s are not answers to jobs.
                let ping = matches!(env.body, ToClient::Ping);
                if !ping {
                    COMMANDS.fetch_add(1, Relaxed);
                }
                if matches!(env.body, ToClient::Finish | ToClient::FinalModel(_)) {
                    FINISHES.fetch_add(1, Relaxed);
                }
                let Some(reply) = answer(&env.body) else {
                    break;
                };
                let bytes = Envelope::new(env.run, env.round, reply).to_bytes();
                if !ping {
                    ANSWERS.fetch_add(1, Relaxed);
                }
                BYTES_UP.fetch_add(bytes.len() as u64, Relaxed);
                link.publish(&topics.up(&id), bytes, false).expect("upload");
            }
        }
    }
    let _ = link.publish(&topics.status(&id), gone, true);
    link.disconnect();
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(port), Some(n)) = (
        args.get(1).and_then(|p| p.parse::<u16>().ok()),
        args.get(2).and_then(|n| n.parse::<usize>().ok()),
    ) else {
        eprintln!("usage: sim-fleet BROKER_PORT N [PREFIX]");
        std::process::exit(2);
    };
    let topics =
        Topics::new(args.get(3).map_or(Topics::DEFAULT_PREFIX, String::as_str)).expect("prefix");
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let topics = topics.clone();
            std::thread::spawn(move || client(port, format!("sim-{i:04}"), topics))
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    println!(
        "{{\"clients\":{n},\"commands\":{},\"finishes\":{},\"answers\":{},\"bytes_down\":{},\"bytes_up\":{}}}",
        COMMANDS.load(Relaxed),
        FINISHES.load(Relaxed),
        ANSWERS.load(Relaxed),
        BYTES_DOWN.load(Relaxed),
        BYTES_UP.load(Relaxed)
    );
}
