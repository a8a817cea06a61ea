//! Models on burn and their flat, named parameter view.
//!
//! The federation never moves burn modules around: it moves [`Params`], a flat `Vec<f32>` laid out
//! by the model's [`ParamLayout`] (named tensors in a fixed order). A burn [`Net`] is built from
//! `Params` for training or evaluation and turned back into `Params` afterwards, so aggregation,
//! clustering signatures and the wire format are plain slices of floats.
//!
//! | model | input | architecture | parameters | final layer |
//! | --- | --- | --- | --- | --- |
//! | [`ModelKind::LeNet5`] | 1×28×28 | conv 1→6 k5, ReLU, maxpool 2, conv 6→16 k5, ReLU, maxpool 2, fc 256→120 ReLU, 120→84 ReLU, 84→10 | 44 426 | 850 |
//! | [`ModelKind::LeNet5Rgb`] | 3×32×32 | conv 3→6 k5, ReLU, maxpool 2, conv 6→16 k5, ReLU, maxpool 2, fc 400→120 ReLU, 120→84 ReLU, 84→10 | 62 006 | 850 |
//! | [`ModelKind::Mlp`] | 1×28×28 | fc 784→32 ReLU, 32→10 | 25 450 | 330 |
//! | [`ModelKind::MnistCnn`] | 1×28×28 | conv 1→20 k5, ReLU, maxpool 2, conv 20→50 k5, ReLU, maxpool 2, fc 800→10 | 33 580 | 8 010 |
//! | [`ModelKind::CifarCnn`] | 3×32×32 | conv 3→6 k5, ReLU, maxpool 2, conv 6→16 k5, ReLU, maxpool 2, fc 400→10 | 6 882 | 4 010 |
//! | [`ModelKind::FmnistCnn`] | 1×28×28 | conv 1→16 k5 pad 2, ReLU, maxpool 2, conv 16→32 k5, ReLU, maxpool 2, fc 800→10 | 21 258 | 8 010 |
//! | [`ModelKind::ResNet9`] | 3×32×32 | blocks of conv k3 pad 1, GroupNorm(32), ReLU: 3→64, 64→128 + maxpool 2, residual 2 × 128→128, 128→256 + maxpool 2, 256→512 + maxpool 2, residual 2 × 512→512; maxpool 4, fc 512→10 | 6 575 370 | 5 130 |
//!
//! LeNet-5 is NIID-Bench's / PACFL's `SimpleCNNMNIST`, the model of FedClust's FMNIST experiments,
//! and `SimpleCNN` (3 input channels, 16·5·5 = 400 features into fc1) that of its CIFAR-10 and
//! SVHN ones; the MLP is MT-HFL's FMNIST model.
//!
//! The last three are AdaCFL's (Table 1 and §6.1): two 5 × 5 convolutions, each with a bias per
//! output channel and followed by 2 × 2 max-pooling, then one fully connected layer, of 20/50,
//! 6/16 and 16/32 output channels. The paper gives their weight counts (bias excluded), and these
//! layouts have exactly them: MnistCNN 500 / 25 000 / 8 000, CifarCNN 450 / 2 400 / 4 000,
//! FmnistCNN 400 / 12 800 / 8 000. It does not say where the ReLUs are (after each convolution
//! here, as in LeNet-5) nor how FmnistCNN's fully connected layer gets 800 inputs from 28 × 28
//! images: padding its first convolution by 2 (28 → 28 → 14 → 10 → 5, 32·5·5 = 800) is the one
//! placement of a "same" padding that gives 8 000 weights (none gives 512, the second alone
//! 1 152). Linear weights are stored in burn's `[d_input, d_output]`
//! layout; convolution weights as `[out, in, kh, kw]`.
//!
//! ResNet-9 is the network of FedClust's CIFAR-100 runs (its paper names only "ResNet-9"): the
//! widely used DAWNBench one (Myrtle.ai; the `ResNet9` of many federated-learning codes), whose
//! residual blocks add two convolution blocks' output to their input. Its BatchNorm is replaced
//! by **GroupNorm with 32 groups** (Wu & He 2018; ε = 10⁻⁵, scale 1 and shift 0 at the start):
//! BatchNorm's running statistics are state outside the weights, which the flat [`Params`] (and
//! every aggregation rule) would have to carry and average, and on non-IID clients they are the
//! client's own label mix, so averaged statistics match no client; GroupNorm has only a scale and
//! a shift per channel, computes its statistics per sample, and behaves the same in training and
//! evaluation (Hsieh et al. 2020, "The Non-IID Data Quagmire", make the same choice). Its
//! dropout before the classifier is left out: training here is deterministic given the seed.
//!
//! Layer sets ([`LayerSet`]) select named tensors: FedClust's final layer, AdaCFL's smallest fully
//! connected layer, MT-HFL's shared feature layers.

use std::fmt;
use std::ops::Range;
use std::str::FromStr;

