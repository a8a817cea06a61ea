//! CFL (Sattler, Müller & Samek, "Clustered Federated Learning: Model-Agnostic Distributed
//! Multitask Optimization Under Privacy Constraints", IEEE TNNLS 2021; AdaCFL's "FMTL"): one
//! cluster to start with, split in two whenever federated training of a cluster has reached a
//! stationary point that some of its members disagree with.
//!
//! Every round, each sampled client trains its cluster's model θ_c (`cfg.epochs`, seed
//! [`Env::seed`]) and uploads it; its update is ΔW_i = θ_i − θ_c. For each cluster with at least
//! two updates this round (`S_c`), the split criterion of the paper's Algorithm 1 is
//!
//! ```text
//!   ‖ (1/|S_c|) Σ_{i∈S_c} ΔW_i ‖ < ε₁      (the cluster is near a stationary point)
//!   max_{i∈S_c} ‖ΔW_i‖          > ε₂      (but some member is far from its own)
//! ```
//!
//! with unweighted means as in the authors' reference code (felisat/clustered-federated-learning);
//! `--eps1` (default 0.4) and `--eps2` (default 1.6), the reference code's values ([`should_split`]).
//! When it holds, `S_c` is bi-partitioned by the 2-cluster cut of complete-linkage HC on the
//! cosine distance `1 − cos(ΔW_i, ΔW_j)` ([`bipartition`]; the reference code runs scikit-learn's
//! complete-linkage agglomerative clustering on `−cos`, which gives the same tree). The part
//! holding the lowest-position member keeps the number `c`; the other becomes cluster `k` (the
//! next number: numbers are stable, new ones appended). Then cluster FedAvg (weighted by samples,
//! as everywhere in this crate): each part becomes the average of its own members' trained
//! models, i.e. both parts start from θ_c plus their own mean update, as the reference code's
//! `aggregate_clusterwise` after a split does. Without a split, plain cluster FedAvg.
//!
//! **Choices** where the paper is silent or the setting differs:
//! - The reference code also waits 20 rounds before any split and needs more than 2 members;
//!   here the ε thresholds alone gate a split and 2 updates suffice (a 2-member cluster may
//!   split into singletons). The paper's extra check on the cross-cluster similarity γ is not
//!   used (the reference code does not use it either). A cluster whose updates include an
//!   all-zero one is not split (its cosine is undefined).
//! - Partial participation (the paper samples every client): members of a split cluster that
//!   sent no update this round (not sampled, or dropped out) stay provisionally in the part that
//!   keeps the number `c`, and are *pending*. The first time a pending client is sampled again
//!   it is placed by the paper's parameter tree before it trains: it trains the model cached at
//!   the split (θ_c of that round) and goes to the part whose mean update of that round is most
//!   cosine-similar to its own (ties: the part keeping `c`), descending through later splits of
//!   that part the same way. Its training round then proceeds as usual in its new cluster.
//! - Newcomers descend the same tree from the root (cluster 0): at each split of the cluster
//!   they are in, one training of the cached model and a cosine comparison (one exchange per
//!   level). Without any split yet they join cluster 0. The reported distance is `1 − cos` to the
//!   chosen part's mean update at the last split passed.
//!
//! The split history ([`Cfl::splits`]: round, cluster, new cluster, the two norms, the members of
//! each part) and the norms of every cluster in every round ([`Cfl::norms`], to tune ε₁ and ε₂)
//! are kept in the strategy; the driver records the number of clusters per round. The round-0
//! assignment (everybody in cluster 0) is not a clustering, so `Init::clusters_found` is false
//! and a run's ARI is not scored from it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::MethodConfig;
use crate::cluster::distance::{CondensedMatrix, DistanceError};
use crate::cluster::hc::{Linkage, linkage};
use crate::federation::{
    ClientInfo, Clusters, Env, FederationError, Init, Job, NewcomerError, Placement, RoundStats,
    Strategy, Target, Training, Update, bad_state, check_model, non_negative, strategy_state,
    updates_of,
};
use crate::model::Params;

