//! The configuration of a federation run.

use serde::{Deserialize, Serialize};

use super::FederationError;
use crate::aggregate::Aggregate;
use crate::cluster::clustering::Lambda;
use crate::cluster::hc::Linkage;
use crate::cluster::robust::Guard;
use crate::data::catalog::DatasetKind;
use crate::hierarchy::CommonLayers;
use crate::model::{LayerSet, ModelKind, ParamLayout};
pub use crate::protocol::NormBound;
use crate::train::{LocalTest, TrainConfig};

/// Everything the round loop needs to know, and the settings several methods share. Which method
/// runs, and each method's own settings, are the registry's
/// ([`crate::algorithms::MethodConfig`], whose `[federation]` table flattens this one).
///
/// Each setting is declared here once: its doc comment is its documentation (and its flag's
/// help), its serde name its key in TOML and `summary.json`, and `#[setting(flag)]` derives its
/// command-line flag of the same name (`FederationFlags`, with the feature `cli`). The defaults are
/// [`FederationConfig::default`]'s, which the coordinator's `default-config.toml` must equal
/// (a test there says so).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, edgecfl_derive::Settings)]
#[settings(flags = FederationFlags, cfg = "cli")]
pub struct FederationConfig {
    /// The data set. Its images must be what the model takes; with no `--model`, the data set's
    /// own model is used (ResNet-9 for CIFAR-100, else its LeNet-5).
    #[serde(default)]
    #[setting(flag(long, value_name = "NAME", help = crate::data::catalog::dataset_flag_help()))]
    pub dataset: DatasetKind,
    /// The model (its help lists each one with its input).
    #[setting(flag(long, help = format!("{}. With --dataset and no --model, that data set's \
        model (ResNet-9 for CIFAR-100, else its LeNet-5)", crate::model::model_flag_help())))]
    pub model: ModelKind,
    /// Training rounds after the clustering round.
    #[setting(flag)]
    pub rounds: usize,
    /// Fraction of clients sampled per round, in (0, 1].
    #[setting(flag)]
    pub frac: f64,
    /// Local epochs per round.
    #[setting(flag)]
    pub epochs: usize,
    /// Local epochs of the round-0 warm-up before the final layer is uploaded (FedClust).
    #[setting(flag)]
    pub warmup_epochs: usize,
    /// Mini-batch size.
    #[serde(rename = "batch", alias = "batch_size")]
    #[setting(flag(long = "batch"))]
    pub batch_size: usize,
    /// Learning rate.
    #[setting(flag)]
    pub lr: f64,
    /// SGD momentum.
    #[setting(flag)]
    pub momentum: f64,
    /// λ, where the one-shot clustering cuts its tree (FedClust, AdaCFL, MT-HFL): a distance,
    /// `auto` (best mean silhouette over the candidate cuts), `gap` (largest gap between merge
    /// heights) or `k=N` clusters (the same as `--clusters N`). The key `threshold`, its name
    /// before, is read too (for one release; `coordinator` warns).
    #[serde(alias = "threshold")]
    #[setting(flag)]
    pub lambda: Lambda,
    /// HC linkage: single | complete | average | weighted | ward
    #[setting(flag)]
    pub linkage: Linkage,
    /// The one-shot cut's guards against a client's upload (FedClust, MT-HFL): robust (a
    /// signature whose norm is an outlier is scaled to the median norm; a client far from every
    /// other is set apart as a cluster of its own and the cut is chosen on the rest; both
    /// invisible on an honest fleet) | paper (the uploads as they came).
    ///
    /// See [`crate::cluster::robust`].
    #[serde(default)]
    #[setting(flag)]
    pub signature_guard: Guard,
    /// Layers uploaded in round 0: final | smallest-fc | all | names (conv1,conv2).
    #[setting(flag)]
    pub signature_layers: LayerSet,
    /// Evaluate every N rounds (and always after the last).
    #[setting(flag)]
    pub eval_every: usize,
    /// Master seed (partition, initial model, sampling, local shuffles).
    #[setting(flag)]
    pub seed: u64,
    /// Train the clusters as LPSs under a GPS that averages the common layers (always on for
    /// mthfl; with fedclust or random clusters, turns it on).
    #[serde(default)]
    #[setting(flag)]
    pub hierarchy: bool,
    /// FedAvg rounds of each LPS between two GPS averages (MT-HFL's Algorithm 1, inner loop).
    #[serde(default = "default_lps_rounds")]
    #[setting(flag)]
    pub lps_rounds: usize,
    /// Layers the GPS averages, e.g. conv1,conv2 (unset: the model's convolutions, the MLP's
    /// fc1).
    #[serde(default)]
    #[setting(flag)]
    pub common_layers: Option<LayerSet>,
    /// Proximal strength: FedProx's μ, FeSEM's μ (its eq. 7 regulariser as μ/2‖W − W̃‖²), StoCFL's
    /// λ. Unset: the method's default (0.01 / 0.1 / 0.05).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[setting(flag)]
    pub mu: Option<f64>,
    /// The number of clusters K: FeSEM's and IFCA's K; for fedclust, adacfl, mthfl and random,
    /// the cut into K clusters (the same as `--lambda k=K`).
    ///
    /// See [`FederationConfig::cut`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[setting(flag)]
    pub clusters: Option<usize>,
    /// How averages weigh their members: samples (each update by its training samples, bounded
    /// by what its client declared when it joined; the GPS weighs clusters by their members'
    /// declared samples) | equal (every update once; the GPS weighs clusters by member count).
    /// The sample count is the one number a client reports about itself that weights an average.
    #[serde(default)]
    #[setting(flag)]
    pub weighting: Weighting,
    /// How a cluster's updates become its model: mean (FedAvg, weighted as --weighting says) |
    /// median (coordinate-wise, unweighted) | trimmed:F (coordinate-wise mean without the F·n
    /// lowest and highest values, 0 ≤ F < 0.5, at least one each from 3 members) | norm-clip
    /// (each update's change clipped to the round's median change norm, then the weighted mean)
    /// | krum:F (multi-Krum for up to F bad updates: the weighted mean of the n − F updates
    /// nearest the others; the coordinate-wise median unless n > 2F + 2). Robust choices against
    /// a client that lies with its updates; also how the GPS averages the LPSs' common layers.
    ///
    /// See [`Aggregate`].
    #[serde(default)]
    #[setting(flag)]
    pub aggregate: Aggregate,
    /// The local test view of the headline accuracy: labels (every test image of each label a
    /// client holds, PACFL's and FedClust's "local view") | proportional (the same images
    /// weighted in the proportions of the client's training labels). Both views are recorded in
    /// summary.json and rounds.csv either way.
    #[serde(default)]
    #[setting(flag)]
    pub local_test: LocalTest,
    /// Which clients train each round: uniform (--frac of all clients) | per-cluster (--frac of
    /// each cluster's members, rounded, at least one per cluster).
    #[serde(default)]
    #[setting(flag)]
    pub sampling: Sampling,
    /// Newcomer personalisation (FedClust's Table 6): after the last round each newcomer trains
    /// its cluster's model for EPOCHS epochs and is evaluated on the result; `simulate
    /// --join-round` may then be rounds + 1 (join after the federation). Unset: none. The key
    /// `personalize_epochs`, its name before, is read too.
    ///
    /// See [`super::Newcomer::personalized_accuracy`].
    #[serde(
        default,
        rename = "personalize",
        alias = "personalize_epochs",
        skip_serializing_if = "Option::is_none"
    )]
    #[setting(flag(long = "personalize", value_name = "EPOCHS"))]
    pub personalize_epochs: Option<usize>,
    /// Drop (and report in summary.json's `dropped_updates`) a trained model whose change
    /// ‖θ_client − θ_sent‖₂ from the model it was sent is above this bound: off | B (a fixed
    /// bound) | median:M (M times the median change of the round's updates, every cluster's).
    #[serde(default, with = "norm_bound_text")]
    #[setting(flag(long, value_name = "off|B|median:M"))]
    pub max_update_norm: NormBound,
}

