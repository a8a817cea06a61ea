//! Result files of a run: `summary.json`, `rounds.csv`, `clusters.json`, and progress output.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use edgecfl_shared::algorithms::Algorithm;
use edgecfl_shared::atomic_file;
use edgecfl_shared::cluster::clustering::Clustering;
use edgecfl_shared::federation::{
    ClientInfo, DroppedNewcomer, DroppedUpdate, Newcomer, NormBound, Observer, RoundRecord,
    RunResult,
};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};
use tracing::{info, warn};

use crate::config::RunConfig;

/// The file MT-HFL's relevance matrix `R` is written to (CSV, row `i` = client `i`).
pub const RELEVANCE_FILE: &str = "relevance.csv";

/// The `summary.json` of a run; `extra` (an object) adds runtime-specific keys.
pub fn summary(
    cfg: &RunConfig,
    result: &RunResult,
    data_source: &str,
    extra: Option<Value>,
) -> Value {
    let accuracy_per_round: Vec<Option<f64>> = result.rounds.iter().map(|r| r.accuracy).collect();
    let f = &cfg.method;
    let n = result.clients.len();
    let task_accuracy_per_round: Vec<Option<Vec<f64>>> = result
        .rounds
        .iter()
        .map(|r| r.task_accuracy.clone())
        .collect();
    let mut v = json!({
        "algorithm": cfg.method.algorithm.to_string(),
        "partition": cfg.partition.to_string(),
        "model": cfg.method.federation.model.to_string(),
        "n_clients": result.clients.len(),
        "n_clusters": result.n_clusters,
        "ari": result.ari,
        "threshold": result.clustering.as_ref().map(|c| c.threshold),
        "linkage": cfg.method.federation.linkage.to_string(),
        "accuracy_per_round": accuracy_per_round,
        "final_accuracy": result.final_accuracy(),
        "upload_bytes_clustering_per_client": result.signature_bytes,
        "wall_seconds": result.wall_seconds,
        "data": data_source,
        "backend": cfg.backend.to_string(),
        "assignment": result.assignment,
        "client_accuracy": result.final_client_accuracy,
        "task_accuracy_per_round": task_accuracy_per_round,
        "final_task_accuracy": result.rounds.iter().rev().find_map(|r| r.task_accuracy.clone()),
        "relevance_file": result.relevance.as_ref().map(|_| RELEVANCE_FILE),
        "hierarchy": f.hierarchical(),
        "lps_rounds": f.hierarchical().then_some(f.federation.lps_rounds),
        "common_layers": result.common_layers,
        "common_floats_per_lps": f.hierarchical().then_some(result.common_len),
        "gps_rounds": result.gps_rounds,
        "clusters_per_round": result.rounds.iter().map(|r| r.clusters).collect::<Vec<_>>(),
        "ari_per_round": result.rounds.iter().map(|r| r.ari).collect::<Vec<_>>(),
        "final_ari": result.rounds.last().and_then(|r| r.ari),
        // Bytes of the messages (postcard, envelopes left out) of every job and answer of the
        // run, both ways, all rounds (round 0, training, evaluation), in the upload encoding of
        // the run (`serve --upload`), and per client of the run; over MQTT, `wire_bytes` has
        // the payloads received and sent, envelopes included.
        "bytes_up": result.bytes_up,
        "bytes_down": result.bytes_down,
        "bytes_up_per_client": result.bytes_up / n.max(1) as u64,
        "bytes_down_per_client": result.bytes_down / n.max(1) as u64,
        "newcomers": newcomers_json(result),
        "weighting": f.federation.weighting.to_string(),
        // `null` for no bound (as before the default bound), a number, or "median:M".
        "max_update_norm": match f.federation.max_update_norm {
            NormBound::Off => Value::Null,
            NormBound::Fixed(b) => json!(b),
            other => json!(other.to_string()),
        },
        "config": cfg,
    });
    // Every method's own keys, null but for the run's method's.
    for key in Algorithm::summary_keys() {
        v[key] = Value::Null;
    }
    for (key, value) in f.algorithm.summary_fields(f, n, result.signature_bytes) {
        v[key] = value;
    }
    let reported = result.reported_accuracy();
    // Who and what the run did not take (apart: one json! of every key exceeds the macro's
    // recursion limit).
    let faults = json!({
        "dropped_newcomers": dropped_json(result),
        // Trained models dropped for claiming more samples than declared or for a change above
        // max_update_norm: each with client id, round and reason; and their count per client.
        "dropped_updates": result.dropped_updates,
        "dropped_updates_per_client": dropped_updates_per_client(result),
        // Round-0 clients without a round-0 upload, left out of round 0 (offered again as
        // newcomers of round 1: see newcomers and dropped_newcomers).
        "left_out": result.left_out.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        // The one-shot cut's guards (cluster::robust): the clients set apart as clusters of
        // their own, and those whose upload's norm was rescaled (null: no one-shot clustering).
        "quarantined": result.clustering.as_ref().map(|c| ids(result, &c.quarantined)),
        // The clients' own reports of their last accuracy (self-reported: the coordinator cannot
        // check them), summarised robustly, and the clients whose report is an outlier.
        "client_accuracy_mean": reported.as_ref().map(|r| r.mean),
        "client_accuracy_median": reported.as_ref().map(|r| r.median),
        "client_accuracy_trimmed": reported.as_ref().map(|r| r.trimmed),
        "client_accuracy_outliers": reported.as_ref().map(|r| ids(result, &r.outliers)),
        "client_accuracy_mean_inliers": reported.as_ref().map(|r| r.inlier_mean),
        "rescaled": result.clustering.as_ref().map(|c| ids(result, &c.rescaled)),
    });
    // Both local test views (`accuracy_per_round` is the one `local_test` names).
    let views = json!({
        "local_test": f.federation.local_test.to_string(),
        "accuracy_labels_per_round":
            result.rounds.iter().map(|r| r.accuracy_labels).collect::<Vec<_>>(),
        "accuracy_proportional_per_round":
            result.rounds.iter().map(|r| r.accuracy_proportional).collect::<Vec<_>>(),
        "final_accuracy_labels": result.rounds.iter().rev().find_map(|r| r.accuracy_labels),
        "final_accuracy_proportional":
            result.rounds.iter().rev().find_map(|r| r.accuracy_proportional),
        // Each client at its own best evaluation (the run's view): PACFL's optimistic figure.
        "client_best_accuracy": result.best_client_accuracy, // NaN (never evaluated) as null
        "mean_client_best_accuracy": result.mean_best_client_accuracy(),
        // FedClust's Table 6: the newcomers' mean accuracy after personalising.
        "newcomers_personalized_accuracy": result.mean_personalized_accuracy(),
    });
    if let Value::Object(map) = &mut v {
        for part in [Some(faults), Some(views), extra].into_iter().flatten() {
            if let Value::Object(part) = part {
                map.extend(part);
            }
        }
    }
    v
}

