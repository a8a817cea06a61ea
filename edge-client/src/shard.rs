//! A client's local data: one shard of a seeded partition of a data set (testbeds), or the
//! whole of a data set's directory (a real device with its own data).
//!
//! The labels are read first; the partition is cut from them; then only this client's images
//! are read ([`DataLabels`]), as bytes
//! ([`LocalData`]), in memory or, above `--spill-above`, in a scratch file read back a batch at
//! a time. The client never holds the full dataset, and trains on exactly the images, in the
//! order, that cutting the shard out of the fully loaded dataset gives.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use edgecfl_shared::data::partition::{PartitionSpec, local_test_indices, partition_of};
use edgecfl_shared::data::spill::SpillFile;
use edgecfl_shared::data::{DataLabels, DatasetKind};
use edgecfl_shared::protocol::{ShardInfo, text};
use edgecfl_shared::train::LocalData;

/// Where the client's data come from.
#[derive(Debug, Clone, Args)]
pub struct ShardArgs {
    /// The data set.
    #[arg(long, value_name = "NAME", default_value_t = DatasetKind::Fmnist,
          help = edgecfl_shared::data::catalog::dataset_flag_help())]
    pub dataset: DatasetKind,
    /// The data set's directory (without --partition, all of it is this client's data).
    #[arg(long, value_name = "DIR",
          help = format!("{} Without --partition, all of it is this client's data.", edgecfl_shared::data::catalog::data_flag_help()))]
    pub data: Option<PathBuf>,
    /// Take one shard of this partition (iid | label:K | dir:BETA | groups:… | rotate:G | shift:G |
    /// rotate:R*BASE | dominant:ALPHA | pairs | tasks:fmnist3 | writers).
    #[arg(long)]
    pub partition: Option<PartitionSpec>,
    /// Partition seed (must match the coordinator's for a shared split).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// This client's shard index, 0-based.
    #[arg(long, default_value_t = 0)]
    pub index: usize,
    /// Number of shards (clients) in the partition.
    #[arg(long, default_value_t = 1)]
    pub of: usize,
    /// Training images above this many MiB are kept in a scratch file in --spill-dir and read
    /// back a batch at a time, not held in memory (0: always; all of Fashion-MNIST is 45 MiB, of
    /// CIFAR-10 146 MiB).
    #[arg(long, default_value_t = 16.0, value_name = "MIB")]
    pub spill_above: f64,
    /// Directory of that scratch file (default: the system's temporary directory). The file
    /// has no name while it is used (Linux), so nothing is left behind.
    #[arg(long, value_name = "DIR")]
    pub spill_dir: Option<PathBuf>,
}

impl ShardArgs {
    /// The training samples at `indices`: in memory, or in a scratch file when their images are
    /// above `--spill-above`.
    fn training(
        &self,
        data: &DataLabels,
        indices: &[usize],
        rotation: u8,
        shift: u8,
    ) -> anyhow::Result<LocalData> {
        anyhow::ensure!(
            self.spill_above.is_finite() && self.spill_above >= 0.0,
            "--spill-above must be a number of MiB ≥ 0, got {}",
            self.spill_above
        );
        let bytes = (indices.len() * data.shape().pixels()) as f64;
        if bytes <= self.spill_above * f64::from(1u32 << 20) {
            return Ok(LocalData::from_owned(
                data.select_train(indices)?,
                rotation,
                shift,
            ));
        }
        let dir = self.spill_dir.clone().unwrap_or_else(std::env::temp_dir);
        let file = SpillFile::create(&dir).with_context(|| {
            format!(
                "a scratch file for the training images in {}",
                dir.display()
            )
        })?;
        let selected = data.select_train_to(indices, &file)?;
        tracing::info!(
            "{} training images ({:.1} MiB) kept in a scratch file in {}",
            indices.len(),
            bytes / f64::from(1u32 << 20),
            dir.display()
        );
        Ok(LocalData::spilled(
            file,
            selected.shape,
            selected.labels,
            rotation,
            shift,
        ))
    }
}

/// A client's training data and local test set.
pub struct Shard {
    /// Training samples.
    pub train: LocalData,
    /// Local test set (every test sample of the training labels, rotated and label-shifted
    /// alike).
    pub test: LocalData,
    /// Where the images came from.
    pub source: String,
    /// Which shard of which partition (testbeds), for the client's announcement.
    pub info: Option<ShardInfo>,
}

impl ShardArgs {
    /// Loads the data and cuts this client's shard.
    pub fn load(&self) -> anyhow::Result<Shard> {
        if let Some(spec) = &self.partition {
            spec.check_dataset(self.dataset)
                .with_context(|| format!("partition {spec} on {}", self.dataset.info().name))?;
        }
        let data = DataLabels::load(self.dataset, self.data.as_deref())
            .with_context(|| format!("loading {}", self.dataset.info().name))?;
        let source = data.source.to_string();
        let Some(spec) = &self.partition else {
            let all: Vec<usize> = (0..data.train.len()).collect();
            let test: Vec<usize> = (0..data.test.len()).collect();
            return Ok(Shard {
                train: self.training(&data, &all, 0, 0)?,
                test: LocalData::from_owned(data.select_test(&test)?, 0, 0),
                source,
                info: None,
            });
        };
        anyhow::ensure!(
            self.index < self.of,
            "--index {} must be below --of {}",
            self.index,
            self.of
        );
        let classes = self.dataset.info().classes();
        let part = partition_of(
            spec,
            &data.train,
            classes,
            data.writers.as_ref(),
            self.of,
            self.seed,
        )
        .with_context(|| format!("partition {spec}"))?;
        let shard = &part.clients[self.index];
        let test = local_test_indices(shard, &data.test);
        let (rotation, shift) = (shard.rotation, shard.label_shift);
        Ok(Shard {
            train: self.training(&data, &shard.train, rotation, shift)?,
            test: LocalData::from_owned(data.select_test(&test)?, rotation, shift),
            source: format!("{source}, {spec} shard {}/{}", self.index, self.of),
            info: Some(ShardInfo {
                partition: text(&spec.to_string()),
                seed: self.seed,
                index: self.index as u32,
                of: self.of as u32,
                group: part.truth.as_ref().map(|t| t[self.index] as u32),
            }),
        })
    }
}
