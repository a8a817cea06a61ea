//! The in-process client pool behind `coordinator simulate`: every client's data lives in this
//! process and its local training runs here, one client after the other.
//!
//! Evaluation is shared between clients: a client's local test set is every test sample of its
//! training labels (rotated like its training data), so the accuracy of a model on it follows
//! exactly from the model's per-label counts on the test set. Each distinct model is therefore
//! evaluated once per rotation, on the labels its clients need, and each client's report is cut
//! out of that ([`EvalReport::restrict`]).

use std::collections::HashMap;

use crate::algorithms::mthfl::{self, Gram, Signature};
use crate::data::fmnist::{Dataset, FashionMnist};
use crate::data::partition::Partition;
use crate::federation::{
    ClientInfo, ClientPool, FederationConfig, FederationError, Update, client_seed,
};
use crate::model::{LayerSet, Params};
use crate::train::{
    Backend, CLASSES, EvalReport, LocalData, TrainConfig, TrainError, evaluate, train_local,
};
use burn::prelude::Device;

/// Batch size used for evaluation (no effect on the result).
const EVAL_BATCH: usize = 500;

/// Maps `f` over `items` on all cores (clients train independently, so the result does not depend
/// on the number of threads). Keeps the order of `items`.
fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(items.len());
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut out: Vec<(usize, R)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        mine.push((i, f(item)));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a training thread panicked"))
            .collect()
    });
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, r)| r).collect()
}

/// Clients simulated in this process.
pub struct SimPool {
    infos: Vec<ClientInfo>,
    train: Vec<LocalData>,
    labels: Vec<Vec<u8>>,
    rotation: Vec<u8>,
    /// `test[r][l]`: the test samples of label `l`, rotated by `r` quarter turns (built lazily).
    test: Vec<Vec<Option<LocalData>>>,
    test_set: Dataset,
    device: Device,
    /// MT-HFL: each client's own signature, exact (before upload rounding), kept from
    /// [`ClientPool::gram_signatures`] for its relevance row.
    own_signatures: Vec<Option<Signature>>,
    /// Clients held out of round 0 (the last ones) and the training round they join at.
    held: Option<(usize, usize)>,
}

