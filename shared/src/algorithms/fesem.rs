//! FeSEM (Long et al., "Multi-center federated learning: clients clustering for better
//! personalization", WWW Journal 2023): K-means expectation-maximisation over the clients' models,
//! every round.
//!
//! - **Local step** (eq. 7): each sampled client receives the centre W̃⁽ᵏ⁾ of its cluster and
//!   minimises `L(Wᵢ) + μ/2 · ‖Wᵢ − W̃⁽ᵏ⁾‖²` from it (the paper's `Dist` as the squared L2
//!   distance, written with FedProx's μ/2; μ defaults to 0.1, `--mu`), then uploads Wᵢ.
//! - **E-step** (eq. 8): each uploaded Wᵢ joins the nearest centre in L2, on all parameters or,
//!   with `--fesem-layers final`, on the final layer only (AdaCFL's Table 4 argues the final layer
//!   separates clusters better).
//! - **M-step** (eq. 9): each centre becomes the *unweighted* mean of its members' uploads (the
//!   paper ignores sample counts on purpose); a centre without an upload keeps its model. With a
//!   robust `--aggregate` (issue 28) it is that aggregate of the uploads instead, each weighing 1
//!   (norm-clip measures the changes from the centre; [`centre`]).
//! - **Initialisation** (§6.1.4): every client trains the common W₀ (`warmup_epochs`, seed of round
//!   0) and uploads it; K-means with [`RESTARTS`] random restarts on the uploads (each restart
//!   starts from K distinct uploads drawn at random, Lloyd iterations until no label changes,
//!   at most [`MAX_ITERATIONS`]); the restart of least intra-cluster squared distance wins. The
//!   centres are the unweighted means of the members' full models (or their `--aggregate`, the
//!   changes measured from W₀).
//!
//! Choices where the paper is silent: under partial participation (10 % per round) the E-step
//! moves only the sampled clients (the others keep their cluster) and the M-step averages only
//! this round's uploads. K (`--clusters`, default 3) is given; the paper's §5.2 K selection (try
//! several K for a few rounds) is left to the user. Newcomers (not in the paper): start from the
//! mean of the K centres, train for `warmup_epochs`, and join the nearest centre (eq. 8).

use rand::SeedableRng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;

use super::MethodConfig;
use crate::aggregate::{Aggregate, AggregateError, aggregate_models, weighted_average};
use crate::federation::{
    Answer, ClientInfo, Clusters, Env, FederationError, Init, Job, NewcomerError, Placement, Prox,
    RoundStats, Strategy, Target, Training, Update, client_seed, round0_uploads, updates_of,
};
use crate::model::{LayerSet, Params, Selection};
use serde::{Deserialize, Serialize};

/// μ when `--mu` is not given (the paper's FedProx μ).
pub const DEFAULT_MU: f64 = 0.1;
/// K when `--clusters` is not given.
pub const DEFAULT_CLUSTERS: usize = 3;
/// K-means restarts of the initialisation (§6.1.4).
pub const RESTARTS: usize = 20;
/// Lloyd iterations per restart, at most.
pub const MAX_ITERATIONS: usize = 100;

/// Checks FeSEM's settings: its layers exist and the warm-up is at least one epoch.
pub(crate) fn check(cfg: &MethodConfig) -> Result<(), FederationError> {
    if cfg.federation.warmup_epochs == 0 {
        return Err(FederationError::Config(
            "warmup-epochs must be ≥ 1 for fesem".into(),
        ));
    }
    cfg.federation.layout().select(&layers(cfg))?;
    Ok(())
}

/// FeSEM's own settings: `[federation]` keys and run flags of the same names (K is the shared
/// `clusters`, μ the shared `mu`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", group(skip))]
pub struct Settings {
    /// FeSEM: layers its EM distances use: all | final (default all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub fesem_layers: Option<LayerSet>,
}

fn layers(cfg: &MethodConfig) -> LayerSet {
    cfg.methods
        .fesem
        .fesem_layers
        .clone()
        .unwrap_or(LayerSet::All)
}

/// FeSEM.
#[derive(Debug, Clone)]
pub struct FeSem {
    k: usize,
    mu: f64,
    selection: Selection,
}

impl FeSem {
    /// The method for a run with `cfg`.
    ///
    /// # Errors
    ///
    /// [`FederationError::Model`] for layers the model does not have.
    pub fn new(cfg: &MethodConfig) -> Result<Self, FederationError> {
        Ok(FeSem {
            k: cfg.federation.clusters.unwrap_or(DEFAULT_CLUSTERS),
            mu: cfg.federation.mu.unwrap_or(DEFAULT_MU),
            selection: cfg.federation.layout().select(&layers(cfg))?,
        })
    }

