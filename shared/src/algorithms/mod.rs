//! The federation methods, one file each, named after the paper or baseline it implements. Each
//! file opens with the paper, the equations it implements, and the choices made where the paper
//! is silent, and implements [`Strategy`] (see [`crate::federation`] for where each call sits
//! in a run).
//!
//! | method | file | clusters |
//! | --- | --- | --- |
//! | FedClust | [`fedclust`] | one-shot HC on final-layer weights after a warm-up |
//! | MT-HFL | [`mthfl`] | one-shot HAC on the relevance of Gram-matrix eigenvectors; LPS/GPS |
//! | AdaCFL | [`adacfl`] | one-shot: pre-clusters by label count and entropy, HC on the smallest FC layer; ε rule for newcomers |
//! | CFL | [`cfl`] | one cluster, bi-partitioned by the cosine of the updates when it is stationary (ε₁, ε₂) |
//! | PACFL | [`pacfl`] | one-shot HC on the angles between the clients' data subspaces (each class's top left singular vectors) |
//! | random groups | [`random`] | MT-HFL's baseline: a seeded random split into k groups |
//! | FedAvg | [`fedavg`] | one global model |
//! | Local | [`local`] | every client alone |
//! | FedProx | [`fedprox`] | one global model, proximal local objective |
//! | FeSEM | [`fesem`] | K-means EM over the clients' models every round |
//! | StoCFL | [`stocfl`] | singletons merged round by round on the cosine of anchor gradients (τ); bi-level training toward a global model (λ) |
//! | IFCA | [`ifca`] | K models; each sampled client trains the one of lowest local loss |
//!
//! Adding a method: a file here implementing [`Strategy`], a variant of [`Algorithm`], and one
//! line in each of [`Algorithm::strategy`], [`Algorithm::check`] and the name tables (and in
//! [`Algorithm::largest_upload_floats`] when one upload carries more than one model). A method
//! with knobs of its own declares them once, in its file, as a `Settings` struct (its
//! `[federation]` keys and its run flags, documented once) and adds it to [`MethodSettings`].
//! This is the one place that lists the methods.

use std::fmt;
use std::str::FromStr;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::federation::{FederationError, Strategy};

mod config;
pub use config::{MethodConfig, run, run_lps, run_resumable};

pub mod adacfl;
pub mod cfl;
pub mod fedavg;
pub mod fedclust;
pub mod fedprox;
pub mod fesem;
pub mod ifca;
pub mod local;
pub mod mthfl;
pub mod pacfl;
pub mod random;
pub mod stocfl;

/// The methods the round loop runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// One-shot HC on final-layer weights, then cluster-wise FedAvg.
    FedClust,
    /// PACFL: one-shot HC on the angles between the clients' data subspaces, then cluster-wise
    /// FedAvg.
    Pacfl,
    /// One global model.
    FedAvg,
    /// Every client trains alone (no communication).
    Local,
    /// MT-HFL: one-shot HAC on the data relevance of the clients' Gram-matrix eigenvectors, then
    /// LPS/GPS training (always hierarchical).
    #[serde(rename = "mthfl")]
    MtHfl,
    /// MT-HFL's baseline: a seeded random split of the clients into `k` near-equal groups
    /// (`clusters = K`, or `lambda = "k=K"`).
    Random,
    /// FedProx: FedAvg with a proximal local objective.
    FedProx,
    /// FeSEM: K-means EM over the clients' models every round.
    FeSem,
    /// StoCFL: every client its own cluster, merged round by round when the cosine of their
    /// anchor gradients is ≥ τ (`tau`); cluster models trained toward a global model (λ = `mu`).
    #[serde(rename = "stocfl")]
    StoCfl,
    /// IFCA: K models (`clusters`); each sampled client trains the one of lowest local loss.
    Ifca,
    /// AdaCFL: pre-clustering by class count and label entropy, then one-shot HC on the smallest
    /// fully connected layer; newcomers farther than ε found a cluster.
    #[serde(rename = "adacfl")]
    AdaCfl,
    /// CFL (Sattler et al.): one cluster, recursively bi-partitioned by the cosine similarity of
    /// the members' updates when the cluster is stationary.
    Cfl,
}

