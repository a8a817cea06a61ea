//! Trained models as [safetensors](https://huggingface.co/docs/safetensors) files that load
//! directly into the PyTorch definition of the same network.
//!
//! | model | PyTorch module | tensors (PyTorch layout) |
//! | --- | --- | --- |
//! | [`ModelKind::LeNet5`] | NIID-Bench's `SimpleCNNMNIST(16*4*4, [120, 84], 10)` | `conv1.weight [6,1,5,5]`, `conv1.bias [6]`, `conv2.weight [16,6,5,5]`, `conv2.bias [16]`, `fc1.weight [120,256]`, `fc1.bias [120]`, `fc2.weight [84,120]`, `fc2.bias [84]`, `fc3.weight [10,84]`, `fc3.bias [10]` |
//! | [`ModelKind::LeNet5Rgb`] | NIID-Bench's `SimpleCNN(16*5*5, [120, 84], 10)` | `conv1.weight [6,3,5,5]`, `conv1.bias [6]`, `conv2.weight [16,6,5,5]`, `conv2.bias [16]`, `fc1.weight [120,400]`, `fc1.bias [120]`, `fc2.weight [84,120]`, `fc2.bias [84]`, `fc3.weight [10,84]`, `fc3.bias [10]` |
//! | [`ModelKind::Mlp`] | `fc1 = Linear(784, 32)`, ReLU, `fc2 = Linear(32, 10)` | `fc1.weight [32,784]`, `fc1.bias [32]`, `fc2.weight [10,32]`, `fc2.bias [10]` |
//! | [`ModelKind::MnistCnn`] | AdaCFL's `MnistCNN`: `conv1 = Conv2d(1, 20, 5)`, `conv2 = Conv2d(20, 50, 5)`, `fc = Linear(800, 10)` | `conv1.weight [20,1,5,5]`, `conv1.bias [20]`, `conv2.weight [50,20,5,5]`, `conv2.bias [50]`, `fc.weight [10,800]`, `fc.bias [10]` |
//! | [`ModelKind::CifarCnn`] | AdaCFL's `CifarCNN`: `conv1 = Conv2d(3, 6, 5)`, `conv2 = Conv2d(6, 16, 5)`, `fc = Linear(400, 10)` | `conv1.weight [6,3,5,5]`, `conv1.bias [6]`, `conv2.weight [16,6,5,5]`, `conv2.bias [16]`, `fc.weight [10,400]`, `fc.bias [10]` |
//! | [`ModelKind::FmnistCnn`] | AdaCFL's `FmnistCNN`: `conv1 = Conv2d(1, 16, 5, padding=2)`, `conv2 = Conv2d(16, 32, 5)`, `fc = Linear(800, 10)` | `conv1.weight [16,1,5,5]`, `conv1.bias [16]`, `conv2.weight [32,16,5,5]`, `conv2.bias [32]`, `fc.weight [10,800]`, `fc.bias [10]` |
//! | [`ModelKind::ResNet9`] | the DAWNBench ResNet-9 with `nn.GroupNorm(32, C)` for its BatchNorm and no dropout: `conv1`, `conv2`, `conv3`, `conv4` each `Sequential(Conv2d(in, out, 3, padding=1), GroupNorm, ReLU[, MaxPool2d(2)])`, `res1` and `res2` each two such blocks, `fc = Linear(512, 10)` after `MaxPool2d(4)` (`tests/python/check_safetensors.py` has it in numpy) | `conv1.0.weight [64,3,3,3]`, `conv1.0.bias [64]`, `conv1.1.weight [64]`, `conv1.1.bias [64]`, … `res1.0.0.*`, `res1.0.1.*`, `res1.1.0.*`, `res1.1.1.*` (128), `conv3` (256), `conv4` (512), `res2.*` (512), `fc.weight [10,512]`, `fc.bias [10]` |
//!
//! Every tensor is little-endian `F32`. burn keeps a linear layer's weight as `[in, out]`
//! ([`crate::model`]); PyTorch's `nn.Linear` keeps `[out, in]`, so linear weights are transposed
//! on the way out and back on the way in. Convolution weights are `[out, in, kh, kw]` in both.
//!
//! The `__metadata__` header (string to string, as the format allows) says where the model comes
//! from and how to feed it: [`key`] lists the keys. Input: a `[N, C, H, W]` float tensor
//! (`input_shape`, the model's [`ModelKind::input`]) of levels `x = (p / 255 − input_mean) /
//! input_std` (this project trains with mean 0 and std 1, i.e. `p / 255`).
//!
//! [`read`] never panics on a bad file: a truncated file, an unknown model, a missing or extra
//! tensor, a wrong shape or dtype, a non-finite value each have their [`ModelFileError`].

use std::collections::BTreeMap;
use std::path::Path;

use burn::prelude::*;
use burn::tensor::TensorData;
use safetensors::tensor::{Dtype, SafeTensorError, TensorView};

use crate::data::catalog::DatasetKind;
use crate::model::{ModelError, ModelKind, Net, ParamLayout, Params};

