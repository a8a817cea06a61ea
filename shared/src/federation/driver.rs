//! The generic round driver: round 0 by the method, then per round newcomers, sampling, the
//! method's training step, the GPS step, evaluation and the round's record.

use std::collections::HashMap;
use std::time::Instant;

use rand::SeedableRng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;

use super::result::{mean_of, task_accuracy};
use super::{
    Algorithm, Answer, Checkpoint, ClientInfo, ClientPool, Clusters, DroppedNewcomer, Env,
    FederationConfig, FederationError, GpsLink, Init, Job, Newcomer, NewcomerError, Observer,
    RoundRecord, RunContext, RunResult, Sampling, Target, Traffic, Training, Weighting,
    client_seed, updates_of,
};
use crate::cluster::metrics::adjusted_rand_index;
use crate::hierarchy::{self, CommonLayers};
use crate::model::Params;
use crate::train::{EvalReport, LocalTest};

/// Runs the federation over `pool`. `ctx.truth` is only used to score the clustering and to
/// report per-task accuracy.
///
/// # Errors
///
/// A bad configuration, a pool failure, or a method's step that cannot be done.
pub fn run(
    cfg: &FederationConfig,
    pool: &mut dyn ClientPool,
    ctx: &RunContext,
    observer: &mut dyn Observer,
) -> Result<RunResult, FederationError> {
    run_inner(cfg, pool, ctx, observer, None, None)
}

/// [`run`], handing a [`Checkpoint`] to the pool ([`ClientPool::checkpoint`]) after every
/// completed round (0 included) when it wants them, and continuing from `resume` (the
/// checkpoint of an earlier, interrupted run of the same configuration and pool) when given:
/// its round 0 and completed rounds are not run again, and the result is the one the
/// uninterrupted run would have had. A method that cannot be resumed
/// ([`super::Strategy::save`] is `None`) gets no checkpoints.
///
/// # Errors
///
/// As [`run`]; and [`FederationError::Config`] when `resume` is of another configuration or
/// the method cannot be resumed.
pub fn run_resumable(
    cfg: &FederationConfig,
    pool: &mut dyn ClientPool,
    ctx: &RunContext,
    observer: &mut dyn Observer,
    resume: Option<Checkpoint>,
) -> Result<RunResult, FederationError> {
    run_inner(cfg, pool, ctx, observer, None, resume)
}

/// Runs one LPS of a hierarchy whose GPS is another process: FedAvg of the pool's clients (one
/// cluster) from `initial`, and every `cfg.lps_rounds` rounds the common layers go through `gps`
/// (sent, averaged there with the other LPSs', inserted back) before the round's evaluation, as
/// the in-process GPS step does. `cfg` must be FedAvg with `hierarchy` on.
///
/// # Errors
///
/// [`FederationError::Config`] for another algorithm, no hierarchy, or an `initial` model of
/// another architecture; and as [`run`] and [`GpsLink::exchange`].
pub fn run_lps(
    cfg: &FederationConfig,
    pool: &mut dyn ClientPool,
    ctx: &RunContext,
    observer: &mut dyn Observer,
    initial: Params,
    gps: &mut dyn GpsLink,
) -> Result<RunResult, FederationError> {
    if cfg.algorithm != Algorithm::FedAvg || !cfg.hierarchy {
        return Err(FederationError::Config(format!(
            "an LPS runs fedavg with hierarchy on, got {} (hierarchy {})",
            cfg.algorithm, cfg.hierarchy
        )));
    }
    if initial.model != cfg.model {
        return Err(FederationError::Config(format!(
            "initial model is {}, the LPS trains {}",
            initial.model, cfg.model
        )));
    }
    run_inner(cfg, pool, ctx, observer, Some((initial, gps)), None)
}