/// Every method's own settings ([`MethodConfig::methods`]), each declared in its method's
/// file. In TOML they are keys of `[federation]` beside the shared ones, and on the command line
/// flags of the same names (with the `cli` feature), each documented once (the doc comment is
/// the flag's help). Every field is optional: unset is the method's default, given by the
/// accessor of the method's `Settings` (e.g. [`stocfl::Settings::tau`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct MethodSettings {
    /// FedClust's.
    #[serde(flatten)]
    #[cfg_attr(feature = "cli", command(flatten))]
    pub fedclust: fedclust::Settings,
    /// MT-HFL's.
    #[serde(flatten)]
    #[cfg_attr(feature = "cli", command(flatten))]
    pub mthfl: mthfl::Settings,
    /// PACFL's.
    #[serde(flatten)]
    #[cfg_attr(feature = "cli", command(flatten))]
    pub pacfl: pacfl::Settings,
    /// AdaCFL's.
    #[serde(flatten)]
    #[cfg_attr(feature = "cli", command(flatten))]
    pub adacfl: adacfl::Settings,
    /// StoCFL's.
    #[serde(flatten)]
    #[cfg_attr(feature = "cli", command(flatten))]
    pub stocfl: stocfl::Settings,
    /// FeSEM's.
    #[serde(flatten)]
    #[cfg_attr(feature = "cli", command(flatten))]
    pub fesem: fesem::Settings,
    /// CFL's.
    #[serde(flatten)]
    #[cfg_attr(feature = "cli", command(flatten))]
    pub cfl: cfl::Settings,
    /// What is left of `[federation]` once the shared keys and every method's are taken: must
    /// be nothing (serde's `deny_unknown_fields` does not work beside `flatten`).
    #[serde(flatten, skip_serializing)]
    #[cfg_attr(feature = "cli", arg(skip))]
    unknown: NoOtherKeys,
}

impl MethodSettings {
    /// Checks the ranges of every method's settings, whichever method runs.
    ///
    /// # Errors
    ///
    /// [`FederationError::Config`] naming the bad setting.
    pub fn check(&self) -> Result<(), FederationError> {
        self.adacfl.check()?;
        self.stocfl.check()?;
        self.cfl.check()
    }
}

/// A map that must be empty: deserializing one with a key fails, naming it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct NoOtherKeys;

impl<'de> Deserialize<'de> for NoOtherKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Empty;
        impl<'de> Visitor<'de> for Empty {
            type Value = NoOtherKeys;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("no other keys")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NoOtherKeys, A::Error> {
                match map.next_key::<String>()? {
                    Some(key) => Err(de::Error::custom(format_args!("unknown key `{key}`"))),
                    None => Ok(NoOtherKeys),
                }
            }
        }
        d.deserialize_map(Empty)
    }
}

/// Every method, with its command-line name.
const NAMES: &[(Algorithm, &str)] = &[
    (Algorithm::FedClust, "fedclust"),
    (Algorithm::MtHfl, "mthfl"),
    (Algorithm::Pacfl, "pacfl"),
    (Algorithm::Random, "random"),
    (Algorithm::StoCfl, "stocfl"),
    (Algorithm::Ifca, "ifca"),
    (Algorithm::AdaCfl, "adacfl"),
    (Algorithm::Cfl, "cfl"),
    (Algorithm::FedAvg, "fedavg"),
    (Algorithm::Local, "local"),
    (Algorithm::FedProx, "fedprox"),
    (Algorithm::FeSem, "fesem"),
];

impl Algorithm {
    /// A fresh instance of the method for a run with `cfg`.
    ///
    /// # Errors
    ///
    /// [`FederationError::Config`] for settings the method cannot run with.
    pub fn strategy(self, cfg: &MethodConfig) -> Result<Box<dyn Strategy>, FederationError> {
        self.check(cfg)?;
        Ok(match self {
            Algorithm::FedClust => Box::new(fedclust::FedClust::new(cfg)),
            Algorithm::MtHfl => Box::new(mthfl::MtHfl::new(cfg)),
            Algorithm::Pacfl => Box::new(pacfl::Pacfl::new(cfg)),
            Algorithm::Random => Box::new(random::Random::new(cfg)?),
            Algorithm::AdaCfl => Box::new(adacfl::AdaCfl::new(cfg)),
            Algorithm::Cfl => Box::new(cfl::Cfl::new(cfg)),
            Algorithm::FedAvg => Box::new(fedavg::FedAvg),
            Algorithm::Local => Box::new(local::Local),
            Algorithm::FedProx => Box::new(fedprox::FedProx::new(cfg)),
            Algorithm::FeSem => Box::new(fesem::FeSem::new(cfg)?),
            Algorithm::StoCfl => Box::new(stocfl::StoCfl::new(cfg)),
            Algorithm::Ifca => Box::new(ifca::Ifca::new(cfg)?),
        })
    }

    /// Checks the method-specific settings of `cfg`.
    ///
    /// # Errors
    ///
    /// [`FederationError::Config`] naming the bad setting.
    pub fn check(self, cfg: &MethodConfig) -> Result<(), FederationError> {
        match self {
            Algorithm::FedClust => fedclust::check(cfg),
            Algorithm::MtHfl => mthfl::check(cfg),
            Algorithm::Pacfl => pacfl::check(cfg),
            Algorithm::Random => random::check(cfg),
            Algorithm::FedProx => fedprox::check(cfg),
            Algorithm::FeSem => fesem::check(cfg),
            Algorithm::StoCfl => stocfl::check(cfg),
            Algorithm::Ifca => ifca::check(cfg),
            Algorithm::AdaCfl => adacfl::check(cfg),
            Algorithm::FedAvg | Algorithm::Local | Algorithm::Cfl => Ok(()),
        }
    }