/// The keys of the `__metadata__` header.
pub mod key {
    /// `"pt"`: the convention of `safetensors.torch` and Hugging Face tools.
    pub const FORMAT: &str = "format";
    /// The model's name ([`ModelKind`](crate::model::ModelKind)'s: `lenet5`, `lenet5-rgb`,
    /// `mlp`, `mnist-cnn`, `cifar-cnn`, `fmnist-cnn`, `resnet9`).
    pub const MODEL: &str = "model";
    /// The PyTorch module the tensors load into (`SimpleCNNMNIST`, `SimpleCNN`, `MLP`, `MnistCNN`,
    /// `CifarCNN`, `FmnistCNN`, `ResNet9GN`).
    pub const ARCHITECTURE: &str = "architecture";
    /// The run id.
    pub const RUN_ID: &str = "run_id";
    /// The federated method (`fedclust`, `mthfl`, …).
    pub const METHOD: &str = "method";
    /// The cluster (or MT-HFL LPS) index.
    pub const CLUSTER: &str = "cluster";
    /// The cluster's members: a JSON array of client ids.
    pub const MEMBERS: &str = "members";
    /// Training rounds done when the model was written.
    pub const ROUND: &str = "round";
    /// Mean local test accuracy of the members at their last evaluation (0 to 1).
    pub const ACCURACY: &str = "accuracy";
    /// The data set the model was trained on (`fmnist`, `mnist`, `cifar10`); absent: the model's
    /// default ([`ModelKind::default_dataset`](crate::model::ModelKind::default_dataset)).
    pub const DATASET: &str = "dataset";
    /// `[C, H, W]`, e.g. `[1, 28, 28]`: one input's shape (JSON array).
    pub const INPUT_SHAPE: &str = "input_shape";
    /// The grey level's scale before normalising: `1/255`.
    pub const INPUT_SCALE: &str = "input_scale";
    /// Subtracted from the scaled grey level.
    pub const INPUT_MEAN: &str = "input_mean";
    /// The scaled, centred grey level is divided by this.
    pub const INPUT_STD: &str = "input_std";
    /// The class names by output index (JSON array).
    pub const CLASSES: &str = "classes";
    /// The crate version that wrote the file.
    pub const WRITER: &str = "writer";
}

/// How a grey level `p` in `0..=255` becomes the network's input: `(p / 255 − mean) / std`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InputNorm {
    /// Subtracted after scaling to `[0, 1]`.
    pub mean: f32,
    /// Divides after centring.
    pub std: f32,
}

impl InputNorm {
    /// What this project's data pipeline feeds every model: `p / 255` ([`crate::train::to_unit`]).
    pub const PIPELINE: InputNorm = InputNorm {
        mean: 0.0,
        std: 1.0,
    };

    /// The input value of grey level `p`. With [`InputNorm::PIPELINE`] it is exactly
    /// [`crate::train::to_unit`]`(p)`, bit for bit.
    #[inline]
    pub fn apply(&self, p: u8) -> f32 {
        (crate::train::to_unit(p) - self.mean) / self.std
    }
}

/// What the header says about a model besides its tensors.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelMeta {
    /// The architecture.
    pub model: ModelKind,
    /// The data set it was trained on (its class names are the file's `classes`).
    pub dataset: DatasetKind,
    /// The run id (`None`: an in-process run without one).
    pub run_id: Option<String>,
    /// The method that trained it.
    pub method: Option<String>,
    /// The cluster (or LPS) index.
    pub cluster: Option<usize>,
    /// The ids of the cluster's clients.
    pub members: Vec<String>,
    /// Training rounds done.
    pub round: Option<usize>,
    /// The members' mean local test accuracy at their last evaluation.
    pub accuracy: Option<f64>,
    /// The input normalisation.
    pub input: InputNorm,
}

impl ModelMeta {
    /// Metadata naming only the architecture, with this project's input normalisation.
    pub fn of(model: ModelKind) -> Self {
        ModelMeta {
            model,
            dataset: model.default_dataset(),
            run_id: None,
            method: None,
            cluster: None,
            members: Vec::new(),
            round: None,
            accuracy: None,
            input: InputNorm::PIPELINE,
        }
    }