/// The reference code's ε₁ (split when the mean update norm is below it).
pub const DEFAULT_EPS1: f64 = 0.4;
/// The reference code's ε₂ (… and the largest update norm is above it).
pub const DEFAULT_EPS2: f64 = 1.6;

/// CFL's own settings: `[federation]` keys and run flags of the same names.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", group(skip))]
pub struct Settings {
    /// CFL: split when the mean update norm of a cluster is below ε₁ (default 0.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub eps1: Option<f64>,
    /// CFL: ... and its largest member update norm is above ε₂ (default 1.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub eps2: Option<f64>,
}

impl Settings {
    /// ε₁, or [`DEFAULT_EPS1`].
    pub fn eps1(&self) -> f64 {
        self.eps1.unwrap_or(DEFAULT_EPS1)
    }

    /// ε₂, or [`DEFAULT_EPS2`].
    pub fn eps2(&self) -> f64 {
        self.eps2.unwrap_or(DEFAULT_EPS2)
    }

    /// Ranges, whichever method runs.
    pub(crate) fn check(&self) -> Result<(), FederationError> {
        non_negative("eps1", self.eps1)?;
        non_negative("eps2", self.eps2)
    }
}

/// The norm of the unweighted mean of `deltas` and the largest norm among them (0, 0 for none).
pub fn update_norms(deltas: &[Vec<f32>]) -> (f64, f64) {
    let mean = mean_of(deltas.iter().map(Vec::as_slice));
    let max = deltas.iter().map(|d| norm(d)).fold(0.0, f64::max);
    (norm(&mean), max)
}

/// The split criterion: the mean update is small (`< eps1`) while some update is large
/// (`> eps2`).
pub fn should_split(mean_norm: f64, max_norm: f64, eps1: f64, eps2: f64) -> bool {
    mean_norm < eps1 && max_norm > eps2
}

/// The 2-cluster cut of complete-linkage HC on the cosine distances of `deltas`: part 0 or 1 of
/// each, in order of first appearance (the first is in part 0). One delta gives `[0]`.
///
/// # Errors
///
/// [`DistanceError`] for an all-zero, non-finite or ragged delta.
pub fn bipartition(deltas: &[Vec<f32>]) -> Result<Vec<usize>, DistanceError> {
    let d = CondensedMatrix::cosine_distance(deltas)?;
    Ok(linkage(&d, Linkage::Complete).cut_k(2))
}

/// Cosine similarity (0 when either vector is zero).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0.0, 0.0, 0.0);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 || bb == 0.0 {
        0.0
    } else {
        ab / (aa.sqrt() * bb.sqrt())
    }
}

fn norm(v: &[f32]) -> f64 {
    v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt()
}

fn mean_of<'a>(vs: impl Iterator<Item = &'a [f32]>) -> Vec<f32> {
    let mut sum: Vec<f64> = Vec::new();
    let mut n = 0usize;
    for v in vs {
        if sum.is_empty() {
            sum = vec![0.0; v.len()];
        }
        for (s, x) in sum.iter_mut().zip(v) {
            *s += f64::from(*x);
        }
        n += 1;
    }
    sum.into_iter()
        .map(|s| (s / n.max(1) as f64) as f32)
        .collect()
}

fn delta(update: &Params, start: &Params) -> Vec<f32> {
    update
        .values
        .iter()
        .zip(&start.values)
        .map(|(a, b)| a - b)
        .collect()
}

/// One split of a cluster.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Split {
    /// The training round it happened in.
    pub round: usize,
    /// The cluster split (its number stays with part 0).
    pub cluster: usize,
    /// The number of part 1.
    pub new_cluster: usize,
    /// ‖mean ΔW‖ of the cluster's updates that round.
    pub mean_norm: f64,
    /// max ‖ΔW‖.
    pub max_norm: f64,
    /// The clients (positions) with an update in each part.
    pub parts: [Vec<usize>; 2],
    /// θ_c of that round (what the members trained from): the branching point of the tree.
    model: Params,
    /// The mean update of each part.
    directions: [Vec<f32>; 2],
}

