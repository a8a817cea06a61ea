//! Models out (issue 29 §1): the cluster models a run leaves as `cluster-<k>.safetensors` are
//! right against independent truth, and `coordinator export` gives the same files from a
//! checkpoint.
//!
//! - `exported_models_give_our_logits_in_numpy`: a FedClust LeNet-5 run and an MT-HFL MLP run
//!   (`coordinator simulate`); for each cluster model, `edge-client predict --json` on bundled
//!   test images, then `tests/python/check_safetensors.py` (only `safetensors` and numpy) loads
//!   the file, checks the PyTorch names, shapes and dtype, runs the module's forward pass in
//!   numpy and compares the logits to 1e-4. Skipped, with a printed line, when python3 lacks
//!   numpy or safetensors (`.ci/run` installs them).
//! - `every_model_s_file_gives_our_logits_in_numpy`: the same check for every model, of fresh
//!   weights, without a run (the colour ones on CIFAR-10 binary records the test writes).
//! - `served_run_writes_models_and_export_of_its_checkpoint_gives_the_same`: a `serve` run
//!   over the embedded broker writes the cluster files; `coordinator export RUN_DIR` of its
//!   `checkpoint.json` writes the same models with the same headers.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use edgecfl_shared::data::catalog::ImageShape;
use edgecfl_shared::data::cifar::{CIFAR10_TEST_FILE, CIFAR10_TRAIN_FILES};
use edgecfl_shared::data::fmnist::NUM_CLASSES;
use edgecfl_shared::model::{ModelKind, Params};
use edgecfl_shared::model_file::{self, ModelMeta};
use edgecfl_tests::*;
use serde_json::Value;

/// The bundled test images.
fn test_images() -> PathBuf {
    bundled_data().join("t10k-images-idx3-ubyte.gz")
}

/// Runs a binary, asserts success, returns stdout.
fn run_ok(cmd: &mut Command) -> String {
    let o = cmd.output().expect("start");
    assert!(
        o.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("utf-8")
}

/// The `cluster-<k>.safetensors` files of a directory, by k.
fn cluster_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<(usize, PathBuf)> = std::fs::read_dir(dir)
        .expect("results dir")
        .filter_map(|e| {
            let p = e.ok()?.path();
            let k = p
                .file_name()?
                .to_str()?
                .strip_prefix("cluster-")?
                .strip_suffix(".safetensors")?
                .parse()
                .ok()?;
            Some((k, p))
        })
        .collect();
    files.sort();
    files.into_iter().map(|(_, p)| p).collect()
}

/// Whether python3 has numpy and safetensors; prints why not.
fn python_ready() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import numpy, safetensors"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        println!(
            "SKIPPED the numpy check: python3 with numpy and safetensors not found \
             (`python3 -m pip install safetensors numpy`; .ci/run installs them)"
        );
    }
    ok
}

/// `edge-client predict --json` of `model` on the first `n` bundled test images, written to
/// `json`, and its numpy check.
fn predict_and_check(model: &Path, n: usize, json: &Path, python: bool) -> Value {
    let images = test_images();
    let source = [OsStr::new("--images"), images.as_os_str()];
    predict_and_check_on(model, n, json, python, &source, &images)
}