    /// The `__metadata__` map.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        let mut put = |k: &str, v: String| {
            m.insert(k.to_string(), v);
        };
        put(key::FORMAT, "pt".into());
        put(key::MODEL, self.model.to_string());
        put(key::ARCHITECTURE, architecture(self.model).into());
        put(
            key::WRITER,
            concat!("edgecfl ", env!("CARGO_PKG_VERSION")).into(),
        );
        if let Some(r) = &self.run_id {
            put(key::RUN_ID, r.clone());
        }
        if let Some(me) = &self.method {
            put(key::METHOD, me.clone());
        }
        if let Some(c) = self.cluster {
            put(key::CLUSTER, c.to_string());
        }
        put(
            key::MEMBERS,
            serde_json::to_string(&self.members).unwrap_or_else(|_| "[]".into()),
        );
        if let Some(r) = self.round {
            put(key::ROUND, r.to_string());
        }
        if let Some(a) = self.accuracy.filter(|a| a.is_finite()) {
            put(key::ACCURACY, a.to_string());
        }
        let shape = self.model.input();
        // Only where it is not the model's default: a Fashion-MNIST model's file is byte for byte
        // what it was before data sets were named.
        if self.dataset != self.model.default_dataset() {
            put(key::DATASET, self.dataset.to_string());
        }
        put(
            key::INPUT_SHAPE,
            format!("[{}, {}, {}]", shape.channels, shape.height, shape.width),
        );
        put(key::INPUT_SCALE, "1/255".into());
        put(key::INPUT_MEAN, self.input.mean.to_string());
        put(key::INPUT_STD, self.input.std.to_string());
        put(
            key::CLASSES,
            serde_json::to_string(self.dataset.info().class_names).unwrap_or_else(|_| "[]".into()),
        );
        m
    }

    /// Reads the metadata of a file whose tensors are of `model` (from the header's `model`
    /// key, else from the tensor names).
    fn from_map(model: ModelKind, m: &BTreeMap<String, String>) -> Result<Self, ModelFileError> {
        let bad = |key: &'static str, value: &str| ModelFileError::BadMetadata {
            key,
            value: value.to_string(),
        };
        let get = |k: &str| m.get(k).map(String::as_str);
        let parse_usize = |key: &'static str| -> Result<Option<usize>, ModelFileError> {
            get(key)
                .map(|v| v.trim().parse::<usize>().map_err(|_| bad(key, v)))
                .transpose()
        };
        let parse_f32 = |key: &'static str, default: f32| -> Result<f32, ModelFileError> {
            match get(key) {
                None => Ok(default),
                Some(v) => v
                    .trim()
                    .parse::<f32>()
                    .ok()
                    .filter(|x| x.is_finite())
                    .ok_or_else(|| bad(key, v)),
            }
        };
        if let Some(v) = get(key::INPUT_SCALE)
            && v.trim() != "1/255"
        {
            return Err(bad(key::INPUT_SCALE, v));
        }
        if let Some(v) = get(key::INPUT_SHAPE) {
            let shape: Option<Vec<usize>> = serde_json::from_str(v).ok();
            let own = model.input();
            if shape.as_deref() != Some(&[own.channels, own.height, own.width][..]) {
                return Err(bad(key::INPUT_SHAPE, v));
            }
        }
        let dataset = match get(key::DATASET) {
            None => model.default_dataset(),
            Some(v) => v
                .parse::<DatasetKind>()
                .ok()
                .filter(|d| d.info().shape == model.input())
                .ok_or_else(|| bad(key::DATASET, v))?,
        };
        let input = InputNorm {
            mean: parse_f32(key::INPUT_MEAN, 0.0)?,
            std: parse_f32(key::INPUT_STD, 1.0)?,
        };
        if input.std == 0.0 {
            return Err(bad(key::INPUT_STD, "0"));
        }
        let members = match get(key::MEMBERS) {
            None => Vec::new(),
            Some(v) => serde_json::from_str(v).map_err(|_| bad(key::MEMBERS, v))?,
        };
        let accuracy = get(key::ACCURACY)
            .map(|v| v.trim().parse::<f64>().map_err(|_| bad(key::ACCURACY, v)))
            .transpose()?;
        Ok(ModelMeta {
            model,
            dataset,
            run_id: get(key::RUN_ID).map(String::from),
            method: get(key::METHOD).map(String::from),
            cluster: parse_usize(key::CLUSTER)?,
            members,
            round: parse_usize(key::ROUND)?,
            accuracy,
            input,
        })
    }
}

/// The PyTorch module name of `model` ([`key::ARCHITECTURE`]).
pub fn architecture(model: ModelKind) -> &'static str {
    match model {
        ModelKind::LeNet5 => "SimpleCNNMNIST",
        ModelKind::LeNet5Rgb => "SimpleCNN",
        ModelKind::Mlp => "MLP",
        ModelKind::MnistCnn => "MnistCNN",
        ModelKind::CifarCnn => "CifarCNN",
        ModelKind::FmnistCnn => "FmnistCNN",
        ModelKind::ResNet9 => "ResNet9GN",
    }
}

/// Errors of writing and reading model files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelFileError {
    /// The file cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The file ends before the data its header announces (or before the header itself).
    #[error("truncated model file: {got} bytes, its header announces {expected}")]
    Truncated {
        /// Bytes the header (or the 8-byte length prefix) needs.
        expected: u64,
        /// Bytes present.
        got: u64,
    },
    /// Not a safetensors file (bad header, bad offsets, trailing bytes…).
    #[error("not a valid safetensors file: {0}")]
    Format(String),
    /// The header names a model this build does not know.
    #[error(
        "unknown model {0:?} in the header (expected {names})",
        names = crate::model::model_names()
    )]
    UnknownModel(String),
    /// A tensor of the model is not in the file.
    #[error("tensor {name} of {model} is missing")]
    MissingTensor {
        /// The architecture.
        model: ModelKind,
        /// The missing tensor.
        name: String,
    },
    /// The file holds a tensor the model does not have.
    #[error("tensor {name} is not a tensor of {model}")]
    UnexpectedTensor {
        /// The architecture.
        model: ModelKind,
        /// The extra tensor.
        name: String,
    },
    /// A tensor has another shape than the PyTorch module's.
    #[error("tensor {name} has shape {got:?}, {model} needs {expected:?}")]
    WrongShape {
        /// The architecture.
        model: ModelKind,
        /// The tensor.
        name: String,
        /// The PyTorch shape.
        expected: Vec<usize>,
        /// The file's.
        got: Vec<usize>,
    },
    /// A tensor is not `F32`.
    #[error("tensor {name} is {got}, only F32 is read")]
    WrongDtype {
        /// The tensor.
        name: String,
        /// The file's dtype.
        got: String,
    },
    /// A metadata value that cannot be used.
    #[error("metadata {key} = {value:?} cannot be used")]
    BadMetadata {
        /// The key.
        key: &'static str,
        /// Its value.
        value: String,
    },
    /// The values are not a model (not finite, or the wrong count).
    #[error(transparent)]
    Model(#[from] ModelError),
}

impl From<SafeTensorError> for ModelFileError {
    fn from(e: SafeTensorError) -> Self {
        ModelFileError::Format(format!("{e:?}"))
    }
}

/// A model read from a file: its parameters (in this project's layout) and its header.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelFile {
    /// The parameters, laid out by [`ParamLayout`].
    pub params: Params,
    /// The header.
    pub meta: ModelMeta,
}

