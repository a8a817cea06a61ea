//! CIFAR-10 and CIFAR-100 from the files users have: the official binary versions, the pickled
//! "python versions" (what torchvision downloads), or an image folder. [`CifarFiles`] says where
//! each keeps what; one reader serves all three data sets (`cifar10`, `cifar100` with its 100
//! fine labels, `cifar100-coarse` with its 20 superclasses).
//!
//! CIFAR-10's binary version (`cifar-10-binary.tar.gz`, unpacked to `cifar-10-batches-bin/`) is
//! five training files `data_batch_1.bin` … `data_batch_5.bin` and `test_batch.bin`, each of
//! records of 3 073 bytes: the label (0-9), then the 32 × 32 red plane, the green plane and the
//! blue plane, each row-major: the `C × H × W` order the product keeps images in, so a record's
//! last 3 072 bytes are the image as they are. CIFAR-100's (`cifar-100-binary.tar.gz`, unpacked
//! to `cifar-100-binary/`) is `train.bin` and `test.bin`, of records of 3 074 bytes: the coarse
//! label (0-19), the fine label (0-99), then the image. The official files hold 10 000 (CIFAR-10)
//! or 50 000 and 10 000 records; any whole number of records is accepted, and a length that is
//! not one is an error naming the file.
//!
//! The python versions (`cifar-10-batches-py/` with `data_batch_1` … `data_batch_5` and
//! `test_batch`; `cifar-100-python/` with `train` and `test`: the folders torchvision's
//! `CIFAR10(root, download=True)` and `CIFAR100(…)` leave in `root`) are pickled dicts whose
//! `data` is a NumPy `uint8` array of n × 3 072 (the same planes as a binary record's), with the
//! labels as a list of ints under `labels` (CIFAR-10) or `fine_labels` and `coarse_labels`
//! (CIFAR-100); read with [`super::pickle`], which evaluates nothing.
//!
//! `--data DIR` may name the versions' folder itself or the folder it was unpacked into; a `DIR`
//! with `train/` and `test/` folders is read as an image folder instead ([`super::folder`]), e.g.
//! the JPEG copy of CIFAR-10 with `train/airplane/0001.jpg`.

use std::path::{Path, PathBuf};

use super::catalog::{DatasetKind, ImageShape};
use super::dataset::{DataError, DataSource, Dataset, Splits, check_labels, read_file};
use super::folder;
use super::pickle::{self, Value};

/// Where one CIFAR data set's two versions keep their files, and which label a record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CifarFiles {
    /// The data set (its classes bound the labels).
    pub kind: DatasetKind,
    /// The binary version's folder, as its tarball unpacks.
    pub bin_dir: &'static str,
    /// The binary version's training files, in order.
    pub bin_train: &'static [&'static str],
    /// The binary version's test file.
    pub bin_test: &'static str,
    /// Label bytes before each image of a binary record (CIFAR-10 1; CIFAR-100 2, coarse then
    /// fine).
    pub label_bytes: usize,
    /// Which of them is this data set's label.
    pub label_at: usize,
    /// The python version's folder.
    pub py_dir: &'static str,
    /// The python version's training files, in order.
    pub py_train: &'static [&'static str],
    /// The python version's test file.
    pub py_test: &'static str,
    /// The key of the labels in a python batch.
    pub py_labels: &'static str,
}

impl CifarFiles {
    /// CIFAR-10's.
    pub const CIFAR10: CifarFiles = CifarFiles {
        kind: DatasetKind::Cifar10,
        bin_dir: "cifar-10-batches-bin",
        bin_train: &CIFAR10_TRAIN_FILES,
        bin_test: CIFAR10_TEST_FILE,
        label_bytes: 1,
        label_at: 0,
        py_dir: "cifar-10-batches-py",
        py_train: &CIFAR10_PY_TRAIN_FILES,
        py_test: CIFAR10_PY_TEST_FILE,
        py_labels: "labels",
    };
    /// CIFAR-100's, with its 100 fine labels.
    pub const CIFAR100: CifarFiles = CifarFiles {
        kind: DatasetKind::Cifar100,
        bin_dir: "cifar-100-binary",
        bin_train: &["train.bin"],
        bin_test: "test.bin",
        label_bytes: 2,
        label_at: 1,
        py_dir: "cifar-100-python",
        py_train: &["train"],
        py_test: "test",
        py_labels: "fine_labels",
    };
    /// CIFAR-100's, with its 20 coarse labels (the superclasses).
    pub const CIFAR100_COARSE: CifarFiles = CifarFiles {
        kind: DatasetKind::Cifar100Coarse,
        label_at: 0,
        py_labels: "coarse_labels",
        ..CifarFiles::CIFAR100
    };

