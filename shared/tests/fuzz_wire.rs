//! Mutation fuzzing of every decoder of the wire protocol, on stable Rust and in CI.
//!
//! A corpus holds one valid payload of every message of the four families (coordinator → client,
//! client → coordinator, GPS → LPS, LPS → GPS). Each execution takes a corpus entry, applies one
//! to four random mutations (bit flips, interesting bytes, truncation, deletion, insertion,
//! duplication, splicing with another entry, overlong or huge varints, or pure noise) and feeds the
//! result to every family's decoder, then to the validators a peer runs on what decoded (tensor
//! decoding with and without an expected length, eigenpair shapes, relevance rows, LPS
//! assignments, GPS uploads). It must never panic, and whatever decodes must re-encode to bytes
//! that decode to the same bytes again (no longer than the input: postcard's encoding is the
//! shortest one). Inputs that decode are kept (up to a bound) as further seeds, so the search goes
//! past the corpus.
//!
//! Deterministic for a seed. Environment:
//! - `EDGECFL_FUZZ_EXECS`: executions (default 200 000);
//! - `EDGECFL_FUZZ_SECONDS`: stop earlier after this many seconds (no default);
//! - `EDGECFL_FUZZ_SEED`: the seed (default 0).
//!
//! The long run recorded in BENCHMARKS.md:
//! `EDGECFL_FUZZ_EXECS=200000000 EDGECFL_FUZZ_SEED=1 cargo test -p edgecfl-shared --test fuzz_wire -- --nocapture`.
//! A coverage-guided target for `cargo +nightly fuzz` is in `shared/fuzz/`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use edgecfl_shared::protocol::{
    Eigenpairs, Encoding, Envelope, Estimate, FinalModel, Hello, LabelEval, LpsAssignment, LpsDone,
    ModelKind, ShardInfo, Tensor, ToClient, ToCoordinator, ToGps, ToLps, TrainJob, decode_row, id,
    text,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// splitmix64: small, seedable, good enough to drive mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n ≥ 1`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn job(params: &[f32], upload: Encoding) -> TrainJob {
    TrainJob {
        model: ModelKind::LeNet5,
        params: Tensor::encode(params, Encoding::F32),
        epochs: 2,
        batch_size: 10,
        lr: 0.01,
        momentum: 0.5,
        seed: 300,
        upload,
    }
}

fn pairs(encoding: Encoding) -> Eigenpairs {
    // Two signatures of k = 2 eigenpairs in d = 3.
    Eigenpairs::encode(
        2,
        3,
        &[2.0, 1.0, 3.0, 0.5],
        &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0],
        encoding,
    )
}

/// One message of every kind (the `match`es make a new variant a compile error until it is
/// added here).
fn to_client() -> Vec<ToClient> {
    let all = vec![
        ToClient::Signature {
            job: job(&[1.0, -2.0], Encoding::F32),
            layers: text("final"),
        },
        ToClient::Train(job(&[0.5; 4], Encoding::F16)),
        ToClient::Evaluate {
            model: ModelKind::Mlp,
            params: Tensor::encode(&[0.25, 1e-3], Encoding::F32),
        },
        ToClient::Finish,
        ToClient::GramSignature {
            k: 2,
            upload: Encoding::F16,
        },
        ToClient::Relay(pairs(Encoding::F32)),
        ToClient::Relevance {
            clients: 2,
            estimate: Estimate::Rayleigh,
        },
        ToClient::TrainProx {
            job: job(&[1.0], Encoding::F32),
            mu: 0.1,
        },
        ToClient::TrainPair {
            global: job(&[1.0], Encoding::F32),
            cluster: job(&[2.0], Encoding::F32),
            mu: 0.05,
        },
        ToClient::Pick {
            job: job(&[], Encoding::F32),
            candidates: vec![
                Tensor::encode(&[1.0, 2.0], Encoding::F32),
                Tensor::encode(&[3.0, 4.0], Encoding::F16),
            ],
        },
        ToClient::Gradient {
            model: ModelKind::LeNet5,
            params: Tensor::encode(&[0.5, 0.5], Encoding::F32),
            batch_size: 50,
            upload: Encoding::F32,
        },
        ToClient::SignatureStats {
            job: job(&[1.0], Encoding::F32),
            layers: text("smallest-fc"),
        },
        ToClient::Ping,
        ToClient::FinalModel(FinalModel {
            model: ModelKind::LeNet5,
            params: Tensor::encode(&[0.5, -0.5], Encoding::F32),
            cluster: 1,
            rounds: 3,
            method: text("fedclust"),
            accuracy: Some(0.9),
        }),
        ToClient::Custom {
            kind: text("label-counts"),
            body: vec![],
        },
    ];
    for m in &all {
        match m {
            ToClient::Signature { .. }
            | ToClient::Train(_)
            | ToClient::Evaluate { .. }
            | ToClient::Finish
            | ToClient::Ping
            | ToClient::GramSignature { .. }
            | ToClient::Relay(_)
            | ToClient::Relevance { .. }
            | ToClient::TrainProx { .. }
            | ToClient::TrainPair { .. }
            | ToClient::Pick { .. }
            | ToClient::Gradient { .. }
            | ToClient::SignatureStats { .. }
            | ToClient::FinalModel(_)
            | ToClient::Custom { .. } => {}
        }
    }
    all
}