impl SimPool {
    /// Builds the clients of `partition` over `data`, training on `backend`.
    pub fn new(
        data: &FashionMnist,
        partition: &Partition,
        backend: Backend,
    ) -> Result<Self, TrainError> {
        let device = backend.device()?;
        let mut infos = Vec::new();
        let mut train = Vec::new();
        let mut labels = Vec::new();
        let mut rotation = Vec::new();
        for (i, shard) in partition.clients.iter().enumerate() {
            infos.push(ClientInfo {
                index: i,
                id: format!("sim-{i:04}"),
                samples: shard.train.len() as u64,
            });
            train.push(LocalData::from_dataset(
                &data.train,
                &shard.train,
                shard.rotation,
            ));
            labels.push(shard.labels.clone());
            rotation.push(shard.rotation % 4);
        }
        Ok(SimPool {
            infos,
            train,
            labels,
            rotation,
            test: vec![vec![None; CLASSES]; 4],
            test_set: data.test.clone(),
            device,
            own_signatures: vec![None; partition.clients.len()],
            held: None,
        })
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

    fn test_data(&mut self, rotation: u8, label: u8) -> &LocalData {
        let slot = &mut self.test[usize::from(rotation)][usize::from(label)];
        let test_set = &self.test_set;
        slot.get_or_insert_with(|| {
            let idx: Vec<usize> = (0..test_set.len())
                .filter(|&i| test_set.labels[i] == label)
                .collect();
            LocalData::from_dataset(test_set, &idx, rotation)
        })
    }

    fn train_one(
        &self,
        client: usize,
        params: &Params,
        cfg: &TrainConfig,
    ) -> Result<Update, FederationError> {
        let (params, report) = train_local(params, &self.train[client], cfg, &self.device)
            .map_err(|e| FederationError::Pool(format!("client {client}: {e}")))?;
        Ok(Update {
            client,
            params,
            samples: self.infos[client].samples,
            loss: report.last_epoch_loss,
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

    fn signatures(
        &mut self,
        clients: &[usize],
        initial: &Params,
        layers: &LayerSet,
        cfg: &FederationConfig,
    ) -> Result<Vec<(usize, Vec<f32>)>, FederationError> {
        let selection = initial.layout().select(layers)?;
        par_map(clients, |&c| {
            let mut tc = cfg.train_config(client_seed(cfg.seed, 0, c));
            tc.epochs = cfg.warmup_epochs;
            let update = self.train_one(c, initial, &tc)?;
            Ok((c, selection.extract(&update.params.values)))
        })
        .into_iter()
        .collect()
    }

    fn train(
        &mut self,
        round: usize,
        jobs: &[(usize, &Params)],
        cfg: &FederationConfig,
    ) -> Result<Vec<Update>, FederationError> {
        par_map(jobs, |&(c, p)| {
            self.train_one(c, p, &cfg.train_config(client_seed(cfg.seed, round, c)))
        })
        .into_iter()
        .collect()
    }

    fn gram_signatures(
        &mut self,
        clients: &[usize],
        cfg: &FederationConfig,
    ) -> Result<Vec<(usize, Signature)>, FederationError> {
        let exact: Vec<(usize, Signature)> = par_map(clients, |&c| {
            let data = self
                .train
                .get(c)
                .ok_or_else(|| FederationError::Pool(format!("no client {c}")))?;
            mthfl::signature_of(data, cfg.eigenvectors)
                .map(|s| (c, s))
                .map_err(|e| FederationError::Pool(format!("client {c}: {e}")))
        })
        .into_iter()
        .collect::<Result<_, _>>()?;
        Ok(exact
            .into_iter()
            .map(|(c, s)| {
                let uploaded = s.rounded(cfg.signature_encoding);
                self.own_signatures[c] = Some(s);
                (c, uploaded)
            })
            .collect())
    }

    fn relevance_rows(
        &mut self,
        clients: &[usize],
        all: &[Signature],
        cfg: &FederationConfig,
    ) -> Result<Vec<(usize, Vec<f64>)>, FederationError> {
        par_map(clients, |&c| {
            let fail = |e: mthfl::MtHflError| FederationError::Pool(format!("client {c}: {e}"));
            let data = self
                .train
                .get(c)
                .ok_or_else(|| FederationError::Pool(format!("no client {c}")))?;
            // The Gram matrix is rebuilt rather than kept: 784² f64 per client adds up.
            let gram = Gram::from_local_data(data).map_err(fail)?;
            let k = all.first().map_or(cfg.eigenvectors, |s| s.k);
            let own = match &self.own_signatures[c] {
                Some(s) if s.k == k => s.clone(),
                _ => gram.signature(k).map_err(fail)?,
            };
            let row = mthfl::client_row(&gram, &own, all, cfg.estimate).map_err(fail)?;
            Ok((c, row))
        })
        .into_iter()
        .collect()
    }

    fn evaluate(
        &mut self,
        _round: usize,
        jobs: &[(usize, &Params)],
    ) -> Result<Vec<(usize, EvalReport)>, FederationError> {
        // Group clients by (model, rotation); evaluate each group once on the union of its labels.
        // (model, rotation) → (model, labels needed, clients)
        type Group<'a> = (&'a Params, [bool; CLASSES], Vec<usize>);
        let mut groups: HashMap<(*const Params, u8), Group> = HashMap::new();
        for &(c, p) in jobs {
            let entry = groups
                .entry((std::ptr::from_ref(p), self.rotation[c]))
                .or_insert((p, [false; CLASSES], Vec::new()));
            for &l in &self.labels[c] {
                entry.1[usize::from(l)] = true;
            }
            entry.2.push(c);
        }
        let mut keys: Vec<_> = groups.keys().copied().collect();
        keys.sort_by_key(|&(_, r)| r);
        let mut out = Vec::with_capacity(jobs.len());
        for key in keys {
            let (params, needed, members) = &groups[&key];
            let mut report = EvalReport::default();
            for label in (0..CLASSES as u8).filter(|&l| needed[usize::from(l)]) {
                let device = self.device.clone();
                let data = self.test_data(key.1, label);
                report.merge(&evaluate(params, data, EVAL_BATCH, &device));
            }
            for &c in members {
                out.push((c, report.restrict(&self.labels[c])));
            }
        }
        out.sort_by_key(|(c, _)| *c);
        Ok(out)
    }
}
