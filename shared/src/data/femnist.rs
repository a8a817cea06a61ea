//! FEMNIST in LEAF's JSON layout (Caldas et al., "LEAF: A Benchmark for Federated Settings",
//! 2018): the hand-written digits and letters of EMNIST (62 classes: `0`-`9`, `A`-`Z`, `a`-`z`)
//! grouped by their writer, the natural clients of a federation (`--partition writers`).
//!
//! LEAF's `preprocess.sh` writes `data/train/*.json` and `data/test/*.json`; `--data DIR` names
//! the folder that holds `train/` and `test/` (LEAF's `data/femnist/data`). Each file is one JSON
//! object:
//!
//! ```json
//! {"users": ["f0000_14", …], "num_samples": [152, …],
//!  "user_data": {"f0000_14": {"x": [[0.99, …784 values…], …], "y": [7, …]}, …}}
//! ```
//!
//! Each `x` row is a 28 × 28 image, row-major, its grey levels in `[0, 1]` as LEAF wrote them
//! (`1.0` is the paper's white background, `0.0` the ink): they are kept so, as bytes
//! `round(255 v)`, so a model trained here sees what a LEAF model in PyTorch sees. A split's
//! samples are read in file-name order, then the file's `users` order, then each user's order.
//!
//! A writer is known by name across the two splits: LEAF's sample split (`-t sample`) puts each
//! writer's samples in both. [`Writers`] records every sample's writer; the `writers` partition
//! deals one writer to a client and tests it on that writer's own test samples.
//!
//! Reading checks every file: `users` and `num_samples` of one length, each user in `user_data`
//! with as many rows in `x` and labels in `y` as `num_samples` says, rows of 784 values in
//! `[0, 1]`, integer labels below 62, and no user in `user_data` that `users` does not list. The
//! error names the file (and the user). A file is read whole, one at a time: the edge client's
//! memory holds its own samples and one file (LEAF's files hold a few hundred writers each).

use std::collections::HashMap;
use std::fmt;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};

use super::catalog::{DatasetKind, ImageShape};
use super::dataset::{DataError, DataSource, Dataset, Splits, check_labels};

/// The writer of every sample of both splits (FEMNIST): ids index `names`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Writers {
    /// Each writer's name (LEAF's user id), training writers first in reading order, then the
    /// writers found only in the test files.
    pub names: Vec<String>,
    /// The writer of each training sample.
    pub train: Vec<u32>,
    /// The writer of each test sample.
    pub test: Vec<u32>,
}

/// One LEAF file as read: its users (name, samples) in order, and their samples in that order.
#[derive(Debug)]
pub(crate) struct LeafFile {
    pub(crate) users: Vec<(String, usize)>,
    pub(crate) data: Dataset,
}

/// The two folders of the layout, `DIR/train` and `DIR/test`.
///
/// # Errors
///
/// [`DataError::MissingDir`] for `DIR` or either folder.
pub(crate) fn split_dirs(dir: &Path) -> Result<[PathBuf; 2], DataError> {
    let dirs = [dir.to_path_buf(), dir.join("train"), dir.join("test")];
    if let Some(missing) = dirs.iter().find(|d| !d.is_dir()) {
        return Err(DataError::MissingDir {
            path: missing.clone(),
            dataset: DatasetKind::Femnist,
        });
    }
    let [_, train, test] = dirs;
    Ok([train, test])
}

/// The `*.json` files of one split's folder, by name.
///
/// # Errors
///
/// [`DataError::Io`] when the folder cannot be listed, [`DataError::MissingFile`] when it holds
/// no `.json` file.
pub(crate) fn json_files(dir: &Path) -> Result<Vec<PathBuf>, DataError> {
    let io = |source| DataError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.is_file() && path.extension().is_some_and(|e| e == "json") {
            files.push(path);
        }
    }
    if files.is_empty() {
        return Err(DataError::MissingFile {
            path: dir.join("*.json"),
            dataset: DatasetKind::Femnist,
        });
    }
    files.sort();
    Ok(files)
}

/// Loads FEMNIST from `dir` (`train/*.json`, `test/*.json`), with every sample's writer.
///
/// # Errors
///
/// [`DataError::MissingDir`] for `dir` or either split's folder, [`DataError::MissingFile`] for a
/// folder without `.json` files, and for a file that is not LEAF's layout the
/// [`DataError::Format`] (or [`DataError::LabelOutOfRange`]) naming it and its user.
pub fn load_femnist(dir: &Path) -> Result<Splits, DataError> {
    let mut sets: [Dataset; 2] = std::array::from_fn(|_| Dataset {
        shape: ImageShape::GREY_28,
        ..Dataset::default()
    });
    let writers = read_splits(dir, |split, _, file| {
        sets[split].images.extend_from_slice(&file.data.images);
        sets[split].labels.extend_from_slice(&file.data.labels);
    })?;
    let [train, test] = sets;
    Ok(Splits {
        kind: DatasetKind::Femnist,
        train,
        test,
        source: DataSource::Dir(dir.to_path_buf()),
        writers: Some(writers),
    })
}

