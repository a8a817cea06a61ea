//! PACFL (Vahidian et al., "Efficient Distribution Similarity Identification in Clustered
//! Federated Learning via Principal Angles Between Client Data Subspaces", AAAI 2023): one-shot
//! clustering of clients by the angles between the subspaces of their data, the closest peer of
//! FedClust and MT-HFL in FedClust's tables.
//!
//! Round 0, before any training: each client `k` takes, for every class `l` it holds, the
//! truncated SVD `X_l = U_l Σ_l V_lᵀ` of the matrix of that class's images (one column an image)
//! and uploads `U_k = [U_{l₁}[:, :p], U_{l₂}[:, :p], …]` (§3, eq. 1; `p = 3` in FedClust's runs,
//! `--pacfl-basis`). The server builds the proximity matrix `A` (§3, eq. 2)
//!
//! `A[i, j] = θ(U_i, U_j)` in degrees,
//!
//! and runs agglomerative HC on `A`, cut at the threshold `λ` (`--lambda`, an angle in degrees,
//! or `auto`/`gap`/`k=K` as for FedClust); every cluster model starts from θ⁰ and trains by
//! cluster-wise FedAvg. The maths is in [`crate::cluster::subspace`].
//!
//! Choices, where the paper and its code (MMorafah/PACFL, `main_pacfl.py`,
//! `src/clustering/hierarchical_clustering.py`) differ or are silent:
//! - θ is what the code computes by default (`--pacfl-angle entries`): the smallest angle between
//!   a column of `U_i` and a column of `U_j`, `min arccos(clip(U_iᵀ U_j))`; the paper's smallest
//!   principal angle between the spans is `--pacfl-angle principal` (see the module above for how
//!   they differ: the code's depends on the columns' signs, which an SVD leaves free; we fix them).
//! - The code's own HC with `linkage='average'` replaces a merged pair's row by the plain mean
//!   of the two rows, which is scipy's `weighted` (WPGMA): `--linkage weighted` reproduces it;
//!   the run's `--linkage` (default `average`, UPGMA) is used as for the other methods.
//! - Under `dir:` partitions the code gives each client a budget of 20 columns split over its
//!   dominant classes; here every class gets `p` columns.
//! - A class with fewer than `p` images gives as many columns as it has images; directions of
//!   zero variance are dropped.
//! - Newcomers (the code's `unseen_clients` script re-clusters): a newcomer uploads its subspace
//!   as in round 0 and joins the cluster whose members' mean angle to it is smallest; round 0's
//!   clustering does not change.

use serde::{Deserialize, Serialize};

use super::MethodConfig;
use crate::cluster::clustering::cluster_distances;
use crate::cluster::subspace::{self, Angle, DEFAULT_BASIS, Subspace, proximity_matrix};
use crate::federation::{
    Answer, ClientInfo, Clusters, Env, FederationError, Init, Job, NewcomerError, Placement,
    Strategy, Target, round0_uploads,
};
use crate::jobs::SubspaceJob;

/// PACFL's own settings: `[federation]` keys and run flags of the same names (the cut is the
/// shared `lambda`/`clusters` and `linkage`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", group(skip))]
pub struct Settings {
    /// PACFL: left singular vectors each client uploads per class it holds (default 3,
    /// FedClust's runs of PACFL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub pacfl_basis: Option<usize>,
    /// PACFL: the angle between two clients' subspaces: entries (the smallest angle between a
    /// column of each, PACFL's code; the default) | principal (the smallest principal angle
    /// between the spans, the paper's words).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub pacfl_angle: Option<Angle>,
}

impl Settings {
    /// Singular vectors per class.
    pub fn basis(&self) -> usize {
        self.pacfl_basis.unwrap_or(DEFAULT_BASIS)
    }

    /// The proximity.
    pub fn angle(&self) -> Angle {
        self.pacfl_angle.unwrap_or_default()
    }
}

/// Checks PACFL's settings: at least one singular vector per class.
pub(crate) fn check(cfg: &MethodConfig) -> Result<(), FederationError> {
    let p = cfg.methods.pacfl.basis();
    let d = cfg.federation.model.input().pixels();
    if !(1..=d).contains(&p) {
        return Err(FederationError::Config(format!(
            "pacfl-basis must be between 1 and {d} (the pixels of an image), got {p}"
        )));
    }
    Ok(())
}

/// PACFL as a [`Strategy`]: round 0's subspaces and HC in [`Strategy::init`], cluster FedAvg in
/// every round, newcomers to the cluster of smallest mean angle.
#[derive(Debug, Clone, Default)]
pub struct Pacfl {
    settings: Settings,
    /// The signatures' dimension: pixels of one image of the run's model.
    d: usize,
    /// The data set's classes (the labels the subspaces may name).
    classes: usize,
    /// Round 0: the clustered clients' subspaces, by position, and their clustering.
    state: Option<State>,
}

/// What newcomers are placed by (the checkpointed state).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct State {
    /// The clustered clients' subspaces, in the order of `assignment`.
    subspaces: Vec<Subspace>,
    /// Their clusters.
    assignment: Vec<usize>,
}

