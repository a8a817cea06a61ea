//! What every reader returns: labelled images of one shape ([`Dataset`]), a data set's training
//! and test sets ([`Splits`]), and the one error type of loading ([`DataError`]).

use std::fmt;
use std::path::PathBuf;

use super::catalog::{DatasetKind, ImageShape};

/// Errors from loading a data set. Every variant that comes from a file names it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// The data directory does not exist.
    #[error("{} directory {} does not exist: {}", dataset.info().name, path.display(), hint(*dataset))]
    MissingDir {
        /// The directory that was looked up.
        path: PathBuf,
        /// The data set it was to hold.
        dataset: DatasetKind,
    },
    /// A required file is missing from the data directory.
    #[error("{} file {} not found: {}", dataset.info().name, path.display(), hint(*dataset))]
    MissingFile {
        /// The path of the missing file (for IDX files, without `.gz`).
        path: PathBuf,
        /// The data set it belongs to.
        dataset: DatasetKind,
    },
    /// The data set has no default location: `--data DIR` is needed.
    #[error("{} needs --data DIR with {}", dataset.info().name, dataset.info().layout)]
    NeedsDir {
        /// The data set.
        dataset: DatasetKind,
    },
    /// An IDX file could not be read or is malformed.
    #[error(transparent)]
    Idx(#[from] super::idx::IdxError),
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A file is not in the format its name says (wrong length, magic, header, or an image that
    /// does not decode).
    #[error("{}: {reason}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong, in words.
        reason: String,
    },
    /// The images are not the data set's size.
    #[error("{}: images are {got}, {} needs {expected}", path.display(), dataset.info().name)]
    WrongImageSize {
        /// The image file.
        path: PathBuf,
        /// The data set.
        dataset: DatasetKind,
        /// The size the data set's images have.
        expected: ImageShape,
        /// The size found.
        got: ImageShape,
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
    /// A label is not below the number of classes.
    #[error("{}: label {label} of sample {index} is not in 0..{classes}", path.display())]
    LabelOutOfRange {
        /// The label file.
        path: PathBuf,
        /// The sample index.
        index: usize,
        /// The offending label.
        label: u8,
        /// The number of classes.
        classes: usize,
    },
    /// No data directory was found and the crate was built without the `bundled-data` feature.
    #[error(
        "no Fashion-MNIST data: built without the `bundled-data` feature; {}",
        hint(DatasetKind::Fmnist)
    )]
    NoBundledData,
}

/// What to do about missing files of `dataset`.
fn hint(dataset: DatasetKind) -> String {
    match dataset {
        DatasetKind::Fmnist => {
            "install the Debian package `dataset-fashion-mnist` (it puts the files \
                                in /usr/share/datasets/fashion-mnist) or pass --data DIR with the \
                                four IDX files"
                .to_string()
        }
        other => format!("pass --data DIR with {}", other.info().layout),
    }
}

/// A set of labelled images of one [`ImageShape`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dataset {
    /// `len() × shape.pixels()` bytes, image after image, each `C × H × W` (channel after
    /// channel, each row-major).
    pub images: Vec<u8>,
    /// One label per image, below the data set's number of classes.
    pub labels: Vec<u8>,
    /// The shape of every image.
    pub shape: ImageShape,
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

    /// The pixels of image `i`.
    ///
    /// # Panics
    ///
    /// If `i` is out of range, like slice indexing.
    pub fn image(&self, i: usize) -> &[u8] {
        let n = self.shape.pixels();
        &self.images[i * n..(i + 1) * n]
    }

    /// A new dataset holding the samples at `indices`, in that order (repeats allowed).
    ///
    /// # Panics
    ///
    /// If an index is out of range, like slice indexing.
    pub fn select(&self, indices: &[usize]) -> Dataset {
        let mut images = Vec::with_capacity(indices.len() * self.shape.pixels());
        let mut labels = Vec::with_capacity(indices.len());
        for &i in indices {
            images.extend_from_slice(self.image(i));
            labels.push(self.labels[i]);
        }
        Dataset {
            images,
            labels,
            shape: self.shape,
        }
    }

    /// The number of samples of each label in `0..classes`; larger labels are not counted
    /// (loading never produces them).
    pub fn label_counts(&self, classes: usize) -> Vec<usize> {
        let mut counts = vec![0; classes];
        for &l in &self.labels {
            if let Some(c) = counts.get_mut(l as usize) {
                *c += 1;
            }
        }
        counts
    }
}

/// Training images per class in the bundled Fashion-MNIST subset ([`DataSource::Bundled`]).
pub const BUNDLED_TRAIN_PER_CLASS: usize = 300;
/// Test images per class in the bundled Fashion-MNIST subset.
pub const BUNDLED_TEST_PER_CLASS: usize = 100;

/// Where a data set was loaded from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataSource {
    /// Files in this directory.
    Dir(PathBuf),
    /// Fashion-MNIST's subset compiled into the crate (feature `bundled-data`).
    Bundled,
}

impl fmt::Display for DataSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataSource::Dir(p) => write!(f, "{}", p.display()),
            DataSource::Bundled => write!(
                f,
                "bundled subset ({BUNDLED_TRAIN_PER_CLASS} train + {BUNDLED_TEST_PER_CLASS} test \
                 images per class)"
            ),
        }
    }
}

/// A data set's training and test sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Splits {
    /// Which data set.
    pub kind: DatasetKind,
    /// The training set.
    pub train: Dataset,
    /// The test set.
    pub test: Dataset,
    /// Where the data came from.
    pub source: DataSource,
    /// Who wrote each sample, for the data sets whose files say so (FEMNIST); `None` otherwise.
    pub writers: Option<super::femnist::Writers>,
}

/// Every label below `classes`.
/// [`DataError::MissingFile`] when `source` says `path` (a file of `dataset`) is not there, else
/// [`DataError::Io`].
pub(crate) fn io_error(
    path: &std::path::Path,
    dataset: DatasetKind,
    source: std::io::Error,
) -> DataError {
    match source.kind() {
        std::io::ErrorKind::NotFound => DataError::MissingFile {
            path: path.to_path_buf(),
            dataset,
        },
        _ => DataError::Io {
            path: path.to_path_buf(),
            source,
        },
    }
}

/// The bytes of `path`, a file of `dataset` ([`io_error`] when it cannot be read).
pub(crate) fn read_file(
    path: &std::path::Path,
    dataset: DatasetKind,
) -> Result<Vec<u8>, DataError> {
    std::fs::read(path).map_err(|e| io_error(path, dataset, e))
}

pub(crate) fn check_labels(
    labels: Vec<u8>,
    classes: usize,
    path: &std::path::Path,
) -> Result<Vec<u8>, DataError> {
    if let Some((index, &label)) = labels
        .iter()
        .enumerate()
        .find(|&(_, &l)| l as usize >= classes)
    {
        return Err(DataError::LabelOutOfRange {
            path: path.to_path_buf(),
            index,
            label,
            classes,
        });
    }
    Ok(labels)
}
