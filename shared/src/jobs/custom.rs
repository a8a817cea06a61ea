//! How a job without messages of its own in [`crate::protocol`] travels: its command in
//! [`ToClient::Custom`] and its answer in [`ToCoordinator::Custom`], each the kind's name and
//! the job's own serde type, postcard-encoded. A new job kind's file calls these four functions
//! from its [`JobKind`] methods, and adding it touches neither the protocol nor the runtimes.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::client::ClientError;
use crate::protocol::{self, ToClient, ToCoordinator};

use super::{JobKind, Rejected, Rejection, WireError, unexpected};

fn encode<K: JobKind, M: Serialize>(message: &M) -> Result<(protocol::Text, Vec<u8>), WireError> {
    let body = postcard::to_allocvec(message).map_err(|e| WireError::new::<K>(e.to_string()))?;
    Ok((protocol::text(K::NAME), body))
}

/// `K`'s command carrying `message`.
///
/// # Errors
///
/// [`WireError`] when `message` cannot be encoded.
pub fn command<K: JobKind, M: Serialize>(message: &M) -> Result<ToClient, WireError> {
    let (kind, body) = encode::<K, M>(message)?;
    Ok(ToClient::Custom { kind, body })
}

/// `K`'s reply carrying `message`.
///
/// # Errors
///
/// [`WireError`] when `message` cannot be encoded.
pub fn reply<K: JobKind, M: Serialize>(message: &M) -> Result<ToCoordinator, WireError> {
    let (kind, body) = encode::<K, M>(message)?;
    Ok(ToCoordinator::Custom { kind, body })
}

/// On a device: the message of `cmd` when it is `K`'s command (`None` for any other command), or
/// why it cannot be decoded.
pub fn of_command<K: JobKind, M: DeserializeOwned>(
    cmd: &ToClient,
) -> Option<Result<M, ClientError>> {
    match cmd {
        ToClient::Custom { kind, body } if kind.as_str() == K::NAME => Some(
            postcard::from_bytes(body)
                .map_err(|e| ClientError::Command(format!("{} command: {e}", K::NAME))),
        ),
        _ => None,
    }
}

/// On the server: the message of `body` when it is `K`'s reply.
///
/// # Errors
///
/// [`Rejection::Unexpected`] for another kind's message, [`Rejection::Malformed`] when it does
/// not decode (trailing bytes included).
pub fn of_reply<K: JobKind, M: DeserializeOwned>(body: ToCoordinator) -> Result<M, Rejected> {
    match body {
        ToCoordinator::Custom { kind, body } if kind.as_str() == K::NAME => {
            postcard::from_bytes(&body)
                .map_err(|e| Rejected::new(Rejection::Malformed, format!("{}: {e}", K::NAME)))
        }
        ToCoordinator::Custom { kind, .. } => Err(Rejected::new(
            Rejection::Unexpected,
            format!("custom answer of {}", kind.as_str()),
        )),
        body => Err(unexpected(&body)),
    }
}