/// `edge-client predict --json` of `model` on the first `n` images of `source` (its flags),
/// written to `json`, and the numpy check of its logits on the same images, read from `images`.
fn predict_and_check_on(
    model: &Path,
    n: usize,
    json: &Path,
    python: bool,
    source: &[&OsStr],
    images: &Path,
) -> Value {
    let out = run_ok(
        Command::new(bin("edge-client"))
            .args(["predict", "--json", "--limit", &n.to_string(), "--model"])
            .arg(model)
            .args(source),
    );
    std::fs::write(json, &out).unwrap();
    let v: Value = serde_json::from_str(&out).expect("predict --json");
    assert_eq!(v["images"], n);
    let labelled = !source.contains(&OsStr::new("--images"));
    assert_eq!(
        v.get("accuracy").is_some(),
        labelled,
        "accuracy only for labelled data"
    );
    let preds = v["predictions"].as_array().unwrap();
    assert_eq!(preds.len(), n);
    for p in preds {
        let probs: Vec<f64> = p["probabilities"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(probs.len(), NUM_CLASSES);
        assert!((probs.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    }
    if python {
        let o = Command::new("python3")
            .arg(root().join("tests/python/check_safetensors.py"))
            .arg(model)
            .arg(json)
            .arg(images)
            .output()
            .expect("python3");
        let text = String::from_utf8_lossy(&o.stdout);
        print!("{text}");
        assert!(
            o.status.success(),
            "numpy check of {} failed:\n{text}{}",
            model.display(),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    v
}

/// Every model's file, of fresh weights, against numpy: each PyTorch module's names, shapes and
/// forward pass (the grey models on bundled Fashion-MNIST images, the colour ones on CIFAR-10
/// binary records written here).
#[test]
fn every_model_s_file_gives_our_logits_in_numpy() {
    let dir = scratch("model-export-every-model");
    let python = python_ready();
    let cifar = dir.join("cifar-10-batches-bin");
    std::fs::create_dir_all(&cifar).unwrap();
    let record = |i: usize| -> Vec<u8> {
        let pixels = (0..ImageShape::RGB_32.pixels()).map(|j| ((i * 7919 + j * 31) % 256) as u8);
        std::iter::once((i % 10) as u8).chain(pixels).collect()
    };
    for f in CIFAR10_TRAIN_FILES {
        std::fs::write(cifar.join(f), record(99)).unwrap();
    }
    let n = 12;
    let test_batch = cifar.join(CIFAR10_TEST_FILE);
    std::fs::write(&test_batch, (0..n).flat_map(record).collect::<Vec<u8>>()).unwrap();
    let bundled = test_images();
    for model in ModelKind::ALL {
        let mut meta = ModelMeta::of(model);
        meta.method = Some("fedavg".into());
        meta.cluster = Some(0);
        meta.members = vec!["c0".into()];
        meta.round = Some(0);
        // The colour models' images are the CIFAR-10 records below (ResNet-9's own data set is
        // CIFAR-100).
        if model.input() == ImageShape::RGB_32 {
            meta.dataset = edgecfl_shared::data::DatasetKind::Cifar10;
        }
        let file = dir.join(format!("{model}.safetensors"));
        model_file::write(&file, &Params::init(model, 11), &meta).unwrap();
        let json = dir.join(format!("{model}.json"));
        if model.input() == ImageShape::GREY_28 {
            let source = [OsStr::new("--images"), bundled.as_os_str()];
            predict_and_check_on(&file, n, &json, python, &source, &bundled);
        } else {
            let source = [OsStr::new("--data"), cifar.as_os_str()];
            predict_and_check_on(&file, n, &json, python, &source, &test_batch);
        }
    }
}

#[test]
fn exported_models_give_our_logits_in_numpy() {
    let dir = scratch("model-export-numpy");
    let python = python_ready();
    let data = bundled_data();
    let data = data.to_str().unwrap();
    let runs: [(&str, &[&str], ModelKind, usize); 2] = [
        (
            "fedclust",
            &[
                "--partition",
                "groups:01234-56789",
                "--clients",
                "4",
                "--rounds",
                "2",
            ],
            ModelKind::LeNet5,
            2,
        ),
        (
            "mthfl",
            &[
                "--algorithm",
                "mthfl",
                "--model",
                "mlp",
                "--lambda",
                "k=3",
                "--partition",
                "tasks:fmnist3",
                "--clients",
                "10",
                "--rounds",
                "1",
            ],
            ModelKind::Mlp,
            3,
        ),
    ];
    for (name, flags, model, clusters) in runs {
        let out = dir.join(name);
        run_ok(
            Command::new(bin("coordinator"))
                .arg("simulate")
                .args(flags)
                .args([
                    "--frac", "1", "--epochs", "1", "--seed", "3", "--data", data,
                ])
                .arg("--out")
                .arg(&out),
        );
        let summary = summary(&out);
        let files = cluster_files(&out);
        assert_eq!(files.len(), clusters, "{name}: {files:?}");
        assert_eq!(summary["n_clusters"], clusters);
        for (k, f) in files.iter().enumerate() {
            let m = model_file::read(f).unwrap();
            assert_eq!(m.params.model, model);
            assert_eq!(m.meta.cluster, Some(k));
            assert_eq!(m.meta.method.as_deref(), Some(name));
            assert_eq!(
                m.meta.round,
                summary["accuracy_per_round"].as_array().map(Vec::len)
            );
            // Members as the run assigned them.
            let assignment: Vec<u64> = summary["assignment"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_u64().unwrap())
                .collect();
            assert_eq!(
                m.meta.members.len(),
                assignment.iter().filter(|&&a| a == k as u64).count()
            );
            predict_and_check(f, 48, &dir.join(format!("{name}-{k}.json")), python);
        }
        // Labelled data: accuracy and a confusion matrix over all of it.
        let v: Value = serde_json::from_str(&run_ok(
            Command::new(bin("edge-client"))
                .args(["predict", "--json", "--data", data, "--model"])
                .arg(&files[0]),
        ))
        .unwrap();
        let n = v["images"].as_u64().unwrap();
        assert_eq!(n, 1000, "the bundled test set");
        let conf = v["confusion"].as_array().unwrap();
        assert_eq!(conf.len(), NUM_CLASSES);
        let cell = |t: usize, p: usize| conf[t][p].as_u64().unwrap();
        let total: u64 = (0..10)
            .flat_map(|t| (0..10).map(move |p| (t, p)))
            .map(|(t, p)| cell(t, p))
            .sum();
        assert_eq!(total, n);
        for t in 0..NUM_CLASSES {
            assert_eq!((0..10).map(|p| cell(t, p)).sum::<u64>(), 100, "class {t}");
        }
        let correct: u64 = (0..10).map(|k| cell(k, k)).sum();
        assert_eq!(v["accuracy"].as_f64(), Some(correct as f64 / n as f64));
    }
    // A damaged file is a clear error, not a panic.
    let good = std::fs::read(dir.join("fedclust/cluster-0.safetensors")).unwrap();
    let cut = dir.join("cut.safetensors");
    std::fs::write(&cut, &good[..good.len() - 100]).unwrap();
    let o = Command::new(bin("edge-client"))
        .args(["predict", "--model"])
        .arg(&cut)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("truncated model file"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn served_run_writes_models_and_export_of_its_checkpoint_gives_the_same() {
    const PARTITION: &str = "groups:01234-56789";
    const CLIENTS: usize = 4;
    let dir = scratch("model-export-serve");
    let port = free_port();
    let prefix = "edgecfl/t-model-export";
    let flags = run_flags(PARTITION, CLIENTS, 2, 1.0, 5);
    let log = dir.join("coordinator.log");
    let net: Vec<String> = ["--port", &port.to_string(), "--listen", "127.0.0.1"]
        .into_iter()
        .chain(["--prefix", prefix, "--run-id", "export-run"])
        .map(String::from)
        .collect();
    let mut coordinator = serve(&dir, CLIENTS, &net, &flags);
    wait_listening(port, Duration::from_secs(60));
    let clients = fleet(&dir, port, prefix, PARTITION, CLIENTS, 5);
    coordinator.wait_ok(Duration::from_secs(600), &log);
    for (mut p, l) in clients {
        p.wait_ok(Duration::from_secs(30), &l);
    }
    let s = summary(&dir.join("out"));
    let ended = cluster_files(&dir.join("out"));
    assert_eq!(ended.len() as u64, s["n_clusters"].as_u64().unwrap());
    let text = run_ok(
        Command::new(bin("coordinator"))
            .arg("export")
            .arg(dir.join("out"))
            .arg("--out")
            .arg(dir.join("exported")),
    );
    print!("{text}");
    let exported = cluster_files(&dir.join("exported"));
    assert_eq!(exported.len(), ended.len());
    let ids: Vec<&str> = s["client_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for (k, (a, b)) in ended.iter().zip(&exported).enumerate() {
        let (a, b) = (model_file::read(a).unwrap(), model_file::read(b).unwrap());
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&a.params.values),
            bits(&b.params.values),
            "cluster {k}"
        );
        assert_eq!(a.meta, b.meta, "cluster {k}");
        assert_eq!(a.meta.run_id.as_deref(), Some("export-run"));
        assert_eq!(a.meta.round, Some(2));
        let members: Vec<&str> = (0..ids.len())
            .filter(|&p| s["assignment"][p] == k)
            .map(|p| ids[p])
            .collect();
        assert_eq!(a.meta.members, members, "cluster {k}");
        assert!(a.meta.accuracy.is_some_and(|x| (0.0..=1.0).contains(&x)));
    }
    // Each device kept its cluster's model; on its own local test set that model scores what
    // the device reported at the run's last evaluation.
    assert_clients_kept_their_models(&dir, &s, &|id| kept_model(&dir, id));
    for id in &ids {
        let index = id.trim_start_matches('c');
        let data = bundled_data().display().to_string();
        let shard: Vec<String> = ["--partition", PARTITION, "--seed", "5", "--of", "4"]
            .into_iter()
            .chain(["--index", index, "--data", &data])
            .map(String::from)
            .collect();
        let v = assert_kept_model_scores_its_report(&dir, &s, id, &shard);
        assert!(
            v["source"].as_str().unwrap().contains("local test set"),
            "{v}"
        );
    }
    // Not a checkpoint: a clear error.
    let o = Command::new(bin("coordinator"))
        .arg("export")
        .arg(dir.join("out/summary.json"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("is not a checkpoint"), "{err}");
}