/// How an average (cluster FedAvg, the GPS's average of common layers) weighs its members.
///
/// A client's sample count is the one number a client reports about itself that weights an
/// average. With [`Weighting::Samples`] the count it reports with an update is bounded by the
/// count it declared when it joined ([`super::ClientInfo::samples`]): an update claiming more is
/// dropped. The declared count itself is taken on trust; [`Weighting::Equal`] removes that trust.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Weighting {
    /// By the training samples of each update (each client's declared count bounds it); the GPS
    /// weighs a cluster by its members' declared samples.
    #[default]
    Samples,
    /// Every update counts once; the GPS weighs a cluster by its number of members.
    Equal,
}

impl std::fmt::Display for Weighting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Weighting::Samples => "samples",
            Weighting::Equal => "equal",
        })
    }
}

impl std::str::FromStr for Weighting {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "samples" => Ok(Weighting::Samples),
            "equal" => Ok(Weighting::Equal),
            _ => Err(format!(
                "unknown weighting {s:?} (expected samples or equal)"
            )),
        }
    }
}

/// How a round's clients are sampled ([`FederationConfig::sampling`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Sampling {
    /// `max(1, ⌊frac · n⌋)` of all `n` clients, uniformly without replacement (FedAvg's and
    /// the papers' sampling).
    #[default]
    Uniform,
    /// From every cluster `c`, `round(frac · |c|)` of its members but at least one, uniformly
    /// without replacement: no cluster goes a round without an update, at the price of more
    /// clients per round than `frac · n` when there are many small clusters (a choice of ours
    /// for FedClust's many-cluster cuts; with one cluster per client it is full participation).
    PerCluster,
}

