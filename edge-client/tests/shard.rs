//! The edge client's shard, loaded the streaming way (labels first, then only the shard's
//! images, kept as bytes), equals the shard cut out of the fully loaded dataset the old way
//! (`FashionMnist::load`, then `LocalData::from_dataset_shifted` of the partition's indices):
//! the same images, labels and order, training and local test sets alike; and so does a shard
//! whose training images went to a scratch file (`--spill-above`), which trains to the same
//! model as the shard in memory.

use std::path::{Path, PathBuf};

use edge_client::shard::ShardArgs;
use edgecfl_shared::cluster::spectral::signature_of;
use edgecfl_shared::data::Splits;
use edgecfl_shared::data::fmnist::{FashionMnist, SYSTEM_DIR};
use edgecfl_shared::data::partition::{PartitionSpec, local_test_indices, partition};
use edgecfl_shared::model::{ModelKind, Params};
use edgecfl_shared::train::{Backend, LocalData, TrainConfig, train_local};

fn subset() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/fmnist-subset")
}

fn args(dir: &Path, spec: Option<&str>, seed: u64, index: usize, of: usize) -> ShardArgs {
    ShardArgs {
        dataset: edgecfl_shared::data::DatasetKind::Fmnist,
        data: Some(dir.to_path_buf()),
        partition: spec.map(|s| s.parse::<PartitionSpec>().unwrap()),
        seed,
        index,
        of,
        spill_above: 16.0,
        spill_dir: None,
    }
}

/// The old way: the whole dataset in memory, the shard selected from it.
fn old_way(data: &Splits, a: &ShardArgs) -> (LocalData, LocalData) {
    let Some(spec) = &a.partition else {
        let all: Vec<usize> = (0..data.train.len()).collect();
        let test: Vec<usize> = (0..data.test.len()).collect();
        return (
            LocalData::from_dataset(&data.train, &all, 0),
            LocalData::from_dataset(&data.test, &test, 0),
        );
    };
    let part = partition(spec, &data.train.labels, a.of, a.seed).unwrap();
    let shard = &part.clients[a.index];
    let test = local_test_indices(shard, &data.test.labels);
    let (r, s) = (shard.rotation, shard.label_shift);
    (
        LocalData::from_dataset_shifted(&data.train, &shard.train, r, s),
        LocalData::from_dataset_shifted(&data.test, &test, r, s),
    )
}

fn assert_same(data: &Splits, a: &ShardArgs) {
    assert_loads(a, old_way(data, a));
}

/// `a`'s shard is `(train, test)`: the same labels and images, in the same order.
fn assert_loads(a: &ShardArgs, (train, test): (LocalData, LocalData)) {
    let shard = a.load().unwrap();
    let what = format!(
        "{:?} {}/{}",
        a.partition.as_ref().map(|p| p.to_string()),
        a.index,
        a.of
    );
    assert!(!shard.train.is_empty(), "{what}");
    assert_eq!(shard.train.labels, train.labels, "{what}: training labels");
    assert!(
        shard.train.pixels().unwrap() == train.pixels().unwrap(),
        "{what}: training images"
    );
    assert_eq!(shard.test.labels, test.labels, "{what}: test labels");
    assert!(
        shard.test.pixels().unwrap() == test.pixels().unwrap(),
        "{what}: test images"
    );
}

/// (spec, seed, index, of): label skew, Dirichlet, rotations (a rotated client), label shifts,
/// MT-HFL tasks, and rotations over a base.
const CASES: [(&str, u64, usize, usize); 7] = [
    ("label:2", 3, 4, 10),
    ("dir:0.1", 1, 2, 10),
    ("rotate:4", 5, 3, 8),
    ("rotate:4", 5, 0, 8),
    ("shift:3", 2, 2, 6),
    ("tasks:fmnist3", 0, 8, 10),
    ("rotate:2*shift:3", 4, 4, 10),
];

#[test]
fn streamed_shard_equals_old_way_on_bundled_subset() {
    let dir = subset();
    let data = FashionMnist::load_dir(&dir).unwrap();
    for (spec, seed, index, of) in CASES {
        assert_same(&data, &args(&dir, Some(spec), seed, index, of));
    }
    // Without --partition: the whole directory, in file order.
    assert_same(&data, &args(&dir, None, 0, 0, 1));
}

/// On the full Fashion-MNIST of the Debian package, when installed.
#[test]
fn streamed_shard_equals_old_way_on_debian_files() {
    let dir = Path::new(SYSTEM_DIR);
    if !dir.is_dir() {
        eprintln!("skipped: {SYSTEM_DIR} not installed");
        return;
    }
    let data = FashionMnist::load_dir(dir).unwrap();
    for (spec, seed, index, of) in CASES {
        assert_same(&data, &args(dir, Some(spec), seed, index, of));
    }
}

