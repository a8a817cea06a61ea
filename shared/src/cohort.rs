//! Cohort training: many clients' local trainings as one batched model.
//!
//! One small model at a time is launch-bound on a GPU and overhead-bound on a CPU (a LeNet-5 step
//! at batch 10 is a few hundred tiny kernels). A cohort stacks C clients' models along a leading
//! client axis and trains them in one batched computation per step, each client still taking its
//! own SGD step on its own mini-batch:
//!
//! - every parameter tensor is held as `[C, n]` (client-major, each row one client's tensor in
//!   [`ParamLayout`] order);
//! - the MLP's and LeNet-5's linear layers run as batched matrix products over the client axis
//!   (`[C, B, in] × [C, in, out]`); LeNet-5's convolutions either as one grouped convolution (the
//!   clients are the groups: input `[B, C·in, H, W]`, weight `[C·out, in, 5, 5]`) or as im2col
//!   followed by a batched matrix product (`[C, B·L, in·25] × [C, in·25, out]`), see
//!   [`Convolution`];
//! - the objective is Σ_c (client c's mean cross-entropy over its own batch, plus its proximal
//!   term): the clients' parameters never meet, so each client's gradient is exactly the gradient
//!   of its own loss;
//! - SGD with momentum per client (`v ← μ_c·v + g`, `θ ← θ − lr_c·v`, PyTorch's rule as in
//!   [`crate::train`]).
//!
//! Clients need not have the same number of steps (unequal shards, Dirichlet splits, other epoch
//! counts) nor full batches: a client's short last batch is masked (its padded samples weigh 0 in
//! its mean), and a client with no batch at a step is masked out of it entirely (μ_c = 1, lr_c = 0
//! and a zero gradient leave its parameters and velocity bit for bit as they were). Each client
//! keeps its own sample order: the same ChaCha8 shuffle of its own seed as
//! [`crate::train::train_local_prox`], so a client trained in a cohort ends with the model it gets
//! trained alone, up to float rounding (`shared/tests/cohort.rs` checks 1e-5 relative for every
//! kind of training).
//!
//! [`evaluate_cohort`] runs many models' evaluations the same way, forward only, and
//! [`gradient_cohort`] their gradients over all their data (StoCFL's anchor gradients), nothing
//! stepped: `simulate` uses them on a GPU, where one model at a time is one small pass after
//! another.
//!
//! The members' images go to the device once, as one `[1 + Σ n_c, 784]` tensor (row 0 is the
//! zero image that pads short batches), and the steps' inputs (each sample's row and label, the
//! masks, each member's momentum and learning rate) once per 100 steps; a step sends nothing and
//! gathers its batch on the device.

use std::time::Instant;

use burn::prelude::*;
use burn::tensor::activation::{log_softmax, relu};
use burn::tensor::module::{conv2d, max_pool2d, unfold4d};
use burn::tensor::ops::{ConvOptions, MaxPoolOptions, UnfoldOptions};
use burn::tensor::{Gradients, TensorData};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::model::{ModelError, ModelKind, ParamLayout, Params, RESNET9_POOLED, group_norm};
use crate::train::{
    Backend, Device, EvalReport, LocalData, Proximal, TrainConfig, TrainError, TrainReport,
};

/// One client's local training in a cohort: what [`crate::train::train_local_prox`] takes.
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    /// The starting model.
    pub start: &'a Params,
    /// The client's samples.
    pub data: &'a LocalData,
    /// Its settings (epochs, batch, lr, momentum, seed; `threads` is ignored).
    pub cfg: TrainConfig,
    /// Its proximal term, if any.
    pub prox: Option<Proximal<'a>>,
}

/// A trained member's model and report, or why it could not be trained.
pub type Trained = Result<(Params, TrainReport), TrainError>;

/// How a cohort computes LeNet-5's convolutions: the same numbers either way, up to float
/// rounding; what differs is which kernels the backend runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Convolution {
    /// One grouped convolution per layer, the clients as its groups. flex runs it group by group
    /// at the speed of one client's convolution.
    Grouped,
    /// im2col (burn's `unfold4d`, one ungrouped convolution by a fixed 0/1 kernel) and one
    /// batched matrix product per layer. For CubeCL (vulkan, cuda), which differentiates a
    /// grouped convolution's weight with one kernel launch per group: a hundred per layer and
    /// step in a cohort of a hundred. On flex the im2col costs more than it saves.
    Im2col,
}

impl Convolution {
    /// What each backend runs fastest: im2col on CubeCL's GPUs, grouped elsewhere (flex,
    /// ndarray, and libtorch, whose cuDNN has grouped kernels).
    pub fn for_backend(backend: Backend) -> Self {
        match backend {
            Backend::Vulkan(_) | Backend::Cuda(_) => Convolution::Im2col,
            Backend::Flex | Backend::Ndarray | Backend::Tch(_) => Convolution::Grouped,
        }
    }
}

