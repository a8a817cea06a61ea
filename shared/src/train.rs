//! Local training (SGD with momentum) and evaluation on burn.
//!
//! Everything here is seeded: the initial weights come from [`Params::init`], the order of the
//! samples from a ChaCha8 stream seeded by [`TrainConfig::seed`]. Batches keep the last partial
//! batch (PyTorch's `drop_last=False`, as NIID-Bench does). Momentum follows PyTorch's SGD
//! (`v ← μ·v + g`, no dampening).

use std::borrow::Cow;
use std::fmt;
use std::io;
use std::str::FromStr;
use std::sync::{Arc, mpsc};
use std::time::Instant;

use burn::nn::loss::{CrossEntropyLoss, CrossEntropyLossConfig};
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, SgdConfig};
use burn::prelude::*;
use burn::tensor::{Gradients, TensorData};

/// The burn device training runs on (re-exported so the runtimes need not depend on burn).
pub use burn::prelude::Device;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::data::catalog::ImageShape;
use crate::data::dataset::Dataset;
use crate::data::partition::{rotate_image, shift_label};
use crate::data::spill::SpillFile;
use crate::model::{ModelError, ModelKind, Net, ParamLayout, Params};

/// The burn backend, and the device on it, that training and the coordinator's tensor work run on.
///
/// Chosen at run time (`--device`) among the backends compiled in; each non-default one is a cargo
/// feature of `edgecfl-shared`, forwarded under the same name by `edge-client` and `coordinator`:
///
/// | `--device` | backend | cargo feature |
/// | --- | --- | --- |
/// | `cpu` (= `flex`) | burn-flex, pure-Rust CPU | default |
/// | `ndarray` | burn-ndarray, CPU | `ndarray` |
/// | `vulkan`, `vulkan:N`, `vulkan:igpu[:N]`, `vulkan:cpu` | burn-wgpu on the Vulkan API | `vulkan` |
/// | `tch` (= `tch:cpu`), `tch:cuda[:N]` | libtorch through burn-tch | `tch` |
/// | `cuda`, `cuda:N` | burn-cuda (CubeCL) | `cuda` |
///
/// A device whose feature is missing gives [`TrainError::BackendMissing`], one that is compiled in
/// but cannot start (no Vulkan driver, no CUDA GPU) [`TrainError::DeviceUnavailable`]; neither
/// panics. In files and messages a `Backend` is its [`Display`](fmt::Display) string, which
/// [`FromStr`] reads back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Backend {
    /// burn-flex, the pure-Rust CPU backend (default; ~10× faster than ndarray here). `cpu`.
    #[default]
    Flex,
    /// burn-ndarray (cargo feature `ndarray`).
    Ndarray,
    /// burn-wgpu pinned to the Vulkan API (cargo feature `vulkan`).
    Vulkan(VulkanAdapter),
    /// libtorch (cargo feature `tch`).
    Tch(TchDevice),
    /// burn-cuda on the GPU of this index (cargo feature `cuda`).
    Cuda(usize),
}

/// Which Vulkan adapter [`Backend::Vulkan`] uses (wgpu's adapter selection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum VulkanAdapter {
    /// wgpu's choice, high-power GPU first (`vulkan`); `CUBECL_WGPU_DEFAULT_DEVICE` overrides it.
    #[default]
    Default,
    /// The N-th discrete GPU (`vulkan:N`).
    Discrete(usize),
    /// The N-th integrated GPU (`vulkan:igpu`, `vulkan:igpu:N`), e.g. a Jetson's.
    Integrated(usize),
    /// A CPU Vulkan driver such as Mesa's lavapipe (`vulkan:cpu`): for testing, not for speed.
    Cpu,
}

/// Which libtorch device [`Backend::Tch`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TchDevice {
    /// libtorch's CPU kernels (`tch`, `tch:cpu`).
    #[default]
    Cpu,
    /// The CUDA GPU of this index (`tch:cuda`, `tch:cuda:N`).
    Cuda(usize),
}

/// True when the CPU backend (`flex`) runs AVX-512 kernels: a build with the `avx512` feature on a
/// CPU that has them. Their results differ from the default build's in the last bits of a float.
pub fn avx512_kernels() -> bool {
    #[cfg(all(feature = "avx512", target_arch = "x86_64"))]
    let on = std::arch::is_x86_feature_detected!("avx512f");
    #[cfg(not(all(feature = "avx512", target_arch = "x86_64")))]
    let on = false;
    on
}

impl Backend {
    /// The cargo feature this backend needs (`None` for the default `flex`).
    pub fn feature(self) -> Option<&'static str> {
        match self {
            Backend::Flex => None,
            Backend::Ndarray => Some("ndarray"),
            Backend::Vulkan(_) => Some("vulkan"),
            Backend::Tch(_) => Some("tch"),
            Backend::Cuda(_) => Some("cuda"),
        }
    }

    /// True when this binary was built with the backend's cargo feature.
    pub fn is_compiled(self) -> bool {
        match self {
            Backend::Flex => true,
            Backend::Ndarray => cfg!(feature = "ndarray"),
            Backend::Vulkan(_) => cfg!(feature = "vulkan-backend"),
            Backend::Tch(_) => cfg!(feature = "tch"),
            Backend::Cuda(_) => cfg!(feature = "cuda"),
        }
    }

    /// The backends compiled into this binary, by name (`flex`, then the optional ones).
    pub fn compiled() -> Vec<&'static str> {
        let all = [
            Backend::Flex,
            Backend::Ndarray,
            Backend::Vulkan(VulkanAdapter::Default),
            Backend::Tch(TchDevice::Cpu),
            Backend::Cuda(0),
        ];
        all.into_iter()
            .filter(|b| b.is_compiled())
            .map(|b| b.feature().unwrap_or("flex"))
            .collect()
    }

    /// [`TrainError::BackendMissing`] unless the backend's cargo feature was compiled in; starts
    /// nothing (a configuration check).
    pub fn check_compiled(self) -> Result<(), TrainError> {
        if self.is_compiled() {
            Ok(())
        } else {
            Err(TrainError::BackendMissing {
                backend: self,
                feature: self.feature().unwrap_or("flex"),
            })
        }
    }

    /// True for the pure CPU backends (`flex`, `ndarray`), which need no start-up check.
    pub fn is_cpu(self) -> bool {
        matches!(self, Backend::Flex | Backend::Ndarray)
    }

    /// The burn device, or an error when the backend was not compiled in or cannot start.
    ///
    /// For the GPU backends this starts the runtime (one 4-byte tensor goes to the device and
    /// back), so that a missing driver or GPU is reported here, as
    /// [`TrainError::DeviceUnavailable`], rather than as a panic in the middle of training.
    pub fn device(self) -> Result<Device, TrainError> {
        self.check_compiled()?;
        #[cfg(feature = "gpu-cache")]
        if matches!(self, Backend::Vulkan(_) | Backend::Cuda(_)) {
            keep_compiled_kernels();
        }
        let device = self.device_unchecked();
        if self.is_cpu() {
            return Ok(device);
        }
        let probe = device.clone();
        first_panic(move || {
            Tensor::<1>::from_data(TensorData::new(vec![1.0f32], [1]), &probe)
                .into_data()
                .iter::<f32>()
                .collect::<Vec<f32>>()
        })
        .map_err(|reason| TrainError::DeviceUnavailable {
            backend: self,
            reason,
        })
        .and_then(|v| match v.as_slice() {
            [x] if *x == 1.0 => Ok(device),
            _ => Err(TrainError::DeviceUnavailable {
                backend: self,
                reason: "a test tensor did not come back intact".into(),
            }),
        })
    }

    /// The device, built without checks: only called once `is_compiled()` holds.
    #[allow(unreachable_patterns, unused_variables, deprecated)]
    fn device_unchecked(self) -> Device {
        match self {
            #[cfg(feature = "ndarray")]
            Backend::Ndarray => Device::ndarray(),
            #[cfg(feature = "vulkan-backend")]
            Backend::Vulkan(adapter) => Device::vulkan(match adapter {
                VulkanAdapter::Default => burn::tensor::DeviceKind::DefaultDevice,
                VulkanAdapter::Discrete(i) => burn::tensor::DeviceKind::DiscreteGpu(i),
                VulkanAdapter::Integrated(i) => burn::tensor::DeviceKind::IntegratedGpu(i),
                VulkanAdapter::Cpu => burn::tensor::DeviceKind::Cpu,
            }),
            #[cfg(feature = "tch")]
            Backend::Tch(TchDevice::Cpu) => Device::libtorch(),
            #[cfg(feature = "tch")]
            Backend::Tch(TchDevice::Cuda(i)) => Device::libtorch_cuda(i),
            #[cfg(feature = "cuda")]
            Backend::Cuda(i) => Device::cuda(i),
            _ => Device::flex(),
        }
    }
}

/// Runs `f`; if it panics, the first panic message that any thread raised while it ran. A GPU
/// runtime that cannot start panics on its own device thread (CubeCL: "Unable to acquire wgpu
/// device: AdapterUnavailable … no adapter found"), and the caller's thread then panics only on
/// the closed channel ("RecvError"): the first message is the one that says why. The panics are
/// not printed meanwhile (the process's panic hook is set aside and put back after; calls are
/// serialised), since the caller turns them into a typed error.
fn first_panic<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    use std::panic::{self, AssertUnwindSafe};
    use std::sync::Mutex;
    static SERIAL: Mutex<()> = Mutex::new(());
    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    SEEN.lock().unwrap_or_else(|e| e.into_inner()).clear();
    let previous = panic::take_hook();
    panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()));
        SEEN.lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(message);
    }));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    panic::set_hook(previous);
    let seen = std::mem::take(&mut *SEEN.lock().unwrap_or_else(|e| e.into_inner()));
    result.map_err(|_| {
        seen.into_iter()
            .next()
            .unwrap_or_else(|| "the backend panicked while starting".into())
    })
}

