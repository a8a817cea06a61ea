//! `coordinator partition`: what each client of a partition holds, and, given a run's
//! `clusters.json`, how the clusters found line up with the clients' label sets.
//!
//! ```text
//! coordinator partition --partition label:2 --clients 100 --seed 0
//! coordinator partition --partition label:2 --clients 100 --seed 0 \
//!     --clusters bench-results/fedclust/label-2-fedclust/clusters.json
//! ```
//!
//! Prints JSON: per client its sample count, label histogram (labels as the client sees them,
//! i.e. after a `shift:` label shift), rotation, label shift and ground-truth group;
//! with `--clusters`, each client's cluster and a `by_label_set` check: how many distinct label
//! sets there are, how many clusters hold a single label set ("pure"), and which label sets are
//! split over several clusters. For `label:K` partitions the distinct label sets are the natural
//! ground truth that FedClust's final-layer clustering should recover.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, ensure};
use edgecfl_shared::data::DatasetKind;
use edgecfl_shared::data::partition::{PartitionSpec, partition_of, shift_label};
use serde_json::{Value, json};

/// Arguments of `coordinator partition`.
#[derive(Debug, Clone, clap::Args)]
pub struct PartitionArgs {
    /// iid | label:K | dir:BETA | groups:012-34-56-789 | rotate:G | shift:G | rotate:R*BASE |
    /// dominant:ALPHA | pairs | tasks:fmnist3 (labels from 10 on with commas: groups:0,1,2-10,11)
    #[arg(long)]
    pub partition: PartitionSpec,
    /// Number of clients.
    #[arg(long, default_value_t = 100)]
    pub clients: usize,
    /// Master seed (as `simulate --seed`).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The data set.
    #[arg(long, value_name = "NAME", default_value_t = DatasetKind::Fmnist,
          help = edgecfl_shared::data::catalog::dataset_flag_help())]
    pub dataset: DatasetKind,
    /// The data set's directory.
    #[arg(long, value_name = "DIR", help = edgecfl_shared::data::catalog::data_flag_help())]
    pub data: Option<PathBuf>,
    /// A run's `clusters.json`: compare its assignment with the clients' label sets.
    #[arg(long)]
    pub clusters: Option<PathBuf>,
}

/// Runs `coordinator partition` and returns the JSON it prints.
pub fn run(args: &PartitionArgs) -> anyhow::Result<Value> {
    let data = edgecfl_shared::data::load(args.dataset, args.data.as_deref())
        .with_context(|| format!("loading {}", args.dataset.info().name))?;
    let classes = args.dataset.info().classes();
    let part = partition_of(
        &args.partition,
        &data.train.labels,
        classes,
        data.writers.as_ref(),
        args.clients,
        args.seed,
    )
    .with_context(|| format!("partition {}", args.partition))?;
    let assignment = args
        .clusters
        .as_ref()
        .map(|p| read_assignment(p, args.clients))
        .transpose()?;

    let clients: Vec<Value> = part
        .clients
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut hist = BTreeMap::new();
            for &s in &c.train {
                *hist
                    .entry(shift_label(data.train.labels[s], c.label_shift))
                    .or_insert(0usize) += 1;
            }
            json!({
                "index": i,
                "samples": c.train.len(),
                "labels": hist,
                "rotation": c.rotation,
                "label_shift": c.label_shift,
                "truth": part.truth.as_ref().map(|t| t[i]),
                "cluster": assignment.as_ref().map(|a| a[i]),
            })
        })
        .collect();
    let mut out = json!({
        "partition": args.partition.to_string(),
        "seed": args.seed,
        "data": data.source.to_string(),
        "clients": clients,
    });
    if let Some(a) = &assignment {
        let sets: Vec<&[u8]> = part.clients.iter().map(|c| c.labels.as_slice()).collect();
        out["by_label_set"] = compare(&sets, a);
    }
    Ok(out)
}

/// The `assignment` array of a `clusters.json`, checked against the number of clients.
fn read_assignment(path: &std::path::Path, n: usize) -> anyhow::Result<Vec<usize>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let a: Vec<usize> = v["assignment"]
        .as_array()
        .with_context(|| format!("{}: no `assignment` array", path.display()))?
        .iter()
        .map(|x| x.as_u64().map(|x| x as usize))
        .collect::<Option<_>>()
        .with_context(|| format!("{}: `assignment` holds a non-integer", path.display()))?;
    ensure!(
        a.len() == n,
        "{}: {} clients in the assignment, but --clients {n}",
        path.display(),
        a.len()
    );
    Ok(a)
}

/// Clusters against label sets: distinct sets, pure clusters (one label set), split sets.
fn compare(sets: &[&[u8]], assignment: &[usize]) -> Value {
    let mut clusters_of: BTreeMap<&[u8], Vec<usize>> = BTreeMap::new();
    let mut sets_in: BTreeMap<usize, Vec<&[u8]>> = BTreeMap::new();
    for (s, &c) in sets.iter().zip(assignment) {
        let cs = clusters_of.entry(s).or_default();
        if !cs.contains(&c) {
            cs.push(c);
        }
        let ss = sets_in.entry(c).or_default();
        if !ss.contains(s) {
            ss.push(s);
        }
    }
    let pure = sets_in.values().filter(|s| s.len() == 1).count();
    let split: Vec<Value> = clusters_of
        .iter()
        .filter(|(_, c)| c.len() > 1)
        .map(|(s, c)| json!({"labels": s, "clusters": c}))
        .collect();
    let mixed: Vec<Value> = sets_in
        .iter()
        .filter(|(_, s)| s.len() > 1)
        .map(|(c, s)| json!({"cluster": c, "label_sets": s}))
        .collect();
    json!({
        "distinct_label_sets": clusters_of.len(),
        "clusters": sets_in.len(),
        "pure_clusters": pure,
        "label_sets_split_over_clusters": split,
        "mixed_clusters": mixed,
        "clusters_equal_label_sets": split.is_empty() && mixed.is_empty(),
    })
}

#[cfg(test)]
mod tests {
    use super::compare;

    #[test]
    fn clusters_equal_to_label_sets_and_not() {
        let (a, b, c): (&[u8], &[u8], &[u8]) = (&[0, 1], &[2, 3], &[4, 5]);
        let v = compare(&[a, a, b, c], &[0, 0, 1, 2]);
        assert_eq!(v["clusters_equal_label_sets"], true);
        assert_eq!(v["pure_clusters"], 3);
        // b split over clusters 1 and 2; cluster 0 mixes a and c.
        let v = compare(&[a, c, b, b], &[0, 0, 1, 2]);
        assert_eq!(v["clusters_equal_label_sets"], false);
        assert_eq!(v["distinct_label_sets"], 3);
        assert_eq!(v["pure_clusters"], 2);
        assert_eq!(
            v["label_sets_split_over_clusters"][0]["clusters"],
            serde_json::json!([1, 2])
        );
        assert_eq!(v["mixed_clusters"][0]["cluster"], 0);
    }
}
