//! FedProx (Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020): FedAvg
//! whose clients minimise the local loss plus the proximal term `μ/2 · ‖w − wᵗ‖²` toward the
//! global model they received (its eq. 2), which bounds how far heterogeneous clients drift.
//!
//! Choices: every client does the full `epochs` of local SGD (the paper's inexact solutions via
//! fewer local steps, γ-inexactness, are not modelled); the server averages by sample count as
//! FedAvg does; μ defaults to 0.01 (`--mu`; the paper's grid is {0.001, 0.01, 0.1, 1}, and the
//! StoCFL and FeSEM papers compare against μ = 0.1 and 0.01). A newcomer joins the one cluster.

use super::MethodConfig;
use crate::federation::{
    ClientInfo, Clusters, Env, FederationError, Init, Job, NewcomerError, Placement, Prox,
    RoundStats, Strategy, Training, updates_of,
};

/// μ when `--mu` is not given.
pub const DEFAULT_MU: f64 = 0.01;

/// FedProx has no settings beyond μ (checked with every config).
pub(crate) fn check(_cfg: &MethodConfig) -> Result<(), FederationError> {
    Ok(())
}

/// FedProx.
#[derive(Debug, Clone, Copy)]
pub struct FedProx {
    mu: f64,
}

impl FedProx {
    /// The method for a run with `cfg`.
    pub fn new(cfg: &MethodConfig) -> Self {
        FedProx {
            mu: cfg.federation.mu.unwrap_or(DEFAULT_MU),
        }
    }
}

impl Strategy for FedProx {
    crate::stateless_resume!();

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
        let global = state.model_of(0).clone();
        let jobs = sampled
            .iter()
            .map(|&p| {
                (
                    p,
                    Job::Train(Training {
                        start: &global,
                        cfg: env.train_config(round, p),
                        prox: Some(Prox {
                            anchor: &global,
                            mu: self.mu,
                        }),
                    }),
                )
            })
            .collect();
        let updates = updates_of(env.run(round, jobs)?);
        state.fedavg(&updates, env.cfg.aggregate)?;
        Ok(RoundStats::of(sampled.len(), &updates))
    }

    fn place(
        &mut self,
        _env: &mut Env<'_>,
        _round: usize,
        fresh: &[ClientInfo],
        _state: &Clusters,
    ) -> Result<Vec<Result<Placement, NewcomerError>>, FederationError> {
        Ok(Placement::all_in(fresh.len(), 0))
    }
}