/// Trains every member, as [`crate::train::train_local_prox`] would one by one, in one batched
/// computation on `device` (the plain device; autodiff is added here), LeNet-5's convolutions
/// computed as `conv` says. Returns one result per member, in order.
///
/// A member whose settings, model or anchor are invalid gets that error and the others train on;
/// members of another model than the first valid one get [`TrainError::InvalidConfig`] (a cohort
/// is one architecture). Every report's `seconds` is the cohort's wall-clock time.
pub fn train_cohort(members: &[Member<'_>], device: &Device, conv: Convolution) -> Vec<Trained> {
    let start = Instant::now();
    let mut out: Vec<Option<Trained>> = members.iter().map(|_| None).collect();
    let mut model = None;
    let checks: Vec<Result<(), TrainError>> =
        members.iter().map(|m| check(m, &mut model)).collect();
    let px = model.map_or(1, |(m, _): Arch| m.input().pixels());
    let mut valid = Vec::new();
    // Every valid member's images, scaled to [0, 1], after the zero image of padding, and each
    // valid member's first row among them.
    let mut pixels = vec![0.0; px];
    let mut first = Vec::new();
    for (i, (m, checked)) in members.iter().zip(checks).enumerate() {
        let row = pixels.len() / px;
        match checked.and_then(|()| m.data.append_unit_images(&mut pixels)) {
            Ok(()) => {
                valid.push(i);
                first.push(row);
            }
            Err(e) => out[i] = Some(Err(e)),
        }
    }
    if let Some(model) = model {
        let cohort: Vec<&Member<'_>> = valid.iter().map(|&i| &members[i]).collect();
        let results =
            Cohort::new(model, conv, Mean::Batch, &cohort, pixels, first, device).train(device);
        for (&i, r) in valid.iter().zip(results) {
            out[i] = Some(r.map(|(params, mut report)| {
                report.seconds = start.elapsed().as_secs_f64();
                (params, report)
            }));
        }
    }
    out.into_iter()
        .map(|r| r.expect("every member has a result"))
        .collect()
}

/// The most samples one step of [`evaluate_cohort`] or [`gradient_cohort`] runs through its
/// stacked models together: bounds the device memory of LeNet-5's im2col (about 100 KB a
/// sample).
const EVAL_SAMPLES_PER_STEP: usize = 4096;

/// One model's gradient for [`gradient_cohort`]: where it is taken, the data, and how many
/// samples a step.
pub type GradientTask<'a> = (&'a Params, &'a LocalData, usize);

/// Each task's gradient of the mean cross-entropy over all its data, flat in [`ParamLayout`]
/// order, as [`crate::train::gradient`] computes it one model at a time (StoCFL's anchor
/// gradients): the models stacked, each its batch of samples a step beside as many other models
/// as `EVAL_SAMPLES_PER_STEP` allows; each sample's loss weighs 1/N of its model's N samples, and
/// the gradients are summed over the steps on the device and read once per group. The same
/// values up to float rounding (the sums run in another order). Nothing is updated.
///
/// A task with batch 0 gets [`TrainError::InvalidConfig`], without samples
/// [`TrainError::NoData`], with parameters that do not fit their model
/// [`TrainError::InvalidParams`], of another architecture than the first valid one
/// [`TrainError::InvalidConfig`], whose images cannot be read [`TrainError::Data`], with a
/// non-finite gradient [`TrainError::Diverged`]; the others are computed.
pub fn gradient_cohort(
    tasks: &[GradientTask<'_>],
    device: &Device,
    conv: Convolution,
) -> Vec<Result<Vec<f32>, TrainError>> {
    let mut out: Vec<Option<Result<Vec<f32>, TrainError>>> = tasks.iter().map(|_| None).collect();
    let mut model = None;
    let mut valid = Vec::new();
    for (t, &(params, data, batch)) in tasks.iter().enumerate() {
        let checked = if batch == 0 {
            Err(TrainError::InvalidConfig("batch size must be ≥ 1".into()))
        } else if data.is_empty() {
            Err(TrainError::NoData)
        } else {
            check_size(params)
                .and_then(|()| crate::train::check_input(params, data))
                .and_then(|()| check_architecture(params, &mut model))
        };
        match checked {
            Ok(()) => valid.push(t),
            Err(e) => out[t] = Some(Err(e)),
        }
    }
    // Each task as a member of one epoch (its steps' schedule and inputs); nothing is stepped.
    let members: Vec<Member<'_>> = tasks
        .iter()
        .map(|&(start, data, batch)| Member {
            start,
            data,
            cfg: TrainConfig {
                epochs: 1,
                batch_size: batch,
                lr: 0.0,
                momentum: 0.0,
                seed: 0,
                threads: 1,
            },
            prox: None,
        })
        .collect();
    if let Some(arch) = model {
        let model = arch.0;
        let widest = valid.iter().map(|&t| tasks[t].2).max().unwrap_or(1);
        for group in valid.chunks((EVAL_SAMPLES_PER_STEP / widest).max(1)) {
            let px = model.input().pixels();
            let mut pixels = vec![0.0; px];
            let mut cohort = Vec::new();
            let mut first = Vec::new();
            let mut indices = Vec::new();
            for &t in group {
                let row = pixels.len() / px;
                match tasks[t].1.append_unit_images(&mut pixels) {
                    Ok(()) => {
                        cohort.push(&members[t]);
                        first.push(row);
                        indices.push(t);
                    }
                    Err(e) => out[t] = Some(Err(e)),
                }
            }
            if cohort.is_empty() {
                continue;
            }
            let gradients = Cohort::new(arch, conv, Mean::Shard, &cohort, pixels, first, device)
                .gradients(device);
            for (t, g) in indices.into_iter().zip(gradients) {
                out[t] = Some(g);
            }
        }
    }
    out.into_iter()
        .map(|r| r.expect("every task has a result"))
        .collect()
}

/// Evaluates each `(model, data)` pair as [`crate::train::evaluate`] would, the models stacked
/// into batched forward passes on `device`: each model sees its own samples only, `batch` of them
/// a step, beside as many other models as `EVAL_SAMPLES_PER_STEP` (4 096 samples) allows. One report per pair,
/// in order: the same counts, the same predictions but for exact ties, the losses up to float
/// rounding. Each group of models sends its steps' rows at once and reads its predictions and
/// log-probabilities at once.
///
/// A pair whose parameters do not fit their model gets [`TrainError::InvalidParams`], one of
/// another architecture than the first valid one [`TrainError::InvalidConfig`], one whose images
/// cannot be read [`TrainError::Data`]; the others are evaluated.
pub fn evaluate_cohort(
    tasks: &[(&Params, &LocalData)],
    batch: usize,
    device: &Device,
    conv: Convolution,
) -> Vec<Result<EvalReport, TrainError>> {
    let mut out: Vec<Option<Result<EvalReport, TrainError>>> = tasks.iter().map(|_| None).collect();
    let mut model = None;
    let mut valid = Vec::new();
    for (t, (params, data)) in tasks.iter().enumerate() {
        let checked = check_size(params)
            .and_then(|()| crate::train::check_input(params, data))
            .and_then(|()| check_architecture(params, &mut model));
        match checked {
            Ok(()) => valid.push(t),
            Err(e) => out[t] = Some(Err(e)),
        }
    }
    if let Some((model, classes)) = model {
        let layout = ParamLayout::new(model, classes);
        let b = batch.max(1);
        for group in valid.chunks((EVAL_SAMPLES_PER_STEP / b).max(1)) {
            // The group's images after the zero image, and each pair's first row (None when its
            // images cannot be read: it then only pads).
            let px = model.input().pixels();
            let mut pixels = vec![0.0; px];
            let first: Vec<Option<usize>> = group
                .iter()
                .map(|&t| {
                    let row = pixels.len() / px;
                    tasks[t]
                        .1
                        .append_unit_images(&mut pixels)
                        .map(|()| row)
                        .map_err(|e| out[t] = Some(Err(e)))
                        .ok()
                })
                .collect();
            let reports = evaluate_group(
                group.iter().map(|&t| tasks[t]),
                &first,
                pixels,
                Batched {
                    model,
                    conv,
                    layout: &layout,
                    c: group.len(),
                    b,
                },
                device,
            );
            for ((&t, f), r) in group.iter().zip(&first).zip(reports) {
                if f.is_some() {
                    out[t] = Some(Ok(r));
                }
            }
        }
    }
    out.into_iter()
        .map(|r| r.expect("every pair has a report"))
        .collect()
}

/// One group of [`evaluate_cohort`]: `shape.c` pairs, pair i's images from row `first[i]` of
/// `pixels` (none when `None`). One report per pair.
fn evaluate_group<'p>(
    tasks: impl Iterator<Item = (&'p Params, &'p LocalData)>,
    first: &[Option<usize>],
    pixels: Vec<f32>,
    shape: Batched<'_>,
    device: &Device,
) -> Vec<EvalReport> {
    let tasks: Vec<_> = tasks.collect();
    let (c, b) = (shape.c, shape.b);
    let params: Vec<Tensor<2>> = shape
        .layout
        .entries
        .iter()
        .map(|e| {
            let flat: Vec<f32> = tasks
                .iter()
                .flat_map(|(p, _)| p.values[e.range()].iter().copied())
                .collect();
            Tensor::from_data(TensorData::new(flat, [c, e.len()]), device)
        })
        .collect();
    let px = shape.model.input().pixels();
    let rows = pixels.len() / px;
    let images = Tensor::<2>::from_data(TensorData::new(pixels, [rows, px]), device);
    let len = |i: usize| first[i].map_or(0, |_| tasks[i].1.len());
    let longest = (0..c).map(len).max().unwrap_or(0);
    let mut reports = vec![EvalReport::new(shape.layout.classes); c];
    if longest == 0 {
        // No empty tensor: some backends cannot allocate an empty buffer.
        return reports;
    }
    // Every step's rows sent at once; the predictions and log-probabilities read at once.
    let steps = longest.div_ceil(b);
    let mut rows = vec![0i64; steps * c * b];
    for (j, start) in (0..longest).step_by(b).enumerate() {
        for i in 0..c {
            for k in 0..b.min(len(i).saturating_sub(start)) {
                rows[j * c * b + shape.slot(i, k)] = (first[i].unwrap_or(0) + start + k) as i64;
            }
        }
    }
    let rows = Tensor::<2, Int>::from_data(TensorData::new(rows, [steps, c * b]), device);
    let mut preds = Vec::with_capacity(steps);
    let mut logps = Vec::with_capacity(steps);
    for j in 0..steps {
        let step_rows = rows.clone().slice(j..j + 1).reshape([c * b]);
        let logits = shape.forward(&params, shape.gather(&images, step_rows));
        preds.push(logits.clone().argmax(2));
        logps.push(log_softmax(logits, 2));
    }
    // `[steps·C, B, 1]` and `[steps·C, B, classes]`: step j, model i, sample k at (j·C + i)·B + k.
    let pred: Vec<i64> = Tensor::cat(preds, 0).into_data().iter::<i64>().collect();
    let logp: Vec<f32> = Tensor::cat(logps, 0).into_data().iter::<f32>().collect();
    for (j, start) in (0..longest).step_by(b).enumerate() {
        for (i, rep) in reports.iter_mut().enumerate() {
            for k in 0..b.min(len(i).saturating_sub(start)) {
                let at = (j * c + i) * b + k;
                let label = usize::from(tasks[i].1.labels[start + k]);
                let loss = -f64::from(logp[at * shape.layout.classes + label]);
                rep.loss_sum += loss;
                rep.loss_per_label[label] += loss;
                rep.total += 1;
                rep.total_per_label[label] += 1;
                if pred[at] == label as i64 {
                    rep.correct += 1;
                    rep.correct_per_label[label] += 1;
                }
            }
        }
    }
    reports
}

/// The checks of [`crate::train::train_local_prox`], and one architecture per cohort.
fn check(m: &Member<'_>, model: &mut Option<Arch>) -> Result<(), TrainError> {
    m.cfg.validate()?;
    check_size(m.start)?;
    if let Some(p) = &m.prox {
        p.validate(m.start)?;
    }
    crate::train::check_input(m.start, m.data)?;
    check_architecture(m.start, model)
}

/// [`TrainError::InvalidParams`] unless `params` has its model's size for some class count.
fn check_size(params: &Params) -> Result<(), TrainError> {
    if ParamLayout::classes_for(params.model, params.values.len()).is_some() {
        Ok(())
    } else {
        Err(TrainError::InvalidParams(ModelError::WrongSize {
            model: params.model,
            expected: ParamLayout::of(params.model).len(),
            got: params.values.len(),
        }))
    }
}

/// A cohort's architecture: the model and its class count.
type Arch = (ModelKind, usize);

/// One architecture per cohort: the first one seen sets it.
fn check_architecture(params: &Params, model: &mut Option<Arch>) -> Result<(), TrainError> {
    let arch = (params.model, params.classes());
    match model {
        Some(k) if *k != arch => Err(TrainError::InvalidConfig(format!(
            "a cohort holds one architecture: {} with {} classes beside {} with {}",
            arch.0, arch.1, k.0, k.1
        ))),
        Some(_) => Ok(()),
        None => {
            *model = Some(arch);
            Ok(())
        }
    }
}

/// A client's batches over all its epochs: the sample order of each epoch (the same shuffles as
/// [`crate::train::train_local_prox`]) cut into batches.
struct Schedule {
    /// Every epoch's shuffled order, one after the other.
    order: Vec<usize>,
    /// `(start in order, length, in the last epoch)` of each step.
    steps: Vec<(usize, usize, bool)>,
}

impl Schedule {
    fn of(len: usize, cfg: &TrainConfig) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let mut epoch: Vec<usize> = (0..len).collect();
        let mut order = Vec::with_capacity(cfg.epochs * len);
        let mut steps = Vec::new();
        for e in 0..cfg.epochs {
            epoch.shuffle(&mut rng);
            let base = order.len();
            order.extend_from_slice(&epoch);
            for (k, chunk) in epoch.chunks(cfg.batch_size).enumerate() {
                steps.push((base + k * cfg.batch_size, chunk.len(), e + 1 == cfg.epochs));
            }
        }
        Schedule { order, steps }
    }

    fn batch(&self, step: usize) -> Option<(&[usize], bool)> {
        self.steps
            .get(step)
            .map(|&(s, n, last)| (&self.order[s..s + n], last))
    }
}

