//! The generic round driver: round 0 by the method, then per round newcomers, sampling, the
//! method's training step, the GPS step, evaluation and the round's record. [`Run::run`] is the
//! loop as the papers write it; each phase is a method of [`Run`], which holds the run's state.

use std::collections::HashMap;
use std::time::Instant;

use rand::SeedableRng;
use rand::seq::index::sample;
use rand_chacha::ChaCha8Rng;

use super::result::{mean_of, task_accuracy};
use super::{
    Answer, Checkpoint, ClientInfo, ClientPool, Clusters, DroppedNewcomer, Env, FederationConfig,
    FederationError, GpsLink, Init, Job, Newcomer, NewcomerError, Observer, Plan, RoundRecord,
    RoundStats, RunContext, RunResult, Sampling, Strategy, Target, Traffic, Training, Weighting,
    client_seed, updates_of,
};
use crate::cluster::metrics::adjusted_rand_index;
use crate::hierarchy::{self, CommonLayers};
use crate::jobs::EvaluateJob;
use crate::model::Params;
use crate::train::{EvalReport, LocalTest};

/// Runs the federation of `plan` over `pool`. `ctx.truth` is only used to score the clustering
/// and to report per-task accuracy.
///
/// # Errors
///
/// A bad configuration, a pool failure, or a method's step that cannot be done.
pub fn run(
    plan: Plan<'_>,
    pool: &mut dyn ClientPool,
    ctx: &RunContext,
    observer: &mut dyn Observer,
) -> Result<RunResult, FederationError> {
    Run::start(plan, pool, ctx, observer, None, None)?.run()
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
    plan: Plan<'_>,
    pool: &mut dyn ClientPool,
    ctx: &RunContext,
    observer: &mut dyn Observer,
    resume: Option<Checkpoint>,
) -> Result<RunResult, FederationError> {
    Run::start(plan, pool, ctx, observer, None, resume)?.run()
}

/// Runs one LPS of a hierarchy whose GPS is another process: FedAvg of the pool's clients (one
/// cluster) from `initial`, and every `cfg.lps_rounds` rounds the common layers go through `gps`
/// (sent, averaged there with the other LPSs', inserted back) before the round's evaluation, as
/// the in-process GPS step does. `plan` must be hierarchical ([`crate::algorithms::run_lps`]
/// runs FedAvg's).
///
/// # Errors
///
/// [`FederationError::Config`] for a plan that is not hierarchical, or an `initial` model of
/// another architecture; and as [`run`] and [`GpsLink::exchange`].
pub fn run_lps(
    plan: Plan<'_>,
    pool: &mut dyn ClientPool,
    ctx: &RunContext,
    observer: &mut dyn Observer,
    initial: Params,
    gps: &mut dyn GpsLink,
) -> Result<RunResult, FederationError> {
    let cfg = plan.cfg;
    if !plan.hierarchical {
        return Err(FederationError::Config(format!(
            "an LPS trains under a GPS: {} without a hierarchy cannot",
            plan.method
        )));
    }
    if initial.model != cfg.model {
        return Err(FederationError::Config(format!(
            "initial model is {}, the LPS trains {}",
            initial.model, cfg.model
        )));
    }
    Run::start(plan, pool, ctx, observer, Some((initial, gps)), None)?.run()
}

/// The [`Env`] of `run` (a [`Run`]), borrowing its fields one by one so that the strategy and
/// the clusters (fields too) can be borrowed beside it.
macro_rules! env {
    ($run:expr) => {
        Env {
            cfg: $run.cfg,
            method: $run.method,
            ctx: $run.ctx,
            clients: &$run.clients,
            initial: &$run.initial,
            pool: &mut *$run.pool,
            position: &$run.position,
            traffic: &mut $run.traffic,
        }
    };
}

