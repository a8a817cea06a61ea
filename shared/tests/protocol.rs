//! The wire format, pinned byte for byte (the expected bytes are written out from postcard's
//! specification: varint integers, length-prefixed strings and byte vectors, enum variants as
//! varint indices, f64 as 8 little-endian bytes), and decoding that never panics.

use edgecfl_shared::protocol::{
    BrokerAddr, Encoding, Envelope, FinalModel, Hello, LabelEval, MAX_PAYLOAD, ModelKind,
    ProtocolError, ShardInfo, Tensor, ToClient, ToCoordinator, TopicKind, Topics, TrainJob,
    VERSION, id, text,
};
use proptest::prelude::*;

fn env<B: serde::Serialize + serde::de::DeserializeOwned>(
    run: &str,
    round: u32,
    b: B,
) -> Envelope<B> {
    Envelope::new(id(run).unwrap(), round, b)
}

/// Round-trips `msg` and checks its bytes.
fn golden<B>(msg: Envelope<B>, bytes: &[u8])
where
    B: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    assert_eq!(msg.to_bytes(), bytes, "encoding of {msg:?}");
    assert_eq!(Envelope::<B>::from_bytes(bytes).unwrap(), msg);
}

const ONE_F32: [u8; 4] = [0x00, 0x00, 0x80, 0x3F];
const LR_001: [u8; 8] = [0x7B, 0x14, 0xAE, 0x47, 0xE1, 0x7A, 0x84, 0x3F];
const HALF_F64: [u8; 8] = [0, 0, 0, 0, 0, 0, 0xE0, 0x3F];

fn job() -> TrainJob {
    TrainJob {
        model: ModelKind::LeNet5,
        params: Tensor::encode(&[1.0], Encoding::F32),
        epochs: 10,
        batch_size: 10,
        lr: 0.01,
        momentum: 0.5,
        seed: 300,
        upload: Encoding::F16,
    }
}

fn job_bytes() -> Vec<u8> {
    let mut b = vec![0x00, 0x00, 0x04];
    b.extend(ONE_F32);
    b.extend([0x0A, 0x0A]);
    b.extend(LR_001);
    b.extend(HALF_F64);
    b.extend([0xAC, 0x02, 0x01]);
    b
}

#[test]
fn golden_to_client() {
    // version 1, run "r1" (len 2), round 3
    let head = [0x02, 0x02, b'r', b'1', 0x03];
    let cat = |body: &[u8]| [&head[..], body].concat();

    let mut sig = vec![0x00];
    sig.extend(job_bytes());
    sig.extend([0x05, b'f', b'i', b'n', b'a', b'l']);
    golden(
        env(
            "r1",
            3,
            ToClient::Signature {
                job: job(),
                layers: text("final"),
            },
        ),
        &cat(&sig),
    );

    let mut train = vec![0x01];
    train.extend(job_bytes());
    golden(env("r1", 3, ToClient::Train(job())), &cat(&train));

    let mut eval = vec![0x02, 0x01, 0x00, 0x04];
    eval.extend(ONE_F32);
    golden(
        env(
            "r1",
            3,
            ToClient::Evaluate {
                model: ModelKind::Mlp,
                params: Tensor::encode(&[1.0], Encoding::F32),
            },
        ),
        &cat(&eval),
    );

    golden(env("r1", 3, ToClient::Finish), &cat(&[0x03]));
    golden(env("r1", 3, ToClient::Ping), &cat(&[0x0C]));
    // variant 14: kind "echo" (len 4), body of 2 bytes
    golden(
        env(
            "r1",
            3,
            ToClient::Custom {
                kind: text("echo"),
                body: vec![0x01, 0xFF],
            },
        ),
        &cat(&[0x0E, 0x04, b'e', b'c', b'h', b'o', 0x02, 0x01, 0xFF]),
    );

    // variant 13, LeNet-5, f32 tensor of 4 bytes, cluster 2, 300 rounds (varint AC 02),
    // "fedclust" (len 8), Some(0.5)
    let mut kept = vec![0x0D, 0x00, 0x00, 0x04];
    kept.extend(ONE_F32);
    kept.extend([0x02, 0xAC, 0x02, 0x08]);
    kept.extend(b"fedclust");
    kept.push(0x01);
    kept.extend(HALF_F64);
    golden(
        env(
            "r1",
            3,
            ToClient::FinalModel(FinalModel {
                model: ModelKind::LeNet5,
                params: Tensor::encode(&[1.0], Encoding::F32),
                cluster: 2,
                rounds: 300,
                method: text("fedclust"),
                accuracy: Some(0.5),
            }),
        ),
        &cat(&kept),
    );
}