/// The ids of the clients at `positions` of the run's client list.
fn ids<'a>(result: &'a RunResult, positions: &[usize]) -> Vec<&'a str> {
    positions
        .iter()
        .filter_map(|&p| result.clients.get(p).map(|c| c.id.as_str()))
        .collect()
}

/// The clients placed after round 0: client index and id, join round, cluster, distance to the
/// centroid (FedClust), whether the cluster is its ground-truth group's (when known), and its
/// accuracy after personalising (with `--personalize`).
fn newcomers_json(result: &RunResult) -> Value {
    result
        .newcomers
        .iter()
        .map(|n| {
            let mut v = json!({
                "client": n.client.index,
                "id": n.client.id,
                "round": n.round,
                "cluster": n.cluster,
                "distance": n.distance,
                "truth_match": n.truth_match,
            });
            // Only in runs that personalise (`--personalize`).
            if let (Some(a), Value::Object(m)) = (n.personalized_accuracy, &mut v) {
                m.insert("personalized_accuracy".into(), a.into());
            }
            v
        })
        .collect()
}

/// Dropped updates counted by client id, then by reason.
fn dropped_updates_per_client(
    result: &RunResult,
) -> std::collections::BTreeMap<String, std::collections::BTreeMap<String, u64>> {
    let mut m: std::collections::BTreeMap<String, std::collections::BTreeMap<String, u64>> =
        Default::default();
    for d in &result.dropped_updates {
        *m.entry(d.client.clone())
            .or_default()
            .entry(d.reason.name().to_string())
            .or_default() += 1;
    }
    m
}