    /// The E-step: the nearest centre to `model` on the selected layers (ties: the lower one),
    /// with its squared distance.
    fn nearest(&self, model: &Params, centres: &[Params]) -> (usize, f64) {
        let x = self.selection.extract(&model.values);
        nearest(
            &x,
            centres
                .iter()
                .map(|c| self.selection.extract(&c.values))
                .collect::<Vec<_>>()
                .as_slice(),
        )
    }
}

/// Squared Euclidean distance.
fn sq_dist(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2))
        .sum()
}

/// The nearest of `centres` to `x` (ties: the lower index) and the squared distance.
pub fn nearest(x: &[f32], centres: &[Vec<f32>]) -> (usize, f64) {
    let mut best = (0, f64::INFINITY);
    for (k, c) in centres.iter().enumerate() {
        let d = sq_dist(x, c);
        if d < best.1 {
            best = (k, d);
        }
    }
    best
}

/// The unweighted mean of `models` (eq. 9 under the default `--aggregate mean`; [`centre`] is
/// the M-step's). Kept plain for the newcomers' start, the mean of the K centres: those are the
/// server's own models, already aggregated, and K of them are too few for a robust statistic.
///
/// # Errors
///
/// [`FederationError::Aggregate`] for none or mismatched models.
pub fn mean(models: &[&Params]) -> Result<Params, FederationError> {
    let items: Vec<(&[f32], u64)> = models.iter().map(|m| (m.values.as_slice(), 1)).collect();
    let values = weighted_average(&items)?;
    let model = models
        .first()
        .map(|m| m.model)
        .ok_or(AggregateError::Empty)?;
    Ok(Params { model, values })
}

/// A centre from its members' models (the M-step, eq. 9): their aggregate `how`, each weighing 1
/// (the paper ignores sample counts), [`Aggregate::NormClip`] measuring each change from
/// `reference` (the centre they were trained from). [`Aggregate::Mean`] is [`mean`], bit for bit.
///
/// # Errors
///
/// [`FederationError::Aggregate`] for none or mismatched models.
pub fn centre(
    models: &[&Params],
    how: Aggregate,
    reference: &Params,
) -> Result<Params, FederationError> {
    let items: Vec<(&Params, u64)> = models.iter().map(|m| (*m, 1)).collect();
    Ok(aggregate_models(&items, how, &reference.values)?)
}