use burn::module::Param;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{Linear, PaddingConfig2d, Relu};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::{Gradients, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::data::catalog::{DatasetKind, ImageShape};

/// Errors from building a model out of flat parameters.
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum ModelError {
    /// The flat vector does not have the model's parameter count for any class count.
    #[error(
        "model {model} has {expected} parameters with {DEFAULT_CLASSES} classes ({} more for each \
         further class), got {got}",
        ParamLayout::new(*model, 1).len() - ParamLayout::new(*model, 0).len()
    )]
    WrongSize {
        /// The model kind.
        model: ModelKind,
        /// Its parameter count.
        expected: usize,
        /// The length received.
        got: usize,
    },
    /// A parameter is NaN or infinite.
    #[error("parameter {index} ({name}) is not finite")]
    NotFinite {
        /// Index into the flat vector.
        index: usize,
        /// Name of the tensor holding it.
        name: String,
    },
    /// An unknown model name.
    #[error("unknown model {0:?} (expected {names})", names = model_names())]
    UnknownModel(String),
    /// The model does not take the data set's images.
    #[error(
        "model {model} takes {} images, {}'s are {}: use --model {}",
        model.input(),
        dataset.info().name,
        dataset.info().shape,
        ModelKind::default_for(*dataset)
    )]
    WrongInput {
        /// The model.
        model: ModelKind,
        /// The data set.
        dataset: DatasetKind,
    },
    /// An unknown or empty layer-set description.
    #[error("layer set {0:?} selects no tensor of this model")]
    EmptyLayerSet(String),
}

pub use crate::protocol::ModelKind;

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ModelKind::LeNet5 => "lenet5",
            ModelKind::Mlp => "mlp",
            ModelKind::LeNet5Rgb => "lenet5-rgb",
            ModelKind::MnistCnn => "mnist-cnn",
            ModelKind::CifarCnn => "cifar-cnn",
            ModelKind::FmnistCnn => "fmnist-cnn",
            ModelKind::ResNet9 => "resnet9",
        })
    }
}

impl ModelKind {
    /// Every model, in `--help` order.
    pub const ALL: [ModelKind; 7] = [
        ModelKind::LeNet5,
        ModelKind::LeNet5Rgb,
        ModelKind::Mlp,
        ModelKind::MnistCnn,
        ModelKind::CifarCnn,
        ModelKind::FmnistCnn,
        ModelKind::ResNet9,
    ];

    /// The images the model takes.
    pub fn input(self) -> ImageShape {
        match self {
            ModelKind::LeNet5 | ModelKind::Mlp | ModelKind::MnistCnn | ModelKind::FmnistCnn => {
                ImageShape::GREY_28
            }
            ModelKind::LeNet5Rgb | ModelKind::CifarCnn | ModelKind::ResNet9 => ImageShape::RGB_32,
        }
    }

    /// The zero padding of the first convolution on each side (FmnistCNN's 2; none in the other
    /// CNNs, and none on any second convolution; ResNet-9 pads every convolution by 1, which
    /// its own code paths say).
    pub fn conv1_padding(self) -> usize {
        match self {
            ModelKind::FmnistCnn => 2,
            _ => 0,
        }
    }

    /// The data set a run of this model is on when nothing says which (a file or message from
    /// before data sets were named): Fashion-MNIST for the grey models, CIFAR-10 for the colour
    /// LeNet-5.
    pub fn default_dataset(self) -> DatasetKind {
        match self {
            ModelKind::LeNet5 | ModelKind::Mlp | ModelKind::FmnistCnn => DatasetKind::Fmnist,
            ModelKind::MnistCnn => DatasetKind::Mnist,
            ModelKind::LeNet5Rgb | ModelKind::CifarCnn => DatasetKind::Cifar10,
            ModelKind::ResNet9 => DatasetKind::Cifar100,
        }
    }

    /// [`ModelError::WrongInput`] unless the model takes `dataset`'s images.
    pub fn check_input(self, dataset: DatasetKind) -> Result<(), ModelError> {
        if self.input() == dataset.info().shape {
            Ok(())
        } else {
            Err(ModelError::WrongInput {
                model: self,
                dataset,
            })
        }
    }

    /// The model a data set is trained with unless `--model` says otherwise: FedClust's ResNet-9
    /// for CIFAR-100 (fine or coarse labels), else the papers' LeNet-5 for its image shape.
    pub fn default_for(dataset: DatasetKind) -> Self {
        let shape = dataset.info().shape;
        if matches!(dataset, DatasetKind::Cifar100 | DatasetKind::Cifar100Coarse) {
            ModelKind::ResNet9
        } else if shape == ImageShape::RGB_32 {
            ModelKind::LeNet5Rgb
        } else {
            ModelKind::LeNet5
        }
    }
}

/// Every model's name, for errors: "lenet5, …, mlp or fmnist-cnn".
pub fn model_names() -> String {
    let names: Vec<String> = ModelKind::ALL.iter().map(|m| m.to_string()).collect();
    let (last, rest) = names.split_last().expect("models");
    format!("{} or {last}", rest.join(", "))
}

/// `--model`'s help: every model's name and input, from [`ModelKind::ALL`].
pub fn model_flag_help() -> String {
    let names: Vec<String> = ModelKind::ALL
        .iter()
        .map(|m| format!("{m} ({})", m.input()))
        .collect();
    names.join(" | ")
}