impl std::fmt::Display for Sampling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Sampling::Uniform => "uniform",
            Sampling::PerCluster => "per-cluster",
        })
    }
}

impl std::str::FromStr for Sampling {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "uniform" => Ok(Sampling::Uniform),
            "per-cluster" => Ok(Sampling::PerCluster),
            _ => Err(format!(
                "unknown sampling {s:?} (expected uniform or per-cluster)"
            )),
        }
    }
}

fn default_lps_rounds() -> usize {
    1
}

impl Default for FederationConfig {
    /// FedClust's FMNIST settings (GUIDE §2), with 50 rounds.
    fn default() -> Self {
        FederationConfig {
            dataset: DatasetKind::Fmnist,
            model: ModelKind::LeNet5,
            rounds: 50,
            frac: 0.1,
            epochs: 10,
            warmup_epochs: 1,
            batch_size: 10,
            lr: 0.01,
            momentum: 0.5,
            lambda: Lambda::Auto,
            linkage: Linkage::Average,
            signature_guard: Guard::Robust,
            signature_layers: LayerSet::Final,
            eval_every: 1,
            seed: 0,
            hierarchy: false,
            lps_rounds: default_lps_rounds(),
            common_layers: None,
            mu: None,
            clusters: None,
            weighting: Weighting::Samples,
            aggregate: Aggregate::Mean,
            local_test: LocalTest::Labels,
            sampling: Sampling::Uniform,
            personalize_epochs: None,
            max_update_norm: NormBound::DEFAULT,
        }
    }
}

/// [`FederationConfig::max_update_norm`] in TOML and JSON: a fixed bound as a number, the others
/// as their text (`"off"`, `"median:100"`); `null` (an older summary's "no bound") reads as off.
mod norm_bound_text {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::NormBound;

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Text {
        Number(f64),
        Text(String),
    }