/// K-means with `restarts` random restarts (Lloyd's algorithm from `k` distinct random points):
/// the labels of the restart with the least total squared distance to the centres, numbered in
/// order of first appearance, and that total. `k` is clamped to `1..=points.len()`. Lloyd's
/// centres stay plain means whatever `--aggregate` says: the mean is what minimises the squared
/// distances the E-step assigns by, and these centres only label the points (the models are
/// [`centre`]s of the labelled uploads).
pub fn kmeans(points: &[Vec<f32>], k: usize, restarts: usize, seed: u64) -> (Vec<usize>, f64) {
    let n = points.len();
    if n == 0 {
        return (Vec::new(), 0.0);
    }
    let k = k.clamp(1, n);
    let dim = points[0].len();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut best: Option<(Vec<usize>, f64)> = None;
    for _ in 0..restarts.max(1) {
        let mut centres: Vec<Vec<f32>> = sample(&mut rng, n, k)
            .into_iter()
            .map(|i| points[i].clone())
            .collect();
        let mut labels = vec![usize::MAX; n];
        for _ in 0..MAX_ITERATIONS {
            let mut changed = false;
            for (i, p) in points.iter().enumerate() {
                let (c, _) = nearest(p, &centres);
                if labels[i] != c {
                    labels[i] = c;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
            for (c, centre) in centres.iter_mut().enumerate() {
                let members: Vec<&Vec<f32>> = points
                    .iter()
                    .zip(&labels)
                    .filter(|(_, l)| **l == c)
                    .map(|(p, _)| p)
                    .collect();
                if members.is_empty() {
                    continue;
                }
                let mut sum = vec![0f64; dim];
                for m in &members {
                    for (s, v) in sum.iter_mut().zip(m.iter()) {
                        *s += f64::from(*v);
                    }
                }
                *centre = sum
                    .into_iter()
                    .map(|s| (s / members.len() as f64) as f32)
                    .collect();
            }
        }
        let inertia: f64 = points
            .iter()
            .zip(&labels)
            .map(|(p, &l)| sq_dist(p, &centres[l]))
            .sum();
        if best.as_ref().is_none_or(|(_, b)| inertia < *b) {
            best = Some((labels, inertia));
        }
    }
    let (labels, inertia) = best.unwrap_or_default();
    (renumber(&labels), inertia)
}

/// Renames clusters in order of first appearance.
fn renumber(labels: &[usize]) -> Vec<usize> {
    let mut names = std::collections::HashMap::new();
    labels
        .iter()
        .map(|&a| {
            let next = names.len();
            *names.entry(a).or_insert(next)
        })
        .collect()
}

/// Round 0's job of client `p` (also a newcomer's, from `start`): train for the warm-up epochs
/// with the seed of round 0, upload the model.
fn warmup_job<'a>(env: &Env<'_>, p: usize, start: &'a Params) -> Job<'a> {
    let cfg = env.cfg;
    let mut train = cfg.train_config(client_seed(cfg.seed, 0, env.clients[p].index));
    train.epochs = cfg.warmup_epochs;
    Job::Train(Training {
        start,
        cfg: train,
        prox: None,
    })
}

impl Strategy for FeSem {
    crate::stateless_resume!();

    fn init(&mut self, env: &mut Env<'_>) -> Result<Init, FederationError> {
        let n = env.clients.len();
        let initial = env.initial;
        let jobs = (0..n).map(|p| (p, warmup_job(env, p, initial))).collect();
        let (updates, absent) = round0_uploads(n, updates_of(env.run(0, jobs)?))?;
        let points: Vec<Vec<f32>> = updates
            .iter()
            .map(|u| self.selection.extract(&u.params.values))
            .collect();
        let seed = client_seed(env.cfg.seed, 0, usize::MAX - 1);
        let (assignment, _) = kmeans(&points, self.k, RESTARTS, seed);
        let k = assignment.iter().max().map_or(0, |m| m + 1);
        let mut models = Vec::with_capacity(k);
        for c in 0..k {
            let members: Vec<&Params> = updates
                .iter()
                .zip(&assignment)
                .filter(|(_, a)| **a == c)
                .map(|(u, _)| &u.params)
                .collect();
            models.push(centre(&members, env.cfg.aggregate, env.initial)?);
        }
        let len = self.selection.len();
        Ok(Init {
            assignment,
            absent,
            models,
            clustering: None,
            distances: None,
            relevance: None,
            signature_len: len,
            signature_bytes: env.cfg.layout().len() * env.upload().width(),
            clusters_found: true,
        })
    }

    fn round(
        &mut self,
        env: &mut Env<'_>,
        round: usize,
        sampled: &[usize],
        state: &mut Clusters,
    ) -> Result<RoundStats, FederationError> {
        let centres: Vec<Params> = state.models().to_vec();
        let jobs = sampled
            .iter()
            .map(|&p| {
                let centre = &centres[state.assignment()[p]];
                (
                    p,
                    Job::Train(Training {
                        start: centre,
                        cfg: env.train_config(round, p),
                        prox: Some(Prox {
                            anchor: centre,
                            mu: self.mu,
                        }),
                    }),
                )
            })
            .collect();
        let updates: Vec<(usize, Update)> = updates_of(env.run(round, jobs)?);
        // E-step for the clients that uploaded.
        for (p, u) in &updates {
            let (c, _) = self.nearest(&u.params, &centres);
            state.assign(*p, c);
        }
        // M-step: unweighted mean (or `--aggregate`) of this round's uploads per centre; a member
        // that moved here trained from another centre, but norm-clip measures every change from
        // this one, the nearest to it.
        let how = env.cfg.aggregate;
        for (c, from) in centres.iter().enumerate() {
            let members: Vec<&Params> = updates
                .iter()
                .filter(|(p, _)| state.assignment()[*p] == c)
                .map(|(_, u)| &u.params)
                .collect();
            if !members.is_empty() {
                state.set_model(c, centre(&members, how, from)?);
            }
        }
        Ok(RoundStats::of(sampled.len(), &updates))
    }

    fn place(
        &mut self,
        env: &mut Env<'_>,
        _round: usize,
        fresh: &[ClientInfo],
        state: &Clusters,
    ) -> Result<Vec<Result<Placement, NewcomerError>>, FederationError> {
        let start = mean(&state.models().iter().collect::<Vec<_>>())?;
        let base = state.assignment().len();
        let jobs = (base..base + fresh.len())
            .map(|p| (p, warmup_job(env, p, &start)))
            .collect();
        let mut trained: std::collections::HashMap<usize, Params> = env
            .run(0, jobs)?
            .into_iter()
            .filter_map(|(p, a)| match a {
                Answer::Update(u) => Some((p, u.params)),
                _ => None,
            })
            .collect();
        Ok((base..base + fresh.len())
            .map(|p| match trained.remove(&p) {
                None => Err(NewcomerError::NoSignature),
                Some(model) => {
                    let (c, d) = self.nearest(&model, state.models());
                    Ok(Placement {
                        target: Target::Cluster(c),
                        distance: Some(d.sqrt()),
                    })
                }
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kmeans_finds_separated_blobs_of_unequal_size() {
        // Blob A around (0, 0): 4 points; blob B around (10, 10): 2 points; C around (0, 10): 1.
        let pts: Vec<Vec<f32>> = vec![
            vec![0.0, 0.1],
            vec![10.0, 10.0],
            vec![0.1, 0.0],
            vec![0.0, 10.0],
            vec![-0.1, 0.0],
            vec![10.1, 9.9],
            vec![0.0, -0.1],
        ];
        let (labels, inertia) = kmeans(&pts, 3, RESTARTS, 1);
        assert_eq!(labels, vec![0, 1, 0, 2, 0, 1, 0]);
        // Blob A's centre is (0, 0): each point at 0.01; B's is (10.05, 9.95): 2 × 0.005.
        assert!(
            (inertia - (4.0 * 0.01 + 2.0 * 0.005)).abs() < 1e-6,
            "{inertia}"
        );
        // Same seed, same answer; k is clamped to the number of points.
        assert_eq!(kmeans(&pts, 3, RESTARTS, 1).0, labels);
        assert_eq!(kmeans(&pts[..2], 5, 3, 0).0.len(), 2);
        assert_eq!(kmeans(&[], 2, 3, 0).0, Vec::<usize>::new());
    }

    #[test]
    fn nearest_takes_the_lower_index_on_ties_and_mean_is_unweighted() {
        let centres = vec![vec![1.0, 0.0], vec![-1.0, 0.0]];
        assert_eq!(nearest(&[0.0, 0.0], &centres), (0, 1.0));
        assert_eq!(nearest(&[-2.0, 0.0], &centres), (1, 1.0));
        let layout = crate::model::ParamLayout::of(crate::model::ModelKind::Mlp);
        let a = Params {
            model: crate::model::ModelKind::Mlp,
            values: vec![1.0; layout.len()],
        };
        let b = Params {
            model: crate::model::ModelKind::Mlp,
            values: vec![4.0; layout.len()],
        };
        // (1 + 4 + 4) / 3 = 3, whatever the clients' sample counts.
        assert!(
            mean(&[&a, &b, &b])
                .unwrap()
                .values
                .iter()
                .all(|&v| v == 3.0)
        );
    }

    /// `--aggregate` applies to FeSEM's M-step (issue 28): three members of one centre, one far
    /// off; each weighs 1 whatever its samples.
    #[test]
    fn centres_as_aggregate_says() {
        let p = |v: &[f32]| Params {
            model: crate::model::ModelKind::Mlp,
            values: v.to_vec(),
        };
        let (a, b, far) = (p(&[1.0, 2.0]), p(&[2.0, 4.0]), p(&[100.0, -100.0]));
        let from = p(&[0.0, 0.0]);
        let members = [&a, &far, &b];
        let with = |how| centre(&members, how, &from).unwrap().values;
        // The coordinate-wise median: {1, 100, 2} → 2, {2, −100, 4} → 2.
        assert_eq!(with(Aggregate::Median), vec![2.0, 2.0]);
        // trimmed:0.34 of 3 drops one at each end: the median here.
        assert_eq!(with(Aggregate::Trimmed(0.34)), vec![2.0, 2.0]);
        // The plain mean, (1 + 100 + 2)/3 and (2 − 100 + 4)/3, is `mean`'s, bit for bit.
        assert_eq!(with(Aggregate::Mean), mean(&members).unwrap().values);
        assert_eq!(with(Aggregate::Mean), vec![103.0 / 3.0, -94.0 / 3.0]);
        // Multi-Krum for one bad member needs more than 2·1 + 2 members; of 3 it is the median.
        assert_eq!(with(Aggregate::Krum(1)), vec![2.0, 2.0]);
        // Norm-clip from the centre (0, 0): changes of norm √5, 100√2 and √20, clipped to the
        // median √20: the far one to (√10, −√10); then the unweighted mean.
        let r = 10f64.sqrt();
        for (got, want) in with(Aggregate::NormClip)
            .iter()
            .zip([(3.0 + r) / 3.0, (6.0 - r) / 3.0])
        {
            assert!((f64::from(*got) - want).abs() < 1e-6, "{got} vs {want}");
        }
        assert!(centre(&[], Aggregate::Median, &from).is_err());
    }
}