impl FromStr for ModelKind {
    type Err = ModelError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "lenet5" | "lenet-5" | "lenet" | "cnn" => Ok(ModelKind::LeNet5),
            "lenet5-rgb" | "lenet5rgb" | "lenet-5-rgb" => Ok(ModelKind::LeNet5Rgb),
            "mlp" => Ok(ModelKind::Mlp),
            "mnist-cnn" | "mnistcnn" => Ok(ModelKind::MnistCnn),
            "cifar-cnn" | "cifarcnn" => Ok(ModelKind::CifarCnn),
            "fmnist-cnn" | "fmnistcnn" => Ok(ModelKind::FmnistCnn),
            "resnet9" | "resnet-9" => Ok(ModelKind::ResNet9),
            _ => Err(ModelError::UnknownModel(s.to_string())),
        }
    }
}

/// One named tensor in a [`ParamLayout`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParamEntry {
    /// Dotted name, e.g. `fc3.weight`.
    pub name: &'static str,
    /// Shape in burn's layout.
    pub shape: Vec<usize>,
    /// Offset of the first element in the flat vector.
    pub offset: usize,
    /// Fan-in used for initialisation (PyTorch's default `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`);
    /// 0 for a normalisation's scale (`.weight`, initialised to 1) and shift (`.bias`, to 0).
    pub fan_in: usize,
}

impl ParamEntry {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    /// True when the tensor has no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Range in the flat vector.
    pub fn range(&self) -> Range<usize> {
        self.offset..self.offset + self.len()
    }
    /// The layer this tensor belongs to (`fc3` for `fc3.weight`).
    pub fn layer(&self) -> &'static str {
        self.name.split('.').next().unwrap_or(self.name)
    }
}

pub use crate::data::catalog::{DEFAULT_CLASSES, MAX_CLASSES};

/// The ordered, named tensors of a model: the meaning of every float in a [`Params`] vector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParamLayout {
    /// The model it describes.
    pub model: ModelKind,
    /// Its outputs, one per class (the width of its last layer).
    pub classes: usize,
    /// Tensors in flattening order.
    pub entries: Vec<ParamEntry>,
}

impl ParamLayout {
    /// The layout of `model` with [`DEFAULT_CLASSES`] outputs.
    pub fn of(model: ModelKind) -> Self {
        ParamLayout::new(model, DEFAULT_CLASSES)
    }

    /// The layout of `model` with `classes` outputs: only the last layer's width depends on it.
    pub fn new(model: ModelKind, classes: usize) -> Self {
        let k = classes;
        // (name, shape, fan_in)
        let spec: Vec<(&'static str, Vec<usize>, usize)> = match model {
            ModelKind::LeNet5 => vec![
                ("conv1.weight", vec![6, 1, 5, 5], 25),
                ("conv1.bias", vec![6], 25),
                ("conv2.weight", vec![16, 6, 5, 5], 150),
                ("conv2.bias", vec![16], 150),
                ("fc1.weight", vec![256, 120], 256),
                ("fc1.bias", vec![120], 256),
                ("fc2.weight", vec![120, 84], 120),
                ("fc2.bias", vec![84], 120),
                ("fc3.weight", vec![84, k], 84),
                ("fc3.bias", vec![k], 84),
            ],
            ModelKind::LeNet5Rgb => vec![
                ("conv1.weight", vec![6, 3, 5, 5], 75),
                ("conv1.bias", vec![6], 75),
                ("conv2.weight", vec![16, 6, 5, 5], 150),
                ("conv2.bias", vec![16], 150),
                ("fc1.weight", vec![400, 120], 400),
                ("fc1.bias", vec![120], 400),
                ("fc2.weight", vec![120, 84], 120),
                ("fc2.bias", vec![84], 120),
                ("fc3.weight", vec![84, k], 84),
                ("fc3.bias", vec![k], 84),
            ],
            ModelKind::Mlp => vec![
                ("fc1.weight", vec![784, 32], 784),
                ("fc1.bias", vec![32], 784),
                ("fc2.weight", vec![32, k], 32),
                ("fc2.bias", vec![k], 32),
            ],
            ModelKind::MnistCnn => vec![
                ("conv1.weight", vec![20, 1, 5, 5], 25),
                ("conv1.bias", vec![20], 25),
                ("conv2.weight", vec![50, 20, 5, 5], 500),
                ("conv2.bias", vec![50], 500),
                ("fc.weight", vec![800, k], 800),
                ("fc.bias", vec![k], 800),
            ],
            ModelKind::CifarCnn => vec![
                ("conv1.weight", vec![6, 3, 5, 5], 75),
                ("conv1.bias", vec![6], 75),
                ("conv2.weight", vec![16, 6, 5, 5], 150),
                ("conv2.bias", vec![16], 150),
                ("fc.weight", vec![400, k], 400),
                ("fc.bias", vec![k], 400),
            ],
            ModelKind::FmnistCnn => vec![
                ("conv1.weight", vec![16, 1, 5, 5], 25),
                ("conv1.bias", vec![16], 25),
                ("conv2.weight", vec![32, 16, 5, 5], 400),
                ("conv2.bias", vec![32], 400),
                ("fc.weight", vec![800, k], 800),
                ("fc.bias", vec![k], 800),
            ],
            ModelKind::ResNet9 => {
                let mut v = Vec::with_capacity(34);
                for (names, c_in, out) in RESNET9_BLOCKS {
                    let [w, b, gw, gb] = names;
                    v.push((w, vec![out, c_in, 3, 3], c_in * 9));
                    v.push((b, vec![out], c_in * 9));
                    v.push((gw, vec![out], 0));
                    v.push((gb, vec![out], 0));
                }
                v.push(("fc.weight", vec![512, k], 512));
                v.push(("fc.bias", vec![k], 512));
                v
            }
        };
        let mut offset = 0;
        let entries = spec
            .into_iter()
            .map(|(name, shape, fan_in)| {
                let e = ParamEntry {
                    name,
                    shape,
                    offset,
                    fan_in,
                };
                offset += e.len();
                e
            })
            .collect();
        ParamLayout {
            model,
            classes,
            entries,
        }
    }

