//! AdaCFL (Gong, Xing, Liu, Wang & Liu, "Adaptive Clustered Federated Learning for Heterogeneous
//! Data in Edge Computing", MONET 2022): one-shot clustering on the smallest fully connected layer,
//! with a pre-clustering on label statistics, and an ε rule for newcomers.
//!
//! Round 0 (§5.2-5.3, Algorithm 1): every client trains the common θ⁰ for `warmup_epochs` (paper: 1
//! epoch) and uploads
//! - `L`, the number of classes in its training data, and `s`, the Shannon entropy of its label
//!   histogram in bits (eq. 4), as [`LabelStats`] (the client computes them, see
//!   [`crate::client`]);
//! - θ̂, the weights and bias of its fully connected layer with the fewest parameters
//!   ([`LayerSet::SmallestFc`]: fc3, 850 floats, for LeNet-5; fc2, 330 floats, for the MLP).
//!
//! The server then
//! 1. pre-clusters (Algorithm 1 line 6; [`pre_cluster`]): clients with the same `L` and entropies
//!    "with a gap of 10 %". **Choice** (the paper gives no procedure): within each equal-`L` group,
//!    clients sorted by `s` (ties: by position) are scanned in order; a client joins the current
//!    group when `|s − s₀| ≤ 0.1·s₀`, `s₀` the entropy of the group's first (smallest) member, and
//!    opens a new group otherwise. So `s = 0` clients (a single class) are together, and a chain
//!    1.0, 1.08, 1.15 splits as {1.0, 1.08}, {1.15}. A relative slack of 1e-9 absorbs rounding
//!    (`s = 1.1` joins `s₀ = 1.0`). `--pre-cluster off` skips this step (one pre-cluster).
//! 2. clusters each pre-cluster by agglomerative HC on the Euclidean distances of the uploads
//!    (eq. 3), merging "until the distance between the nearest clusters exceeds λ" (lines 7-8;
//!    [`adaptive_clustering`]). **Choice:** the linkage is `cfg.linkage` (default average).
//!    `cfg.threshold` is the cut: a distance λ (paper: 1.4; pass `--lambda 1.4`, the run-wide
//!    default stays `auto`) cuts every pre-cluster's tree at λ; `auto` and `gap` take λ from
//!    the tree over *all* clients, cut as FedClust would cut it (`auto`: the candidate cut of best
//!    silhouette, [`crate::cluster::cut`]; `gap`: the largest gap between merge heights), and cut
//!    every pre-cluster's tree there; `k=N` applies the lowest
//!    merges of all the pre-clusters' trees together until `N` clusters remain (never fewer than
//!    the pre-clusters). Clusters are numbered `0..κ` in order of first appearance by client
//!    position.
//! 3. trains each cluster by FedAvg weighted by samples (eq. 2), from θ⁰, with client sampling
//!    ([`crate::federation::fedavg_round`]).
//!
//! Newcomers (§5.4, eq. 5, Algorithm 2): the newcomer trains θ⁰ as in round 0 (seed
//! [`client_seed`]`(seed, 0, index)`, as if it had been there) and uploads the same layers (no
//! label statistics: Algorithm 2 does not use them). Each cluster keeps a representation θ̂_g:
//! **Choice** (spec) the centroid of its members' round-0 uploads. The newcomer joins the cluster of
//! nearest representation `g*` (ties: the lower number) unless that distance exceeds ε
//! (`--epsilon`, default 1.8 as in the paper); then it founds a new cluster whose model starts as
//! a copy of `g*`'s current model and whose representation is the newcomer's upload. The
//! representations of existing clusters do not move when newcomers join them, so the order
//! newcomers come in matters only through the new clusters they found.
//!
//! The layers uploaded are [`LayerSet::SmallestFc`] unless `signature_layers` is set to something
//! other than FedClust's default `final` (`all`, or named layers: the paper's Table 4 ablation,
//! complete vs partial weights). For the two built-in models the smallest FC layer is the final one.
//!
//! What is reported: `Init::distances` is the Euclidean distance matrix of all round-0 uploads
//! (for plots). `Init::clustering` (a [`Clustering`], which holds one dendrogram) is set when the
//! whole clustering is one tree: pre-clustering off, or a single pre-cluster; otherwise it is
//! `None` (the pre-clusters' trees are separate). A client with a missing or malformed round-0
//! answer (no statistics, a non-finite or negative entropy) is left out of the run
//! ([`round0_uploads`]), as in FedClust.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::MethodConfig;
use crate::cluster::clustering::{
    Clustering, ClusteringError, Lambda, centroids, guarded_cut, nearest_centroid,
};
use crate::cluster::cut::CutScores;
use crate::cluster::distance::CondensedMatrix;
use crate::cluster::hc::{Dendrogram, Linkage, linkage};
use crate::cluster::robust::Guard;
use crate::federation::{
    Answer, ClientInfo, Clusters, Env, FederationConfig, FederationError, Init, Job, LabelStats,
    NewcomerError, Placement, Strategy, Target, Training, bad_state, client_seed, non_negative,
    round0_uploads, strategy_state,
};
use crate::jobs::SignatureJob;
use crate::model::{LayerSet, Params};

