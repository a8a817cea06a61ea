//! Testbed mode: when every client holds a shard of one partition (`edge-client run
//! --partition SPEC --seed S --index I --of N`), the coordinator computes that partition itself
//! from its own copy of the labels, so that what it reports and trusts does not come from what
//! the clients say (issue 28): each client's ground-truth group (the ARI), and the true size of
//! each shard, which caps the counts the client declares.

use std::path::Path;

use anyhow::Context;
use edgecfl_shared::data::partition::{PartitionSpec, local_test_indices, partition_of};
use edgecfl_shared::data::{DataLabels, DatasetKind};

/// The partition of a testbed, as the coordinator computes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Testbed {
    /// The ground-truth group of each shard index (`None`: the partition has none).
    pub truth: Option<Vec<usize>>,
    /// The (training, local test) samples of each shard index, from the coordinator's labels.
    pub sizes: Vec<(u64, u64)>,
    /// Where the coordinator's labels come from.
    pub source: String,
}

impl Testbed {
    /// Partitions the labels of `dataset` in `data` (for Fashion-MNIST by `FashionMnist::load`'s
    /// rule) into `of` shards by `spec` and `seed`, as each testbed client does.
    ///
    /// # Errors
    ///
    /// The labels cannot be read, or the partition cannot be made from them.
    pub fn compute(
        spec: &PartitionSpec,
        seed: u64,
        of: usize,
        dataset: DatasetKind,
        data: Option<&Path>,
    ) -> anyhow::Result<Testbed> {
        let labels = DataLabels::load(dataset, data)
            .with_context(|| format!("loading {}'s labels", dataset.info().name))?;
        let p = partition_of(
            spec,
            &labels.train,
            dataset.info().classes(),
            labels.writers.as_ref(),
            of,
            seed,
        )
        .with_context(|| format!("partitioning {} into {of} shards", labels.source))?;
        let sizes = p
            .clients
            .iter()
            .map(|s| {
                (
                    s.train.len() as u64,
                    local_test_indices(s, &labels.test).len() as u64,
                )
            })
            .collect();
        Ok(Testbed {
            truth: p.truth,
            sizes,
            source: labels.source.to_string(),
        })
    }

    /// Whether the clients' data are the coordinator's: most of the declared `(shard index,
    /// training count, test count)` are within their shard's sizes (an honest client on the same
    /// data declares exactly them, or fewer). A client on other data (the full set where the
    /// coordinator has the bundled subset) declares more; then the sizes say nothing about the
    /// fleet's shards and must not cap them.
    pub fn agrees(&self, declared: &[(u32, u64, u64)]) -> bool {
        let within = declared
            .iter()
            .filter(|&&(i, train, test)| {
                self.sizes
                    .get(i as usize)
                    .is_some_and(|&(t, e)| train <= t && test <= e)
            })
            .count();
        2 * within > declared.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bundled subset (300 training and 100 test images per class), `groups:012-34-56-789`
    /// over 8 clients: group `g` of `G = 4` holds clients `g` and `g + 4`, which split their
    /// group's labels' images between them; a client's local test set is every test image of its
    /// labels. Counted by hand from the subset's sizes.
    #[test]
    fn groups_on_the_bundled_subset_by_hand() {
        let spec: PartitionSpec = "groups:012-34-56-789".parse().unwrap();
        let subset = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/fmnist-subset");
        let t = Testbed::compute(&spec, 0, 8, DatasetKind::Fmnist, Some(&subset)).unwrap();
        assert_eq!(t.truth, Some(vec![0, 1, 2, 3, 0, 1, 2, 3]));
        let labels = [3u64, 2, 2, 3];
        for (i, &(train, test)) in t.sizes.iter().enumerate() {
            let l = labels[i % 4];
            // The group's 300·l images split between its two clients, one each way of odd.
            assert_eq!(test, 100 * l, "client {i}");
            let other = t.sizes[(i + 4) % 8].0;
            assert_eq!(train + other, 300 * l, "clients {i} and {}", (i + 4) % 8);
        }
        assert!(t.agrees(&[(0, t.sizes[0].0, t.sizes[0].1), (1, 10, 10), (5, 900, 900)]));
        assert!(!t.agrees(&[(0, 6_000, 1_000), (1, 10, 10), (5, 900_000, 900)]));
        assert!(!t.agrees(&[(99, 1, 1)]), "an index outside the partition");
    }
}