#[test]
fn golden_to_coordinator() {
    let hello = ToCoordinator::Hello(Hello {
        samples: 600,
        test_samples: 2000,
        backend: text("flex"),
        shard: Some(ShardInfo {
            partition: text("iid"),
            seed: 7,
            index: 2,
            of: 6,
            group: Some(1),
        }),
    });
    let blank = |b: ToCoordinator| Envelope::new(Default::default(), 0, b);
    golden(
        blank(hello),
        &[
            0x02, 0x00, 0x00, // version 2, run "", round 0
            0x00, 0xD8, 0x04, 0xD0, 0x0F, // Hello, 600, 2000
            0x04, b'f', b'l', b'e', b'x', // "flex"
            0x01, 0x03, b'i', b'i', b'd', 0x07, // Some(partition "iid", seed 7,
            0x02, 0x06, 0x01, 0x01, //           shard 2 of 6, Some(group 1))
        ],
    );
    golden(blank(ToCoordinator::Gone), &[0x02, 0x00, 0x00, 0x05]);
    golden(blank(ToCoordinator::Pong), &[0x02, 0x00, 0x00, 0x0C]);
    // variant 13: kind "echo" (len 4), empty body
    golden(
        blank(ToCoordinator::Custom {
            kind: text("echo"),
            body: vec![],
        }),
        &[0x02, 0x00, 0x00, 0x0D, 0x04, b'e', b'c', b'h', b'o', 0x00],
    );

    let head = [0x02, 0x01, b'x', 0x00];
    let cat = |body: &[u8]| [&head[..], body].concat();
    golden(
        env(
            "x",
            0,
            ToCoordinator::Signature {
                values: Tensor::encode(&[1.0], Encoding::F16),
            },
        ),
        &cat(&[0x01, 0x01, 0x02, 0x00, 0x3C]),
    );
    let mut update = vec![0x02, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0xC0, 0xD8, 0x04];
    update.extend([0, 0, 0, 0, 0, 0, 0xD0, 0x3F]);
    golden(
        env(
            "x",
            0,
            ToCoordinator::Update {
                model: ModelKind::LeNet5,
                params: Tensor::encode(&[-2.0], Encoding::F32),
                samples: 600,
                loss: 0.25,
            },
        ),
        &cat(&update),
    );
    let mut evaluation = vec![0x03, 0x01, 0x07, 0x5A, 0x64];
    evaluation.extend([0, 0, 0, 0, 0, 0, 0, 0x40]); // loss_sum 2.0
    evaluation.extend([0xAC, 0x02]); // trained 300
    golden(
        env(
            "x",
            0,
            ToCoordinator::Evaluation {
                per_label: vec![LabelEval {
                    label: 7,
                    correct: 90,
                    total: 100,
                    loss_sum: 2.0,
                    trained: 300,
                }],
            },
        ),
        &cat(&evaluation),
    );
    golden(
        env(
            "x",
            0,
            ToCoordinator::Failed {
                reason: text("nan"),
            },
        ),
        &cat(&[0x04, 0x03, b'n', b'a', b'n']),
    );
}

