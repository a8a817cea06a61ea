//! The data sets the product knows: each one's image shape and classes ([`DatasetInfo`]), chosen
//! with `--dataset` ([`DatasetKind`]); [`super::load`] reads one from the files a user has.
//!
//! | `--dataset` | images | classes | read from (`--data DIR`) |
//! | --- | --- | --- | --- |
//! | `fmnist` (default) | 1×28×28 | 10 | the four IDX files, plain or `.gz` (without `--data`: `EDGECFL_FMNIST_DIR`, the Debian package, the bundled subset) |
//! | `mnist` | 1×28×28 | 10 | the four IDX files, plain or `.gz` (the same names as Fashion-MNIST's) |
//! | `cifar10` | 3×32×32 | 10 | the official binary version (`data_batch_1..5.bin`, `test_batch.bin`, in `DIR` or `DIR/cifar-10-batches-bin`), the python version torchvision downloads (`data_batch_1..5`, `test_batch`, in `DIR` or `DIR/cifar-10-batches-py`), or an image folder (`DIR/train/<class>/*`, `DIR/test/<class>/*`, PNG or JPEG) |
//! | `cifar100` | 3×32×32 | 100 | the official binary version (`train.bin`, `test.bin`, in `DIR` or `DIR/cifar-100-binary`; the fine labels), the python version (`train`, `test`, in `DIR` or `DIR/cifar-100-python`), or an image folder |
//! | `cifar100-coarse` | 3×32×32 | 20 | the same files, labelled by the 20 superclasses (the records' coarse label, the pickles' `coarse_labels`) |
//! | `svhn` | 3×32×32 | 10 | the cropped digits' `train_32x32.mat` and `test_32x32.mat` (MATLAB Level 5, compressed or not; the files' label 10 is the digit 0) |
//! | `femnist` | 1×28×28 | 62 | LEAF's JSON files, `train/*.json` and `test/*.json` (LEAF's `data/femnist/data`), with each sample's writer ([`super::femnist`]) |
//!
//! Every image is kept as bytes, channel after channel (`C × H × W`, row-major within a channel),
//! as PyTorch's `ToTensor` lays it out; training scales each byte to `[0, 1]`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The classes of the ten-class data sets (MNIST, Fashion-MNIST, CIFAR-10, SVHN): a model's
/// outputs unless its data set says otherwise (`ParamLayout::of`, `Params::init`, `partition`).
pub const DEFAULT_CLASSES: usize = 10;

/// The most classes a data set may have: labels are bytes.
pub const MAX_CLASSES: usize = 256;

/// The shape of one image: `channels × height × width` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ImageShape {
    /// Colour channels (1 grey, 3 RGB).
    pub channels: usize,
    /// Rows.
    pub height: usize,
    /// Columns.
    pub width: usize,
}

impl ImageShape {
    /// 28 × 28 grey levels: MNIST, Fashion-MNIST.
    pub const GREY_28: ImageShape = ImageShape::new(1, 28, 28);
    /// 32 × 32 RGB: CIFAR-10, CIFAR-100, SVHN.
    pub const RGB_32: ImageShape = ImageShape::new(3, 32, 32);

    /// `channels × height × width`.
    pub const fn new(channels: usize, height: usize, width: usize) -> Self {
        ImageShape {
            channels,
            height,
            width,
        }
    }

    /// Bytes of one image, `channels × height × width`.
    pub const fn pixels(self) -> usize {
        self.channels * self.height * self.width
    }

    /// Bytes of one channel, `height × width`.
    pub const fn plane(self) -> usize {
        self.height * self.width
    }

    /// The burn tensor shape of a batch of `n` such images, `[n, C, H, W]`.
    pub const fn batch(self, n: usize) -> [usize; 4] {
        [n, self.channels, self.height, self.width]
    }
}

/// Fashion-MNIST's: the product's first data set, and what a [`Dataset`](super::Dataset) made
/// without a shape holds.
impl Default for ImageShape {
    fn default() -> Self {
        ImageShape::GREY_28
    }
}

impl fmt::Display for ImageShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}×{}×{}", self.channels, self.height, self.width)
    }
}

