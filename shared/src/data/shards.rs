//! One client's part of a data set without the rest: [`DataLabels::load`] reads only the labels
//! (IDX label files; CIFAR's label bytes or pickled label lists; an image folder's listing), the caller cuts its
//! shard from them (a [`partition`](super::partition::partition())), then
//! [`select_train`](DataLabels::select_train) / [`select_test`](DataLabels::select_test) read
//! only those images. The result equals [`Dataset::select`] on [`super::load`]'s data, byte for
//! byte, while memory holds only the selected images: a board given all of CIFAR-10 (150 MB of
//! pixels) keeps its own shard.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::catalog::{DatasetKind, ImageShape};
use super::cifar::CifarFiles;
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
    /// Who wrote each sample (FEMNIST); `None` for the other data sets.
    pub writers: Option<super::femnist::Writers>,
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
    /// Images at a fixed stride in files (CIFAR's binary and python versions): each split's
    /// files, in order.
    Runs([Vec<Run>; 2]),
    /// Images held in memory (SVHN; a pickle that re-encodes its pixels): each split's.
    Memory([Vec<u8>; 2]),
    /// An image folder: each split's files, in reading order.
    Folder([Vec<PathBuf>; 2]),
    /// LEAF's JSON files (FEMNIST): each split's files and their numbers of samples, in order.
    Leaf([Vec<(PathBuf, usize)>; 2]),
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
            writers: None,
            images: Images::Idx(labels),
        };
        match kind {
            DatasetKind::Fmnist => Ok(idx(FashionMnistLabels::load(dir)?)),
            DatasetKind::Mnist => Ok(idx(FashionMnistLabels::load_idx_dir(
                super::need_dir(kind, dir)?,
                kind,
            )?)),
            DatasetKind::Cifar10 => cifar(super::need_dir(kind, dir)?, &CifarFiles::CIFAR10),
            DatasetKind::Cifar100 => cifar(super::need_dir(kind, dir)?, &CifarFiles::CIFAR100),
            DatasetKind::Cifar100Coarse => {
                cifar(super::need_dir(kind, dir)?, &CifarFiles::CIFAR100_COARSE)
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
                    writers: None,
                    images: Images::Memory([full.train.images, full.test.images]),
                })
            }
            DatasetKind::Femnist => leaf(super::need_dir(kind, dir)?),
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
        if let Images::Leaf(files) = &self.images {
            if to.is_none() {
                data.images = vec![0; indices.len() * shape.pixels()];
            }
            leaf_select(&files[split], indices, |p, image| match to {
                None => {
                    data.images[p * shape.pixels()..][..shape.pixels()].copy_from_slice(image);
                    Ok(())
                }
                Some(file) => write_spilled(file, p, image),
            })?;
            return Ok(data);
        }
        let mut image = Vec::with_capacity(shape.pixels());
        // Each file opened once per selection, not once per image.
        let mut handles: Vec<Option<File>> = match &self.images {
            Images::Runs(files) => files[split].iter().map(|_| None).collect(),
            _ => Vec::new(),
        };
        for (p, &i) in indices.iter().enumerate() {
            image.clear();
            match &self.images {
                Images::Runs(files) => {
                    read_run(&files[split], &mut handles, i, shape, self.kind, &mut image)?
                }
                Images::Memory(images) => {
                    image.extend_from_slice(&images[split][i * shape.pixels()..][..shape.pixels()])
                }
                Images::Folder(files) => {
                    folder::decode_into(&files[split][i], self.kind, shape, &mut image)?
                }
                Images::Idx(_) | Images::Leaf(_) => {}
            }
            match to {
                None => data.images.extend_from_slice(&image),
                Some(file) => write_spilled(file, p, &image)?,
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

/// Writes image `p` of a selection (`image.len()` bytes each) to its place in the scratch file.
fn write_spilled(file: &SpillFile, p: usize, image: &[u8]) -> Result<(), DataError> {
    file.write_at(image, (p * image.len()) as u64)
        .map_err(|source| DataError::Io {
            path: PathBuf::from("<scratch file>"),
            source,
        })
}

/// FEMNIST's labels and writers from LEAF's JSON files (each file read whole, its pixels then
/// dropped).
fn leaf(dir: &Path) -> Result<DataLabels, DataError> {
    let mut labels = [Vec::new(), Vec::new()];
    let mut files = [Vec::new(), Vec::new()];
    let writers = super::femnist::read_splits(dir, |split, path, file| {
        files[split].push((path.to_path_buf(), file.data.len()));
        labels[split].extend(file.data.labels);
    })?;
    let [train, test] = labels;
    Ok(DataLabels {
        kind: DatasetKind::Femnist,
        train,
        test,
        source: DataSource::Dir(dir.to_path_buf()),
        writers: Some(writers),
        images: Images::Leaf(files),
    })
}

/// Hands image `indices[p]` of a split held in LEAF `files` to `emit(p, image)`, reading each
/// file that holds one of them once, in file order.
fn leaf_select(
    files: &[(PathBuf, usize)],
    indices: &[usize],
    mut emit: impl FnMut(usize, &[u8]) -> Result<(), DataError>,
) -> Result<(), DataError> {
    let starts: Vec<usize> = files
        .iter()
        .scan(0, |at, (_, n)| {
            let start = *at;
            *at += n;
            Some(start)
        })
        .collect();
    let mut wanted: Vec<Vec<(usize, usize)>> = vec![Vec::new(); files.len()];
    for (p, &i) in indices.iter().enumerate() {
        let f = starts.partition_point(|&s| s <= i) - 1;
        wanted[f].push((p, i - starts[f]));
    }
    for ((path, count), wanted) in files.iter().zip(&wanted) {
        if wanted.is_empty() {
            continue;
        }
        let file = super::femnist::read_leaf_file(path)?;
        if file.data.len() != *count {
            return Err(DataError::Format {
                path: path.clone(),
                reason: format!(
                    "held {count} samples when its labels were read, {} now",
                    file.data.len()
                ),
            });
        }
        for &(p, local) in wanted {
            emit(p, file.data.image(local))?;
        }
    }
    Ok(())
}

/// A CIFAR data set's labels: the binary version's label bytes, else the python version's label
/// lists, else an image folder's listing (as [`super::cifar::load_cifar`] chooses).
fn cifar(dir: &Path, files: &CifarFiles) -> Result<DataLabels, DataError> {
    let kind = files.kind;
    if !dir.is_dir() {
        return Err(DataError::MissingDir {
            path: dir.to_path_buf(),
            dataset: kind,
        });
    }
    if let Some(bin) = files.binary_dir(dir) {
        let mut labels = [Vec::new(), Vec::new()];
        let mut runs = [Vec::new(), Vec::new()];
        for (split, paths) in files.binary_files(&bin).into_iter().enumerate() {
            for path in paths {
                let own = record_labels(&path, files)?;
                runs[split].push(Run {
                    path: path.clone(),
                    count: own.len(),
                    start: files.label_bytes as u64,
                    stride: files.record() as u64,
                });
                labels[split].extend(check_labels(own, kind.info().classes(), &path)?);
            }
        }
        let [train, test] = labels;
        return Ok(DataLabels {
            kind,
            train,
            test,
            source: DataSource::Dir(bin),
            writers: None,
            images: Images::Runs(runs),
        });
    }
    if let Some(py) = files.python_dir(dir) {
        let mut labels = [Vec::new(), Vec::new()];
        let mut runs = [Vec::new(), Vec::new()];
        let mut in_runs = true;
        for (split, paths) in files.python_files(&py).into_iter().enumerate() {
            for path in paths {
                let batch = super::cifar::read_python_batch(&path, files, false)?;
                let count = batch.labels.len();
                labels[split].extend(batch.labels);
                match batch.offset {
                    Some(start) => runs[split].push(Run {
                        path,
                        count,
                        start,
                        stride: ImageShape::RGB_32.pixels() as u64,
                    }),
                    None => in_runs = false,
                }
            }
        }
        // Python 2 and NumPy's own reduction (protocol 3 and up) write the pixels as one run of
        // raw bytes; Python 3's protocol 2 re-encodes them, and such a copy is held in memory.
        let images = if in_runs {
            Images::Runs(runs)
        } else {
            let full = super::cifar::load_cifar(&py, files)?;
            Images::Memory([full.train.images, full.test.images])
        };
        let [train, test] = labels;
        return Ok(DataLabels {
            kind,
            train,
            test,
            source: DataSource::Dir(py),
            writers: None,
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
            writers: None,
            images: Images::Folder([paths(train), paths(test)]),
        });
    }
    Err(files.missing(dir))
}

/// The label of every record of a CIFAR binary file, read a record at a time.
fn record_labels(path: &Path, files: &CifarFiles) -> Result<Vec<u8>, DataError> {
    let file = open(path, files.kind)?;
    let len = file
        .metadata()
        .map_err(|source| DataError::Io {
            path: path.to_path_buf(),
            source,
        })?
        .len() as usize;
    super::cifar::check_length(path, len, files)?;
    let mut reader = BufReader::new(file);
    let mut record = vec![0u8; files.record()];
    let mut labels = Vec::with_capacity(len / files.record());
    for _ in 0..len / files.record() {
        reader
            .read_exact(&mut record)
            .map_err(|source| DataError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        labels.push(record[files.label_at]);
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
    kind: DatasetKind,
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
                None => handle.insert(open(path, kind)?),
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

fn open(path: &Path, kind: DatasetKind) -> Result<File, DataError> {
    File::open(path).map_err(|e| super::dataset::io_error(path, kind, e))
}

#[cfg(test)]
mod tests {
    use super::super::cifar::{CIFAR10_TEST_FILE, CIFAR10_TRAIN_FILES};
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

    /// CIFAR-100's binary records (coarse label, fine label, image) as the format's page lays
    /// them out: `cifar100` reads the fine labels, `cifar100-coarse` the coarse ones, each
    /// selection equals the full load, and a label past the classes names its file.
    #[test]
    fn cifar100_binary_reads_fine_or_coarse_labels() {
        let top = temp("c100");
        let bin = top.join("cifar-100-binary");
        std::fs::create_dir_all(&bin).unwrap();
        // (coarse, fine): fine label f belongs to a coarse class c in the real files; any pair
        // is a valid record.
        let train = [(19u8, 99u8), (0, 4), (4, 0), (19, 58), (7, 7)];
        let test = [(11u8, 15u8), (3, 61)];
        let write = |name: &str, pairs: &[(u8, u8)]| {
            let mut bytes = Vec::new();
            for (r, &(coarse, fine)) in pairs.iter().enumerate() {
                bytes.extend([coarse, fine]);
                bytes.extend((0..3072).map(|p| (p as u8) ^ (r as u8) ^ fine));
            }
            std::fs::write(bin.join(name), bytes).unwrap();
        };
        write("train.bin", &train);
        write("test.bin", &test);
        for (kind, pick) in [
            (DatasetKind::Cifar100, 1usize),
            (DatasetKind::Cifar100Coarse, 0),
        ] {
            let want = |pairs: &[(u8, u8)]| -> Vec<u8> {
                pairs.iter().map(|&(c, f)| [c, f][pick]).collect()
            };
            let full = super::super::load(kind, Some(&top)).unwrap();
            assert_eq!(full.train.labels, want(&train), "{kind}");
            assert_eq!(full.test.labels, want(&test), "{kind}");
            assert_eq!(full.source, DataSource::Dir(bin.clone()));
            // Image 3 (record 3 of train.bin, fine label 58), blue plane pixel 7.
            assert_eq!(full.train.image(3)[2048 + 7], (2048u32 + 7) as u8 ^ 3 ^ 58);
            let labels = DataLabels::load(kind, Some(&bin)).unwrap();
            assert_eq!(labels.train, full.train.labels);
            let idx = [4, 0, 3, 3];
            assert_eq!(labels.select_train(&idx).unwrap(), full.train.select(&idx));
            assert_eq!(labels.select_test(&[1]).unwrap(), full.test.select(&[1]));
        }
        // A coarse label of 20 is out of range for the coarse labels only.
        write("test.bin", &[(20, 1)]);
        assert!(super::super::load(DatasetKind::Cifar100, Some(&top)).is_ok());
        for err in [
            super::super::load(DatasetKind::Cifar100Coarse, Some(&top)).unwrap_err(),
            DataLabels::load(DatasetKind::Cifar100Coarse, Some(&top)).unwrap_err(),
        ] {
            assert!(
                matches!(&err, DataError::LabelOutOfRange { path, label: 20, classes: 20, .. } if path.ends_with("test.bin")),
                "{err}"
            );
        }
        // A CIFAR-10 record length (3 073 bytes) is not a CIFAR-100 file.
        std::fs::write(bin.join("test.bin"), vec![0u8; 3073]).unwrap();
        let err = super::super::load(DatasetKind::Cifar100, Some(&top)).unwrap_err();
        assert!(
            matches!(&err, DataError::Format { path, reason } if path.ends_with("test.bin") && reason.contains("3074")),
            "{err}"
        );
        // An empty folder names the file it looked for.
        let empty = temp("c100-empty");
        let err = DataLabels::load(DatasetKind::Cifar100, Some(&empty)).unwrap_err();
        assert!(err.to_string().contains("train.bin"), "{err}");
        std::fs::remove_dir_all(&top).unwrap();
        std::fs::remove_dir_all(&empty).unwrap();
    }
}
