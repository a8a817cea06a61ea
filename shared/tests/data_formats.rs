//! The readers of the data sets' own formats, on files written by Python: CIFAR-10's python
//! version as Python 2 wrote it, as Python 3 writes it at protocols 2 and 5, each against the
//! binary version of the same images (`tests/python/cifar_pickles.py`); SVHN's MATLAB files as
//! scipy writes them, plain and compressed, against numpy's transpose of the same arrays
//! (`tests/python/svhn_mat.py`); FEMNIST in LEAF's JSON as its preprocessing writes it
//! (`tests/python/leaf_femnist.py`); in full and a client's selection at a time. Skipped, with a
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

/// FEMNIST as LEAF's preprocessing writes it (`tests/python/leaf_femnist.py`: `json.dump` of
/// `np.asarray(img).flatten() / 255` rows): the bytes numpy had, in file-name, then `users`,
/// then row order, each sample's writer, a client's selection; and the `writers` partition,
/// by hand: the writers with test samples, one a client, each tested on its own test samples.
#[test]
fn femnist_in_leaf_json_reads_as_numpy_wrote_it_with_its_writers() {
    use edgecfl_shared::data::{PartitionError, PartitionSpec, client_datasets, partition_of};
    let Some(root) = written("leaf_femnist") else {
        return;
    };
    let truth = |split: &str| {
        let read = |ext: &str| std::fs::read(root.join("truth").join(format!("{split}.{ext}")));
        let writers: Vec<String> = String::from_utf8(read("writers").unwrap())
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        let data = Dataset {
            images: read("images").unwrap(),
            labels: read("labels").unwrap(),
            shape: ImageShape::GREY_28,
        };
        (data, writers)
    };
    let (train, train_writers) = truth("train");
    let (test, test_writers) = truth("test");
    let got = load(DatasetKind::Femnist, Some(&root)).unwrap();
    assert_eq!((got.train.len(), got.test.len()), (10, 4));
    assert_eq!(got.train, train);
    assert_eq!(got.test, test);
    let writers = got.writers.clone().unwrap();
    assert_eq!(writers.names, ["w_b", "w_only_train", "w_z", "w_a"]);
    let names = |ids: &[u32]| -> Vec<String> {
        ids.iter()
            .map(|&w| writers.names[w as usize].clone())
            .collect()
    };
    assert_eq!(names(&writers.train), train_writers);
    assert_eq!(names(&writers.test), test_writers);

    let labels = DataLabels::load(DatasetKind::Femnist, Some(&root)).unwrap();
    assert_eq!(labels.train, train.labels);
    assert_eq!(labels.writers.as_ref(), Some(&writers));
    let idx = [9, 0, 5, 9, 4];
    assert_eq!(labels.select_train(&idx).unwrap(), train.select(&idx));
    assert_eq!(labels.select_test(&[3, 1]).unwrap(), test.select(&[3, 1]));

    // Train order: w_b 0-3, w_only_train 4, w_z 5-7, w_a 8-9; test: w_b 0, w_a 1-2, w_z 3.
    let spec: PartitionSpec = "writers".parse().unwrap();
    assert_eq!(spec.to_string(), "writers");
    let part = partition_of(&spec, &got.train.labels, 62, Some(&writers), 3, 0).unwrap();
    let shards: Vec<(Vec<usize>, Option<Vec<usize>>)> = part
        .clients
        .iter()
        .map(|c| (c.train.clone(), c.test.clone()))
        .collect();
    assert_eq!(
        shards,
        [
            (vec![0, 1, 2, 3], Some(vec![0])),
            (vec![5, 6, 7], Some(vec![3])),
            (vec![8, 9], Some(vec![1, 2])),
        ]
    );
    assert_eq!(part.truth, None);
    let (_, own_test) = client_datasets(&got, &part.clients[2]).unwrap();
    assert_eq!(own_test, test.select(&[1, 2]));
    assert_eq!(
        partition_of(&spec, &got.train.labels, 62, Some(&writers), 4, 0).unwrap_err(),
        PartitionError::TooFewWriters {
            clients: 4,
            writers: 3
        }
    );
    // Without writers, and on a data set that has none, `writers` is refused.
    assert!(matches!(
        partition_of(&spec, &got.train.labels, 62, None, 3, 0),
        Err(PartitionError::Spec(_))
    ));
    assert!(spec.check_dataset(DatasetKind::Femnist).is_ok());
    let err = spec.check_dataset(DatasetKind::Mnist).unwrap_err();
    assert!(err.to_string().contains("femnist"), "{err}");
    // Every other scheme works on FEMNIST's 62 classes.
    let iid = partition_of(&"iid".parse().unwrap(), &got.train.labels, 62, None, 2, 0).unwrap();
    assert_eq!(iid.clients.iter().map(|c| c.train.len()).sum::<usize>(), 10);
}

