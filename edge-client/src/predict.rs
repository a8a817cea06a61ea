//! `edge-client predict`: a trained model (a `cluster-<k>.safetensors` of `coordinator export`
//! or of a run's results directory) on images.
//!
//! Images from an IDX image file (`--images`, plain or gzip'd, 28 × 28 grey; labelled with
//! `--labels`), a testbed client's local test set (`--partition SPEC --index I --of N --seed S`:
//! the shard's labels, rotated or label-shifted as the shard is), or a data set's test set
//! (`--dataset`, by default the one the model file names, from `--data DIR`; for Fashion-MNIST
//! without it `EDGECFL_FMNIST_DIR`, the Debian package's directory or the bundled subset), the
//! first `--limit` of them. Unlabelled images: the class probabilities of each. Labelled: the
//! accuracy and the confusion matrix (rows: true class, columns: predicted). `--json` prints
//! everything, with each image's logits.
//!
//! The input is normalised as the file's header says (`input_mean`, `input_std`; this project's
//! models: `p / 255`), so a model trained elsewhere with another normalisation is fed right.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use edgecfl_shared::data::partition::PartitionSpec;
use edgecfl_shared::data::{DataLabels, DatasetKind, ImageShape, idx};
use edgecfl_shared::model::Net;
use edgecfl_shared::model_file::{self, ModelFile};
use edgecfl_shared::train::Backend;
use serde::Serialize;
use tracing::info;

use crate::shard::ShardArgs;

/// Arguments of `edge-client predict`.
#[derive(Debug, Clone, Args)]
pub struct PredictArgs {
    /// The model: a safetensors file (`cluster-<k>.safetensors`).
    #[arg(long)]
    pub model: PathBuf,
    /// An IDX image file (28 × 28, plain or .gz) to classify.
    #[arg(long, value_name = "IDX_FILE", conflicts_with = "data")]
    pub images: Option<PathBuf>,
    /// An IDX label file for --images: report accuracy and the confusion matrix.
    #[arg(long, value_name = "IDX_FILE", requires = "images")]
    pub labels: Option<PathBuf>,
    /// The data set of --data and --partition (default: the one the model file names, as
    /// `coordinator export` and every run write it).
    #[arg(long, value_name = "NAME",
          help = format!("{} (default: the one the model file names)", edgecfl_shared::data::catalog::dataset_flag_help()))]
    pub dataset: Option<DatasetKind>,
    /// The data set's directory: its labelled test set (for fmnist, without it: the
    /// EDGECFL_FMNIST_DIR, the Debian package's directory, or the bundled subset).
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// A testbed client's local test set instead: that of shard --index of this partition
    /// into --of shards (with --seed; rotated or label-shifted as the shard is), the data its
    /// model is for (`edge-client run`'s flags of the same names).
    #[arg(long, conflicts_with = "images")]
    pub partition: Option<PartitionSpec>,
    /// Partition seed (with --partition).
    #[arg(long, default_value_t = 0, requires = "partition")]
    pub seed: u64,
    /// Shard index, 0-based (with --partition).
    #[arg(long, default_value_t = 0, requires = "partition")]
    pub index: usize,
    /// Number of shards (with --partition).
    #[arg(long, default_value_t = 1, requires = "partition")]
    pub of: usize,
    /// Only the first N images.
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Device: cpu (= flex) | ndarray | vulkan[:N|:igpu[:N]|:cpu] | tch[:cpu|:cuda[:N]] | cuda[:N].
    #[arg(long, default_value = "cpu")]
    pub device: Backend,
    /// Images per forward pass.
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// Print JSON (every image's logits and probabilities) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// One image's result.
#[derive(Debug, Clone, Serialize)]
pub struct Prediction {
    /// Position in the input.
    pub index: usize,
    /// The most probable class.
    pub predicted: usize,
    /// Its true class, when labelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<u8>,
    /// The network's outputs.
    pub logits: Vec<f32>,
    /// Their softmax.
    pub probabilities: Vec<f64>,
}

/// What `predict` found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The model file.
    pub model_file: PathBuf,
    /// Its architecture.
    pub model: String,
    /// Its header (run id, method, cluster, members, round, accuracy, input normalisation…).
    pub header: std::collections::BTreeMap<String, String>,
    /// Where the images came from.
    pub source: String,
    /// The class names by index (of the data set the model file names).
    pub classes: &'static [&'static str],
    /// Images classified.
    pub images: usize,
    /// Seconds of the forward passes (all batches).
    pub seconds: f64,
    /// Correct / labelled, when labelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<f64>,
    /// `confusion[true][predicted]` counts, when labelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confusion: Option<Vec<Vec<usize>>>,
    /// Each image.
    pub predictions: Vec<Prediction>,
}