    pub fn serialize<S: Serializer>(b: &NormBound, s: S) -> Result<S::Ok, S::Error> {
        match b {
            NormBound::Fixed(x) => Text::Number(*x),
            other => Text::Text(other.to_string()),
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<NormBound, D::Error> {
        let b = match Option::<Text>::deserialize(d)? {
            None => NormBound::Off,
            Some(Text::Number(x)) => NormBound::Fixed(x),
            Some(Text::Text(t)) => t.parse().map_err(serde::de::Error::custom)?,
        };
        Ok(b)
    }
}

impl FederationConfig {
    /// The data set's classes: the outputs of the run's model.
    pub fn classes(&self) -> usize {
        self.dataset.info().classes()
    }

    /// The layout of the run's model.
    pub fn layout(&self) -> ParamLayout {
        ParamLayout::new(self.model, self.classes())
    }

    /// Checks ranges; the error says which field is wrong. Which method runs and its own settings
    /// are checked by the registry ([`crate::algorithms::MethodConfig::validate`]).
    pub fn validate(&self) -> Result<(), FederationError> {
        let bad = |m: String| Err(FederationError::Config(m));
        if let Err(e) = self.model.check_input(self.dataset) {
            return bad(e.to_string());
        }
        if !(self.frac > 0.0 && self.frac <= 1.0) {
            return bad(format!("frac must be in (0, 1], got {}", self.frac));
        }
        if self.epochs == 0 {
            return bad("epochs must be ≥ 1".into());
        }
        if self.eval_every == 0 {
            return bad("eval-every must be ≥ 1".into());
        }
        if self.personalize_epochs == Some(0) {
            return bad("personalize must be ≥ 1 epoch".into());
        }
        if self.lps_rounds == 0 {
            return bad("lps-rounds must be ≥ 1".into());
        }
        non_negative("mu", self.mu)?;
        if !self.max_update_norm.is_valid() {
            return bad(format!(
                "max-update-norm must be off, a finite number > 0 or median:M with M ≥ 1, got {}",
                self.max_update_norm
            ));
        }
        if self.clusters == Some(0) {
            return bad("clusters must be ≥ 1".into());
        }
        if self.hierarchy {
            self.common()?;
        }
        self.train_config(0)
            .validate()
            .map_err(|e| FederationError::Config(e.to_string()))?;
        Ok(())
    }

    /// Where the one-shot clustering is cut: `k=K` when [`clusters`](Self::clusters) gives K
    /// (`--clusters K`, the flag every method that is given a K shares), otherwise
    /// [`lambda`](Self::lambda) (`--lambda`).
    pub fn cut(&self) -> Lambda {
        self.clusters.map_or(self.lambda, Lambda::Clusters)
    }

    /// The common layers of a hierarchical run.
    ///
    /// # Errors
    ///
    /// [`FederationError::Hierarchy`] for a layer the model does not have.
    pub fn common(&self) -> Result<CommonLayers, FederationError> {
        Ok(CommonLayers::of(
            &self.layout(),
            self.common_layers.as_ref(),
        )?)
    }

    /// The local-training settings of one client in one round.
    pub fn train_config(&self, seed: u64) -> TrainConfig {
        TrainConfig {
            epochs: self.epochs,
            batch_size: self.batch_size,
            lr: self.lr,
            momentum: self.momentum,
            seed,
            threads: 1,
        }
    }
}

/// Checks that a setting, when given, is a finite number ≥ 0.
///
/// # Errors
///
/// [`FederationError::Config`] naming it.
pub(crate) fn non_negative(name: &str, v: Option<f64>) -> Result<(), FederationError> {
    match v {
        Some(v) if !(v.is_finite() && v >= 0.0) => Err(FederationError::Config(format!(
            "{name} must be a finite number ≥ 0, got {v}"
        ))),
        _ => Ok(()),
    }
}

/// Seed of client `client`'s local training in round `round` (SplitMix64 over the three).
pub fn client_seed(seed: u64, round: usize, client: usize) -> u64 {
    let mut z = seed
        ^ (round as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (client as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
