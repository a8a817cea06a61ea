//! The in-process client pool behind `coordinator simulate`: every client's data lives in this
//! process and its local training runs here, one client per core (or in cohorts,
//! [`SimPool::with_cohort`]).
//!
//! Evaluation is shared between clients: a client's local test set is every test sample of its
//! training labels (rotated and label-shifted like its training data), so the accuracy of a model
//! on it follows exactly from the model's per-label counts on the test set. Each distinct model is
//! therefore evaluated once per (rotation, label shift), on the labels its clients need (these
//! evaluations on all cores at once), and each client's report is cut out of that
//! ([`EvalReport::restrict`]).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::client::{ClientData, ClientError, EVAL_BATCH};
use crate::cluster::spectral;
use crate::cluster::spectral::{Estimate, Gram, Signature};
use crate::cohort::{
    Convolution, GradientTask, Member, Trained, evaluate_cohort, gradient_cohort, train_cohort,
};
use crate::data::catalog::{DEFAULT_CLASSES, MAX_CLASSES};
use crate::data::dataset::{Dataset, Splits};
use crate::data::partition::{Partition, shift_label};
use crate::federation::{Answer, ClientInfo, ClientPool, FederationError, Job, PoolError};
use crate::jobs::{Trainer, Training, Update};
use crate::model::Params;
use crate::parallel::{cores, par_map, par_map_on};
use crate::protocol::Encoding;
use crate::train::{Backend, EvalReport, LocalData, Proximal, TrainConfig, TrainError, evaluate};
use burn::prelude::Device;

/// A training as a job handed it to its [`Trainer`], owned (the first pass of
/// [`SimPool::run_in_cohorts`]).
struct Recorded {
    start: Params,
    cfg: TrainConfig,
    prox: Option<(Params, f64)>,
}

/// Where a [`Recorder`]'s mean losses ([`Trainer::mean_loss`], IFCA's candidates) come from.
enum Losses {
    /// Not measured: each asked model is noted and answered with 0 (the pass that gathers a
    /// round's losses for one stacked evaluation, [`SimPool::stacked_losses`]).
    Noted(Vec<Params>),
    /// Measured beforehand, in the order the job asks them, each beside its model (`None`: its
    /// evaluation failed); a model that is not the next one given, or comes after them, is
    /// measured here, one model at a time ([`crate::client::mean_loss`]).
    Given(std::vec::IntoIter<(Params, Option<f64>)>),
}

/// Notes every training and gradient and answers it with its start unchanged or zeros (the
/// answer is thrown away).
struct Recorder {
    trainings: Vec<Recorded>,
    /// The mean losses the job was answered, in order, for its replay.
    losses: Vec<f64>,
    source: Losses,
    /// The gradients asked: where, and the batch size.
    gradients: Vec<(Params, usize)>,
}

impl Recorder {
    fn new(source: Losses) -> Self {
        Recorder {
            trainings: Vec::new(),
            losses: Vec::new(),
            source,
            gradients: Vec::new(),
        }
    }
}

impl Trainer for Recorder {
    fn train(
        &mut self,
        t: &Training<'_>,
        data: &LocalData,
        _: &Device,
    ) -> Result<Update, ClientError> {
        self.trainings.push(Recorded {
            start: t.start.clone(),
            cfg: t.cfg,
            prox: t.prox.map(|p| (p.anchor.clone(), p.mu)),
        });
        Ok(Update {
            client: 0,
            params: t.start.clone(),
            samples: data.len() as u64,
            loss: 0.0,
        })
    }

    fn mean_loss(
        &mut self,
        model: &Params,
        data: &LocalData,
        device: &Device,
    ) -> Result<f64, ClientError> {
        let loss = match &mut self.source {
            Losses::Noted(asked) => {
                asked.push(model.clone());
                0.0
            }
            Losses::Given(given) => match given.next() {
                Some((m, Some(loss))) if m == *model => loss,
                _ => crate::client::mean_loss(model, data, device)?,
            },
        };
        self.losses.push(loss);
        Ok(loss)
    }

    fn gradient(
        &mut self,
        at: &Params,
        _: &LocalData,
        batch_size: usize,
        _: &Device,
    ) -> Result<Vec<f32>, ClientError> {
        self.gradients.push((at.clone(), batch_size));
        Ok(vec![0.0; at.values.len()])
    }
}