/// The paper's newcomer threshold ε (§6.1).
pub const DEFAULT_EPSILON: f64 = 1.8;

/// AdaCFL's own settings: `[federation]` keys and run flags of the same names.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", group(skip))]
pub struct Settings {
    /// AdaCFL: newcomer distance ε above which a newcomer forms a new cluster (default 1.8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub epsilon: Option<f64>,
    /// AdaCFL: pre-clustering by class count and label entropy: on | off (default on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long, value_parser = parse_on_off))]
    pub pre_cluster: Option<bool>,
}

impl Settings {
    /// ε, or [`DEFAULT_EPSILON`].
    pub fn epsilon(&self) -> f64 {
        self.epsilon.unwrap_or(DEFAULT_EPSILON)
    }

    /// Whether to pre-cluster (default on).
    pub fn pre_cluster(&self) -> bool {
        self.pre_cluster.unwrap_or(true)
    }

    /// Ranges, whichever method runs.
    pub(crate) fn check(&self) -> Result<(), FederationError> {
        non_negative("epsilon", self.epsilon)
    }
}

/// `on` / `off` (also `true` / `false`).
#[cfg(feature = "cli")]
fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" | "true" => Ok(true),
        "off" | "false" => Ok(false),
        _ => Err(format!("expected on or off, got {s:?}")),
    }
}

/// The entropy gap of the pre-clustering (Algorithm 1 line 6: 10 %).
pub const ENTROPY_GAP: f64 = 0.1;

/// Relative slack of the entropy comparison, so that a gap of exactly 10 % survives rounding.
const GAP_SLACK: f64 = 1e-9;

static SMALLEST_FC: LayerSet = LayerSet::SmallestFc;

/// Checks AdaCFL's settings: round 0 needs a warm-up.
pub(crate) fn check(cfg: &MethodConfig) -> Result<(), FederationError> {
    if cfg.federation.warmup_epochs == 0 {
        return Err(FederationError::Config(
            "warmup-epochs must be ≥ 1 for adacfl".into(),
        ));
    }
    Ok(())
}

/// The layers AdaCFL uploads: the smallest fully connected layer, unless the configuration
/// names other layers than FedClust's default `final`.
pub fn signature_layers(cfg: &FederationConfig) -> &LayerSet {
    if cfg.signature_layers == LayerSet::Final {
        &SMALLEST_FC
    } else {
        &cfg.signature_layers
    }
}

/// Algorithm 1 line 6: the pre-cluster of each client (by position), numbered in order of first
/// appearance. See the module docs for the rule.
pub fn pre_cluster(stats: &[LabelStats]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..stats.len()).collect();
    order.sort_by(|&a, &b| {
        stats[a]
            .classes
            .cmp(&stats[b].classes)
            .then(stats[a].entropy.total_cmp(&stats[b].entropy))
            .then(a.cmp(&b))
    });
    let mut group = vec![0usize; stats.len()];
    let mut current: Option<(u32, f64, usize)> = None;
    let mut groups = 0;
    for &i in &order {
        let (l, s) = (stats[i].classes, stats[i].entropy);
        let joins = current.is_some_and(|(l0, s0, _)| {
            l0 == l && (s - s0).abs() <= ENTROPY_GAP * s0 * (1.0 + GAP_SLACK)
        });
        if !joins {
            current = Some((l, s, groups));
            groups += 1;
        }
        group[i] = current.map_or(0, |(_, _, g)| g);
    }
    renumber(&group)
}