/// The update norms of one cluster in one round.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct NormRecord {
    /// Training round.
    pub round: usize,
    /// Cluster.
    pub cluster: usize,
    /// Updates received from its members.
    pub updates: usize,
    /// ‖mean ΔW‖.
    pub mean_norm: f64,
    /// max ‖ΔW‖.
    pub max_norm: f64,
    /// Whether it split.
    pub split: bool,
}

/// CFL as a [`Strategy`].
#[derive(Debug, Clone)]
pub struct Cfl {
    eps1: f64,
    eps2: f64,
    splits: Vec<Split>,
    norms: Vec<NormRecord>,
    /// Clients (positions) not yet placed after a split of their cluster: where their descent of
    /// the tree starts (cluster, splits of it after this round).
    pending: BTreeMap<usize, (usize, usize)>,
}

/// Where a descent of the parameter tree ends: the leaf cluster and `1 − cos` at the last split
/// passed, or why the client could not be placed.
type Descent = Result<(usize, Option<f64>), NewcomerError>;

impl Cfl {
    /// The method for a run with `cfg` (ε₁, ε₂ from its [`Settings`] or the defaults).
    pub fn new(cfg: &MethodConfig) -> Self {
        Cfl {
            eps1: cfg.methods.cfl.eps1(),
            eps2: cfg.methods.cfl.eps2(),
            splits: Vec::new(),
            norms: Vec::new(),
            pending: BTreeMap::new(),
        }
    }

    /// The splits so far, in the order they happened.
    pub fn splits(&self) -> &[Split] {
        &self.splits
    }

    /// The update norms of every cluster with an update, every round.
    pub fn norms(&self) -> &[NormRecord] {
        &self.norms
    }

    /// The first split of `cluster` after round `after`.
    fn next_split(&self, cluster: usize, after: usize) -> Option<&Split> {
        self.splits
            .iter()
            .find(|s| s.cluster == cluster && s.round > after)
    }

    /// Descends the tree for the clients `from` (position, (cluster, after round)) in round
    /// `round`: at each split met, the client trains the cached model and follows the part of
    /// most similar mean update. Returns, per client, its leaf cluster and `1 − cos` at the
    /// last split passed, or why it could not be placed (no answer).
    fn descend(
        &self,
        env: &mut Env<'_>,
        round: usize,
        from: &[(usize, (usize, usize))],
    ) -> Result<BTreeMap<usize, Descent>, FederationError> {
        let mut at: BTreeMap<usize, (usize, usize, Option<f64>)> = from
            .iter()
            .map(|&(p, (c, after))| (p, (c, after, None)))
            .collect();
        let mut out = BTreeMap::new();
        while !at.is_empty() {
            let mut jobs = Vec::new();
            for (&p, &(c, after, d)) in &at {
                match self.next_split(c, after) {
                    None => {
                        out.insert(p, Ok((c, d)));
                    }
                    Some(s) => jobs.push((
                        p,
                        Job::Train(Training {
                            start: &s.model,
                            cfg: env.train_config(round, p),
                            prox: None,
                        }),
                    )),
                }
            }
            at.retain(|p, _| !out.contains_key(p));
            if jobs.is_empty() {
                break;
            }
            let answers: BTreeMap<usize, Update> =
                updates_of(env.run(round, jobs)?).into_iter().collect();
            let mut next = BTreeMap::new();
            for (p, (c, after, _)) in std::mem::take(&mut at) {
                let (Some(s), Some(u)) = (self.next_split(c, after), answers.get(&p)) else {
                    out.insert(
                        p,
                        Err(NewcomerError::Assignment(format!(
                            "no update came back for the split of cluster {c}"
                        ))),
                    );
                    continue;
                };
                let dw = delta(&u.params, &s.model);
                let sim = [cosine(&dw, &s.directions[0]), cosine(&dw, &s.directions[1])];
                let part = usize::from(sim[1] > sim[0]);
                let c = if part == 0 { s.cluster } else { s.new_cluster };
                next.insert(p, (c, s.round, Some(1.0 - sim[part])));
            }
            at = next;
        }
        Ok(out)
    }
}

/// The state CFL saves: its splits, norms and pending clients.
type CflState = (Vec<Split>, Vec<NormRecord>, BTreeMap<usize, (usize, usize)>);