/// One run in progress: the phases of the round loop are its methods, in the order [`Run::run`]
/// calls them (start or resume, admit newcomers, the method's training round, the GPS step,
/// evaluation, the round's record, checkpoint), and [`Run::finish`] makes the result.
struct Run<'a> {
    cfg: &'a FederationConfig,
    /// The method's name ([`Plan::method`]).
    method: &'static str,
    /// The run's whole configuration ([`Plan::config`]), for checkpoints.
    config: serde_json::Value,
    ctx: &'a RunContext,
    pool: &'a mut dyn ClientPool,
    observer: &'a mut dyn Observer,
    /// The GPS of an LPS whose GPS is another process.
    remote_gps: Option<&'a mut dyn GpsLink>,
    strategy: Box<dyn Strategy>,
    /// The layers the GPS averages, in a hierarchical run.
    common: Option<CommonLayers>,
    initial: Params,
    start: Instant,
    /// Wall time of the run before its checkpoint (a resumed run).
    earlier_seconds: f64,
    /// The last completed round: 0 after round 0, the checkpoint's round when resumed.
    done: usize,
    /// The run's clients, by position.
    clients: Vec<ClientInfo>,
    /// Position in `clients` of each pool index (round-0 clients: the same until one is left
    /// out; newcomers may leave gaps where one was dropped).
    position: HashMap<usize, usize>,
    /// Round-0 clients that sent no round-0 upload (left out of the run).
    left_out: Vec<ClientInfo>,
    traffic: Traffic,
    /// Dropped updates already handed to the observer.
    reported: usize,
    /// What round 0 found (its assignment and models moved into `state`).
    init: Init,
    /// The round-0 clustering's ARI against the ground truth.
    ari: Option<f64>,
    state: Clusters,
    /// Last evaluation of each client, with the (cluster, model version) it was made under.
    last_eval: Vec<Option<(EvalReport, (usize, u64))>>,
    rounds: Vec<RoundRecord>,
    final_client_accuracy: Vec<f64>,
    /// Each client's best accuracy over the evaluations so far, in the run's view (NaN: never
    /// evaluated): the per-client maximum behind PACFL's "best clients average" figure.
    best_client_accuracy: Vec<f64>,
    gps_rounds: usize,
    newcomers: Vec<Newcomer>,
    dropped_newcomers: Vec<DroppedNewcomer>,
}

/// One evaluation's figures: the labels and proportional views, per cluster, per task.
type Evaluation = (Option<[Option<f64>; 2]>, Option<Vec<f64>>, Option<Vec<f64>>);