/// Renames labels in order of first appearance.
fn renumber(labels: &[usize]) -> Vec<usize> {
    let mut names = HashMap::new();
    labels
        .iter()
        .map(|&a| {
            let next = names.len();
            *names.entry(a).or_insert(next)
        })
        .collect()
}

/// The outcome of AdaCFL's round-0 clustering.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AdaClustering {
    /// Cluster of each client (0-based, in order of first appearance by position).
    pub assignment: Vec<usize>,
    /// Pre-cluster of each client ([`pre_cluster`]; all 0 without pre-clustering).
    pub pre_clusters: Vec<usize>,
    /// Number of clusters κ.
    pub n_clusters: usize,
    /// The distance every pre-cluster's tree was cut at (for `k=N`: the height of the last merge
    /// applied, 0 when none).
    pub threshold: f64,
    /// Centroid of the members' uploads, per cluster (θ̂_g of eq. 5).
    pub centroids: Vec<Vec<f32>>,
    /// Euclidean distances between all uploads.
    pub distances: CondensedMatrix,
    /// The tree over all clients (the clustering's tree when there is one pre-cluster).
    pub dendrogram: Dendrogram,
    /// For `auto` and `gap`: the candidate cuts of the tree over all clients with their scores,
    /// the chosen one giving the λ every pre-cluster's tree is cut at.
    pub cut: Option<CutScores>,
    /// Under [`Guard::Robust`]: the uploads whose norm was an outlier, scaled to the median norm
    /// ([`crate::cluster::robust`]).
    pub rescaled: Vec<usize>,
    /// Under [`Guard::Robust`]: the isolated clients, each a cluster of its own; the trees and
    /// λ come from the others.
    pub quarantined: Vec<usize>,
}

/// Algorithm 1 lines 7-8: HC (linkage `method`) inside each pre-cluster (`pre`, one label per
/// signature), cut as `lambda` says (see the module docs). Under [`Guard::Robust`], norm
/// outliers are rescaled and isolated clients set apart as clusters of their own before the
/// trees are built and λ chosen (see [`crate::cluster::robust`]).
///
/// # Errors
///
/// [`ClusteringError::Empty`] without signatures, [`ClusteringError::Distance`] for ragged or
/// non-finite ones, [`ClusteringError::WrongDimension`] when `pre` is not one label per signature.
pub fn adaptive_clustering(
    signatures: &[Vec<f32>],
    pre: &[usize],
    method: Linkage,
    lambda: Lambda,
    guard: Guard,
) -> Result<AdaClustering, ClusteringError> {
    let n = signatures.len();
    if n == 0 {
        return Err(ClusteringError::Empty);
    }
    if pre.len() != n {
        return Err(ClusteringError::WrongDimension {
            expected: n,
            got: pre.len(),
        });
    }
    let mut points = signatures.to_vec();
    let rescaled = guard.rescale(&mut points);
    let distances = CondensedMatrix::euclidean(&points)?;
    let dendrogram = linkage(&distances, method);
    let quarantined = guard.quarantine(&distances);
    let pre = renumber(pre);
    let groups = pre.iter().max().map_or(0, |m| m + 1);
    // The pre-clusters without the quarantined (a pre-cluster of quarantined clients only is
    // gone).
    let members: Vec<Vec<usize>> = (0..groups)
        .map(|g| {
            (0..n)
                .filter(|&i| pre[i] == g && !quarantined.contains(&i))
                .collect::<Vec<_>>()
        })
        .filter(|m| !m.is_empty())
        .collect();
    let groups = members.len();
    let kept = n - quarantined.len();
    let trees: Vec<Dendrogram> = members
        .iter()
        .map(|m| {
            let mut sub = Vec::with_capacity(m.len() * m.len().saturating_sub(1) / 2);
            for (a, &i) in m.iter().enumerate() {
                for &j in &m[a + 1..] {
                    sub.push(distances.get(i, j).unwrap_or(0.0));
                }
            }
            let d = CondensedMatrix::from_condensed(sub)?;
            Ok(linkage(&d, method))
        })
        .collect::<Result<_, ClusteringError>>()?;
    let mut cut = None;
    let (local, height): (Vec<Vec<usize>>, f64) = match lambda {
        Lambda::Distance(t) => (trees.iter().map(|d| d.cut_distance(t)).collect(), t),
        Lambda::Auto | Lambda::Gap => {
            let (_, t, scores) = guarded_cut(&dendrogram, &distances, method, lambda, &quarantined);
            cut = scores;
            (trees.iter().map(|d| d.cut_distance(t)).collect(), t)
        }
        Lambda::Clusters(k) => {
            // The lowest merges of all trees together (each tree's merges are in height order,
            // so every tree applies a prefix of its own).
            let mut all: Vec<(f64, usize, usize)> = trees
                .iter()
                .enumerate()
                .flat_map(|(g, d)| {
                    d.merges()
                        .iter()
                        .enumerate()
                        .map(move |(i, m)| (m.height, g, i))
                })
                .collect();
            all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
            let apply = kept.saturating_sub(k.max(1)).min(all.len());
            let mut applied = vec![0usize; groups];
            for &(_, g, _) in &all[..apply] {
                applied[g] += 1;
            }
            let h = apply.checked_sub(1).map_or(0.0, |i| all[i].0);
            (
                trees
                    .iter()
                    .zip(&applied)
                    .map(|(d, &a)| d.cut_k(d.n() - a))
                    .collect(),
                h,
            )
        }
    };
    let mut label = vec![0usize; n];
    let mut offset = 0;
    for (m, l) in members.iter().zip(&local) {
        for (&i, &c) in m.iter().zip(l) {
            label[i] = offset + c;
        }
        offset += l.iter().max().map_or(0, |x| x + 1);
    }
    for (k, &q) in quarantined.iter().enumerate() {
        label[q] = offset + k;
    }
    let assignment = renumber(&label);
    let n_clusters = assignment.iter().max().map_or(0, |m| m + 1);
    let centroids = centroids(&points, &assignment, n_clusters);
    Ok(AdaClustering {
        assignment,
        pre_clusters: pre,
        n_clusters,
        threshold: height,
        centroids,
        distances,
        dendrogram,
        cut,
        rescaled,
        quarantined,
    })
}