/// Checks a restored CFL state: splits number their new clusters 1, 2, … in order, from a
/// cluster that existed then, in rounds that do not go back, with a valid model and one
/// direction of the model's length per part; norms and pending clients name existing clusters.
fn check_state((splits, norms, pending): &CflState) -> Result<(), FederationError> {
    let bad = |what: String| Err(bad_state("CFL", what));
    for (i, s) in splits.iter().enumerate() {
        if s.new_cluster != i + 1 || s.cluster > i {
            return bad(format!(
                "split {i} of cluster {} into {}",
                s.cluster, s.new_cluster
            ));
        }
        if s.round == 0 || (i > 0 && s.round < splits[i - 1].round) {
            return bad(format!("split {i} in round {}", s.round));
        }
        check_model("CFL", &format!("split {i}'s model"), &s.model)?;
        if s.directions.iter().any(|d| d.len() != s.model.values.len()) {
            return bad(format!("split {i}'s directions do not fit its model"));
        }
    }
    let clusters = splits.len() + 1;
    if let Some(r) = norms.iter().find(|r| r.cluster >= clusters) {
        return bad(format!("norms of cluster {} of {clusters}", r.cluster));
    }
    if let Some((p, (c, _))) = pending.iter().find(|(_, (c, _))| *c >= clusters) {
        return bad(format!("client {p} pending in cluster {c} of {clusters}"));
    }
    Ok(())
}

impl Strategy for Cfl {
    /// The state: the parameter tree (every split with its cached model and part directions),
    /// the norms so far, and the clients still pending after a split.
    fn save(&self) -> Option<serde_json::Value> {
        serde_json::to_value((&self.splits, &self.norms, &self.pending)).ok()
    }

    fn restore(&mut self, state: serde_json::Value) -> Result<(), FederationError> {
        let state: CflState = strategy_state("CFL", state)?;
        check_state(&state)?;
        (self.splits, self.norms, self.pending) = state;
        Ok(())
    }

    fn init(&mut self, env: &mut Env<'_>) -> Result<Init, FederationError> {
        Ok(Init::plain(vec![0; env.clients.len()], env.initial, false))
    }

    fn round(
        &mut self,
        env: &mut Env<'_>,
        round: usize,
        sampled: &[usize],
        state: &mut Clusters,
    ) -> Result<RoundStats, FederationError> {
        // Pending clients sampled now are placed first (the parameter tree).
        let due: Vec<(usize, (usize, usize))> = sampled
            .iter()
            .filter_map(|p| self.pending.get(p).map(|&s| (*p, s)))
            .collect();
        if !due.is_empty() {
            for (p, placed) in self.descend(env, round, &due)? {
                if let Ok((c, _)) = placed
                    && c < state.len()
                {
                    state.assign(p, c);
                    self.pending.remove(&p);
                }
            }
        }

        let jobs = sampled
            .iter()
            .map(|&p| {
                (
                    p,
                    Job::Train(Training {
                        start: state.model_of(p),
                        cfg: env.train_config(round, p),
                        prox: None,
                    }),
                )
            })
            .collect();
        let updates = updates_of(env.run(round, jobs)?);

        for c in 0..state.len() {
            let mine: Vec<usize> = (0..updates.len())
                .filter(|&k| state.assignment()[updates[k].0] == c)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let start = &state.models()[c];
            let deltas: Vec<Vec<f32>> = mine
                .iter()
                .map(|&k| delta(&updates[k].1.params, start))
                .collect();
            let (mean_norm, max_norm) = update_norms(&deltas);
            let mut record = NormRecord {
                round,
                cluster: c,
                updates: mine.len(),
                mean_norm,
                max_norm,
                split: false,
            };
            let parts = (mine.len() >= 2
                && should_split(mean_norm, max_norm, self.eps1, self.eps2))
            .then(|| bipartition(&deltas).ok())
            .flatten()
            .filter(|l| l.contains(&1));
            if let Some(labels) = parts {
                let model = start.clone();
                let members: [Vec<usize>; 2] = [0, 1].map(|g| {
                    mine.iter()
                        .zip(&labels)
                        .filter(|&(_, &l)| l == g)
                        .map(|(&k, _)| updates[k].0)
                        .collect()
                });
                let directions = [0, 1].map(|g| {
                    mean_of(
                        deltas
                            .iter()
                            .zip(&labels)
                            .filter(|&(_, &l)| l == g)
                            .map(|(d, _)| d.as_slice()),
                    )
                });
                let new_cluster = state.push_cluster(model.clone());
                for &p in &members[1] {
                    state.assign(p, new_cluster);
                }
                // Members without an update this round wait for their next sampling.
                for p in state.members(c) {
                    if !members[0].contains(&p) {
                        self.pending.entry(p).or_insert((c, round - 1));
                    }
                }
                record.split = true;
                self.splits.push(Split {
                    round,
                    cluster: c,
                    new_cluster,
                    mean_norm,
                    max_norm,
                    parts: members,
                    model,
                    directions,
                });
            }
            self.norms.push(record);
        }
        state.fedavg(&updates, env.cfg.aggregate)?;
        Ok(RoundStats::of(sampled.len(), &updates))
    }