    /// The class count for which `model` has `len` parameters: every class adds one output of
    /// the last layer (its inputs' weights and a bias), so the length gives it. None when no
    /// count in `2..=`[`MAX_CLASSES`] gives `len`.
    pub fn classes_for(model: ModelKind, len: usize) -> Option<usize> {
        let body = ParamLayout::new(model, 0).len();
        let per_class = ParamLayout::new(model, 1).len() - body;
        let extra = len.checked_sub(body)?;
        let classes = extra / per_class;
        (extra % per_class == 0 && (2..=MAX_CLASSES).contains(&classes)).then_some(classes)
    }

    /// Total number of parameters.
    pub fn len(&self) -> usize {
        self.entries.last().map_or(0, |e| e.offset + e.len())
    }

    /// True for a layout without tensors.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The entry named `name`.
    pub fn entry(&self, name: &str) -> Option<&ParamEntry> {
        self.entries.iter().find(|e| e.name == name)
    }

    /// Distinct layer names in order (`conv1`, `conv2`, `fc1`, …).
    pub fn layers(&self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Vec::new();
        for e in &self.entries {
            if out.last() != Some(&e.layer()) {
                out.push(e.layer());
            }
        }
        out
    }

    /// The entries a [`LayerSet`] selects, in layout order.
    pub fn select(&self, set: &LayerSet) -> Result<Selection, ModelError> {
        let layers = self.layers();
        let chosen: Vec<&'static str> = match set {
            LayerSet::All => layers.clone(),
            LayerSet::Final => layers.last().copied().into_iter().collect(),
            LayerSet::SmallestFc => {
                // AdaCFL: the fully connected layer with the fewest parameters.
                let mut best: Option<(&'static str, usize)> = None;
                for l in layers.iter().filter(|l| l.starts_with("fc")) {
                    let n: usize = self
                        .entries
                        .iter()
                        .filter(|e| e.layer() == *l)
                        .map(ParamEntry::len)
                        .sum();
                    if best.is_none_or(|(_, b)| n < b) {
                        best = Some((l, n));
                    }
                }
                best.map(|(l, _)| l).into_iter().collect()
            }
            LayerSet::Named(names) => layers
                .iter()
                .copied()
                .filter(|l| names.iter().any(|n| n == l))
                .collect(),
        };
        let entries: Vec<ParamEntry> = self
            .entries
            .iter()
            .filter(|e| chosen.contains(&e.layer()))
            .cloned()
            .collect();
        if entries.is_empty() {
            return Err(ModelError::EmptyLayerSet(set.to_string()));
        }
        Ok(Selection { entries })
    }
}

/// Which layers of a model to take (for signatures, or for the layers shared across clusters).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum LayerSet {
    /// Every layer.
    All,
    /// The last layer (FedClust's upload: 850 floats for LeNet-5).
    Final,
    /// The fully connected layer with the fewest parameters (AdaCFL).
    SmallestFc,
    /// Layers by name, e.g. `conv1,conv2` (MT-HFL's shared feature layers).
    Named(Vec<String>),
}

impl fmt::Display for LayerSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayerSet::All => f.write_str("all"),
            LayerSet::Final => f.write_str("final"),
            LayerSet::SmallestFc => f.write_str("smallest-fc"),
            LayerSet::Named(n) => f.write_str(&n.join(",")),
        }
    }
}

impl FromStr for LayerSet {
    type Err = ModelError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "all" => LayerSet::All,
            "final" => LayerSet::Final,
            "smallest-fc" => LayerSet::SmallestFc,
            _ => {
                let names: Vec<String> = s
                    .split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(String::from)
                    .collect();
                if names.is_empty() {
                    return Err(ModelError::EmptyLayerSet(s.to_string()));
                }
                LayerSet::Named(names)
            }
        })
    }
}

impl From<LayerSet> for String {
    fn from(l: LayerSet) -> String {
        l.to_string()
    }
}

impl TryFrom<String> for LayerSet {
    type Error = ModelError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// The tensors a [`LayerSet`] picked out of a layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// Selected entries in layout order.
    pub entries: Vec<ParamEntry>,
}