/// Eq. 5 with the ε rule: the nearest representation `g*` (ties: the lower number), the distance
/// to it, and whether the newcomer founds a new cluster (the distance exceeds `epsilon`).
///
/// # Errors
///
/// As [`nearest_centroid`]: a signature of the wrong length or not finite, no representation.
pub fn newcomer_cluster(
    signature: &[f32],
    representations: &[Vec<f32>],
    epsilon: f64,
) -> Result<(usize, f64, bool), ClusteringError> {
    let (g, d) = nearest_centroid(signature, representations)?;
    Ok((g, d, d > epsilon))
}

/// AdaCFL as a [`Strategy`]: Algorithm 1 in [`Strategy::init`], cluster FedAvg in every round,
/// Algorithm 2 with the ε rule for newcomers.
#[derive(Debug, Clone)]
pub struct AdaCfl {
    epsilon: f64,
    pre_cluster: bool,
    /// θ̂_g of every cluster, by cluster number.
    representations: Vec<Vec<f32>>,
    /// Round 0's clustering.
    clustering: Option<AdaClustering>,
}

impl AdaCfl {
    /// The method for a run with `cfg` (ε and pre-clustering from its [`Settings`], or the paper's).
    pub fn new(cfg: &MethodConfig) -> Self {
        AdaCfl {
            epsilon: cfg.methods.adacfl.epsilon(),
            pre_cluster: cfg.methods.adacfl.pre_cluster(),
            representations: Vec::new(),
            clustering: None,
        }
    }

    /// Round 0's clustering, once [`Strategy::init`] ran.
    pub fn clustering(&self) -> Option<&AdaClustering> {
        self.clustering.as_ref()
    }
}

/// Round 0's upload job of client `p`: θ⁰ trained for the warm-up epochs (seed
/// [`client_seed`]`(seed, 0, index)`), then [`signature_layers`], with the label statistics when
/// `stats`.
fn upload_job<'a>(env: &Env<'a>, p: usize, stats: bool) -> Job<'a> {
    let (cfg, initial) = (env.cfg, env.initial);
    let mut train = cfg.train_config(client_seed(cfg.seed, 0, env.clients[p].index));
    train.epochs = cfg.warmup_epochs;
    Job::Signature(SignatureJob {
        train: Training {
            start: initial,
            cfg: train,
            prox: None,
        },
        layers: signature_layers(cfg),
        stats,
    })
}

