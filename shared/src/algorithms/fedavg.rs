//! FedAvg (McMahan et al., AISTATS 2017): one global model, the sample-weighted average of the
//! sampled clients' locally trained models. A newcomer joins the one cluster.

use crate::federation::{
    ClientInfo, Clusters, Env, FederationError, Init, NewcomerError, Placement, Strategy,
};

/// FedAvg.
#[derive(Debug, Clone, Copy, Default)]
pub struct FedAvg;

impl Strategy for FedAvg {
    crate::stateless_resume!();

    fn init(&mut self, env: &mut Env<'_>) -> Result<Init, FederationError> {
        Ok(Init::plain(vec![0; env.clients.len()], env.initial, false))
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
