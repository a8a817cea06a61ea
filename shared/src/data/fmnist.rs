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
//! [`FashionMnistLabels`] follows the same rule but reads only the labels (70 kB); its
//! [`select_train`](FashionMnistLabels::select_train) / [`select_test`](FashionMnistLabels::select_test)
//! then stream the image files once and keep only the images asked for, so a client that holds a
//! shard never holds the 55 MB of the full images (issue 13, the edge client's footprint).
//!
//! Fashion-MNIST is © 2017 Zalando SE, released under the MIT licence
//! (<https://github.com/zalandoresearch/fashion-mnist>).

use std::path::{Path, PathBuf};

use super::catalog::{DatasetKind, ImageShape};
use super::dataset::{DataError, DataSource, Dataset, Splits, check_labels};
use super::idx;
use super::spill::SpillFile;

/// Rows of a Fashion-MNIST image.
pub const IMAGE_ROWS: usize = 28;
/// Columns of a Fashion-MNIST image.
pub const IMAGE_COLS: usize = 28;
/// Pixels of a Fashion-MNIST image (28 × 28 = 784).
pub const IMAGE_SIZE: usize = IMAGE_ROWS * IMAGE_COLS;
/// Number of classes.
pub const NUM_CLASSES: usize = 10;

/// Environment variable naming a directory with the Fashion-MNIST IDX files.
pub const ENV_DIR: &str = "EDGECFL_FMNIST_DIR";

/// Where the Debian package `dataset-fashion-mnist` installs the dataset (four `.gz` IDX files).
pub const SYSTEM_DIR: &str = "/usr/share/datasets/fashion-mnist";

pub use super::dataset::{BUNDLED_TEST_PER_CLASS, BUNDLED_TRAIN_PER_CLASS};

/// Standard file names, without the optional `.gz`.
const TRAIN_IMAGES: &str = "train-images-idx3-ubyte";
const TRAIN_LABELS: &str = "train-labels-idx1-ubyte";
const TEST_IMAGES: &str = "t10k-images-idx3-ubyte";
const TEST_LABELS: &str = "t10k-labels-idx1-ubyte";

/// Fashion-MNIST's reader: [`FashionMnist::load`] finds the files by the rule of the
/// [module docs](self).
#[derive(Debug, Clone, Copy)]
pub struct FashionMnist;

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
    pub fn load(dir: Option<&Path>) -> Result<Splits, DataError> {
        match resolve(dir) {
            Some(dir) => Self::load_dir(&dir),
            None => Self::bundled(),
        }
    }

    /// Loads Fashion-MNIST from the four standard IDX files (plain or `.gz`) in `dir`.
    ///
    /// # Errors
    ///
    /// As for [`FashionMnist::load`], never [`DataError::NoBundledData`].
    pub fn load_dir(dir: &Path) -> Result<Splits, DataError> {
        load_idx_dir(dir, DatasetKind::Fmnist)
    }

    /// The subset bundled with the crate: the first 300 training images and the first 100 test
    /// images of each class, in file order (see `shared/data/fmnist-subset/README.md`).
    ///
    /// # Errors
    ///
    /// [`DataError::NoBundledData`] if the crate was built without the `bundled-data` feature.
    pub fn bundled() -> Result<Splits, DataError> {
        bundled::load()
    }
}

/// The directory [`FashionMnist::load`]'s rule picks: `dir`, else [`ENV_DIR`], else
/// [`SYSTEM_DIR`] if it exists; `None` for the bundled subset.
fn resolve(dir: Option<&Path>) -> Option<PathBuf> {
    if let Some(dir) = dir {
        return Some(dir.to_path_buf());
    }
    if let Some(env) = std::env::var_os(ENV_DIR).filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(env));
    }
    let system = Path::new(SYSTEM_DIR);
    system.is_dir().then(|| system.to_path_buf())
}

