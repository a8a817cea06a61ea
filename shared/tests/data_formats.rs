//! The readers of the data sets' own formats, on files written by Python: CIFAR-10's python
//! version as Python 2 wrote it, as Python 3 writes it at protocols 2 and 5, each against the
//! binary version of the same images (`tests/python/cifar_pickles.py`); SVHN's MATLAB files as
//! scipy writes them, plain and compressed, against numpy's transpose of the same arrays
//! (`tests/python/svhn_mat.py`); in full and a client's selection at a time. Skipped, with a
//! line, without python3, numpy and scipy (`.ci/run` installs them).

use std::path::{Path, PathBuf};
use std::process::Command;

use edgecfl_shared::data::{DataError, DataLabels, Dataset, DatasetKind, ImageShape, load};

/// The files `tests/python/SCRIPT.py` writes, in a folder of this test process.
fn written(script: &str) -> Option<PathBuf> {
    let python = Command::new("python3")
        .args(["-c", "import numpy, scipy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !python {
        eprintln!("skipped: needs python3 with numpy and scipy (.ci/run installs them)");
        return None;
    }
    let out =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{script}-{}", std::process::id()));
    let done = out.join("done");
    if !done.is_file() {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/python/{script}.py"));
        let run = Command::new("python3")
            .arg(&script)
            .arg(&out)
            .output()
            .expect("python3 runs");
        assert!(
            run.status.success(),
            "{}: {}",
            script.display(),
            String::from_utf8_lossy(&run.stderr)
        );
        std::fs::write(&done, "").unwrap();
    }
    Some(out)
}

/// Every pickled layout loads to the binary version's images and labels, from the folder it was
/// unpacked into or the batches' folder itself, and a selection reads the same images.
#[test]
fn python_versions_of_cifar10_equal_the_binary_version() {
    let Some(root) = written("cifar_pickles") else {
        return;
    };
    let truth = load(DatasetKind::Cifar10, Some(&root.join("bin"))).unwrap();
    assert_eq!(truth.train.len(), 11);
    assert_eq!(truth.test.len(), 2);
    for layout in ["py2", "py3p2", "py3p5"] {
        for dir in [
            root.join(layout),
            root.join(layout).join("cifar-10-batches-py"),
        ] {
            let got = load(DatasetKind::Cifar10, Some(&dir)).unwrap();
            assert_eq!(got.train, truth.train, "{layout}: {}", dir.display());
            assert_eq!(got.test, truth.test, "{layout}");
            let labels = DataLabels::load(DatasetKind::Cifar10, Some(&dir)).unwrap();
            assert_eq!(labels.train, truth.train.labels, "{layout}");
            let idx = [10, 0, 4, 10, 3];
            assert_eq!(
                labels.select_train(&idx).unwrap(),
                truth.train.select(&idx),
                "{layout}"
            );
            assert_eq!(
                labels.select_test(&[1]).unwrap(),
                truth.test.select(&[1]),
                "{layout}"
            );
        }
    }
}

/// CIFAR-100's python version (as its authors pickled it) loads to its binary version's images,
/// with the fine labels for `cifar100` and the coarse ones for `cifar100-coarse`, in full and a
/// selection at a time.
#[test]
fn python_version_of_cifar100_equals_the_binary_version() {
    let Some(root) = written("cifar_pickles") else {
        return;
    };
    let mut seen = Vec::new();
    for kind in [DatasetKind::Cifar100, DatasetKind::Cifar100Coarse] {
        let truth = load(kind, Some(&root.join("c100bin"))).unwrap();
        assert_eq!((truth.train.len(), truth.test.len()), (5, 3));
        let got = load(kind, Some(&root.join("c100py"))).unwrap();
        assert_eq!(got.train, truth.train, "{kind}");
        assert_eq!(got.test, truth.test, "{kind}");
        let labels = DataLabels::load(kind, Some(&root.join("c100py"))).unwrap();
        assert_eq!(labels.test, truth.test.labels, "{kind}");
        assert_eq!(
            labels.select_train(&[4, 1, 1]).unwrap(),
            truth.train.select(&[4, 1, 1]),
            "{kind}"
        );
        seen.push(truth.train.labels);
    }
    // The two label sets are the files' two lists, not one read twice.
    assert_ne!(seen[0], seen[1]);
    assert!(seen[1].iter().all(|&l| l < 20));
}

/// A pickle cut short, or a pickle of something else, is an error naming the file.
#[test]
fn a_broken_pickle_names_its_file() {
    let Some(root) = written("cifar_pickles") else {
        return;
    };
    let dir = root.join("broken");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(root.join("py2/cifar-10-batches-py")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    let batch = dir.join("data_batch_3");
    let bytes = std::fs::read(&batch).unwrap();
    std::fs::write(&batch, &bytes[..bytes.len() - 100]).unwrap();
    for err in [
        load(DatasetKind::Cifar10, Some(&dir)).unwrap_err(),
        DataLabels::load(DatasetKind::Cifar10, Some(&dir)).unwrap_err(),
    ] {
        assert!(
            matches!(&err, DataError::Format { path, reason } if path.ends_with("data_batch_3") && reason.contains("cut short")),
            "{err}"
        );
    }
    // A pickled dict without the batch's keys (pickle.dumps({'x': 1}, protocol=2)).
    std::fs::write(&batch, b"\x80\x02}q\x00X\x01\x00\x00\x00xq\x01K\x01s.").unwrap();
    let err = load(DatasetKind::Cifar10, Some(&dir)).unwrap_err();
    assert!(
        err.to_string().contains("data_batch_3") && err.to_string().contains("'data'"),
        "{err}"
    );
}

/// Records of a label byte and a `C × H × W` image, as `svhn_mat.py` writes what it expects.
fn records(path: &Path) -> Dataset {
    let bytes = std::fs::read(path).unwrap();
    let per = 1 + ImageShape::RGB_32.pixels();
    assert_eq!(bytes.len() % per, 0);
    Dataset {
        images: bytes
            .chunks_exact(per)
            .flat_map(|r| r[1..].to_vec())
            .collect(),
        labels: bytes.chunks_exact(per).map(|r| r[0]).collect(),
        shape: ImageShape::RGB_32,
    }
}

/// SVHN's `X` (32 × 32 × 3 × N, MATLAB's column-major order) reads as numpy's transpose to
/// channel, row, column, and its labels 1-10 as the digits (10 is 0), from scipy's plain and
/// compressed files; a selection reads the same images; a label outside 1-10 names the file.
#[test]
fn svhn_mat_files_read_as_numpy_transposes_them() {
    let Some(root) = written("svhn_mat") else {
        return;
    };
    for folder in ["svhn", "svhn-z"] {
        let dir = root.join(folder);
        let got = load(DatasetKind::Svhn, Some(&dir)).unwrap();
        assert_eq!(
            got.train,
            records(&dir.join("train_32x32.mat.expected")),
            "{folder}"
        );
        assert_eq!(
            got.test,
            records(&dir.join("test_32x32.mat.expected")),
            "{folder}"
        );
        assert_eq!(got.train.labels[0], 0, "the files' 10 is the digit 0");
        let labels = DataLabels::load(DatasetKind::Svhn, Some(&dir)).unwrap();
        assert_eq!(labels.train, got.train.labels);
        assert_eq!(
            labels.select_train(&[4, 0, 4]).unwrap(),
            got.train.select(&[4, 0, 4])
        );
    }
    let err = load(DatasetKind::Svhn, Some(&root)).unwrap_err();
    assert!(
        matches!(&err, DataError::MissingFile { path, .. } if path.ends_with("train_32x32.mat")),
        "{err}"
    );
    // The test file with one byte short.
    let broken = root.join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::copy(
        root.join("svhn/train_32x32.mat"),
        broken.join("train_32x32.mat"),
    )
    .unwrap();
    let test = std::fs::read(root.join("svhn/test_32x32.mat")).unwrap();
    std::fs::write(broken.join("test_32x32.mat"), &test[..test.len() - 1]).unwrap();
    let err = load(DatasetKind::Svhn, Some(&broken)).unwrap_err();
    assert!(
        matches!(&err, DataError::Format { path, reason } if path.ends_with("test_32x32.mat") && reason.contains("cut short")),
        "{err}"
    );
}
