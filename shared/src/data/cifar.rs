//! CIFAR-10 from the files users have: the official binary version, the pickled "python version"
//! (what torchvision downloads), or an image folder.
//!
//! The binary version (`cifar-10-binary.tar.gz`, unpacked to `cifar-10-batches-bin/`) is five
//! training files `data_batch_1.bin` … `data_batch_5.bin` and `test_batch.bin`, each of records of
//! 3 073 bytes: the label (0-9), then the 32 × 32 red plane, the green plane and the blue plane,
//! each row-major: the `C × H × W` order the product keeps images in, so a record's last 3 072
//! bytes are the image as they are. The official files hold 10 000 records each; any whole number
//! of records is accepted, and a length that is not one is an error naming the file.
//!
//! The python version (`cifar-10-python.tar.gz`, unpacked to `cifar-10-batches-py/`, the folder
//! torchvision's `CIFAR10(root, download=True)` leaves in `root`) is `data_batch_1` …
//! `data_batch_5` and `test_batch`, each a pickled dict whose `data` is a NumPy `uint8` array of
//! 10 000 × 3 072 (the same planes as a binary record's) and `labels` a list of ints; read with
//! [`super::pickle`], which evaluates nothing.
//!
//! `--data DIR` may name `cifar-10-batches-bin/` or `cifar-10-batches-py/` itself or the folder
//! it was unpacked into; a `DIR` with `train/` and `test/` folders is read as an image folder
//! instead ([`super::folder`]), e.g. the JPEG copy of CIFAR-10 with `train/airplane/0001.jpg`.

use std::path::{Path, PathBuf};

use super::catalog::{DatasetKind, ImageShape};
use super::dataset::{DataError, DataSource, Dataset, Splits, check_labels, read_file};
use super::folder;
use super::pickle::{self, Value};

/// Bytes of one record of the binary version: a label byte and a 3 × 32 × 32 image.
pub const CIFAR10_RECORD: usize = 1 + ImageShape::RGB_32.pixels();

/// The training files of the binary version, in order.
pub const CIFAR10_TRAIN_FILES: [&str; 5] = [
    "data_batch_1.bin",
    "data_batch_2.bin",
    "data_batch_3.bin",
    "data_batch_4.bin",
    "data_batch_5.bin",
];

/// The test file of the binary version.
pub const CIFAR10_TEST_FILE: &str = "test_batch.bin";

/// The training files of the python version, in order.
pub const CIFAR10_PY_TRAIN_FILES: [&str; 5] = [
    "data_batch_1",
    "data_batch_2",
    "data_batch_3",
    "data_batch_4",
    "data_batch_5",
];

/// The test file of the python version.
pub const CIFAR10_PY_TEST_FILE: &str = "test_batch";

/// Loads CIFAR-10 from `dir`: the binary version in `dir` or `dir/cifar-10-batches-bin`, else
/// the python version in `dir` or `dir/cifar-10-batches-py`, else an image folder (`dir/train`,
/// `dir/test`).
///
/// # Errors
///
/// [`DataError::MissingDir`] when `dir` does not exist, [`DataError::MissingFile`] naming
/// `data_batch_1.bin` when `dir` holds neither layout, and the readers' errors.
pub fn load_cifar10(dir: &Path) -> Result<Splits, DataError> {
    let kind = DatasetKind::Cifar10;
    if !dir.is_dir() {
        return Err(DataError::MissingDir {
            path: dir.to_path_buf(),
            dataset: kind,
        });
    }
    match binary_dir(dir) {
        Some(bin) => {
            let files: Vec<PathBuf> = CIFAR10_TRAIN_FILES.iter().map(|f| bin.join(f)).collect();
            Ok(Splits {
                kind,
                train: read_binary(&files)?,
                test: read_binary(&[bin.join(CIFAR10_TEST_FILE)])?,
                source: DataSource::Dir(bin),
            })
        }
        None => match python_dir(dir) {
            Some(py) => {
                let train: Vec<PathBuf> =
                    CIFAR10_PY_TRAIN_FILES.iter().map(|f| py.join(f)).collect();
                Ok(Splits {
                    kind,
                    train: read_python(&train)?,
                    test: read_python(&[py.join(CIFAR10_PY_TEST_FILE)])?,
                    source: DataSource::Dir(py),
                })
            }
            None if folder::is_image_folder(dir) => folder::load_image_folder(dir, kind),
            None => Err(DataError::MissingFile {
                path: dir.join(CIFAR10_TRAIN_FILES[0]),
                dataset: kind,
            }),
        },
    }
}