/// Reads every file of both splits of `dir` in order, handing each to `each(split, path, file)`
/// (split 0 is train, 1 test), and returns the writers of every sample.
///
/// # Errors
///
/// As [`split_dirs`], [`json_files`] and [`read_leaf_file`].
pub(crate) fn read_splits(
    dir: &Path,
    mut each: impl FnMut(usize, &Path, LeafFile),
) -> Result<Writers, DataError> {
    let mut writers = Writers::default();
    let mut ids: HashMap<String, u32> = HashMap::new();
    for (split, folder) in split_dirs(dir)?.iter().enumerate() {
        for path in json_files(folder)? {
            let file = read_leaf_file(&path)?;
            let owners = if split == 0 {
                &mut writers.train
            } else {
                &mut writers.test
            };
            for (name, count) in &file.users {
                let id = *ids.entry(name.clone()).or_insert_with(|| {
                    writers.names.push(name.clone());
                    (writers.names.len() - 1) as u32
                });
                owners.extend(std::iter::repeat_n(id, *count));
            }
            each(split, &path, file);
        }
    }
    Ok(writers)
}

/// Reads one LEAF JSON file: its users and their samples, checked as the
/// [module docs](self) say.
///
/// # Errors
///
/// [`DataError::MissingFile`] / [`DataError::Io`]; [`DataError::Format`] naming the file (and
/// the user) for anything that is not LEAF's layout, [`DataError::LabelOutOfRange`].
pub(crate) fn read_leaf_file(path: &Path) -> Result<LeafFile, DataError> {
    let file = std::fs::File::open(path)
        .map_err(|e| super::dataset::io_error(path, DatasetKind::Femnist, e))?;
    let format = |reason: String| DataError::Format {
        path: path.to_path_buf(),
        reason,
    };
    let raw: RawFile = serde_json::from_reader(BufReader::new(file))
        .map_err(|e| format(format!("not LEAF's JSON layout: {e}")))?;
    if raw.users.len() != raw.num_samples.len() {
        return Err(format(format!(
            "{} users but {} entries in num_samples",
            raw.users.len(),
            raw.num_samples.len()
        )));
    }
    let mut user_data = raw.user_data;
    let mut data = Dataset {
        shape: ImageShape::GREY_28,
        ..Dataset::default()
    };
    let mut users = Vec::with_capacity(raw.users.len());
    for (name, &count) in raw.users.iter().zip(&raw.num_samples) {
        let user = user_data
            .remove(name)
            .ok_or_else(|| format(format!("user {name:?} is in users but not in user_data")))?;
        if user.x.rows != count || user.y.len() != count {
            return Err(format(format!(
                "user {name:?}: num_samples says {count}, x holds {} rows and y {} labels",
                user.x.rows,
                user.y.len()
            )));
        }
        for (i, &y) in user.y.iter().enumerate() {
            if y.fract() != 0.0 || !(0.0..=255.0).contains(&y) {
                return Err(format(format!(
                    "user {name:?}: label {y} of sample {i} is not a class number"
                )));
            }
            data.labels.push(y as u8);
        }
        data.images.extend_from_slice(&user.x.bytes);
        users.push((name.clone(), count));
    }
    if let Some(name) = user_data.keys().next() {
        return Err(format(format!(
            "user_data holds {name:?}, which users does not list"
        )));
    }
    data.labels = check_labels(data.labels, DatasetKind::Femnist.info().classes(), path)?;
    Ok(LeafFile { users, data })
}

/// A LEAF file's fields (others, such as `hierarchies`, are ignored).
#[derive(Deserialize)]
struct RawFile {
    users: Vec<String>,
    num_samples: Vec<usize>,
    user_data: HashMap<String, RawUser>,
}

#[derive(Deserialize)]
struct RawUser {
    x: Pixels,
    y: Vec<f64>,
}

/// A user's `x`: rows of 784 grey levels in `[0, 1]`, kept as bytes.
struct Pixels {
    rows: usize,
    bytes: Vec<u8>,
}

impl<'de> Deserialize<'de> for Pixels {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Rows;
        impl<'de> Visitor<'de> for Rows {
            type Value = Pixels;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of images, each a list of 784 grey levels")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Pixels, A::Error> {
                let mut px = Pixels {
                    rows: 0,
                    bytes: Vec::new(),
                };
                while seq.next_element_seed(Row(&mut px.bytes))?.is_some() {
                    px.rows += 1;
                }
                Ok(px)
            }
        }
        d.deserialize_seq(Rows)
    }
}

/// One row of `x`, appended to the bytes.
struct Row<'a>(&'a mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for Row<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Row<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an image of 784 grey levels in [0, 1]")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let pixels = ImageShape::GREY_28.pixels();
        let mut n = 0;
        while let Some(v) = seq.next_element::<f64>()? {
            if !(0.0..=1.0).contains(&v) {
                return Err(de::Error::custom(format!(
                    "grey level {v} is outside [0, 1]"
                )));
            }
            n += 1;
            if n > pixels {
                return Err(de::Error::custom(format!(
                    "an image has more than {pixels} values (FEMNIST's are 28 × 28)"
                )));
            }
            self.0.push((v * 255.0).round() as u8);
        }
        if n != pixels {
            return Err(de::Error::invalid_length(n, &self));
        }
        Ok(())
    }
}
