//! One client's part of a data set without the rest: [`DataLabels::load`] reads only the labels
//! (IDX label files; CIFAR-10's label bytes or pickled label lists; an image folder's listing), the caller cuts its
//! shard from them (a [`partition`](super::partition::partition())), then
//! [`select_train`](DataLabels::select_train) / [`select_test`](DataLabels::select_test) read
//! only those images. The result equals [`Dataset::select`] on [`super::load`]'s data, byte for
//! byte, while memory holds only the selected images: a board given all of CIFAR-10 (150 MB of
//! pixels) keeps its own shard.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::catalog::{DatasetKind, ImageShape};
use super::cifar::{
    CIFAR10_PY_TEST_FILE, CIFAR10_PY_TRAIN_FILES, CIFAR10_RECORD, CIFAR10_TEST_FILE,
    CIFAR10_TRAIN_FILES,
};
use super::dataset::{DataError, DataSource, Dataset, check_labels};
use super::fmnist::FashionMnistLabels;
use super::folder;
use super::spill::SpillFile;

/// A data set's labels, and where its images are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataLabels {
    /// Which data set.
    pub kind: DatasetKind,
    /// The training labels, one per training image.
    pub train: Vec<u8>,
    /// The test labels.
    pub test: Vec<u8>,
    /// Where the data come from.
    pub source: DataSource,
    images: Images,
}

/// `count` images in `path`, the first at byte `start`, one every `stride` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Run {
    path: PathBuf,
    count: usize,
    start: u64,
    stride: u64,
}

/// Where the images of each split are.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Images {
    /// Fashion-MNIST or MNIST: the IDX reader's own selection.
    Idx(FashionMnistLabels),
    /// Images at a fixed stride in files (CIFAR-10's binary and python versions): each split's
    /// files, in order.
    Runs([Vec<Run>; 2]),
    /// Images held in memory (SVHN; a pickle that re-encodes its pixels): each split's.
    Memory([Vec<u8>; 2]),
    /// An image folder: each split's files, in reading order.
    Folder([Vec<PathBuf>; 2]),
}

impl DataLabels {
    /// The labels of `kind` in `dir` (for Fashion-MNIST, by [`super::FashionMnist::load`]'s rule
    /// without `dir`).
    ///
    /// # Errors
    ///
    /// As [`super::load`], for the labels; the images are checked when selected.
    pub fn load(kind: DatasetKind, dir: Option<&Path>) -> Result<DataLabels, DataError> {
        let idx = |labels: FashionMnistLabels| DataLabels {
            kind,
            train: labels.train.clone(),
            test: labels.test.clone(),
            source: labels.source.clone(),
            images: Images::Idx(labels),
        };
        match kind {
            DatasetKind::Fmnist => Ok(idx(FashionMnistLabels::load(dir)?)),
            DatasetKind::Mnist => {
                let dir = dir.ok_or(DataError::NeedsDir { dataset: kind })?;
                Ok(idx(FashionMnistLabels::load_idx_dir(dir, kind)?))
            }
            DatasetKind::Cifar10 => {
                let dir = dir.ok_or(DataError::NeedsDir { dataset: kind })?;
                cifar10(dir)
            }
            // SVHN's labels follow its images inside one compressed stream: the whole file is
            // read, and the images kept (225 MB for the training file).
            DatasetKind::Svhn => {
                let full = super::load(kind, dir)?;
                Ok(DataLabels {
                    kind,
                    train: full.train.labels,
                    test: full.test.labels,
                    source: full.source,
                    images: Images::Memory([full.train.images, full.test.images]),
                })
            }
        }
    }

    /// The shape of every image.
    pub fn shape(&self) -> ImageShape {
        self.kind.info().shape
    }

    /// The training samples at `indices`, in that order (repeats allowed), reading only those
    /// images.
    ///
    /// # Errors
    ///
    /// An index out of range ([`DataError::Idx`] for IDX files, else [`DataError::Format`]), or
    /// the reader's error for a file that is not as its labels said.
    pub fn select_train(&self, indices: &[usize]) -> Result<Dataset, DataError> {
        self.select(0, indices, None)
    }

    /// [`select_train`](Self::select_train), writing the images to `file` instead of memory
    /// (image `p` of `indices` at byte `p × shape().pixels()`): the returned dataset has the
    /// labels and no images.
    ///
    /// # Errors
    ///
    /// As [`select_train`](Self::select_train); a failed write is [`DataError::Io`].
    pub fn select_train_to(
        &self,
        indices: &[usize],
        file: &SpillFile,
    ) -> Result<Dataset, DataError> {
        self.select(0, indices, Some(file))
    }

    /// The test samples at `indices`, in that order; as [`select_train`](Self::select_train).
    ///
    /// # Errors
    ///
    /// As [`select_train`](Self::select_train).
    pub fn select_test(&self, indices: &[usize]) -> Result<Dataset, DataError> {
        self.select(1, indices, None)
    }

