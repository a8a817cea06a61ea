//! The LPS ⇄ GPS messages of MT-HFL's hierarchy across processes: their bytes (pinned from
//! postcard's specification), the checks an LPS and the GPS apply, and the LPS topics.

use edgecfl_shared::protocol::{
    Encoding, Envelope, LpsAssignment, LpsDone, LpsMessageError, ModelKind, NormBound,
    ProtocolError, Tensor, ToGps, ToLps, TopicKind, Topics, id, text,
};

fn golden<B>(msg: Envelope<B>, bytes: &[u8])
where
    B: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    assert_eq!(msg.to_bytes(), bytes, "encoding of {msg:?}");
    assert_eq!(Envelope::<B>::from_bytes(bytes).unwrap(), msg);
}

const ONE_F32: [u8; 4] = [0x00, 0x00, 0x80, 0x3F];
const HALF_F64: [u8; 8] = [0, 0, 0, 0, 0, 0, 0xE0, 0x3F];

fn assignment() -> LpsAssignment {
    LpsAssignment {
        cluster: 1,
        clusters: 2,
        members: vec![id("c0").unwrap(), id("c3").unwrap()],
        model: ModelKind::Mlp,
        initial: Tensor::encode(&[1.0], Encoding::F32),
        common_layers: text("fc1"),
        rounds: 4,
        lps_rounds: 2,
        eval_every: 1,
        frac: 0.5,
        epochs: 1,
        batch_size: 10,
        lr: 0.5,
        momentum: 0.5,
        seed: 7,
        upload: Encoding::F32,
        equal_weights: true,
        max_update_norm: NormBound::Fixed(2.0),
    }
}

#[test]
fn golden_lps_messages() {
    // version 1, run "r" (len 1), GPS round 2
    let head = [0x02, 0x01, b'r', 0x02];
    let cat = |body: &[u8]| [&head[..], body].concat();
    let r = || id("r").unwrap();
    // ToGps::Common (variant 1): samples 300 (varint AC 02), Some(0.5), f32 tensor of one 1.0.
    let mut up = vec![0x01, 0xAC, 0x02, 0x01];
    up.extend(HALF_F64);
    up.extend([0x00, 0x04]);
    up.extend(ONE_F32);
    golden(
        Envelope::new(
            r(),
            2,
            ToGps::Common {
                samples: 300,
                accuracy: Some(0.5),
                values: Tensor::encode(&[1.0], Encoding::F32),
            },
        ),
        &cat(&up),
    );
    // ToLps::Common (variant 1): just the tensor.
    let mut down = vec![0x01, 0x00, 0x04];
    down.extend(ONE_F32);
    golden(
        Envelope::new(
            r(),
            2,
            ToLps::Common {
                values: Tensor::encode(&[1.0], Encoding::F32),
            },
        ),
        &cat(&down),
    );
    golden(Envelope::new(r(), 2, ToLps::Finish), &cat(&[0x02]));
    golden(Envelope::new(r(), 2, ToLps::Resend), &cat(&[0x03]));
    golden(Envelope::new(r(), 2, ToGps::Hello), &cat(&[0x00]));
    golden(Envelope::new(r(), 2, ToGps::Gone), &cat(&[0x04]));
    // Done (variant 2): rounds 4, GPS rounds 2, 3 evaluated, None, 0.5 s.
    let mut done = vec![0x02, 0x04, 0x02, 0x03, 0x00];
    done.extend(HALF_F64);
    golden(
        Envelope::new(
            r(),
            2,
            ToGps::Done(LpsDone {
                rounds: 4,
                gps_rounds: 2,
                evaluated: 3,
                final_accuracy: None,
                wall_seconds: 0.5,
            }),
        ),
        &cat(&done),
    );
    // Assign (variant 0) round-trips with everything in it.
    let a = Envelope::new(r(), 0, ToLps::Assign(Box::new(assignment())));
    assert_eq!(Envelope::<ToLps>::from_bytes(&a.to_bytes()).unwrap(), a);
}

