//! Fashion-MNIST: loading the full dataset from disk, or the subset bundled in the crate.
//!
//! [`FashionMnist::load`] looks in this order and takes the first that applies:
//!
//! 1. the directory passed by the caller (e.g. `--data DIR`): an error if it is missing or
//!    corrupt, never a silent fallback;
//! 2. the directory in the environment variable [`ENV_DIR`] (`EDGECFL_FMNIST_DIR`), same rule;
//! 3. [`SYSTEM_DIR`] (`/usr/share/datasets/fashion-mnist`, installed by the Debian package
//!    `dataset-fashion-mnist`) if that directory exists; once it exists, missing or corrupt files
//!    in it are errors;
//! 4. the bundled subset ([`FashionMnist::bundled`]): 300 training and 100 test images per class,
//!    compiled in with the default cargo feature `bundled-data`.
//!
//! In a directory the four standard file names are used, each either plain or gzip'd
//! (`train-images-idx3-ubyte` or `train-images-idx3-ubyte.gz`, and likewise
//! `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`); the plain
//! file wins when both exist. The Debian package installs the four `.gz` files.
//!
//! Fashion-MNIST is © 2017 Zalando SE, released under the MIT licence
//! (<https://github.com/zalandoresearch/fashion-mnist>).

use std::fmt;
use std::path::{Path, PathBuf};

use super::idx::{self, IdxError};

/// Rows of a Fashion-MNIST image.
pub const IMAGE_ROWS: usize = 28;
/// Columns of a Fashion-MNIST image.
pub const IMAGE_COLS: usize = 28;
/// Pixels of a Fashion-MNIST image (28 × 28 = 784).
pub const IMAGE_SIZE: usize = IMAGE_ROWS * IMAGE_COLS;
/// Number of classes.
pub const NUM_CLASSES: usize = 10;

/// The class names, indexed by label.
pub const CLASS_NAMES: [&str; NUM_CLASSES] = [
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
];

/// Environment variable naming a directory with the Fashion-MNIST IDX files.
pub const ENV_DIR: &str = "EDGECFL_FMNIST_DIR";

/// Where the Debian package `dataset-fashion-mnist` installs the dataset (four `.gz` IDX files).
pub const SYSTEM_DIR: &str = "/usr/share/datasets/fashion-mnist";

/// Training images per class in the bundled subset.
pub const BUNDLED_TRAIN_PER_CLASS: usize = 300;
/// Test images per class in the bundled subset.
pub const BUNDLED_TEST_PER_CLASS: usize = 100;

/// Standard file names, without the optional `.gz`.
const TRAIN_IMAGES: &str = "train-images-idx3-ubyte";
const TRAIN_LABELS: &str = "train-labels-idx1-ubyte";
const TEST_IMAGES: &str = "t10k-images-idx3-ubyte";
const TEST_LABELS: &str = "t10k-labels-idx1-ubyte";

const HINT: &str = "install the Debian package `dataset-fashion-mnist` (it puts the files in \
                    /usr/share/datasets/fashion-mnist) or pass --data DIR with the four IDX files";

/// Errors from loading Fashion-MNIST.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// The data directory does not exist.
    #[error("Fashion-MNIST directory {} does not exist: {HINT}", path.display())]
    MissingDir {
        /// The directory that was looked up.
        path: PathBuf,
    },
    /// A required file is missing from the data directory (neither plain nor `.gz`).
    #[error("Fashion-MNIST file {} (or {}.gz) not found: {HINT}", path.display(), path.display())]
    MissingFile {
        /// The path of the missing file, without `.gz`.
        path: PathBuf,
    },
    /// An IDX file could not be read or is malformed.
    #[error(transparent)]
    Idx(#[from] IdxError),
    /// The images are not 28 × 28.
    #[error("{}: images are {rows}x{cols}, Fashion-MNIST needs 28x28", path.display())]
    WrongImageSize {
        /// The image file.
        path: PathBuf,
        /// Rows per image in the file.
        rows: usize,
        /// Columns per image in the file.
        cols: usize,
    },
    /// The image and label files hold different numbers of samples.
    #[error(
        "{} holds {n_images} images but {} holds {n_labels} labels",
        images.display(),
        labels.display()
    )]
    CountMismatch {
        /// The image file.
        images: PathBuf,
        /// The label file.
        labels: PathBuf,
        /// Number of images.
        n_images: usize,
        /// Number of labels.
        n_labels: usize,
    },
    /// A label is not in `0..10`.
    #[error("{}: label {label} of sample {index} is not in 0..10", path.display())]
    LabelOutOfRange {
        /// The label file.
        path: PathBuf,
        /// The sample index.
        index: usize,
        /// The offending label.
        label: u8,
    },
    /// No data directory was found and the crate was built without the `bundled-data` feature.
    #[error("no Fashion-MNIST data: built without the `bundled-data` feature; {HINT}")]
    NoBundledData,
}