/// Turns on CubeCL's compilation cache (the `vulkan` and `cuda` backends) unless a CubeCL
/// configuration file decides it. CubeCL compiles every kernel a process launches, again in each
/// process: on an H200 a `simulate`'s first training round took 9.1-13.1 s, its later ones 0.5-1.6 s,
/// with every kernel shape already tuned (BENCHMARKS §13, "Every method on an H200"). With the
/// cache on, the compiled kernels are kept on disk beside the autotune results that the
/// `persistence` feature keeps (`target/environment` inside a Cargo workspace, else
/// `~/.cache/cubecl`; keyed by the binary's build, so a rebuilt binary compiles afresh). Off in
/// CubeCL's defaults; a `cubecl.toml` of the user's ([`cubecl_configuration_file`]) is left to
/// decide. CubeCL reads its configuration once per process, when a device first starts, so this
/// runs before; once it was read (another device started first), nothing changes. Only with the
/// cargo feature `gpu-cache` (part of `vulkan` and `cuda`), which compiles CubeCL's caches in.
#[cfg(feature = "gpu-cache")]
fn keep_compiled_kernels() {
    use cubecl_runtime::config::{CubeClRuntimeConfig, RuntimeConfig};
    let configured = std::env::current_dir()
        .ok()
        .and_then(|dir| cubecl_configuration_file(&dir));
    if configured.is_none() {
        let mut config = CubeClRuntimeConfig::default().override_from_env();
        config.compilation.cache = true;
        CubeClRuntimeConfig::try_set(config);
    }
}

/// The CubeCL configuration file that CubeCL would read from `dir`: the first of `cubecl.toml`,
/// `CubeCL.toml`, or a `burn.toml`/`Burn.toml` with a `[cubecl…]` table, in `dir` or the
/// nearest of its parents (CubeCL's own search order).
#[cfg_attr(not(feature = "gpu-cache"), allow(dead_code))]
fn cubecl_configuration_file(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    dir.ancestors().find_map(|dir| {
        let own = ["cubecl.toml", "CubeCL.toml"].map(|name| dir.join(name));
        let burn = ["burn.toml", "Burn.toml"].map(|name| dir.join(name));
        own.into_iter().find(|file| file.is_file()).or_else(|| {
            burn.into_iter().find(|file| {
                std::fs::read_to_string(file).is_ok_and(|text| {
                    text.lines()
                        .any(|line| line.trim_start().starts_with("[cubecl"))
                })
            })
        })
    })
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backend::Flex => f.write_str("flex"),
            Backend::Ndarray => f.write_str("ndarray"),
            Backend::Vulkan(VulkanAdapter::Default) => f.write_str("vulkan"),
            Backend::Vulkan(VulkanAdapter::Discrete(i)) => write!(f, "vulkan:{i}"),
            Backend::Vulkan(VulkanAdapter::Integrated(i)) => write!(f, "vulkan:igpu:{i}"),
            Backend::Vulkan(VulkanAdapter::Cpu) => f.write_str("vulkan:cpu"),
            Backend::Tch(TchDevice::Cpu) => f.write_str("tch"),
            Backend::Tch(TchDevice::Cuda(i)) => write!(f, "tch:cuda:{i}"),
            Backend::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl FromStr for Backend {
    type Err = TrainError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || TrainError::UnknownBackend(s.to_string());
        let index = |i: &str| i.parse::<usize>().map_err(|_| bad());
        let parts: Vec<&str> = s.trim().split(':').collect();
        Ok(match parts.as_slice() {
            ["flex" | "cpu"] => Backend::Flex,
            ["ndarray"] => Backend::Ndarray,
            ["vulkan"] => Backend::Vulkan(VulkanAdapter::Default),
            ["vulkan", "cpu"] => Backend::Vulkan(VulkanAdapter::Cpu),
            ["vulkan", "igpu"] => Backend::Vulkan(VulkanAdapter::Integrated(0)),
            ["vulkan", "igpu", i] => Backend::Vulkan(VulkanAdapter::Integrated(index(i)?)),
            ["vulkan", i] => Backend::Vulkan(VulkanAdapter::Discrete(index(i)?)),
            ["tch"] | ["tch", "cpu"] => Backend::Tch(TchDevice::Cpu),
            ["tch", "cuda"] => Backend::Tch(TchDevice::Cuda(0)),
            ["tch", "cuda", i] => Backend::Tch(TchDevice::Cuda(index(i)?)),
            ["cuda"] => Backend::Cuda(0),
            ["cuda", i] => Backend::Cuda(index(i)?),
            _ => return Err(bad()),
        })
    }
}

impl Serialize for Backend {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Backend {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Errors of local training.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrainError {
    /// The backend is not compiled into this binary.
    #[error(
        "device {backend} is not compiled into this binary; rebuild with the cargo feature \
         `{feature}` (e.g. `cargo build --release -p coordinator -p edge-client --features \
         {feature}`; see hardware.md, GPU backends)"
    )]
    BackendMissing {
        /// Requested backend.
        backend: Backend,
        /// Cargo feature that enables it.
        feature: &'static str,
    },
    /// The backend is compiled in but its device did not start (no driver, no such GPU).
    #[error("device {backend} is compiled in but did not start: {reason}")]
    DeviceUnavailable {
        /// Requested backend.
        backend: Backend,
        /// What the backend said.
        reason: String,
    },
    /// Unknown backend name.
    #[error(
        "unknown device {0:?} (expected cpu | flex | ndarray | vulkan[:N | :igpu[:N] | :cpu] | \
         tch[:cpu | :cuda[:N]] | cuda[:N])"
    )]
    UnknownBackend(String),
    /// Hyper-parameters out of range.
    #[error("invalid training configuration: {0}")]
    InvalidConfig(String),
    /// Training produced NaN or infinite weights (learning rate too high?).
    #[error("training diverged: the loss or the weights became NaN/Inf")]
    Diverged,
    /// The parameters do not fit their model (wrong length).
    #[error("invalid parameters: {0}")]
    InvalidParams(#[source] ModelError),
    /// A proximal anchor that does not fit the trained model.
    #[error(
        "proximal anchor is a {anchor_model} with {got} parameters, but the model is a {model} \
         with {expected}"
    )]
    AnchorMismatch {
        /// The trained model.
        model: ModelKind,
        /// Its parameter count.
        expected: usize,
        /// The anchor's model.
        anchor_model: ModelKind,
        /// The anchor's length.
        got: usize,
    },
    /// No samples where some are needed (a gradient over empty data).
    #[error("no local samples")]
    NoData,
    /// The local images could not be read (their scratch file).
    #[error("reading the local images: {0}")]
    Data(String),
    /// A training helper thread stopped before answering (it panicked).
    #[error("a training helper thread stopped")]
    Worker,
}

/// Hyper-parameters of one local training call.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// Passes over the local data.
    pub epochs: usize,
    /// Mini-batch size.
    pub batch_size: usize,
    /// Learning rate.
    pub lr: f64,
    /// SGD momentum (0 disables it).
    pub momentum: f64,
    /// Seed of the sample order.
    pub seed: u64,
    /// Threads one step's batch is split over (≥ 1; see [`train_local_prox`]). How the device
    /// computes, not what the federation asks: every runtime defaults to 1, which gives the same
    /// floats on every machine; the edge client's `--threads` sets it.
    #[serde(default = "one_thread")]
    pub threads: usize,
}

fn one_thread() -> usize {
    1
}

/// [`TrainError::InvalidConfig`] unless `data`'s images have the shape `model` takes (no data
/// fits every model).
pub(crate) fn check_input(params: &Params, data: &LocalData) -> Result<(), TrainError> {
    let model = params.model;
    if !data.is_empty() && data.shape() != model.input() {
        return Err(TrainError::InvalidConfig(format!(
            "model {model} takes {} images, these are {}",
            model.input(),
            data.shape()
        )));
    }
    let classes = params.classes();
    match data.labels.iter().find(|&&l| usize::from(l) >= classes) {
        Some(label) => Err(TrainError::InvalidConfig(format!(
            "label {label} is not one of the model's {classes} classes (a model of another data \
             set)"
        ))),
        None => Ok(()),
    }
}

/// The most threads one training call may split its batches over.
pub const MAX_TRAIN_THREADS: usize = 256;

/// The least forward-pass work (multiply-adds) a part of a split batch carries
/// ([`TrainConfig::threads`]): below that, handing the part to a thread costs more than its
/// gradient saves (LeNet-5 batches of 10 and MLP batches of 64 were slower on two threads than
/// on one, BENCHMARKS.md §3). That is 16 LeNet-5 samples or 178 MLP samples
/// ([`min_part_samples`]).
pub const MIN_PART_MACS: usize = 4_500_000;