/// Label statistics a client may have sent: a finite entropy ≥ 0.
fn valid_stats(s: &LabelStats) -> bool {
    s.entropy.is_finite() && s.entropy >= 0.0
}

/// The state AdaCFL saves: the cluster representations and round 0's clustering.
type AdaState = (Vec<Vec<f32>>, Option<AdaClustering>);

/// Checks a restored AdaCFL state: representations of one length; round 0's clustering with one
/// cluster and pre-cluster per client, its clusters numbered `0..κ`, one centroid per cluster,
/// the first representations being those centroids (newcomers' come after).
fn check_state((reps, clustering): &AdaState) -> Result<(), FederationError> {
    let bad = |what: &str| Err(bad_state("AdaCFL", what));
    if reps.iter().any(|r| r.len() != reps[0].len()) {
        return bad("representations of different lengths");
    }
    let Some(c) = clustering else {
        return if reps.is_empty() {
            Ok(())
        } else {
            bad("representations without a clustering")
        };
    };
    let n = c.assignment.len();
    if n == 0 || c.pre_clusters.len() != n || c.distances.n() != n || c.dendrogram.n() != n {
        return bad("round 0's clustering does not have one entry per client");
    }
    if c.assignment.iter().any(|&a| a >= c.n_clusters) || c.centroids.len() != c.n_clusters {
        return bad("round 0's assignment names a cluster without a centroid");
    }
    if reps.get(..c.n_clusters) != Some(&c.centroids[..]) {
        return bad("the representations do not start with round 0's centroids");
    }
    Ok(())
}

impl Strategy for AdaCfl {
    /// The state: the cluster representations (round 0's centroids, then those of the clusters
    /// newcomers founded) and round 0's clustering.
    fn save(&self) -> Option<serde_json::Value> {
        serde_json::to_value((&self.representations, &self.clustering)).ok()
    }

    fn restore(&mut self, state: serde_json::Value) -> Result<(), FederationError> {
        let state: AdaState = strategy_state("AdaCFL", state)?;
        check_state(&state)?;
        (self.representations, self.clustering) = state;
        Ok(())
    }

    fn init(&mut self, env: &mut Env<'_>) -> Result<Init, FederationError> {
        let n = env.clients.len();
        let stats = self.pre_cluster;
        let jobs = (0..n).map(|p| (p, upload_job(env, p, stats))).collect();
        // (position, (signature, statistics)) of each well-formed upload.
        let uploads: Vec<_> = env
            .run(0, jobs)?
            .into_iter()
            .filter_map(|(p, a)| match a {
                Answer::Signature(s) => Some((p, (s.values, s.stats))),
                _ => None,
            })
            .filter(|(_, (_, s))| !stats || s.as_ref().is_some_and(valid_stats))
            .collect();
        let (uploads, absent) = round0_uploads(n, uploads)?;
        let pre = if stats {
            let s: Vec<LabelStats> = uploads.iter().filter_map(|(_, s)| *s).collect();
            pre_cluster(&s)
        } else {
            vec![0; uploads.len()]
        };
        let vectors: Vec<Vec<f32>> = uploads.into_iter().map(|(v, _)| v).collect();
        let len = vectors[0].len();
        let mut c = adaptive_clustering(
            &vectors,
            &pre,
            env.cfg.linkage,
            env.cfg.cut(),
            env.cfg.signature_guard,
        )?;
        let present: Vec<usize> = (0..env.clients.len())
            .filter(|p| !absent.contains(p))
            .collect();
        for p in c.rescaled.iter_mut().chain(c.quarantined.iter_mut()) {
            *p = present[*p];
        }
        let mut init = Init::plain(c.assignment.clone(), env.initial, true);
        init.absent = absent;
        init.signature_len = len;
        // Floats in the upload encoding, plus L (u32) and s (f64) when asked.
        init.signature_bytes = len * env.upload().width() + if stats { 12 } else { 0 };
        init.distances = Some(c.distances.clone());
        if c.pre_clusters.iter().all(|&g| g == 0) {
            init.clustering = Some(Clustering {
                assignment: c.assignment.clone(),
                n_clusters: c.n_clusters,
                dendrogram: c.dendrogram.clone(),
                threshold: c.threshold,
                linkage: env.cfg.linkage,
                centroids: c.centroids.clone(),
                cut: c.cut.clone(),
                rescaled: c.rescaled.clone(),
                quarantined: c.quarantined.clone(),
            });
        }
        self.representations = c.centroids.clone();
        self.clustering = Some(c);
        Ok(init)
    }