/// Images (of the data set's shape) and, when known, their labels.
struct Input {
    pixels: Vec<u8>,
    labels: Option<Vec<u8>>,
    source: String,
}

fn load_input(args: &PredictArgs, kind: DatasetKind) -> anyhow::Result<Input> {
    let limit = args.limit.unwrap_or(usize::MAX);
    let shape = kind.info().shape;
    let classes = kind.info().classes();
    if let Some(path) = &args.images {
        anyhow::ensure!(
            shape == ImageShape::GREY_28,
            "--images reads IDX files of 1×28×28 images; this model takes {shape} ones ({}): \
             give --data DIR (its test set) instead",
            kind.info().name
        );
        let img = idx::read_images(path)?;
        anyhow::ensure!(
            img.rows == 28 && img.cols == 28,
            "{}: images are {}×{}, the model takes 28×28",
            path.display(),
            img.rows,
            img.cols
        );
        let n = img.count.min(limit);
        let mut pixels = img.pixels;
        pixels.truncate(n * shape.pixels());
        let labels = match &args.labels {
            Some(lp) => {
                let mut l = idx::read_labels(lp)?;
                anyhow::ensure!(
                    l.len() == img.count,
                    "{} has {} labels for the {} images of {}",
                    lp.display(),
                    l.len(),
                    img.count,
                    path.display()
                );
                if let Some(bad) = l.iter().find(|&&x| usize::from(x) >= classes) {
                    anyhow::bail!(
                        "{}: label {bad} is not a class (0..{})",
                        lp.display(),
                        classes - 1
                    );
                }
                l.truncate(n);
                Some(l)
            }
            None => None,
        };
        return Ok(Input {
            pixels,
            labels,
            source: path.display().to_string(),
        });
    }
    if let Some(spec) = &args.partition {
        let shard = ShardArgs {
            dataset: kind,
            data: args.data.clone(),
            partition: Some(spec.clone()),
            seed: args.seed,
            index: args.index,
            of: args.of,
            // The training images are not needed: kept out of memory.
            spill_above: 0.0,
            spill_dir: None,
        }
        .load()?;
        let n = shard.test.len().min(limit);
        let mut pixels = Vec::with_capacity(n * shape.pixels());
        shard.test.read_images(0, n, &mut pixels)?;
        return Ok(Input {
            pixels,
            labels: Some(shard.test.labels[..n].to_vec()),
            source: format!("{} (local test set)", shard.source),
        });
    }
    let data = DataLabels::load(kind, args.data.as_deref())?;
    let n = data.test.len().min(limit);
    let idx: Vec<usize> = (0..n).collect();
    let test = data.select_test(&idx)?;
    Ok(Input {
        pixels: test.images,
        labels: Some(test.labels),
        source: format!("{} (test set)", data.source),
    })
}

/// Classifies the images `args` names with the model it names.
///
/// # Errors
///
/// A model file or image file that cannot be read (typed errors of
/// [`model_file::ModelFileError`] and [`idx::IdxError`] in the chain), or a device not built in.
pub fn run(args: &PredictArgs) -> anyhow::Result<Report> {
    let bytes = std::fs::read(&args.model)
        .with_context(|| format!("cannot read {}", args.model.display()))?;
    let ModelFile { params, meta } = model_file::from_bytes(&bytes)
        .with_context(|| format!("{} is not a usable model", args.model.display()))?;
    let header = model_file::header(&bytes)?;
    let kind = args.dataset.unwrap_or(meta.dataset);
    params
        .model
        .check_input(kind)
        .with_context(|| format!("{}", args.model.display()))?;
    let classes = kind.info().classes();
    anyhow::ensure!(
        params.classes() == classes,
        "{}: the model has {} outputs, {} has {classes} classes: give --dataset the data set it \
         was trained on",
        args.model.display(),
        params.classes(),
        kind.info().name
    );
    let input = load_input(args, kind)?;
    let n = input.pixels.len() / kind.info().shape.pixels();
    info!(
        "{} ({}, cluster {}) on {n} images of {}",
        args.model.display(),
        params.model,
        meta.cluster.map_or("?".into(), |c| c.to_string()),
        input.source
    );
    let device = args.device.device()?;
    let net = Net::from_params(&params, &device);
    let start = Instant::now();
    let logits = model_file::logits(&net, &input.pixels, meta.input, args.batch, &device)?;
    let seconds = start.elapsed().as_secs_f64();
    let mut confusion = vec![vec![0usize; classes]; classes];
    let predictions: Vec<Prediction> = logits
        .chunks_exact(classes)
        .enumerate()
        .map(|(index, row)| {
            // The first maximum, as argmax.
            let predicted = row
                .iter()
                .enumerate()
                .fold(0, |best, (k, &v)| if v > row[best] { k } else { best });
            let label = input.labels.as_ref().map(|l| l[index]);
            if let Some(l) = label {
                confusion[usize::from(l)][predicted] += 1;
            }
            Prediction {
                index,
                predicted,
                label,
                logits: row.to_vec(),
                probabilities: model_file::softmax(row),
            }
        })
        .collect();
    let labelled = input.labels.is_some();
    let correct: usize = (0..classes).map(|k| confusion[k][k]).sum();
    Ok(Report {
        model_file: args.model.clone(),
        model: params.model.to_string(),
        header,
        source: input.source,
        classes: kind.info().class_names,
        images: n,
        seconds,
        accuracy: (labelled && n > 0).then(|| correct as f64 / n as f64),
        confusion: labelled.then_some(confusion),
        predictions,
    })
}