/// The PyTorch shape of a layout entry: linear weights transposed.
fn torch_shape(name: &str, burn_shape: &[usize]) -> Vec<usize> {
    if is_linear_weight(name, burn_shape) {
        vec![burn_shape[1], burn_shape[0]]
    } else {
        burn_shape.to_vec()
    }
}

fn is_linear_weight(name: &str, shape: &[usize]) -> bool {
    name.starts_with("fc") && name.ends_with(".weight") && shape.len() == 2
}

/// `[rows, cols]` row-major → `[cols, rows]` row-major.
fn transpose(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; v.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = v[r * cols + c];
        }
    }
    out
}

/// The file's bytes for `params` and `meta` (`meta.model` must be `params.model`).
///
/// # Errors
///
/// [`ModelFileError::Model`] when `params` is not a model of its kind (wrong length, not
/// finite) or `meta` names another model.
pub fn to_bytes(params: &Params, meta: &ModelMeta) -> Result<Vec<u8>, ModelFileError> {
    let params = Params::new(params.model, params.values.clone())?;
    if meta.model != params.model {
        return Err(ModelFileError::BadMetadata {
            key: key::MODEL,
            value: format!("{} (for {} parameters)", meta.model, params.model),
        });
    }
    let layout = params.layout();
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::with_capacity(layout.entries.len());
    for e in &layout.entries {
        let v = &params.values[e.range()];
        let v = if is_linear_weight(e.name, &e.shape) {
            transpose(v, e.shape[0], e.shape[1])
        } else {
            v.to_vec()
        };
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        tensors.push((e.name.to_string(), torch_shape(e.name, &e.shape), bytes));
    }
    let views = tensors
        .iter()
        .map(|(n, s, b)| Ok((n.as_str(), TensorView::new(Dtype::F32, s.clone(), b)?)))
        .collect::<Result<Vec<_>, SafeTensorError>>()?;
    // safetensors takes the metadata as a hash map and writes it in that map's (random) order;
    // the header is written here instead, its keys sorted, so that one model gives one file.
    let bytes = safetensors::serialize(views, None)?;
    with_metadata(&bytes, &meta.to_map())
}

/// `bytes` (a safetensors file without `__metadata__`, as `safetensors::serialize` writes it)
/// with `metadata` put first in its header, keys in order; the header padded with spaces to a
/// multiple of 8 bytes as the format asks, the tensors' bytes unchanged.
///
/// # Errors
///
/// [`ModelFileError::Format`] when `bytes` is not such a file (a safetensors release that writes
/// otherwise).
fn with_metadata(
    bytes: &[u8],
    metadata: &BTreeMap<String, String>,
) -> Result<Vec<u8>, ModelFileError> {
    let bad = |what: &str| ModelFileError::Format(format!("safetensors wrote {what}"));
    let n = bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map(|b| u64::from_le_bytes(b) as usize)
        .filter(|&n| bytes.len() >= 8 + n)
        .ok_or_else(|| bad("no header"))?;
    let tensors = std::str::from_utf8(&bytes[8..8 + n])
        .map_err(|_| bad("a header that is not UTF-8"))?
        .trim_end();
    let rest = tensors
        .strip_prefix('{')
        .ok_or_else(|| bad("a header that is not a JSON object"))?;
    let comma = if rest.trim_start().starts_with('}') {
        ""
    } else {
        ","
    };
    let meta = serde_json::to_string(metadata).map_err(|e| bad(&e.to_string()))?;
    let mut header = format!("{{\"__metadata__\":{meta}{comma}{rest}").into_bytes();
    header.resize(header.len().next_multiple_of(8), b' ');
    let mut out = Vec::with_capacity(8 + header.len() + bytes.len() - 8 - n);
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(&bytes[8 + n..]);
    Ok(out)
}

/// Writes `params` with `meta` to `path` atomically ([`crate::atomic_file::write`]).
///
/// # Errors
///
/// As [`to_bytes`], and [`ModelFileError::Io`].
pub fn write(path: &Path, params: &Params, meta: &ModelMeta) -> Result<(), ModelFileError> {
    let bytes = to_bytes(params, meta)?;
    crate::atomic_file::write(path, &bytes).map_err(|source| ModelFileError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// Reads a model file.
///
/// # Errors
///
/// [`ModelFileError::Io`], and those of [`from_bytes`].
pub fn read(path: &Path) -> Result<ModelFile, ModelFileError> {
    let bytes = std::fs::read(path).map_err(|source| ModelFileError::Io {
        path: path.display().to_string(),
        source,
    })?;
    from_bytes(&bytes)
}

/// One tensor entry of a safetensors header.
#[derive(Debug, serde::Deserialize)]
struct RawTensor {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: (u64, u64),
}

/// A safetensors header: the `__metadata__` map and every tensor entry, in the file's order.
/// Parsed by hand (one map visitor) rather than with the crate's header type, which goes through
/// serde's `flatten` (see [`from_bytes`] for why).
#[derive(Debug, Default)]
struct RawHeader {
    metadata: Option<BTreeMap<String, String>>,
    tensors: Vec<(String, RawTensor)>,
}

impl RawHeader {
    fn tensor(&self, name: &str) -> Option<&RawTensor> {
        self.tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }
}

impl<'de> serde::Deserialize<'de> for RawHeader {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = RawHeader;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a safetensors header (a JSON object)")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<RawHeader, A::Error> {
                let mut h = RawHeader::default();
                while let Some(k) = m.next_key::<String>()? {
                    if k == "__metadata__" {
                        h.metadata = Some(m.next_value()?);
                    } else {
                        let t = m.next_value()?;
                        h.tensors.push((k, t));
                    }
                }
                Ok(h)
            }
        }
        d.deserialize_map(Entries)
    }
}

