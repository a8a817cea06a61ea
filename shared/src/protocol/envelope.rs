//! The envelope every payload is: protocol version, run, round and a body, in postcard.

use alloc::vec::Vec;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{Id, ProtocolError, id};

/// Protocol version carried by every envelope. A peer with another version is refused.
///
/// History: 1, the first; 2, `LabelEval` gained `trained` (the proportional test view).
pub const VERSION: u16 = 2;

/// Largest payload either side accepts: a LeNet-5 in f32 is 178 KB; this leaves room for larger
/// models while refusing absurd sizes before decoding. MQTT packet limits are set to this plus
/// headroom for the topic.
pub const MAX_PAYLOAD: usize = 4 << 20;

/// Largest payload on a `status` topic: a client's or an LPS's `Hello` or `Gone` (a `Hello` is
/// at most ~250 bytes: four 64-byte texts and a few integers). A broker may refuse more.
pub const MAX_STATUS_PAYLOAD: usize = 1 << 10;

/// Room an upload needs besides its floats: the envelope, the message's other fields, an
/// evaluation's per-label counts (at most 256 labels of ≤ 26 bytes).
pub const UPLOAD_OVERHEAD: usize = 16 << 10;

/// Largest payload of an upload (a client's or an LPS's `up` topic) that carries at most `floats`
/// values (f32, 4 bytes each; f16 halves that), capped at [`MAX_PAYLOAD`]. A broker may refuse
/// more (the embedded broker's gate does).
pub fn upload_limit(floats: usize) -> usize {
    floats
        .saturating_mul(4)
        .saturating_add(UPLOAD_OVERHEAD)
        .min(MAX_PAYLOAD)
}

/// What every payload carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope<B> {
    /// Protocol version ([`VERSION`]).
    pub version: u16,
    /// The run this message belongs to (empty in `Hello` and `Gone`).
    pub run: Id,
    /// The round (0 is the clustering round).
    pub round: u32,
    /// The message.
    pub body: B,
}

impl<B: Serialize + DeserializeOwned> Envelope<B> {
    /// An envelope of the current version.
    pub fn new(run: Id, round: u32, body: B) -> Self {
        Envelope {
            version: VERSION,
            run,
            round,
            body,
        }
    }

    /// Encodes with postcard.
    pub fn to_bytes(&self) -> Vec<u8> {
        postcard::to_allocvec(self).expect("postcard cannot fail on these types")
    }

    /// Encodes with postcard, refusing a payload larger than [`MAX_PAYLOAD`] (which no peer
    /// would accept, and the MQTT packet limits would drop).
    pub fn to_bytes_checked(&self) -> Result<Vec<u8>, ProtocolError> {
        let bytes = self.to_bytes();
        if bytes.len() > MAX_PAYLOAD {
            return Err(ProtocolError::Oversized {
                len: bytes.len(),
                max: MAX_PAYLOAD,
            });
        }
        Ok(bytes)
    }

    /// Decodes a payload: size limit, version (read first, so a future version is reported as
    /// such rather than as garbage), the message, and no trailing bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ProtocolError> {
        if bytes.len() > MAX_PAYLOAD {
            return Err(ProtocolError::Oversized {
                len: bytes.len(),
                max: MAX_PAYLOAD,
            });
        }
        let (version, _) = postcard::take_from_bytes::<u16>(bytes)?;
        if version != VERSION {
            return Err(ProtocolError::Version {
                got: version,
                expected: VERSION,
            });
        }
        let (env, rest) = postcard::take_from_bytes::<Self>(bytes)?;
        if !rest.is_empty() {
            return Err(ProtocolError::TrailingBytes(rest.len()));
        }
        // heapless checks the capacity; the character set is ours to check.
        if !env.run.is_empty() {
            id(&env.run)?;
        }
        Ok(env)
    }
}