    fn select(
        &self,
        split: usize,
        indices: &[usize],
        to: Option<&SpillFile>,
    ) -> Result<Dataset, DataError> {
        let labels = [&self.train, &self.test][split];
        let shape = self.shape();
        if let Images::Idx(idx) = &self.images {
            return match (split, to) {
                (0, None) => idx.select_train(indices),
                (0, Some(file)) => idx.select_train_to(indices, file),
                _ => idx.select_test(indices),
            };
        }
        if let Some(&index) = indices.iter().find(|&&i| i >= labels.len()) {
            return Err(DataError::Format {
                path: self.source_path(),
                reason: format!(
                    "sample {index} is out of range: the split holds {} samples",
                    labels.len()
                ),
            });
        }
        let mut data = Dataset {
            shape,
            labels: indices.iter().map(|&i| labels[i]).collect(),
            ..Dataset::default()
        };
        let mut image = Vec::with_capacity(shape.pixels());
        // Each file opened once per selection, not once per image.
        let mut handles: Vec<Option<File>> = match &self.images {
            Images::Runs(files) => files[split].iter().map(|_| None).collect(),
            _ => Vec::new(),
        };
        for (p, &i) in indices.iter().enumerate() {
            image.clear();
            match &self.images {
                Images::Runs(files) => read_run(&files[split], &mut handles, i, shape, &mut image)?,
                Images::Memory(images) => {
                    image.extend_from_slice(&images[split][i * shape.pixels()..][..shape.pixels()])
                }
                Images::Folder(files) => {
                    folder::decode_into(&files[split][i], self.kind, shape, &mut image)?
                }
                Images::Idx(_) => {}
            }
            match to {
                None => data.images.extend_from_slice(&image),
                Some(file) => {
                    file.write_at(&image, (p * shape.pixels()) as u64)
                        .map_err(|source| DataError::Io {
                            path: PathBuf::from("<scratch file>"),
                            source,
                        })?
                }
            }
        }
        Ok(data)
    }

    fn source_path(&self) -> PathBuf {
        match &self.source {
            DataSource::Dir(d) => d.clone(),
            DataSource::Bundled => PathBuf::from("<bundled>"),
        }
    }
}

/// CIFAR-10's labels: the binary version's label bytes, else the python version's label lists,
/// else an image folder's listing (as [`super::cifar::load_cifar10`] chooses).
fn cifar10(dir: &Path) -> Result<DataLabels, DataError> {
    let kind = DatasetKind::Cifar10;
    if !dir.is_dir() {
        return Err(DataError::MissingDir {
            path: dir.to_path_buf(),
            dataset: kind,
        });
    }
    if let Some(bin) = super::cifar::binary_dir(dir) {
        let mut labels = [Vec::new(), Vec::new()];
        let mut files = [Vec::new(), Vec::new()];
        let train = CIFAR10_TRAIN_FILES.iter().map(|f| (0, bin.join(f)));
        for (split, path) in train.chain([(1, bin.join(CIFAR10_TEST_FILE))]) {
            let own = record_labels(&path)?;
            files[split].push(Run {
                path: path.clone(),
                count: own.len(),
                start: 1,
                stride: CIFAR10_RECORD as u64,
            });
            labels[split].extend(check_labels(own, kind.info().classes(), &path)?);
        }
        let [train, test] = labels;
        return Ok(DataLabels {
            kind,
            train,
            test,
            source: DataSource::Dir(bin),
            images: Images::Runs(files),
        });
    }
    if let Some(py) = super::cifar::python_dir(dir) {
        let mut labels = [Vec::new(), Vec::new()];
        let mut files = [Vec::new(), Vec::new()];
        let mut runs = true;
        let train = CIFAR10_PY_TRAIN_FILES.iter().map(|f| (0, py.join(f)));
        for (split, path) in train.chain([(1, py.join(CIFAR10_PY_TEST_FILE))]) {
            let batch = super::cifar::read_python_batch(&path, "labels", false)?;
            let count = batch.labels.len();
            labels[split].extend(batch.labels);
            match batch.offset {
                Some(start) => files[split].push(Run {
                    path,
                    count,
                    start,
                    stride: ImageShape::RGB_32.pixels() as u64,
                }),
                None => runs = false,
            }
        }
        // Python 2 and NumPy's own reduction (protocol 3 and up) write the pixels as one run of
        // raw bytes; Python 3's protocol 2 re-encodes them, and such a copy is held in memory.
        let images = if runs {
            Images::Runs(files)
        } else {
            let full = super::cifar::load_cifar10(&py)?;
            Images::Memory([full.train.images, full.test.images])
        };
        let [train, test] = labels;
        return Ok(DataLabels {
            kind,
            train,
            test,
            source: DataSource::Dir(py),
            images,
        });
    }
    if folder::is_image_folder(dir) {
        let [train, test] = ["train", "test"].map(|s| folder::list_split(&dir.join(s), kind));
        let (train, test) = (train?, test?);
        let labels = |v: &[(PathBuf, u8)]| v.iter().map(|(_, l)| *l).collect();
        let paths = |v: Vec<(PathBuf, u8)>| v.into_iter().map(|(p, _)| p).collect();
        return Ok(DataLabels {
            kind,
            train: labels(&train),
            test: labels(&test),
            source: DataSource::Dir(dir.to_path_buf()),
            images: Images::Folder([paths(train), paths(test)]),
        });
    }
    Err(DataError::MissingFile {
        path: dir.join(CIFAR10_TRAIN_FILES[0]),
        dataset: kind,
    })
}