/// What a member's per-sample losses are averaged over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mean {
    /// Its batch: each step minimises the batch's mean loss (training).
    Batch,
    /// All its samples: the steps' gradients add up to that of the mean loss over all of them
    /// ([`gradient_cohort`]).
    Shard,
}

/// The cohort's state: the members, their schedules, and the stacked parameters and velocities.
struct Cohort<'m, 'a> {
    model: ModelKind,
    conv: Convolution,
    mean: Mean,
    members: &'m [&'m Member<'a>],
    schedules: Vec<Schedule>,
    /// The widest batch of any member (the padded batch axis).
    batch: usize,
    /// Every member's images, scaled to `[0, 1]`, on the autodiff device (not tracked):
    /// `[1 + Σ n_c, 784]`, row 0 zeros, member i's sample s at row `first[i] + s`.
    images: Tensor<2>,
    /// Member i's first row in `images`.
    first: Vec<usize>,
    /// Per layout entry, `[C, n]` on the autodiff device, tracked.
    params: Vec<Tensor<2>>,
    /// Per layout entry, `[C, n]` on the plain device.
    velocity: Vec<Tensor<2>>,
    /// Per layout entry, the anchors `[C, n]` (plain device; zeros for members without a term),
    /// and μ/2 per member `[C, 1]`; `None` when no member has a proximal term.
    anchor: Option<(Vec<Tensor<2>>, Vec<f32>)>,
    layout: ParamLayout,
}