/// A parsed file: its header and its data region.
struct Parsed<'a> {
    header: RawHeader,
    data: &'a [u8],
}

/// Splits a safetensors file into header and data and parses the header: the 8-byte
/// little-endian header length, the JSON header, then the data, which the tensors' offsets must
/// cover exactly, one after the other (the format's rule, as the crate checks it).
fn parse(bytes: &[u8]) -> Result<Parsed<'_>, ModelFileError> {
    let got = bytes.len() as u64;
    let Some(prefix) = bytes.get(..8) else {
        return Err(ModelFileError::Truncated { expected: 8, got });
    };
    let n = u64::from_le_bytes(prefix.try_into().unwrap_or([0; 8]));
    // The crate's bound on a header: a length prefix beyond it is garbage, not truncation.
    if n > 100_000_000 {
        return Err(ModelFileError::Format(format!("header length {n}")));
    }
    let header_end = n + 8;
    if header_end > got {
        return Err(ModelFileError::Truncated {
            expected: header_end,
            got,
        });
    }
    let header = std::str::from_utf8(&bytes[8..header_end as usize])
        .map_err(|e| ModelFileError::Format(format!("header: {e}")))?;
    let header: RawHeader =
        serde_json::from_str(header).map_err(|e| ModelFileError::Format(format!("header: {e}")))?;
    let data = &bytes[header_end as usize..];
    let mut spans: Vec<(u64, u64)> = header.tensors.iter().map(|(_, t)| t.data_offsets).collect();
    let announced = spans.iter().map(|s| s.1).max().unwrap_or(0);
    if announced > data.len() as u64 {
        return Err(ModelFileError::Truncated {
            expected: header_end + announced,
            got,
        });
    }
    spans.sort_unstable();
    let mut at = 0;
    for (s, e) in spans {
        if s != at || e < s {
            return Err(ModelFileError::Format(format!(
                "tensor data at bytes {s}..{e}, expected to start at {at}"
            )));
        }
        at = e;
    }
    if at != data.len() as u64 {
        return Err(ModelFileError::Format(format!(
            "{} bytes after the tensors' data",
            data.len() as u64 - at
        )));
    }
    Ok(Parsed { header, data })
}

/// Reads a model file's bytes: its architecture from the header's `model` key (else from the
/// tensor names: `conv1.weight` means a CNN, `fc.weight` one of AdaCFL's, told apart by
/// `conv1`'s shape), then every tensor checked against the PyTorch module's names, shapes and
/// dtype.
///
/// The files are written with the `safetensors` crate ([`to_bytes`]) and read here without
/// it: the edge client, which reads them, must stay under 8 MiB on aarch64 (`cross/build.sh`),
/// and the crate's reader (its header type parses through serde's `flatten`) took it over. The unit tests read files the crate wrote, whole and
/// damaged in each way.
///
/// # Errors
///
/// The [`ModelFileError`] naming what is wrong.
pub fn from_bytes(bytes: &[u8]) -> Result<ModelFile, ModelFileError> {
    let Parsed { header: raw, data } = parse(bytes)?;
    let header = raw.metadata.clone().unwrap_or_default();
    let model = match header.get(key::MODEL) {
        Some(m) => m
            .parse::<ModelKind>()
            .map_err(|_| ModelFileError::UnknownModel(m.clone()))?,
        None if raw.tensor("conv1.0.weight").is_some() => ModelKind::ResNet9,
        None => {
            let conv1 = raw.tensor("conv1.weight").map(|t| t.shape.as_slice());
            match (conv1, raw.tensor("fc.weight").is_some()) {
                (None, _) => ModelKind::Mlp,
                (Some([_, 3, ..]), false) => ModelKind::LeNet5Rgb,
                (Some(_), false) => ModelKind::LeNet5,
                (Some([20, ..]), true) => ModelKind::MnistCnn,
                (Some([6, ..]), true) => ModelKind::CifarCnn,
                (Some(_), true) => ModelKind::FmnistCnn,
            }
        }
    };
    // The class count is the width of the last layer (its bias), 10 when that tensor is missing
    // (then named below).
    let last = ParamLayout::of(model).entries.last().map(|e| e.name);
    let classes = last
        .and_then(|name| raw.tensor(name))
        .map(|t| t.shape.iter().product::<usize>())
        .filter(|k| (2..=crate::model::MAX_CLASSES).contains(k))
        .unwrap_or(crate::model::DEFAULT_CLASSES);
    let layout = ParamLayout::new(model, classes);
    // Extra tensors first (the first by name, for a deterministic error).
    if let Some(extra) = raw
        .tensors
        .iter()
        .map(|(n, _)| n)
        .filter(|n| layout.entry(n).is_none())
        .min()
    {
        return Err(ModelFileError::UnexpectedTensor {
            model,
            name: extra.clone(),
        });
    }
    let mut values = Vec::with_capacity(layout.len());
    for e in &layout.entries {
        let t = raw
            .tensor(e.name)
            .ok_or_else(|| ModelFileError::MissingTensor {
                model,
                name: e.name.to_string(),
            })?;
        let expected = torch_shape(e.name, &e.shape);
        if t.shape != expected {
            return Err(ModelFileError::WrongShape {
                model,
                name: e.name.to_string(),
                expected,
                got: t.shape.clone(),
            });
        }
        if t.dtype != "F32" {
            return Err(ModelFileError::WrongDtype {
                name: e.name.to_string(),
                got: t.dtype.clone(),
            });
        }
        let (s, end) = t.data_offsets;
        if end - s != 4 * e.len() as u64 {
            return Err(ModelFileError::Format(format!(
                "tensor {}: {} bytes for {} f32 values",
                e.name,
                end - s,
                e.len()
            )));
        }
        let v: Vec<f32> = data[s as usize..end as usize]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        if is_linear_weight(e.name, &e.shape) {
            // PyTorch [out, in] back to burn's [in, out].
            values.extend(transpose(&v, e.shape[1], e.shape[0]));
        } else {
            values.extend(v);
        }
    }
    let params = Params::new(model, values)?;
    let meta = ModelMeta::from_map(model, &header)?;
    Ok(ModelFile { params, meta })
}