/// The label byte of every record of a CIFAR-10 binary file, read a record at a time.
fn record_labels(path: &Path) -> Result<Vec<u8>, DataError> {
    let file = open(path)?;
    let len = file
        .metadata()
        .map_err(|source| DataError::Io {
            path: path.to_path_buf(),
            source,
        })?
        .len() as usize;
    super::cifar::check_length(path, len)?;
    let mut reader = BufReader::new(file);
    let mut record = vec![0u8; CIFAR10_RECORD];
    let mut labels = Vec::with_capacity(len / CIFAR10_RECORD);
    for _ in 0..len / CIFAR10_RECORD {
        reader
            .read_exact(&mut record)
            .map_err(|source| DataError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        labels.push(record[0]);
    }
    Ok(labels)
}

/// Appends image `i` of a split (its `files`) to `out`, opening a file into its slot of
/// `handles` the first time it is read.
fn read_run(
    files: &[Run],
    handles: &mut [Option<File>],
    mut i: usize,
    shape: ImageShape,
    out: &mut Vec<u8>,
) -> Result<(), DataError> {
    for (
        Run {
            path,
            count,
            start,
            stride,
        },
        handle,
    ) in files.iter().zip(handles.iter_mut())
    {
        if i < *count {
            let io = |source| DataError::Io {
                path: path.clone(),
                source,
            };
            let file = match handle {
                Some(f) => f,
                None => handle.insert(open(path)?),
            };
            file.seek(SeekFrom::Start(start + i as u64 * stride))
                .map_err(io)?;
            let at = out.len();
            out.resize(at + shape.pixels(), 0);
            return file.read_exact(&mut out[at..]).map_err(io);
        }
        i -= count;
    }
    Err(DataError::Format {
        path: files.last().map_or_else(PathBuf::new, |r| r.path.clone()),
        reason: "fewer records than when the labels were read".into(),
    })
}

fn open(path: &Path) -> Result<File, DataError> {
    File::open(path).map_err(|e| super::dataset::io_error(path, DatasetKind::Cifar10, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("edgecfl-shards-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Selected samples equal those of the full load, for both CIFAR-10 layouts, in memory and
    /// in a scratch file; an index past the split is an error, not a panic.
    #[test]
    fn selected_equals_full_for_cifar10_layouts() {
        let bin = temp("bin");
        let mut record = 0u8;
        for (f, n) in CIFAR10_TRAIN_FILES
            .iter()
            .zip([3, 1, 2, 1, 4])
            .chain([(&CIFAR10_TEST_FILE, 2)])
        {
            let mut bytes = Vec::new();
            for _ in 0..n {
                record += 1;
                bytes.push(record % 10);
                bytes.extend((0..3072).map(|p| (p as u8).wrapping_mul(record)));
            }
            std::fs::write(bin.join(f), bytes).unwrap();
        }
        let folder = temp("folder");
        for (split, class, name, level) in [
            ("train", "cat", "a.png", 30),
            ("train", "airplane", "b.png", 10),
            ("train", "airplane", "a.png", 20),
            ("test", "ship", "c.png", 40),
        ] {
            let dir = folder.join(split).join(class);
            std::fs::create_dir_all(&dir).unwrap();
            let mut out = Vec::new();
            let mut enc = png::Encoder::new(&mut out, 32, 32);
            enc.set_color(png::ColorType::Rgb);
            let px: Vec<u8> = (0..3072).map(|p| (p as u8) ^ level).collect();
            enc.write_header().unwrap().write_image_data(&px).unwrap();
            std::fs::write(dir.join(name), out).unwrap();
        }
        for dir in [&bin, &folder] {
            let full = super::super::load(DatasetKind::Cifar10, Some(dir)).unwrap();
            let labels = DataLabels::load(DatasetKind::Cifar10, Some(dir)).unwrap();
            assert_eq!(
                (&labels.train, &labels.test),
                (&full.train.labels, &full.test.labels)
            );
            assert_eq!(labels.source, full.source);
            let n = full.train.len();
            let idx = vec![n - 1, 0, n / 2, n - 1];
            assert_eq!(labels.select_train(&idx).unwrap(), full.train.select(&idx));
            assert_eq!(labels.select_test(&[0]).unwrap(), full.test.select(&[0]));
            let file = SpillFile::create(&std::env::temp_dir()).unwrap();
            let spilled = labels.select_train_to(&idx, &file).unwrap();
            assert!(spilled.images.is_empty());
            let mut back = vec![0; idx.len() * 3072];
            file.read_at(&mut back, 0).unwrap();
            assert_eq!(back, full.train.select(&idx).images);
            let err = labels.select_train(&[n]).unwrap_err();
            assert!(matches!(err, DataError::Format { .. }), "{err}");
        }
        std::fs::remove_dir_all(&bin).unwrap();
        std::fs::remove_dir_all(&folder).unwrap();
    }
}