impl Pacfl {
    /// The method for a run with `cfg`.
    pub fn new(cfg: &MethodConfig) -> Self {
        Pacfl {
            settings: cfg.methods.pacfl.clone(),
            d: cfg.federation.model.input().pixels(),
            classes: cfg.federation.classes(),
            state: None,
        }
    }

    fn job<'a>(&self) -> Job<'a> {
        Job::Subspace(SubspaceJob {
            p: self.settings.basis() as u32,
            d: self.d as u32,
            classes: self.classes as u32,
        })
    }
}

/// The subspaces among `answers`, by position.
fn subspaces_of(answers: Vec<(usize, Answer)>) -> Vec<(usize, Subspace)> {
    answers
        .into_iter()
        .filter_map(|(p, a)| match a {
            Answer::Subspace(s) => Some((p, s)),
            _ => None,
        })
        .collect()
}

/// The cluster whose members' mean angle to a newcomer is smallest (`angles[j]`: its angle to
/// clustered client `j`, in cluster `assignment[j]`), and that mean; ties go to the lower index.
/// `None` without clustered clients or with angles for other clients.
pub fn assign_newcomer(angles: &[f64], assignment: &[usize]) -> Option<(usize, f64)> {
    if angles.len() != assignment.len() {
        return None;
    }
    let k = assignment.iter().max()? + 1;
    let mut sums = vec![(0.0f64, 0usize); k];
    for (&a, &c) in angles.iter().zip(assignment) {
        sums[c].0 += a;
        sums[c].1 += 1;
    }
    sums.into_iter()
        .enumerate()
        .filter(|(_, (_, n))| *n > 0)
        .map(|(c, (sum, n))| (c, sum / n as f64))
        .fold(None, |best: Option<(usize, f64)>, (c, mean)| match best {
            Some((_, b)) if b <= mean => best,
            _ => Some((c, mean)),
        })
}

impl Strategy for Pacfl {
    fn save(&self) -> Option<serde_json::Value> {
        serde_json::to_value(&self.state).ok()
    }

    fn restore(&mut self, state: serde_json::Value) -> Result<(), FederationError> {
        self.state = serde_json::from_value(state)
            .map_err(|e| FederationError::Config(format!("PACFL's checkpoint: {e}")))?;
        Ok(())
    }

    fn init(&mut self, env: &mut Env<'_>) -> Result<Init, FederationError> {
        let n = env.clients.len();
        let cfg = env.cfg;
        let jobs = (0..n).map(|p| (p, self.job())).collect();
        let (subspaces, absent) = round0_uploads(n, subspaces_of(env.run(0, jobs)?))?;
        let angles =
            proximity_matrix(&subspaces, self.settings.angle()).map_err(FederationError::Config)?;
        let mut clustering =
            cluster_distances(&angles, cfg.linkage, cfg.cut(), cfg.signature_guard);
        let present: Vec<usize> = (0..n).filter(|p| !absent.contains(p)).collect();
        let floats = subspaces.iter().map(|s| s.columns.len()).max().unwrap_or(0);
        let mut init = Init::plain(clustering.assignment.clone(), env.initial, true);
        init.absent = absent;
        init.signature_len = floats;
        // Always f32 (the job's reply).
        init.signature_bytes = 4 * floats;
        init.distances = Some(angles);
        // Newcomers are placed by position among the clustered clients: keep those positions.
        self.state = Some(State {
            subspaces,
            assignment: clustering.assignment.clone(),
        });
        clustering.map_positions(&present);
        init.clustering = Some(clustering);
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
            .map(|p| (p, self.job()))
            .collect();
        let mut got: std::collections::HashMap<usize, Subspace> =
            subspaces_of(env.run(0, jobs)?).into_iter().collect();
        let angle = self.settings.angle();
        Ok((base..base + fresh.len())
            .map(|p| match (got.remove(&p), &self.state) {
                (None, _) => Err(NewcomerError::NoSignature),
                (Some(_), None) => Err(NewcomerError::Assignment("no clustering".into())),
                (Some(s), Some(round0)) => {
                    let angles: Vec<f64> = round0
                        .subspaces
                        .iter()
                        .map(|r| subspace::proximity(&s, r, angle))
                        .collect();
                    assign_newcomer(&angles, &round0.assignment)
                        .map(|(k, mean)| Placement {
                            target: Target::Cluster(k),
                            distance: Some(mean),
                        })
                        .ok_or_else(|| NewcomerError::Assignment("no clusters".into()))
                }
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newcomer_joins_the_cluster_of_smallest_mean_angle() {
        let c = [0, 1, 0, 1];
        assert_eq!(
            assign_newcomer(&[10.0, 40.0, 20.0, 2.0], &c),
            Some((0, 15.0))
        );
        assert_eq!(assign_newcomer(&[10.0, 4.0, 20.0, 2.0], &c), Some((1, 3.0)));
        assert_eq!(
            assign_newcomer(&[10.0, 5.0, 10.0, 15.0], &c),
            Some((0, 10.0))
        );
        // A tie goes to the lower index; angles for other clients place nobody.
        assert_eq!(assign_newcomer(&[1.0, 1.0, 1.0, 1.0], &c), Some((0, 1.0)));
        assert_eq!(assign_newcomer(&[1.0], &c), None);
    }
}