/// What is not LEAF's layout is an error naming the file, and the user where there is one.
#[test]
fn a_broken_leaf_file_names_its_file_and_user() {
    let root =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("leaf-broken-{}", std::process::id()));
    let row = |v: &str, n: usize| format!("[{}]", vec![v; n].join(", "));
    let file = |users: &str, samples: &str, data: &str| {
        format!(r#"{{"users": [{users}], "num_samples": [{samples}], "user_data": {{{data}}}}}"#)
    };
    let good_user = format!(r#""u1": {{"x": [{}], "y": [3]}}"#, row("0.5", 784));
    let cases = [
        (
            file(
                r#""u1""#,
                "1",
                &format!(r#""u1": {{"x": [{}], "y": [3]}}"#, row("0.5", 783)),
            ),
            "784",
        ),
        (
            file(
                r#""u1""#,
                "1",
                &format!(r#""u1": {{"x": [{}], "y": [3]}}"#, row("1.5", 784)),
            ),
            "[0, 1]",
        ),
        (
            file(
                r#""u1""#,
                "1",
                &format!(r#""u1": {{"x": [{}], "y": [62]}}"#, row("0", 784)),
            ),
            "label 62",
        ),
        (
            file(r#""u1""#, "2", &good_user),
            "\"u1\": num_samples says 2",
        ),
        (
            file(r#""u1", "u2""#, "1, 1", &good_user),
            "\"u2\" is in users",
        ),
        (
            file("", "", &good_user),
            "\"u1\", which users does not list",
        ),
        (file(r#""u1""#, "1, 1", &good_user), "1 users but 2"),
        ("[1, 2]".to_string(), "not LEAF's JSON layout"),
    ];
    for (text, says) in cases {
        let _ = std::fs::remove_dir_all(&root);
        for split in ["train", "test"] {
            std::fs::create_dir_all(root.join(split)).unwrap();
            std::fs::write(
                root.join(split).join("ok.json"),
                file(r#""u1""#, "1", &good_user),
            )
            .unwrap();
        }
        std::fs::write(root.join("train").join("bad.json"), &text).unwrap();
        for err in [
            load(DatasetKind::Femnist, Some(&root)).unwrap_err(),
            DataLabels::load(DatasetKind::Femnist, Some(&root)).unwrap_err(),
        ] {
            let msg = err.to_string();
            assert!(
                msg.contains("bad.json") && msg.contains(says),
                "{says}: {msg}"
            );
        }
    }
    std::fs::remove_file(root.join("train").join("bad.json")).unwrap();
    assert!(load(DatasetKind::Femnist, Some(&root)).is_ok());
    std::fs::remove_file(root.join("test").join("ok.json")).unwrap();
    let err = load(DatasetKind::Femnist, Some(&root)).unwrap_err();
    assert!(matches!(err, DataError::MissingFile { .. }), "{err}");
    std::fs::remove_dir_all(root.join("test")).unwrap();
    let err = load(DatasetKind::Femnist, Some(&root)).unwrap_err();
    assert!(
        matches!(err, DataError::MissingDir { ref path, .. } if path.ends_with("test")),
        "{err}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}