    /// The files of `kind`, when it is a CIFAR data set.
    pub fn of(kind: DatasetKind) -> Option<&'static CifarFiles> {
        [
            &CifarFiles::CIFAR10,
            &CifarFiles::CIFAR100,
            &CifarFiles::CIFAR100_COARSE,
        ]
        .into_iter()
        .find(|f| f.kind == kind)
    }

    /// Bytes of one record of the binary version: the label bytes and a 3 × 32 × 32 image.
    pub const fn record(&self) -> usize {
        self.label_bytes + ImageShape::RGB_32.pixels()
    }

    /// Where the binary version is: `dir` itself or `dir/<bin_dir>`, whichever holds the first
    /// training file.
    pub fn binary_dir(&self, dir: &Path) -> Option<PathBuf> {
        [dir.to_path_buf(), dir.join(self.bin_dir)]
            .into_iter()
            .find(|d| d.join(self.bin_train[0]).is_file())
    }

    /// Where the python version is: `dir` itself or `dir/<py_dir>`, whichever holds the first
    /// training file.
    pub fn python_dir(&self, dir: &Path) -> Option<PathBuf> {
        [dir.to_path_buf(), dir.join(self.py_dir)]
            .into_iter()
            .find(|d| d.join(self.py_train[0]).is_file())
    }

    /// Each split's files of the binary version in `bin` (training, then test).
    pub fn binary_files(&self, bin: &Path) -> [Vec<PathBuf>; 2] {
        [
            self.bin_train.iter().map(|f| bin.join(f)).collect(),
            vec![bin.join(self.bin_test)],
        ]
    }

    /// Each split's files of the python version in `py` (training, then test).
    pub fn python_files(&self, py: &Path) -> [Vec<PathBuf>; 2] {
        [
            self.py_train.iter().map(|f| py.join(f)).collect(),
            vec![py.join(self.py_test)],
        ]
    }

    /// [`DataError::MissingFile`] naming the binary version's first file: what `dir` lacks
    /// when it holds no version.
    pub(crate) fn missing(&self, dir: &Path) -> DataError {
        DataError::MissingFile {
            path: dir.join(self.bin_train[0]),
            dataset: self.kind,
        }
    }
}

/// Bytes of one record of CIFAR-10's binary version: a label byte and a 3 × 32 × 32 image.
pub const CIFAR10_RECORD: usize = CifarFiles::CIFAR10.record();

/// The training files of CIFAR-10's binary version, in order.
pub const CIFAR10_TRAIN_FILES: [&str; 5] = [
    "data_batch_1.bin",
    "data_batch_2.bin",
    "data_batch_3.bin",
    "data_batch_4.bin",
    "data_batch_5.bin",
];

/// The test file of CIFAR-10's binary version.
pub const CIFAR10_TEST_FILE: &str = "test_batch.bin";

/// The training files of CIFAR-10's python version, in order.
pub const CIFAR10_PY_TRAIN_FILES: [&str; 5] = [
    "data_batch_1",
    "data_batch_2",
    "data_batch_3",
    "data_batch_4",
    "data_batch_5",
];

/// The test file of CIFAR-10's python version.
pub const CIFAR10_PY_TEST_FILE: &str = "test_batch";

/// Loads a CIFAR data set from `dir`: the binary version in `dir` or `dir/<bin_dir>`, else the
/// python version in `dir` or `dir/<py_dir>`, else an image folder (`dir/train`, `dir/test`).
///
/// # Errors
///
/// [`DataError::MissingDir`] when `dir` does not exist, [`DataError::MissingFile`] naming the
/// binary version's first file when `dir` holds no layout, and the readers' errors.
pub fn load_cifar(dir: &Path, files: &CifarFiles) -> Result<Splits, DataError> {
    let kind = files.kind;
    if !dir.is_dir() {
        return Err(DataError::MissingDir {
            path: dir.to_path_buf(),
            dataset: kind,
        });
    }
    if let Some(bin) = files.binary_dir(dir) {
        let [train, test] = files.binary_files(&bin);
        return Ok(Splits {
            kind,
            train: read_binary(&train, files)?,
            test: read_binary(&test, files)?,
            source: DataSource::Dir(bin),
            writers: None,
        });
    }
    if let Some(py) = files.python_dir(dir) {
        let [train, test] = files.python_files(&py);
        return Ok(Splits {
            kind,
            train: read_python(&train, files)?,
            test: read_python(&test, files)?,
            source: DataSource::Dir(py),
            writers: None,
        });
    }
    if folder::is_image_folder(dir) {
        return folder::load_image_folder(dir, kind);
    }
    Err(files.missing(dir))
}