fn to_coordinator() -> Vec<ToCoordinator> {
    let all = vec![
        ToCoordinator::Hello(Hello {
            samples: 600,
            test_samples: 2000,
            backend: text("flex"),
            shard: Some(ShardInfo {
                partition: text("groups:012-34-56-789"),
                seed: 7,
                index: 2,
                of: 10,
                group: Some(1),
            }),
        }),
        ToCoordinator::Signature {
            values: Tensor::encode(&[1.0, -1.0, 0.5], Encoding::F16),
        },
        ToCoordinator::Update {
            model: ModelKind::LeNet5,
            params: Tensor::encode(&[-2.0, 3.0], Encoding::F32),
            samples: 600,
            loss: 0.25,
        },
        ToCoordinator::Evaluation {
            per_label: vec![
                LabelEval {
                    label: 7,
                    correct: 90,
                    total: 100,
                    loss_sum: 2.0,
                    trained: 600,
                },
                LabelEval {
                    label: 1,
                    correct: 3,
                    total: 4,
                    loss_sum: 0.5,
                    trained: 0,
                },
            ],
        },
        ToCoordinator::Failed {
            reason: text("out of memory"),
        },
        ToCoordinator::Gone,
        ToCoordinator::Eigenpairs(Eigenpairs::encode(
            2,
            3,
            &[2.0, 1.0],
            &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0],
            Encoding::F16,
        )),
        ToCoordinator::RelevanceRow {
            row: Tensor::encode(&[1.0, 0.25, 0.0], Encoding::F32),
        },
        ToCoordinator::Pair {
            model: ModelKind::LeNet5,
            global: Tensor::encode(&[1.0], Encoding::F32),
            cluster: Tensor::encode(&[2.0], Encoding::F32),
            samples: 60,
            global_loss: 0.5,
            cluster_loss: 0.25,
        },
        ToCoordinator::Picked {
            choice: 1,
            losses: vec![0.5, 0.25],
            model: ModelKind::LeNet5,
            params: Tensor::encode(&[1.0, 2.0], Encoding::F32),
            samples: 60,
            loss: 0.2,
        },
        ToCoordinator::Gradient {
            values: Tensor::encode(&[0.6, 0.8], Encoding::F32),
        },
        ToCoordinator::SignatureStats {
            values: Tensor::encode(&[1.0, 2.0], Encoding::F16),
            classes: 2,
            entropy: 1.0,
        },
        ToCoordinator::Pong,
        ToCoordinator::Custom {
            kind: text("label-counts"),
            body: vec![1, 0, 0, 3],
        },
    ];
    for m in &all {
        match m {
            ToCoordinator::Hello(_)
            | ToCoordinator::Signature { .. }
            | ToCoordinator::Update { .. }
            | ToCoordinator::Evaluation { .. }
            | ToCoordinator::Failed { .. }
            | ToCoordinator::Gone
            | ToCoordinator::Pong
            | ToCoordinator::Eigenpairs(_)
            | ToCoordinator::RelevanceRow { .. }
            | ToCoordinator::Pair { .. }
            | ToCoordinator::Picked { .. }
            | ToCoordinator::Gradient { .. }
            | ToCoordinator::SignatureStats { .. }
            | ToCoordinator::Custom { .. } => {}
        }
    }
    all
}