/// The header of a model file as a sorted map (for printing).
///
/// # Errors
///
/// As [`from_bytes`] for a file whose header cannot be read.
pub fn header(bytes: &[u8]) -> Result<BTreeMap<String, String>, ModelFileError> {
    Ok(parse(bytes)?.header.metadata.unwrap_or_default())
}

/// Logits (one row of 10 per image, row-major) of `net` for images of its
/// [`ModelKind::input`] shape (`C × H × W` bytes each), `input` normalised, in batches of
/// `batch`.
///
/// # Errors
///
/// [`ModelFileError::Format`] when `images` is not a whole number of such images.
pub fn logits(
    net: &Net,
    images: &[u8],
    input: InputNorm,
    batch: usize,
    device: &Device,
) -> Result<Vec<f32>, ModelFileError> {
    let shape = net.kind().input();
    let size = shape.pixels();
    if !images.len().is_multiple_of(size) {
        return Err(ModelFileError::Format(format!(
            "{} pixels are not a whole number of {shape} images",
            images.len()
        )));
    }
    let mut out = Vec::with_capacity(images.len() / size * 10);
    for chunk in images.chunks(batch.max(1) * size) {
        let n = chunk.len() / size;
        let px: Vec<f32> = chunk.iter().map(|&p| input.apply(p)).collect();
        let x = Tensor::<4>::from_data(TensorData::new(px, shape.batch(n)), device);
        let data = net.forward(x).into_data();
        match data.as_slice::<f32>() {
            Ok(v) => out.extend_from_slice(v),
            Err(_) => out.extend(data.iter::<f32>()),
        }
    }
    Ok(out)
}