/// [`load_cifar`] of CIFAR-10.
///
/// # Errors
///
/// As [`load_cifar`].
pub fn load_cifar10(dir: &Path) -> Result<Splits, DataError> {
    load_cifar(dir, &CifarFiles::CIFAR10)
}

/// One pickled batch of the python version: its labels, and its images (or where they are).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PyBatch {
    /// The labels, checked against the classes.
    pub labels: Vec<u8>,
    /// The byte offset of the first image in the file, when the pickle holds the pixels as one
    /// run of raw bytes (every file Python 2 or NumPy's own reduction at protocol 3 and up
    /// wrote); `None` for Python 3's protocol 2, which re-encodes them.
    pub offset: Option<u64>,
    /// The images (`C × H × W` each), when asked for or when there is no `offset`.
    pub images: Vec<u8>,
}

/// Reads the pickled batch `path`: its `data` array (`uint8`, `n × 3 072` or `n × 3 × 32 × 32`,
/// C order) and its list (or integer array) of `n` labels under `files.py_labels`; the images are
/// kept when `keep_images` (or when they are not one run of the file).
///
/// # Errors
///
/// [`DataError::MissingFile`] / [`DataError::Io`]; [`DataError::Format`] naming the file for a
/// pickle that cannot be read or whose dict is not the python version's;
/// [`DataError::LabelOutOfRange`].
pub(crate) fn read_python_batch(
    path: &Path,
    files: &CifarFiles,
    keep_images: bool,
) -> Result<PyBatch, DataError> {
    let kind = files.kind;
    let labels_key = files.py_labels;
    let bytes = read_file(path, kind)?;
    let format = |reason: String| DataError::Format {
        path: path.to_path_buf(),
        reason,
    };
    let root = pickle::parse(&bytes).map_err(|e| format(format!("not a readable pickle: {e}")))?;
    let Some(Value::Array(data)) = root.get_in(&bytes, "data") else {
        return Err(format(
            "no NumPy array under the key 'data' (is this a batch of the python version?)".into(),
        ));
    };
    let per = ImageShape::RGB_32.pixels();
    let n = data.shape.first().copied().unwrap_or(0);
    if data.dtype.trim_start_matches(['|', '=']) != "u1"
        || data.fortran
        || data.len() != n * per
        || n == 0
    {
        return Err(format(format!(
            "'data' is a {}-array of shape {:?}{}: the python version's is uint8 (u1) of n × 3072, \
             C order",
            data.dtype,
            data.shape,
            if data.fortran {
                " in Fortran order"
            } else {
                ""
            }
        )));
    }
    let raw = data
        .raw(&bytes)
        .filter(|r| r.len() == n * per)
        .ok_or_else(|| format(format!("'data' holds other than {} bytes", n * per)))?;
    let labels = root
        .get_in(&bytes, labels_key)
        .and_then(|v| v.ints(&bytes))
        .ok_or_else(|| format(format!("no list of ints under the key '{labels_key}'")))?;
    if labels.len() != n {
        return Err(format(format!(
            "{} labels under '{labels_key}' for {n} images",
            labels.len()
        )));
    }
    let classes = kind.info().classes();
    let labels = labels
        .into_iter()
        .map(|l| u8::try_from(l).unwrap_or(u8::MAX))
        .collect();
    let labels = check_labels(labels, classes, path)?;
    let offset = match &data.data {
        Value::Bytes(r) => Some(r.start as u64),
        _ => None,
    };
    Ok(PyBatch {
        labels,
        offset,
        images: if keep_images || offset.is_none() {
            raw.to_vec()
        } else {
            Vec::new()
        },
    })
}

/// The images and labels of the pickled batches `paths`, one after the other.
///
/// # Errors
///
/// As [`read_python_batch`].
pub fn read_python(paths: &[PathBuf], files: &CifarFiles) -> Result<Dataset, DataError> {
    let mut data = Dataset {
        shape: ImageShape::RGB_32,
        ..Dataset::default()
    };
    for path in paths {
        let batch = read_python_batch(path, files, true)?;
        data.labels.extend(batch.labels);
        data.images.extend(batch.images);
    }
    Ok(data)
}

