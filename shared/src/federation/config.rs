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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FederationConfig {
    /// The data set (`fmnist`, `mnist`, `cifar10`, `svhn`; [`crate::data::catalog`]); unwritten:
    /// Fashion-MNIST. Its images must be what `model` takes.
    #[serde(default, skip_serializing_if = "DatasetKind::is_default")]
    pub dataset: DatasetKind,
    /// Which model.
    pub model: ModelKind,
    /// Training rounds after the clustering round.
    pub rounds: usize,
    /// Fraction of clients sampled per round, in (0, 1].
    pub frac: f64,
    /// Local epochs per round.
    pub epochs: usize,
    /// Local epochs of the round-0 warm-up (FedClust).
    pub warmup_epochs: usize,
    /// Mini-batch size (the key `batch`, as the flag; `batch_size`, its name before, is read too).
    #[serde(rename = "batch", alias = "batch_size")]
    pub batch_size: usize,
    /// Learning rate.
    pub lr: f64,
    /// SGD momentum.
    pub momentum: f64,
    /// λ, where the one-shot clustering cuts its tree (FedClust, AdaCFL, MT-HFL; `--lambda`): a
    /// distance, `auto`, `gap` or `k=K`. The key `threshold`, its name before, is read too (for one
    /// release; `coordinator` warns).
    #[serde(alias = "threshold")]
    pub lambda: Lambda,
    /// HC linkage (FedClust).
    pub linkage: Linkage,
    /// The one-shot cut's guards against one client's upload (FedClust, MT-HFL): robust (norm
    /// outliers rescaled, isolated clients quarantined; the default) or paper (the uploads as
    /// they came). See [`crate::cluster::robust`].
    #[serde(default, skip_serializing_if = "Guard::is_robust")]
    pub signature_guard: Guard,
    /// Layers uploaded in round 0 (FedClust: the final layer).
    pub signature_layers: LayerSet,
    /// Evaluate every this many rounds (and always after the last).
    pub eval_every: usize,
    /// Master seed.
    pub seed: u64,
    /// LPS/GPS training for any clustering (FedClust, random): every cluster is an LPS and the
    /// GPS averages the common layers. Always on for MT-HFL.
    #[serde(default)]
    pub hierarchy: bool,
    /// FedAvg rounds of each LPS between two GPS averages (Algorithm 1's inner loop).
    #[serde(default = "default_lps_rounds")]
    pub lps_rounds: usize,
    /// Layers the GPS averages (`None`: LeNet-5 `conv1,conv2`, MLP `fc1`).
    #[serde(default)]
    pub common_layers: Option<LayerSet>,
    /// Proximal strength: FedProx's μ, FeSEM's μ (its eq. 7 regulariser as μ/2‖W − W̃‖²), StoCFL's
    /// λ. Unset: the method's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mu: Option<f64>,
    /// The number of clusters K where a method is given one: FeSEM's and IFCA's K, and for the
    /// one-shot cut (FedClust, AdaCFL, MT-HFL, random groups) the same as `lambda = "k=K"`
    /// ([`FederationConfig::cut`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<usize>,
    /// How the averages weigh their members: by training samples (FedAvg; the default) or
    /// equally.
    #[serde(default, skip_serializing_if = "Weighting::is_samples")]
    pub weighting: Weighting,
    /// How a cluster's updates become its model: the weighted mean (FedAvg; the default), the
    /// coordinate-wise median or trimmed mean, or the mean of updates clipped to the round's
    /// median change ([`Aggregate`]).
    #[serde(default, skip_serializing_if = "Aggregate::is_mean")]
    pub aggregate: Aggregate,
    /// The local test view of the headline accuracy (`accuracy` per round, per cluster and per
    /// client; progress and plots). Both views are recorded per round either way.
    #[serde(default, skip_serializing_if = "LocalTest::is_labels")]
    pub local_test: LocalTest,
    /// Which clients train in a round: `frac` of all clients, uniformly (the default), or
    /// `frac` of each cluster's members (rounded, at least one per cluster).
    #[serde(default, skip_serializing_if = "Sampling::is_uniform")]
    pub sampling: Sampling,
    /// Newcomer personalisation (FedClust's Table 6): after the last round, every client that
    /// joined after round 0 trains its cluster's model for this many epochs and is evaluated on
    /// the result ([`super::Newcomer::personalized_accuracy`]). Newcomers offered after the last
    /// round are placed first. Unset: none.
    /// The key is `personalize`, as the flag (`personalize_epochs`, its name before, is read too).
    #[serde(
        default,
        rename = "personalize",
        alias = "personalize_epochs",
        skip_serializing_if = "Option::is_none"
    )]
    pub personalize_epochs: Option<usize>,
    /// The bound on an update's change, ‖θ_client − θ_sent‖₂ (the model a client returns minus
    /// the model it was sent to train): an update above it is reported
    /// ([`super::Observer::update_dropped`], `dropped_updates` in `summary.json`) and dropped.
    /// Written `off`, a number, or `"median:M"`; unwritten: [`NormBound::DEFAULT`].
    #[serde(default, with = "norm_bound_text")]
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

impl Weighting {
    /// True for the default, [`Weighting::Samples`].
    pub fn is_samples(&self) -> bool {
        *self == Weighting::Samples
    }
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

impl Sampling {
    /// True for the default, [`Sampling::Uniform`].
    pub fn is_uniform(&self) -> bool {
        *self == Sampling::Uniform
    }
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