impl<'a> Run<'a> {
    /// Round 0 by the method, or the state of `resume`'s checkpoint.
    fn start(
        plan: Plan<'a>,
        pool: &'a mut dyn ClientPool,
        ctx: &'a RunContext,
        observer: &'a mut dyn Observer,
        lps: Option<(Params, &'a mut dyn GpsLink)>,
        resume: Option<Checkpoint>,
    ) -> Result<Self, FederationError> {
        let Plan {
            cfg,
            method,
            strategy,
            hierarchical,
            config,
        } = plan;
        cfg.validate()?;
        let start = Instant::now();
        let clients = match &resume {
            Some(c) => {
                super::checkpoint::same_config(&c.config, &config)?;
                c.clients.clone()
            }
            None => pool.clients(),
        };
        if clients.is_empty() {
            return Err(FederationError::NoClients);
        }
        let (initial, remote_gps) = match lps {
            Some((initial, link)) => (initial, Some(link)),
            None => (Params::init_for(cfg.model, cfg.classes(), cfg.seed), None),
        };
        let common = if hierarchical {
            Some(cfg.common()?)
        } else {
            None
        };
        let init = Init::plain(Vec::new(), &initial, false);
        let mut run = Run {
            cfg,
            method,
            config,
            ctx,
            pool,
            observer,
            remote_gps,
            strategy,
            common,
            initial,
            start,
            earlier_seconds: 0.0,
            done: 0,
            position: positions(&clients),
            clients,
            left_out: Vec::new(),
            traffic: Traffic::default(),
            reported: 0,
            init,
            ari: None,
            state: Clusters::new(Vec::new(), Vec::new()),
            last_eval: Vec::new(),
            rounds: Vec::with_capacity(cfg.rounds),
            final_client_accuracy: Vec::new(),
            best_client_accuracy: Vec::new(),
            gps_rounds: 0,
            newcomers: Vec::new(),
            dropped_newcomers: Vec::new(),
        };
        match resume {
            None => {
                run.round0()?;
                run.checkpoint(0)?;
            }
            Some(c) => run.restore(c)?,
        }
        Ok(run)
    }

    /// The round loop, from the round after [`Run::start`]'s to the last, then the result.
    fn run(mut self) -> Result<RunResult, FederationError> {
        let cfg = self.cfg;
        // With personalisation, one more pass after the last round places the newcomers offered
        // then (FedClust's Table 6: they join after the federation).
        let last_pass = cfg.rounds + usize::from(cfg.personalize_epochs.is_some());
        for round in self.done + 1..=last_pass {
            let t0 = Instant::now();
            self.admit_newcomers(round)?;
            if round > cfg.rounds {
                break; // the placement pass of personalisation
            }
            let chosen = sample_round(cfg, round, self.state.assignment(), self.state.len());
            let answers = self.traffic.answers;
            let stats = self
                .strategy
                .round(&mut env!(self), round, &chosen, &mut self.state)?;
            if stats.sampled > 0 && self.traffic.answers == answers {
                // Nothing of the round is recorded or checkpointed: the checkpoint on disk stays
                // the last round's.
                return Err(FederationError::NoAnswers {
                    round,
                    sampled: stats.sampled,
                });
            }
            let gps = self.gps(round)?;
            let evaluation = self.evaluate(round)?;
            self.record(round, stats, gps, evaluation, t0);
            self.checkpoint(round)?;
        }
        self.finish(last_pass)
    }

    /// Round 0: the method's clustering (or fixed start); clients without a round-0 upload
    /// leave the run.
    fn round0(&mut self) -> Result<(), FederationError> {
        let mut init = self.strategy.init(&mut env!(self))?;
        self.report_dropped();
        if !init.absent.is_empty() {
            for &p in &init.absent {
                self.observer.left_out(&self.clients[p]);
                self.left_out.push(self.clients[p].clone());
            }
            let left_out = &self.left_out;
            self.clients
                .retain(|c| !left_out.iter().any(|l| l.index == c.index));
            self.position = positions(&self.clients);
        }
        if init.assignment.len() != self.clients.len() {
            return Err(FederationError::Config(format!(
                "{} assigned {} of {} clients in round 0",
                self.method,
                init.assignment.len(),
                self.clients.len()
            )));
        }
        self.ari = match &self.ctx.truth {
            Some(t) if init.clusters_found => truth_ari(t, &self.clients, &init.assignment),
            _ => None,
        };
        if let Some(c) = &init.clustering {
            self.observer.clustered(c, self.ari);
        }
        self.state = Clusters::new(
            std::mem::take(&mut init.assignment),
            std::mem::take(&mut init.models),
        );
        self.last_eval = vec![None; self.clients.len()];
        self.init = init;
        Ok(())
    }

    /// The state of an interrupted run, from its checkpoint `c`.
    fn restore(&mut self, c: Checkpoint) -> Result<(), FederationError> {
        self.strategy.restore(c.strategy.clone())?;
        self.done = c.round;
        self.earlier_seconds = c.wall_seconds;
        self.left_out = c.left_out.clone();
        self.best_client_accuracy = unknown_as_nan(&c.best_client_accuracy);
        self.traffic.down = c.floats_down;
        self.traffic.up = c.floats_up;
        self.traffic.bytes_down = c.bytes_down;
        self.traffic.bytes_up = c.bytes_up;
        self.traffic.dropped = c.dropped_updates.clone();
        self.reported = self.traffic.dropped.len();
        let distances = match c.distances.clone() {
            Some(d) => Some(
                crate::cluster::distance::CondensedMatrix::from_condensed(d)
                    .map_err(|e| FederationError::Config(format!("checkpoint: {e}")))?,
            ),
            None => None,
        };
        self.init = Init {
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
        self.ari = c.ari;
        self.state = c.clusters();
        self.last_eval = c.last_eval.clone();
        self.rounds = c.rounds.clone();
        self.final_client_accuracy = unknown_as_nan(&c.final_client_accuracy);
        self.newcomers = c.newcomers;
        self.dropped_newcomers = c.dropped_newcomers;
        self.gps_rounds = c.gps_rounds;
        Ok(())
    }

    /// Hands the updates dropped since the last call to the observer.
    fn report_dropped(&mut self) {
        for d in &self.traffic.dropped[self.reported..] {
            self.observer.update_dropped(d);
        }
        self.reported = self.traffic.dropped.len();
    }

    fn drop_newcomer(&mut self, d: DroppedNewcomer) {
        self.observer.newcomer_dropped(&d);
        self.dropped_newcomers.push(d);
    }

    /// The newcomers the pool offers at the start of `round` (and, in round 1, the round-0
    /// clients that were left out), placed by the method's rule.
    fn admit_newcomers(&mut self, round: usize) -> Result<(), FederationError> {
        let mut offered = self.pool.newcomers(round);
        if round == 1 {
            // Round-0 clients that were left out get one more chance, as newcomers of round 1:
            // one that came back (a board restarted by its service) is placed by the method's
            // newcomer rule; one still gone is turned away.
            offered.splice(0..0, self.left_out.iter().cloned());
        }
        // Turn away indices the run already has; the others take the next positions while
        // the method places them.
        let mut fresh: Vec<ClientInfo> = Vec::new();
        for c in offered {
            if self.position.contains_key(&c.index) || fresh.iter().any(|f| f.index == c.index) {
                self.drop_newcomer(DroppedNewcomer {
                    reason: NewcomerError::DuplicateIndex(c.index),
                    client: c,
                    round,
                });
            } else {
                fresh.push(c);
            }
        }
        if fresh.is_empty() {
            return Ok(());
        }
        let base = self.clients.len();
        for (k, c) in fresh.iter().enumerate() {
            self.position.insert(c.index, base + k);
            self.clients.push(c.clone());
        }
        let placed = self
            .strategy
            .place(&mut env!(self), round, &fresh, &self.state)?;
        self.clients.truncate(base);
        for c in &fresh {
            self.position.remove(&c.index);
        }
        let mut accepted = Vec::new();
        for (client, outcome) in fresh.into_iter().zip(placed) {
            match outcome {
                Ok(p) => accepted.push((client, p)),
                Err(reason) => self.drop_newcomer(DroppedNewcomer {
                    client,
                    round,
                    reason,
                }),
            }
        }
        for (client, p) in accepted {
            let cluster = match p.target {
                Target::Cluster(c) if c < self.state.len() => c,
                Target::Cluster(c) => {
                    return Err(FederationError::Config(format!(
                        "{} placed a newcomer in cluster {c} of {}",
                        self.method,
                        self.state.len()
                    )));
                }
                Target::New(model) => self.state.push_cluster(model),
            };
            self.position.insert(client.index, self.clients.len());
            self.clients.push(client.clone());
            self.state.push_client(cluster);
            self.last_eval.push(None);
            let nc = Newcomer {
                client,
                round,
                cluster,
                distance: p.distance,
                truth_match: None,
                personalized_accuracy: None,
            };
            self.observer.newcomer(&nc);
            self.newcomers.push(nc);
        }
        Ok(())
    }

    /// The GPS step after `round`'s training ([`gps_step`]); whether it ran.
    fn gps(&mut self, round: usize) -> Result<bool, FederationError> {
        let ran = gps_step(
            self.cfg,
            round,
            self.common.as_ref(),
            self.remote_gps.as_deref_mut(),
            &mut self.state,
            &self.clients,
            &self.rounds,
            self.gps_rounds + 1,
        )?;
        if ran {
            self.gps_rounds += 1;
        }
        Ok(ran)
    }

    /// Every `eval_every` rounds and after the last: each client whose cluster model changed
    /// since its last evaluation evaluates it on its local test set.
    fn evaluate(&mut self, round: usize) -> Result<Evaluation, FederationError> {
        let cfg = self.cfg;
        if !(round.is_multiple_of(cfg.eval_every) || round == cfg.rounds) {
            return Ok((None, None, None));
        }
        self.strategy
            .before_evaluation(&mut env!(self), round, &mut self.state)?;
        let state = &self.state;
        let tag = |p: usize| {
            let c = state.assignment()[p];
            (c, state.version(c))
        };
        let last_eval = &self.last_eval;
        let jobs: Vec<(usize, Job<'_>)> = (0..self.clients.len())
            .filter(|&p| last_eval[p].as_ref().is_none_or(|(_, t)| *t != tag(p)))
            .map(|p| {
                (
                    p,
                    Job::Evaluate(EvaluateJob {
                        model: state.model_of(p),
                    }),
                )
            })
            .collect();
        let tags: HashMap<usize, (usize, u64)> = jobs.iter().map(|(p, _)| (*p, tag(*p))).collect();
        let answers = env!(self).run(round, jobs)?;
        for (p, answer) in answers {
            if let Answer::Evaluation(rep) = answer {
                self.last_eval[p] = Some((*rep, tags[&p]));
            }
        }
        let reports: Vec<Option<EvalReport>> = self
            .last_eval
            .iter()
            .map(|e| e.as_ref().map(|(r, _)| r.clone()))
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
        let mut per_cluster = vec![(0.0, 0usize); self.state.len()];
        for (p, a) in acc.iter().enumerate() {
            if let Some(a) = a {
                per_cluster[self.state.assignment()[p]].0 += a;
                per_cluster[self.state.assignment()[p]].1 += 1;
            }
        }
        self.best_client_accuracy.resize(acc.len(), f64::NAN);
        for (best, a) in self.best_client_accuracy.iter_mut().zip(&acc) {
            if let Some(a) = a {
                *best = best.max(*a); // NaN.max(a) is a
            }
        }
        self.final_client_accuracy = acc.into_iter().map(|a| a.unwrap_or(f64::NAN)).collect();
        Ok((
            Some(views),
            Some(
                per_cluster
                    .into_iter()
                    .map(|(s, k)| s / k.max(1) as f64)
                    .collect(),
            ),
            task_accuracy(&reports, &self.clients, self.ctx),
        ))
    }

    /// The record of `round`, handed to the observer and kept.
    fn record(
        &mut self,
        round: usize,
        stats: RoundStats,
        gps: bool,
        (views, cluster_accuracy, task_accuracy): Evaluation,
        t0: Instant,
    ) {
        let cfg = self.cfg;
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
            task_accuracy,
            gps,
            clusters: self.state.len(),
            ari: self
                .ctx
                .truth
                .as_ref()
                .and_then(|t| truth_ari(t, &self.clients, self.state.assignment())),
            seconds: t0.elapsed().as_secs_f64(),
        };
        self.report_dropped();
        self.observer.round(&record, cfg.rounds);
        self.rounds.push(record);
    }

    /// Hands the pool the checkpoint after `round` when it wants one; the method's state goes
    /// into every checkpoint, and a method without one gets none.
    fn checkpoint(&mut self, round: usize) -> Result<(), FederationError> {
        if !self.pool.wants_checkpoints() {
            return Ok(());
        }
        let Some(method) = self.strategy.save() else {
            return Ok(());
        };
        let (model_versions, next_version) = self.state.versions();
        let init = &self.init;
        self.pool.checkpoint(&Checkpoint {
            version: super::CHECKPOINT_VERSION,
            config: self.config.clone(),
            round,
            clients: self.clients.clone(),
            assignment: self.state.assignment().to_vec(),
            models: self.state.models().to_vec(),
            model_versions,
            next_version,
            last_eval: self.last_eval.clone(),
            rounds: self.rounds.clone(),
            final_client_accuracy: known(&self.final_client_accuracy),
            best_client_accuracy: known(&self.best_client_accuracy),
            gps_rounds: self.gps_rounds,
            newcomers: self.newcomers.clone(),
            dropped_newcomers: self.dropped_newcomers.clone(),
            left_out: self.left_out.clone(),
            dropped_updates: self.traffic.dropped.clone(),
            floats_down: self.traffic.down,
            floats_up: self.traffic.up,
            bytes_down: self.traffic.bytes_down,
            bytes_up: self.traffic.bytes_up,
            clustering: init.clustering.clone(),
            distances: init.distances.as_ref().map(|d| d.as_slice().to_vec()),
            relevance: init.relevance.clone(),
            ari: self.ari,
            clusters_found: init.clusters_found,
            signature_len: init.signature_len,
            signature_bytes: init.signature_bytes,
            strategy: method,
            wall_seconds: self.earlier_seconds + self.start.elapsed().as_secs_f64(),
        })?;
        Ok(())
    }

    /// Personalisation of the newcomers (when asked, in pass `last_pass`), then the result.
    fn finish(mut self, last_pass: usize) -> Result<RunResult, FederationError> {
        let cfg = self.cfg;
        // Newcomers placed after the last evaluation have none.
        self.final_client_accuracy
            .resize(self.clients.len(), f64::NAN);
        self.best_client_accuracy
            .resize(self.clients.len(), f64::NAN);
        if let Some(epochs) = cfg.personalize_epochs {
            let mut personalized = personalize(
                &mut env!(self),
                last_pass,
                epochs,
                &self.newcomers,
                &self.position,
                &self.state,
            )?;
            for nc in &mut self.newcomers {
                nc.personalized_accuracy = personalized
                    .remove(&self.position[&nc.client.index])
                    .and_then(|r| r.accuracy_in(cfg.local_test));
            }
            self.report_dropped();
        }
        let common = self.common.as_ref();
        let mut result = RunResult {
            method: self.method,
            assignment: self.state.assignment().to_vec(),
            n_clusters: self.state.len(),
            clients: self.clients,
            clustering: self.init.clustering,
            distances: self.init.distances,
            relevance: self.init.relevance,
            ari: self.ari,
            signature_len: self.init.signature_len,
            signature_bytes: self.init.signature_bytes,
            common_layers: common.map(|c| c.set().to_string()),
            common_len: common.map_or(0, CommonLayers::len),
            gps_rounds: self.gps_rounds,
            rounds: self.rounds,
            final_client_accuracy: self.final_client_accuracy,
            best_client_accuracy: self.best_client_accuracy,
            models: self.state.models().to_vec(),
            newcomers: self.newcomers,
            dropped_newcomers: self.dropped_newcomers,
            left_out: self.left_out,
            dropped_updates: self.traffic.dropped,
            floats_down: self.traffic.down,
            floats_up: self.traffic.up,
            bytes_down: self.traffic.bytes_down,
            bytes_up: self.traffic.bytes_up,
            wall_seconds: self.earlier_seconds + self.start.elapsed().as_secs_f64(),
        };
        if let Some(truth) = &self.ctx.truth {
            result.score_newcomers(truth);
        }
        Ok(result)
    }
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
        .map(|(p, u)| (*p, Job::Evaluate(EvaluateJob { model: &u.params })))
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