/// Answers the trainings of a job, in order, with the models its cohorts trained (the second
/// pass of [`SimPool::run_in_cohorts`]), as [`crate::jobs::Alone`] answers them: the trained model, the
/// client's sample count and the last epoch's loss; its mean losses with the ones the first
/// pass measured; its gradients with those computed for it.
struct Replay {
    trained: std::vec::IntoIter<Option<Trained>>,
    samples: u64,
    losses: std::vec::IntoIter<f64>,
    gradients: std::vec::IntoIter<Result<Vec<f32>, TrainError>>,
}

/// What a [`Replay`] answers a job that asks for other work than it did when it was recorded.
fn not_recorded(what: &str) -> ClientError {
    ClientError::Command(format!(
        "a job asked for another {what} than it did when its work was gathered"
    ))
}

impl Trainer for Replay {
    fn train(
        &mut self,
        _: &Training<'_>,
        _: &LocalData,
        _: &Device,
    ) -> Result<Update, ClientError> {
        match self.trained.next() {
            Some(Some(Ok((params, report)))) => Ok(Update {
                client: 0,
                params: params.clone(),
                samples: self.samples,
                loss: report.last_epoch_loss,
            }),
            Some(Some(Err(e))) => Err(ClientError::Train(e)),
            _ => Err(not_recorded("training")),
        }
    }

    fn gradient(
        &mut self,
        _: &Params,
        _: &LocalData,
        _: usize,
        _: &Device,
    ) -> Result<Vec<f32>, ClientError> {
        match self.gradients.next() {
            Some(g) => Ok(g?),
            None => Err(not_recorded("gradient")),
        }
    }

    fn mean_loss(
        &mut self,
        model: &Params,
        data: &LocalData,
        device: &Device,
    ) -> Result<f64, ClientError> {
        match self.losses.next() {
            Some(loss) => Ok(loss),
            None => Ok(crate::client::mean_loss(model, data, device)?),
        }
    }
}

/// Clients simulated in this process.
pub struct SimPool {
    infos: Vec<ClientInfo>,
    train: Vec<LocalData>,
    labels: Vec<Vec<u8>>,
    rotation: Vec<u8>,
    /// Each client's label shift (`shift:` partitions), `0..10`.
    shift: Vec<u8>,
    /// `test[(r, s, l)]`: the test samples whose label shifted by `s` is `l`, rotated by `r`
    /// quarter turns and labelled `l` (built lazily).
    test: HashMap<(u8, u8, u8), LocalData>,
    test_set: Dataset,
    device: Device,
    /// MT-HFL: each client's own signature, exact (before upload rounding), kept from
    /// [`ClientPool::gram_signatures`] for its relevance row.
    own_signatures: Vec<Option<Signature>>,
    /// Clients held out of round 0 (the last ones) and the training round they join at.
    held: Option<(usize, usize)>,
    /// The most clients' trainings batched into one cohort ([`crate::cohort`]); 1 trains each
    /// alone.
    cohort: usize,
    /// Whether the device is the CPU: cohorts are then cut so that every core trains one.
    on_cpu: bool,
    /// How cohorts compute LeNet-5's convolutions on this backend.
    conv: Convolution,
}

impl SimPool {
    /// Builds the clients of `partition` over `data`, training on `backend`.
    pub fn new(data: &Splits, partition: &Partition, backend: Backend) -> Result<Self, TrainError> {
        let device = backend.device()?;
        let mut infos = Vec::new();
        let mut train = Vec::new();
        let mut labels = Vec::new();
        let mut rotation = Vec::new();
        let mut shift = Vec::new();
        for (i, shard) in partition.clients.iter().enumerate() {
            infos.push(ClientInfo {
                index: i,
                id: format!("sim-{i:04}"),
                samples: shard.train.len() as u64,
            });
            train.push(LocalData::from_dataset_shifted(
                &data.train,
                &shard.train,
                shard.rotation,
                shard.label_shift,
            ));
            labels.push(shard.labels.clone());
            rotation.push(shard.rotation % 4);
            shift.push(shard.label_shift % DEFAULT_CLASSES as u8);
        }
        Ok(SimPool {
            infos,
            train,
            labels,
            rotation,
            shift,
            test: HashMap::new(),
            test_set: data.test.clone(),
            device,
            own_signatures: vec![None; partition.clients.len()],
            held: None,
            cohort: 1,
            on_cpu: backend.is_cpu(),
            conv: Convolution::for_backend(backend),
        })
    }