/// Where the python version is: `dir` itself or `dir/cifar-10-batches-py`, whichever holds
/// `data_batch_1`.
pub fn python_dir(dir: &Path) -> Option<PathBuf> {
    [dir.to_path_buf(), dir.join("cifar-10-batches-py")]
        .into_iter()
        .find(|d| d.join(CIFAR10_PY_TRAIN_FILES[0]).is_file())
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
/// C order) and its `labels_key` list (or integer array) of `n` labels; the images are kept when
/// `keep_images` (or when they are not one run of the file).
///
/// # Errors
///
/// [`DataError::MissingFile`] / [`DataError::Io`]; [`DataError::Format`] naming the file for a
/// pickle that cannot be read or whose dict is not the python version's;
/// [`DataError::LabelOutOfRange`].
pub(crate) fn read_python_batch(
    path: &Path,
    labels_key: &str,
    keep_images: bool,
) -> Result<PyBatch, DataError> {
    let kind = DatasetKind::Cifar10;
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

/// The images and labels of the pickled batches `files`, one after the other.
///
/// # Errors
///
/// As [`read_python_batch`].
pub fn read_python(files: &[PathBuf]) -> Result<Dataset, DataError> {
    let mut data = Dataset {
        shape: ImageShape::RGB_32,
        ..Dataset::default()
    };
    for path in files {
        let batch = read_python_batch(path, "labels", true)?;
        data.labels.extend(batch.labels);
        data.images.extend(batch.images);
    }
    Ok(data)
}

/// Where the binary version is: `dir` itself or `dir/cifar-10-batches-bin`, whichever holds
/// `data_batch_1.bin`.
pub fn binary_dir(dir: &Path) -> Option<PathBuf> {
    [dir.to_path_buf(), dir.join("cifar-10-batches-bin")]
        .into_iter()
        .find(|d| d.join(CIFAR10_TRAIN_FILES[0]).is_file())
}

/// [`DataError::Format`] unless `len` bytes are a whole, non-zero number of records.
pub(crate) fn check_length(path: &Path, len: usize) -> Result<(), DataError> {
    if len == 0 || !len.is_multiple_of(CIFAR10_RECORD) {
        return Err(DataError::Format {
            path: path.to_path_buf(),
            reason: format!(
                "{len} bytes is not a whole number of CIFAR-10 records of {CIFAR10_RECORD} bytes \
                 (a label byte and 3 072 pixels)"
            ),
        });
    }
    Ok(())
}

/// The records of `files`, one after the other.
///
/// # Errors
///
/// [`DataError::MissingFile`] / [`DataError::Io`] for a file that cannot be read,
/// [`DataError::Format`] for one whose length is not a whole number of records (or is 0),
/// [`DataError::LabelOutOfRange`] for a label above 9.
pub fn read_binary(files: &[PathBuf]) -> Result<Dataset, DataError> {
    let shape = ImageShape::RGB_32;
    let mut data = Dataset {
        shape,
        ..Dataset::default()
    };
    for path in files {
        let bytes = read_file(path, DatasetKind::Cifar10)?;
        check_length(path, bytes.len())?;
        let mut labels = Vec::with_capacity(bytes.len() / CIFAR10_RECORD);
        data.images
            .reserve(bytes.len() / CIFAR10_RECORD * shape.pixels());
        for record in bytes.chunks_exact(CIFAR10_RECORD) {
            labels.push(record[0]);
            data.images.extend_from_slice(&record[1..]);
        }
        data.labels.extend(check_labels(
            labels,
            DatasetKind::Cifar10.info().classes(),
            path,
        )?);
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
