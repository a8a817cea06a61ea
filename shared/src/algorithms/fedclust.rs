//! FedClust (Islam et al.): one-shot client clustering from final-layer weights.
//!
//! Algorithm 1, round 0: every client trains the initial model θ⁰ for a few local epochs and
//! uploads only the weights of its final layer (850 floats for LeNet-5, see
//! [`LayerSet::Final`](crate::model::LayerSet)). The server builds the Euclidean distance matrix
//! between the uploads (eq. 3) and runs agglomerative hierarchical clustering (HC), cut at the
//! threshold λ; the number of clusters is found, not given. Every cluster model starts from θ⁰.
//! A choice of ours, not the paper's (`--cluster-start members`, [`ClusterStart::Members`]):
//! round 0 uploads the whole warmed-up model instead (its signature layers are cut out of it on
//! the server), and each cluster model starts from its members' FedAvg average.
//!
//! Algorithm 2, newcomers: a client that joins later trains θ⁰ the same way and uploads its final
//! layer; the server puts it in the cluster whose stored partial weights are nearest (eq. 4). The
//! stored partial weights of a cluster are the centroid (mean) of its members' round-0 uploads.
//!
//! The round loop that follows (cluster-wise FedAvg with client sampling) is in
//! [`federation`](crate::federation).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::MethodConfig;
use crate::aggregate::weighted_average;
use crate::cluster::clustering::{
    Clustering, ClusteringError, cluster_signatures, nearest_centroid,
};
use crate::federation::{
    Answer, ClientInfo, Clusters, Env, FederationError, Init, Job, NewcomerError, Placement,
    Strategy, Target, Training, Weighting, client_seed, round0_uploads,
};
use crate::jobs::SignatureJob;
use crate::model::{LayerSet, Params};

/// Where FedClust's cluster models start after round 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClusterStart {
    /// θ⁰, the model every client warmed up from (the paper's Algorithm 1).
    #[default]
    Initial,
    /// The average of the members' warmed-up models, weighted as FedAvg weighs updates (a choice
    /// of ours): round 0 uploads the whole model instead of the signature layers (LeNet-5:
    /// 44 426 floats instead of 850), and the newcomers still upload the signature layers only.
    Members,
}

impl fmt::Display for ClusterStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClusterStart::Initial => "initial",
            ClusterStart::Members => "members",
        })
    }
}

impl FromStr for ClusterStart {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "initial" => Ok(ClusterStart::Initial),
            "members" => Ok(ClusterStart::Members),
            _ => Err(format!(
                "unknown cluster start {s:?} (expected initial or members)"
            )),
        }
    }
}

/// FedClust's own settings: `[federation]` keys and run flags of the same names (the cut is the
/// shared `threshold`/`clusters`, `linkage`, `signature_layers`, `warmup_epochs`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", group(skip))]
pub struct Settings {
    /// FedClust: where the cluster models start after round 0: initial (θ⁰, the paper's; the
    /// default) | members (the average of each cluster's members' warmed-up models; round 0 then
    /// uploads the whole model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "cli", arg(long))]
    pub cluster_start: Option<ClusterStart>,
}

/// FedClust Algorithm 2: the cluster whose centroid is nearest (Euclidean) to `signature`.
/// Ties go to the lower cluster index.
pub fn assign_newcomer(
    signature: &[f32],
    centroids: &[Vec<f32>],
) -> Result<usize, ClusteringError> {
    nearest_centroid(signature, centroids).map(|(c, _)| c)
}

/// Checks FedClust's settings: round 0 needs a warm-up.
pub(crate) fn check(cfg: &MethodConfig) -> Result<(), FederationError> {
    if cfg.federation.warmup_epochs == 0 {
        return Err(FederationError::Config(
            "warmup-epochs must be ≥ 1 for fedclust".into(),
        ));
    }
    Ok(())
}

/// FedClust as a [`Strategy`]: Algorithm 1's round 0 in [`Strategy::init`], cluster FedAvg in
/// every round, Algorithm 2 for newcomers (the centroids stay those of round 0, so the order
/// newcomers come in does not matter).
#[derive(Debug, Clone, Default)]
pub struct FedClust {
    settings: Settings,
    clustering: Option<Clustering>,
}

impl FedClust {
    /// The method for a run with `cfg`.
    pub fn new(cfg: &MethodConfig) -> Self {
        FedClust {
            settings: cfg.methods.fedclust.clone(),
            clustering: None,
        }
    }
}

/// Every layer: round 0's upload under [`ClusterStart::Members`].
static ALL_LAYERS: LayerSet = LayerSet::All;

/// Round 0's upload job of client `p`: train θ⁰ for the warm-up epochs (seed
/// [`client_seed`]`(seed, 0, index)`, also for newcomers, as if they had been there) and upload
/// `layers`.
fn signature_job<'a>(env: &Env<'a>, p: usize, layers: &'a LayerSet) -> Job<'a> {
    let (cfg, initial) = (env.cfg, env.initial);
    let mut train = cfg.train_config(client_seed(cfg.seed, 0, env.clients[p].index));
    train.epochs = cfg.warmup_epochs;
    Job::Signature(SignatureJob {
        train: Training {
            start: initial,
            cfg: train,
            prox: None,
        },
        layers,
        stats: false,
    })
}