    /// Trains up to `n` clients' local trainings together as one batched model
    /// ([`crate::cohort::train_cohort`]); 1 (the default) trains each alone. The same models
    /// up to float rounding. On a CPU backend the cohorts are cut smaller where that gives every
    /// core one; on a GPU the sampled clients go in as few cohorts as `n` allows, and each
    /// round's evaluations, IFCA's candidate losses and StoCFL's anchor gradients run stacked too
    /// ([`crate::cohort::evaluate_cohort`], [`crate::cohort::gradient_cohort`]).
    pub fn with_cohort(mut self, n: usize) -> Self {
        self.cohort = n.max(1);
        self
    }

    /// FedClust's newcomer experiment: the last `n` clients are not in round 0
    /// ([`ClientPool::clients`] leaves them out) and are handed over as newcomers at the start
    /// of training round `join_round` ([`ClientPool::newcomers`]), keeping their indices.
    ///
    /// # Errors
    ///
    /// [`FederationError::Config`] unless at least two clients stay for round 0 and
    /// `join_round ≥ 1`.
    pub fn hold_out(&mut self, n: usize, join_round: usize) -> Result<(), FederationError> {
        let total = self.infos.len();
        if n > 0 && (n + 2 > total || join_round == 0) {
            return Err(FederationError::Config(format!(
                "{n} newcomers of {total} clients joining at round {join_round}: at least 2 \
                 clients must stay for round 0 and the join round must be ≥ 1"
            )));
        }
        self.held = (n > 0).then_some((n, join_round));
        Ok(())
    }

    fn test_data(&mut self, rotation: u8, shift: u8, label: u8) -> &LocalData {
        let test_set = &self.test_set;
        self.test
            .entry((rotation, shift, label))
            .or_insert_with(|| {
                let idx: Vec<usize> = (0..test_set.len())
                    .filter(|&i| shift_label(test_set.labels[i], shift) == label)
                    .collect();
                LocalData::from_dataset_shifted(test_set, &idx, rotation, shift)
            })
    }
}

impl ClientPool for SimPool {
    fn clients(&self) -> Vec<ClientInfo> {
        let held = self.held.map_or(0, |(n, _)| n);
        self.infos[..self.infos.len() - held].to_vec()
    }

    fn newcomers(&mut self, round: usize) -> Vec<ClientInfo> {
        match self.held {
            Some((n, join)) if round >= join => {
                self.held = None;
                self.infos[self.infos.len() - n..].to_vec()
            }
            _ => Vec::new(),
        }
    }