fn to_lps() -> Vec<ToLps> {
    let all = vec![
        ToLps::Assign(Box::new(LpsAssignment {
            cluster: 1,
            clusters: 3,
            members: vec![id("c1").unwrap(), id("c7").unwrap()],
            model: ModelKind::Mlp,
            initial: Tensor::encode(&[0.1, -0.1, 0.2], Encoding::F32),
            common_layers: text("fc1"),
            rounds: 20,
            lps_rounds: 2,
            eval_every: 5,
            frac: 0.5,
            epochs: 1,
            batch_size: 10,
            lr: 0.01,
            momentum: 0.5,
            seed: 9,
            upload: Encoding::F32,
            equal_weights: false,
            max_update_norm: edgecfl_shared::protocol::NormBound::Median(10.0),
        })),
        ToLps::Common {
            values: Tensor::encode(&[0.5, 0.25], Encoding::F32),
        },
        ToLps::Finish,
        ToLps::Resend,
    ];
    for m in &all {
        match m {
            ToLps::Assign(_) | ToLps::Common { .. } | ToLps::Finish | ToLps::Resend => {}
        }
    }
    all
}

fn to_gps() -> Vec<ToGps> {
    let all = vec![
        ToGps::Hello,
        ToGps::Common {
            samples: 1200,
            accuracy: Some(0.75),
            values: Tensor::encode(&[0.5, 0.25], Encoding::F32),
        },
        ToGps::Done(LpsDone {
            rounds: 20,
            gps_rounds: 10,
            evaluated: 3,
            final_accuracy: Some(0.8),
            wall_seconds: 12.5,
        }),
        ToGps::Failed {
            reason: text("no members answered"),
        },
        ToGps::Gone,
    ];
    for m in &all {
        match m {
            ToGps::Hello
            | ToGps::Common { .. }
            | ToGps::Done(_)
            | ToGps::Failed { .. }
            | ToGps::Gone => {}
        }
    }
    all
}

/// Every message in an envelope, encoded, by family; run ids of both kinds (empty, as in
/// `Hello`, and set).
fn corpus() -> [Vec<Vec<u8>>; 4] {
    fn wrap<B: Serialize + DeserializeOwned>(msgs: Vec<B>) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for (i, b) in msgs.into_iter().enumerate() {
            let run = if i % 2 == 0 {
                id("run-1").unwrap()
            } else {
                Default::default()
            };
            out.push(Envelope::new(run, i as u32, b).to_bytes());
        }
        out
    }
    [
        wrap(to_client()),
        wrap(to_coordinator()),
        wrap(to_lps()),
        wrap(to_gps()),
    ]
}

