//! MT-HFL's round-0 messages on the wire: pinned bytes, the relay's size against the payload
//! limit, and typed errors (never a panic) for malformed signatures and relevance rows.

use edgecfl_shared::cluster::spectral;
use edgecfl_shared::cluster::spectral::{Estimate, Gram, Signature};
use edgecfl_shared::protocol::{
    Eigenpairs, Encoding, Envelope, MAX_PAYLOAD, ProtocolError, Tensor, ToClient, ToCoordinator,
    Topics, decode_row, id,
};
use proptest::prelude::*;

/// Round-trips `msg` and checks its bytes.
fn golden<B>(msg: Envelope<B>, bytes: &[u8])
where
    B: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    assert_eq!(msg.to_bytes(), bytes, "encoding of {msg:?}");
    assert_eq!(Envelope::<B>::from_bytes(bytes).unwrap(), msg);
}

fn env<B: serde::Serialize + serde::de::DeserializeOwned>(b: B) -> Envelope<B> {
    Envelope::new(id("r1").unwrap(), 0, b)
}

/// version 1, run "r1", round 0
const HEAD: [u8; 5] = [0x02, 0x02, b'r', b'1', 0x00];

fn cat(body: &[u8]) -> Vec<u8> {
    [&HEAD[..], body].concat()
}

/// One signature, k = 1 in d = 2: λ = 1, v = (1, 0), in f16.
fn tiny() -> Eigenpairs {
    Eigenpairs::encode(1, 2, &[1.0], &[1.0, 0.0], Encoding::F16)
}

/// k = 1, d = 2 in f16: varint k, d; tensor (encoding, length-prefixed bytes) twice.
const TINY: [u8; 12] = [
    0x01, 0x02, // k, d
    0x01, 0x02, 0x00, 0x3C, // f16 [1.0]
    0x01, 0x04, 0x00, 0x3C, 0x00, 0x00, // f16 [1.0, 0.0]
];

#[test]
fn golden_mthfl_messages() {
    golden(
        env(ToClient::GramSignature {
            k: 5,
            upload: Encoding::F16,
        }),
        &cat(&[0x04, 0x05, 0x01]),
    );
    golden(
        env(ToClient::Relay(tiny())),
        &cat(&[&[0x05][..], &TINY].concat()),
    );
    golden(
        env(ToClient::Relevance {
            clients: 10,
            estimate: Estimate::Rayleigh,
        }),
        &cat(&[0x06, 0x0A, 0x01]),
    );
    golden(
        env(ToCoordinator::Eigenpairs(tiny())),
        &cat(&[&[0x06][..], &TINY].concat()),
    );
    golden(
        env(ToCoordinator::RelevanceRow {
            row: Tensor::encode(&[1.0], Encoding::F32),
        }),
        &cat(&[0x07, 0x00, 0x04, 0x00, 0x00, 0x80, 0x3F]),
    );
    let t = Topics::new("edgecfl/lab1").unwrap();
    assert_eq!(t.broadcast(), "edgecfl/lab1/broadcast");
    // Not a client topic: the coordinator never mistakes it for one.
    assert_eq!(t.parse(&t.broadcast()), None);
}

/// A valid signature of k eigenpairs in d dimensions (from a real Gram matrix).
fn signature(seed: u64, k: usize, d: usize) -> Signature {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let features: Vec<f32> = (0..40 * d)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 1000) as f32 / 1000.0
        })
        .collect();
    Gram::from_features(&features, d)
        .unwrap()
        .signature(k)
        .unwrap()
}

#[test]
fn signatures_and_relays_round_trip() {
    let sigs: Vec<Signature> = (0..4).map(|i| signature(i, 3, 16)).collect();
    for enc in [Encoding::F32, Encoding::F16] {
        let wire = sigs[1].to_wire(enc);
        assert_eq!(
            Signature::from_wire(&wire, 3, 16).unwrap(),
            sigs[1].rounded(enc)
        );
    }
    // f32 uploads are relayed in f32, exactly.
    let relay = spectral::relay(&sigs).unwrap();
    assert_eq!(relay.values.encoding, Encoding::F32);
    assert_eq!(spectral::from_relay(&relay, 4, 3, 16).unwrap(), sigs);
    // f16 uploads are relayed in f16 (half the bytes), still exactly.
    let rounded: Vec<Signature> = sigs.iter().map(|s| s.rounded(Encoding::F16)).collect();
    let relay16 = spectral::relay(&rounded).unwrap();
    assert_eq!(relay16.values.encoding, Encoding::F16);
    assert_eq!(relay16.vectors.bytes.len() * 2, relay.vectors.bytes.len());
    assert_eq!(spectral::from_relay(&relay16, 4, 3, 16).unwrap(), rounded);
    // Signatures of different shapes cannot share a relay.
    let mixed = [sigs[0].clone(), signature(9, 2, 16)];
    assert!(matches!(
        spectral::relay(&mixed),
        Err(spectral::SpectralError::Mismatch { index: 1, .. })
    ));
    assert!(matches!(
        spectral::relay(&[]),
        Err(spectral::SpectralError::Empty)
    ));
}

