//! What decoding or validating a message can refuse.

use alloc::string::String;

use super::Encoding;

/// Errors of decoding or validating a message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The payload is larger than [`MAX_PAYLOAD`](super::MAX_PAYLOAD).
    #[error("payload of {len} bytes exceeds the limit of {max}")]
    Oversized {
        /// Payload length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The payload ended before the message did.
    #[error("truncated message")]
    Truncated,
    /// The payload is not a message of this protocol.
    #[error("malformed message: {0}")]
    Malformed(postcard::Error),
    /// Bytes left over after the message.
    #[error("{0} trailing bytes after the message")]
    TrailingBytes(usize),
    /// The sender speaks another protocol version.
    #[error("protocol version {got}, expected {expected}")]
    Version {
        /// Version in the message.
        got: u16,
        /// Ours.
        expected: u16,
    },
    /// A tensor's byte length is not a whole number of elements.
    #[error("tensor of {bytes} bytes is not a whole number of {encoding} elements")]
    TensorBytes {
        /// Byte length.
        bytes: usize,
        /// Its encoding.
        encoding: Encoding,
    },
    /// A tensor has the wrong number of elements.
    #[error("tensor has {got} elements, expected {expected}")]
    TensorLength {
        /// Expected elements.
        expected: usize,
        /// Elements received.
        got: usize,
    },
    /// A tensor holds NaN or an infinity.
    #[error("tensor element {0} is not finite")]
    NotFinite(usize),
    /// An id that is empty, too long, or not safe as a topic level.
    #[error("invalid id {0:?} (1-32 characters of A-Z a-z 0-9 - _ .)")]
    BadId(String),
    /// Eigenpairs with another `k`, `d` or number of signatures than asked for.
    #[error(
        "{count} signature(s) with k = {k}, d = {d}; expected {expected_count} with k = {expected_k}, d = {expected_d}"
    )]
    EigenShape {
        /// Signatures in the message.
        count: usize,
        /// Eigenpairs per signature in the message.
        k: u32,
        /// Dimension in the message.
        d: u32,
        /// Signatures expected.
        expected_count: usize,
        /// Eigenpairs expected.
        expected_k: usize,
        /// Dimension expected.
        expected_d: usize,
    },
    /// Values that cannot be an MT-HFL signature (negative eigenvalue, zero eigenvector).
    #[error("invalid signature {index}: {reason}")]
    BadSignature {
        /// Which signature of the message.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// A relevance value outside `[0, 1]`.
    #[error("relevance value {index} = {value} is outside [0, 1]")]
    OutOfRange {
        /// Position in the row.
        index: usize,
        /// The value.
        value: f32,
    },
}

impl From<postcard::Error> for ProtocolError {
    fn from(e: postcard::Error) -> Self {
        match e {
            postcard::Error::DeserializeUnexpectedEnd => ProtocolError::Truncated,
            e => ProtocolError::Malformed(e),
        }
    }
}