/// Loads `kind` (Fashion-MNIST or MNIST, which share the layout) from the four IDX files in
/// `dir`.
pub(crate) fn load_idx_dir(dir: &Path, kind: DatasetKind) -> Result<Splits, DataError> {
    if !dir.is_dir() {
        return Err(DataError::MissingDir {
            path: dir.to_path_buf(),
            dataset: kind,
        });
    }
    let train = load_split(dir, kind, TRAIN_IMAGES, TRAIN_LABELS)?;
    let test = load_split(dir, kind, TEST_IMAGES, TEST_LABELS)?;
    Ok(Splits {
        kind,
        train,
        test,
        source: DataSource::Dir(dir.to_path_buf()),
        writers: None,
    })
}

/// Fashion-MNIST's labels, and where its images are: the first step of loading only part of it.
///
/// [`FashionMnistLabels::load`] finds the data by [`FashionMnist::load`]'s rule and reads the
/// two label files (60,000 + 10,000 bytes); the caller picks samples from the labels (e.g. one
/// shard of a [`partition`](crate::data::partition::partition())), then
/// [`select_train`](Self::select_train) / [`select_test`](Self::select_test) stream the image
/// file once and keep only those images. The result equals [`Dataset::select`] on
/// [`FashionMnist::load`]'s data, byte for byte, while memory holds only the selected images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FashionMnistLabels {
    /// The training labels, one per training image, each in `0..10`.
    pub train: Vec<u8>,
    /// The test labels, each in `0..10`.
    pub test: Vec<u8>,
    /// Where the data come from.
    pub source: DataSource,
    /// Fashion-MNIST or MNIST.
    kind: DatasetKind,
    /// The image files (`None`: the bundled subset).
    images: Option<[PathBuf; 2]>,
}

impl FashionMnistLabels {
    /// Reads the labels of the data [`FashionMnist::load`] would load, by the same rule.
    ///
    /// # Errors
    ///
    /// As for [`FashionMnist::load`]; the image files must exist (their content is read and
    /// checked by the `select_*` methods).
    pub fn load(dir: Option<&Path>) -> Result<FashionMnistLabels, DataError> {
        match resolve(dir) {
            Some(dir) => Self::load_dir(&dir),
            None => Self::bundled(),
        }
    }

    /// Reads the labels from the standard IDX files (plain or `.gz`) in `dir`.
    ///
    /// # Errors
    ///
    /// As for [`FashionMnist::load_dir`].
    pub fn load_dir(dir: &Path) -> Result<FashionMnistLabels, DataError> {
        Self::load_idx_dir(dir, DatasetKind::Fmnist)
    }

    /// Reads the labels of `kind` (Fashion-MNIST or MNIST, which share the layout) from the four
    /// IDX files in `dir`.
    ///
    /// # Errors
    ///
    /// As for [`FashionMnist::load_dir`].
    pub fn load_idx_dir(dir: &Path, kind: DatasetKind) -> Result<FashionMnistLabels, DataError> {
        if !dir.is_dir() {
            return Err(DataError::MissingDir {
                path: dir.to_path_buf(),
                dataset: kind,
            });
        }
        let train_images = find(dir, kind, TRAIN_IMAGES)?;
        let train_labels = find(dir, kind, TRAIN_LABELS)?;
        let test_images = find(dir, kind, TEST_IMAGES)?;
        let test_labels = find(dir, kind, TEST_LABELS)?;
        Ok(FashionMnistLabels {
            train: check_labels(idx::read_labels(&train_labels)?, NUM_CLASSES, &train_labels)?,
            test: check_labels(idx::read_labels(&test_labels)?, NUM_CLASSES, &test_labels)?,
            source: DataSource::Dir(dir.to_path_buf()),
            kind,
            images: Some([train_images, test_images]),
        })
    }

    /// The labels of the bundled subset ([`FashionMnist::bundled`]).
    ///
    /// # Errors
    ///
    /// [`DataError::NoBundledData`] without the `bundled-data` feature.
    pub fn bundled() -> Result<FashionMnistLabels, DataError> {
        let labels = |name: &str| -> Result<Vec<u8>, DataError> {
            let path = bundled_path(name);
            check_labels(
                idx::decode_labels(bundled::file(name)?, &path)?,
                NUM_CLASSES,
                &path,
            )
        };
        Ok(FashionMnistLabels {
            train: labels(TRAIN_LABELS)?,
            test: labels(TEST_LABELS)?,
            source: DataSource::Bundled,
            kind: DatasetKind::Fmnist,
            images: None,
        })
    }