impl Selection {
    /// Number of selected floats.
    pub fn len(&self) -> usize {
        self.entries.iter().map(ParamEntry::len).sum()
    }
    /// True when nothing is selected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies the selected floats out of a full parameter vector.
    pub fn extract(&self, params: &[f32]) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.len());
        for e in &self.entries {
            out.extend_from_slice(&params[e.range()]);
        }
        out
    }
    /// Writes `part` (as made by [`Selection::extract`]) back into a full parameter vector.
    pub fn insert(&self, params: &mut [f32], part: &[f32]) {
        let mut at = 0;
        for e in &self.entries {
            let n = e.len();
            params[e.range()].copy_from_slice(&part[at..at + n]);
            at += n;
        }
    }
}

/// A model's parameters as one flat vector, laid out by its `model`'s [`ParamLayout`] (whose class
/// count the length gives).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// The architecture.
    pub model: ModelKind,
    /// The values.
    pub values: Vec<f32>,
}

impl Params {
    /// Checks the length (that of `model` for some class count, [`ParamLayout::classes_for`])
    /// and that every value is finite.
    pub fn new(model: ModelKind, values: Vec<f32>) -> Result<Self, ModelError> {
        let Some(classes) = ParamLayout::classes_for(model, values.len()) else {
            return Err(ModelError::WrongSize {
                model,
                expected: ParamLayout::of(model).len(),
                got: values.len(),
            });
        };
        let layout = ParamLayout::new(model, classes);
        if let Some(index) = values.iter().position(|v| !v.is_finite()) {
            let name = layout
                .entries
                .iter()
                .find(|e| e.range().contains(&index))
                .map_or("?", |e| e.name)
                .to_string();
            return Err(ModelError::NotFinite { index, name });
        }
        Ok(Params { model, values })
    }

    /// [`Params::init_for`] with [`DEFAULT_CLASSES`] outputs.
    pub fn init(model: ModelKind, seed: u64) -> Self {
        Params::init_for(model, DEFAULT_CLASSES, seed)
    }

    /// Seeded initialisation as PyTorch's default for Conv2d/Linear: every weight and bias drawn from
    /// `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`; GroupNorm's scales 1 and shifts 0. Independent of the burn backend. The draws of every
    /// layer but the last do not depend on `classes`.
    pub fn init_for(model: ModelKind, classes: usize, seed: u64) -> Self {
        let layout = ParamLayout::new(model, classes);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut values = Vec::with_capacity(layout.len());
        for e in &layout.entries {
            if e.fan_in == 0 {
                // A normalisation's scale and shift, as PyTorch's GroupNorm starts them.
                let v = if e.name.ends_with(".weight") {
                    1.0
                } else {
                    0.0
                };
                values.extend(std::iter::repeat_n(v, e.len()));
                continue;
            }
            let bound = 1.0 / (e.fan_in as f32).sqrt();
            values.extend((0..e.len()).map(|_| rng.random_range(-bound..bound)));
        }
        Params { model, values }
    }

    /// The layout of these parameters.
    pub fn layout(&self) -> ParamLayout {
        ParamLayout::new(self.model, self.classes())
    }

    /// The model's outputs, one per class (given by the length, [`ParamLayout::classes_for`]).
    pub fn classes(&self) -> usize {
        ParamLayout::classes_for(self.model, self.values.len()).unwrap_or(DEFAULT_CLASSES)
    }
}

/// LeNet-5 (NIID-Bench `SimpleCNNMNIST`, and `SimpleCNN` with 3 input channels): the two
/// differ only in their tensors' shapes.
#[derive(Module, Debug)]
pub struct LeNet5 {
    conv1: Conv2d,
    conv2: Conv2d,
    pool: MaxPool2d,
    fc1: Linear,
    fc2: Linear,
    fc3: Linear,
    relu: Relu,
}

/// AdaCFL's CNNs: two convolutions (the first zero-padded by the model's
/// [`ModelKind::conv1_padding`]), each followed by ReLU and 2 × 2 max-pooling, and one fully
/// connected layer.
#[derive(Module, Debug)]
pub struct SmallCnn {
    conv1: Conv2d,
    conv2: Conv2d,
    pool: MaxPool2d,
    fc: Linear,
    relu: Relu,
}