/// The clients turned away after round 0, with the reason.
fn dropped_json(result: &RunResult) -> Value {
    result
        .dropped_newcomers
        .iter()
        .map(|d| {
            json!({
                "client": d.client.index,
                "id": d.client.id,
                "round": d.round,
                "reason": d.reason.to_string(),
                "kind": d.reason,
            })
        })
        .collect()
}

/// The per-round CSV: round, sampled, received, train loss, mean accuracy (the run's local test
/// view), per-cluster and per-task accuracy, GPS rounds, clusters, ARI, and both views' means.
pub fn rounds_csv(result: &RunResult) -> String {
    let mut s = String::from("round,sampled,received,train_loss,accuracy,seconds");
    for c in 0..result.n_clusters {
        let _ = write!(s, ",cluster{c}_accuracy");
    }
    let tasks = result.n_tasks();
    for t in 0..tasks {
        let _ = write!(s, ",task{t}_accuracy");
    }
    let hierarchical = result.hierarchical();
    if hierarchical {
        s.push_str(",gps");
    }
    s.push_str(",clusters,ari,accuracy_labels,accuracy_proportional");
    s.push('\n');
    let opt = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v:.6}"));
    for r in &result.rounds {
        let _ = write!(
            s,
            "{},{},{},{:.6},{},{:.3}",
            r.round,
            r.sampled,
            r.received,
            r.train_loss,
            opt(r.accuracy),
            r.seconds
        );
        for c in 0..result.n_clusters {
            let v = r.cluster_accuracy.as_ref().and_then(|a| a.get(c).copied());
            let _ = write!(s, ",{}", opt(v));
        }
        for t in 0..tasks {
            let v = r.task_accuracy.as_ref().and_then(|a| a.get(t).copied());
            let _ = write!(s, ",{}", opt(v.filter(|x| x.is_finite())));
        }
        if hierarchical {
            let _ = write!(s, ",{}", u8::from(r.gps));
        }
        let _ = write!(
            s,
            ",{},{},{},{}",
            r.clusters,
            opt(r.ari),
            opt(r.accuracy_labels),
            opt(r.accuracy_proportional)
        );
        s.push('\n');
    }
    s
}

/// A square matrix as CSV, header `client,0,1,…`, one row per client, 6 decimals.
pub fn matrix_csv(m: &[Vec<f64>]) -> String {
    let mut s = String::from("client");
    for j in 0..m.len() {
        let _ = write!(s, ",{j}");
    }
    s.push('\n');
    for (i, row) in m.iter().enumerate() {
        let _ = write!(s, "{i}");
        for v in row {
            let _ = write!(s, ",{v:.6}");
        }
        s.push('\n');
    }
    s
}

/// `clusters.json`: assignment, members per cluster, the dendrogram and the cut.
pub fn clusters_json(result: &RunResult) -> Value {
    let members: Vec<Vec<usize>> = (0..result.n_clusters)
        .map(|c| {
            (0..result.assignment.len())
                .filter(|&i| result.assignment[i] == c)
                .collect()
        })
        .collect();
    json!({
        "assignment": result.assignment,
        "members": members,
        "client_ids": result.clients.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        "ari": result.ari,
        "clusters_per_round": result.rounds.iter().map(|r| r.clusters).collect::<Vec<_>>(),
        "ari_per_round": result.rounds.iter().map(|r| r.ari).collect::<Vec<_>>(),
        "newcomers": newcomers_json(result),
        "clustering": result.clustering,
    })
}