    /// The training samples at `indices`, in that order (repeats allowed), reading only those
    /// images: equal to `FashionMnist::load(..)?.train.select(indices)`.
    ///
    /// # Errors
    ///
    /// [`DataError::Idx`] if the image file is malformed or an index is out of range
    /// ([`IdxError::IndexOutOfRange`](super::idx::IdxError::IndexOutOfRange)), [`DataError::WrongImageSize`] /
    /// [`DataError::CountMismatch`] as for [`FashionMnist::load`].
    pub fn select_train(&self, indices: &[usize]) -> Result<Dataset, DataError> {
        self.select(0, &self.train, indices, None)
    }

    /// [`select_train`](Self::select_train), writing the images to `file` instead of memory
    /// (image `p` of `indices` at byte `p × 784`, see
    /// [`idx::decode_images_selected_to`]): the returned dataset has the labels and no images.
    ///
    /// # Errors
    ///
    /// As for [`select_train`](Self::select_train); a failed write is [`DataError::Idx`].
    pub fn select_train_to(
        &self,
        indices: &[usize],
        file: &SpillFile,
    ) -> Result<Dataset, DataError> {
        self.select(0, &self.train, indices, Some(file))
    }

    /// The test samples at `indices`, in that order; as [`select_train`](Self::select_train).
    ///
    /// # Errors
    ///
    /// As for [`select_train`](Self::select_train).
    pub fn select_test(&self, indices: &[usize]) -> Result<Dataset, DataError> {
        self.select(1, &self.test, indices, None)
    }

    fn select(
        &self,
        split: usize,
        labels: &[u8],
        indices: &[usize],
        to: Option<&SpillFile>,
    ) -> Result<Dataset, DataError> {
        let (img, path) = match &self.images {
            Some(paths) => {
                let path = &paths[split];
                // The header first: a wrong shape or count is reported as such, before any
                // index is checked against the image count.
                let (count, rows, cols) = idx::read_images_header(path)?;
                check_shape(
                    self.kind,
                    count,
                    rows,
                    cols,
                    labels.len(),
                    path,
                    &self.label_path(split),
                )?;
                let img = match to {
                    None => idx::read_images_selected(path, indices)?,
                    Some(file) => idx::read_images_selected_to(path, indices, file)?,
                };
                (img, path.clone())
            }
            None => {
                let name = [TRAIN_IMAGES, TEST_IMAGES][split];
                let path = bundled_path(name);
                let img = match to {
                    None => idx::decode_images_selected(bundled::file(name)?, &path, indices)?,
                    Some(file) => {
                        idx::decode_images_selected_to(bundled::file(name)?, &path, indices, file)?
                    }
                };
                (img, path)
            }
        };
        check_shape(
            self.kind,
            img.count,
            img.rows,
            img.cols,
            labels.len(),
            &path,
            &self.label_path(split),
        )?;
        Ok(Dataset {
            images: img.pixels,
            labels: indices.iter().map(|&i| labels[i]).collect(),
            shape: ImageShape::GREY_28,
        })
    }

    /// The label file of a split, for errors.
    fn label_path(&self, split: usize) -> PathBuf {
        let name = [TRAIN_LABELS, TEST_LABELS][split];
        match (&self.source, &self.images) {
            (DataSource::Dir(dir), Some(_)) => dir.join(name),
            _ => bundled_path(name),
        }
    }
}

/// Finds `dir/name`, else `dir/name.gz`.
fn find(dir: &Path, kind: DatasetKind, name: &str) -> Result<PathBuf, DataError> {
    let plain = dir.join(name);
    if plain.is_file() {
        return Ok(plain);
    }
    let gz = dir.join(format!("{name}.gz"));
    if gz.is_file() {
        return Ok(gz);
    }
    Err(DataError::MissingFile {
        path: plain,
        dataset: kind,
    })
}