/// The most classes the text report shows as columns.
const WIDE: usize = 20;

/// The report as text: probabilities per image (unlabelled), or accuracy and the confusion
/// matrix (labelled).
pub fn text(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let h = |k: &str| r.header.get(k).map_or("?", String::as_str);
    let _ = writeln!(
        s,
        "model {} ({}, method {}, cluster {}, round {}, run {}); {} images of {} in {:.3} s",
        r.model_file.display(),
        r.model,
        h("method"),
        h("cluster"),
        h("round"),
        h("run_id"),
        r.images,
        r.source,
        r.seconds
    );
    let short: Vec<String> = r
        .classes
        .iter()
        .map(|c| c.chars().take(7).collect())
        .collect();
    match (&r.accuracy, &r.confusion) {
        // More classes than a terminal's width holds columns: each class's accuracy, and each
        // image's five most probable classes (`--json` has the full matrix and probabilities).
        (Some(acc), Some(conf)) if r.classes.len() > WIDE => {
            let _ = writeln!(
                s,
                "accuracy {:.2} %; per true class, correct / images (--json: the confusion \
                 matrix):",
                100.0 * acc
            );
            for (k, row) in conf.iter().enumerate() {
                let total: usize = row.iter().sum();
                if total > 0 {
                    let _ = writeln!(s, "{:>16} {:>6} / {total}", r.classes[k], row[k]);
                }
            }
        }
        _ if r.accuracy.is_none() && r.classes.len() > WIDE => {
            let _ = writeln!(
                s,
                "{:>6} the five most probable classes (--json: every probability)",
                "image"
            );
            for p in &r.predictions {
                let mut order: Vec<usize> = (0..p.probabilities.len()).collect();
                order.sort_by(|&a, &b| p.probabilities[b].total_cmp(&p.probabilities[a]));
                let _ = write!(s, "{:>6}", p.index);
                for &k in order.iter().take(5) {
                    let _ = write!(s, " {} {:.4}", r.classes[k], p.probabilities[k]);
                }
                s.push('\n');
            }
        }
        (Some(acc), Some(conf)) => {
            let _ = writeln!(s, "accuracy {:.2} %", 100.0 * acc);
            let _ = writeln!(
                s,
                "confusion matrix (rows: true class, columns: predicted):"
            );
            let _ = write!(s, "{:>12}", "");
            for c in &short {
                let _ = write!(s, " {c:>7}");
            }
            s.push('\n');
            for (k, row) in conf.iter().enumerate() {
                let _ = write!(
                    s,
                    "{:>12}",
                    r.classes[k].chars().take(12).collect::<String>()
                );
                for v in row {
                    let _ = write!(s, " {v:>7}");
                }
                s.push('\n');
            }
        }
        _ => {
            let _ = write!(s, "{:>6} {:<12}", "image", "predicted");
            for c in &short {
                let _ = write!(s, " {c:>7}");
            }
            s.push('\n');
            for p in &r.predictions {
                let _ = write!(s, "{:>6} {:<12}", p.index, r.classes[p.predicted]);
                for q in &p.probabilities {
                    let _ = write!(s, " {q:>7.4}");
                }
                s.push('\n');
            }
        }
    }
    s
}