/// A data set by name (`--dataset`, the TOML's `dataset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum DatasetKind {
    /// Fashion-MNIST (Zalando): 70 000 grey 28 × 28 images of clothes, 10 classes.
    #[default]
    Fmnist,
    /// MNIST (LeCun et al.): 70 000 grey 28 × 28 hand-written digits.
    Mnist,
    /// CIFAR-10 (Krizhevsky): 60 000 colour 32 × 32 images, 10 classes.
    Cifar10,
    /// SVHN (Netzer et al.): 99 289 colour 32 × 32 crops of house-number digits.
    Svhn,
    /// CIFAR-100 (Krizhevsky): 60 000 colour 32 × 32 images, 100 fine classes.
    Cifar100,
    /// CIFAR-100 labelled by its 20 coarse classes (superclasses of five fine classes each).
    #[serde(rename = "cifar100-coarse")]
    Cifar100Coarse,
    /// FEMNIST (LEAF): EMNIST's digits and letters, 62 classes, grouped by writer.
    Femnist,
}

impl DatasetKind {
    /// Every kind, in `--help` order.
    pub const ALL: [DatasetKind; 7] = [
        DatasetKind::Fmnist,
        DatasetKind::Mnist,
        DatasetKind::Cifar10,
        DatasetKind::Cifar100,
        DatasetKind::Cifar100Coarse,
        DatasetKind::Svhn,
        DatasetKind::Femnist,
    ];

    /// Its description.
    pub fn info(self) -> &'static DatasetInfo {
        match self {
            DatasetKind::Fmnist => &FMNIST,
            DatasetKind::Mnist => &MNIST,
            DatasetKind::Cifar10 => &CIFAR10,
            DatasetKind::Svhn => &SVHN,
            DatasetKind::Cifar100 => &CIFAR100,
            DatasetKind::Cifar100Coarse => &CIFAR100_COARSE,
            DatasetKind::Femnist => &FEMNIST,
        }
    }

    /// Whether its files say who wrote each sample (FEMNIST), which the `writers` partition
    /// needs.
    pub fn has_writers(self) -> bool {
        self == DatasetKind::Femnist
    }
}

impl fmt::Display for DatasetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.info().key)
    }
}

/// `--dataset`'s help, every name from [`DatasetKind::ALL`] (the flags of every command take it).
pub fn dataset_flag_help() -> String {
    let names: Vec<&str> = DatasetKind::ALL.iter().map(|k| k.info().key).collect();
    format!("The data set: {}", names.join(" | "))
}

/// `--data`'s help: what the directory holds for each data set.
pub fn data_flag_help() -> String {
    let mut help = String::from(
        "The data set's directory, needed for all but fmnist (which without it is looked for in \
         $EDGECFL_FMNIST_DIR, Debian's package, then the bundled subset).",
    );
    for k in DatasetKind::ALL {
        help.push_str(&format!(" {}: {}.", k.info().key, k.info().layout));
    }
    help
}

/// An unknown `--dataset` name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown data set {0:?} (expected fmnist, mnist, cifar10, cifar100, cifar100-coarse, svhn or femnist)"
)]
pub struct UnknownDataset(pub String);

impl FromStr for DatasetKind {
    type Err = UnknownDataset;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let key = s.to_ascii_lowercase().replace(['-', '_'], "");
        DatasetKind::ALL
            .into_iter()
            .find(|k| {
                k.info().key.replace('-', "") == key || k.info().aliases.contains(&key.as_str())
            })
            .ok_or_else(|| UnknownDataset(s.to_string()))
    }
}

/// What the product needs to know of a data set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetInfo {
    /// `--dataset` name.
    pub key: &'static str,
    /// Other accepted spellings (lower case, without `-` and `_`).
    pub aliases: &'static [&'static str],
    /// Its usual name, for messages.
    pub name: &'static str,
    /// One image.
    pub shape: ImageShape,
    /// The class names, indexed by label.
    pub class_names: &'static [&'static str],
    /// What `--data DIR` must hold, for error messages.
    pub layout: &'static str,
}

impl DatasetInfo {
    /// Number of classes.
    pub fn classes(&self) -> usize {
        self.class_names.len()
    }
}

