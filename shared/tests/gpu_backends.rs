//! The GPU backends (cargo features `vulkan`, `tch`): a few steps of LeNet-5 training on the
//! device make the loss fall and land close to the CPU (`flex`) result, and MT-HFL's server-side
//! relevance matrix matches the CPU's. Built only with those features, so the default build and
//! CI never compile them:
//!
//! ```text
//! nice -n 10 cargo test -p edgecfl-shared --features vulkan --test gpu_backends
//! LIBTORCH_USE_PYTORCH=1 nice -n 10 cargo test -p edgecfl-shared --features tch --test gpu_backends
//! ```
//!
//! The device defaults to `vulkan` (wgpu's choice of adapter; Mesa's lavapipe on a machine without
//! a GPU) and `tch` (libtorch's CPU); `EDGECFL_TEST_VULKAN_DEVICE` / `EDGECFL_TEST_TCH_DEVICE`
//! name another (e.g. `vulkan:0`, `tch:cuda:0`).

#![cfg(any(feature = "vulkan-backend", feature = "tch"))]

mod common;

use common::device_from_env;

use edgecfl_shared::cluster::spectral;
use edgecfl_shared::cluster::spectral::Estimate;
use edgecfl_shared::data::{FashionMnist, PartitionSpec, partition};
use edgecfl_shared::model::{ModelKind, Params};
use edgecfl_shared::train::{Backend, Device, LocalData, TrainConfig, evaluate, train_local};

/// Trains 12 steps on `device` and on the CPU from the same weights and batches.
fn trains_close_to_cpu(backend: Backend, device: &Device) {
    let data = FashionMnist::load(None).unwrap();
    let idx: Vec<usize> = (0..120).collect();
    let local = LocalData::from_dataset(&data.train, &idx, 0);
    let init = Params::init(ModelKind::LeNet5, 0);
    let cfg = TrainConfig {
        epochs: 2,
        batch_size: 20,
        lr: 0.05,
        momentum: 0.5,
        seed: 0,
        threads: 1,
    };
    let before = evaluate(&init, &local, 60, device).unwrap();
    let (trained, rep) = train_local(&init, &local, &cfg, device).unwrap();
    let after = evaluate(&trained, &local, 60, device).unwrap();
    assert_eq!(rep.steps, 12);
    assert!(
        after.loss() < before.loss(),
        "{backend}: loss {} -> {}",
        before.loss(),
        after.loss()
    );

    let cpu = Device::flex();
    let (reference, _) = train_local(&init, &local, &cfg, &cpu).unwrap();
    let cpu_after = evaluate(&reference, &local, 60, &cpu).unwrap();
    let num: f64 = trained
        .values
        .iter()
        .zip(&reference.values)
        .map(|(a, b)| f64::from(a - b).powi(2))
        .sum();
    let den: f64 = reference.values.iter().map(|b| f64::from(*b).powi(2)).sum();
    let rel = (num / den).sqrt();
    eprintln!(
        "{backend}: loss {:.5} -> {:.5} (cpu {:.5}); weights vs cpu rel L2 {rel:.2e}",
        before.loss(),
        after.loss(),
        cpu_after.loss()
    );
    assert!(
        rel < 1e-3,
        "{backend}: weights differ from the CPU's by {rel}"
    );
    assert!((after.loss() - cpu_after.loss()).abs() < 1e-3);
}

/// MT-HFL's relevance matrix, server-side on `device`, against the CPU's.
fn relevance_close_to_cpu(backend: Backend, device: &Device) {
    let data = FashionMnist::load(None).unwrap();
    let spec: PartitionSpec = "tasks:fmnist3".parse().unwrap();
    let part = partition(&spec, &data.train.labels, 6, 0).unwrap();
    let sigs: Vec<_> = part
        .clients
        .iter()
        .map(|c| {
            let l = LocalData::from_dataset(&data.train, &c.train, 0);
            spectral::signature_of(&l, 3).unwrap()
        })
        .collect();
    let on_device = spectral::server_rows(&sigs, Estimate::Norm, device).unwrap();
    let on_cpu = spectral::server_rows(&sigs, Estimate::Norm, &Device::flex()).unwrap();
    let diff = on_device
        .iter()
        .flatten()
        .zip(on_cpu.iter().flatten())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    eprintln!("{backend}: relevance max |Δ| vs cpu {diff:.2e}");
    assert!(diff < 1e-4, "{backend}: relevance differs by {diff}");
}

#[cfg(feature = "vulkan-backend")]
#[test]
fn vulkan_trains_a_few_steps_and_matches_cpu() {
    let (backend, device) = device_from_env("EDGECFL_TEST_VULKAN_DEVICE", "vulkan");
    trains_close_to_cpu(backend, &device);
    relevance_close_to_cpu(backend, &device);
}

#[cfg(feature = "tch")]
#[test]
fn tch_trains_a_few_steps_and_matches_cpu() {
    let (backend, device) = device_from_env("EDGECFL_TEST_TCH_DEVICE", "tch");
    trains_close_to_cpu(backend, &device);
    relevance_close_to_cpu(backend, &device);
}