impl<'m, 'a> Cohort<'m, 'a> {
    /// `pixels`: the zero image, then every member's images in order (`LocalData::append_unit_images`), member
    /// i's from row `first[i]`.
    fn new(
        (model, classes): Arch,
        conv: Convolution,
        mean: Mean,
        members: &'m [&'m Member<'a>],
        pixels: Vec<f32>,
        first: Vec<usize>,
        device: &Device,
    ) -> Self {
        let layout = ParamLayout::new(model, classes);
        let ad = device.clone().autodiff();
        let c = members.len();
        // Row i of an entry: member i's slice of it (zeros where it has none).
        let stack = |values: &dyn Fn(usize) -> Option<&'a [f32]>, e: &crate::model::ParamEntry| {
            let mut flat = Vec::with_capacity(c * e.len());
            for i in 0..c {
                match values(i) {
                    Some(v) => flat.extend_from_slice(&v[e.range()]),
                    None => flat.extend(std::iter::repeat_n(0.0, e.len())),
                }
            }
            TensorData::new(flat, [c, e.len()])
        };
        let params = layout
            .entries
            .iter()
            .map(|e| {
                Tensor::<2>::from_data(stack(&|i| Some(members[i].start.values.as_slice()), e), &ad)
                    .require_grad()
            })
            .collect();
        let velocity = layout
            .entries
            .iter()
            .map(|e| Tensor::<2>::zeros([c, e.len()], device))
            .collect();
        let prox: Vec<Option<Proximal<'a>>> = members
            .iter()
            .map(|m| m.prox.filter(|p| p.mu > 0.0))
            .collect();
        let anchor = prox.iter().any(Option::is_some).then(|| {
            let tensors = layout
                .entries
                .iter()
                .map(|e| {
                    Tensor::<2>::from_data(
                        stack(&|i| prox[i].map(|p| p.anchor.values.as_slice()), e),
                        device,
                    )
                })
                .collect();
            let half_mu = prox
                .iter()
                .map(|p| p.map_or(0.0, |p| (p.mu / 2.0) as f32))
                .collect();
            (tensors, half_mu)
        });
        let px = model.input().pixels();
        let rows = pixels.len() / px;
        let images = Tensor::<2>::from_data(TensorData::new(pixels, [rows, px]), &ad);
        Cohort {
            model,
            conv,
            mean,
            members,
            images,
            first,
            schedules: members
                .iter()
                .map(|m| Schedule::of(m.data.len(), &m.cfg))
                .collect(),
            batch: members.iter().map(|m| m.cfg.batch_size).max().unwrap_or(1),
            params,
            velocity,
            anchor,
            layout,
        }
    }

    /// The steps of the longest schedule.
    fn steps(&self) -> usize {
        self.schedules
            .iter()
            .map(|s| s.steps.len())
            .max()
            .unwrap_or(0)
    }

    /// Runs every step; each member's trained model and report.
    fn train(mut self, device: &Device) -> Vec<Trained> {
        let (c, steps) = (self.members.len(), self.steps());
        let mut loss_sum = Tensor::<2>::zeros([c, 1], device);
        for first in (0..steps).step_by(STEPS_PER_UPLOAD) {
            let block = first..steps.min(first + STEPS_PER_UPLOAD);
            let inputs = self.inputs(block.clone(), device);
            for k in 0..block.len() {
                let step = inputs.step(k);
                let nll = self.nll(step.rows, step.labels);
                let mut objective = (nll.clone() * step.weights).sum();
                if let (Some((anchor, _)), Some(coef)) = (&self.anchor, step.coef) {
                    let term = self
                        .params
                        .iter()
                        .zip(anchor)
                        .map(|(p, a)| {
                            let d = p.clone() - a.clone().autodiff();
                            (d.clone() * d).sum_dim(1)
                        })
                        .reduce(|x, y| x + y)
                        .expect("every model has parameters");
                    objective = objective + (term * coef).sum();
                }
                let grads = objective.backward();
                loss_sum = loss_sum + (nll.inner() * step.last).sum_dim(1);
                self.step(&grads, step.momentum, step.lr, device);
            }
        }
        self.finish(loss_sum)
    }

    /// Each member's gradient of its mean loss over all its samples (built with [`Mean::Shard`]):
    /// every step's gradients summed on the device, read once; nothing is updated.
    fn gradients(self, device: &Device) -> Vec<Result<Vec<f32>, TrainError>> {
        let (c, steps) = (self.members.len(), self.steps());
        let mut sums: Vec<Tensor<2>> = self
            .layout
            .entries
            .iter()
            .map(|e| Tensor::<2>::zeros([c, e.len()], device))
            .collect();
        for first in (0..steps).step_by(STEPS_PER_UPLOAD) {
            let block = first..steps.min(first + STEPS_PER_UPLOAD);
            let inputs = self.inputs(block.clone(), device);
            for k in 0..block.len() {
                let step = inputs.step(k);
                let grads = (self.nll(step.rows, step.labels) * step.weights)
                    .sum()
                    .backward();
                for (sum, p) in sums.iter_mut().zip(&self.params) {
                    if let Some(g) = p.grad(&grads) {
                        *sum = sum.clone() + g;
                    }
                }
            }
        }
        unstack(c, sums)
            .into_iter()
            .map(|g| {
                if g.iter().all(|v| v.is_finite()) {
                    Ok(g)
                } else {
                    Err(TrainError::Diverged)
                }
            })
            .collect()
    }

    /// Each slot's negative log-likelihood `[C, B]`: the samples of `rows` (a step's, by
    /// [`Batched::slot`]) through the stacked models, at their `labels` (`[C, B, 1]`).
    fn nll(&self, rows: Tensor<1, Int>, labels: Tensor<3, Int>) -> Tensor<2> {
        let shape = self.shape();
        let logits = shape.forward(&self.params, shape.gather(&self.images, rows));
        log_softmax(logits, 2)
            .gather(2, labels)
            .neg()
            .reshape([self.members.len(), self.batch])
    }

    /// The inputs of `steps`, every member's batches padded to the cohort's batch width, sent to
    /// the device at once.
    fn inputs(&self, steps: std::ops::Range<usize>, device: &Device) -> StepInputs {
        let (c, b, k) = (self.members.len(), self.batch, steps.len());
        let ad = device.clone().autodiff();
        let shape = self.shape();
        let mut rows = vec![0i64; k * c * b];
        let mut labels = vec![0i64; k * c * b];
        let mut weights = vec![0.0f32; k * c * b];
        let mut last = vec![0.0f32; k * c * b];
        let mut momentum = vec![1.0f32; k * c];
        let mut lr = vec![0.0f32; k * c];
        let mut coef = vec![0.0f32; k * c];
        for (j, t) in steps.enumerate() {
            let at = |i: usize, s: usize| (j * c + i) * b + s;
            for (i, (m, s)) in self.members.iter().zip(&self.schedules).enumerate() {
                let Some((idx, in_last_epoch)) = s.batch(t) else {
                    continue;
                };
                momentum[j * c + i] = m.cfg.momentum as f32;
                lr[j * c + i] = m.cfg.lr as f32;
                if let Some((_, half_mu)) = &self.anchor {
                    coef[j * c + i] = half_mu[i];
                }
                let w = 1.0
                    / match self.mean {
                        Mean::Batch => idx.len(),
                        Mean::Shard => m.data.len(),
                    } as f32;
                for (s, &sample) in idx.iter().enumerate() {
                    rows[j * c * b + shape.slot(i, s)] = (self.first[i] + sample) as i64;
                    labels[at(i, s)] = i64::from(m.data.labels[sample]);
                    weights[at(i, s)] = w;
                    last[at(i, s)] = if in_last_epoch { 1.0 } else { 0.0 };
                }
            }
        }
        let per_sample = [k, c * b];
        let per_member = [k, c];
        StepInputs {
            shape: (c, b),
            rows: Tensor::from_data(TensorData::new(rows, per_sample), &ad),
            labels: Tensor::from_data(TensorData::new(labels, per_sample), &ad),
            weights: Tensor::from_data(TensorData::new(weights, per_sample), &ad),
            last: Tensor::from_data(TensorData::new(last, per_sample), device),
            momentum: Tensor::from_data(TensorData::new(momentum, per_member), device),
            lr: Tensor::from_data(TensorData::new(lr, per_member), device),
            coef: self
                .anchor
                .is_some()
                .then(|| Tensor::from_data(TensorData::new(coef, per_member), &ad)),
        }
    }

    /// The shape of this cohort's batched computation.
    fn shape(&self) -> Batched<'_> {
        Batched {
            model: self.model,
            conv: self.conv,
            layout: &self.layout,
            c: self.members.len(),
            b: self.batch,
        }
    }

    /// One SGD-with-momentum step of every member, `momentum` and `lr` `[C, 1]`: members without
    /// a batch at this step keep their parameters and velocities bit for bit (μ = 1 and lr = 0
    /// on a zero gradient).
    fn step(&mut self, grads: &Gradients, momentum: Tensor<2>, lr: Tensor<2>, device: &Device) {
        for (p, v) in self.params.iter_mut().zip(self.velocity.iter_mut()) {
            let g = p
                .grad(grads)
                .unwrap_or_else(|| Tensor::<2>::zeros(p.shape(), device));
            *v = v.clone() * momentum.clone() + g;
            let theta = p.clone().inner() - v.clone() * lr.clone();
            *p = Tensor::from_inner(theta).require_grad();
        }
    }

    /// Each member's parameters and report, or [`TrainError::Diverged`].
    fn finish(self, loss_sum: Tensor<2>) -> Vec<Trained> {
        let c = self.members.len();
        let losses: Vec<f32> = loss_sum.into_data().iter::<f32>().collect();
        let values = unstack(c, self.params.into_iter().map(|p| p.inner()));
        self.members
            .iter()
            .zip(values)
            .zip(losses)
            .zip(&self.schedules)
            .map(|(((m, values), loss), s)| {
                let last_epoch_loss = f64::from(loss) / m.data.len().max(1) as f64;
                if !last_epoch_loss.is_finite() || values.iter().any(|v| !v.is_finite()) {
                    return Err(TrainError::Diverged);
                }
                Ok((
                    Params {
                        model: self.model,
                        values,
                    },
                    TrainReport {
                        samples: m.cfg.epochs * m.data.len(),
                        steps: s.steps.len(),
                        last_epoch_loss,
                        seconds: 0.0,
                    },
                ))
            })
            .collect()
    }
}

