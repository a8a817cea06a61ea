//! A run's configuration as its user writes it (the `[federation]` table, the run flags): which
//! method, the round loop's settings ([`FederationConfig`]) and every method's own settings
//! ([`MethodSettings`]); and the entry points that turn it into a [`Plan`] for the round loop
//! and run it. The loop below knows no method by name: this is where a method is picked.

use serde::{Deserialize, Serialize};

use super::{Algorithm, MethodSettings};
use crate::cluster::clustering::Lambda;
use crate::federation::{
    self, Checkpoint, ClientPool, FederationConfig, FederationError, GpsLink, Observer, Plan,
    RunContext, RunResult,
};
use crate::model::Params;

/// Which method runs, with the round loop's settings and every method's own. In TOML one flat
/// `[federation]` table: `algorithm`, the keys of [`FederationConfig`] and those of
/// [`MethodSettings`]; any other key fails to parse.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MethodConfig {
    /// Which method.
    pub algorithm: Algorithm,
    /// The round loop's settings, and those several methods share.
    #[serde(flatten)]
    pub federation: FederationConfig,
    /// Every method's own settings, each declared in its method's file.
    #[serde(flatten)]
    pub methods: MethodSettings,
}

impl Default for MethodConfig {
    /// FedClust with [`FederationConfig::default`].
    fn default() -> Self {
        MethodConfig::new(Algorithm::FedClust, FederationConfig::default())
    }
}

impl MethodConfig {
    /// `algorithm` over `federation`, every method's own settings at their defaults.
    pub fn new(algorithm: Algorithm, federation: FederationConfig) -> Self {
        MethodConfig {
            algorithm,
            federation,
            methods: MethodSettings::default(),
        }
    }

    /// Checks ranges, the method's own settings ([`Algorithm::check`]) and that the cut is given
    /// once; the error says which setting is wrong.
    ///
    /// # Errors
    ///
    /// [`FederationError::Config`] (or [`FederationError::Hierarchy`] for a common layer the model
    /// does not have).
    pub fn validate(&self) -> Result<(), FederationError> {
        let f = &self.federation;
        f.validate()?;
        self.methods.check()?;
        if let Some(k) = f.clusters
            && self.algorithm.cuts_a_tree()
            && !matches!(f.lambda, Lambda::Auto)
            && f.lambda != Lambda::Clusters(k)
        {
            return Err(FederationError::Config(format!(
                "clusters = {k} and lambda = {} both say where to cut; give one",
                f.lambda
            )));
        }
        self.algorithm.check(self)?;
        if self.hierarchical() {
            f.common()?;
        }
        Ok(())
    }

    /// True when clusters train as LPSs under a GPS (`hierarchy`, or a method that always does:
    /// [`Algorithm::always_hierarchical`]).
    pub fn hierarchical(&self) -> bool {
        self.federation.hierarchy || self.algorithm.always_hierarchical()
    }

    /// The most values one upload of this run's method can carry, with `clients` clients
    /// (newcomers included): one model (an update, an LPS's common layers, a signature, a
    /// gradient), or more where the method's file says so ([`Algorithm::largest_upload_floats`]).
    /// [`crate::protocol::upload_limit`] turns it into bytes.
    pub fn largest_upload_floats(&self, clients: usize) -> usize {
        let params = self.federation.layout().len();
        params.max(self.algorithm.largest_upload_floats(self, clients))
    }

    /// The run for the round loop: the checked settings and a fresh instance of the method.
    ///
    /// # Errors
    ///
    /// As [`MethodConfig::validate`], and [`Algorithm::strategy`].
    pub fn plan(&self) -> Result<Plan<'_>, FederationError> {
        self.validate()?;
        Ok(Plan {
            cfg: &self.federation,
            method: self.algorithm.name(),
            strategy: self.algorithm.strategy(self)?,
            hierarchical: self.hierarchical(),
            config: serde_json::to_value(self)
                .map_err(|e| FederationError::Config(format!("unwritable configuration: {e}")))?,
        })
    }
}

/// Runs the federation `cfg` describes over `pool` ([`federation::run`]).
///
/// # Errors
///
/// A bad configuration, a pool failure, or a method's step that cannot be done.
pub fn run(
    cfg: &MethodConfig,
    pool: &mut dyn ClientPool,
    ctx: &RunContext,
    observer: &mut dyn Observer,
) -> Result<RunResult, FederationError> {
    federation::run(cfg.plan()?, pool, ctx, observer)
}

/// [`run`] with checkpoints, continuing from `resume` when given ([`federation::run_resumable`]).
/// The checkpoint's configuration is read as a [`MethodConfig`] and written back before it is
/// compared with `cfg`'s, so a key it has under an older name (serde's aliases: `threshold` for
/// `lambda`) is the same configuration.
///
/// # Errors
///
/// As [`run`]; and [`FederationError::Config`] when `resume` is of another configuration or
/// the method cannot be resumed.
pub fn run_resumable(
    cfg: &MethodConfig,
    pool: &mut dyn ClientPool,
    ctx: &RunContext,
    observer: &mut dyn Observer,
    resume: Option<Checkpoint>,
) -> Result<RunResult, FederationError> {
    let resume = resume
        .map(|mut c| {
            c.config = normalized(&c.config)?;
            Ok::<_, FederationError>(c)
        })
        .transpose()?;
    federation::run_resumable(cfg.plan()?, pool, ctx, observer, resume)
}

/// A configuration as written by a [`MethodConfig`]: read as one and written back, so that a key
/// under an older name (serde's aliases: `threshold` for `lambda`) or a default left out reads as
/// the same configuration.
fn normalized(config: &serde_json::Value) -> Result<serde_json::Value, FederationError> {
    MethodConfig::deserialize(config)
        .and_then(serde_json::to_value)
        .map_err(|e| FederationError::Config(format!("checkpoint: configuration: {e}")))
}

impl MethodConfig {
    /// Checks, before anything of a run starts, that a checkpoint's configuration `saved`
    /// ([`Checkpoint::config`]) is this one, as [`run_resumable`] will when it resumes it.
    ///
    /// # Errors
    ///
    /// [`FederationError::Config`] naming each setting that differs with both values
    /// ([`federation::config_differences`]), or for a configuration that does not read.
    pub fn check_resumes(&self, saved: &serde_json::Value) -> Result<(), FederationError> {
        let now = serde_json::to_value(self)
            .map_err(|e| FederationError::Config(format!("unwritable configuration: {e}")))?;
        federation::same_config(&normalized(saved)?, &now)
    }
}

/// One LPS of a hierarchy whose GPS is another process ([`federation::run_lps`]): `cfg` must be
/// FedAvg with `hierarchy` on.
///
/// # Errors
///
/// [`FederationError::Config`] for another method or no hierarchy; and as
/// [`federation::run_lps`].
pub fn run_lps(
    cfg: &MethodConfig,
    pool: &mut dyn ClientPool,
    ctx: &RunContext,
    observer: &mut dyn Observer,
    initial: Params,
    gps: &mut dyn GpsLink,
) -> Result<RunResult, FederationError> {
    if cfg.algorithm != Algorithm::FedAvg || !cfg.federation.hierarchy {
        return Err(FederationError::Config(format!(
            "an LPS runs fedavg with hierarchy on, got {} (hierarchy {})",
            cfg.algorithm, cfg.federation.hierarchy
        )));
    }
    federation::run_lps(cfg.plan()?, pool, ctx, observer, initial, gps)
}
