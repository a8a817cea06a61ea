//! Local training: every client trains its own model from θ⁰ and nothing is shared (the
//! "Local" baseline of FedClust's and PACFL's tables). A newcomer gets a model of its own,
//! starting from θ⁰.

use crate::federation::{
    ClientInfo, Clusters, Env, FederationError, Init, NewcomerError, Placement, Strategy, Target,
};

/// Local.
#[derive(Debug, Clone, Copy, Default)]
pub struct Local;

impl Strategy for Local {
    crate::stateless_resume!();

    fn init(&mut self, env: &mut Env<'_>) -> Result<Init, FederationError> {
        Ok(Init::plain(
            (0..env.clients.len()).collect(),
            env.initial,
            false,
        ))
    }

    // The round is the default FedAvg round: each sampled client trains its own model, and the
    // "average" of one update is that update.

    fn place(
        &mut self,
        env: &mut Env<'_>,
        _round: usize,
        fresh: &[ClientInfo],
        _state: &Clusters,
    ) -> Result<Vec<Result<Placement, NewcomerError>>, FederationError> {
        Ok(fresh
            .iter()
            .map(|_| {
                Ok(Placement {
                    target: Target::New(env.initial.clone()),
                    distance: None,
                })
            })
            .collect())
    }
}