fn load_split(
    dir: &Path,
    kind: DatasetKind,
    images: &str,
    labels: &str,
) -> Result<Dataset, DataError> {
    let images = find(dir, kind, images)?;
    let labels = find(dir, kind, labels)?;
    let img = idx::read_images(&images)?;
    let lab = idx::read_labels(&labels)?;
    check(kind, img, lab, &images, &labels)
}

/// Checks shape, counts and label range; builds the dataset.
fn check(
    kind: DatasetKind,
    img: idx::IdxImages,
    labels: Vec<u8>,
    images_path: &Path,
    labels_path: &Path,
) -> Result<Dataset, DataError> {
    check_shape(
        kind,
        img.count,
        img.rows,
        img.cols,
        labels.len(),
        images_path,
        labels_path,
    )?;
    Ok(Dataset {
        images: img.pixels,
        labels: check_labels(labels, NUM_CLASSES, labels_path)?,
        shape: ImageShape::GREY_28,
    })
}

/// 28 × 28 images, as many as labels.
fn check_shape(
    kind: DatasetKind,
    count: usize,
    rows: usize,
    cols: usize,
    n_labels: usize,
    images_path: &Path,
    labels_path: &Path,
) -> Result<(), DataError> {
    if rows != IMAGE_ROWS || cols != IMAGE_COLS {
        return Err(DataError::WrongImageSize {
            path: images_path.to_path_buf(),
            dataset: kind,
            expected: ImageShape::GREY_28,
            got: ImageShape::new(1, rows, cols),
        });
    }
    if count != n_labels {
        return Err(DataError::CountMismatch {
            images: images_path.to_path_buf(),
            labels: labels_path.to_path_buf(),
            n_images: count,
            n_labels,
        });
    }
    Ok(())
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

    /// The compiled-in (gzip'd) file of a standard name.
    pub(super) fn file(name: &str) -> Result<&'static [u8], DataError> {
        Ok(match name {
            TRAIN_IMAGES => TRAIN_IMAGES_GZ,
            TRAIN_LABELS => TRAIN_LABELS_GZ,
            TEST_IMAGES => TEST_IMAGES_GZ,
            _ => TEST_LABELS_GZ,
        })
    }

    fn split(image_name: &str, label_name: &str) -> Result<Dataset, DataError> {
        let images_path = bundled_path(image_name);
        let labels_path = bundled_path(label_name);
        let img = idx::decode_images(file(image_name)?, &images_path)?;
        let lab = idx::decode_labels(file(label_name)?, &labels_path)?;
        check(DatasetKind::Fmnist, img, lab, &images_path, &labels_path)
    }

    pub(super) fn load() -> Result<Splits, DataError> {
        Ok(Splits {
            kind: DatasetKind::Fmnist,
            train: split(TRAIN_IMAGES, TRAIN_LABELS)?,
            test: split(TEST_IMAGES, TEST_LABELS)?,
            source: DataSource::Bundled,
            writers: None,
        })
    }
}

#[cfg(not(feature = "bundled-data"))]
mod bundled {
    use super::*;

    pub(super) fn file(_name: &str) -> Result<&'static [u8], DataError> {
        Err(DataError::NoBundledData)
    }

    pub(super) fn load() -> Result<Splits, DataError> {
        Err(DataError::NoBundledData)
    }
}

