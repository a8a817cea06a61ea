//! Helpers shared by the integration tests that take a device from the environment.

use edgecfl_shared::train::{Backend, Device};

/// The device the environment variable `var` names (`cpu`, `tch`, `tch:cuda:0`, `vulkan`, ...), or
/// `default`; panics when it does not parse or start.
pub fn device_from_env(var: &str, default: &str) -> (Backend, Device) {
    let name = std::env::var(var).unwrap_or_else(|_| default.to_string());
    let backend: Backend = name.parse().expect("a device name");
    let device = backend
        .device()
        .unwrap_or_else(|e| panic!("{backend} does not start: {e}"));
    (backend, device)
}
