//! Data: the Fashion-MNIST IDX reader, the bundled subset and the NIID-Bench partitions.
//!
//! | module | what it holds |
//! | --- | --- |
//! | [`idx`] | reading IDX files (plain or gzip'd) with exact magic and length checks; [`idx::read_images_selected`] streams an image file keeping only chosen images |
//! | [`fmnist`] | [`FashionMnist`]: loading from `--data DIR`, `EDGECFL_FMNIST_DIR`, the Debian package's `/usr/share/datasets/fashion-mnist`, or the bundled subset (300 train + 100 test images per class); [`FashionMnistLabels`]: the labels first, then only the images a client keeps |
//! | [`spill`] | [`SpillFile`](spill::SpillFile): an anonymous scratch file that holds a client's training images when they are too many to keep in memory |
//! | [`partition`](mod@partition) | [`PartitionSpec`] (`iid`, `label:K`, `dir:BETA`, `groups:…`, `rotate:G`, `shift:G`, `rotate:R*BASE`, `dominant:ALPHA`, `pairs`, `tasks:fmnist3`), [`partition()`](partition::partition), local test sets, image rotation, label shifts |
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

pub mod fmnist;
pub mod idx;
pub mod partition;
pub mod spill;

pub use fmnist::{CLASS_NAMES, DataError, DataSource, Dataset, FashionMnist, FashionMnistLabels};
pub use idx::IdxError;
pub use partition::{
    ClientShard, DOMINANT_CLASSES, FMNIST3_TASKS, Partition, PartitionError, PartitionSpec,
    SpecError, client_datasets, local_test_indices, partition, rotate_image, shift_label,
};