/// With `--spill-above 0` the training images go to a scratch file (rotated and label-shifted
/// shards included): the same bytes read back, the same model trained, nothing left in the
/// directory; the test set stays in memory.
#[test]
fn spilled_shard_equals_the_shard_in_memory_and_trains_alike() {
    let dir = subset();
    let data = FashionMnist::load_dir(&dir).unwrap();
    let scratch = std::env::temp_dir().join(format!("edgecfl-shard-spill-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let cfg = TrainConfig {
        epochs: 1,
        batch_size: 10,
        lr: 0.05,
        momentum: 0.5,
        seed: 3,
        threads: 1,
    };
    let device = Backend::Flex.device().unwrap();
    let params = Params::init(ModelKind::LeNet5, 0);
    for (spec, seed, index, of) in [CASES[2], CASES[4], CASES[0]] {
        let mut a = args(&dir, Some(spec), seed, index, of);
        a.spill_above = 0.0;
        a.spill_dir = Some(scratch.clone());
        assert_same(&data, &a);
        let spilled = a.load().unwrap();
        assert!(
            spilled.train.is_spilled() && !spilled.test.is_spilled(),
            "{spec}"
        );
        assert_eq!(spilled.train.bytes_in_memory(), 0);
        let memory = args(&dir, Some(spec), seed, index, of).load().unwrap();
        assert!(!memory.train.is_spilled());
        let (m, _) = train_local(&params, &memory.train.first(200), &cfg, &device).unwrap();
        let (f, _) = train_local(&params, &spilled.train.first(200), &cfg, &device).unwrap();
        assert_eq!(m.values, f.values, "{spec}: same model from the file");
        // MT-HFL's upload reads the file a block at a time: the same eigenvectors.
        assert_eq!(
            signature_of(&spilled.train, 2).unwrap(),
            signature_of(&memory.train, 2).unwrap(),
            "{spec}"
        );
    }
    assert_eq!(
        std::fs::read_dir(&scratch).unwrap().count(),
        0,
        "nothing left behind"
    );
    std::fs::remove_dir(&scratch).unwrap();
    // A directory that is not there is a clear error.
    let mut a = args(&dir, Some("iid"), 0, 0, 2);
    a.spill_above = 0.0;
    a.spill_dir = Some(PathBuf::from("/nonexistent/edgecfl"));
    let err = a.load().err().unwrap();
    assert!(format!("{err:#}").contains("scratch file"), "{err:#}");
}

/// A wrong --index is refused before any image is read; a missing directory is an error.
#[test]
fn bad_shard_arguments_are_errors() {
    let dir = subset();
    let err = args(&dir, Some("iid"), 0, 4, 4).load().err().unwrap();
    assert!(err.to_string().contains("--index 4"), "{err}");
    let err = args(Path::new("/nonexistent/edgecfl"), None, 0, 0, 1)
        .load()
        .err()
        .unwrap();
    assert!(format!("{err:#}").contains("does not exist"), "{err:#}");
}

/// FEMNIST's `writers` shards, from LEAF JSON files as LEAF's Python writes them
/// (`shared/tests/python/leaf_femnist.py`; skipped, with a line, without python3 and numpy):
/// each client's training samples and its writer's own test samples, read a file at a time, in
/// memory or spilled, equal those of the full load; more clients than writers, and `writers` on
/// a data set without writers, are refused.
#[test]
fn femnist_writer_shards_equal_the_full_load() {
    use edgecfl_shared::data::{DatasetKind, partition_of};
    if !std::process::Command::new("python3")
        .args(["-c", "import numpy"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("skipped: needs python3 with numpy (.ci/run installs it)");
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("leaf-{}", std::process::id()));
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/tests/python/leaf_femnist.py");
    let run = std::process::Command::new("python3")
        .arg(&script)
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let data = edgecfl_shared::data::load(DatasetKind::Femnist, Some(&dir)).unwrap();
    let spec: PartitionSpec = "writers".parse().unwrap();
    let part = partition_of(&spec, &data.train.labels, 62, data.writers.as_ref(), 3, 0).unwrap();
    let femnist = |index, of| ShardArgs {
        dataset: DatasetKind::Femnist,
        ..args(&dir, Some("writers"), 0, index, of)
    };
    for (index, shard) in part.clients.iter().enumerate() {
        let own_test = shard.test.clone().unwrap();
        for spill_above in [16.0, 0.0] {
            let expected = (
                LocalData::from_dataset(&data.train, &shard.train, 0),
                LocalData::from_dataset(&data.test, &own_test, 0),
            );
            assert_loads(
                &ShardArgs {
                    spill_above,
                    ..femnist(index, 3)
                },
                expected,
            );
        }
    }
    let err = femnist(0, 4).load().err().unwrap();
    assert!(format!("{err:#}").contains("only 3 writers"), "{err:#}");
    let err = args(&dir, Some("writers"), 0, 0, 3).load().err().unwrap();
    assert!(format!("{err:#}").contains("femnist"), "{err:#}");
    std::fs::remove_dir_all(&dir).unwrap();
}
