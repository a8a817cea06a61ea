//! `coordinator cluster` end to end: write small `.npy` / `.csv` files, run
//! [`coordinator::cmd::cluster::run`], check the JSON.
//!
//! Expected merges come from scipy (`scipy.cluster.hierarchy.linkage` on the same points, values
//! quoted in the comments), not from this crate.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use coordinator::cmd::cluster::{ClusterArgs, Metric, run};
use edgecfl_shared::cluster::{Lambda, Linkage};
use serde_json::Value;

/// Points on a line: three tight groups {0, 1, 2}, {3, 4}, {5}.
const POINTS: [[f32; 2]; 6] = [
    [0.0, 0.0],
    [0.0, 1.0],
    [1.0, 0.0],
    [10.0, 10.0],
    [10.0, 11.0],
    [30.0, 0.0],
];

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A unique path in the temp dir; the file is removed when the guard drops.
struct TempFile(PathBuf);

impl TempFile {
    fn new(ext: &str, bytes: &[u8]) -> Self {
        let name = format!(
            "edgecfl-offline-{}-{}.{ext}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(name);
        std::fs::write(&path, bytes).expect("write temp file");
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A `.npy` v1.0 file as `np.save` writes it.
fn npy_bytes(descr: &str, rows: usize, cols: usize, data: &[u8]) -> Vec<u8> {
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

fn f4_npy() -> Vec<u8> {
    let data: Vec<u8> = POINTS
        .iter()
        .flatten()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    npy_bytes("<f4", POINTS.len(), 2, &data)
}

fn args(input: &TempFile, linkage: Linkage) -> ClusterArgs {
    ClusterArgs {
        input: input.0.clone(),
        linkage,
        lambda: None,
        clusters: None,
        metric: Metric::Euclidean,
    }
}

fn labels(v: &Value) -> Vec<u64> {
    v["labels"]
        .as_array()
        .expect("labels")
        .iter()
        .map(|x| x.as_u64().expect("label"))
        .collect()
}

#[test]
fn npy_gap_auto_and_k() {
    let file = TempFile::new("npy", &f4_npy());
    let mut a = args(&file, Linkage::Single);
    a.lambda = Some(Lambda::Gap);
    let out = run(&a).expect("run");
    assert_eq!(out["n"], 6);
    assert_eq!(out["dim"], 2);
    assert_eq!(out["linkage"], "single");
    assert_eq!(out["metric"], "euclidean");
    // scipy: linkage(POINTS, "single") =
    //   [[0, 1, 1, 2], [2, 6, 1, 3], [3, 4, 1, 2], [7, 8, 13.45362404707371, 5],
    //    [5, 9, 22.360679774997898, 6]]
    // (|(1,0) − (10,10)| = sqrt(181), |(30,0) − (10,10)| = sqrt(500)). Heights 1, 1, 1,
    // sqrt(181), sqrt(500): the largest gap is 1 → sqrt(181), so gap cuts at
    // (1 + sqrt(181)) / 2 → 3 clusters.
    let merges = out["merges"].as_array().expect("merges");
    let m: Vec<(u64, u64, f64, u64)> = merges
        .iter()
        .map(|r| {
            (
                r[0].as_u64().unwrap(),
                r[1].as_u64().unwrap(),
                r[2].as_f64().unwrap(),
                r[3].as_u64().unwrap(),
            )
        })
        .collect();
    let s181 = 181f64.sqrt();
    assert_eq!(
        m.iter().map(|r| (r.0, r.1, r.3)).collect::<Vec<_>>(),
        vec![(0, 1, 2), (2, 6, 3), (3, 4, 2), (7, 8, 5), (5, 9, 6)]
    );
    for (got, want) in m
        .iter()
        .map(|r| r.2)
        .zip([1.0, 1.0, 1.0, s181, 500f64.sqrt()])
    {
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    }
    assert_eq!(out["heights"].as_array().unwrap().len(), 5);
    let t = out["threshold"].as_f64().unwrap();
    assert!((t - (1.0 + s181) / 2.0).abs() < 1e-12);
    assert_eq!(out["cut"], "gap");
    assert_eq!(out["n_clusters"], 3);
    assert_eq!(labels(&out), vec![0, 0, 0, 1, 1, 2]);
    assert_eq!(out["cluster_sizes"], serde_json::json!([3, 2, 1]));

    // auto, as a run cuts: the best mean silhouette. By hand (silhouette 0 for a singleton):
    // 3 clusters {0,1,2} {3,4} {5} score (3 · ~0.93 + 2 · ~0.93 + 0) / 6 ≈ 0.78; 2 clusters
    // {0..4} {5}: points 0-2 have a ≈ 7.4 against b ≈ 30 (0.75), points 3, 4 a ≈ 10.5 against
    // b ≈ 22.4 (0.53), so ≈ 0.55; more clusters split a tight group. So 3 clusters again.
    a.lambda = Some(Lambda::Auto);
    let out = run(&a).expect("run auto");
    assert_eq!(out["cut"], "auto");
    assert_eq!(labels(&out), vec![0, 0, 0, 1, 1, 2]);
    let scores = &out["cut_scores"];
    assert!(scores.is_object(), "{out:#}");
    let t = out["threshold"].as_f64().unwrap();
    assert!((1.0..s181).contains(&t), "{t}");

    let mut a = args(&file, Linkage::Ward);
    a.clusters = Some(2);
    let out = run(&a).expect("run k");
    assert_eq!(out["cut"], "k");
    assert_eq!(out["n_clusters"], 2);
    assert_eq!(labels(&out), vec![0, 0, 0, 0, 0, 1]);
    // The reported threshold reproduces the k-cut as a distance cut.
    let t = out["threshold"].as_f64().expect("threshold for k");
    let mut b = args(&file, Linkage::Ward);
    b.lambda = Some(Lambda::Distance(t));
    assert_eq!(labels(&run(&b).unwrap()), vec![0, 0, 0, 0, 0, 1]);
}

#[test]
fn csv_with_header_matches_npy() {
    let mut text = String::from("w0,w1\n");
    for p in POINTS {
        text.push_str(&format!("{},{}\n", p[0], p[1]));
    }
    let csv = TempFile::new("csv", text.as_bytes());
    let npy = TempFile::new("npy", &f4_npy());
    for linkage in Linkage::ALL {
        let mut a = args(&csv, linkage);
        a.lambda = Some(Lambda::Distance(5.0));
        let from_csv = run(&a).expect("csv");
        let mut b = args(&npy, linkage);
        b.lambda = Some(Lambda::Distance(5.0));
        let from_npy = run(&b).expect("npy");
        assert_eq!(from_csv["merges"], from_npy["merges"], "{linkage}");
        assert_eq!(labels(&from_csv), vec![0, 0, 0, 1, 1, 2], "{linkage}");
        assert_eq!(from_csv["threshold"], 5.0);
    }
}

#[test]
fn f8_npy_and_cosine() {
    // float64 input; cosine distance: (1,0) and (2,0.1) are nearly parallel, (0,1) is not.
    let rows: [[f64; 2]; 3] = [[1.0, 0.0], [2.0, 0.1], [0.0, 1.0]];
    let data: Vec<u8> = rows
        .iter()
        .flatten()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let file = TempFile::new("npy", &npy_bytes("<f8", 3, 2, &data));
    let mut a = args(&file, Linkage::Average);
    a.metric = Metric::Cosine;
    a.clusters = Some(2);
    let out = run(&a).expect("run");
    assert_eq!(out["metric"], "cosine");
    assert_eq!(labels(&out), vec![0, 0, 1]);
}

fn error_of(a: &ClusterArgs) -> String {
    format!("{:#}", run(a).expect_err("should fail"))
}

#[test]
fn errors_name_the_file() {
    let good = TempFile::new("npy", &f4_npy());

    // Missing file.
    let mut a = args(&good, Linkage::Single);
    a.input = std::env::temp_dir().join("edgecfl-offline-does-not-exist.npy");
    a.clusters = Some(2);
    let e = error_of(&a);
    assert!(e.contains("does-not-exist.npy"), "{e}");

    // Unsupported dtype, big-endian, 1-D, truncated.
    for (bytes, what) in [
        (npy_bytes("<i4", 6, 2, &[0; 48]), "unsupported dtype"),
        (npy_bytes(">f4", 6, 2, &[0; 48]), "unsupported dtype"),
        (npy_bytes("<f4", 6, 2, &[0; 20]), "truncated"),
    ] {
        let f = TempFile::new("npy", &bytes);
        let mut a = args(&f, Linkage::Single);
        a.clusters = Some(2);
        let e = error_of(&a);
        assert!(
            e.contains(&*f.0.display().to_string()) && e.contains(what),
            "{e}"
        );
    }

    // NaN and ragged rows in CSV.
    for (text, what) in [
        ("1,2\n3,nan\n", "non-finite"),
        ("1,2\n3\n", "line 2"),
        ("", "no observations"),
    ] {
        let f = TempFile::new("csv", text.as_bytes());
        let mut a = args(&f, Linkage::Complete);
        a.lambda = Some(Lambda::Auto);
        let e = error_of(&a);
        assert!(
            e.contains(&*f.0.display().to_string()) && e.contains(what),
            "{e}"
        );
    }

    // Unknown extension.
    let f = TempFile::new("txt", b"1,2\n");
    let mut a = args(&f, Linkage::Single);
    a.clusters = Some(1);
    assert!(error_of(&a).contains(".txt"));

    // Bad cut requests.
    let mut a = args(&good, Linkage::Single);
    a.clusters = Some(0);
    assert!(error_of(&a).contains("out of range"));
    a.clusters = Some(7);
    assert!(error_of(&a).contains("out of range"));
    a.clusters = None;
    assert!(error_of(&a).contains("--lambda"));
    a.clusters = Some(2);
    a.lambda = Some(Lambda::Auto);
    assert!(error_of(&a).contains("not both"));

    // Ward needs Euclidean distances (as in scipy).
    let mut a = args(&good, Linkage::Ward);
    a.metric = Metric::Cosine;
    a.clusters = Some(2);
    assert!(error_of(&a).contains("ward"));
}

#[test]
fn cli_parsing() {
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ClusterArgs,
    }
    let cli = Cli::try_parse_from([
        "cluster",
        "--input",
        "x.npy",
        "--linkage",
        "ward",
        "--lambda",
        "auto",
    ])
    .expect("parse");
    assert_eq!(cli.args.linkage, Linkage::Ward);
    assert_eq!(cli.args.lambda, Some(Lambda::Auto));
    assert_eq!(cli.args.metric, Metric::Euclidean);
    for cut in ["gap", "k=3", "2.5"] {
        let cli = Cli::try_parse_from(["cluster", "--input", "x.npy", "--lambda", cut]).unwrap();
        assert_eq!(cli.args.lambda.unwrap().to_string(), cut);
    }
    let cli = Cli::try_parse_from([
        "cluster",
        "--input",
        "x.csv",
        "--clusters",
        "3",
        "--metric",
        "cosine",
    ])
    .expect("parse");
    assert_eq!(
        (cli.args.clusters, cli.args.metric),
        (Some(3), Metric::Cosine)
    );
    assert_eq!(cli.args.linkage, Linkage::Average);
    // The old names, kept for one release.
    let cli = Cli::try_parse_from(["cluster", "--input", "x.npy", "--threshold", "gap"]).unwrap();
    assert_eq!(cli.args.lambda, Some(Lambda::Gap));
    let cli = Cli::try_parse_from(["cluster", "--input", "x.npy", "--k", "2"]).unwrap();
    assert_eq!(cli.args.clusters, Some(2));
    // Exactly one of --lambda / --clusters.
    assert!(Cli::try_parse_from(["cluster", "--input", "x.npy"]).is_err());
    assert!(
        Cli::try_parse_from([
            "cluster",
            "--input",
            "x.npy",
            "--k",
            "2",
            "--threshold",
            "1"
        ])
        .is_err()
    );
    assert!(
        Cli::try_parse_from([
            "cluster",
            "--input",
            "x.npy",
            "--linkage",
            "centroid",
            "--k",
            "2"
        ])
        .is_err()
    );
}
