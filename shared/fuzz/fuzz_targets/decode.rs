//! Any byte string decodes to a message or a typed error; a decoded message re-encodes to bytes
//! that decode to the same bytes again (bytes, not values: a decoded f64 may be NaN).
#![no_main]

use edgecfl_shared::protocol::{Envelope, ToClient, ToCoordinator, ToGps, ToLps};
use libfuzzer_sys::fuzz_target;
use serde::{Serialize, de::DeserializeOwned};

fn round_trip<B: Serialize + DeserializeOwned>(data: &[u8]) {
    if let Ok(m) = Envelope::<B>::from_bytes(data) {
        let again = m.to_bytes();
        assert_eq!(Envelope::<B>::from_bytes(&again).unwrap().to_bytes(), again);
    }
}

fuzz_target!(|data: &[u8]| {
    round_trip::<ToClient>(data);
    round_trip::<ToCoordinator>(data);
    round_trip::<ToLps>(data);
    round_trip::<ToGps>(data);
});