/// A set of labelled 28 × 28 grey-scale images.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dataset {
    /// `len() × 784` pixels, image after image, each 28 × 28 row-major (0 = background).
    pub images: Vec<u8>,
    /// One label in `0..10` per image (see [`CLASS_NAMES`]).
    pub labels: Vec<u8>,
}

impl Dataset {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether the dataset holds no samples.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The 784 pixels of image `i`, row-major.
    ///
    /// # Panics
    ///
    /// If `i` is out of range, like slice indexing.
    pub fn image(&self, i: usize) -> &[u8] {
        &self.images[i * IMAGE_SIZE..(i + 1) * IMAGE_SIZE]
    }

    /// A new dataset holding the samples at `indices`, in that order (repeats allowed).
    ///
    /// # Panics
    ///
    /// If an index is out of range, like slice indexing.
    pub fn select(&self, indices: &[usize]) -> Dataset {
        let mut images = Vec::with_capacity(indices.len() * IMAGE_SIZE);
        let mut labels = Vec::with_capacity(indices.len());
        for &i in indices {
            images.extend_from_slice(self.image(i));
            labels.push(self.labels[i]);
        }
        Dataset { images, labels }
    }

    /// The number of samples of each label. Labels outside `0..10` are not counted (loading never
    /// produces them).
    pub fn label_counts(&self) -> [usize; NUM_CLASSES] {
        let mut counts = [0; NUM_CLASSES];
        for &l in &self.labels {
            if let Some(c) = counts.get_mut(l as usize) {
                *c += 1;
            }
        }
        counts
    }
}

/// Where a [`FashionMnist`] was loaded from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataSource {
    /// IDX files in this directory.
    Dir(PathBuf),
    /// The subset compiled into the crate (feature `bundled-data`).
    Bundled,
}

impl fmt::Display for DataSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataSource::Dir(p) => write!(f, "{}", p.display()),
            DataSource::Bundled => write!(
                f,
                "bundled subset ({BUNDLED_TRAIN_PER_CLASS} train + {BUNDLED_TEST_PER_CLASS} test images per class)"
            ),
        }
    }
}

/// The Fashion-MNIST training and test sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FashionMnist {
    /// The training set (60,000 samples in full, 3,000 bundled).
    pub train: Dataset,
    /// The test set (10,000 samples in full, 1,000 bundled).
    pub test: Dataset,
    /// Where the data came from.
    pub source: DataSource,
}

impl FashionMnist {
    /// Loads Fashion-MNIST from `dir`, else [`ENV_DIR`], else [`SYSTEM_DIR`], else the bundled
    /// subset; see the [module docs](self) for the exact rule.
    ///
    /// # Errors
    ///
    /// [`DataError::MissingDir`] / [`DataError::MissingFile`] if `dir` (or the environment
    /// variable's directory) or one of its files is missing, [`DataError::Idx`] and the other
    /// variants if a file is malformed, [`DataError::NoBundledData`] if nothing was found and the
    /// subset is not compiled in.
    pub fn load(dir: Option<&Path>) -> Result<FashionMnist, DataError> {
        if let Some(dir) = dir {
            return Self::load_dir(dir);
        }
        if let Some(env) = std::env::var_os(ENV_DIR).filter(|v| !v.is_empty()) {
            return Self::load_dir(Path::new(&env));
        }
        let system = Path::new(SYSTEM_DIR);
        if system.is_dir() {
            return Self::load_dir(system);
        }
        Self::bundled()
    }

    /// Loads Fashion-MNIST from the four standard IDX files (plain or `.gz`) in `dir`.
    ///
    /// # Errors
    ///
    /// As for [`FashionMnist::load`], never [`DataError::NoBundledData`].
    pub fn load_dir(dir: &Path) -> Result<FashionMnist, DataError> {
        if !dir.is_dir() {
            return Err(DataError::MissingDir {
                path: dir.to_path_buf(),
            });
        }
        let train = load_split(dir, TRAIN_IMAGES, TRAIN_LABELS)?;
        let test = load_split(dir, TEST_IMAGES, TEST_LABELS)?;
        Ok(FashionMnist {
            train,
            test,
            source: DataSource::Dir(dir.to_path_buf()),
        })
    }