/// Fashion-MNIST.
pub static FMNIST: DatasetInfo = DatasetInfo {
    key: "fmnist",
    aliases: &["fashionmnist"],
    name: "Fashion-MNIST",
    shape: ImageShape::GREY_28,
    class_names: &[
        "T-shirt/top",
        "Trouser",
        "Pullover",
        "Dress",
        "Coat",
        "Sandal",
        "Shirt",
        "Sneaker",
        "Bag",
        "Ankle boot",
    ],
    layout: "the four IDX files train-images-idx3-ubyte, train-labels-idx1-ubyte, \
             t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (plain or .gz)",
};

/// MNIST.
pub static MNIST: DatasetInfo = DatasetInfo {
    key: "mnist",
    aliases: &[],
    name: "MNIST",
    shape: ImageShape::GREY_28,
    class_names: &["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"],
    layout: "the four IDX files train-images-idx3-ubyte, train-labels-idx1-ubyte, \
             t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (plain or .gz)",
};

/// CIFAR-10 (class order of the official `batches.meta.txt`).
pub static CIFAR10: DatasetInfo = DatasetInfo {
    key: "cifar10",
    aliases: &[],
    name: "CIFAR-10",
    shape: ImageShape::RGB_32,
    class_names: &[
        "airplane",
        "automobile",
        "bird",
        "cat",
        "deer",
        "dog",
        "frog",
        "horse",
        "ship",
        "truck",
    ],
    layout: "the binary version's data_batch_1.bin..data_batch_5.bin and test_batch.bin (in DIR or \
             DIR/cifar-10-batches-bin), the python version's data_batch_1..data_batch_5 and \
             test_batch (in DIR or DIR/cifar-10-batches-py, as torchvision downloads it), or an \
             image folder DIR/train/<class>/*.png|jpg and \
             DIR/test/<class>/*",
};

/// CIFAR-100's layouts, for messages.
const CIFAR100_LAYOUT: &str = "the binary version's train.bin and test.bin (in DIR or \
     DIR/cifar-100-binary), the python version's train and test (in DIR or DIR/cifar-100-python, \
     as torchvision downloads it), or an image folder DIR/train/<class>/*.png|jpg and \
     DIR/test/<class>/*";

/// CIFAR-100 with its fine labels (the order of the official `fine_label_names.txt`).
pub static CIFAR100: DatasetInfo = DatasetInfo {
    key: "cifar100",
    aliases: &["cifar100fine"],
    name: "CIFAR-100",
    shape: ImageShape::RGB_32,
    class_names: &[
        "apple",
        "aquarium_fish",
        "baby",
        "bear",
        "beaver",
        "bed",
        "bee",
        "beetle",
        "bicycle",
        "bottle",
        "bowl",
        "boy",
        "bridge",
        "bus",
        "butterfly",
        "camel",
        "can",
        "castle",
        "caterpillar",
        "cattle",
        "chair",
        "chimpanzee",
        "clock",
        "cloud",
        "cockroach",
        "couch",
        "crab",
        "crocodile",
        "cup",
        "dinosaur",
        "dolphin",
        "elephant",
        "flatfish",
        "forest",
        "fox",
        "girl",
        "hamster",
        "house",
        "kangaroo",
        "keyboard",
        "lamp",
        "lawn_mower",
        "leopard",
        "lion",
        "lizard",
        "lobster",
        "man",
        "maple_tree",
        "motorcycle",
        "mountain",
        "mouse",
        "mushroom",
        "oak_tree",
        "orange",
        "orchid",
        "otter",
        "palm_tree",
        "pear",
        "pickup_truck",
        "pine_tree",
        "plain",
        "plate",
        "poppy",
        "porcupine",
        "possum",
        "rabbit",
        "raccoon",
        "ray",
        "road",
        "rocket",
        "rose",
        "sea",
        "seal",
        "shark",
        "shrew",
        "skunk",
        "skyscraper",
        "snail",
        "snake",
        "spider",
        "squirrel",
        "streetcar",
        "sunflower",
        "sweet_pepper",
        "table",
        "tank",
        "telephone",
        "television",
        "tiger",
        "tractor",
        "train",
        "trout",
        "tulip",
        "turtle",
        "wardrobe",
        "whale",
        "willow_tree",
        "wolf",
        "woman",
        "worm",
    ],
    layout: CIFAR100_LAYOUT,
};