/// [`DataError::Format`] unless `len` bytes are a whole, non-zero number of records.
pub(crate) fn check_length(path: &Path, len: usize, files: &CifarFiles) -> Result<(), DataError> {
    let record = files.record();
    if len == 0 || !len.is_multiple_of(record) {
        return Err(DataError::Format {
            path: path.to_path_buf(),
            reason: format!(
                "{len} bytes is not a whole number of {} records of {record} bytes ({} label \
                 byte(s) and 3 072 pixels)",
                files.kind.info().name,
                files.label_bytes
            ),
        });
    }
    Ok(())
}

/// The records of `paths`, one after the other.
///
/// # Errors
///
/// [`DataError::MissingFile`] / [`DataError::Io`] for a file that cannot be read,
/// [`DataError::Format`] for one whose length is not a whole number of records (or is 0),
/// [`DataError::LabelOutOfRange`] for a label past the data set's classes.
pub fn read_binary(paths: &[PathBuf], files: &CifarFiles) -> Result<Dataset, DataError> {
    let shape = ImageShape::RGB_32;
    let record = files.record();
    let mut data = Dataset {
        shape,
        ..Dataset::default()
    };
    for path in paths {
        let bytes = read_file(path, files.kind)?;
        check_length(path, bytes.len(), files)?;
        let mut labels = Vec::with_capacity(bytes.len() / record);
        data.images.reserve(bytes.len() / record * shape.pixels());
        for r in bytes.chunks_exact(record) {
            labels.push(r[files.label_at]);
            data.images.extend_from_slice(&r[files.label_bytes..]);
        }
        data.labels
            .extend(check_labels(labels, files.kind.info().classes(), path)?);
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// Records written by the format's layout: label, then R, G, B planes.
    fn records(labels: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, &l) in labels.iter().enumerate() {
            out.push(l);
            for c in 0..3u8 {
                out.extend((0..1024).map(|p| (p as u8) ^ c ^ (i as u8)));
            }
        }
        out
    }

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("edgecfl-cifar-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn binary_version_reads_planes_and_labels_in_order() {
        let top = temp("ok");
        let dir = top.join("cifar-10-batches-bin");
        fs::create_dir_all(&dir).unwrap();
        for (k, f) in CIFAR10_TRAIN_FILES.iter().enumerate() {
            fs::write(dir.join(f), records(&[k as u8, 9])).unwrap();
        }
        fs::write(dir.join(CIFAR10_TEST_FILE), records(&[3])).unwrap();
        let data = load_cifar10(&top).unwrap();
        assert_eq!(data.train.labels, [0, 9, 1, 9, 2, 9, 3, 9, 4, 9]);
        assert_eq!(data.test.labels, [3]);
        assert_eq!(data.train.shape, ImageShape::RGB_32);
        // Image 1 of file 1 (record index 1): green plane (c = 1), pixel 5 = 5 ^ 1 ^ 1.
        assert_eq!(data.train.image(1)[1024 + 5], 5);
        assert_eq!(data.train.image(0)[2048], 2);
        assert_eq!(data.source, DataSource::Dir(dir.clone()));

        // A record cut short names the file.
        let mut cut = records(&[1, 2]);
        cut.pop();
        fs::write(dir.join(CIFAR10_TEST_FILE), cut).unwrap();
        let err = load_cifar10(&dir).unwrap_err();
        assert!(
            matches!(&err, DataError::Format { path, .. } if path.ends_with("test_batch.bin")),
            "{err}"
        );
        // A label past 9.
        fs::write(dir.join(CIFAR10_TEST_FILE), records(&[10])).unwrap();
        let err = load_cifar10(&dir).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::LabelOutOfRange {
                    label: 10,
                    classes: 10,
                    ..
                }
            ),
            "{err}"
        );
        // A missing batch.
        fs::remove_file(dir.join("data_batch_3.bin")).unwrap();
        let err = load_cifar10(&dir).unwrap_err();
        assert!(err.to_string().contains("data_batch_3.bin"), "{err}");
        // Neither layout.
        let empty = temp("empty");
        let err = load_cifar10(&empty).unwrap_err();
        assert!(matches!(err, DataError::MissingFile { .. }), "{err}");
        assert!(err.to_string().contains("image folder"), "{err}");
        fs::remove_dir_all(&top).unwrap();
        fs::remove_dir_all(&empty).unwrap();
    }
}