    /// The subset bundled with the crate: the first 300 training images and the first 100 test
    /// images of each class, in file order (see `shared/data/fmnist-subset/README.md`).
    ///
    /// # Errors
    ///
    /// [`DataError::NoBundledData`] if the crate was built without the `bundled-data` feature.
    pub fn bundled() -> Result<FashionMnist, DataError> {
        bundled::load()
    }
}

/// Finds `dir/name`, else `dir/name.gz`.
fn find(dir: &Path, name: &str) -> Result<PathBuf, DataError> {
    let plain = dir.join(name);
    if plain.is_file() {
        return Ok(plain);
    }
    let gz = dir.join(format!("{name}.gz"));
    if gz.is_file() {
        return Ok(gz);
    }
    Err(DataError::MissingFile { path: plain })
}

fn load_split(dir: &Path, images: &str, labels: &str) -> Result<Dataset, DataError> {
    let images = find(dir, images)?;
    let labels = find(dir, labels)?;
    let img = idx::read_images(&images)?;
    let lab = idx::read_labels(&labels)?;
    check(img, lab, &images, &labels)
}

/// Checks shape, counts and label range; builds the dataset.
fn check(
    img: idx::IdxImages,
    labels: Vec<u8>,
    images_path: &Path,
    labels_path: &Path,
) -> Result<Dataset, DataError> {
    if img.rows != IMAGE_ROWS || img.cols != IMAGE_COLS {
        return Err(DataError::WrongImageSize {
            path: images_path.to_path_buf(),
            rows: img.rows,
            cols: img.cols,
        });
    }
    if img.count != labels.len() {
        return Err(DataError::CountMismatch {
            images: images_path.to_path_buf(),
            labels: labels_path.to_path_buf(),
            n_images: img.count,
            n_labels: labels.len(),
        });
    }
    if let Some((index, &label)) = labels
        .iter()
        .enumerate()
        .find(|&(_, &l)| l as usize >= NUM_CLASSES)
    {
        return Err(DataError::LabelOutOfRange {
            path: labels_path.to_path_buf(),
            index,
            label,
        });
    }
    Ok(Dataset {
        images: img.pixels,
        labels,
    })
}

#[cfg(feature = "bundled-data")]
mod bundled {
    use super::*;

    const TRAIN_IMAGES_GZ: &[u8] =
        include_bytes!("../../data/fmnist-subset/train-images-idx3-ubyte.gz");
    const TRAIN_LABELS_GZ: &[u8] =
        include_bytes!("../../data/fmnist-subset/train-labels-idx1-ubyte.gz");
    const TEST_IMAGES_GZ: &[u8] =
        include_bytes!("../../data/fmnist-subset/t10k-images-idx3-ubyte.gz");
    const TEST_LABELS_GZ: &[u8] =
        include_bytes!("../../data/fmnist-subset/t10k-labels-idx1-ubyte.gz");

    fn split(
        images: &[u8],
        image_name: &str,
        labels: &[u8],
        label_name: &str,
    ) -> Result<Dataset, DataError> {
        let images_path = Path::new("<bundled>").join(format!("{image_name}.gz"));
        let labels_path = Path::new("<bundled>").join(format!("{label_name}.gz"));
        let img = idx::decode_images(images, &images_path)?;
        let lab = idx::decode_labels(labels, &labels_path)?;
        check(img, lab, &images_path, &labels_path)
    }

    pub(super) fn load() -> Result<FashionMnist, DataError> {
        Ok(FashionMnist {
            train: split(TRAIN_IMAGES_GZ, TRAIN_IMAGES, TRAIN_LABELS_GZ, TRAIN_LABELS)?,
            test: split(TEST_IMAGES_GZ, TEST_IMAGES, TEST_LABELS_GZ, TEST_LABELS)?,
            source: DataSource::Bundled,
        })
    }
}

#[cfg(not(feature = "bundled-data"))]
mod bundled {
    use super::*;

    pub(super) fn load() -> Result<FashionMnist, DataError> {
        Err(DataError::NoBundledData)
    }
}