/// How errors name a bundled file.
fn bundled_path(name: &str) -> PathBuf {
    Path::new("<bundled>").join(format!("{name}.gz"))
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::data::idx::IdxError;

    /// Indices with repeats, out of order, first and last.
    fn some_indices(len: usize) -> Vec<usize> {
        vec![len - 1, 0, 7, 7, len / 2, 1, len - 1, 3]
    }

    /// `FashionMnistLabels` gives the same labels, and the same images for the same indices, as
    /// the full loader.
    fn assert_same(full: &Splits, labels: &FashionMnistLabels) {
        assert_eq!(labels.source, full.source);
        assert_eq!(labels.train, full.train.labels);
        assert_eq!(labels.test, full.test.labels);
        for (set, select) in [
            (
                &full.train,
                FashionMnistLabels::select_train as fn(&_, &_) -> _,
            ),
            (&full.test, FashionMnistLabels::select_test),
        ] {
            let idx = some_indices(set.len());
            assert_eq!(select(labels, &idx).unwrap(), set.select(&idx));
            assert_eq!(select(labels, &[]).unwrap(), Dataset::default());
        }
        let all: Vec<usize> = (0..full.test.len()).collect();
        assert_eq!(&labels.select_test(&all).unwrap(), &full.test);
    }

    #[cfg(feature = "bundled-data")]
    #[test]
    fn selected_equals_full_on_bundled_subset() {
        let full = FashionMnist::bundled().unwrap();
        let labels = FashionMnistLabels::bundled().unwrap();
        assert_same(&full, &labels);
        let all: Vec<usize> = (0..full.train.len()).collect();
        assert_eq!(labels.select_train(&all).unwrap(), full.train);
    }

    /// On the Debian package's files (`dataset-fashion-mnist`), when installed.
    #[test]
    fn selected_equals_full_on_debian_files() {
        let dir = Path::new(SYSTEM_DIR);
        if !dir.is_dir() {
            eprintln!("skipped: {SYSTEM_DIR} not installed");
            return;
        }
        let full = FashionMnist::load_dir(dir).unwrap();
        let labels = FashionMnistLabels::load_dir(dir).unwrap();
        assert_eq!(full.train.len(), 60_000);
        assert_same(&full, &labels);
    }

    /// A directory holding the bundled subset as plain IDX, with `edit` applied to the training
    /// images.
    fn subset_dir(name: &str, edit: impl Fn(&mut Vec<u8>)) -> PathBuf {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/fmnist-subset");
        let dir =
            std::env::temp_dir().join(format!("edgecfl-fmnist-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in [TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS] {
            let gz = std::fs::read(src.join(format!("{f}.gz"))).unwrap();
            let mut plain = Vec::new();
            flate2::read::GzDecoder::new(&gz[..])
                .read_to_end(&mut plain)
                .unwrap();
            if f == TRAIN_IMAGES {
                edit(&mut plain);
            }
            std::fs::write(dir.join(f), plain).unwrap();
        }
        dir
    }

    #[test]
    fn selected_errors_are_typed() {
        // Out-of-range index.
        let dir = subset_dir("ok", |_| {});
        let labels = FashionMnistLabels::load_dir(&dir).unwrap();
        let n = labels.train.len();
        let err = labels.select_train(&[0, n]).unwrap_err();
        assert!(
            matches!(err, DataError::Idx(IdxError::IndexOutOfRange { index, count, .. }) if index == n && count == n),
            "{err}"
        );
        let err = labels.select_test(&[labels.test.len() + 5]).unwrap_err();
        assert!(
            matches!(err, DataError::Idx(IdxError::IndexOutOfRange { .. })),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();

        // Truncated image file: the labels load, selecting fails, whichever indices.
        let dir = subset_dir("cut", |v| v.truncate(v.len() - 100));
        let labels = FashionMnistLabels::load_dir(&dir).unwrap();
        for idx in [&[0usize][..], &[]] {
            let err = labels.select_train(idx).unwrap_err();
            assert!(
                matches!(err, DataError::Idx(IdxError::Truncated { .. })),
                "{err}"
            );
        }
        assert!(labels.select_test(&[0]).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();

        // One image fewer than labels (header and data): a count mismatch, not an index error.
        let dir = subset_dir("count", |v| {
            let count = u32::from_be_bytes([v[4], v[5], v[6], v[7]]) - 1;
            v[4..8].copy_from_slice(&count.to_be_bytes());
            v.truncate(v.len() - IMAGE_SIZE);
        });
        let labels = FashionMnistLabels::load_dir(&dir).unwrap();
        let err = labels.select_train(&[0]).unwrap_err();
        assert!(matches!(err, DataError::CountMismatch { .. }), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