/// The signatures among `answers`, by position.
fn signatures(answers: Vec<(usize, Answer)>) -> Vec<(usize, Vec<f32>)> {
    answers
        .into_iter()
        .filter_map(|(p, a)| match a {
            Answer::Signature(s) => Some((p, s.values)),
            _ => None,
        })
        .collect()
}

impl Strategy for FedClust {
    /// The state: round 0's clustering (its centroids place newcomers).
    fn save(&self) -> Option<serde_json::Value> {
        serde_json::to_value(&self.clustering).ok()
    }

    fn restore(&mut self, state: serde_json::Value) -> Result<(), FederationError> {
        self.clustering = serde_json::from_value(state)
            .map_err(|e| FederationError::Config(format!("FedClust's checkpoint: {e}")))?;
        Ok(())
    }

    fn init(&mut self, env: &mut Env<'_>) -> Result<Init, FederationError> {
        let n = env.clients.len();
        let cfg = env.cfg;
        let members = self.settings.cluster_start == Some(ClusterStart::Members);
        let layers = if members {
            &ALL_LAYERS
        } else {
            &cfg.signature_layers
        };
        let jobs = (0..n).map(|p| (p, signature_job(env, p, layers))).collect();
        let (uploads, absent) = round0_uploads(n, signatures(env.run(0, jobs)?))?;
        let len = uploads[0].len();
        // Under `Members`: (the signature layers cut out, the whole models).
        let (vectors, models) = if members {
            let selection = cfg.layout().select(&cfg.signature_layers)?;
            let cut = uploads.iter().map(|u| selection.extract(u)).collect();
            (cut, Some(uploads))
        } else {
            (uploads, None)
        };
        let (mut c, d) = cluster_signatures(&vectors, cfg.linkage, cfg.cut(), cfg.signature_guard)?;
        let present: Vec<usize> = (0..n).filter(|p| !absent.contains(p)).collect();
        c.map_positions(&present);
        let mut init = Init::plain(c.assignment.clone(), env.initial, true);
        if let Some(uploads) = models {
            // The present clients' declared samples, in the order of `uploads`.
            let weights: Vec<u64> = (0..n)
                .filter(|p| !absent.contains(p))
                .map(|p| match cfg.weighting {
                    Weighting::Samples => env.clients[p].samples,
                    Weighting::Equal => 1,
                })
                .collect();
            for (k, model) in init.models.iter_mut().enumerate() {
                let items: Vec<(&[f32], u64)> = c
                    .members(k)
                    .into_iter()
                    .map(|i| (uploads[i].as_slice(), weights[i]))
                    .collect();
                let mean = weighted_average(&items)
                    .map_err(|e| FederationError::Config(format!("cluster {k}'s start: {e}")))?;
                *model = Params::new(cfg.model, mean)?;
            }
        }
        init.absent = absent;
        init.signature_len = len;
        init.signature_bytes = len * env.upload().width();
        init.distances = Some(d);
        init.clustering = Some(c.clone());
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
            .map(|p| (p, signature_job(env, p, &env.cfg.signature_layers)))
            .collect();
        let mut sigs: std::collections::HashMap<usize, Vec<f32>> =
            signatures(env.run(0, jobs)?).into_iter().collect();
        Ok((base..base + fresh.len())
            .map(|p| match (sigs.remove(&p), &self.clustering) {
                (None, _) => Err(NewcomerError::NoSignature),
                (Some(_), None) => Err(NewcomerError::Assignment("no clustering".into())),
                (Some(sig), Some(c)) => nearest_centroid(&sig, &c.centroids)
                    .map(|(k, d)| Placement {
                        target: Target::Cluster(k),
                        distance: Some(d),
                    })
                    .map_err(NewcomerError::from),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newcomer_goes_to_nearest_centroid() {
        let centroids = vec![vec![0.0, 0.0], vec![3.0, 4.0]];
        assert_eq!(assign_newcomer(&[1.0, 1.0], &centroids).unwrap(), 0);
        assert_eq!(assign_newcomer(&[2.0, 3.0], &centroids).unwrap(), 1);
        // Equidistant: lower index.
        assert_eq!(assign_newcomer(&[1.5, 2.0], &centroids).unwrap(), 0);
        assert!(assign_newcomer(&[1.0], &centroids).is_err());
        assert!(assign_newcomer(&[f32::NAN, 0.0], &centroids).is_err());
        let (c, d) = nearest_centroid(&[3.0, 0.0], &centroids).unwrap();
        assert_eq!(c, 0);
        assert!((d - 3.0).abs() < 1e-12);
        assert!(matches!(
            nearest_centroid(&[0.0, 0.0], &[]),
            Err(ClusteringError::Empty)
        ));
    }
}
