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

/// A 28 × 28 grey image as a 3 × 32 × 32 colour one, appended to `out`: framed by 2 pixels of
/// background, three channels that differ (R the levels, G inverted, B halved), so that a label
/// that follows the grey picture follows the colour one.
// The suite's cohort and FedClust tests use it; gpu_backends.rs, which shares this module, not.
#[allow(dead_code)]
pub fn grey28_to_rgb32(img: &[u8], out: &mut Vec<u8>) {
    for c in 0..3 {
        for r in 0..32 {
            for col in 0..32 {
                let p = if (2..30).contains(&r) && (2..30).contains(&col) {
                    img[(r - 2) * 28 + col - 2]
                } else {
                    0
                };
                out.push(match c {
                    0 => p,
                    1 => 255 - p,
                    _ => p / 2,
                });
            }
        }
    }
}