/// Multiply-adds of one sample's forward pass, from the layout: each convolution's outputs times
/// its patch (every convolution of these models is followed by 2 × 2 pooling), each linear
/// layer's `in × out`. LeNet-5 6·24²·25 + 16·8²·150 + 256·120 + 120·84 + 84·10 = 281 640, on
/// colour 32 × 32 images 6·28²·75 + 16·10²·150 + 400·120 + 120·84 + 84·10 = 651 720, the MLP
/// 784·32 + 32·10 = 25 408.
fn forward_macs(model: ModelKind) -> usize {
    if model == ModelKind::ResNet9 {
        // Each block's convolution at its input's size, padded to keep it, which halves after
        // each pooled block (32, 32, 16, 16, 16, 8, 4, 4): 3·9·64·32² + 64·9·128·32² + … +
        // 2·512·9·512·4², then the classifier 512·10.
        let mut side = model.input().height;
        let mut macs = 512 * crate::model::DEFAULT_CLASSES;
        for ((_, c_in, out), pooled) in crate::model::RESNET9_BLOCKS
            .iter()
            .zip(crate::model::RESNET9_POOLED)
        {
            macs += c_in * 9 * out * side * side;
            if pooled {
                side /= 2;
            }
        }
        return macs;
    }
    let input = model.input();
    let (mut h, mut w) = (input.height, input.width);
    let mut macs = 0;
    for e in ParamLayout::of(model).entries {
        match e.shape[..] {
            [out, c_in, kh, kw] => {
                let pad = if e.name == "conv1.weight" {
                    2 * model.conv1_padding()
                } else {
                    0
                };
                let (ho, wo) = (h + pad + 1 - kh, w + pad + 1 - kw);
                macs += out * ho * wo * c_in * kh * kw;
                (h, w) = (ho / 2, wo / 2);
            }
            [d_in, d_out] => macs += d_in * d_out,
            _ => {}
        }
    }
    macs
}

/// The fewest samples of `model` a part of a split batch holds: [`MIN_PART_MACS`] of forward
/// work.
pub fn min_part_samples(model: ModelKind) -> usize {
    MIN_PART_MACS.div_ceil(forward_macs(model))
}

impl TrainConfig {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), TrainError> {
        if self.batch_size == 0 {
            return Err(TrainError::InvalidConfig("batch size must be ≥ 1".into()));
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(TrainError::InvalidConfig(format!(
                "learning rate must be > 0, got {}",
                self.lr
            )));
        }
        if !(0.0..1.0).contains(&self.momentum) {
            return Err(TrainError::InvalidConfig(format!(
                "momentum must be in [0, 1), got {}",
                self.momentum
            )));
        }
        if !(1..=MAX_TRAIN_THREADS).contains(&self.threads) {
            return Err(TrainError::InvalidConfig(format!(
                "training threads must be in 1..={MAX_TRAIN_THREADS}, got {}",
                self.threads
            )));
        }
        Ok(())
    }
}

/// A client's samples, ready for training: rotation applied, grey levels kept as bytes.
///
/// The pixels stay `u8` (one byte a pixel, a quarter of `f32`): a batch is scaled to `[0, 1]` as
/// it is built ([`to_unit`], `p / 255` in `f32`), and [`Gram`](crate::cluster::spectral::Gram)
/// scales the same way, so training sees exactly the floats a stored `f32` copy would give.
/// The images are in memory, or in a scratch file ([`LocalData::spilled`]) read back a batch at
/// a time: the same bytes, so training on either gives the same model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalData {
    pixels: Pixels,
    /// One label per sample.
    pub labels: Vec<u8>,
    /// The shape of every image.
    shape: ImageShape,
}

/// Where a [`LocalData`]'s images are: `len() * shape.pixels()` bytes, image after image, each
/// `C × H × W`.
#[derive(Debug, Clone)]
enum Pixels {
    /// In memory, rotation applied.
    Memory(Vec<u8>),
    /// In a scratch file, rotated by this many quarter turns as they are read.
    Spilled(Arc<SpillFile>, u8),
}

impl Default for Pixels {
    fn default() -> Self {
        Pixels::Memory(Vec::new())
    }
}

/// Images in memory equal by content; a scratch file equals only itself.
impl PartialEq for Pixels {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Pixels::Memory(a), Pixels::Memory(b)) => a == b,
            (Pixels::Spilled(a, r), Pixels::Spilled(b, q)) => Arc::ptr_eq(a, b) && r == q,
            _ => false,
        }
    }
}

impl Eq for Pixels {}

/// A grey level scaled to `[0, 1]`, as training and the Gram matrix see it: `p / 255` in `f32`.
#[inline]
pub fn to_unit(p: u8) -> f32 {
    f32::from(p) / 255.0
}

impl LocalData {
    /// Samples of 28 × 28 grey images (Fashion-MNIST's and MNIST's) from their pixels
    /// (`labels.len() * 784` grey levels, image after image, rotation applied) and labels.
    pub fn new(pixels: Vec<u8>, labels: Vec<u8>) -> Self {
        Self::with_shape(ImageShape::GREY_28, pixels, labels)
    }

    /// Samples of images of `shape` from their pixels (`labels.len() * shape.pixels()` bytes,
    /// image after image, rotation applied) and labels.
    pub fn with_shape(shape: ImageShape, pixels: Vec<u8>, labels: Vec<u8>) -> Self {
        LocalData {
            pixels: Pixels::Memory(pixels),
            labels,
            shape,
        }
    }

    /// Samples whose images of `shape` are in `file` (`labels.len() * shape.pixels()` bytes
    /// from byte 0, as [`decode_images_selected_to`](crate::data::idx::decode_images_selected_to)
    /// writes them), rotated by `quarter_turns` × 90° as they are read, every label `y` replaced
    /// by `(y + label_shift) mod 10`: the samples [`from_owned`](Self::from_owned) makes of the
    /// same images in memory.
    pub fn spilled(
        file: SpillFile,
        shape: ImageShape,
        labels: Vec<u8>,
        quarter_turns: u8,
        label_shift: u8,
    ) -> Self {
        LocalData {
            pixels: Pixels::Spilled(Arc::new(file), quarter_turns % 4),
            labels: labels
                .into_iter()
                .map(|l| shift_label(l, label_shift))
                .collect(),
            shape,
        }
    }

    /// The shape of every image.
    pub fn shape(&self) -> ImageShape {
        self.shape
    }

    /// Takes `indices` of `data`, rotated by `quarter_turns` × 90°.
    pub fn from_dataset(data: &Dataset, indices: &[usize], quarter_turns: u8) -> Self {
        Self::from_dataset_shifted(data, indices, quarter_turns, 0)
    }

    /// Takes `indices` of `data`, rotated by `quarter_turns` × 90°, every label `y` replaced by
    /// `(y + label_shift) mod 10` ([`shift_label`]; `shift:` partitions,
    /// [`ClientShard::label_shift`](crate::data::partition::ClientShard::label_shift)). A shift
    /// of 0 gives exactly [`LocalData::from_dataset`].
    pub fn from_dataset_shifted(
        data: &Dataset,
        indices: &[usize],
        quarter_turns: u8,
        label_shift: u8,
    ) -> Self {
        let mut pixels = Vec::with_capacity(indices.len() * data.shape.pixels());
        let mut labels = Vec::with_capacity(indices.len());
        for &i in indices {
            let img = data.image(i);
            if quarter_turns.is_multiple_of(4) {
                pixels.extend_from_slice(img);
            } else {
                pixels.extend_from_slice(&rotate_image(img, data.shape, quarter_turns));
            }
            labels.push(shift_label(data.labels[i], label_shift));
        }
        LocalData::with_shape(data.shape, pixels, labels)
    }