    /// Evaluations are shared (see the module docs); MT-HFL's jobs keep each client's exact
    /// signature between its two jobs; everything else is [`Job::execute`], clients in
    /// parallel (the jobs that train in cohorts with [`SimPool::with_cohort`]). Answers
    /// come in job order (with cohorts: the jobs that do not train, then those that do), then
    /// MT-HFL's, then evaluations by client.
    fn run(
        &mut self,
        _round: usize,
        jobs: &[(usize, Job<'_>)],
    ) -> Result<Vec<(usize, Answer)>, PoolError> {
        if let Some(&(c, _)) = jobs.iter().find(|(c, _)| *c >= self.train.len()) {
            return Err(PoolError::NoClient(c));
        }
        let fail = |c: usize, e: &dyn std::fmt::Display| PoolError::Client {
            client: c,
            reason: e.to_string(),
        };
        let plain: Vec<&(usize, Job<'_>)> = jobs
            .iter()
            .filter(|(_, j)| {
                !matches!(
                    j,
                    Job::Evaluate(_) | Job::GramSignature(_) | Job::Relevance(_)
                )
            })
            .collect();
        let (batched, alone): (Vec<_>, Vec<_>) = plain
            .into_iter()
            .partition(|(_, j)| self.cohort > 1 && j.trains());
        let mut out: Vec<(usize, Answer)> = par_map(&alone, |&&(c, ref job)| {
            let answer = job
                .execute(self.data(c), &self.device)
                .map_err(|e| fail(c, &e))?;
            Ok((c, answer))
        })
        .into_iter()
        .collect::<Result<_, PoolError>>()?;
        out.extend(self.run_in_cohorts(&batched)?);

        let grams: Vec<(usize, usize, Encoding)> = jobs
            .iter()
            .filter_map(|(c, j)| match j {
                Job::GramSignature(g) => Some((*c, g.k, g.encoding)),
                _ => None,
            })
            .collect();
        let exact: Vec<(usize, Signature, Encoding)> = par_map(&grams, |&(c, k, encoding)| {
            spectral::signature_of(&self.train[c], k)
                .map(|s| (c, s, encoding))
                .map_err(|e| fail(c, &e))
        })
        .into_iter()
        .collect::<Result<_, _>>()?;
        for (c, s, encoding) in exact {
            let uploaded = s.rounded(encoding);
            self.own_signatures[c] = Some(s);
            out.push((c, Answer::Eigenpairs(uploaded)));
        }

        let rows: Vec<(usize, &[Signature], Estimate)> = jobs
            .iter()
            .filter_map(|(c, j)| match j {
                Job::Relevance(r) => Some((*c, r.all, r.estimate)),
                _ => None,
            })
            .collect();
        let rows: Vec<(usize, Answer)> = par_map(&rows, |&(c, all, estimate)| {
            let err = |e: spectral::SpectralError| fail(c, &e);
            // The Gram matrix is rebuilt rather than kept: 784² f64 per client adds up.
            let gram = Gram::from_local_data(&self.train[c]).map_err(err)?;
            let k = all.first().map_or(1, |s| s.k);
            let own = match &self.own_signatures[c] {
                Some(s) if s.k == k => s.clone(),
                _ => gram.signature(k).map_err(err)?,
            };
            let row = spectral::client_row(&gram, &own, all, estimate).map_err(err)?;
            Ok((c, Answer::Row(row)))
        })
        .into_iter()
        .collect::<Result<_, PoolError>>()?;
        out.extend(rows);

        let evals: Vec<(usize, &Params)> = jobs
            .iter()
            .filter_map(|(c, j)| match j {
                Job::Evaluate(e) => Some((*c, e.model)),
                _ => None,
            })
            .collect();
        if !evals.is_empty() {
            out.extend(
                self.evaluate(&evals)?
                    .into_iter()
                    .map(|(c, r)| (c, Answer::Evaluation(Box::new(r)))),
            );
        }
        Ok(out)
    }
}

impl SimPool {
    /// The threads the pool's own batched work runs on: every core on the CPU, one on a GPU (its
    /// device is the parallel part).
    fn threads(&self) -> usize {
        if self.on_cpu { cores() } else { 1 }
    }

    fn data(&self, c: usize) -> ClientData<'_> {
        ClientData {
            train: &self.train[c],
            test: None,
        }
    }

    /// Jobs that train, their trainings gathered into cohorts: each job is executed once with a
    /// [`Recorder`] (which notes its trainings and gradients; on a GPU its mean losses were
    /// measured stacked before, [`SimPool::stacked_losses`]), the trainings are trained in
    /// cohorts of up to [`SimPool::with_cohort`] clients (members of like step counts together),
    /// the gradients computed ([`SimPool::gradients`]), and each job is executed again with a
    /// [`Replay`] of its trained models and gradients, which gives its answer.
    fn run_in_cohorts(
        &self,
        jobs: &[&(usize, Job<'_>)],
    ) -> Result<Vec<(usize, Answer)>, PoolError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let given = if self.stacked() {
            self.stacked_losses(jobs)
        } else {
            vec![Vec::new(); jobs.len()]
        };
        let recorders: Vec<Recorder> = par_map(
            &jobs.iter().zip(given).collect::<Vec<_>>(),
            |(job, given)| {
                let (c, job) = job;
                let mut recorder = Recorder::new(Losses::Given(given.clone().into_iter()));
                // A job that fails here fails the same way when replayed below.
                let _ = job.execute_with(self.data(*c), &self.device, &mut recorder);
                recorder
            },
        );
        let gradients = self.gradients(jobs, &recorders);
        let (recorded, losses): (Vec<Vec<Recorded>>, Vec<Vec<f64>>) = recorders
            .into_iter()
            .map(|r| (r.trainings, r.losses))
            .unzip();
        // (job, training) of every member, longest schedules first.
        let mut order: Vec<(usize, usize)> = recorded
            .iter()
            .enumerate()
            .flat_map(|(j, r)| (0..r.len()).map(move |k| (j, k)))
            .collect();
        let steps = |&(j, k): &(usize, usize)| {
            let r = &recorded[j][k];
            r.cfg.epochs
                * self.train[jobs[j].0]
                    .len()
                    .div_ceil(r.cfg.batch_size.max(1))
        };
        order.sort_by_key(|m| std::cmp::Reverse(steps(m)));
        let cores = self.threads();
        let cohorts = order
            .len()
            .div_ceil(self.cohort)
            .max(cores.min(order.len()));
        let size = order.len().div_ceil(cohorts.max(1));
        let chunks: Vec<&[(usize, usize)]> = order.chunks(size.max(1)).collect();
        let trained = par_map(&chunks, |chunk| {
            let members: Vec<Member<'_>> = chunk
                .iter()
                .map(|&(j, k)| {
                    let r = &recorded[j][k];
                    Member {
                        start: &r.start,
                        data: &self.train[jobs[j].0],
                        cfg: r.cfg,
                        prox: r
                            .prox
                            .as_ref()
                            .map(|(anchor, mu)| Proximal { anchor, mu: *mu }),
                    }
                })
                .collect();
            train_cohort(&members, &self.device, self.conv)
        });
        let mut results: Vec<Vec<Option<Trained>>> = recorded
            .iter()
            .map(|r| r.iter().map(|_| None).collect())
            .collect();
        for (chunk, got) in chunks.iter().zip(trained) {
            for (&(j, k), r) in chunk.iter().zip(got) {
                results[j][k] = Some(r);
            }
        }
        // Each job's results, measured losses and gradients, taken (not borrowed) by the one
        // thread that replays it, so that a training's error reaches the job as it is.
        type Taken = Mutex<(
            Vec<Option<Trained>>,
            Vec<f64>,
            Vec<Result<Vec<f32>, TrainError>>,
        )>;
        let replays: Vec<(usize, Taken)> = results
            .into_iter()
            .zip(losses)
            .zip(gradients)
            .map(|((trained, losses), gradients)| Mutex::new((trained, losses, gradients)))
            .enumerate()
            .collect();
        par_map(&replays, |(j, taken)| {
            let (c, job) = jobs[*j];
            let (trained, losses, gradients) =
                std::mem::take(&mut *taken.lock().unwrap_or_else(|e| e.into_inner()));
            let mut replay = Replay {
                trained: trained.into_iter(),
                samples: self.train[*c].len() as u64,
                losses: losses.into_iter(),
                gradients: gradients.into_iter(),
            };
            job.execute_with(self.data(*c), &self.device, &mut replay)
                .map(|a| (*c, a))
                .map_err(|e| PoolError::Client {
                    client: *c,
                    reason: e.to_string(),
                })
        })
        .into_iter()
        .collect()
    }

    /// The gradients the jobs asked for when recorded (StoCFL's anchors), per job in the order
    /// asked: stacked ([`gradient_cohort`]) on a GPU in cohorts, else one model a core
    /// ([`crate::train::gradient`], what each job computes alone).
    fn gradients(
        &self,
        jobs: &[&(usize, Job<'_>)],
        recorders: &[Recorder],
    ) -> Vec<Vec<Result<Vec<f32>, TrainError>>> {
        let tasks: Vec<GradientTask<'_>> = jobs
            .iter()
            .zip(recorders)
            .flat_map(|(&&(c, _), r)| {
                r.gradients
                    .iter()
                    .map(move |(at, batch)| (at, &self.train[c], *batch))
            })
            .collect();
        let mut computed = if self.stacked() {
            gradient_cohort(&tasks, &self.device, self.conv)
        } else {
            par_map_on(self.threads(), &tasks, |&(at, data, batch)| {
                crate::train::gradient(at, data, batch, &self.device)
            })
        }
        .into_iter();
        recorders
            .iter()
            .map(|r| computed.by_ref().take(r.gradients.len()).collect())
            .collect()
    }

    /// Whether evaluations, IFCA's losses and StoCFL's gradients run stacked
    /// ([`evaluate_cohort`], [`gradient_cohort`]): on a GPU in cohorts. On the CPU one model a
    /// core is faster.
    fn stacked(&self) -> bool {
        self.cohort > 1 && !self.on_cpu
    }

    /// The mean losses `jobs` will ask for (IFCA's candidates on the client's training data),
    /// measured in stacked evaluations ([`evaluate_cohort`]) rather than one model at a time:
    /// each job is run once with its losses noted and answered with 0 (the models a pick asks
    /// for do not depend on the losses). Per job, each model it asked for and its loss (`None`
    /// where the evaluation failed: the job then measures it itself and meets the error).
    fn stacked_losses(&self, jobs: &[&(usize, Job<'_>)]) -> Vec<Vec<(Params, Option<f64>)>> {
        let asked: Vec<Vec<Params>> = par_map(jobs, |&&(c, ref job)| {
            let mut probe = Recorder::new(Losses::Noted(Vec::new()));
            let _ = job.execute_with(self.data(c), &self.device, &mut probe);
            match probe.source {
                Losses::Noted(asked) => asked,
                _ => Vec::new(),
            }
        });
        let tasks: Vec<(&Params, &LocalData)> = jobs
            .iter()
            .zip(&asked)
            .flat_map(|(&&(c, _), models)| models.iter().map(move |m| (m, &self.train[c])))
            .collect();
        let mut losses = evaluate_cohort(&tasks, EVAL_BATCH, &self.device, self.conv)
            .into_iter()
            .map(|r| r.ok().map(|r| r.loss()));
        asked
            .into_iter()
            .map(|models| models.into_iter().zip(losses.by_ref()).collect())
            .collect()
    }

    /// Each `(client, model)`'s report on the client's local test set, by client.
    fn evaluate(
        &mut self,
        jobs: &[(usize, &Params)],
    ) -> Result<Vec<(usize, EvalReport)>, PoolError> {
        // Group clients by (model, rotation, label shift); evaluate each group once on the union
        // of its labels. (model, rotation, shift) → (model, labels needed, clients)
        type Group<'a> = (&'a Params, [bool; MAX_CLASSES], Vec<usize>);
        let mut groups: HashMap<(*const Params, u8, u8), Group> = HashMap::new();
        for &(c, p) in jobs {
            let entry = groups
                .entry((std::ptr::from_ref(p), self.rotation[c], self.shift[c]))
                .or_insert((p, [false; MAX_CLASSES], Vec::new()));
            for &l in &self.labels[c] {
                entry.1[usize::from(l)] = true;
            }
            entry.2.push(c);
        }
        let mut keys: Vec<_> = groups.keys().copied().collect();
        keys.sort_by_key(|&(_, r, s)| (r, s));
        // Every (group, label) evaluation, its test set built first (kept for later rounds);
        // then all of them on the cores at once (one evaluation runs on one thread).
        // (group, its model, (rotation, shift, label), a client of the group for errors)
        type Task<'a> = (usize, &'a Params, (u8, u8, u8), usize);
        let tasks: Vec<Task> = keys
            .iter()
            .enumerate()
            .flat_map(|(k, key)| {
                let (params, needed, members) = &groups[key];
                let (needed, first) = (*needed, members[0]);
                (0..MAX_CLASSES)
                    .filter(move |&l| needed[l])
                    .map(move |l| (k, *params, (key.1, key.2, l as u8), first))
            })
            .collect();
        for &(_, _, (rotation, shift, label), _) in &tasks {
            self.test_data(rotation, shift, label);
        }
        let (test, device) = (&self.test, &self.device);
        let failed = |client: usize| {
            move |e: TrainError| PoolError::Client {
                client,
                reason: e.to_string(),
            }
        };
        let reports: Vec<Result<EvalReport, PoolError>> = if self.stacked() {
            // On a GPU, in cohorts: the models stacked into batched forward passes.
            let pairs: Vec<(&Params, &LocalData)> = tasks
                .iter()
                .map(|&(_, p, set, _)| (p, &test[&set]))
                .collect();
            evaluate_cohort(&pairs, EVAL_BATCH, device, self.conv)
                .into_iter()
                .zip(&tasks)
                .map(|(r, &(.., client))| r.map_err(failed(client)))
                .collect()
        } else {
            par_map_on(self.threads(), &tasks, |&(_, params, set, client)| {
                evaluate(params, &test[&set], EVAL_BATCH, device).map_err(failed(client))
            })
        };
        let mut merged = vec![EvalReport::default(); keys.len()];
        for (&(k, ..), r) in tasks.iter().zip(reports) {
            merged[k].merge(&r?);
        }
        let mut out = Vec::with_capacity(jobs.len());
        for (key, report) in keys.iter().zip(&merged) {
            for &c in &groups[key].2 {
                let r = report.restrict(&self.labels[c]);
                out.push((c, r.with_training_labels(&self.train[c].labels)));
            }
        }
        out.sort_by_key(|(c, _)| *c);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::fmnist::FashionMnist;
    use crate::jobs::PickJob;
    use crate::model::ModelKind;

    /// On a GPU in cohorts, a round's evaluations, IFCA's candidate losses and StoCFL's anchor
    /// gradients run stacked (`evaluate_cohort`, `gradient_cohort`); a run ends with the same
    /// clusters, models and per-round accuracies as with each computed on its own. Here on flex,
    /// with the pool told it is not on the CPU; FedClust, IFCA (whose picks follow the stacked
    /// losses) and StoCFL (whose merges follow the stacked gradients).
    #[test]
    fn stacked_evaluations_losses_and_gradients_give_a_run_the_same_results() {
        use crate::algorithms::{self, Algorithm, MethodConfig};
        use crate::data::partition::{PartitionSpec, partition};
        use crate::federation::{FederationConfig, Quiet, RunContext};

        let data = FashionMnist::bundled().unwrap();
        let spec: PartitionSpec = "groups:012-34-56-789".parse().unwrap();
        let part = partition(&spec, &data.train.labels, 8, 3).unwrap();
        for method in [Algorithm::FedClust, Algorithm::Ifca, Algorithm::StoCfl] {
            let cfg = MethodConfig::new(
                method,
                FederationConfig {
                    rounds: 2,
                    frac: 0.5,
                    epochs: 1,
                    seed: 3,
                    clusters: Some(3),
                    ..FederationConfig::default()
                },
            );
            let run = |stacked: bool| {
                let mut pool = SimPool::new(&data, &part, Backend::Flex)
                    .unwrap()
                    .with_cohort(3);
                pool.on_cpu = !stacked;
                algorithms::run(
                    &cfg,
                    &mut pool,
                    &RunContext::of_partition(&part),
                    &mut Quiet,
                )
                .unwrap()
            };
            let (alone, stacked) = (run(false), run(true));
            assert_eq!(alone.assignment, stacked.assignment, "{method:?}");
            assert_eq!(alone.models, stacked.models, "{method:?}");
            let accuracies = |r: &crate::federation::RunResult| {
                r.rounds.iter().map(|x| x.accuracy).collect::<Vec<_>>()
            };
            assert_eq!(accuracies(&alone), accuracies(&stacked), "{method:?}");
            assert!(alone.rounds.iter().all(|x| x.accuracy.is_some()));
            assert_eq!(
                alone.final_client_accuracy, stacked.final_client_accuracy,
                "{method:?}"
            );
        }
    }

    /// A pick job with `candidates` and small training settings.
    fn pick<'a>(candidates: Vec<&'a Params>) -> Job<'a> {
        Job::Pick(PickJob {
            train: Training {
                start: candidates[0],
                cfg: TrainConfig {
                    epochs: 1,
                    batch_size: 10,
                    lr: 0.05,
                    momentum: 0.5,
                    seed: 0,
                    threads: 1,
                },
                prox: None,
            },
            candidates,
        })
    }

    /// The stacked losses of a round's picks are, job by job and in the order each asks them,
    /// its candidates and their mean losses on the client's training data as measured one model
    /// at a time (`client::mean_loss`), within 1e-5 relative; clients of unequal shards
    /// (batches of 500: a short last one), candidates shared and in other orders.
    #[test]
    fn a_rounds_stacked_candidate_losses_are_each_models_mean_loss() {
        use crate::data::partition::{PartitionSpec, partition};

        let data = FashionMnist::bundled().unwrap();
        let spec: PartitionSpec = "dir:0.5".parse().unwrap();
        let part = partition(&spec, &data.train.labels, 3, 1).unwrap();
        let mut pool = SimPool::new(&data, &part, Backend::Flex)
            .unwrap()
            .with_cohort(3);
        pool.on_cpu = false;
        let models: Vec<Params> = (0..3).map(|s| Params::init(ModelKind::LeNet5, s)).collect();
        let jobs = [
            (0, pick(vec![&models[0], &models[1]])),
            (2, pick(vec![&models[2], &models[0], &models[1]])),
            (1, pick(vec![&models[1]])),
        ];
        let refs: Vec<&(usize, Job<'_>)> = jobs.iter().collect();
        let got = pool.stacked_losses(&refs);
        assert_eq!(got.len(), jobs.len());
        for ((c, job), got) in jobs.iter().zip(&got) {
            let Job::Pick(job) = job else { unreachable!() };
            assert_eq!(got.len(), job.candidates.len());
            for (&candidate, (model, loss)) in job.candidates.iter().zip(got) {
                assert_eq!(model, candidate);
                let alone =
                    crate::client::mean_loss(candidate, &pool.train[*c], &pool.device).unwrap();
                let loss = loss.expect("evaluated");
                assert!(
                    (loss - alone).abs() <= 1e-5 * alone.abs(),
                    "client {c}: stacked {loss}, alone {alone}"
                );
            }
        }
        assert!(pool.train.iter().any(|d| d.len() % EVAL_BATCH != 0));
    }

    /// A recorder answers a pick with the losses given for the models it asks, in order, and
    /// measures a model that is not the next one given: two identical candidates tie when
    /// measured, so only the given losses make it choose the second.
    #[test]
    fn a_recorder_takes_the_losses_given_for_the_models_asked() {
        let device = Backend::default().device().unwrap();
        let data = FashionMnist::bundled().unwrap();
        let idx: Vec<usize> = (0..40).collect();
        let train = LocalData::from_dataset(&data.train, &idx, 0);
        let model = Params::init(ModelKind::Mlp, 1);
        let other = Params::init(ModelKind::Mlp, 2);
        let client = ClientData {
            train: &train,
            test: None,
        };
        let job = pick(vec![&model, &model]);
        let choice = |given: Vec<(Params, Option<f64>)>| {
            let mut recorder = Recorder::new(Losses::Given(given.into_iter()));
            let Answer::Picked(p) = job.execute_with(client, &device, &mut recorder).unwrap()
            else {
                panic!("not a pick's answer")
            };
            assert_eq!(p.losses, recorder.losses);
            (p.choice, p.losses)
        };
        let measured = crate::client::mean_loss(&model, &train, &device).unwrap();
        assert_eq!(
            choice(vec![(model.clone(), Some(0.9)), (model.clone(), Some(0.1))]),
            (1, vec![0.9, 0.1])
        );
        // Given for another model, or not evaluated: measured.
        assert_eq!(
            choice(vec![(other.clone(), Some(0.1)), (model.clone(), None)]),
            (0, vec![measured, measured])
        );
    }

    /// In cohorts a job runs twice: IFCA's pick measures its candidates in the first pass, and
    /// its replay takes those losses (and the choice they make) instead of evaluating every
    /// candidate again. Two identical candidates: the measured losses tie, so only the losses
    /// handed to the replay can make it choose the second.
    #[test]
    fn a_picks_replay_takes_the_losses_its_first_pass_measured() {
        let device = Backend::default().device().unwrap();
        let data = FashionMnist::bundled().unwrap();
        let idx: Vec<usize> = (0..40).collect();
        let train = LocalData::from_dataset(&data.train, &idx, 0);
        let model = Params::init(ModelKind::Mlp, 1);
        let job = pick(vec![&model, &model]);
        let client = ClientData {
            train: &train,
            test: None,
        };
        // Nothing given: every loss measured.
        let mut recorder = Recorder::new(Losses::Given(Vec::new().into_iter()));
        job.execute_with(client, &device, &mut recorder).unwrap();
        assert_eq!(recorder.losses.len(), 2);
        assert_eq!(recorder.losses[0], recorder.losses[1]);
        let trained = train_cohort(
            &[Member {
                start: &model,
                data: &train,
                cfg: recorder.trainings[0].cfg,
                prox: None,
            }],
            &device,
            Convolution::Grouped,
        );
        let mut replay = Replay {
            trained: trained
                .into_iter()
                .map(Some)
                .collect::<Vec<_>>()
                .into_iter(),
            samples: train.len() as u64,
            losses: vec![0.9, 0.1].into_iter(),
            gradients: Vec::new().into_iter(),
        };
        let Answer::Picked(p) = job.execute_with(client, &device, &mut replay).unwrap() else {
            panic!("not a pick's answer")
        };
        assert_eq!((p.choice, p.losses), (1, vec![0.9, 0.1]));
    }
}