/// The messages of the methods after FedClust and MT-HFL (FedProx, FeSEM, StoCFL, IFCA, AdaCFL):
/// appended to both enums, so every earlier message keeps its bytes.
#[test]
fn golden_method_messages() {
    const QUARTER_F64: [u8; 8] = [0, 0, 0, 0, 0, 0, 0xD0, 0x3F];
    const ONE_F64: [u8; 8] = [0, 0, 0, 0, 0, 0, 0xF0, 0x3F];
    const ONE_F16: [u8; 4] = [0x01, 0x02, 0x00, 0x3C]; // f16 tensor [1.0]
    let head = [0x02, 0x02, b'r', b'1', 0x03];
    let cat = |parts: &[&[u8]]| [&head[..], &parts.concat()].concat();
    let one_f32 = Tensor::encode(&[1.0], Encoding::F32);
    let one_f32_bytes = [&[0x00, 0x04][..], &ONE_F32].concat();

    golden(
        env(
            "r1",
            3,
            ToClient::TrainProx {
                job: job(),
                mu: 0.5,
            },
        ),
        &cat(&[&[0x07], &job_bytes(), &HALF_F64]),
    );
    golden(
        env(
            "r1",
            3,
            ToClient::TrainPair {
                global: job(),
                cluster: job(),
                mu: 0.5,
            },
        ),
        &cat(&[&[0x08], &job_bytes(), &job_bytes(), &HALF_F64]),
    );
    golden(
        env(
            "r1",
            3,
            ToClient::Pick {
                job: job(),
                candidates: vec![one_f32.clone()],
            },
        ),
        &cat(&[&[0x09], &job_bytes(), &[0x01], &one_f32_bytes]),
    );
    golden(
        env(
            "r1",
            3,
            ToClient::Gradient {
                model: ModelKind::Mlp,
                params: one_f32.clone(),
                batch_size: 10,
                upload: Encoding::F16,
            },
        ),
        &cat(&[&[0x0A, 0x01], &one_f32_bytes, &[0x0A, 0x01]]),
    );
    golden(
        env(
            "r1",
            3,
            ToClient::SignatureStats {
                job: job(),
                layers: text("final"),
            },
        ),
        &cat(&[&[0x0B], &job_bytes(), &[0x05, b'f', b'i', b'n', b'a', b'l']]),
    );

    let one_f16 = Tensor::encode(&[1.0], Encoding::F16);
    golden(
        env(
            "r1",
            3,
            ToCoordinator::Pair {
                model: ModelKind::LeNet5,
                global: Tensor::encode(&[-2.0], Encoding::F32),
                cluster: one_f16.clone(),
                samples: 600,
                global_loss: 0.25,
                cluster_loss: 0.5,
            },
        ),
        &cat(&[
            &[0x08, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0xC0],
            &ONE_F16,
            &[0xD8, 0x04],
            &QUARTER_F64,
            &HALF_F64,
        ]),
    );
    golden(
        env(
            "r1",
            3,
            ToCoordinator::Picked {
                choice: 1,
                losses: vec![0.5],
                model: ModelKind::Mlp,
                params: one_f16.clone(),
                samples: 600,
                loss: 0.25,
            },
        ),
        &cat(&[
            &[0x09, 0x01, 0x01],
            &HALF_F64,
            &[0x01],
            &ONE_F16,
            &[0xD8, 0x04],
            &QUARTER_F64,
        ]),
    );
    golden(
        env(
            "r1",
            3,
            ToCoordinator::Gradient {
                values: one_f16.clone(),
            },
        ),
        &cat(&[&[0x0A], &ONE_F16]),
    );
    golden(
        env(
            "r1",
            3,
            ToCoordinator::SignatureStats {
                values: one_f16,
                classes: 2,
                entropy: 1.0,
            },
        ),
        &cat(&[&[0x0B], &ONE_F16, &[0x02], &ONE_F64]),
    );
}

#[test]
fn lenet_in_f32_is_178_kb_and_f16_halves_it() {
    let values = vec![0.5f32; 44_426];
    let up = |e| {
        env(
            "run",
            1,
            ToCoordinator::Update {
                model: ModelKind::LeNet5,
                params: Tensor::encode(&values, e),
                samples: 600,
                loss: 0.1,
            },
        )
        .to_bytes()
        .len()
    };
    let (f32_len, f16_len) = (up(Encoding::F32), up(Encoding::F16));
    assert!((177_704..177_704 + 32).contains(&f32_len), "{f32_len}");
    assert!((88_852..88_852 + 32).contains(&f16_len), "{f16_len}");
}