/// ResNet-9's eight convolution blocks in layout and forward order: the PyTorch names of each
/// block's convolution weight and bias and GroupNorm scale and shift (the DAWNBench network's
/// `nn.Sequential` indices: `conv1.0` the convolution of block `conv1`, `conv1.1` its norm;
/// `res1.0.*` and `res1.1.*` the two blocks of residual `res1`), input and output channels.
/// Blocks 1, 4 and 5 (`conv2`, `conv3`, `conv4`) end with a 2 × 2 max-pooling; `res1` adds its
/// two blocks' output to the output of `conv2`, `res2` to that of `conv4`.
pub const RESNET9_BLOCKS: [([&str; 4], usize, usize); 8] = [
    (
        [
            "conv1.0.weight",
            "conv1.0.bias",
            "conv1.1.weight",
            "conv1.1.bias",
        ],
        3,
        64,
    ),
    (
        [
            "conv2.0.weight",
            "conv2.0.bias",
            "conv2.1.weight",
            "conv2.1.bias",
        ],
        64,
        128,
    ),
    (
        [
            "res1.0.0.weight",
            "res1.0.0.bias",
            "res1.0.1.weight",
            "res1.0.1.bias",
        ],
        128,
        128,
    ),
    (
        [
            "res1.1.0.weight",
            "res1.1.0.bias",
            "res1.1.1.weight",
            "res1.1.1.bias",
        ],
        128,
        128,
    ),
    (
        [
            "conv3.0.weight",
            "conv3.0.bias",
            "conv3.1.weight",
            "conv3.1.bias",
        ],
        128,
        256,
    ),
    (
        [
            "conv4.0.weight",
            "conv4.0.bias",
            "conv4.1.weight",
            "conv4.1.bias",
        ],
        256,
        512,
    ),
    (
        [
            "res2.0.0.weight",
            "res2.0.0.bias",
            "res2.0.1.weight",
            "res2.0.1.bias",
        ],
        512,
        512,
    ),
    (
        [
            "res2.1.0.weight",
            "res2.1.0.bias",
            "res2.1.1.weight",
            "res2.1.1.bias",
        ],
        512,
        512,
    ),
];

/// ResNet-9's GroupNorm groups.
pub const RESNET9_GROUPS: usize = 32;

/// GroupNorm's ε (PyTorch's default).
pub const GROUP_NORM_EPS: f64 = 1e-5;

/// Which of ResNet-9's blocks end with a 2 × 2 max-pooling.
pub(crate) const RESNET9_POOLED: [bool; 8] = [false, true, false, false, true, true, false, false];

/// GroupNorm of `x` `[N, channels, H, W]` in `groups` groups of consecutive channels (mean and
/// biased variance over each group's channels and pixels of each sample), then each channel
/// scaled by `gamma` and shifted by `beta` (`[channels]`): PyTorch's `F.group_norm`.
pub(crate) fn group_norm(
    x: Tensor<4>,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    groups: usize,
) -> Tensor<4> {
    let [n, ch, h, w] = x.dims();
    let g = x.reshape([n, groups, ch / groups * h * w]);
    let centred = g.clone() - g.mean_dim(2);
    let var = centred.clone().square().mean_dim(2);
    let normed = (centred / var.add_scalar(GROUP_NORM_EPS).sqrt()).reshape([n, ch, h, w]);
    normed * gamma.reshape([1, ch, 1, 1]) + beta.reshape([1, ch, 1, 1])
}

/// One of ResNet-9's blocks: a 3 × 3 convolution padded by 1, GroupNorm and ReLU.
#[derive(Module, Debug)]
pub struct ConvNorm {
    conv: Conv2d,
    gamma: Param<Tensor<1>>,
    beta: Param<Tensor<1>>,
}

impl ConvNorm {
    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let y = self.conv.forward(x);
        burn::tensor::activation::relu(group_norm(
            y,
            self.gamma.val(),
            self.beta.val(),
            RESNET9_GROUPS,
        ))
    }
}

/// ResNet-9 with GroupNorm (see the [module docs](self)).
#[derive(Module, Debug)]
pub struct ResNet9 {
    blocks: Vec<ConvNorm>,
    pool: MaxPool2d,
    head_pool: MaxPool2d,
    fc: Linear,
}

/// MLP 784→32→10.
#[derive(Module, Debug)]
pub struct Mlp {
    fc1: Linear,
    fc2: Linear,
    relu: Relu,
}

/// A burn network of one of the [`ModelKind`]s. (Built once per training call, so the size
/// difference between the variants does not matter.)
#[derive(Module, Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Net {
    /// LeNet-5.
    LeNet5(LeNet5),
    /// The MLP.
    Mlp(Mlp),
    /// One of AdaCFL's CNNs.
    SmallCnn(SmallCnn),
    /// ResNet-9.
    ResNet9(ResNet9),
}

fn tensor<const D: usize>(values: &[f32], shape: &[usize], device: &Device) -> Param<Tensor<D>> {
    Param::from_data(TensorData::new(values.to_vec(), shape.to_vec()), device)
}

fn conv(w: &[f32], b: &[f32], shape: &[usize], padding: usize, device: &Device) -> Conv2d {
    let mut config = Conv2dConfig::new([shape[1], shape[0]], [shape[2], shape[3]]);
    if padding > 0 {
        config = config.with_padding(PaddingConfig2d::Explicit(
            padding, padding, padding, padding,
        ));
    }
    let mut c = config.init(device);
    c.weight = tensor(w, shape, device);
    c.bias = Some(tensor(b, &[shape[0]], device));
    c
}

fn linear(w: &[f32], b: &[f32], shape: &[usize], device: &Device) -> Linear {
    Linear {
        weight: tensor(w, shape, device),
        bias: Some(tensor(b, &[shape[1]], device)),
    }
}

/// Something that looks at each parameter tensor of a [`Net`] in layout order ([`Net::walk`]).
trait ParamVisitor {
    fn visit<const D: usize>(&mut self, p: &Param<Tensor<D>>);
}

