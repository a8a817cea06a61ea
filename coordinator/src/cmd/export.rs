//! The cluster models of a run as safetensors files (`cluster-<k>.safetensors`), loadable into
//! the PyTorch definition of the network ([`edgecfl_shared::model_file`]).
//!
//! One code path: [`of_result`] (the end of `simulate`, `serve`, `demo` and of each `lps`)
//! and [`of_checkpoint`] (`coordinator export` of any `checkpoint.json`) both build
//! [`ClusterModel`]s with [`cluster_models`], and [`write()`] writes them.
//!
//! For a hierarchical (MT-HFL) run the cluster models are the LPS models; a remote LPS process
//! writes its own cluster's file into its `--out`, and the GPS (`serve --lps remote`), which
//! holds no trained model, writes none.
//!
//! The same models go to the devices: [`final_messages`] makes each client's end-of-run message,
//! its cluster's model ([`ToClient::FinalModel`]), which the edge client writes as its own
//! safetensors file (`edge-client run --model-out`).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use edgecfl_shared::data::DatasetKind;
use edgecfl_shared::federation::{self, ClientInfo, RunResult};
use edgecfl_shared::model::Params;
use edgecfl_shared::model_file::{self, ModelMeta};
use edgecfl_shared::protocol::{Encoding, Envelope, FinalModel, Id, Tensor, ToClient, text};
use std::collections::BTreeMap;
use tracing::{info, warn};

use crate::cmd::serve::CHECKPOINT_FILE;

/// One cluster's model and the header it is written with.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterModel {
    /// The parameters.
    pub params: Params,
    /// The header (`meta.cluster` is the cluster index).
    pub meta: ModelMeta,
}

impl ClusterModel {
    /// What a member of this cluster keeps at the end of the run (f32, exact).
    pub fn to_client(&self) -> FinalModel {
        let clamp = |n: Option<usize>| n.map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX));
        FinalModel {
            model: self.params.model,
            params: Tensor::encode(&self.params.values, Encoding::F32),
            cluster: clamp(self.meta.cluster),
            rounds: clamp(self.meta.round),
            method: text(self.meta.method.as_deref().unwrap_or_default()),
            accuracy: self.meta.accuracy,
        }
    }
}

/// The end-of-run message of each client of `result` that has a model, by its pool index
/// (`ClientInfo::index`): [`ToClient::FinalModel`] of run `run` with the model of its cluster
/// (`models[assignment]`, as [`of_result`] lists them), encoded once per cluster.
pub fn final_messages(
    run: &Id,
    result: &RunResult,
    models: &[ClusterModel],
) -> BTreeMap<usize, Vec<u8>> {
    let encoded: Vec<Vec<u8>> = models
        .iter()
        .map(|m| {
            Envelope::new(run.clone(), u32::MAX, ToClient::FinalModel(m.to_client())).to_bytes()
        })
        .collect();
    result
        .clients
        .iter()
        .zip(&result.assignment)
        .filter_map(|(c, &k)| Some((c.index, encoded.get(k)?.clone())))
        .collect()
}

/// The file name of cluster `k`'s model.
pub fn file_name(cluster: usize) -> String {
    format!("cluster-{cluster}.safetensors")
}

/// A run's cluster models with their headers: members by assignment, accuracy as the mean of
/// the members' last local test accuracies (`accuracy(p)` of client position `p`; `None` or NaN:
/// never evaluated, left out of the mean); trained on `dataset`.
pub fn cluster_models(
    (method, dataset): (&str, DatasetKind),
    run_id: Option<&str>,
    round: usize,
    clients: &[ClientInfo],
    assignment: &[usize],
    models: &[Params],
    accuracy: impl Fn(usize) -> Option<f64>,
) -> Vec<ClusterModel> {
    models
        .iter()
        .enumerate()
        .map(|(k, params)| {
            let members: Vec<usize> = (0..assignment.len().min(clients.len()))
                .filter(|&p| assignment[p] == k)
                .collect();
            let acc: Vec<f64> = members
                .iter()
                .filter_map(|&p| accuracy(p))
                .filter(|a| a.is_finite())
                .collect();
            ClusterModel {
                params: params.clone(),
                meta: ModelMeta {
                    run_id: run_id.map(String::from),
                    method: Some(method.to_string()),
                    cluster: Some(k),
                    members: members.iter().map(|&p| clients[p].id.clone()).collect(),
                    round: Some(round),
                    accuracy: (!acc.is_empty()).then(|| acc.iter().sum::<f64>() / acc.len() as f64),
                    dataset,
                    ..ModelMeta::of(params.model)
                },
            }
        })
        .collect()
}

/// The cluster models at the end of a run.
pub fn of_result(
    result: &RunResult,
    run_id: Option<&str>,
    dataset: DatasetKind,
) -> Vec<ClusterModel> {
    cluster_models(
        (result.method, dataset),
        run_id,
        result.rounds.len(),
        &result.clients,
        &result.assignment,
        &result.models,
        |p| result.final_client_accuracy.get(p).copied(),
    )
}

/// The cluster models of a checkpoint (after its round `checkpoint.round`).
pub fn of_checkpoint(c: &federation::Checkpoint, run_id: Option<&str>) -> Vec<ClusterModel> {
    let dataset = c.config["dataset"]
        .as_str()
        .and_then(|d| d.parse().ok())
        .unwrap_or_default();
    cluster_models(
        (c.config["algorithm"].as_str().unwrap_or("?"), dataset),
        run_id,
        c.round,
        &c.clients,
        &c.assignment,
        &c.models,
        |p| c.final_client_accuracy.get(p).copied().flatten(),
    )
}