    fn place(
        &mut self,
        env: &mut Env<'_>,
        round: usize,
        fresh: &[ClientInfo],
        state: &Clusters,
    ) -> Result<Vec<Result<Placement, NewcomerError>>, FederationError> {
        let base = state.assignment().len();
        let from: Vec<(usize, (usize, usize))> =
            (base..base + fresh.len()).map(|p| (p, (0, 0))).collect();
        let mut placed = self.descend(env, round, &from)?;
        Ok((base..base + fresh.len())
            .map(|p| match placed.remove(&p) {
                Some(Ok((c, distance))) if c < state.len() => Ok(Placement {
                    target: Target::Cluster(c),
                    distance,
                }),
                Some(Ok((c, _))) => Err(NewcomerError::Assignment(format!(
                    "cluster {c} of {}",
                    state.len()
                ))),
                Some(Err(e)) => Err(e),
                None => Err(NewcomerError::Assignment("not placed".into())),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn norms_by_hand() {
        // Updates (3, 4) and (−3, −4): mean 0, max 5.
        let d = vec![vec![3.0f32, 4.0], vec![-3.0, -4.0]];
        assert_eq!(update_norms(&d), (0.0, 5.0));
        // (1, 0), (0, 1), (1, 1): mean (2/3, 2/3), norm 2√2/3; max √2.
        let d = vec![vec![1.0f32, 0.0], vec![0.0, 1.0], vec![1.0, 1.0]];
        let (mean, max) = update_norms(&d);
        assert!((mean - 2.0 * 2f64.sqrt() / 3.0).abs() < 1e-7, "{mean}");
        assert!((max - 2f64.sqrt()).abs() < 1e-7, "{max}");
        assert_eq!(update_norms(&[]), (0.0, 0.0));
    }

    #[test]
    fn split_criterion() {
        // Stationary on average (0 < ε₁) with a large member (5 > ε₂): split.
        assert!(should_split(0.0, 5.0, 0.4, 1.6));
        // Still moving as a whole: no split.
        assert!(!should_split(0.5, 5.0, 0.4, 1.6));
        // Every member is near its own optimum too: no split.
        assert!(!should_split(0.1, 1.0, 0.4, 1.6));
        // Strict inequalities at the thresholds.
        assert!(!should_split(0.4, 5.0, 0.4, 1.6));
        assert!(!should_split(0.1, 1.6, 0.4, 1.6));
    }

    #[test]
    fn two_orthogonal_groups_split_apart() {
        // Group A along e1 (with a little e3), group B along e2; interleaved.
        let d = vec![
            vec![1.0f32, 0.0, 0.1],
            vec![0.0, 1.0, 0.0],
            vec![2.0, 0.0, -0.1],
            vec![0.0, 3.0, 0.2],
            vec![1.0, 0.1, 0.0],
        ];
        assert_eq!(bipartition(&d).unwrap(), vec![0, 1, 0, 1, 0]);
        // Opposite updates (the stationary case the criterion looks for) split too.
        let d = vec![
            vec![1.0f32, 1.0],
            vec![-1.0, -1.0],
            vec![-2.0, -2.1],
            vec![2.0, 2.1],
        ];
        assert_eq!(bipartition(&d).unwrap(), vec![0, 1, 1, 0]);
        let (mean, max) = update_norms(&d);
        assert!(mean < 0.4 && max > 1.6, "{mean} {max}");
    }

    #[test]
    fn aligned_updates_do_not_split() {
        // All along (1, 1) with different lengths: the mean is long, so the criterion fails even
        // with every member far from the start.
        let d = vec![vec![1.0f32, 1.0], vec![2.0, 2.1], vec![3.0, 2.9]];
        let (mean, max) = update_norms(&d);
        assert!(!should_split(mean, max, 0.4, 1.6), "{mean} {max}");
        // Two updates always give two parts (cut_k(2)), aligned or not: the criterion, not the
        // partition, decides whether to split.
        assert_eq!(bipartition(&d[..2]).unwrap(), vec![0, 1]);
        // A zero update has no direction: an error, and the cluster is not split.
        assert!(bipartition(&[vec![0.0f32, 0.0], vec![1.0, 0.0]]).is_err());
        assert_eq!(bipartition(&[vec![1.0f32]]).unwrap(), vec![0]);
    }

    #[test]
    fn cosine_by_hand() {
        assert!((cosine(&[1.0, 0.0], &[1.0, 1.0]) - 0.5f64.sqrt()).abs() < 1e-12);
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 2.0]), 0.0);
        assert_eq!(cosine(&[1.0, 0.0], &[-3.0, 0.0]), -1.0);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0);
    }