    /// All of `data`, in order, rotated and label-shifted as [`from_dataset_shifted`]
    /// (`Self::from_dataset_shifted(&data, &(0..data.len()).collect::<Vec<_>>(), ..)`), taking
    /// its buffers over instead of copying them: e.g. the images a client selected with
    /// [`FashionMnistLabels`](crate::data::FashionMnistLabels), with no second copy in memory.
    ///
    /// [`from_dataset_shifted`]: Self::from_dataset_shifted
    pub fn from_owned(data: Dataset, quarter_turns: u8, label_shift: u8) -> Self {
        let Dataset {
            images: mut pixels,
            mut labels,
            shape,
        } = data;
        if !quarter_turns.is_multiple_of(4) {
            for img in pixels.chunks_exact_mut(shape.pixels()) {
                let r = rotate_image(img, shape, quarter_turns);
                img.copy_from_slice(&r);
            }
        }
        for l in &mut labels {
            *l = shift_label(*l, label_shift);
        }
        LocalData::with_shape(shape, pixels, labels)
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// True without samples.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The first `n` samples (all when there are fewer), where these are: copied when in
    /// memory, the same scratch file when spilled.
    pub fn first(&self, n: usize) -> LocalData {
        let n = n.min(self.len());
        let pixels = match &self.pixels {
            Pixels::Memory(p) => {
                Pixels::Memory(p[..(n * self.shape.pixels()).min(p.len())].to_vec())
            }
            Pixels::Spilled(file, turns) => Pixels::Spilled(Arc::clone(file), *turns),
        };
        LocalData {
            pixels,
            labels: self.labels[..n].to_vec(),
            shape: self.shape,
        }
    }

    /// Whether the images are in a scratch file rather than in memory.
    pub fn is_spilled(&self) -> bool {
        matches!(self.pixels, Pixels::Spilled(..))
    }

    /// Bytes of images held in memory (0 when they are in a scratch file).
    pub fn bytes_in_memory(&self) -> usize {
        match &self.pixels {
            Pixels::Memory(p) => p.len(),
            Pixels::Spilled(..) => 0,
        }
    }

    /// Appends the pixels of samples `start..start + count` (rotation applied) to `out`.
    ///
    /// # Errors
    ///
    /// Reading the scratch file failed, or the range is past the end.
    pub fn read_images(&self, start: usize, count: usize, out: &mut Vec<u8>) -> io::Result<()> {
        if start + count > self.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("samples {start}..{} of {}", start + count, self.len()),
            ));
        }
        let px = self.shape.pixels();
        match &self.pixels {
            Pixels::Memory(p) => {
                let range = start * px..(start + count) * px;
                out.extend_from_slice(p.get(range).ok_or(io::ErrorKind::UnexpectedEof)?);
            }
            Pixels::Spilled(file, turns) => {
                let at = out.len();
                out.resize(at + count * px, 0);
                file.read_at(&mut out[at..], (start * px) as u64)?;
                if *turns != 0 {
                    for img in out[at..].chunks_exact_mut(px) {
                        let r = rotate_image(img, self.shape, *turns);
                        img.copy_from_slice(&r);
                    }
                }
            }
        }
        Ok(())
    }

    /// All the pixels, `len() * shape().pixels()` bytes (borrowed when in memory).
    ///
    /// # Errors
    ///
    /// As [`read_images`](Self::read_images).
    pub fn pixels(&self) -> io::Result<Cow<'_, [u8]>> {
        match &self.pixels {
            Pixels::Memory(p) => Ok(Cow::Borrowed(p)),
            Pixels::Spilled(..) => {
                let mut out = Vec::with_capacity(self.len() * self.shape.pixels());
                self.read_images(0, self.len(), &mut out)?;
                Ok(Cow::Owned(out))
            }
        }
    }

    /// Sample `i`'s image scaled to `[0, 1]` ([`to_unit`]) into `out` (`shape().pixels()`
    /// floats).
    ///
    /// # Errors
    ///
    /// As [`read_images`](Self::read_images); `out` of another length is `InvalidInput`.
    pub(crate) fn unit_image(&self, i: usize, out: &mut [f32]) -> io::Result<()> {
        let px = self.shape.pixels();
        if out.len() != px {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "an image of {} is {px} pixels, not {}",
                    self.shape,
                    out.len()
                ),
            ));
        }
        let mut one = Vec::new();
        let img = match &self.pixels {
            Pixels::Memory(p) => p.get(i * px..(i + 1) * px).ok_or_else(|| {
                io::Error::new(io::ErrorKind::UnexpectedEof, format!("no image {i}"))
            })?,
            Pixels::Spilled(..) => {
                self.read_images(i, 1, &mut one)?;
                &one[..]
            }
        };
        out.iter_mut().zip(img).for_each(|(o, &p)| *o = to_unit(p));
        Ok(())
    }

    /// Appends every image, scaled to `[0, 1]`, to `pixels`; leaves `pixels` as it was when one
    /// cannot be read.
    pub(crate) fn append_unit_images(&self, pixels: &mut Vec<f32>) -> Result<(), TrainError> {
        let at = pixels.len();
        let px = self.shape.pixels();
        pixels.resize(at + self.len() * px, 0.0);
        for (s, out) in pixels[at..].chunks_exact_mut(px).enumerate() {
            if let Err(e) = self.unit_image(s, out) {
                pixels.truncate(at);
                return Err(TrainError::Data(e.to_string()));
            }
        }
        Ok(())
    }

    /// The batch of samples `idx`, scaled to `[0, 1]`.
    fn images(&self, idx: &[usize], device: &Device) -> Result<Tensor<4>, TrainError> {
        let mut px = vec![0.0; idx.len() * self.shape.pixels()];
        for (&i, out) in idx.iter().zip(px.chunks_exact_mut(self.shape.pixels())) {
            self.unit_image(i, out)
                .map_err(|e| TrainError::Data(e.to_string()))?;
        }
        Ok(Tensor::<4>::from_data(
            TensorData::new(px, self.shape.batch(idx.len())),
            device,
        ))
    }

    fn targets(&self, idx: &[usize], device: &Device) -> Tensor<1, Int> {
        let lb: Vec<i64> = idx.iter().map(|&i| i64::from(self.labels[i])).collect();
        Tensor::<1, Int>::from_data(TensorData::new(lb, [idx.len()]), device)
    }
}

/// What a local training call did.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrainReport {
    /// Samples seen (epochs × local samples).
    pub samples: usize,
    /// Optimiser steps.
    pub steps: usize,
    /// Mean training loss over the last epoch.
    pub last_epoch_loss: f64,
    /// Wall-clock seconds.
    pub seconds: f64,
}

/// Trains `params` on `data` and returns the new parameters.
///
/// `device` is the plain device (e.g. [`Backend::device`]); autodiff is added here. The same as
/// [`train_local_prox`] without a proximal term.
pub fn train_local(
    params: &Params,
    data: &LocalData,
    cfg: &TrainConfig,
    device: &Device,
) -> Result<(Params, TrainReport), TrainError> {
    train_local_prox(params, data, cfg, None, device)
}

/// FedProx's proximal term: the local objective becomes loss + μ/2 · ‖θ − anchor‖² over every
/// parameter.
#[derive(Debug, Clone, Copy)]
pub struct Proximal<'a> {
    /// The point the local model is pulled towards (FedProx: the global model of the round;
    /// FeSEM: the client's cluster centre). Same model kind as the trained parameters.
    pub anchor: &'a Params,
    /// The strength μ (finite, ≥ 0; 0 is plain training).
    pub mu: f64,
}

impl Proximal<'_> {
    /// Checks μ and that the anchor is of the model (and class count) of `params`.
    pub fn validate(&self, params: &Params) -> Result<(), TrainError> {
        let model = params.model;
        if !(self.mu.is_finite() && self.mu >= 0.0) {
            return Err(TrainError::InvalidConfig(format!(
                "proximal μ must be finite and ≥ 0, got {}",
                self.mu
            )));
        }
        let expected = params.values.len();
        if self.anchor.model != model || self.anchor.values.len() != expected {
            return Err(TrainError::AnchorMismatch {
                model,
                expected,
                anchor_model: self.anchor.model,
                got: self.anchor.values.len(),
            });
        }
        if let Some(index) = self.anchor.values.iter().position(|v| !v.is_finite()) {
            return Err(TrainError::InvalidConfig(format!(
                "proximal anchor value {index} is not finite"
            )));
        }
        Ok(())
    }
}

/// [`TrainError::InvalidParams`] unless `params` has its model's length (a burn network cannot
/// be built from it otherwise).
fn check_len(params: &Params) -> Result<(), TrainError> {
    if ParamLayout::classes_for(params.model, params.values.len()).is_none() {
        return Err(TrainError::InvalidParams(ModelError::WrongSize {
            model: params.model,
            expected: ParamLayout::of(params.model).len(),
            got: params.values.len(),
        }));
    }
    Ok(())
}

/// Trains `params` on `data`, optionally with FedProx's proximal term, and returns the new
/// parameters.
///
/// Without a proximal term (`None`, or μ = 0) this is exactly [`train_local`]: same seed, same
/// floats. With one, every parameter's gradient gets μ(θ − anchor) added (the term μ/2‖θ −
/// anchor‖² joins the loss before the backward pass, the anchor as constant tensors built once
/// per call). [`TrainReport::last_epoch_loss`] stays the plain cross-entropy, without the term.
/// `device` is the plain device (e.g. [`Backend::device`]); autodiff is added here.
///
/// With [`TrainConfig::threads`] = T > 1, each batch of n samples is cut into min(T, ⌊n / m⌋)
/// parts in order, m = [`min_part_samples`] (16 for LeNet-5, 178 for the MLP), sizes differing
/// by at most one (smaller batches are not cut); each part's gradient (of its mean loss, plus
/// the proximal term) is computed on its own thread with its own copy of the model, and the step
/// takes Σ (nₚ / n) · gₚ, the gradient of the whole batch's mean loss, through the same
/// optimiser. The result is the same training up to
/// float rounding (sums run in another order), and the same floats for the same T on any
/// machine.
///
/// On a GPU the shard goes to the device once per call and each epoch's sample order once per
/// epoch; a step sends nothing and reads nothing back (the loss is read once per epoch). The
/// floats are those of the CPU backends' way, which sends each step's batch.
pub fn train_local_prox(
    params: &Params,
    data: &LocalData,
    cfg: &TrainConfig,
    prox: Option<Proximal<'_>>,
    device: &Device,
) -> Result<(Params, TrainReport), TrainError> {
    train_local_with_shard(params, data, cfg, prox, device, shard_on_device(device))
}

/// [`train_local_prox`], the shard kept on the device ([`Shard`]) when `resident` and the batches
/// are not split over threads.
fn train_local_with_shard(
    params: &Params,
    data: &LocalData,
    cfg: &TrainConfig,
    prox: Option<Proximal<'_>>,
    device: &Device,
    resident: bool,
) -> Result<(Params, TrainReport), TrainError> {
    cfg.validate()?;
    check_len(params)?;
    check_input(params, data)?;
    if let Some(p) = &prox {
        p.validate(params)?;
    }
    let start = Instant::now();
    let ad = device.clone().autodiff();
    let prox = prox.filter(|p| p.mu > 0.0);
    let min_part = min_part_samples(params.model);
    let parts = part_count(cfg.batch_size.min(data.len()), cfg.threads, min_part);
    let step = Step::new(prox, &ad);
    let (net, steps, last_epoch_loss) = if parts == 1 {
        // No shard of nothing: some backends cannot allocate an empty buffer.
        let shard = (resident && !data.is_empty())
            .then(|| Shard::upload(data, &ad))
            .transpose()?;
        train_steps(params, data, cfg, device, shard.as_ref(), |net, batch| {
            let n = batch.idx.len();
            let (grads, loss) = step.gradients(net, data, batch)?;
            Ok((
                BatchGrads::Tracked(grads),
                BatchLoss::OnDevice(Box::new(loss), n),
            ))
        })?
    } else {
        std::thread::scope(|scope| {
            let helpers = Helpers::spawn(scope, parts - 1, prox, &ad, data);
            train_steps(params, data, cfg, device, None, |net, batch| {
                let parts = split_batch(batch.idx, parts, min_part);
                helpers.gradients(net, &step, data, &parts)
            })
        })?
    };
    let out = net.to_params();
    if out.values.iter().any(|v| !v.is_finite()) {
        return Err(TrainError::Diverged);
    }
    Ok((
        out,
        TrainReport {
            samples: cfg.epochs * data.len(),
            steps,
            last_epoch_loss,
            seconds: start.elapsed().as_secs_f64(),
        },
    ))
}