/// Writes every result file into `dir`.
pub fn write_all(
    dir: &Path,
    cfg: &RunConfig,
    result: &RunResult,
    data_source: &str,
    extra: Option<Value>,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create output directory {}", dir.display()))?;
    if let Some(r) = result.reported_accuracy()
        && !r.outliers.is_empty()
    {
        warn!(
            "the last accuracy that {} reported is an outlier among the clients' reports (self-reported; the clients' mean {:.4}, median {:.4}, trimmed mean {:.4}: summary.json)",
            ids(result, &r.outliers).join(", "),
            r.mean,
            r.median,
            r.trimmed
        );
    }
    // Atomically: a process stopped while writing leaves the file before or after, never half.
    let write = |name: &str, text: String| {
        let p = dir.join(name);
        atomic_file::write(&p, text.as_bytes())
            .with_context(|| format!("cannot write {}", p.display()))
    };
    write(
        "summary.json",
        serde_json::to_string_pretty(&summary(cfg, result, data_source, extra))?,
    )?;
    write("rounds.csv", rounds_csv(result))?;
    if let Some(r) = &result.relevance {
        write(RELEVANCE_FILE, matrix_csv(r))?;
    }
    write(
        "clusters.json",
        serde_json::to_string_pretty(&clusters_json(result))?,
    )?;
    Ok(())
}

/// Progress on stderr: a bar over rounds with the latest accuracy.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar of `rounds` steps (hidden when stderr is not a terminal).
    pub fn new(rounds: usize) -> Self {
        let bar = ProgressBar::new(rounds as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} round {pos}/{len} [{bar:30}] {elapsed_precise} eta {eta} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        Progress { bar }
    }

    /// Logs through `log` with the bar (if shown) cleared meanwhile, so the line lands above it.
    fn log(&self, log: impl FnOnce()) {
        self.bar.suspend(log);
    }

    /// Finishes the bar.
    pub fn finish(&self) {
        self.bar.finish();
    }
}

impl Observer for Progress {
    fn clustered(&mut self, c: &Clustering, ari: Option<f64>) {
        let ari = ari.map_or("n/a".to_string(), |a| format!("{a:.3}"));
        self.log(|| {
            info!(
                "round 0: {} clusters (linkage {}, cut at {:.4}), ARI vs truth {ari}",
                c.n_clusters, c.linkage, c.threshold
            );
            if !c.quarantined.is_empty() {
                warn!(
                    "round 0: quarantined {} client(s) far from every other, each a cluster of its own (client positions {:?}; summary.json's `quarantined` names them)",
                    c.quarantined.len(),
                    c.quarantined
                );
            }
            if !c.rescaled.is_empty() {
                warn!(
                    "round 0: rescaled {} upload(s) whose norm was an outlier to the median norm (client positions {:?})",
                    c.rescaled.len(),
                    c.rescaled
                );
            }
        });
    }

    fn newcomer(&mut self, n: &Newcomer) {
        let distance = n
            .distance
            .map_or(String::new(), |d| format!(" (distance {d:.4})"));
        self.log(|| {
            info!(
                "round {}: newcomer {} joins cluster {}{distance}",
                n.round, n.client.id, n.cluster
            )
        });
    }

    fn newcomer_dropped(&mut self, d: &DroppedNewcomer) {
        self.log(|| {
            warn!(
                "round {}: newcomer {} dropped: {}",
                d.round, d.client.id, d.reason
            )
        });
    }

    fn left_out(&mut self, c: &ClientInfo) {
        self.log(|| {
            warn!(
                "round 0: {} sent no round-0 upload; left out, offered again in round 1",
                c.id
            )
        });
    }

    fn update_dropped(&mut self, d: &DroppedUpdate) {
        self.log(|| {
            warn!(
                "round {}: update of {} dropped: {}",
                d.round, d.client, d.reason
            )
        });
    }

    fn round(&mut self, r: &RoundRecord, _of: usize) {
        self.bar.set_position(r.round as u64);
        if let Some(a) = r.accuracy {
            self.bar.set_message(format!("acc {:.2} %", 100.0 * a));
            if !self.bar.is_hidden() {
                return;
            }
            info!(
                "round {}: accuracy {:.2} %, train loss {:.4}, {:.1}s",
                r.round,
                100.0 * a,
                r.train_loss,
                r.seconds
            );
        }
    }
}