    /// The most floats one upload of the method carries beyond one model, with `clients`
    /// clients (0: never more than one model): StoCFL's pair of models, IFCA's pick, MT-HFL's
    /// eigenpairs and relevance row (each method's `largest_upload_floats`).
    pub fn largest_upload_floats(self, cfg: &MethodConfig, clients: usize) -> usize {
        match self {
            Algorithm::StoCfl => stocfl::largest_upload_floats(cfg),
            Algorithm::Ifca => ifca::largest_upload_floats(cfg),
            Algorithm::MtHfl => mthfl::largest_upload_floats(cfg, clients),
            _ => 0,
        }
    }

    /// Whether the method always trains its clusters as LPSs under a GPS (MT-HFL); the others
    /// do with `hierarchy`.
    pub fn always_hierarchical(self) -> bool {
        self == Algorithm::MtHfl
    }

    /// The method's own keys of `summary.json` and their values for a run of `cfg` with
    /// `clients` clients whose round-0 uploads took `signature_bytes` each (MT-HFL's
    /// `mthfl::summary_fields`; none for the others). Every summary carries every method's keys
    /// ([`Algorithm::summary_keys`]), null where they are not the run's method's.
    pub fn summary_fields(
        self,
        cfg: &MethodConfig,
        clients: usize,
        signature_bytes: usize,
    ) -> Vec<(&'static str, serde_json::Value)> {
        match self {
            Algorithm::MtHfl => mthfl::summary_fields(cfg, clients, signature_bytes),
            _ => Vec::new(),
        }
    }

    /// Every method's own keys of `summary.json` ([`Algorithm::summary_fields`]).
    pub fn summary_keys() -> impl Iterator<Item = &'static str> {
        mthfl::SUMMARY_KEYS.into_iter()
    }

    /// Whether the method cuts a tree once (FedClust, AdaCFL, MT-HFL, random groups): where to cut
    /// is `lambda` or `clusters` ([`crate::federation::FederationConfig::cut`]); for the others `clusters` is their
    /// own K, if any, and `lambda` means nothing.
    pub fn cuts_a_tree(self) -> bool {
        matches!(
            self,
            Algorithm::FedClust
                | Algorithm::AdaCfl
                | Algorithm::MtHfl
                | Algorithm::Pacfl
                | Algorithm::Random
        )
    }

    /// Every method.
    pub fn all() -> impl Iterator<Item = Algorithm> {
        NAMES.iter().map(|(a, _)| *a)
    }

    /// The command-line name.
    pub fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|(a, _)| *a == self)
            .map_or("?", |(_, n)| n)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = FederationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = if s == "mt-hfl" { "mthfl" } else { s };
        NAMES
            .iter()
            .find(|(_, n)| *n == s)
            .map(|(a, _)| *a)
            .ok_or_else(|| {
                let names: Vec<&str> = NAMES.iter().map(|(_, n)| *n).collect();
                FederationError::Config(format!(
                    "unknown algorithm {s:?} (expected one of {})",
                    names.join(", ")
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::clustering::Lambda;
    use crate::federation::FederationConfig;

    #[test]
    fn algorithms_parse_and_random_needs_k() {
        assert_eq!("mthfl".parse::<Algorithm>().unwrap(), Algorithm::MtHfl);
        assert_eq!(Algorithm::MtHfl.to_string(), "mthfl");
        assert_eq!("random".parse::<Algorithm>().unwrap(), Algorithm::Random);
        let mut cfg = MethodConfig::new(Algorithm::Random, FederationConfig::default());
        assert!(cfg.validate().is_err());
        cfg.federation.lambda = Lambda::Clusters(3);
        cfg.validate().unwrap();
        // `clusters` says the same as `k=K`; with another cut beside it, the run is refused.
        cfg.federation.clusters = Some(3);
        cfg.validate().unwrap();
        cfg.federation.lambda = Lambda::Auto;
        cfg.validate().unwrap();
        assert_eq!(cfg.federation.cut(), Lambda::Clusters(3));
        cfg.federation.lambda = Lambda::Distance(1.0);
        let e = cfg.validate().unwrap_err().to_string();
        assert!(
            e.contains("clusters = 3") && e.contains("lambda = 1"),
            "{e}"
        );
        cfg.federation.lambda = Lambda::Clusters(4);
        assert!(cfg.validate().is_err());
        // A method that cuts no tree: its K, and lambda means nothing to it.
        cfg.algorithm = Algorithm::Ifca;
        cfg.validate().unwrap();
        cfg.algorithm = Algorithm::Random;
        cfg.federation.lambda = Lambda::Clusters(3);
        cfg.federation.clusters = None;
        cfg.algorithm = Algorithm::MtHfl;
        cfg.methods.mthfl.eigenvectors = Some(0);
        assert!(cfg.validate().is_err());
        cfg.methods.mthfl.eigenvectors = Some(5);
        cfg.federation.common_layers = Some("fc9".parse().unwrap());
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.contains("fc9"), "{e}");
    }

    #[test]
    fn every_name_parses_back() {
        for (a, n) in NAMES {
            assert_eq!(n.parse::<Algorithm>().unwrap(), *a);
            assert_eq!(a.to_string(), *n);
        }
        let e = "nope".parse::<Algorithm>().unwrap_err().to_string();
        assert!(e.contains("fedclust") && e.contains("local"), "{e}");
    }
}