/// Writes each model to `dir/cluster-<k>.safetensors` (atomically); returns the paths.
///
/// # Errors
///
/// When `dir` cannot be created or a file cannot be written.
pub fn write(dir: &Path, models: &[ClusterModel]) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create output directory {}", dir.display()))?;
    models
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let path = dir.join(file_name(m.meta.cluster.unwrap_or(i)));
            model_file::write(&path, &m.params, &m.meta)
                .with_context(|| format!("cannot write {}", path.display()))?;
            Ok(path)
        })
        .collect()
}

/// Writes the cluster models at the end of a run into its results directory.
///
/// # Errors
///
/// As [`write()`].
pub fn write_run(dir: &Path, models: &[ClusterModel]) -> anyhow::Result<Vec<PathBuf>> {
    let paths = write(dir, models)?;
    if let Some(first) = paths.first() {
        info!(
            "{} cluster model(s) written as safetensors ({}, …)",
            paths.len(),
            first.display()
        );
    }
    Ok(paths)
}

/// Arguments of `coordinator export`.
#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    /// A run's `checkpoint.json`, or the results directory holding it.
    #[arg(value_name = "CHECKPOINT|RUN_DIR")]
    pub from: PathBuf,
    /// Where to write `cluster-<k>.safetensors` (default: the checkpoint's directory).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// What `coordinator export` wrote.
#[derive(Debug, Clone)]
pub struct Exported {
    /// The models written, with their headers.
    pub models: Vec<ClusterModel>,
    /// Their paths.
    pub paths: Vec<PathBuf>,
}

/// Reads a checkpoint file: `serve`'s (`{"serve": {"run_id": …}, "federation": …}`) or the
/// round driver's [`federation::Checkpoint`] alone.
///
/// # Errors
///
/// When the file cannot be read or is not a checkpoint, naming the path.
pub fn read_checkpoint(path: &Path) -> anyhow::Result<(federation::Checkpoint, Option<String>)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut v: serde_json::Value = federation::from_exact_json(&text)
        .with_context(|| format!("{} is not JSON", path.display()))?;
    let run_id = v
        .pointer("/serve/run_id")
        .and_then(serde_json::Value::as_str)
        .map(String::from);
    let fed = match v.get_mut("federation") {
        Some(f) => f.take(),
        None => v,
    };
    let c: federation::Checkpoint = serde_json::from_value(fed)
        .with_context(|| format!("{} is not a checkpoint", path.display()))?;
    c.check().with_context(|| format!("{}", path.display()))?;
    Ok((c, run_id))
}

/// `coordinator export`: one `cluster-<k>.safetensors` per cluster model of the checkpoint.
///
/// # Errors
///
/// A missing or bad checkpoint, or a file that cannot be written.
pub fn run(args: &ExportArgs) -> anyhow::Result<Exported> {
    let path = if args.from.is_dir() {
        args.from.join(CHECKPOINT_FILE)
    } else {
        args.from.clone()
    };
    let (c, run_id) = read_checkpoint(&path)?;
    if c.round == 0 {
        warn!(
            "{}: checkpointed after round 0, before any training round: the models are the \
             clusters' initial ones",
            path.display()
        );
    }
    let out = match &args.out {
        Some(o) => o.clone(),
        None => path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf(),
    };
    let models = of_checkpoint(&c, run_id.as_deref());
    let paths = write(&out, &models)?;
    Ok(Exported { models, paths })
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgecfl_shared::model::ModelKind;

    #[test]
    fn members_and_accuracy_follow_the_assignment() {
        let clients: Vec<ClientInfo> = (0..4)
            .map(|i| ClientInfo {
                index: i,
                id: format!("c{i}"),
                samples: 10,
            })
            .collect();
        let models = vec![
            Params::init(ModelKind::Mlp, 0),
            Params::init(ModelKind::Mlp, 1),
        ];
        let acc = [Some(0.5), Some(f64::NAN), None, Some(1.0)];
        let m = cluster_models(
            ("fedclust", DatasetKind::Fmnist),
            Some("r1"),
            3,
            &clients,
            &[1, 0, 1, 1],
            &models,
            |p| acc[p],
        );
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].meta.members, ["c1"]);
        assert_eq!(m[0].meta.accuracy, None);
        assert_eq!(m[1].meta.members, ["c0", "c2", "c3"]);
        assert_eq!(m[1].meta.accuracy, Some(0.75));
        assert_eq!(m[1].meta.cluster, Some(1));
        assert_eq!(m[1].meta.round, Some(3));
        assert_eq!(m[1].params, models[1]);
        let dir = std::env::temp_dir().join(format!("edgecfl-export-{}", std::process::id()));
        let paths = write(&dir, &m).unwrap();
        assert_eq!(paths[1], dir.join("cluster-1.safetensors"));
        let back = model_file::read(&paths[1]).unwrap();
        assert_eq!(
            (back.params, back.meta),
            (m[1].params.clone(), m[1].meta.clone())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_that_is_not_a_checkpoint_is_an_error() {
        let dir = std::env::temp_dir().join(format!("edgecfl-export-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in [("a.json", "{\"federation\": {}}"), ("b.json", "[1,")] {
            std::fs::write(dir.join(name), text).unwrap();
            assert!(read_checkpoint(&dir.join(name)).is_err(), "{name}");
        }
        let err = run(&ExportArgs {
            from: dir.clone(),
            out: None,
        })
        .unwrap_err();
        assert!(format!("{err:#}").contains("checkpoint.json"), "{err:#}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