    /// A saved state comes back; one of the wrong shape is a configuration error.
    #[test]
    fn restore_checks_the_state() {
        use crate::model::ModelKind;
        let cfg = MethodConfig::default();
        let model = Params::init(ModelKind::Mlp, 1);
        let split = |cluster, new_cluster, round, dir_len| Split {
            round,
            cluster,
            new_cluster,
            mean_norm: 0.1,
            max_norm: 2.0,
            parts: [vec![0], vec![1]],
            model: model.clone(),
            directions: [vec![0.5; dir_len], vec![-0.5; dir_len]],
        };
        let n = model.values.len();
        let state = |splits: Vec<Split>, pending: Vec<(usize, (usize, usize))>| {
            serde_json::to_value((
                splits,
                Vec::<NormRecord>::new(),
                BTreeMap::from_iter(pending),
            ))
            .unwrap()
        };
        let mut cfl = Cfl::new(&cfg);
        let good = state(
            vec![split(0, 1, 1, n), split(1, 2, 3, n)],
            vec![(4, (2, 2))],
        );
        cfl.restore(good).unwrap();
        assert_eq!(cfl.splits().len(), 2);
        assert_eq!(cfl.splits()[1].directions[0].len(), n);
        assert_eq!(
            cfl.save().map(|v| v.to_string()),
            Some(
                state(
                    vec![split(0, 1, 1, n), split(1, 2, 3, n)],
                    vec![(4, (2, 2))]
                )
                .to_string()
            )
        );
        for bad in [
            serde_json::json!(null),
            serde_json::json!([[], []]),
            // New clusters not numbered 1, 2, …; a split of a cluster not there yet.
            state(vec![split(0, 2, 1, n)], vec![]),
            state(vec![split(0, 1, 1, n), split(2, 2, 2, n)], vec![]),
            // Rounds going back, round 0.
            state(vec![split(0, 1, 3, n), split(0, 2, 2, n)], vec![]),
            state(vec![split(0, 1, 0, n)], vec![]),
            // Directions of another length; a pending client in a cluster that is not there.
            state(vec![split(0, 1, 1, n - 1)], vec![]),
            state(vec![split(0, 1, 1, n)], vec![(3, (2, 0))]),
        ] {
            assert!(
                matches!(
                    Cfl::new(&cfg).restore(bad.clone()),
                    Err(FederationError::Config(_))
                ),
                "{bad}"
            );
        }
    }
}