#[test]
fn assignments_are_checked() {
    assert_eq!(assignment().validate().unwrap(), vec![1.0]);
    let with = |f: &dyn Fn(&mut LpsAssignment)| {
        let mut a = assignment();
        f(&mut a);
        a.validate().unwrap_err()
    };
    assert_eq!(with(&|a| a.members.clear()), LpsMessageError::NoMembers);
    assert_eq!(
        with(&|a| a.members.push(id("c0").unwrap())),
        LpsMessageError::DuplicateMember("c0".into())
    );
    // A member id that would be a topic wildcard.
    let mut wild = heapless::String::new();
    wild.push_str("c/+").unwrap();
    assert!(matches!(
        with(&|a| a.members.push(wild.clone())),
        LpsMessageError::Protocol(ProtocolError::BadId(_))
    ));
    for (name, e) in [
        ("cluster", with(&|a| a.cluster = 2)),
        ("frac", with(&|a| a.frac = 0.0)),
        ("lr", with(&|a| a.lr = f64::NAN)),
        ("momentum", with(&|a| a.momentum = 1.0)),
        ("lps_rounds", with(&|a| a.lps_rounds = 0)),
        ("epochs", with(&|a| a.epochs = 0)),
        ("batch_size", with(&|a| a.batch_size = 0)),
        ("eval_every", with(&|a| a.eval_every = 0)),
        (
            "max_update_norm",
            with(&|a| a.max_update_norm = NormBound::Fixed(0.0)),
        ),
        (
            "max_update_norm",
            with(&|a| a.max_update_norm = NormBound::Median(0.5)),
        ),
    ] {
        assert!(
            matches!(e, LpsMessageError::Setting { name: n, .. } if n == name),
            "{name}: {e}"
        );
    }
    assert_eq!(
        with(&|a| a.initial = Tensor::encode(&[f32::INFINITY], Encoding::F32)),
        LpsMessageError::Protocol(ProtocolError::NotFinite(0))
    );
}

#[test]
fn common_uploads_are_checked() {
    let up = |samples, accuracy, values: &[f32]| ToGps::Common {
        samples,
        accuracy,
        values: Tensor::encode(values, Encoding::F32),
    };
    assert_eq!(
        up(5, Some(0.25), &[1.0, 2.0]).common(2).unwrap(),
        Some((5, vec![1.0, 2.0]))
    );
    assert_eq!(ToGps::Hello.common(2).unwrap(), None);
    assert_eq!(
        up(5, None, &[1.0]).common(2).unwrap_err(),
        LpsMessageError::Protocol(ProtocolError::TensorLength {
            expected: 2,
            got: 1
        })
    );
    assert_eq!(
        up(5, None, &[1.0, f32::NAN]).common(2).unwrap_err(),
        LpsMessageError::Protocol(ProtocolError::NotFinite(1))
    );
    assert_eq!(
        up(0, None, &[1.0, 2.0]).common(2).unwrap_err(),
        LpsMessageError::ZeroSamples
    );
    assert!(matches!(
        up(1, Some(f64::NAN), &[1.0, 2.0]).common(2).unwrap_err(),
        LpsMessageError::BadAccuracy(_)
    ));
    assert_eq!(
        up(1, Some(1.5), &[1.0, 2.0]).common(2).unwrap_err(),
        LpsMessageError::BadAccuracy(1.5)
    );
}

#[test]
fn lps_topics() {
    let t = Topics::new("edgecfl/lab").unwrap();
    assert_eq!(t.lps_status("l0"), "edgecfl/lab/lps/l0/status");
    assert_eq!(t.lps_up("l0"), "edgecfl/lab/lps/l0/up");
    assert_eq!(t.lps_down("l0"), "edgecfl/lab/lps/l0/down");
    assert_eq!(t.all_lps_status(), "edgecfl/lab/lps/+/status");
    assert_eq!(t.all_lps_up(), "edgecfl/lab/lps/+/up");
    assert_eq!(
        t.parse_lps("edgecfl/lab/lps/l0/up"),
        Some(("l0", TopicKind::Up))
    );
    assert_eq!(
        t.parse_lps("edgecfl/lab/lps/l0/down"),
        Some(("l0", TopicKind::Down))
    );
    // Client topics are not LPS topics, and the other way round.
    assert_eq!(t.parse_lps("edgecfl/lab/clients/l0/up"), None);
    assert_eq!(t.parse("edgecfl/lab/lps/l0/up"), None);
    assert_eq!(t.parse_lps("edgecfl/lab/lps/l0/other"), None);
    assert_eq!(t.parse_lps("edgecfl/other/lps/l0/up"), None);
}
