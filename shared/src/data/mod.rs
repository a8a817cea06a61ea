//! Data: the data sets and their readers, the bundled Fashion-MNIST subset and the NIID-Bench
//! partitions.
//!
//! | module | what it holds |
//! | --- | --- |
//! | [`catalog`] | [`DatasetKind`] (`--dataset fmnist\|mnist\|cifar10\|cifar100\|cifar100-coarse\|svhn`), each one's [`DatasetInfo`] (image shape, classes); [`load`] (here) reads one |
//! | [`dataset`] | [`Dataset`] (labelled images of one [`ImageShape`]), [`Splits`] (train and test), [`DataError`] |
//! | [`cifar`] | CIFAR-10's and CIFAR-100's official binary versions and their pickled python versions |
//! | [`pickle`] | reading the pickles of data sets (dicts, lists, NumPy arrays) without evaluating them |
//! | [`folder`] | the image-folder layout (`train/<class>/*.png\|jpg`) |
//! | [`svhn`] | SVHN's cropped digits (`train_32x32.mat`, `test_32x32.mat`) |
//! | [`femnist`] | FEMNIST in LEAF's JSON layout (`train/*.json`, `test/*.json`) and its [`Writers`] |
//! | [`mat`] | reading MATLAB Level 5 MAT-files' numeric arrays (compressed or not) |
//! | [`idx`] | reading IDX files (plain or gzip'd) with exact magic and length checks; [`idx::read_images_selected`] streams an image file keeping only chosen images |
//! | [`fmnist`] | the four IDX files of Fashion-MNIST and MNIST; [`FashionMnist`]: loading from `--data DIR`, `EDGECFL_FMNIST_DIR`, the Debian package's `/usr/share/datasets/fashion-mnist`, or the bundled subset (300 train + 100 test images per class); [`FashionMnistLabels`]: the labels first, then only the images a client keeps |
//! | [`shards`] | [`DataLabels`](shards::DataLabels): any data set's labels first, then only the images a client keeps |
//! | [`spill`] | [`SpillFile`](spill::SpillFile): an anonymous scratch file that holds a client's training images when they are too many to keep in memory |
//! | [`partition`](mod@partition) | [`PartitionSpec`] (`iid`, `label:K`, `dir:BETA`, `groups:…`, `rotate:G`, `shift:G`, `rotate:R*BASE`, `dominant:ALPHA`, `pairs`, `tasks:fmnist3`, `writers`), [`partition()`](partition::partition), local test sets, image rotation, label shifts |
//!
//! A typical use:
//!
//! ```no_run
//! use edgecfl_shared::data::{FashionMnist, PartitionSpec, client_datasets, partition};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let data = FashionMnist::load(None)?;
//! let spec: PartitionSpec = "label:2".parse()?;
//! let parts = partition(&spec, &data.train.labels, 100, 42)?;
//! let (train, local_test) = client_datasets(&data, &parts.clients[0])?;
//! println!("client 0: {} train, {} test samples from {}", train.len(), local_test.len(), data.source);
//! # Ok(())
//! # }
//! ```

pub mod catalog;
pub mod cifar;
pub mod dataset;
pub mod femnist;
pub mod fmnist;
pub mod folder;
pub mod idx;
pub mod mat;
pub mod partition;
pub mod pickle;
pub mod shards;
pub mod spill;
pub mod svhn;

pub use catalog::{DatasetInfo, DatasetKind, ImageShape};
pub use dataset::{DataError, DataSource, Dataset, Splits};
pub use femnist::Writers;
pub use fmnist::{FashionMnist, FashionMnistLabels};
pub use idx::IdxError;
pub use partition::{
    ClientShard, DOMINANT_CLASSES, FMNIST3_TASKS, Partition, PartitionError, PartitionSpec,
    SpecError, client_datasets, local_test_indices, partition, partition_of, rotate_image,
    shift_label,
};
pub use shards::DataLabels;

use std::path::Path;

/// Loads `kind` from `dir`: for Fashion-MNIST by [`FashionMnist::load`]'s
/// rule (`dir`, else `EDGECFL_FMNIST_DIR`, the Debian package, the bundled subset); every other
/// data set needs `dir`.
///
/// # Errors
///
/// [`DataError::NeedsDir`] without `dir` for a data set other than Fashion-MNIST; otherwise the
/// reader's error, which names the file.
pub fn load(kind: DatasetKind, dir: Option<&Path>) -> Result<Splits, DataError> {
    match kind {
        DatasetKind::Fmnist => FashionMnist::load(dir),
        DatasetKind::Mnist => fmnist::load_idx_dir(need_dir(kind, dir)?, kind),
        DatasetKind::Cifar10 => {
            cifar::load_cifar(need_dir(kind, dir)?, &cifar::CifarFiles::CIFAR10)
        }
        DatasetKind::Cifar100 => {
            cifar::load_cifar(need_dir(kind, dir)?, &cifar::CifarFiles::CIFAR100)
        }
        DatasetKind::Cifar100Coarse => {
            cifar::load_cifar(need_dir(kind, dir)?, &cifar::CifarFiles::CIFAR100_COARSE)
        }
        DatasetKind::Svhn => svhn::load_svhn(need_dir(kind, dir)?),
        DatasetKind::Femnist => femnist::load_femnist(need_dir(kind, dir)?),
    }
}

pub(crate) fn need_dir(kind: DatasetKind, dir: Option<&Path>) -> Result<&Path, DataError> {
    dir.ok_or(DataError::NeedsDir { dataset: kind })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_data_sets_need_a_directory() {
        let err = load(DatasetKind::Cifar10, None).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::NeedsDir {
                    dataset: DatasetKind::Cifar10
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("data_batch_1.bin"), "{err}");
    }
}