/// A part's flat gradient and mean loss, or why it failed.
type PartGradient = Result<(Vec<f32>, f32), TrainError>;

/// The threads that compute the gradients of parts 1.. of each split batch, each on a network of
/// its own (part 0 is computed by the caller on the stepped network).
struct Helpers {
    jobs: Vec<mpsc::Sender<(Arc<Params>, Vec<usize>)>>,
    done: mpsc::Receiver<(usize, PartGradient)>,
}

impl Helpers {
    /// Starts `count` helpers in `scope`; they stop when the returned value is dropped.
    fn spawn<'scope>(
        scope: &'scope std::thread::Scope<'scope, '_>,
        count: usize,
        prox: Option<Proximal<'scope>>,
        ad: &Device,
        data: &'scope LocalData,
    ) -> Self {
        let (done_tx, done) = mpsc::channel();
        let jobs = (0..count)
            .map(|k| {
                let (job_tx, job_rx) = mpsc::channel::<(Arc<Params>, Vec<usize>)>();
                let done_tx = done_tx.clone();
                let ad = ad.clone();
                scope.spawn(move || {
                    let step = Step::new(prox, &ad);
                    for (current, part) in job_rx {
                        let net = Net::from_params(&current, &ad);
                        let got = step
                            .gradients(&net, data, Batch::sent(&part))
                            .map(|(grads, loss)| (net.flat_grads(&grads), loss.into_scalar()));
                        if done_tx.send((k, got)).is_err() {
                            break;
                        }
                    }
                });
                job_tx
            })
            .collect();
        Helpers { jobs, done }
    }

    /// The gradient of a batch cut into `parts`, Σ (nₚ / n) · gₚ, flat, and its loss sum
    /// Σ nₚ · ℓₚ: part 0 here on `net`, the others on the helpers at `net`'s parameters.
    fn gradients(
        &self,
        net: &Net,
        step: &Step,
        data: &LocalData,
        parts: &[&[usize]],
    ) -> Result<(BatchGrads, BatchLoss), TrainError> {
        let current = Arc::new(net.to_params());
        for (job, part) in self.jobs.iter().zip(&parts[1..]) {
            job.send((current.clone(), part.to_vec()))
                .map_err(|_| TrainError::Worker)?;
        }
        let own = step
            .gradients(net, data, Batch::sent(parts[0]))
            .map(|(grads, loss)| (net.flat_grads(&grads), loss.into_scalar()));
        let mut got: Vec<Option<PartGradient>> = parts.iter().map(|_| None).collect();
        got[0] = Some(own);
        for _ in 1..parts.len() {
            let (k, part) = self.done.recv().map_err(|_| TrainError::Worker)?;
            got[k + 1] = Some(part);
        }
        let n = parts.iter().map(|p| p.len()).sum::<usize>() as f32;
        let mut flat = vec![0.0f32; net.layout().len()];
        let mut loss_sum = 0.0;
        for (part, got) in parts.iter().zip(got) {
            let (g, loss) = got.ok_or(TrainError::Worker)??;
            let w = part.len() as f32 / n;
            flat.iter_mut().zip(g).for_each(|(a, g)| *a += w * g);
            loss_sum += f64::from(loss) * part.len() as f64;
        }
        Ok((BatchGrads::Flat(flat), BatchLoss::Sum(loss_sum)))
    }
}

/// How many parts a batch of `len` samples is cut into on `threads` threads, each of at least
/// `min_part` samples.
fn part_count(len: usize, threads: usize, min_part: usize) -> usize {
    threads.min(len / min_part).max(1)
}

/// `batch` cut into [`part_count`] consecutive pieces whose sizes differ by at most one (the
/// longer first).
fn split_batch(batch: &[usize], threads: usize, min_part: usize) -> Vec<&[usize]> {
    let parts = part_count(batch.len(), threads, min_part);
    let (base, extra) = (batch.len() / parts, batch.len() % parts);
    let mut rest = batch;
    (0..parts)
        .map(|p| {
            let (head, tail) = rest.split_at(base + usize::from(p < extra));
            rest = tail;
            head
        })
        .collect()
}

/// One batch's gradient as a step takes it.
enum BatchGrads {
    /// From a backward pass through the stepped network itself.
    Tracked(Gradients),
    /// Flat in [`ParamLayout`] order (a weighted sum over the parts of a split batch).
    Flat(Vec<f32>),
}

/// What one part of a batch needs for its gradient: the loss, and the proximal anchor with μ/2.
struct Step {
    ad: Device,
    loss: CrossEntropyLoss,
    anchor: Option<(Vec<Tensor<1>>, f64)>,
}

impl Step {
    /// The anchor, one constant (untracked) tensor per layout entry, built once per thread.
    fn new(prox: Option<Proximal<'_>>, ad: &Device) -> Self {
        let anchor = prox.map(|p| {
            let tensors = p
                .anchor
                .layout()
                .entries
                .iter()
                .map(|e| {
                    Tensor::<1>::from_data(
                        TensorData::new(p.anchor.values[e.range()].to_vec(), [e.len()]),
                        ad,
                    )
                })
                .collect();
            (tensors, p.mu / 2.0)
        });
        Step {
            ad: ad.clone(),
            loss: CrossEntropyLossConfig::new().init(ad),
            anchor,
        }
    }

    /// The gradients of the mean cross-entropy of `batch` (plus the proximal term) at `net`,
    /// and that mean cross-entropy, left on the device (untracked, one element).
    fn gradients(
        &self,
        net: &Net,
        data: &LocalData,
        batch: Batch<'_>,
    ) -> Result<(Gradients, Tensor<1>), TrainError> {
        let (images, targets) = batch.tensors(data, &self.ad)?;
        let loss = self.loss.forward(net.forward(images), targets);
        let value = loss.clone().inner();
        let objective = match &self.anchor {
            None => loss,
            Some((anchor, half_mu)) => loss + proximal_term(net, anchor, *half_mu),
        };
        Ok((objective.backward(), value))
    }
}

/// A training call's shard on the device: its images (`[N, C·H·W]`, scaled to `[0, 1]`) and
/// labels, sent once, so that each step gathers its rows there instead of sending them.
struct Shard {
    images: Tensor<2>,
    labels: Tensor<1, Int>,
    shape: ImageShape,
}

impl Shard {
    fn upload(data: &LocalData, device: &Device) -> Result<Self, TrainError> {
        let mut pixels = Vec::new();
        data.append_unit_images(&mut pixels)?;
        let labels: Vec<i64> = data.labels.iter().map(|&l| i64::from(l)).collect();
        let shape = data.shape();
        Ok(Shard {
            images: Tensor::from_data(
                TensorData::new(pixels, [data.len(), shape.pixels()]),
                device,
            ),
            labels: Tensor::from_data(TensorData::new(labels, [data.len()]), device),
            shape,
        })
    }

    /// The images `[n, C, H, W]` and labels of the samples at `rows`.
    fn gather(&self, rows: Tensor<1, Int>) -> (Tensor<4>, Tensor<1, Int>) {
        let n = rows.dims()[0];
        let images = self.images.clone().select(0, rows.clone());
        (
            images.reshape(self.shape.batch(n)),
            self.labels.clone().select(0, rows),
        )
    }
}

/// Whether a training call on `device` keeps its shard there ([`Shard`]): on a GPU, where
/// sending each step's batch costs a transfer (with libtorch, a wait for the GPU), not in the
/// CPU's memory (flex, ndarray, libtorch's CPU), where the shard would be a second, larger copy
/// of the data.
#[allow(deprecated)] // `Device::ndarray`: the backend is deprecated, still compiled in on request
fn shard_on_device(device: &Device) -> bool {
    let host = *device == Device::flex();
    #[cfg(feature = "ndarray")]
    let host = host || *device == Device::ndarray();
    #[cfg(feature = "tch")]
    let host = host || *device == Device::libtorch();
    !host
}

/// One step's samples: their indices into the shard, and their images and labels when the shard
/// is on the device.
struct Batch<'a> {
    idx: &'a [usize],
    gathered: Option<(Tensor<4>, Tensor<1, Int>)>,
}

impl<'a> Batch<'a> {
    /// Samples `idx`, to be sent with the step.
    fn sent(idx: &'a [usize]) -> Self {
        Batch {
            idx,
            gathered: None,
        }
    }

    /// The images and labels on `device`: gathered there already, or sent now.
    fn tensors(
        self,
        data: &LocalData,
        device: &Device,
    ) -> Result<(Tensor<4>, Tensor<1, Int>), TrainError> {
        match self.gathered {
            Some(tensors) => Ok(tensors),
            None => Ok((
                data.images(self.idx, device)?,
                data.targets(self.idx, device),
            )),
        }
    }
}

