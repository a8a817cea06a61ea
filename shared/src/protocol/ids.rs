//! Client and run ids (safe MQTT topic levels) and short free text.

use super::ProtocolError;

/// Longest client or run id, in bytes.
pub const MAX_ID_LEN: usize = 32;

/// A client or run id: 1 to 32 bytes of `A-Z a-z 0-9 - _ .` (safe as an MQTT topic level).
pub type Id = heapless::String<MAX_ID_LEN>;

/// Free text in a message (backend names, failure reasons), cut to 64 bytes.
pub type Text = heapless::String<64>;

/// Checks an id and makes an [`Id`] of it.
pub fn id(s: &str) -> Result<Id, ProtocolError> {
    let ok = !s.is_empty()
        && s.len() <= MAX_ID_LEN
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !ok {
        return Err(ProtocolError::BadId(s.into()));
    }
    let mut out = Id::new();
    out.push_str(s)
        .map_err(|_| ProtocolError::BadId(s.into()))?;
    Ok(out)
}

/// Makes a [`Text`] of `s`, cut at a character boundary to fit.
pub fn text(s: &str) -> Text {
    let mut out = Text::new();
    for c in s.chars() {
        if out.push(c).is_err() {
            break;
        }
    }
    out
}