#[test]
fn typed_errors() {
    let good = env("r1", 3, ToClient::Finish).to_bytes();
    // Another version (1, before `LabelEval::trained`; 3, a future one) is reported as such,
    // whatever follows.
    for other in [1u8, 3] {
        let mut bytes = good.clone();
        bytes[0] = other;
        assert_eq!(
            Envelope::<ToClient>::from_bytes(&bytes),
            Err(ProtocolError::Version {
                got: u16::from(other),
                expected: VERSION
            })
        );
    }
    for cut in 0..good.len() {
        assert_eq!(
            Envelope::<ToClient>::from_bytes(&good[..cut]),
            Err(ProtocolError::Truncated),
            "cut at {cut}"
        );
    }
    let mut long = good.clone();
    long.push(0);
    assert_eq!(
        Envelope::<ToClient>::from_bytes(&long),
        Err(ProtocolError::TrailingBytes(1))
    );
    // Unknown enum variant.
    let mut bad = good.clone();
    *bad.last_mut().unwrap() = 0x7F;
    assert!(matches!(
        Envelope::<ToClient>::from_bytes(&bad),
        Err(ProtocolError::Malformed(_))
    ));
    // A run id with a topic wildcard in it.
    let wild = [0x02, 0x01, b'+', 0x00, 0x03];
    assert!(matches!(
        Envelope::<ToClient>::from_bytes(&wild),
        Err(ProtocolError::BadId(_))
    ));
    let huge = vec![0u8; MAX_PAYLOAD + 1];
    assert!(matches!(
        Envelope::<ToClient>::from_bytes(&huge),
        Err(ProtocolError::Oversized { .. })
    ));
}

#[test]
fn tensors() {
    let t = Tensor::encode(&[1.0, -0.5, 3.25], Encoding::F32);
    assert_eq!(t.decode(Some(3)).unwrap(), vec![1.0, -0.5, 3.25]);
    assert_eq!(
        t.decode(Some(4)),
        Err(ProtocolError::TensorLength {
            expected: 4,
            got: 3
        })
    );
    // f16: exact for these, within 2^-11 relative in general.
    let h = Tensor::encode(&[1.0, -0.5, 0.1], Encoding::F16);
    assert_eq!(h.bytes.len(), 6);
    let back = h.decode(None).unwrap();
    assert_eq!(&back[..2], &[1.0, -0.5]);
    assert!((back[2] - 0.1).abs() < 0.1 / 2048.0);
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e6] {
        let enc = if bad == 1e6 {
            Encoding::F16 // overflows f16 to infinity
        } else {
            Encoding::F32
        };
        assert_eq!(
            Tensor::encode(&[0.0, bad], enc).decode(None),
            Err(ProtocolError::NotFinite(1)),
            "{bad}"
        );
    }
    let odd = Tensor {
        encoding: Encoding::F32,
        bytes: vec![0; 7],
    };
    assert!(matches!(
        odd.decode(None),
        Err(ProtocolError::TensorBytes { bytes: 7, .. })
    ));
}

#[test]
fn ids_topics_and_broker_urls() {
    assert!(id("pi-07_a.b").is_ok());
    for bad in ["", "a/b", "a+", "#", "x y", &"a".repeat(33)] {
        assert!(id(bad).is_err(), "{bad:?}");
    }
    assert_eq!(text(&"é".repeat(40)).len(), 64);

    let t = Topics::new("edgecfl/lab1/").unwrap();
    assert_eq!(t.status("pi-1"), "edgecfl/lab1/clients/pi-1/status");
    assert_eq!(t.all_up(), "edgecfl/lab1/clients/+/up");
    assert_eq!(
        t.parse("edgecfl/lab1/clients/pi-1/up"),
        Some(("pi-1", TopicKind::Up))
    );
    assert_eq!(t.parse(&t.down("c")), Some(("c", TopicKind::Down)));
    assert_eq!(t.parse("edgecfl/other/clients/pi-1/up"), None);
    assert_eq!(t.parse("edgecfl/lab1/clients/pi-1/sideways"), None);
    assert!(Topics::new("a/+/b").is_err());

    let a: BrokerAddr = "mqtt://10.0.0.2:1884".parse().unwrap();
    assert_eq!((a.host.as_str(), a.port), ("10.0.0.2", 1884));
    let b: BrokerAddr = "broker.local".parse().unwrap();
    assert_eq!((b.host.as_str(), b.port), ("broker.local", 1883));
    assert_eq!(b.to_string(), "mqtt://broker.local:1883");
    assert!(!a.tls && !b.tls);
    let c: BrokerAddr = "mqtts://broker.local".parse().unwrap();
    assert_eq!(
        (c.host.as_str(), c.port, c.tls),
        ("broker.local", 8883, true)
    );
    assert_eq!(c.to_string(), "mqtts://broker.local:8883");
    let d: BrokerAddr = "ssl://10.0.0.2:9883".parse().unwrap();
    assert_eq!((d.port, d.tls), (9883, true));
    let e: BrokerAddr = "mqtts://[::1]:8884".parse().unwrap();
    assert_eq!((e.host.as_str(), e.port, e.tls), ("::1", 8884, true));
    assert_eq!(e.to_string().parse::<BrokerAddr>().unwrap(), e);
    assert!("ws://x:1".parse::<BrokerAddr>().is_err());
    assert!("mqtt://x:port".parse::<BrokerAddr>().is_err());
    assert!("mqtt://:1883".parse::<BrokerAddr>().is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    /// Any byte string decodes to a message or a typed error; never a panic.
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = Envelope::<ToClient>::from_bytes(&bytes);
        let _ = Envelope::<ToCoordinator>::from_bytes(&bytes);
    }

    /// Valid prefixes with random tails (reaches deeper than pure noise).
    #[test]
    fn version_prefixed_bytes_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut bytes = vec![VERSION as u8, 0x00, 0x00];
        bytes.extend(tail);
        if let Ok(m) = Envelope::<ToCoordinator>::from_bytes(&bytes) {
            prop_assert_eq!(Envelope::<ToCoordinator>::from_bytes(&m.to_bytes()).unwrap(), m);
        }
        let _ = Envelope::<ToClient>::from_bytes(&bytes);
    }

    /// f32 tensors round-trip exactly.
    #[test]
    fn f32_tensors_round_trip(v in proptest::collection::vec(-1e30f32..1e30, 0..64)) {
        prop_assert_eq!(Tensor::encode(&v, Encoding::F32).decode(Some(v.len())).unwrap(), v);
    }
}