/// Appends a float tensor's values: a copy of the slice when the tensor holds f32 (always, on the
/// CPU backends), else element by element with conversion.
fn extend_values<const D: usize>(t: Tensor<D>, out: &mut Vec<f32>) {
    let data = t.into_data();
    match data.as_slice::<f32>() {
        Ok(values) => out.extend_from_slice(values),
        Err(_) => out.extend(data.iter::<f32>()),
    }
}

fn param_values<const D: usize>(p: &Param<Tensor<D>>, out: &mut Vec<f32>) {
    extend_values(p.val(), out);
}

impl Net {
    /// Builds the burn network holding `params` on `device` (use `device.autodiff()` to train).
    pub fn from_params(params: &Params, device: &Device) -> Self {
        let layout = params.layout();
        let v = &params.values;
        let get = |name: &str| {
            let e = layout.entry(name).expect("layout entry of own model");
            (&v[e.range()], e.shape.as_slice())
        };
        let lin = |l: &str| {
            let (w, shape) = get(&format!("{l}.weight"));
            let (b, _) = get(&format!("{l}.bias"));
            linear(w, b, shape, device)
        };
        let cv = |l: &str, padding: usize| {
            let (w, shape) = get(&format!("{l}.weight"));
            let (b, _) = get(&format!("{l}.bias"));
            conv(w, b, shape, padding, device)
        };
        let pad = params.model.conv1_padding();
        match params.model {
            ModelKind::LeNet5 | ModelKind::LeNet5Rgb => Net::LeNet5(LeNet5 {
                conv1: cv("conv1", pad),
                conv2: cv("conv2", 0),
                pool: MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
                fc1: lin("fc1"),
                fc2: lin("fc2"),
                fc3: lin("fc3"),
                relu: Relu::new(),
            }),
            ModelKind::Mlp => Net::Mlp(Mlp {
                fc1: lin("fc1"),
                fc2: lin("fc2"),
                relu: Relu::new(),
            }),
            ModelKind::MnistCnn | ModelKind::CifarCnn | ModelKind::FmnistCnn => {
                Net::SmallCnn(SmallCnn {
                    conv1: cv("conv1", pad),
                    conv2: cv("conv2", 0),
                    pool: MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
                    fc: lin("fc"),
                    relu: Relu::new(),
                })
            }
            ModelKind::ResNet9 => Net::ResNet9(ResNet9 {
                blocks: RESNET9_BLOCKS
                    .iter()
                    .map(|([w, b, gw, gb], _, _)| {
                        let (w, shape) = get(w);
                        let (b, _) = get(b);
                        ConvNorm {
                            conv: conv(w, b, shape, 1, device),
                            gamma: tensor(get(gw).0, get(gw).1, device),
                            beta: tensor(get(gb).0, get(gb).1, device),
                        }
                    })
                    .collect(),
                pool: MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
                head_pool: MaxPool2dConfig::new([4, 4]).with_strides([4, 4]).init(),
                fc: lin("fc"),
            }),
        }
    }

    /// The architecture.
    pub fn kind(&self) -> ModelKind {
        match self {
            Net::LeNet5(m) if m.conv1.weight.dims()[1] == 3 => ModelKind::LeNet5Rgb,
            Net::LeNet5(_) => ModelKind::LeNet5,
            Net::Mlp(_) => ModelKind::Mlp,
            // Told apart by their first convolution's `[out, in]` channels.
            Net::SmallCnn(m) => match m.conv1.weight.dims()[..2] {
                [20, 1] => ModelKind::MnistCnn,
                [6, 3] => ModelKind::CifarCnn,
                _ => ModelKind::FmnistCnn,
            },
            Net::ResNet9(_) => ModelKind::ResNet9,
        }
    }

    /// Its outputs, one per class: the width of its last layer.
    pub fn classes(&self) -> usize {
        match self {
            Net::LeNet5(m) => m.fc3.weight.dims()[1],
            Net::Mlp(m) => m.fc2.weight.dims()[1],
            Net::SmallCnn(m) => m.fc.weight.dims()[1],
            Net::ResNet9(m) => m.fc.weight.dims()[1],
        }
    }

    /// Its layout.
    pub fn layout(&self) -> ParamLayout {
        ParamLayout::new(self.kind(), self.classes())
    }

    /// Visits every parameter tensor in [`ParamLayout`] order (weight before bias, layer by
    /// layer): the one place that ties the burn modules to the flat layout.
    fn walk<V: ParamVisitor>(&self, v: &mut V) {
        let linear = |l: &Linear, v: &mut V| {
            v.visit(&l.weight);
            if let Some(b) = &l.bias {
                v.visit(b);
            }
        };
        let conv = |c: &Conv2d, v: &mut V| {
            v.visit(&c.weight);
            if let Some(b) = &c.bias {
                v.visit(b);
            }
        };
        match self {
            Net::LeNet5(m) => {
                conv(&m.conv1, v);
                conv(&m.conv2, v);
                for l in [&m.fc1, &m.fc2, &m.fc3] {
                    linear(l, v);
                }
            }
            Net::Mlp(m) => {
                linear(&m.fc1, v);
                linear(&m.fc2, v);
            }
            Net::SmallCnn(m) => {
                conv(&m.conv1, v);
                conv(&m.conv2, v);
                linear(&m.fc, v);
            }
            Net::ResNet9(m) => {
                for b in &m.blocks {
                    conv(&b.conv, v);
                    v.visit(&b.gamma);
                    v.visit(&b.beta);
                }
                linear(&m.fc, v);
            }
        }
    }

