//! Random groups: MT-HFL's baseline (Ali & Arafa, §IV), a seeded random split of the clients
//! into `k` near-equal groups (`--clusters K`, or `--lambda k=K`), each trained with cluster
//! FedAvg (and the LPS/GPS hierarchy when on). A newcomer joins the smallest group (ties: the
//! lower number).

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use super::MethodConfig;
use crate::cluster::clustering::Lambda;
use crate::federation::{
    ClientInfo, Clusters, Env, FederationError, Init, NewcomerError, Placement, Strategy, Target,
    client_seed,
};

/// Checks that the number of groups is given.
pub(crate) fn check(cfg: &MethodConfig) -> Result<(), FederationError> {
    groups(cfg).map(|_| ())
}

fn groups(cfg: &MethodConfig) -> Result<usize, FederationError> {
    match cfg.federation.cut() {
        Lambda::Clusters(k) => Ok(k),
        cut => Err(FederationError::Config(format!(
            "random clustering needs the number of groups: --clusters K (or --lambda k=K), got \
             the cut {cut}"
        ))),
    }
}

/// Random groups.
#[derive(Debug, Clone)]
pub struct Random {
    k: usize,
}

impl Random {
    /// The method for `cfg` (whose cut must be `k=K`: [`crate::federation::FederationConfig::cut`]).
    ///
    /// # Errors
    ///
    /// [`FederationError::Config`] without a K.
    pub fn new(cfg: &MethodConfig) -> Result<Self, FederationError> {
        Ok(Random { k: groups(cfg)? })
    }
}

impl Strategy for Random {
    crate::stateless_resume!();

    fn init(&mut self, env: &mut Env<'_>) -> Result<Init, FederationError> {
        let assignment = random_assignment(env.clients.len(), self.k, env.cfg.seed);
        Ok(Init::plain(assignment, env.initial, true))
    }

    fn place(
        &mut self,
        _env: &mut Env<'_>,
        _round: usize,
        fresh: &[ClientInfo],
        state: &Clusters,
    ) -> Result<Vec<Result<Placement, NewcomerError>>, FederationError> {
        let mut sizes = vec![0usize; state.len()];
        for &a in state.assignment() {
            sizes[a] += 1;
        }
        Ok(fresh
            .iter()
            .map(|_| {
                let smallest = (0..sizes.len()).min_by_key(|&k| (sizes[k], k)).unwrap_or(0);
                if let Some(s) = sizes.get_mut(smallest) {
                    *s += 1;
                }
                Ok(Placement {
                    target: Target::Cluster(smallest),
                    distance: None,
                })
            })
            .collect())
    }
}

/// Splits `n` clients into `k` near-equal groups at random (MT-HFL's baseline): a seeded
/// shuffle cut like numpy's `array_split` (the first `n mod k` groups take one more), numbered in
/// order of first appearance.
pub fn random_assignment(n: usize, k: usize, seed: u64) -> Vec<usize> {
    let k = k.clamp(1, n.max(1));
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(client_seed(seed, 0, usize::MAX));
    order.shuffle(&mut rng);
    let mut assignment = vec![0; n];
    let (base, extra) = (n / k, n % k);
    let mut at = 0;
    for g in 0..k {
        let size = base + usize::from(g < extra);
        for &c in &order[at..at + size] {
            assignment[c] = g;
        }
        at += size;
    }
    renumber(&assignment)
}

/// Renames clusters in order of first appearance (client 0 is in cluster 0).
fn renumber(assignment: &[usize]) -> Vec<usize> {
    let mut names = std::collections::HashMap::new();
    assignment
        .iter()
        .map(|&a| {
            let next = names.len();
            *names.entry(a).or_insert(next)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_groups_are_near_equal_seeded_and_numbered_in_order() {
        let a = random_assignment(10, 3, 4);
        let mut sizes = [0usize; 3];
        for &g in &a {
            sizes[g] += 1;
        }
        sizes.sort_unstable();
        assert_eq!(sizes, [3, 3, 4]);
        assert_eq!(a[0], 0);
        assert_eq!(a, random_assignment(10, 3, 4));
        // Some seed gives another split.
        assert!((0..20).any(|s| random_assignment(10, 3, s) != a));
        assert_eq!(random_assignment(2, 5, 0).len(), 2);
    }
}