/// CIFAR-100 with its coarse labels (the order of the official `coarse_label_names.txt`).
pub static CIFAR100_COARSE: DatasetInfo = DatasetInfo {
    key: "cifar100-coarse",
    aliases: &[],
    name: "CIFAR-100 (coarse labels)",
    shape: ImageShape::RGB_32,
    class_names: &[
        "aquatic_mammals",
        "fish",
        "flowers",
        "food_containers",
        "fruit_and_vegetables",
        "household_electrical_devices",
        "household_furniture",
        "insects",
        "large_carnivores",
        "large_man-made_outdoor_things",
        "large_natural_outdoor_scenes",
        "large_omnivores_and_herbivores",
        "medium_mammals",
        "non-insect_invertebrates",
        "people",
        "reptiles",
        "small_mammals",
        "trees",
        "vehicles_1",
        "vehicles_2",
    ],
    layout: CIFAR100_LAYOUT,
};

/// SVHN's cropped digits (labels 0-9 are the digits; the files' 10 is read as 0).
pub static SVHN: DatasetInfo = DatasetInfo {
    key: "svhn",
    aliases: &[],
    name: "SVHN",
    shape: ImageShape::RGB_32,
    class_names: &["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"],
    layout: "the cropped digits' train_32x32.mat and test_32x32.mat (MATLAB files, as \
             ufldl.stanford.edu/housenumbers gives them)",
};

/// FEMNIST's 62 classes in LEAF's label order: the digits, the capitals, the small letters.
pub static FEMNIST: DatasetInfo = DatasetInfo {
    key: "femnist",
    aliases: &[],
    name: "FEMNIST",
    shape: ImageShape::GREY_28,
    class_names: &[
        "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "A", "B", "C", "D", "E", "F", "G", "H",
        "I", "J", "K", "L", "M", "N", "O", "P", "Q", "R", "S", "T", "U", "V", "W", "X", "Y", "Z",
        "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r",
        "s", "t", "u", "v", "w", "x", "y", "z",
    ],
    layout: "LEAF's JSON files train/*.json and test/*.json (the folder LEAF's preprocess.sh \
             writes, data/femnist/data)",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_shapes_are_the_papers() {
        for k in DatasetKind::ALL {
            assert_eq!(k.to_string().parse::<DatasetKind>().unwrap(), k);
            let classes = match k {
                DatasetKind::Cifar100 => 100,
                DatasetKind::Cifar100Coarse => 20,
                DatasetKind::Femnist => 62,
                _ => 10,
            };
            assert_eq!(k.info().classes(), classes, "{k}");
            // The TOML's spelling is the flag's.
            let toml = serde_json::to_string(&k).unwrap();
            assert_eq!(toml, format!("\"{k}\""));
        }
        assert_eq!(
            "CIFAR-100".parse::<DatasetKind>().unwrap(),
            DatasetKind::Cifar100
        );
        assert_eq!(
            "cifar100_coarse".parse::<DatasetKind>().unwrap(),
            DatasetKind::Cifar100Coarse
        );
        // Every class name once (the fine list is the official 100).
        for k in [
            DatasetKind::Cifar100,
            DatasetKind::Cifar100Coarse,
            DatasetKind::Femnist,
        ] {
            let mut names = k.info().class_names.to_vec();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), k.info().classes());
        }
        assert_eq!(
            "Fashion-MNIST".parse::<DatasetKind>().unwrap(),
            DatasetKind::Fmnist
        );
        assert_eq!(
            "CIFAR-10".parse::<DatasetKind>().unwrap(),
            DatasetKind::Cifar10
        );
        assert!("cifar".parse::<DatasetKind>().is_err());
        assert_eq!(DatasetKind::Cifar10.info().shape.pixels(), 3072);
        assert_eq!(DatasetKind::Mnist.info().shape.pixels(), 784);
        assert_eq!(ImageShape::RGB_32.to_string(), "3×32×32");
    }
}