/// One to four stacked mutations of `seed` (and `other`, for splicing).
fn mutate(rng: &mut Rng, seed: &[u8], other: &[u8]) -> Vec<u8> {
    const INTERESTING: [u8; 8] = [0x00, 0x01, 0x02, 0x7F, 0x80, 0xFE, 0xFF, 0x3C];
    let mut b = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = b.len();
        match rng.below(10) {
            0 if len > 0 => {
                let i = rng.below(len);
                b[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                b[i] = INTERESTING[rng.below(INTERESTING.len())];
            }
            2 => b.truncate(rng.below(len + 1)),
            3 if len > 0 => {
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(16));
                b.drain(at..at + n);
            }
            4 => {
                let at = rng.below(len + 1);
                let n = 1 + rng.below(16);
                let ins: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                b.splice(at..at, ins);
            }
            5 if len > 0 => {
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(32));
                let dup = b[at..at + n].to_vec();
                let to = rng.below(len + 1);
                b.splice(to..to, dup);
            }
            6 => {
                let cut = rng.below(len + 1);
                let from = rng.below(other.len() + 1);
                b.truncate(cut);
                b.extend_from_slice(&other[from..]);
            }
            7 => {
                // An overlong varint (a canonical decoder would refuse it), or a huge length.
                const VARINTS: [&[u8]; 4] = [
                    &[0x80, 0x80, 0x80, 0x80, 0x00],
                    &[0xFF, 0xFF, 0xFF, 0xFF, 0x0F],
                    &[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01],
                    &[
                        0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01,
                    ],
                ];
                let v = VARINTS[rng.below(VARINTS.len())];
                let at = rng.below(len + 1);
                let end = (at + rng.below(2)).min(len);
                b.splice(at..end, v.iter().copied());
            }
            8 => {
                let n = rng.below(64);
                b = (0..n).map(|_| rng.next() as u8).collect();
            }
            _ => {
                // A NaN or an infinity over four bytes (an f32 or half of an f64).
                if len >= 4 {
                    let at = rng.below(len - 3);
                    let v = [f32::NAN, f32::INFINITY, -0.0, f32::MAX][rng.below(4)];
                    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
    }
    b
}

/// The message families, in the order of [`execute`]'s answer.
const FAMILIES: [&str; 4] = ["ToClient", "ToCoordinator", "ToLps", "ToGps"];

/// Decodes `bytes` as a `B`; what decodes must re-encode to bytes that are no longer and decode
/// to the same bytes again, with a run id that checks.
fn round_trip<B: Serialize + DeserializeOwned>(bytes: &[u8]) -> Option<Envelope<B>> {
    let m = Envelope::<B>::from_bytes(bytes).ok()?;
    let again = m.to_bytes();
    assert!(again.len() <= bytes.len(), "re-encoding is longer");
    let m2 = Envelope::<B>::from_bytes(&again).expect("a re-encoded message decodes");
    assert_eq!(m2.to_bytes(), again, "re-encoding is not stable");
    if !m.run.is_empty() {
        id(&m.run).expect("a decoded run id checks");
    }
    Some(m)
}

/// A tensor's decoding with no expected length, its own length and another; what decodes is
/// finite and as long as asked.
fn check_tensor(t: &Tensor, other: usize) {
    for expected in [None, Some(t.len()), Some(other)] {
        if let Ok(v) = t.decode(expected) {
            assert!(v.iter().all(|x| x.is_finite()));
            if let Some(n) = expected {
                assert_eq!(v.len(), n);
            }
        }
    }
}

fn check_pairs(p: &Eigenpairs, count: usize) {
    // A peer passes the shape of its run (the corpus has k = 2, d = 3); the message's own shape
    // too when it is one a run could have.
    let own = (p.k as usize, p.d as usize);
    let shapes = [(2, 3), own];
    for (k, d) in shapes.into_iter().filter(|&(k, d)| k <= 784 && d <= 784) {
        for c in [count, 1, 2] {
            if let Ok((values, vectors)) = p.decode(c, k, d) {
                assert_eq!(values.len(), c * k);
                assert_eq!(vectors.len(), c * k * d);
            }
        }
    }
}

/// One execution: every family's decoder and the validators of what decoded. Answers which
/// families decoded.
fn execute(bytes: &[u8], other: usize) -> [bool; 4] {
    let mut decoded = [false; 4];
    if let Some(m) = round_trip::<ToClient>(bytes) {
        decoded[0] = true;
        match &m.body {
            ToClient::Signature { job, .. }
            | ToClient::Train(job)
            | ToClient::TrainProx { job, .. }
            | ToClient::SignatureStats { job, .. } => check_tensor(&job.params, other),
            ToClient::Evaluate { params, .. }
            | ToClient::Gradient { params, .. }
            | ToClient::FinalModel(FinalModel { params, .. }) => check_tensor(params, other),
            ToClient::Relay(p) => check_pairs(p, other),
            ToClient::TrainPair {
                global, cluster, ..
            } => {
                check_tensor(&global.params, other);
                check_tensor(&cluster.params, other);
            }
            ToClient::Pick { candidates, .. } => {
                candidates.iter().for_each(|c| check_tensor(c, other))
            }
            ToClient::Finish
            | ToClient::Ping
            | ToClient::GramSignature { .. }
            | ToClient::Relevance { .. }
            | ToClient::Custom { .. } => {}
        }
    }
    if let Some(m) = round_trip::<ToCoordinator>(bytes) {
        decoded[1] = true;
        match &m.body {
            ToCoordinator::Signature { values }
            | ToCoordinator::Gradient { values }
            | ToCoordinator::SignatureStats { values, .. }
            | ToCoordinator::Update { params: values, .. }
            | ToCoordinator::Picked { params: values, .. } => check_tensor(values, other),
            ToCoordinator::Pair {
                global, cluster, ..
            } => {
                check_tensor(global, other);
                check_tensor(cluster, other);
            }
            ToCoordinator::Eigenpairs(p) => check_pairs(p, 1),
            ToCoordinator::RelevanceRow { row } => {
                for n in [row.len(), other] {
                    if let Ok(v) = decode_row(row, n) {
                        assert!(v.iter().all(|x| (0.0..=1.0).contains(x)));
                    }
                }
            }
            ToCoordinator::Hello(_)
            | ToCoordinator::Evaluation { .. }
            | ToCoordinator::Failed { .. }
            | ToCoordinator::Gone
            | ToCoordinator::Pong
            | ToCoordinator::Custom { .. } => {}
        }
    }
    if let Some(m) = round_trip::<ToLps>(bytes) {
        decoded[2] = true;
        match &m.body {
            ToLps::Assign(a) => {
                if let Ok(theta) = a.validate() {
                    assert!(theta.iter().all(|x| x.is_finite()));
                    assert!(!a.members.is_empty() && a.cluster < a.clusters);
                }
            }
            ToLps::Common { values } => check_tensor(values, other),
            ToLps::Finish | ToLps::Resend => {}
        }
    }
    if let Some(m) = round_trip::<ToGps>(bytes) {
        decoded[3] = true;
        for n in [other, 2] {
            if let Ok(Some((samples, values))) = m.body.common(n) {
                assert!(samples > 0);
                assert_eq!(values.len(), n);
            }
        }
    }
    decoded
}

fn env_var<T: std::str::FromStr>(name: &str) -> Option<T> {
    let v = std::env::var(name).ok()?;
    Some(
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
    )
}

#[test]
fn mutated_payloads_decode_or_fail_cleanly() {
    let execs: u64 = env_var("EDGECFL_FUZZ_EXECS").unwrap_or(200_000);
    let budget = env_var::<u64>("EDGECFL_FUZZ_SECONDS").map(Duration::from_secs);
    let seed: u64 = env_var("EDGECFL_FUZZ_SEED").unwrap_or(0);
    let corpus = corpus();
    // The corpus decodes, each entry as its family.
    for (f, entries) in corpus.iter().enumerate() {
        for c in entries {
            assert!(
                execute(c, 2)[f],
                "a {} does not decode: {c:02x?}",
                FAMILIES[f]
            );
        }
    }
    // One pool per family: its corpus, then inputs that decoded as that family (bounded;
    // replaced at random once full). Executions take the families in turn, so each is explored
    // as deeply as the others.
    const POOL: usize = 2048;
    let mut pools = corpus.clone();
    let mut rng = Rng(seed);
    let mut seen = [0u64; 4];
    let start = Instant::now();
    let mut done = 0u64;
    while done < execs {
        if done.is_multiple_of(4096) && budget.is_some_and(|b| start.elapsed() >= b) {
            break;
        }
        let pool = &pools[(done % 4) as usize];
        let other_pool = &pools[rng.below(4)];
        let (a, b) = (rng.below(pool.len()), rng.below(other_pool.len()));
        let input = mutate(&mut rng, &pool[a], &other_pool[b]);
        let other = rng.below(8);
        let decoded = match catch_unwind(AssertUnwindSafe(|| execute(&input, other))) {
            Ok(d) => d,
            Err(e) => {
                panic!("execution {done} (seed {seed}) panicked on input {input:02x?}: {e:?}")
            }
        };
        for f in (0..4).filter(|&f| decoded[f]) {
            seen[f] += 1;
            if input.len() > 512 {
                continue;
            }
            if pools[f].len() < POOL {
                pools[f].push(input.clone());
            } else {
                let i = corpus[f].len() + rng.below(POOL - corpus[f].len());
                pools[f][i] = input.clone();
            }
        }
        done += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let decoded: Vec<String> = (0..4)
        .map(|f| format!("{} {}", FAMILIES[f], seen[f]))
        .collect();
    println!(
        "fuzz_wire: {done} executions (seed {seed}) in {secs:.1} s, {:.0}/s, 0 crashes; decoded: {}",
        done as f64 / secs.max(1e-9),
        decoded.join(", ")
    );
    // The mutations must reach valid messages of every family, or the run proves little.
    assert!(seen.iter().all(|&n| n > 0), "{decoded:?}");
}