/// Each of the `c` models' values, flat in layout order, from stacked tensors `[C, n]` (one per
/// layout entry, in order).
fn unstack(c: usize, stacked: impl IntoIterator<Item = Tensor<2>>) -> Vec<Vec<f32>> {
    let mut values: Vec<Vec<f32>> = (0..c).map(|_| Vec::new()).collect();
    for t in stacked {
        let flat: Vec<f32> = t.into_data().iter::<f32>().collect();
        let n = flat.len() / c.max(1);
        for (i, v) in values.iter_mut().enumerate() {
            v.extend_from_slice(&flat[i * n..(i + 1) * n]);
        }
    }
    values
}

/// The shape of one batched computation: C models of one architecture, B samples each per step.
struct Batched<'l> {
    model: ModelKind,
    conv: Convolution,
    layout: &'l ParamLayout,
    c: usize,
    b: usize,
}

impl Batched<'_> {
    /// Whether LeNet-5 runs its convolutions grouped (its input is then `[B, C·in, H, W]`, the
    /// models as channels; else model-major). ResNet-9 always does: its 3 × 3 blocks are grouped
    /// convolutions and GroupNorms over the clients' channels, whatever [`Convolution`] says.
    fn grouped(&self) -> bool {
        (self.model == ModelKind::LeNet5 && self.conv == Convolution::Grouped)
            || self.model == ModelKind::ResNet9
    }

    /// The slot of model i's k-th sample in a step's rows.
    fn slot(&self, i: usize, k: usize) -> usize {
        if self.grouped() {
            k * self.c + i
        } else {
            i * self.b + k
        }
    }

    /// The step's images, rows `rows` (`[C·B]`, by [`Batched::slot`]) of `images` gathered on
    /// the device: `[B, C·in, H, W]` for the grouped convolution (client i's `in` channels are
    /// group i), else `[C·B, in, H, W]`, client-major.
    fn gather(&self, images: &Tensor<2>, rows: Tensor<1, Int>) -> Tensor<4> {
        let (c, b) = (self.c, self.b);
        let s = self.model.input();
        let shape = if self.grouped() {
            [b, c * s.channels, s.height, s.width]
        } else {
            [c * b, s.channels, s.height, s.width]
        };
        images.clone().select(0, rows).reshape(shape)
    }

    /// Logits `[C, B, classes]` of the stacked parameters `p` (per layout entry, `[C, n]`).
    fn forward(&self, p: &[Tensor<2>], x: Tensor<4>) -> Tensor<3> {
        let (c, b) = (self.c, self.b);
        let shape = |k: usize| self.layout.entries[k].shape.clone();
        let linear = |x: Tensor<3>, k: usize| {
            let s = shape(k);
            let w = p[k].clone().reshape([c, s[0], s[1]]);
            let bias = p[k + 1].clone().reshape([c, 1, s[1]]);
            x.matmul(w) + bias
        };
        match self.model {
            ModelKind::LeNet5 | ModelKind::LeNet5Rgb if self.grouped() => {
                let conv = |x: Tensor<4>, k: usize| {
                    let s = shape(k);
                    let w = p[k].clone().reshape([c * s[0], s[1], s[2], s[3]]);
                    let bias = p[k + 1].clone().reshape([c * s[0]]);
                    let y = conv2d(
                        x,
                        w,
                        Some(bias),
                        ConvOptions::new([1, 1], [0, 0], [1, 1], c),
                    );
                    max_pool2d(relu(y), MaxPoolOptions::new([2, 2]))
                };
                let x = conv(conv(x, 0), 2);
                let x: Tensor<3> = x.reshape([b, c, shape(4)[0]]).swap_dims(0, 1);
                lenet_head(x, &linear)
            }
            ModelKind::ResNet9 => {
                // `[B, C·ch, H, W]`: each block one convolution grouped by client and one
                // GroupNorm of C·32 groups (client i's channels are consecutive, so each group
                // is one of its own), each client's scale and shift per channel.
                let block = |x: Tensor<4>, i: usize| {
                    let k = 4 * i;
                    let s = shape(k);
                    let flat = |t: &Tensor<2>| t.clone().reshape([c * s[0]]);
                    let w = p[k].clone().reshape([c * s[0], s[1], s[2], s[3]]);
                    let options = ConvOptions::new([1, 1], [1, 1], [1, 1], c);
                    let y = conv2d(x, w, Some(flat(&p[k + 1])), options);
                    let groups = c * crate::model::RESNET9_GROUPS;
                    let y = relu(group_norm(y, flat(&p[k + 2]), flat(&p[k + 3]), groups));
                    if RESNET9_POOLED[i] {
                        max_pool2d(y, MaxPoolOptions::new([2, 2]))
                    } else {
                        y
                    }
                };
                let x = block(block(x, 0), 1);
                let x = block(block(x.clone(), 2), 3) + x;
                let x = block(block(x, 4), 5);
                let x = block(block(x.clone(), 6), 7) + x;
                let x = max_pool2d(x, MaxPoolOptions::new([4, 4]));
                let fc = 4 * crate::model::RESNET9_BLOCKS.len();
                let x: Tensor<3> = x.reshape([b, c, shape(fc)[0]]).swap_dims(0, 1);
                linear(x, fc)
            }
            ModelKind::Mlp => {
                let x: Tensor<3> = x.reshape([c, b, self.model.input().pixels()]);
                linear(relu(linear(x, 0)), 2)
            }
            _ => {
                // `[C·B, in, H, W]`: each client's patches `[C, B·L, in·25]`, in the weight's
                // `(in, kh, kw)` order, times its weight `[C, in·25, out]`, then ReLU and pooling.
                let conv = |x: Tensor<4>, k: usize, pad: usize| {
                    let s = shape(k);
                    let (out, patch) = (s[0], s[1] * s[2] * s[3]);
                    let [_, _, h, w] = x.dims();
                    let (ho, wo) = (h + 2 * pad + 1 - s[2], w + 2 * pad + 1 - s[3]);
                    let options = UnfoldOptions::new([1, 1], [pad, pad], [1, 1]);
                    let cols = unfold4d(x, [s[2], s[3]], options)
                        .reshape([c, b, patch, ho * wo])
                        .swap_dims(2, 3)
                        .reshape([c, b * ho * wo, patch]);
                    let w = p[k].clone().reshape([c, out, patch]).swap_dims(1, 2);
                    let bias = p[k + 1].clone().reshape([c, 1, out]);
                    let y = relu(cols.matmul(w) + bias)
                        .reshape([c * b, ho, wo, out])
                        .permute([0, 3, 1, 2]);
                    max_pool2d(y, MaxPoolOptions::new([2, 2]))
                };
                let x = conv(conv(x, 0, self.model.conv1_padding()), 2, 0);
                let x = x.reshape([c, b, shape(4)[0]]);
                match self.model {
                    ModelKind::LeNet5 | ModelKind::LeNet5Rgb => lenet_head(x, &linear),
                    // AdaCFL's CNNs: one linear layer.
                    _ => linear(x, 4),
                }
            }
        }
    }
}

