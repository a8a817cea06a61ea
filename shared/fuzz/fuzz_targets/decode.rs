//! Any byte string decodes to a message or a typed error; a decoded message re-encodes to a
//! payload that decodes to itself.
#![no_main]

use edgecfl_shared::protocol::{Envelope, ToClient, ToCoordinator};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = Envelope::<ToClient>::from_bytes(data) {
        assert_eq!(Envelope::<ToClient>::from_bytes(&m.to_bytes()).unwrap(), m);
    }
    if let Ok(m) = Envelope::<ToCoordinator>::from_bytes(data) {
        assert_eq!(Envelope::<ToCoordinator>::from_bytes(&m.to_bytes()).unwrap(), m);
    }
});