/// One batch's loss as its step leaves it.
enum BatchLoss {
    /// Σ over its samples, read already (a split batch's parts are read on their threads).
    Sum(f64),
    /// Its mean on the device (boxed: a tensor is large on some backends), and its sample count.
    OnDevice(Box<Tensor<1>>, usize),
}

/// Σ over an epoch's samples of their losses, batch after batch: the values still on the device
/// read in one transfer, so that a GPU is not waited for at every step.
fn epoch_loss_sum(losses: Vec<BatchLoss>) -> f64 {
    let pending: Vec<Tensor<1>> = losses
        .iter()
        .filter_map(|l| match l {
            BatchLoss::OnDevice(t, _) => Some(t.as_ref().clone()),
            BatchLoss::Sum(_) => None,
        })
        .collect();
    let mut read = if pending.is_empty() {
        Vec::new()
    } else {
        Tensor::cat(pending, 0).into_data().iter::<f32>().collect()
    }
    .into_iter();
    losses.iter().fold(0.0, |sum, l| {
        sum + match l {
            BatchLoss::Sum(s) => *s,
            BatchLoss::OnDevice(_, n) => {
                f64::from(read.next().expect("one value per loss on the device")) * *n as f64
            }
        }
    })
}

/// The epochs of SGD with momentum from `params`, each batch's gradient and loss from
/// `gradients`: the trained network, the step count and the last epoch's mean loss. With `shard`,
/// each epoch's sample order goes to the device once and each batch is gathered there.
fn train_steps(
    params: &Params,
    data: &LocalData,
    cfg: &TrainConfig,
    device: &Device,
    shard: Option<&Shard>,
    mut gradients: impl FnMut(&Net, Batch<'_>) -> Result<(BatchGrads, BatchLoss), TrainError>,
) -> Result<(Net, usize, f64), TrainError> {
    let ad = device.clone().autodiff();
    let mut net = Net::from_params(params, &ad);
    let momentum = (cfg.momentum > 0.0).then_some(MomentumConfig {
        momentum: cfg.momentum,
        dampening: 0.0,
        nesterov: false,
    });
    let mut optim = SgdConfig::new().with_momentum(momentum).init();
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut order: Vec<usize> = (0..data.len()).collect();
    let mut steps = 0;
    let mut last_epoch_loss = 0.0;
    for _ in 0..cfg.epochs {
        order.shuffle(&mut rng);
        let rows = shard.map(|_| {
            let rows: Vec<i64> = order.iter().map(|&i| i as i64).collect();
            Tensor::<1, Int>::from_data(TensorData::new(rows, [order.len()]), &ad)
        });
        let mut losses = Vec::with_capacity(order.len().div_ceil(cfg.batch_size));
        for (k, idx) in order.chunks(cfg.batch_size).enumerate() {
            let start = k * cfg.batch_size;
            let gathered = shard
                .zip(rows.as_ref())
                .map(|(s, rows)| s.gather(rows.clone().slice(start..start + idx.len())));
            let (grads, loss) = gradients(&net, Batch { idx, gathered })?;
            losses.push(loss);
            let grads = match grads {
                BatchGrads::Tracked(g) => GradientsParams::from_grads(g, &net),
                BatchGrads::Flat(flat) => net.grads_params(&flat, device),
            };
            net = optim.step(cfg.lr, net, grads);
            steps += 1;
        }
        last_epoch_loss = epoch_loss_sum(losses) / data.len().max(1) as f64;
        if !last_epoch_loss.is_finite() {
            return Err(TrainError::Diverged);
        }
    }
    Ok((net, steps, last_epoch_loss))
}

/// μ/2 · ‖θ − anchor‖² as a one-element tensor tracked through the network's parameters.
fn proximal_term(net: &Net, anchor: &[Tensor<1>], half_mu: f64) -> Tensor<1> {
    net.param_tensors()
        .into_iter()
        .zip(anchor)
        .map(|(theta, a)| {
            let d = theta - a.clone();
            (d.clone() * d).sum()
        })
        .reduce(|x, y| x + y)
        .expect("every model has parameters")
        .mul_scalar(half_mu)
}

/// Gradient of the mean cross-entropy over all of `data` at `params`, flat in [`ParamLayout`]
/// order.
///
/// StoCFL's anchor gradient. Computed in batches of `batch_size` (in sample order, no shuffling):
/// each batch's mean-loss gradient is weighted by its size / N and summed (in f64), so the result
/// does not depend on `batch_size` beyond float rounding. Nothing is updated. Errors on empty
/// data, `batch_size` 0, parameters of the wrong length, or a non-finite gradient.
pub fn gradient(
    params: &Params,
    data: &LocalData,
    batch_size: usize,
    device: &Device,
) -> Result<Vec<f32>, TrainError> {
    if batch_size == 0 {
        return Err(TrainError::InvalidConfig("batch size must be ≥ 1".into()));
    }
    if data.is_empty() {
        return Err(TrainError::NoData);
    }
    check_len(params)?;
    check_input(params, data)?;
    let ad = device.clone().autodiff();
    let net = Net::from_params(params, &ad);
    let loss_fn = CrossEntropyLossConfig::new().init(&ad);
    let n = data.len() as f64;
    let mut acc = vec![0.0f64; params.values.len()];
    let idx: Vec<usize> = (0..data.len()).collect();
    for chunk in idx.chunks(batch_size) {
        let logits = net.forward(data.images(chunk, &ad)?);
        let loss = loss_fn.forward(logits, data.targets(chunk, &ad));
        let g = net.flat_grads(&loss.backward());
        let w = chunk.len() as f64 / n;
        for (a, g) in acc.iter_mut().zip(g) {
            *a += w * f64::from(g);
        }
    }
    let out: Vec<f32> = acc.into_iter().map(|v| v as f32).collect();
    if out.iter().any(|v| !v.is_finite()) {
        return Err(TrainError::Diverged);
    }
    Ok(out)
}

/// Which local test set a client's accuracy is measured on.
///
/// Both are reported for every evaluation (`summary.json`); a run's `local_test` picks the one
/// its headline accuracy, progress and plots show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum LocalTest {
    /// Every test image of each label the client holds, each label weighted by its test images
    /// (PACFL's "local view", which FedClust's tables use).
    #[default]
    Labels,
    /// The same images weighted so that the labels count in the proportions of the client's
    /// training labels: the view of benchmarks that split each client's own data into train and
    /// test ([`EvalReport::proportional_accuracy`]).
    Proportional,
}

impl LocalTest {
    /// True for the default, [`LocalTest::Labels`].
    pub fn is_labels(&self) -> bool {
        *self == LocalTest::Labels
    }
}

impl fmt::Display for LocalTest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LocalTest::Labels => "labels",
            LocalTest::Proportional => "proportional",
        })
    }
}

impl FromStr for LocalTest {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "labels" => Ok(LocalTest::Labels),
            "proportional" => Ok(LocalTest::Proportional),
            _ => Err(format!(
                "unknown local test view {s:?} (expected labels or proportional)"
            )),
        }
    }
}

/// Loss and accuracy of a model on some samples, with per-label counts (one entry per class of
/// the model: [`EvalReport::new`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    /// Sum of the per-sample cross-entropy.
    pub loss_sum: f64,
    /// Correct predictions.
    pub correct: usize,
    /// Samples evaluated.
    pub total: usize,
    /// Correct predictions per true label.
    pub correct_per_label: Vec<usize>,
    /// Samples per true label.
    pub total_per_label: Vec<usize>,
    /// Summed cross-entropy per true label.
    pub loss_per_label: Vec<f64>,
    /// The evaluated client's *training* samples per label: the weights of the proportional
    /// view ([`EvalReport::proportional_accuracy`]). All zero (or empty) where unknown.
    #[serde(default)]
    pub trained_per_label: Vec<usize>,
}

/// An empty report over ten labels (the ten-class data sets'; [`EvalReport::merge`] widens it).
impl Default for EvalReport {
    fn default() -> Self {
        EvalReport::new(crate::model::DEFAULT_CLASSES)
    }
}

impl EvalReport {
    /// An empty report over the labels `0..classes`.
    pub fn new(classes: usize) -> Self {
        EvalReport {
            loss_sum: 0.0,
            correct: 0,
            total: 0,
            correct_per_label: vec![0; classes],
            total_per_label: vec![0; classes],
            loss_per_label: vec![0.0; classes],
            trained_per_label: vec![0; classes],
        }
    }

    /// The labels its per-label counts cover, `0..classes()`.
    pub fn classes(&self) -> usize {
        self.total_per_label.len()
    }

    /// Accuracy under a local test view: [`LocalTest::Labels`] is [`EvalReport::accuracy`],
    /// [`LocalTest::Proportional`] is [`EvalReport::proportional_accuracy`].
    pub fn accuracy_in(&self, view: LocalTest) -> Option<f64> {
        match view {
            LocalTest::Labels => Some(self.accuracy()),
            LocalTest::Proportional => self.proportional_accuracy(),
        }
    }

    /// The proportional view: the expected accuracy on a test set drawn from the test split in
    /// the proportions of the client's training labels, `Σ_l w_l · correct_l / total_l` with
    /// `w_l = trained_l / Σ_m trained_m` over the labels `l` that have test samples. Computed
    /// exactly from the per-label counts of the labels view (every test image of each label the
    /// client holds), so it carries no sampling noise. None when no label has both training and
    /// test samples (e.g. the training counts are unknown).
    pub fn proportional_accuracy(&self) -> Option<f64> {
        let trained = |l: usize| self.trained_per_label.get(l).copied().unwrap_or(0);
        let correct = |l: usize| self.correct_per_label.get(l).copied().unwrap_or(0);
        let labels = || (0..self.classes()).filter(|&l| self.total_per_label[l] > 0);
        let weight: usize = labels().map(trained).sum();
        (weight > 0).then(|| {
            labels()
                .map(|l| trained(l) as f64 * correct(l) as f64 / self.total_per_label[l] as f64)
                .sum::<f64>()
                / weight as f64
        })
    }