    fn place(
        &mut self,
        env: &mut Env<'_>,
        _round: usize,
        fresh: &[ClientInfo],
        state: &Clusters,
    ) -> Result<Vec<Result<Placement, NewcomerError>>, FederationError> {
        let base = state.assignment().len();
        let jobs = (base..base + fresh.len())
            .map(|p| (p, upload_job(env, p, false)))
            .collect();
        let mut sigs: HashMap<usize, Vec<f32>> = env
            .run(0, jobs)?
            .into_iter()
            .filter_map(|(p, a)| match a {
                Answer::Signature(s) => Some((p, s.values)),
                _ => None,
            })
            .collect();
        if self.representations.len() != state.len() {
            let reason = format!(
                "{} cluster representations for {} clusters",
                self.representations.len(),
                state.len()
            );
            return Ok(fresh
                .iter()
                .map(|_| Err(NewcomerError::Assignment(reason.clone())))
                .collect());
        }
        // Clusters founded by earlier newcomers of this batch: the driver pushes them in order,
        // so they are numbered from `state.len()` on, like their representations.
        let mut founded: Vec<Params> = Vec::new();
        let mut out = Vec::with_capacity(fresh.len());
        for p in base..base + fresh.len() {
            let Some(sig) = sigs.remove(&p) else {
                out.push(Err(NewcomerError::NoSignature));
                continue;
            };
            out.push(
                match newcomer_cluster(&sig, &self.representations, self.epsilon) {
                    Err(e) => Err(e.into()),
                    Ok((g, d, true)) => {
                        let model = match g.checked_sub(state.len()) {
                            None => state.models()[g].clone(),
                            Some(j) => founded[j].clone(),
                        };
                        founded.push(model.clone());
                        self.representations.push(sig);
                        Ok(Placement {
                            target: Target::New(model),
                            distance: Some(d),
                        })
                    }
                    Ok((g, d, false)) => Ok(Placement {
                        target: Target::Cluster(g),
                        distance: Some(d),
                    }),
                },
            );
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(classes: u32, entropy: f64) -> LabelStats {
        LabelStats { classes, entropy }
    }

    #[test]
    fn pre_clusters_by_class_count_then_ten_percent_of_entropy() {
        // L = 2 clients with s 1.0 and 1.1 (exactly 10 %: joins), 1.1000001 (just over: new
        // group), L = 3 with s 1.0 (same s, other L: apart).
        let s = [st(2, 1.0), st(2, 1.1), st(2, 1.100_000_1), st(3, 1.0)];
        assert_eq!(pre_cluster(&s), vec![0, 0, 1, 2]);
        // The gap is measured from the group's first (smallest) member, not the previous one:
        // 1.0, 1.08 together; 1.15 is > 10 % above 1.0 and opens a group that 1.2 joins.
        let s = [st(4, 1.15), st(4, 1.0), st(4, 1.2), st(4, 1.08)];
        assert_eq!(pre_cluster(&s), vec![0, 1, 0, 1]);
        // s = 0 (one class): together, and nothing above 0 joins them.
        let s = [st(1, 0.0), st(1, 1e-9), st(1, 0.0)];
        assert_eq!(pre_cluster(&s), vec![0, 1, 0]);
        // Numbered by first appearance by position, whatever the sort order.
        let s = [st(3, 1.58), st(2, 1.0), st(3, 1.5), st(2, 0.99)];
        assert_eq!(pre_cluster(&s), vec![0, 1, 0, 1]);
        assert!(pre_cluster(&[]).is_empty());
    }

    #[test]
    fn hc_inside_pre_clusters_with_global_numbering() {
        // Points on a line: 0, 0.1, 5, 5.1, 0.05, 5.05. Pre-clusters split them as
        // {0, 0.1, 5, 5.1} and {0.05, 5.05}: with λ = 1 each pre-cluster splits in two, so
        // 0 and 0.05 (close) end in different clusters.
        let s: Vec<Vec<f32>> = [0.0, 0.1, 5.0, 5.1, 0.05, 5.05]
            .iter()
            .map(|&x| vec![x])
            .collect();
        let pre = [0, 0, 0, 0, 1, 1];
        let c = adaptive_clustering(
            &s,
            &pre,
            Linkage::Average,
            Lambda::Distance(1.0),
            Guard::Paper,
        )
        .unwrap();
        assert_eq!(c.assignment, vec![0, 0, 1, 1, 2, 3]);
        assert_eq!(c.n_clusters, 4);
        // Centroids by hand.
        assert!((c.centroids[0][0] - 0.05).abs() < 1e-6);
        assert!((c.centroids[1][0] - 5.05).abs() < 1e-5);
        assert!((c.centroids[3][0] - 5.05).abs() < 1e-6);
        assert_eq!(c.distances.n(), 6);
        // λ above every distance: one cluster per pre-cluster.
        let c = adaptive_clustering(
            &s,
            &pre,
            Linkage::Average,
            Lambda::Distance(100.0),
            Guard::Paper,
        )
        .unwrap();
        assert_eq!(c.assignment, vec![0, 0, 0, 0, 1, 1]);
        // Without pre-clustering, λ = 1 finds the two groups on the line.
        let c = adaptive_clustering(
            &s,
            &[0; 6],
            Linkage::Average,
            Lambda::Distance(1.0),
            Guard::Paper,
        )
        .unwrap();
        assert_eq!(c.assignment, vec![0, 0, 1, 1, 0, 1]);
        // Auto: the largest gap of the tree over all six is between ~0.1 and ~5, so the cut is
        // the same as λ = 1.
        let c =
            adaptive_clustering(&s, &pre, Linkage::Average, Lambda::Auto, Guard::Paper).unwrap();
        assert_eq!(c.assignment, vec![0, 0, 1, 1, 2, 3]);
        assert!(c.threshold > 0.1 && c.threshold < 5.0, "{}", c.threshold);
    }

    #[test]
    fn k_clusters_apply_the_lowest_merges_across_pre_clusters() {
        // Pre-cluster 0: 0, 0.1, 3 (merge heights 0.1, then ~2.95); pre-cluster 1: 10, 10.5
        // (0.5). k = 3 applies 0.1 and 0.5: {0, 0.1}, {3}, {10, 10.5}.
        let s: Vec<Vec<f32>> = [0.0, 0.1, 3.0, 10.0, 10.5]
            .iter()
            .map(|&x| vec![x])
            .collect();
        let pre = [0, 0, 0, 1, 1];
        let c = adaptive_clustering(
            &s,
            &pre,
            Linkage::Average,
            Lambda::Clusters(3),
            Guard::Paper,
        )
        .unwrap();
        assert_eq!(c.assignment, vec![0, 0, 1, 2, 2]);
        assert!((c.threshold - 0.5).abs() < 1e-9);
        // k = 1 is not reachable across two pre-clusters: two clusters.
        let c = adaptive_clustering(
            &s,
            &pre,
            Linkage::Average,
            Lambda::Clusters(1),
            Guard::Paper,
        )
        .unwrap();
        assert_eq!(c.assignment, vec![0, 0, 0, 1, 1]);
        // k = 5: singletons.
        let c = adaptive_clustering(
            &s,
            &pre,
            Linkage::Average,
            Lambda::Clusters(5),
            Guard::Paper,
        )
        .unwrap();
        assert_eq!(c.n_clusters, 5);
        assert_eq!(c.threshold, 0.0);
    }

    #[test]
    fn bad_inputs_are_errors() {
        assert!(matches!(
            adaptive_clustering(&[], &[], Linkage::Average, Lambda::Auto, Guard::Paper),
            Err(ClusteringError::Empty)
        ));
        let s = vec![vec![0.0f32, 1.0], vec![f32::NAN, 0.0]];
        assert!(matches!(
            adaptive_clustering(&s, &[0, 0], Linkage::Average, Lambda::Auto, Guard::Paper),
            Err(ClusteringError::Distance(_))
        ));
        let s = vec![vec![0.0f32, 1.0], vec![0.0]];
        assert!(
            adaptive_clustering(&s, &[0, 0], Linkage::Average, Lambda::Auto, Guard::Paper).is_err()
        );
        let s = vec![vec![0.0f32], vec![1.0]];
        assert!(
            adaptive_clustering(&s, &[0], Linkage::Average, Lambda::Auto, Guard::Paper).is_err()
        );
        // One client: one cluster.
        let c = adaptive_clustering(
            &[vec![1.0]],
            &[0],
            Linkage::Average,
            Lambda::Auto,
            Guard::Paper,
        )
        .unwrap();
        assert_eq!(c.assignment, vec![0]);
    }

    #[test]
    fn newcomers_join_the_nearest_cluster_unless_farther_than_epsilon() {
        let reps = vec![vec![0.0f32, 0.0], vec![3.0, 4.0]];
        // Distance 1 to cluster 0: joins with ε = 1.8.
        assert_eq!(
            newcomer_cluster(&[1.0, 0.0], &reps, 1.8).unwrap(),
            (0, 1.0, false)
        );
        // Distance exactly ε joins ("unless that distance exceeds ε"); just above founds one.
        assert_eq!(
            newcomer_cluster(&[3.0, 2.0], &reps, 2.0).unwrap(),
            (1, 2.0, false)
        );
        assert_eq!(
            newcomer_cluster(&[3.0, 2.0], &reps, 1.999).unwrap(),
            (1, 2.0, true)
        );
        // Far from everything: new cluster next to the nearest (cluster 1 at distance 5).
        let (g, d, new) = newcomer_cluster(&[6.0, 8.0], &reps, 1.8).unwrap();
        assert_eq!((g, new), (1, true));
        assert!((d - 5.0).abs() < 1e-12);
        assert!(newcomer_cluster(&[1.0], &reps, 1.8).is_err());
        assert!(newcomer_cluster(&[1.0, 0.0], &[], 1.8).is_err());
    }

    #[test]
    fn layers_default_to_the_smallest_fc() {
        let mut cfg = FederationConfig::default();
        assert_eq!(*signature_layers(&cfg), LayerSet::SmallestFc);
        cfg.signature_layers = LayerSet::All;
        assert_eq!(*signature_layers(&cfg), LayerSet::All);
        let mut cfg = MethodConfig::new(crate::algorithms::Algorithm::AdaCfl, cfg);
        cfg.federation.warmup_epochs = 0;
        assert!(check(&cfg).is_err());
    }

    /// A saved state comes back; one of the wrong shape is a configuration error.
    #[test]
    fn restore_checks_the_state() {
        let cfg = MethodConfig::default();
        let sigs = vec![vec![0.0f32, 0.0], vec![5.0, 0.0], vec![0.1, 0.0]];
        let c = adaptive_clustering(
            &sigs,
            &[0, 0, 0],
            Linkage::Average,
            Lambda::Distance(1.0),
            Guard::Paper,
        )
        .unwrap();
        assert_eq!(c.assignment, vec![0, 1, 0]);
        let mut reps = c.centroids.clone();
        reps.push(vec![9.0, 9.0]);
        let mut a = AdaCfl::new(&cfg);
        a.restore(serde_json::to_value((&reps, Some(&c))).unwrap())
            .unwrap();
        assert_eq!(a.representations, reps);
        let back = a.clustering().unwrap();
        assert_eq!(back.assignment, c.assignment);
        assert_eq!(back.distances, c.distances);
        assert_eq!(back.dendrogram, c.dendrogram);
        let mut short = c.clone();
        short.pre_clusters.pop();
        let mut moved = reps.clone();
        moved[0][0] = 1.0;
        for bad in [
            serde_json::json!(null),
            serde_json::to_value((&reps, None::<AdaClustering>)).unwrap(),
            serde_json::to_value((&reps[..1], Some(&c))).unwrap(),
            serde_json::to_value((&moved, Some(&c))).unwrap(),
            serde_json::to_value((vec![vec![1.0f32], vec![1.0, 2.0]], Some(&c))).unwrap(),
            serde_json::to_value((&reps, Some(&short))).unwrap(),
        ] {
            assert!(
                matches!(
                    AdaCfl::new(&cfg).restore(bad.clone()),
                    Err(FederationError::Config(_))
                ),
                "{bad}"
            );
        }
    }
}