/// LeNet-5's three linear layers over the flattened features `[C, B, 256]`.
fn lenet_head(x: Tensor<3>, linear: &dyn Fn(Tensor<3>, usize) -> Tensor<3>) -> Tensor<3> {
    let x = relu(linear(x, 4));
    let x = relu(linear(x, 6));
    linear(x, 8)
}

/// How many steps' inputs a cohort sends to the device at once ([`StepInputs`]): a step then
/// sends nothing (libtorch waits for the GPU at every copy from the host), and the block stays
/// small (24 bytes per sample slot: 2.4 MB for 100 members at batch 10).
const STEPS_PER_UPLOAD: usize = 100;

/// The inputs of a run of consecutive steps on the device, each step's a row, padded to the
/// cohort's batch width `B`.
struct StepInputs {
    /// `(C, B)`.
    shape: (usize, usize),
    /// `[steps, C·B]`: the row of `Cohort::images` in each slot of the batch (0, the zero image,
    /// on padding), in the model's input order ([`Batched::slot`]). Autodiff device.
    rows: Tensor<2, Int>,
    /// `[steps, C·B]`, client-major, padded samples labelled 0. Autodiff device.
    labels: Tensor<2, Int>,
    /// `[steps, C·B]`: 1 / (the member's batch length) on its samples, 0 on padding. Autodiff
    /// device.
    weights: Tensor<2>,
    /// `[steps, C·B]`: 1 on the samples of a member's last epoch (its reported loss), else 0.
    last: Tensor<2>,
    /// `[steps, C]`: each member's momentum, 1 where it has no batch.
    momentum: Tensor<2>,
    /// `[steps, C]`: each member's learning rate, 0 where it has no batch.
    lr: Tensor<2>,
    /// `[steps, C]`: μ/2 of each member with a batch (0 without a proximal term), when any
    /// member has one. Autodiff device.
    coef: Option<Tensor<2>>,
}

/// One step's inputs, sliced from [`StepInputs`] on the device.
struct StepTensors {
    rows: Tensor<1, Int>,
    /// `[C, B, 1]`.
    labels: Tensor<3, Int>,
    /// `[C, B]`.
    weights: Tensor<2>,
    /// `[C, B]`.
    last: Tensor<2>,
    /// `[C, 1]`.
    momentum: Tensor<2>,
    /// `[C, 1]`.
    lr: Tensor<2>,
    /// `[C, 1]`.
    coef: Option<Tensor<2>>,
}

impl StepInputs {
    /// Step `k` of the block.
    fn step(&self, k: usize) -> StepTensors {
        let (c, b) = self.shape;
        let row = |t: &Tensor<2>| t.clone().slice(k..k + 1);
        let column = |t: &Tensor<2>| row(t).reshape([c, 1]);
        StepTensors {
            rows: self.rows.clone().slice(k..k + 1).reshape([c * b]),
            labels: self.labels.clone().slice(k..k + 1).reshape([c, b, 1]),
            weights: row(&self.weights).reshape([c, b]),
            last: row(&self.last).reshape([c, b]),
            momentum: column(&self.momentum),
            lr: column(&self.lr),
            coef: self.coef.as_ref().map(column),
        }
    }
}