    /// Sets [`EvalReport::trained_per_label`] from the training labels (those below
    /// [`EvalReport::classes`]).
    pub fn with_training_labels(mut self, labels: &[u8]) -> Self {
        self.trained_per_label.iter_mut().for_each(|n| *n = 0);
        // Labels past the report's classes (the model's) are not its to count.
        for &l in labels {
            if let Some(n) = self.trained_per_label.get_mut(usize::from(l)) {
                *n += 1;
            }
        }
        self
    }

    /// Fraction correct (0 when empty).
    pub fn accuracy(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.correct as f64 / self.total as f64
        }
    }
    /// Mean loss (0 when empty).
    pub fn loss(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.loss_sum / self.total as f64
        }
    }
    /// The report restricted to samples whose label is in `labels` (the per-label counts make
    /// this exact: a client's local test set is every test sample of its labels). Labels
    /// outside its classes are left out.
    pub fn restrict(&self, labels: &[u8]) -> EvalReport {
        let mut out = EvalReport::new(self.classes());
        for &l in labels {
            let l = usize::from(l);
            if l >= self.classes() {
                continue;
            }
            // `get`: a report read from a checkpoint may hold lists of other lengths.
            out.correct_per_label[l] = self.correct_per_label.get(l).copied().unwrap_or(0);
            out.total_per_label[l] = self.total_per_label[l];
            out.loss_per_label[l] = self.loss_per_label.get(l).copied().unwrap_or(0.0);
            out.trained_per_label[l] = self.trained_per_label.get(l).copied().unwrap_or(0);
        }
        out.correct = out.correct_per_label.iter().sum();
        out.total = out.total_per_label.iter().sum();
        out.loss_sum = out.loss_per_label.iter().sum();
        out
    }

    /// Adds another report's evaluation counts (not [`EvalReport::trained_per_label`]: both
    /// reports describe the same client's test samples).
    pub fn merge(&mut self, other: &EvalReport) {
        self.loss_sum += other.loss_sum;
        self.correct += other.correct;
        self.total += other.total;
        // The training counts are not merged, but cover the labels the report now has.
        if self.trained_per_label.len() < other.classes() {
            self.trained_per_label.resize(other.classes(), 0);
        }
        // Each count on its own: a report read from a file may hold lists of other lengths.
        let add = |mine: &mut Vec<usize>, theirs: &[usize]| {
            if mine.len() < theirs.len() {
                mine.resize(theirs.len(), 0);
            }
            mine.iter_mut().zip(theirs).for_each(|(m, t)| *m += t);
        };
        add(&mut self.correct_per_label, &other.correct_per_label);
        add(&mut self.total_per_label, &other.total_per_label);
        if self.loss_per_label.len() < other.loss_per_label.len() {
            self.loss_per_label.resize(other.loss_per_label.len(), 0.0);
        }
        (self.loss_per_label.iter_mut())
            .zip(&other.loss_per_label)
            .for_each(|(m, t)| *m += t);
    }
}