    /// Reads the parameters back into the flat layout.
    pub fn to_params(&self) -> Params {
        struct Values(Vec<f32>);
        impl ParamVisitor for Values {
            fn visit<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
                param_values(p, &mut self.0);
            }
        }
        let mut values = Values(Vec::with_capacity(self.layout().len()));
        self.walk(&mut values);
        Params {
            model: self.kind(),
            values: values.0,
        }
    }

    /// Every parameter tensor flattened to one dimension, in [`ParamLayout`] order (one tensor per
    /// layout entry). On an autodiff device these are the tracked parameters themselves, so a loss
    /// built from them (FedProx's proximal term) back-propagates into the network.
    pub fn param_tensors(&self) -> Vec<Tensor<1>> {
        struct Flat(Vec<Tensor<1>>);
        impl ParamVisitor for Flat {
            fn visit<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
                let t = p.val();
                let n = t.shape().num_elements();
                self.0.push(t.reshape([n]));
            }
        }
        let mut flat = Flat(Vec::with_capacity(10));
        self.walk(&mut flat);
        flat.0
    }

    /// The gradient of every parameter in `grads` (from a backward pass through this network on an
    /// autodiff device), flat in [`ParamLayout`] order; a parameter without a gradient (not reached
    /// by the loss) contributes zeros.
    pub fn flat_grads(&self, grads: &Gradients) -> Vec<f32> {
        struct Grads<'g>(&'g Gradients, Vec<f32>);
        impl ParamVisitor for Grads<'_> {
            fn visit<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
                let t = p.val();
                match t.grad(self.0) {
                    Some(g) => extend_values(g, &mut self.1),
                    None => {
                        let n = t.shape().num_elements();
                        self.1.extend(std::iter::repeat_n(0.0, n));
                    }
                }
            }
        }
        let mut out = Grads(grads, Vec::with_capacity(self.layout().len()));
        self.walk(&mut out);
        out.1
    }

    /// Gradients for [burn's optimisers](burn::optim) from a flat gradient in [`ParamLayout`]
    /// order (as [`Net::flat_grads`] gives), one tensor per parameter of this network on `device`
    /// (the plain device under the autodiff one, where backward passes leave their gradients).
    ///
    /// # Panics
    ///
    /// If `flat` is not this model's [`ParamLayout`] length (an internal contract).
    pub fn grads_params(&self, flat: &[f32], device: &Device) -> GradientsParams {
        struct Register<'a>(&'a [f32], &'a Device, GradientsParams);
        impl ParamVisitor for Register<'_> {
            fn visit<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
                let shape = p.val().shape();
                let (values, rest) = self.0.split_at(shape.num_elements());
                let g = Tensor::<D>::from_data(TensorData::new(values.to_vec(), shape), self.1);
                self.2.register(p.id, g);
                self.0 = rest;
            }
        }
        assert_eq!(flat.len(), self.layout().len(), "flat gradient length");
        let mut out = Register(flat, device, GradientsParams::new());
        self.walk(&mut out);
        out.2
    }

    /// Logits `[batch, classes]` for images `[batch, C, H, W]` of the model's [`ModelKind::input`].
    pub fn forward(&self, images: Tensor<4>) -> Tensor<2> {
        match self {
            Net::LeNet5(m) => {
                let x = m.pool.forward(m.relu.forward(m.conv1.forward(images)));
                let x = m.pool.forward(m.relu.forward(m.conv2.forward(x)));
                let x: Tensor<2> = x.flatten(1, 3);
                let x = m.relu.forward(m.fc1.forward(x));
                let x = m.relu.forward(m.fc2.forward(x));
                m.fc3.forward(x)
            }
            Net::Mlp(m) => {
                let x: Tensor<2> = images.flatten(1, 3);
                let x = m.relu.forward(m.fc1.forward(x));
                m.fc2.forward(x)
            }
            Net::SmallCnn(m) => {
                let x = m.pool.forward(m.relu.forward(m.conv1.forward(images)));
                let x = m.pool.forward(m.relu.forward(m.conv2.forward(x)));
                m.fc.forward(x.flatten(1, 3))
            }
            Net::ResNet9(m) => {
                let block = |i: usize, x: Tensor<4>| {
                    let y = m.blocks[i].forward(x);
                    if RESNET9_POOLED[i] {
                        m.pool.forward(y)
                    } else {
                        y
                    }
                };
                let x = block(1, block(0, images));
                let x = block(3, block(2, x.clone())) + x;
                let x = block(5, block(4, x));
                let x = block(7, block(6, x.clone())) + x;
                m.fc.forward(m.head_pool.forward(x).flatten(1, 3))
            }
        }
    }
}