/// Softmax of one row of logits, in `f64`.
pub fn softmax(logits: &[f32]) -> Vec<f64> {
    let max = f64::from(logits.iter().copied().fold(f32::NEG_INFINITY, f32::max));
    let exp: Vec<f64> = logits.iter().map(|&l| (f64::from(l) - max).exp()).collect();
    let sum: f64 = exp.iter().sum();
    exp.into_iter().map(|e| e / sum).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::tensor::SafeTensors;

    fn meta(model: ModelKind) -> ModelMeta {
        ModelMeta {
            run_id: Some("run-7".into()),
            method: Some("fedclust".into()),
            cluster: Some(2),
            members: vec!["c0".into(), "c3".into()],
            round: Some(5),
            accuracy: Some(0.8125),
            ..ModelMeta::of(model)
        }
    }

    /// Builds a safetensors file from `(name, dtype, shape, bytes)` and metadata.
    fn file(tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)], meta: Option<&ModelMeta>) -> Vec<u8> {
        let views: Vec<(&str, TensorView<'_>)> = tensors
            .iter()
            .map(|(n, d, s, b)| (*n, TensorView::new(*d, s.clone(), b).unwrap()))
            .collect();
        safetensors::serialize(views, meta.map(|m| m.to_map().into_iter().collect())).unwrap()
    }

    /// The tensors of a valid file (PyTorch layout), to damage one by one.
    fn tensors(p: &Params) -> Vec<(&'static str, Dtype, Vec<usize>, Vec<u8>)> {
        let f = from_bytes(&to_bytes(p, &ModelMeta::of(p.model)).unwrap()).unwrap();
        assert_eq!(&f.params, p);
        let bytes = to_bytes(p, &ModelMeta::of(p.model)).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        p.layout()
            .entries
            .iter()
            .map(|e| {
                let t = st.tensor(e.name).unwrap();
                (e.name, t.dtype(), t.shape().to_vec(), t.data().to_vec())
            })
            .collect()
    }

    #[test]
    fn write_then_read_gives_identical_parameters_and_header() {
        for model in ModelKind::ALL {
            let p = Params::init(model, 3);
            let m = meta(model);
            let dir = std::env::temp_dir()
                .join(format!("edgecfl-model-file-{}-{model}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("m.safetensors");
            write(&path, &p, &m).unwrap();
            let back = read(&path).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(back.params.model, model);
            assert_eq!(bits(&back.params.values), bits(&p.values));
            assert_eq!(back.meta, m);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    /// One model and one header give one file: the metadata in key order (safetensors' own
    /// writer takes a hash map and writes it in a random order), read back by the safetensors
    /// crate as written, the header's length a multiple of 8.
    #[test]
    fn the_header_is_written_in_key_order() {
        let p = Params::init(ModelKind::LeNet5, 2);
        let mut m = meta(ModelKind::LeNet5);
        m.members = vec!["b".into(), "a".into()];
        let bytes = to_bytes(&p, &m).unwrap();
        assert_eq!(bytes, to_bytes(&p, &m).unwrap());
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        assert_eq!(n % 8, 0);
        let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
        assert!(header.starts_with("{\"__metadata__\":{"), "{header}");
        let map = m.to_map();
        let at: Vec<usize> = map
            .keys()
            .map(|k| header.find(&format!("\"{k}\":")).unwrap())
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{header}");
        let (_, read) = SafeTensors::read_metadata(&bytes).unwrap();
        let back: BTreeMap<String, String> = read.metadata().clone().unwrap().into_iter().collect();
        assert_eq!(back, map);
        assert_eq!(SafeTensors::deserialize(&bytes).unwrap().names().len(), 10);
    }

    /// Shapes as PyTorch's modules have them; linear weights transposed element by element.
    #[test]
    fn tensors_have_pytorch_names_shapes_and_layout() {
        let p = Params::init(ModelKind::LeNet5, 1);
        let bytes = to_bytes(&p, &ModelMeta::of(ModelKind::LeNet5)).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        let mut names = st.names();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "conv1.bias",
                "conv1.weight",
                "conv2.bias",
                "conv2.weight",
                "fc1.bias",
                "fc1.weight",
                "fc2.bias",
                "fc2.weight",
                "fc3.bias",
                "fc3.weight"
            ]
        );
        let shape = |n: &str| st.tensor(n).unwrap().shape().to_vec();
        assert_eq!(shape("conv1.weight"), [6, 1, 5, 5]);
        assert_eq!(shape("conv2.weight"), [16, 6, 5, 5]);
        assert_eq!(shape("fc1.weight"), [120, 256]);
        assert_eq!(shape("fc2.weight"), [84, 120]);
        assert_eq!(shape("fc3.weight"), [10, 84]);
        // fc3.weight[o][i] (PyTorch) == burn's [i][o].
        let layout = p.layout();
        let e = layout.entry("fc3.weight").unwrap();
        let t = st.tensor("fc3.weight").unwrap();
        let at = |o: usize, i: usize| {
            let k = 4 * (o * 84 + i);
            f32::from_le_bytes(t.data()[k..k + 4].try_into().unwrap())
        };
        for (i, o) in [(0, 0), (5, 9), (83, 3)] {
            assert_eq!(at(o, i), p.values[e.offset + i * 10 + o]);
        }
        let header = header(&bytes).unwrap();
        assert_eq!(header["format"], "pt");
        assert_eq!(header["architecture"], "SimpleCNNMNIST");
        assert_eq!(header["input_mean"], "0");
        assert_eq!(header["input_std"], "1");
    }

    #[test]
    fn each_bad_file_gets_its_typed_error() {
        let p = Params::init(ModelKind::LeNet5, 2);
        let good = tensors(&p);
        let m = meta(ModelKind::LeNet5);
        // Truncated: every cut of a valid file is an error, never a panic; cuts inside the data
        // or the header are `Truncated`.
        let bytes = to_bytes(&p, &m).unwrap();
        for cut in [0, 4, 8, 20, 200, bytes.len() / 2, bytes.len() - 1] {
            match from_bytes(&bytes[..cut]) {
                Err(ModelFileError::Truncated { got, .. }) => assert_eq!(got, cut as u64),
                other => panic!("cut at {cut}: {other:?}"),
            }
        }
        // Trailing bytes, garbage.
        let mut long = bytes.clone();
        long.extend_from_slice(&[0; 4]);
        assert!(matches!(from_bytes(&long), Err(ModelFileError::Format(_))));
        assert!(matches!(
            from_bytes(&[0xff; 64]),
            Err(ModelFileError::Format(_))
        ));
        let mut junk = 20u64.to_le_bytes().to_vec();
        junk.extend_from_slice(b"not json at all!!!!!");
        assert!(matches!(from_bytes(&junk), Err(ModelFileError::Format(_))));
        // Offsets that leave a gap, or overlap: the header rewritten around the same data.
        let rewrite = |f: &dyn Fn(&mut serde_json::Value)| -> Vec<u8> {
            let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
            let mut h: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
            f(&mut h);
            let h = serde_json::to_vec(&h).unwrap();
            let mut out = (h.len() as u64).to_le_bytes().to_vec();
            out.extend_from_slice(&h);
            out.extend_from_slice(&bytes[8 + n..]);
            out
        };
        for shift in [4i64, -4] {
            let moved = rewrite(&|h| {
                let o = &mut h["fc3.bias"]["data_offsets"];
                let s = o[0].as_i64().unwrap() + shift;
                o[0] = s.into();
            });
            assert!(
                matches!(from_bytes(&moved), Err(ModelFileError::Format(_))),
                "{shift}"
            );
        }
        let not_a_tensor = rewrite(&|h| h["fc3.bias"] = serde_json::json!("F32"));
        assert!(matches!(
            from_bytes(&not_a_tensor),
            Err(ModelFileError::Format(_))
        ));
        // A missing tensor.
        let without: Vec<_> = good.iter().filter(|t| t.0 != "fc2.bias").cloned().collect();
        match from_bytes(&file(&without, Some(&m))) {
            Err(ModelFileError::MissingTensor { name, .. }) => assert_eq!(name, "fc2.bias"),
            other => panic!("{other:?}"),
        }
        // A renamed (unknown) tensor.
        let mut renamed = good.clone();
        renamed[0].0 = "features.0.weight";
        match from_bytes(&file(&renamed, Some(&m))) {
            Err(ModelFileError::UnexpectedTensor { name, .. }) => {
                assert_eq!(name, "features.0.weight")
            }
            other => panic!("{other:?}"),
        }
        // burn's layout [in, out] instead of PyTorch's.
        let mut burn_layout = good.clone();
        let fc1 = burn_layout
            .iter_mut()
            .find(|t| t.0 == "fc1.weight")
            .unwrap();
        fc1.2 = vec![256, 120];
        match from_bytes(&file(&burn_layout, Some(&m))) {
            Err(ModelFileError::WrongShape {
                name,
                expected,
                got,
                ..
            }) => {
                assert_eq!(name, "fc1.weight");
                assert_eq!((expected, got), (vec![120, 256], vec![256, 120]));
            }
            other => panic!("{other:?}"),
        }
        // The right shape in f64, or in f16.
        let mut f64s = good.clone();
        let cb = f64s.iter_mut().find(|t| t.0 == "conv1.bias").unwrap();
        cb.1 = Dtype::F64;
        cb.3 =
            cb.3.chunks_exact(4)
                .flat_map(|b| f64::from(f32::from_le_bytes(b.try_into().unwrap())).to_le_bytes())
                .collect();
        match from_bytes(&file(&f64s, Some(&m))) {
            Err(ModelFileError::WrongDtype { name, got }) => {
                assert_eq!((name.as_str(), got.as_str()), ("conv1.bias", "F64"))
            }
            other => panic!("{other:?}"),
        }
        let mut f16s = good.clone();
        let cb = f16s.iter_mut().find(|t| t.0 == "conv1.bias").unwrap();
        cb.1 = Dtype::F16;
        cb.3.truncate(12);
        match from_bytes(&file(&f16s, Some(&m))) {
            Err(ModelFileError::WrongDtype { name, got }) => {
                assert_eq!((name.as_str(), got.as_str()), ("conv1.bias", "F16"))
            }
            other => panic!("{other:?}"),
        }
        // A NaN weight.
        let mut nan = good.clone();
        nan[3].3[..4].copy_from_slice(&f32::NAN.to_le_bytes());
        assert!(matches!(
            from_bytes(&file(&nan, Some(&m))),
            Err(ModelFileError::Model(ModelError::NotFinite { .. }))
        ));
        // An unknown model, an MLP header on LeNet tensors, bad metadata values.
        let mut other = m.to_map();
        other.insert("model".into(), "resnet18".into());
        let views: Vec<(&str, TensorView<'_>)> = good
            .iter()
            .map(|(n, d, s, b)| (*n, TensorView::new(*d, s.clone(), b).unwrap()))
            .collect();
        let bytes =
            safetensors::serialize(views.clone(), Some(other.into_iter().collect())).unwrap();
        assert!(matches!(
            from_bytes(&bytes),
            Err(ModelFileError::UnknownModel(m)) if m == "resnet18"
        ));
        let mut mlp = m.to_map();
        mlp.insert("model".into(), "mlp".into());
        let bytes = safetensors::serialize(views.clone(), Some(mlp.into_iter().collect())).unwrap();
        assert!(matches!(
            from_bytes(&bytes),
            Err(ModelFileError::UnexpectedTensor {
                model: ModelKind::Mlp,
                ..
            })
        ));
        for (key, value) in [
            ("round", "five"),
            ("members", "c0,c1"),
            ("input_std", "0"),
            ("input_mean", "nan"),
            ("input_scale", "1"),
            ("input_shape", "[3, 32, 32]"),
            ("accuracy", "high"),
        ] {
            let mut h = m.to_map();
            h.insert(key.into(), value.into());
            let bytes =
                safetensors::serialize(views.clone(), Some(h.into_iter().collect())).unwrap();
            match from_bytes(&bytes) {
                Err(ModelFileError::BadMetadata { key: k, .. }) => assert_eq!(k, key),
                other => panic!("{key}={value}: {other:?}"),
            }
        }
        // No header at all (a file saved by `safetensors.torch.save_file` without metadata):
        // the model is told by the tensor names, the input is the pipeline's.
        let bare = from_bytes(&file(&good, None)).unwrap();
        assert_eq!(bare.params, p);
        assert_eq!(bare.meta, ModelMeta::of(ModelKind::LeNet5));
        // Writing checks the parameters too.
        let short = Params {
            model: ModelKind::Mlp,
            values: vec![0.0; 3],
        };
        assert!(matches!(
            to_bytes(&short, &ModelMeta::of(ModelKind::Mlp)),
            Err(ModelFileError::Model(ModelError::WrongSize { .. }))
        ));
    }

    /// The forward pass of a model read back equals the one of the model written, and
    /// [`InputNorm::PIPELINE`] feeds exactly what training feeds.
    #[test]
    fn logits_of_a_read_model_equal_the_written_ones() {
        let device = Device::flex();
        let p = Params::init(ModelKind::LeNet5, 4);
        let back = from_bytes(&to_bytes(&p, &ModelMeta::of(p.model)).unwrap()).unwrap();
        let images: Vec<u8> = (0..3 * 784).map(|i| (i * 7 % 256) as u8).collect();
        let a = logits(
            &Net::from_params(&p, &device),
            &images,
            InputNorm::PIPELINE,
            2,
            &device,
        )
        .unwrap();
        let b = logits(
            &Net::from_params(&back.params, &device),
            &images,
            back.meta.input,
            3,
            &device,
        )
        .unwrap();
        assert_eq!(a.len(), 30);
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= 1e-5, "{x} {y}");
        }
        for p in 0..=255u8 {
            assert_eq!(
                InputNorm::PIPELINE.apply(p).to_bits(),
                crate::train::to_unit(p).to_bits()
            );
        }
        assert!(
            logits(
                &Net::from_params(&p, &device),
                &images[1..],
                InputNorm::PIPELINE,
                2,
                &device
            )
            .is_err()
        );
        let s = softmax(&a[..10]);
        assert!((s.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }
}