/// The broker-side limits (the embedded broker's gate refuses larger publishes): every status
/// message fits [`MAX_STATUS_PAYLOAD`], and every upload of a run fits
/// `upload_limit(largest_upload_floats)`, each message at its largest (longest texts and ids,
/// largest integers, every label, as many IFCA losses as clusters).
#[test]
fn largest_messages_fit_the_broker_limits() {
    use edgecfl_shared::algorithms::{Algorithm, MethodConfig};
    use edgecfl_shared::federation::FederationConfig;
    use edgecfl_shared::model::ParamLayout;
    use edgecfl_shared::protocol::{Eigenpairs, LpsDone, MAX_STATUS_PAYLOAD, ToGps, upload_limit};
    let run = "r".repeat(edgecfl_shared::protocol::MAX_ID_LEN);
    let long = "x".repeat(64);
    let at_most = |limit: usize, what: &str, len: usize| {
        assert!(len <= limit, "{what}: {len} bytes > {limit}");
    };
    let hello = Hello {
        samples: u64::MAX,
        test_samples: u64::MAX,
        backend: text(&long),
        shard: Some(ShardInfo {
            partition: text(&long),
            seed: u64::MAX,
            index: u32::MAX,
            of: u32::MAX,
            group: Some(u32::MAX),
        }),
    };
    for (what, len) in [
        (
            "Hello",
            env(&run, u32::MAX, ToCoordinator::Hello(hello))
                .to_bytes()
                .len(),
        ),
        (
            "Gone",
            env(&run, u32::MAX, ToCoordinator::Gone).to_bytes().len(),
        ),
        (
            "LPS Hello",
            env(&run, u32::MAX, ToGps::Hello).to_bytes().len(),
        ),
        (
            "LPS Gone",
            env(&run, u32::MAX, ToGps::Gone).to_bytes().len(),
        ),
    ] {
        at_most(MAX_STATUS_PAYLOAD, what, len);
    }
    for (model, clients, k, clusters) in [
        (ModelKind::LeNet5, 100, 1, 4),
        (ModelKind::Mlp, 1000, 5, 1000),
        (ModelKind::LeNet5, 10_000, 2, 10_000),
    ] {
        let limit = |algorithm: Algorithm| {
            let mut cfg = MethodConfig::new(
                algorithm,
                FederationConfig {
                    model,
                    clusters: Some(clusters),
                    ..FederationConfig::default()
                },
            );
            cfg.methods.mthfl.eigenvectors = Some(k);
            upload_limit(cfg.largest_upload_floats(clients))
        };
        let p = vec![0.5f32; ParamLayout::of(model).len()];
        let t = |n: usize| Tensor::encode(&vec![0.5f32; n], Encoding::F32);
        let up = |b: ToCoordinator| env(&run, u32::MAX, b).to_bytes().len();
        let lps = |b: ToGps| env(&run, u32::MAX, b).to_bytes().len();
        let per_label: Vec<LabelEval> = (0..=255u8)
            .map(|label| LabelEval {
                label,
                correct: u32::MAX,
                total: u32::MAX,
                loss_sum: f64::MAX,
                trained: u32::MAX,
            })
            .collect();
        let pixels = edgecfl_shared::data::ImageShape::GREY_28.pixels();
        let sent = [
            (
                "Update",
                up(ToCoordinator::Update {
                    model,
                    params: t(p.len()),
                    samples: u64::MAX,
                    loss: 1.0,
                }),
            ),
            (
                "Pair",
                up(ToCoordinator::Pair {
                    model,
                    global: t(p.len()),
                    cluster: t(p.len()),
                    samples: u64::MAX,
                    global_loss: 1.0,
                    cluster_loss: 1.0,
                }),
            ),
            (
                "Picked",
                up(ToCoordinator::Picked {
                    choice: u32::MAX,
                    losses: vec![1.0; clusters],
                    model,
                    params: t(p.len()),
                    samples: u64::MAX,
                    loss: 1.0,
                }),
            ),
            (
                "Gradient",
                up(ToCoordinator::Gradient { values: t(p.len()) }),
            ),
            (
                "Signature",
                up(ToCoordinator::Signature { values: t(p.len()) }),
            ),
            (
                "SignatureStats",
                up(ToCoordinator::SignatureStats {
                    values: t(p.len()),
                    classes: u32::MAX,
                    entropy: 1.0,
                }),
            ),
            ("Evaluation", up(ToCoordinator::Evaluation { per_label })),
            (
                "Failed",
                up(ToCoordinator::Failed {
                    reason: text(&long),
                }),
            ),
            (
                "Eigenpairs",
                up(ToCoordinator::Eigenpairs(Eigenpairs::encode(
                    k,
                    pixels,
                    &vec![1.0; k],
                    &vec![0.5; k * pixels],
                    Encoding::F32,
                ))),
            ),
            (
                "RelevanceRow",
                up(ToCoordinator::RelevanceRow { row: t(clients) }),
            ),
            ("Pong", up(ToCoordinator::Pong)),
            (
                "LPS Common",
                lps(ToGps::Common {
                    samples: u64::MAX,
                    accuracy: Some(1.0),
                    values: t(p.len()),
                }),
            ),
            (
                "LPS Done",
                lps(ToGps::Done(LpsDone {
                    rounds: u32::MAX,
                    gps_rounds: u32::MAX,
                    evaluated: u32::MAX,
                    final_accuracy: Some(1.0),
                    wall_seconds: 1.0,
                })),
            ),
            (
                "LPS Failed",
                lps(ToGps::Failed {
                    reason: text(&long),
                }),
            ),
        ];
        // Who sends what: the messages of one method only, and the rest every method may send.
        let sender = |what: &str| match what {
            "Pair" | "Gradient" => Some(Algorithm::StoCfl),
            "Picked" => Some(Algorithm::Ifca),
            "SignatureStats" => Some(Algorithm::AdaCfl),
            "Eigenpairs" | "RelevanceRow" => Some(Algorithm::MtHfl),
            _ => None,
        };
        for algorithm in Algorithm::all() {
            let name = algorithm.name();
            for &(what, len) in &sent {
                if sender(what).is_none_or(|a| a == algorithm) {
                    at_most(
                        limit(algorithm),
                        &format!("{what} of {name} ({model:?}, {clients} clients)"),
                        len,
                    );
                }
            }
        }
        // The bound is the method's own: a method that uploads one model at a time is refused
        // StoCFL's pair.
        let pair = sent.iter().find(|(what, _)| *what == "Pair").unwrap().1;
        for name in ["fedclust", "fedavg", "fedprox", "cfl"] {
            assert!(
                pair > limit(name.parse().unwrap()),
                "{name} would accept StoCFL's pair ({model:?})"
            );
        }
        // What a client receives: the final model, at its largest, within what it accepts.
        let kept = env(
            &run,
            u32::MAX,
            ToClient::FinalModel(FinalModel {
                model,
                params: t(p.len()),
                cluster: u32::MAX,
                rounds: u32::MAX,
                method: text(&long),
                accuracy: Some(1.0),
            }),
        );
        at_most(MAX_PAYLOAD, "FinalModel", kept.to_bytes().len());
    }
}