#[test]
fn relay_size_against_the_payload_limit() {
    let relay = |n: usize, enc: Encoding| {
        let (k, d) = (5, 784);
        let wire = Eigenpairs::encode(k, d, &vec![1.0; n * k], &vec![0.5; n * k * d], enc);
        Envelope::new(id("run").unwrap(), 0, ToClient::Relay(wire)).to_bytes_checked()
    };
    // 100 clients at k = 5: n·(k·d + k)·4 = 1,570,000 bytes, within the limit.
    let ok = relay(100, Encoding::F32).unwrap();
    assert!(
        (1_570_000..1_570_000 + 32).contains(&ok.len()),
        "{}",
        ok.len()
    );
    // 300 clients in f32 exceed it: a typed error, not a packet the broker would drop.
    assert!(matches!(
        relay(300, Encoding::F32),
        Err(ProtocolError::Oversized {
            max: MAX_PAYLOAD,
            ..
        })
    ));
    // … and fit in f16.
    assert!(relay(300, Encoding::F16).is_ok());
}

#[test]
fn malformed_signatures_give_typed_errors() {
    let good = signature(3, 2, 8);
    let wire = good.to_wire(Encoding::F32);
    assert!(Signature::from_wire(&wire, 2, 8).is_ok());
    // Another k or d than asked.
    assert!(matches!(
        Signature::from_wire(&wire, 3, 8),
        Err(ProtocolError::EigenShape {
            k: 2,
            expected_k: 3,
            ..
        })
    ));
    assert!(matches!(
        Signature::from_wire(&wire, 2, 9),
        Err(ProtocolError::EigenShape { d: 8, .. })
    ));
    // The header claims the right shape, the vectors are short.
    let mut short = wire.clone();
    short.vectors.bytes.truncate(4 * 15);
    assert_eq!(
        Signature::from_wire(&short, 2, 8),
        Err(ProtocolError::TensorLength {
            expected: 16,
            got: 15
        })
    );
    // A ragged tensor.
    let mut ragged = wire.clone();
    ragged.values.bytes.pop();
    assert!(matches!(
        Signature::from_wire(&ragged, 2, 8),
        Err(ProtocolError::TensorBytes { .. } | ProtocolError::EigenShape { .. })
    ));
    // NaN in an eigenvector.
    let mut nan = good.clone();
    nan.vectors[5] = f32::NAN;
    assert_eq!(
        Signature::from_wire(&nan.to_wire(Encoding::F32), 2, 8),
        Err(ProtocolError::NotFinite(5))
    );
    // A negative eigenvalue and a zero eigenvector: finite, but no signature.
    let mut negative = good.clone();
    negative.values[1] = -negative.values[0];
    assert!(matches!(
        Signature::from_wire(&negative.to_wire(Encoding::F32), 2, 8),
        Err(ProtocolError::BadSignature { index: 0, .. })
    ));
    let mut zero = good.clone();
    zero.vectors[8..].iter_mut().for_each(|x| *x = 0.0);
    assert!(matches!(
        Signature::from_wire(&zero.to_wire(Encoding::F32), 2, 8),
        Err(ProtocolError::BadSignature { .. })
    ));
    // k = 0 on the wire.
    let empty = Eigenpairs::encode(0, 8, &[], &[], Encoding::F32);
    assert!(matches!(
        Signature::from_wire(&empty, 2, 8),
        Err(ProtocolError::EigenShape { count: 0, .. })
    ));
    // A relay that names the bad signature.
    let mut sigs = [good.clone(), good.clone(), good];
    sigs[2].values[0] = -1.0;
    let values: Vec<f32> = sigs.iter().flat_map(|s| s.values.clone()).collect();
    let vectors: Vec<f32> = sigs.iter().flat_map(|s| s.vectors.clone()).collect();
    let relay = Eigenpairs::encode(2, 8, &values, &vectors, Encoding::F32);
    assert!(matches!(
        spectral::from_relay(&relay, 3, 2, 8),
        Err(ProtocolError::BadSignature { index: 2, .. })
    ));
    assert!(matches!(
        spectral::from_relay(&relay, 4, 2, 8),
        Err(ProtocolError::EigenShape {
            count: 3,
            expected_count: 4,
            ..
        })
    ));
}

#[test]
fn malformed_relevance_rows_give_typed_errors() {
    let row = |v: &[f32]| Tensor::encode(v, Encoding::F32);
    assert_eq!(
        decode_row(&row(&[1.0, 0.25, 0.0]), 3),
        Ok(vec![1.0, 0.25, 0.0])
    );
    assert_eq!(
        decode_row(&row(&[1.0, 0.25]), 3),
        Err(ProtocolError::TensorLength {
            expected: 3,
            got: 2
        })
    );
    assert_eq!(
        decode_row(&row(&[1.0, f32::NAN, 0.5]), 3),
        Err(ProtocolError::NotFinite(1))
    );
    assert_eq!(
        decode_row(&row(&[1.0, 0.5, 1.5]), 3),
        Err(ProtocolError::OutOfRange {
            index: 2,
            value: 1.5
        })
    );
    assert!(matches!(
        decode_row(&row(&[-0.1, 0.5, 1.0]), 3),
        Err(ProtocolError::OutOfRange { index: 0, .. })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any eigenpairs message decodes to signatures or a typed error; never a panic.
    #[test]
    fn random_eigenpairs_never_panic(
        k in 0u32..4,
        d in 0u32..6,
        n in 0usize..4,
        f16 in any::<bool>(),
        values in proptest::collection::vec(any::<u8>(), 0..40),
        vectors in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let encoding = if f16 { Encoding::F16 } else { Encoding::F32 };
        let wire = Eigenpairs {
            k,
            d,
            values: Tensor { encoding, bytes: values },
            vectors: Tensor { encoding, bytes: vectors },
        };
        let _ = spectral::from_relay(&wire, n, 2, 3);
        let _ = Signature::from_wire(&wire, k.max(1) as usize, d.max(1) as usize);
        let _ = decode_row(&wire.values, n);
    }
}