/// Evaluates `params` on `data` in batches of `batch_size`.
///
/// # Errors
///
/// [`TrainError::Data`] when images in a scratch file cannot be read.
pub fn evaluate(
    params: &Params,
    data: &LocalData,
    batch_size: usize,
    device: &Device,
) -> Result<EvalReport, TrainError> {
    let classes = params.classes();
    let mut rep = EvalReport::new(classes);
    if data.is_empty() {
        return Ok(rep);
    }
    check_input(params, data)?;
    let net = Net::from_params(params, device);
    // Every batch's predictions and log-probabilities stay on the device until the end and are
    // read in one transfer each: a GPU is not waited for at every batch.
    let idx: Vec<usize> = (0..data.len()).collect();
    let (mut preds, mut logps) = (Vec::new(), Vec::new());
    for chunk in idx.chunks(batch_size.max(1)) {
        let logits = net.forward(data.images(chunk, device)?);
        logps.push(burn::tensor::activation::log_softmax(logits.clone(), 1));
        preds.push(logits.argmax(1));
    }
    let pred = Tensor::cat(preds, 0).into_data();
    let logp: Vec<f32> = Tensor::cat(logps, 0).into_data().iter::<f32>().collect();
    for (i, p) in pred.iter::<i64>().enumerate() {
        let label = usize::from(data.labels[i]);
        let loss = -f64::from(logp[i * classes + label]);
        rep.loss_sum += loss;
        rep.loss_per_label[label] += loss;
        rep.total += 1;
        rep.total_per_label[label] += 1;
        if p == label as i64 {
            rep.correct += 1;
            rep.correct_per_label[label] += 1;
        }
    }
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 23 samples of made-up images: batches of 5 leave a short last batch.
    fn made_up_data() -> LocalData {
        let n = 23;
        let pixels = (0..n * 784).map(|i| (i * 7919 % 251) as u8).collect();
        LocalData::new(pixels, (0..n).map(|i| (i * 3 % 10) as u8).collect())
    }

    /// Batches of 5 on one thread.
    fn batches_of_five(epochs: usize, lr: f64, momentum: f64, seed: u64) -> TrainConfig {
        TrainConfig {
            epochs,
            batch_size: 5,
            lr,
            momentum,
            seed,
            threads: 1,
        }
    }

    #[test]
    fn a_shard_kept_on_the_device_trains_the_floats_of_batches_sent_step_by_step() {
        let data = made_up_data();
        let device = Device::flex();
        for model in [ModelKind::LeNet5, ModelKind::Mlp] {
            let params = Params::init(model, 4);
            let anchor = Params::init(model, 5);
            let cfg = batches_of_five(2, 0.05, 0.9, 3);
            for prox in [
                None,
                Some(Proximal {
                    anchor: &anchor,
                    mu: 0.1,
                }),
            ] {
                let train = |resident| {
                    train_local_with_shard(&params, &data, &cfg, prox, &device, resident)
                };
                let (sent, sent_report) = train(false).unwrap();
                let (kept, kept_report) = train(true).unwrap();
                assert_ne!(sent.values, params.values, "{model:?} trained");
                let bits = |p: &Params| p.values.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&sent),
                    bits(&kept),
                    "{model:?}, prox {}",
                    prox.is_some()
                );
                assert_eq!(sent_report.steps, 10);
                assert_eq!(kept_report.steps, 10);
                assert_eq!(
                    sent_report.last_epoch_loss.to_bits(),
                    kept_report.last_epoch_loss.to_bits()
                );
            }
            let none = LocalData::new(Vec::new(), Vec::new());
            for resident in [false, true] {
                let (p, report) =
                    train_local_with_shard(&params, &none, &cfg, None, &device, resident).unwrap();
                assert_eq!((p.values, report.steps), (params.values.clone(), 0));
            }
        }
    }

    #[test]
    fn the_loss_read_once_an_epoch_is_the_mean_cross_entropy_evaluate_measures() {
        // With lr = 1e-30 (it must be > 0) the model does not move by anything a loss can show,
        // so the epoch's loss (read at its end) is the mean cross-entropy of the untrained model
        // over the shard, which `evaluate` computes its own way (log-softmax at the labels,
        // summed on the host).
        let data = made_up_data();
        let device = Device::flex();
        for model in [ModelKind::LeNet5, ModelKind::Mlp] {
            let params = Params::init(model, 6);
            let cfg = batches_of_five(1, 1e-30, 0.0, 1);
            let want = evaluate(&params, &data, 7, &device).unwrap().loss();
            for resident in [false, true] {
                let (_, report) =
                    train_local_with_shard(&params, &data, &cfg, None, &device, resident).unwrap();
                let got = report.last_epoch_loss;
                assert!(
                    (got - want).abs() <= 1e-6 * want,
                    "{model:?}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn device_names_round_trip() {
        for name in [
            "flex",
            "ndarray",
            "vulkan",
            "vulkan:1",
            "vulkan:igpu:0",
            "vulkan:cpu",
            "tch",
            "tch:cuda:2",
            "cuda:0",
            "cuda:3",
        ] {
            let b: Backend = name.parse().unwrap();
            assert_eq!(b.to_string(), name);
            let json = serde_json::to_string(&b).unwrap();
            assert_eq!(serde_json::from_str::<Backend>(&json).unwrap(), b);
        }
        let alias = |s: &str| s.parse::<Backend>().unwrap();
        assert_eq!(alias("cpu"), Backend::Flex);
        assert_eq!(alias("tch:cpu"), Backend::Tch(TchDevice::Cpu));
        assert_eq!(alias("tch:cuda"), Backend::Tch(TchDevice::Cuda(0)));
        assert_eq!(alias("cuda"), Backend::Cuda(0));
        assert_eq!(
            alias("vulkan:igpu"),
            Backend::Vulkan(VulkanAdapter::Integrated(0))
        );
        for bad in ["gpu", "cuda:x", "vulkan:igpu:1:2", "tch:mps", "", "cuda:-1"] {
            let err = bad.parse::<Backend>().unwrap_err();
            assert!(matches!(err, TrainError::UnknownBackend(_)), "{bad}: {err}");
        }
        assert!(serde_json::from_str::<Backend>("\"opencl\"").is_err());
    }

    #[test]
    fn missing_feature_is_a_typed_error_naming_the_feature() {
        assert_eq!(Backend::compiled()[0], "flex");
        assert!(Backend::Flex.device().is_ok());
        for b in [
            Backend::Ndarray,
            Backend::Vulkan(VulkanAdapter::Default),
            Backend::Tch(TchDevice::Cpu),
            Backend::Cuda(0),
        ] {
            let feature = b.feature().unwrap();
            assert_eq!(Backend::compiled().contains(&feature), b.is_compiled());
            if b.is_compiled() {
                continue;
            }
            match b.device() {
                Err(e @ TrainError::BackendMissing { .. }) => {
                    let msg = e.to_string();
                    assert!(msg.contains(&format!("--features {feature}")), "{msg}");
                }
                other => panic!("{b}: expected BackendMissing, got {other:?}"),
            }
        }
    }

    /// A report with `(label, correct, total, trained)` entries.
    fn report(entries: &[(usize, usize, usize, usize)]) -> EvalReport {
        let mut r = EvalReport::default();
        for &(l, c, t, n) in entries {
            r.correct_per_label[l] = c;
            r.total_per_label[l] = t;
            r.trained_per_label[l] = n;
        }
        r.correct = r.correct_per_label.iter().sum();
        r.total = r.total_per_label.iter().sum();
        r
    }

    #[test]
    fn batches_split_into_parts_of_at_least_the_smallest_size() {
        // 281 640 and 25 408 multiply-adds a sample: ⌈4.5 M / each⌉.
        assert_eq!(min_part_samples(ModelKind::LeNet5), 16);
        assert_eq!(min_part_samples(ModelKind::Mlp), 178);
        // ResNet-9: 3·9·64·32² + 64·9·128·32² + 2·128·9·128·16² + 128·9·256·16² +
        // 256·9·512·8² + 2·512·9·512·4² + 512·10.
        assert_eq!(forward_macs(ModelKind::ResNet9), 379_261_952);
        assert_eq!(min_part_samples(ModelKind::ResNet9), 1);
        let sizes = |n: usize, threads: usize, min: usize| -> Vec<usize> {
            let batch: Vec<usize> = (0..n).collect();
            let parts = split_batch(&batch, threads, min);
            // In order, every sample once.
            assert_eq!(parts.concat(), batch);
            parts.iter().map(|p| p.len()).collect()
        };
        assert_eq!(sizes(64, 2, 16), [32, 32]);
        assert_eq!(sizes(50, 3, 16), [17, 17, 16]);
        assert_eq!(sizes(50, 8, 16), [17, 17, 16]);
        assert_eq!(sizes(10, 2, 16), [10]);
        assert_eq!(sizes(31, 2, 16), [31]);
        assert_eq!(sizes(32, 2, 16), [16, 16]);
        assert_eq!(sizes(64, 2, 178), [64]);
        assert_eq!(sizes(64, 1, 16), [64]);
        assert_eq!(sizes(0, 4, 16), [0]);
    }

    #[test]
    fn proportional_view_by_hand() {
        // 1000 test images each of labels 2 and 5, 90 % and 50 % right: the labels view is 70 %.
        // The client trained on 450 images of label 2 and 50 of label 5: 0.9·0.9 + 0.1·0.5.
        let r = report(&[(2, 900, 1000, 450), (5, 500, 1000, 50)]);
        assert!((r.accuracy() - 0.7).abs() < 1e-12);
        let p = r.proportional_accuracy().unwrap();
        assert!((p - 0.86).abs() < 1e-12, "{p}");
        assert_eq!(r.accuracy_in(LocalTest::Labels), Some(r.accuracy()));
        assert_eq!(r.accuracy_in(LocalTest::Proportional), Some(p));
        // A label trained on but without test images does not count; one with test images but
        // no training images weighs 0.
        let r = report(&[(2, 900, 1000, 450), (5, 500, 1000, 0), (7, 0, 0, 50)]);
        assert!((r.proportional_accuracy().unwrap() - 0.9).abs() < 1e-12);
        // Unknown training counts: no proportional view.
        assert_eq!(report(&[(2, 900, 1000, 0)]).proportional_accuracy(), None);
    }

    #[test]
    fn proportional_equals_labels_when_training_follows_the_test_split() {
        // Training counts proportional to the test images per label (here 3:1:2): both views
        // weigh each label alike, whatever the per-label accuracies.
        for (c1, c2, c3) in [(0, 0, 0), (600, 10, 300), (599, 97, 1), (600, 200, 400)] {
            let r = report(&[(0, c1, 600, 30), (3, c2, 200, 10), (9, c3, 400, 20)]);
            let p = r.proportional_accuracy().unwrap();
            assert!((p - r.accuracy()).abs() < 1e-12, "{p} vs {}", r.accuracy());
        }
    }

    #[test]
    fn training_labels_are_counted_and_kept_by_restrict() {
        let r = report(&[(1, 5, 10, 0), (4, 2, 10, 0)]).with_training_labels(&[1, 1, 1, 4, 200]);
        assert_eq!(r.trained_per_label[1], 3);
        assert_eq!(r.trained_per_label[4], 1);
        assert_eq!(
            r.trained_per_label.iter().sum::<usize>(),
            4,
            "label 200 is ignored"
        );
        let only = r.restrict(&[4]);
        assert_eq!(only.trained_per_label[1], 0);
        assert_eq!(only.trained_per_label[4], 1);
        assert_eq!(only.proportional_accuracy(), Some(0.2));
        assert_eq!(
            "proportional".parse::<LocalTest>(),
            Ok(LocalTest::Proportional)
        );
        assert!(
            "draw"
                .parse::<LocalTest>()
                .unwrap_err()
                .contains("labels or proportional")
        );
    }

    /// CubeCL's compilation cache is left to the user's configuration when CubeCL would find one:
    /// `cubecl.toml` or `CubeCL.toml` in the directory or a parent, the nearest first, or a
    /// `burn.toml` with a `[cubecl]` table; a `burn.toml` without one configures nothing of CubeCL.
    #[test]
    fn a_cubecl_configuration_file_is_found_where_cubecl_looks_for_it() {
        let root =
            std::env::temp_dir().join(format!("edgecfl-cubecl-config-{}", std::process::id()));
        let deep = root.join("a").join("b");
        std::fs::create_dir_all(&deep).unwrap();
        let found = || cubecl_configuration_file(&deep);
        // Nothing in the directories made here (a file above the temporary directory would
        // be CubeCL's too).
        let above = cubecl_configuration_file(&std::env::temp_dir());
        assert_eq!(found(), above);

        std::fs::write(root.join("a").join("burn.toml"), "[network]\nport = 1\n").unwrap();
        assert_eq!(
            found(),
            above,
            "a burn.toml without [cubecl] configures nothing of CubeCL"
        );
        std::fs::write(
            root.join("a").join("burn.toml"),
            "[fusion]\n\n  [cubecl.compilation]\ncache = false\n",
        )
        .unwrap();
        assert_eq!(found(), Some(root.join("a").join("burn.toml")));

        std::fs::write(root.join("cubecl.toml"), "").unwrap();
        assert_eq!(
            found(),
            Some(root.join("a").join("burn.toml")),
            "the nearest directory first"
        );
        std::fs::write(root.join("a").join("CubeCL.toml"), "").unwrap();
        assert_eq!(
            found(),
            Some(root.join("a").join("CubeCL.toml")),
            "its own file before burn.toml"
        );
        std::fs::write(deep.join("cubecl.toml"), "").unwrap();
        assert_eq!(found(), Some(deep.join("cubecl.toml")));
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// A device that cannot start panics on its runtime's thread, then on the caller's closed
    /// channel: the error says the first, which says why; without a panic the value comes back;
    /// the panics inside reach no hook, and the process's own hook is back in place afterwards.
    /// It sets the process's panic hook, so it runs alone in a child process of this test binary
    /// (the other tests' panic messages are never swallowed by it).
    #[test]
    fn a_failed_start_reports_the_first_panic_of_any_thread() {
        const CHILD: &str = "EDGECFL_TEST_PANIC_HOOK_CHILD";
        if std::env::var_os(CHILD).is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "train::tests::a_failed_start_reports_the_first_panic_of_any_thread",
                    "--test-threads=1",
                ])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.contains("1 passed"),
                "{text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        use std::sync::Mutex;
        static OWN_HOOK_SAW: Mutex<Vec<String>> = Mutex::new(Vec::new());
        std::panic::set_hook(Box::new(|info| {
            let message = info.payload().downcast_ref::<&str>().map(|s| s.to_string());
            OWN_HOOK_SAW.lock().unwrap().extend(message);
        }));
        let started = first_panic(|| {
            let (tx, rx) = mpsc::channel::<u8>();
            let runner = std::thread::spawn(move || {
                let _tx = tx;
                panic!("Unable to acquire the device: no adapter found");
            });
            assert!(runner.join().is_err());
            rx.recv().unwrap()
        });
        assert_eq!(
            started,
            Err("Unable to acquire the device: no adapter found".to_string())
        );
        assert_eq!(first_panic(|| 7), Ok(7));
        assert_eq!(
            first_panic(|| -> u8 { std::panic::panic_any(3u32) }),
            Err("the backend panicked while starting".to_string())
        );
        assert!(std::thread::spawn(|| panic!("outside")).join().is_err());
        let _ = std::panic::take_hook();
        let saw = OWN_HOOK_SAW.lock().unwrap().clone();
        assert!(saw.contains(&"outside".to_string()), "{saw:?}");
        assert!(!saw.iter().any(|m| m.contains("no adapter")), "{saw:?}");
    }
}