fn run_inner(
    cfg: &FederationConfig,
    pool: &mut dyn ClientPool,
    ctx: &RunContext,
    observer: &mut dyn Observer,
    lps: Option<(Params, &mut dyn GpsLink)>,
    resume: Option<Checkpoint>,
) -> Result<RunResult, FederationError> {
    cfg.validate()?;
    let start = Instant::now();
    let mut clients = match &resume {
        Some(c) => {
            if c.config != *cfg {
                return Err(FederationError::Config(
                    "the checkpoint is of another configuration (same flags and seed needed)"
                        .into(),
                ));
            }
            c.clients.clone()
        }
        None => pool.clients(),
    };
    let n = clients.len();
    if n == 0 {
        return Err(FederationError::NoClients);
    }
    let (initial, mut remote_gps) = match lps {
        Some((initial, link)) => (initial, Some(link)),
        None => (Params::init(cfg.model, cfg.seed), None),
    };
    let common = if cfg.hierarchical() {
        Some(cfg.common()?)
    } else {
        None
    };
    let mut strategy = cfg.algorithm.strategy(cfg)?;
    // Position in `clients` of each pool index (round-0 clients: the same until one is left
    // out; newcomers may leave gaps where one was dropped).
    let mut position = positions(&clients);
    // Round-0 clients that sent no round-0 upload (left out of the run).
    let mut left_out: Vec<ClientInfo> = resume
        .as_ref()
        .map_or_else(Vec::new, |c| c.left_out.clone());
    let mut traffic = Traffic::default();
    // Dropped updates already handed to the observer.
    let mut reported = 0;
    macro_rules! report_dropped {
        () => {
            for d in &traffic.dropped[reported..] {
                observer.update_dropped(d);
            }
            reported = traffic.dropped.len();
        };
    }
    macro_rules! env {
        () => {
            Env {
                cfg,
                ctx,
                clients: &clients,
                initial: &initial,
                pool: &mut *pool,
                position: &position,
                traffic: &mut traffic,
            }
        };
    }

    // Where the run starts: round 0 (who trains with whom), or after the checkpoint's round.
    let mut done = 0;
    let mut earlier_seconds = 0.0;
    let resume_parts = resume.as_ref().map(|c| {
        (
            c.newcomers.clone(),
            c.dropped_newcomers.clone(),
            c.gps_rounds,
        )
    });
    // Each client's best accuracy over the evaluations so far, in the run's view (NaN: never
    // evaluated): the per-client maximum behind PACFL's "best clients average" figure.
    let mut best_client_accuracy: Vec<f64> = resume
        .as_ref()
        .map_or_else(Vec::new, |c| unknown_as_nan(&c.best_client_accuracy));
    let (init, ari, mut state, mut last_eval, mut rounds, mut final_client_accuracy) = match resume
    {
        None => {
            let mut init = strategy.init(&mut env!())?;
            report_dropped!();
            // Round-0 clients without a round-0 upload leave the run.
            if !init.absent.is_empty() {
                for &p in &init.absent {
                    observer.left_out(&clients[p]);
                    left_out.push(clients[p].clone());
                }
                clients.retain(|c| !left_out.iter().any(|l| l.index == c.index));
                position = positions(&clients);
            }
            if init.assignment.len() != clients.len() {
                return Err(FederationError::Config(format!(
                    "{} assigned {} of {} clients in round 0",
                    cfg.algorithm,
                    init.assignment.len(),
                    clients.len()
                )));
            }
            let ari = match &ctx.truth {
                Some(t) if init.clusters_found => truth_ari(t, &clients, &init.assignment),
                _ => None,
            };
            if let Some(c) = &init.clustering {
                observer.clustered(c, ari);
            }
            let state = Clusters::new(
                std::mem::take(&mut init.assignment),
                std::mem::take(&mut init.models),
            );
            // Last evaluation of each client, with the (cluster, model version) it was made
            // under.
            let last_eval: Vec<Option<(EvalReport, (usize, u64))>> = vec![None; clients.len()];
            (
                init,
                ari,
                state,
                last_eval,
                Vec::with_capacity(cfg.rounds),
                Vec::new(),
            )
        }
        Some(c) => {
            strategy.restore(c.strategy.clone())?;
            done = c.round;
            earlier_seconds = c.wall_seconds;
            traffic.down = c.floats_down;
            traffic.up = c.floats_up;
            traffic.bytes_down = c.bytes_down;
            traffic.bytes_up = c.bytes_up;
            traffic.dropped = c.dropped_updates.clone();
            reported = traffic.dropped.len();
            let distances = match c.distances.clone() {
                Some(d) => Some(
                    crate::cluster::distance::CondensedMatrix::from_condensed(d)
                        .map_err(|e| FederationError::Config(format!("checkpoint: {e}")))?,
                ),
                None => None,
            };
            let init = Init {
                assignment: Vec::new(),
                absent: Vec::new(),
                models: Vec::new(),
                clustering: c.clustering.clone(),
                distances,
                relevance: c.relevance.clone(),
                signature_len: c.signature_len,
                signature_bytes: c.signature_bytes,
                clusters_found: c.clusters_found,
            };
            (
                init,
                c.ari,
                c.clusters(),
                c.last_eval.clone(),
                c.rounds.clone(),
                unknown_as_nan(&c.final_client_accuracy),
            )
        }
    };
    let mut gps_rounds = 0;
    let (mut newcomers, mut dropped_newcomers) = (Vec::new(), Vec::new());
    // The method's state goes into every checkpoint; a method without one gets none.
    macro_rules! checkpoint {
        ($round:expr) => {
            if pool.wants_checkpoints()
                && let Some(method) = strategy.save()
            {
                let (model_versions, next_version) = state.versions();
                pool.checkpoint(&Checkpoint {
                    version: super::CHECKPOINT_VERSION,
                    config: cfg.clone(),
                    round: $round,
                    clients: clients.clone(),
                    assignment: state.assignment().to_vec(),
                    models: state.models().to_vec(),
                    model_versions,
                    next_version,
                    last_eval: last_eval.clone(),
                    rounds: rounds.clone(),
                    final_client_accuracy: known(&final_client_accuracy),
                    best_client_accuracy: known(&best_client_accuracy),
                    gps_rounds,
                    newcomers: newcomers.clone(),
                    dropped_newcomers: dropped_newcomers.clone(),
                    left_out: left_out.clone(),
                    dropped_updates: traffic.dropped.clone(),
                    floats_down: traffic.down,
                    floats_up: traffic.up,
                    bytes_down: traffic.bytes_down,
                    bytes_up: traffic.bytes_up,
                    clustering: init.clustering.clone(),
                    distances: init.distances.as_ref().map(|d| d.as_slice().to_vec()),
                    relevance: init.relevance.clone(),
                    ari,
                    clusters_found: init.clusters_found,
                    signature_len: init.signature_len,
                    signature_bytes: init.signature_bytes,
                    strategy: method,
                    wall_seconds: earlier_seconds + start.elapsed().as_secs_f64(),
                })?;
            }
        };
    }
    match resume_parts {
        Some((placed, turned_away, gps)) => {
            newcomers = placed;
            dropped_newcomers = turned_away;
            gps_rounds = gps;
        }
        None => checkpoint!(0),
    }

    // With personalisation, one more pass after the last round places the newcomers offered
    // then (FedClust's Table 6: they join after the federation).
    let last_pass = cfg.rounds + usize::from(cfg.personalize_epochs.is_some());
    for round in done + 1..=last_pass {
        let t0 = Instant::now();
        let mut offered = pool.newcomers(round);
        if round == 1 {
            // Round-0 clients that were left out get one more chance, as newcomers of round 1:
            // one that came back (a board restarted by its service) is placed by the method's
            // newcomer rule; one still gone is turned away.
            offered.splice(0..0, left_out.iter().cloned());
        }
        if !offered.is_empty() {
            // Turn away indices the run already has; the others take the next positions while
            // the method places them.
            let mut fresh: Vec<ClientInfo> = Vec::new();
            for c in offered {
                if position.contains_key(&c.index) || fresh.iter().any(|f| f.index == c.index) {
                    let d = DroppedNewcomer {
                        reason: NewcomerError::DuplicateIndex(c.index),
                        client: c,
                        round,
                    };
                    observer.newcomer_dropped(&d);
                    dropped_newcomers.push(d);
                } else {
                    fresh.push(c);
                }
            }
            if !fresh.is_empty() {
                let base = clients.len();
                for (k, c) in fresh.iter().enumerate() {
                    position.insert(c.index, base + k);
                    clients.push(c.clone());
                }
                let placed = strategy.place(&mut env!(), round, &fresh, &state)?;
                clients.truncate(base);
                for c in &fresh {
                    position.remove(&c.index);
                }
                let mut accepted = Vec::new();
                for (client, outcome) in fresh.into_iter().zip(placed) {
                    match outcome {
                        Ok(p) => accepted.push((client, p)),
                        Err(reason) => {
                            let d = DroppedNewcomer {
                                client,
                                round,
                                reason,
                            };
                            observer.newcomer_dropped(&d);
                            dropped_newcomers.push(d);
                        }
                    }
                }
                for (client, p) in accepted {
                    let cluster = match p.target {
                        Target::Cluster(c) if c < state.len() => c,
                        Target::Cluster(c) => {
                            return Err(FederationError::Config(format!(
                                "{} placed a newcomer in cluster {c} of {}",
                                cfg.algorithm,
                                state.len()
                            )));
                        }
                        Target::New(model) => state.push_cluster(model),
                    };
                    position.insert(client.index, clients.len());
                    clients.push(client.clone());
                    state.push_client(cluster);
                    last_eval.push(None);
                    let nc = Newcomer {
                        client,
                        round,
                        cluster,
                        distance: p.distance,
                        truth_match: None,
                        personalized_accuracy: None,
                    };
                    observer.newcomer(&nc);
                    newcomers.push(nc);
                }
            }
        }
        if round > cfg.rounds {
            break; // the placement pass of personalisation
        }
        let n = clients.len();
        let chosen = sample_round(cfg, round, state.assignment(), state.len());
        let stats = strategy.round(&mut env!(), round, &chosen, &mut state)?;

        // GPS: every `lps_rounds` rounds the LPSs share their common layers.
        let gps = gps_step(
            cfg,
            round,
            common.as_ref(),
            remote_gps.as_deref_mut(),
            &mut state,
            &clients,
            &rounds,
            gps_rounds + 1,
        )?;
        if gps {
            gps_rounds += 1;
        }

        let evaluate_now = round.is_multiple_of(cfg.eval_every) || round == cfg.rounds;
        let (views, cluster_accuracy, task_acc) = if evaluate_now {
            strategy.before_evaluation(&mut env!(), round, &mut state)?;
            let tag = |p: usize| {
                let c = state.assignment()[p];
                (c, state.version(c))
            };
            let jobs: Vec<(usize, Job<'_>)> = (0..n)
                .filter(|&p| last_eval[p].as_ref().is_none_or(|(_, t)| *t != tag(p)))
                .map(|p| {
                    (
                        p,
                        Job::Evaluate {
                            model: state.model_of(p),
                        },
                    )
                })
                .collect();
            let tags: HashMap<usize, (usize, u64)> =
                jobs.iter().map(|(p, _)| (*p, tag(*p))).collect();
            for (p, answer) in env!().run(round, jobs)? {
                if let Answer::Evaluation(rep) = answer {
                    last_eval[p] = Some((*rep, tags[&p]));
                }
            }
            let reports: Vec<Option<EvalReport>> = last_eval
                .iter()
                .map(|e| e.as_ref().map(|(r, _)| *r))
                .collect();
            // Means over the clients with an evaluation (on a fleet, a client that never
            // answered has none; in process every client has one).
            let [labels, proportional] = [LocalTest::Labels, LocalTest::Proportional].map(|v| {
                reports
                    .iter()
                    .map(|e| e.as_ref().and_then(|r| r.accuracy_in(v)))
                    .collect::<Vec<Option<f64>>>()
            });
            let views = [&labels, &proportional].map(|a| mean_of(a.iter().flatten().copied()));
            let acc = match cfg.local_test {
                LocalTest::Labels => labels,
                LocalTest::Proportional => proportional,
            };
            let mut per_cluster = vec![(0.0, 0usize); state.len()];
            for (p, a) in acc.iter().enumerate() {
                if let Some(a) = a {
                    per_cluster[state.assignment()[p]].0 += a;
                    per_cluster[state.assignment()[p]].1 += 1;
                }
            }
            best_client_accuracy.resize(acc.len(), f64::NAN);
            for (best, a) in best_client_accuracy.iter_mut().zip(&acc) {
                if let Some(a) = a {
                    *best = best.max(*a); // NaN.max(a) is a
                }
            }
            final_client_accuracy = acc.into_iter().map(|a| a.unwrap_or(f64::NAN)).collect();
            (
                Some(views),
                Some(
                    per_cluster
                        .into_iter()
                        .map(|(s, k)| s / k.max(1) as f64)
                        .collect(),
                ),
                task_accuracy(&reports, &clients, ctx),
            )
        } else {
            (None, None, None)
        };
        // The run's view; 0 when no client answered (as the labels view always was).
        let accuracy = views.map(|[labels, proportional]| {
            match cfg.local_test {
                LocalTest::Labels => labels,
                LocalTest::Proportional => proportional,
            }
            .unwrap_or(0.0)
        });
        let [accuracy_labels, accuracy_proportional] = views.unwrap_or_default();
        let record = RoundRecord {
            round,
            sampled: stats.sampled,
            received: stats.received,
            train_loss: stats.train_loss,
            accuracy,
            accuracy_labels,
            accuracy_proportional,
            cluster_accuracy,
            task_accuracy: task_acc,
            gps,
            clusters: state.len(),
            ari: ctx
                .truth
                .as_ref()
                .and_then(|t| truth_ari(t, &clients, state.assignment())),
            seconds: t0.elapsed().as_secs_f64(),
        };
        report_dropped!();
        observer.round(&record, cfg.rounds);
        rounds.push(record);
        checkpoint!(round);
    }
    // Newcomers placed after the last evaluation have none.
    final_client_accuracy.resize(clients.len(), f64::NAN);
    best_client_accuracy.resize(clients.len(), f64::NAN);

    if let Some(epochs) = cfg.personalize_epochs {
        let round = last_pass;
        let mut personalized =
            personalize(&mut env!(), round, epochs, &newcomers, &position, &state)?;
        for nc in &mut newcomers {
            nc.personalized_accuracy = personalized
                .remove(&position[&nc.client.index])
                .and_then(|r| r.accuracy_in(cfg.local_test));
        }
        for d in &traffic.dropped[reported..] {
            observer.update_dropped(d);
        }
    }

    let n_clusters = state.len();
    let mut result = RunResult {
        config: cfg.clone(),
        clients,
        assignment: state.assignment().to_vec(),
        n_clusters,
        clustering: init.clustering,
        distances: init.distances,
        relevance: init.relevance,
        ari,
        signature_len: init.signature_len,
        signature_bytes: init.signature_bytes,
        common_layers: common.as_ref().map(|c| c.set().to_string()),
        common_len: common.as_ref().map_or(0, CommonLayers::len),
        gps_rounds,
        rounds,
        final_client_accuracy,
        best_client_accuracy,
        models: state.models().to_vec(),
        newcomers,
        dropped_newcomers,
        left_out,
        dropped_updates: traffic.dropped,
        floats_down: traffic.down,
        floats_up: traffic.up,
        bytes_down: traffic.bytes_down,
        bytes_up: traffic.bytes_up,
        wall_seconds: earlier_seconds + start.elapsed().as_secs_f64(),
    };
    if let Some(truth) = &ctx.truth {
        result.score_newcomers(truth);
    }
    Ok(result)
}

/// ARI of `assignment` (by position) against `truth` (by pool index) over the clients the truth
/// covers; None when it covers fewer than two.
fn truth_ari(truth: &[usize], clients: &[ClientInfo], assignment: &[usize]) -> Option<f64> {
    let (a, t): (Vec<usize>, Vec<usize>) = clients
        .iter()
        .zip(assignment)
        .filter_map(|(c, &a)| truth.get(c.index).map(|&t| (a, t)))
        .unzip();
    (a.len() >= 2).then(|| adjusted_rand_index(&a, &t))
}

/// The GPS step after round `round`'s training: the common layers of the cluster models are
/// averaged, in process or through a remote GPS. Returns whether it ran.
#[allow(clippy::too_many_arguments)]
fn gps_step(
    cfg: &FederationConfig,
    round: usize,
    common: Option<&CommonLayers>,
    remote: Option<&mut (dyn GpsLink + '_)>,
    state: &mut Clusters,
    clients: &[ClientInfo],
    rounds: &[RoundRecord],
    gps_round: usize,
) -> Result<bool, FederationError> {
    let Some(common) = common else {
        return Ok(false);
    };
    if !round.is_multiple_of(cfg.lps_rounds) {
        return Ok(false);
    }
    let samples = match cfg.weighting {
        Weighting::Equal => (0..state.len())
            .map(|c| state.members(c).len() as u64)
            .collect(),
        _ => state.samples(clients),
    };
    match remote {
        // This process is one LPS (one cluster); the GPS is elsewhere.
        Some(link) => {
            let latest = rounds.iter().rev().find_map(|r| r.accuracy);
            for (c, model) in state.models_mut().iter_mut().enumerate() {
                let part = common.extract(model)?;
                let average = link.exchange(gps_round, &part, samples[c], latest)?;
                common.insert(model, &average)?;
            }
            Ok(true)
        }
        None if state.len() > 1 => {
            hierarchy::gps_round(common, state.models_mut(), &samples, cfg.aggregate)?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Position in `clients` of each pool index.
fn positions(clients: &[ClientInfo]) -> HashMap<usize, usize> {
    clients
        .iter()
        .enumerate()
        .map(|(p, c)| (c.index, p))
        .collect()
}

/// Per-client accuracies as checkpointed: NaN (never evaluated) becomes None.
fn known(acc: &[f64]) -> Vec<Option<f64>> {
    acc.iter().map(|a| (!a.is_nan()).then_some(*a)).collect()
}

/// The inverse of [`known`].
fn unknown_as_nan(acc: &[Option<f64>]) -> Vec<f64> {
    acc.iter().map(|a| a.unwrap_or(f64::NAN)).collect()
}

/// Newcomer personalisation ([`FederationConfig::personalize_epochs`]): each newcomer trains its
/// cluster's model for `epochs` epochs, then is evaluated on what it trained. The reports by
/// position, for the newcomers whose answers came back.
fn personalize(
    env: &mut Env<'_>,
    round: usize,
    epochs: usize,
    newcomers: &[Newcomer],
    position: &HashMap<usize, usize>,
    state: &Clusters,
) -> Result<HashMap<usize, EvalReport>, FederationError> {
    let jobs = newcomers
        .iter()
        .map(|nc| {
            let p = position[&nc.client.index];
            let mut cfg = env.train_config(round, p);
            cfg.epochs = epochs;
            let start = state.model_of(p);
            (
                p,
                Job::Train(Training {
                    start,
                    cfg,
                    prox: None,
                }),
            )
        })
        .collect();
    let trained = updates_of(env.run(round, jobs)?);
    let jobs = trained
        .iter()
        .map(|(p, u)| (*p, Job::Evaluate { model: &u.params }))
        .collect();
    Ok(env
        .run(round, jobs)?
        .into_iter()
        .filter_map(|(p, a)| match a {
            Answer::Evaluation(r) => Some((p, *r)),
            _ => None,
        })
        .collect())
}

/// The clients (positions) that train in `round`, sorted ([`FederationConfig::sampling`]).
fn sample_round(
    cfg: &FederationConfig,
    round: usize,
    assignment: &[usize],
    clusters: usize,
) -> Vec<usize> {
    let n = assignment.len();
    let mut chosen = match cfg.sampling {
        Sampling::Uniform => {
            let per_round = ((cfg.frac * n as f64) as usize).clamp(1, n);
            let mut rng = ChaCha8Rng::seed_from_u64(client_seed(cfg.seed, round, usize::MAX));
            sample(&mut rng, n, per_round).into_vec()
        }
        Sampling::PerCluster => {
            let mut members = vec![Vec::new(); clusters];
            for (p, &c) in assignment.iter().enumerate() {
                members[c].push(p);
            }
            let mut chosen = Vec::new();
            for (c, m) in members.iter().enumerate().filter(|(_, m)| !m.is_empty()) {
                let k = ((cfg.frac * m.len() as f64).round() as usize).clamp(1, m.len());
                let stream = usize::MAX - 1 - c;
                let mut rng = ChaCha8Rng::seed_from_u64(client_seed(cfg.seed, round, stream));
                chosen.extend(sample(&mut rng, m.len(), k).into_iter().map(|i| m[i]));
            }
            chosen
        }
    };
    chosen.sort_unstable();
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelKind;

    #[test]
    fn per_cluster_sampling_takes_frac_of_each_cluster_and_at_least_one() {
        // Clusters of 1, 2 and 43 members, interleaved; frac 0.1: 1 + max(1, round(0.2)) +
        // round(4.3) = 6 clients, uniform sampling would take ⌊4.6⌋ = 4.
        let assignment: Vec<usize> = (0..46)
            .map(|p| match p {
                7 => 0,
                3 | 30 => 1,
                _ => 2,
            })
            .collect();
        let mut cfg = FederationConfig {
            frac: 0.1,
            ..FederationConfig::default()
        };
        assert_eq!(sample_round(&cfg, 1, &assignment, 3).len(), 4);
        cfg.sampling = Sampling::PerCluster;
        for round in 1..20 {
            let chosen = sample_round(&cfg, round, &assignment, 3);
            assert!(chosen.windows(2).all(|w| w[0] < w[1]), "sorted, distinct");
            let per = |c| chosen.iter().filter(|&&p| assignment[p] == c).count();
            assert_eq!((per(0), per(1), per(2)), (1, 1, 4), "round {round}");
            assert_eq!(chosen, sample_round(&cfg, round, &assignment, 3));
        }
        // An empty cluster (every member moved away) is skipped.
        assert_eq!(sample_round(&cfg, 1, &assignment, 4).len(), 6);
    }

    /// The in-process GPS step weighs cluster 0 (one member declaring 100 samples, its model all
    /// 0) against cluster 1 (two members declaring 1 sample each, all 3): by samples the common
    /// layer becomes (100·0 + 2·3)/102, with equal weighting (1·0 + 2·3)/3 = 2; the other layers
    /// keep each cluster's own values.
    #[test]
    fn gps_step_weighs_clusters_by_declared_samples_or_by_members() {
        let n = Params::init(ModelKind::Mlp, 0).values.len();
        let clients: Vec<ClientInfo> = [100, 1, 1]
            .into_iter()
            .enumerate()
            .map(|(index, samples)| ClientInfo {
                index,
                id: format!("c{index}"),
                samples,
            })
            .collect();
        let common = CommonLayers::new(ModelKind::Mlp, None).unwrap();
        for (weighting, expected) in [(Weighting::Samples, 6.0 / 102.0), (Weighting::Equal, 2.0)] {
            let cfg = FederationConfig {
                model: ModelKind::Mlp,
                hierarchy: true,
                weighting,
                ..FederationConfig::default()
            };
            let mut state = Clusters::new(
                vec![0, 1, 1],
                vec![
                    Params::new(ModelKind::Mlp, vec![0.0; n]).unwrap(),
                    Params::new(ModelKind::Mlp, vec![3.0; n]).unwrap(),
                ],
            );
            let ran = gps_step(&cfg, 1, Some(&common), None, &mut state, &clients, &[], 1).unwrap();
            assert!(ran);
            for (c, own) in [(0, 0.0f32), (1, 3.0)] {
                let model = &state.models()[c];
                let part = common.extract(model).unwrap();
                assert_eq!(part.len(), common.len());
                for v in part {
                    assert!((f64::from(v) - expected).abs() < 1e-6, "{weighting}: {v}");
                }
                // Outside the common layers, each cluster keeps its own model.
                let outside = model.values.iter().filter(|&&v| v == own).count();
                assert_eq!(outside, n - common.len(), "{weighting} cluster {c}");
            }
        }
    }
}
