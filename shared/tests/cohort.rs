//! Cohort training against independent truth: each client trained alone by
//! [`train_local_prox`] (today's per-client path). A client trained in a cohort must end with
//! the same model (1e-5 relative) and report, whatever the others do: unequal shards, short last
//! batches, other epoch counts, learning rates, momenta, seeds and batch sizes, proximal terms on
//! some members only, and members that fail their checks.
//!
//! The main case and the one past a block of steps run on flex (`cpu`);
//! `EDGECFL_TEST_COHORT_DEVICE` names another device for them (a binary built with that
//! backend's feature), e.g. on libtorch's CPU or a GPU:
//!
//! ```text
//! EDGECFL_TEST_COHORT_DEVICE=tch LIBTORCH_USE_PYTORCH=1 cargo test -p edgecfl-shared --features tch --test suite cohort::
//! EDGECFL_TEST_COHORT_DEVICE=vulkan cargo test -p edgecfl-shared --features vulkan --test suite cohort::
//! ```

use crate::common;

use burn::prelude::Device;
use edgecfl_shared::cohort::{
    Convolution, GradientTask, Member, evaluate_cohort, gradient_cohort, train_cohort,
};
use edgecfl_shared::data::fmnist::FashionMnist;
use edgecfl_shared::data::spill::SpillFile;
use edgecfl_shared::model::{ModelKind, Params};
use edgecfl_shared::train::{
    LocalData, Proximal, TrainConfig, TrainError, evaluate, gradient, train_local_prox,
};

fn local(n: usize, offset: usize) -> LocalData {
    let data = FashionMnist::bundled().unwrap();
    let idx: Vec<usize> = (offset..offset + n).collect();
    LocalData::from_dataset(&data.train, &idx, 0)
}

/// `n` training samples from `offset` for `model`: Fashion-MNIST's images, or for a colour model
/// (3×32×32) those images framed and coloured ([`common::grey28_to_rgb32`]).
fn local_for(model: ModelKind, n: usize, offset: usize) -> LocalData {
    let grey = local(n, offset);
    let shape = model.input();
    if shape == grey.shape() {
        return grey;
    }
    let px = grey.pixels().unwrap();
    let mut rgb = Vec::with_capacity(n * shape.pixels());
    for img in px.chunks_exact(28 * 28) {
        common::grey28_to_rgb32(img, &mut rgb);
    }
    LocalData::with_shape(shape, rgb, grey.labels.clone())
}

fn cfg(epochs: usize, batch_size: usize, lr: f64, momentum: f64, seed: u64) -> TrainConfig {
    TrainConfig {
        epochs,
        batch_size,
        lr,
        momentum,
        seed,
        threads: 1,
    }
}

/// max |a − b| / max(|b|_∞, 1e-3): the relative difference of two parameter vectors.
fn rel_diff(a: &Params, b: &Params) -> f32 {
    let scale = b.values.iter().fold(1e-3f32, |m, v| m.max(v.abs()));
    a.values
        .iter()
        .zip(&b.values)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max)
        / scale
}

/// `data`'s labels over a scratch file that holds only its first 5 images (a disk that filled
/// up): reading the others fails.
fn cut_short(data: &LocalData) -> LocalData {
    let file = SpillFile::create(&std::env::temp_dir()).unwrap();
    let mut five = Vec::new();
    data.read_images(0, 5, &mut five).unwrap();
    file.write_at(&five, 0).unwrap();
    LocalData::spilled(file, data.shape(), data.labels.clone(), 0, 0)
}

/// The ways a cohort computes `model`'s convolutions: both for LeNet-5, the one model with a
/// grouped path; the others always run im2col (`Batched::grouped` in `shared/src/cohort.rs`),
/// so the second would test the same path again (CI time).
fn convolutions(model: ModelKind) -> &'static [Convolution] {
    match model {
        ModelKind::LeNet5 => &[Convolution::Grouped, Convolution::Im2col],
        // Always grouped, whatever it is told.
        ModelKind::ResNet9 => &[Convolution::Grouped],
        _ => &[Convolution::Im2col],
    }
}

/// Each member trained in one cohort equals it trained alone, whichever way the cohort computes
/// LeNet-5's convolutions.
fn check_against_alone(members: &[Member<'_>], device: &Device) {
    for &conv in convolutions(members[0].start.model) {
        check_against_alone_with(members, device, conv);
    }
}

fn check_against_alone_with(members: &[Member<'_>], device: &Device, conv: Convolution) {
    let cohort = train_cohort(members, device, conv);
    assert_eq!(cohort.len(), members.len());
    for (i, (m, got)) in members.iter().zip(cohort).enumerate() {
        let alone = train_local_prox(m.start, m.data, &m.cfg, m.prox, device);
        match (got, alone) {
            (Ok((p, r)), Ok((q, s))) => {
                assert_eq!(p.values.len(), q.values.len());
                let d = rel_diff(&p, &q);
                assert!(d < 1e-5, "{conv:?}, member {i}: relative difference {d}");
                if !m.data.is_empty() {
                    assert_ne!(p.values, m.start.values, "member {i} did not train");
                }
                assert_eq!((r.steps, r.samples), (s.steps, s.samples), "member {i}");
                let dl = (r.last_epoch_loss - s.last_epoch_loss).abs();
                assert!(
                    dl < 1e-5 * s.last_epoch_loss.max(1.0),
                    "member {i}: loss {dl}"
                );
            }
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "member {i}"),
            (a, b) => panic!("member {i}: cohort {a:?}, alone {b:?}"),
        }
    }
}

#[test]
fn a_cohort_trains_each_client_as_it_is_trained_alone() {
    let (backend, device) = common::device_from_env("EDGECFL_TEST_COHORT_DEVICE", "cpu");
    eprintln!("cohort against alone on {backend}");
    // ResNet-9 (6.6 M parameters, 7 minutes of these cases on two cores) has its own, smaller
    // case below.
    for model in ModelKind::ALL
        .into_iter()
        .filter(|&m| m != ModelKind::ResNet9)
    {
        // Unequal shards, each with a short last batch (23 = 2·10 + 3, 37, 8 < one batch, 50).
        let data = [
            local_for(model, 23, 0),
            local_for(model, 37, 100),
            local_for(model, 8, 200),
            local_for(model, 50, 300),
        ];
        let starts: Vec<Params> = (0..4).map(|i| Params::init(model, 10 + i)).collect();
        let anchor = Params::init(model, 99);
        let members = [
            Member {
                start: &starts[0],
                data: &data[0],
                cfg: cfg(2, 10, 0.01, 0.5, 1),
                prox: None,
            },
            // Proximal toward another model, its own lr, momentum, batch and epochs.
            Member {
                start: &starts[1],
                data: &data[1],
                cfg: cfg(1, 16, 0.05, 0.9, 2),
                prox: Some(Proximal {
                    anchor: &anchor,
                    mu: 0.1,
                }),
            },
            // Fewer samples than one batch, no momentum, more epochs than the others.
            Member {
                start: &starts[2],
                data: &data[2],
                cfg: cfg(3, 10, 0.02, 0.0, 3),
                prox: None,
            },
            // Proximal toward its own start (FedProx).
            Member {
                start: &starts[3],
                data: &data[3],
                cfg: cfg(2, 10, 0.01, 0.5, 4),
                prox: Some(Proximal {
                    anchor: &starts[3],
                    mu: 0.01,
                }),
            },
        ];
        check_against_alone(&members, &device);
        // One member alone in its cohort, and the cohort in another order.
        check_against_alone(&members[2..3], &device);
        let reversed: Vec<Member<'_>> = members.iter().rev().copied().collect();
        check_against_alone(&reversed, &device);
    }
}

/// A cohort sends its steps' inputs to the device 100 steps at a time: members whose trainings
/// run past one such block (205 steps), end inside the second (120) or within the first (15) are
/// each trained as alone. On the device `EDGECFL_TEST_COHORT_DEVICE` names, as the main case.
#[test]
fn a_cohort_longer_than_one_block_of_steps_trains_each_client_as_alone() {
    let (_, device) = common::device_from_env("EDGECFL_TEST_COHORT_DEVICE", "cpu");
    for model in [ModelKind::LeNet5, ModelKind::Mlp] {
        let data = [local(205, 0), local(60, 300), local(23, 400)];
        let starts: Vec<Params> = (0..3).map(|i| Params::init(model, 20 + i)).collect();
        let members = [
            Member {
                start: &starts[0],
                data: &data[0],
                cfg: cfg(1, 1, 0.005, 0.5, 5),
                prox: None,
            },
            Member {
                start: &starts[1],
                data: &data[1],
                cfg: cfg(2, 1, 0.005, 0.9, 6),
                prox: Some(Proximal {
                    anchor: &starts[1],
                    mu: 0.05,
                }),
            },
            Member {
                start: &starts[2],
                data: &data[2],
                cfg: cfg(5, 10, 0.01, 0.0, 7),
                prox: None,
            },
        ];
        check_against_alone(&members, &device);
    }
}

#[test]
fn a_member_that_fails_its_checks_gets_its_error_and_the_others_train() {
    let device = Device::default();
    let data = local(20, 0);
    let good = Params::init(ModelKind::Mlp, 1);
    let short = Params {
        model: ModelKind::Mlp,
        values: vec![0.0; 7],
    };
    let lenet = Params::init(ModelKind::LeNet5, 2);
    let members = [
        Member {
            start: &good,
            data: &data,
            cfg: cfg(1, 10, 0.01, 0.5, 1),
            prox: None,
        },
        Member {
            start: &short,
            data: &data,
            cfg: cfg(1, 10, 0.01, 0.5, 1),
            prox: None,
        },
        Member {
            start: &good,
            data: &data,
            cfg: cfg(1, 0, 0.01, 0.5, 1),
            prox: None,
        },
        Member {
            start: &lenet,
            data: &data,
            cfg: cfg(1, 10, 0.01, 0.5, 1),
            prox: None,
        },
    ];
    let got = train_cohort(&members, &device, Convolution::Grouped);
    assert!(got[0].is_ok());
    assert!(matches!(got[1], Err(TrainError::InvalidParams(_))));
    assert!(matches!(got[2], Err(TrainError::InvalidConfig(_))));
    let Err(TrainError::InvalidConfig(why)) = &got[3] else {
        panic!("{:?}", got[3]);
    };
    assert!(why.contains("one architecture"), "{why}");
    // The valid member is trained as alone.
    check_against_alone(&members[..1], &device);
}

#[test]
fn a_member_whose_images_cannot_be_read_gets_its_error_and_the_others_train() {
    let device = Device::default();
    let data = local(20, 0);
    let short = cut_short(&data);
    let start = Params::init(ModelKind::Mlp, 1);
    let member = |data| Member {
        start: &start,
        data,
        cfg: cfg(1, 10, 0.01, 0.5, 1),
        prox: None,
    };
    let members = [member(&data), member(&short), member(&data)];
    let got = train_cohort(&members, &device, Convolution::Grouped);
    let Err(TrainError::Data(why)) = &got[1] else {
        panic!("{:?}", got[1]);
    };
    assert!(!why.is_empty());
    check_against_alone(&[members[0], members[2]], &device);
    assert_eq!(got[0].as_ref().unwrap().0, got[2].as_ref().unwrap().0);
}

#[test]
fn a_diverging_member_is_reported_and_does_not_touch_the_others() {
    let device = Device::default();
    let data = local(30, 0);
    let start = Params::init(ModelKind::Mlp, 3);
    let members = [
        Member {
            start: &start,
            data: &data,
            cfg: cfg(2, 10, 0.01, 0.5, 1),
            prox: None,
        },
        Member {
            start: &start,
            data: &data,
            cfg: cfg(2, 10, 1e30, 0.5, 1),
            prox: None,
        },
    ];
    let got = train_cohort(&members, &device, Convolution::Grouped);
    assert!(matches!(got[1], Err(TrainError::Diverged)), "{:?}", got[1]);
    check_against_alone(&members[..1], &device);
    let (alone, _) = train_local_prox(&start, &data, &members[0].cfg, None, &device).unwrap();
    let (p, _) = got[0].as_ref().unwrap();
    assert!(rel_diff(p, &alone) < 1e-5);
}

#[test]
fn empty_data_leaves_the_start_and_a_zero_loss() {
    let device = Device::default();
    let empty = LocalData::default();
    let data = local(12, 0);
    let start = Params::init(ModelKind::LeNet5, 5);
    let members = [
        Member {
            start: &start,
            data: &empty,
            cfg: cfg(2, 10, 0.01, 0.5, 1),
            prox: None,
        },
        Member {
            start: &start,
            data: &data,
            cfg: cfg(1, 10, 0.01, 0.5, 1),
            prox: None,
        },
    ];
    let got = train_cohort(&members, &device, Convolution::Grouped);
    let (p, r) = got[0].as_ref().unwrap();
    assert_eq!(p.values, start.values);
    assert_eq!((r.steps, r.last_epoch_loss), (0, 0.0));
    check_against_alone(&members, &device);
}

/// Every method run in process with its trainings in cohorts ends as it ends with each client
/// trained alone: the same clusters, and every cluster model equal up to float rounding (the
/// cohorts' sums run in another order; 1e-4 relative after the rounds' averaging).
#[test]
fn every_method_in_cohorts_ends_as_with_each_client_alone() {
    use edgecfl_shared::algorithms::{self, Algorithm, MethodConfig};
    use edgecfl_shared::data::partition::{PartitionSpec, partition};
    use edgecfl_shared::federation::{FederationConfig, Quiet, RunContext};
    use edgecfl_shared::sim::SimPool;
    use edgecfl_shared::train::Backend;

    let data = FashionMnist::bundled().unwrap();
    let spec: PartitionSpec = "groups:012-34-56-789".parse().unwrap();
    let part = partition(&spec, &data.train.labels, 8, 3).unwrap();
    for algorithm in Algorithm::all() {
        let cfg = MethodConfig::new(
            algorithm,
            FederationConfig {
                model: if algorithm == Algorithm::MtHfl {
                    ModelKind::Mlp
                } else {
                    ModelKind::LeNet5
                },
                rounds: 2,
                frac: 0.5,
                epochs: 1,
                seed: 3,
                clusters: Some(3),
                ..FederationConfig::default()
            },
        );
        let run = |cohort: usize| {
            let mut pool = SimPool::new(&data, &part, Backend::Flex)
                .unwrap()
                .with_cohort(cohort);
            algorithms::run(
                &cfg,
                &mut pool,
                &RunContext::of_partition(&part),
                &mut Quiet,
            )
            .unwrap_or_else(|e| panic!("{algorithm}, cohort {cohort}: {e}"))
        };
        let (alone, cohorts) = (run(1), run(3));
        assert_eq!(alone.assignment, cohorts.assignment, "{algorithm}");
        assert_eq!(alone.models.len(), cohorts.models.len(), "{algorithm}");
        for (a, c) in alone.models.iter().zip(&cohorts.models) {
            let d = rel_diff(c, a);
            assert!(d < 1e-4, "{algorithm}: relative difference {d}");
        }
        let (fa, fc) = (alone.final_accuracy(), cohorts.final_accuracy());
        assert!(
            (fa.unwrap_or(0.0) - fc.unwrap_or(0.0)).abs() < 0.01,
            "{algorithm}: accuracy {fa:?} alone, {fc:?} in cohorts"
        );
    }
}

#[test]
fn a_diverging_client_fails_a_run_in_cohorts_as_it_does_alone() {
    use edgecfl_shared::algorithms::{self, Algorithm, MethodConfig};
    use edgecfl_shared::data::partition::{PartitionSpec, partition};
    use edgecfl_shared::federation::{FederationConfig, Quiet, RunContext};
    use edgecfl_shared::sim::SimPool;
    use edgecfl_shared::train::Backend;

    let data = FashionMnist::bundled().unwrap();
    let spec: PartitionSpec = "label:2".parse().unwrap();
    let part = partition(&spec, &data.train.labels, 4, 1).unwrap();
    let cfg = MethodConfig::new(
        Algorithm::FedAvg,
        FederationConfig {
            rounds: 1,
            frac: 1.0,
            epochs: 1,
            lr: 1e30,
            seed: 1,
            ..FederationConfig::default()
        },
    );
    let run = |cohort: usize| {
        let mut pool = SimPool::new(&data, &part, Backend::Flex)
            .unwrap()
            .with_cohort(cohort);
        let ctx = RunContext::of_partition(&part);
        match algorithms::run(&cfg, &mut pool, &ctx, &mut Quiet) {
            Ok(_) => panic!("cohort {cohort}: a run at lr 1e30 ended"),
            Err(e) => e.to_string(),
        }
    };
    let alone = run(1);
    assert!(alone.contains("diverged"), "{alone}");
    assert_eq!(run(4), alone);
}

/// A batched evaluation reports what each model reports evaluated alone ([`evaluate`], one model
/// and batch at a time): unequal and empty test sets, batches that do not divide them, groups of
/// models (a batch of 2 048 puts two models in a step), a group with nothing to evaluate, both of
/// LeNet-5's convolutions; a pair with parameters of the wrong size, of another architecture, or with
/// unreadable images gets its error.
#[test]
fn a_batched_evaluation_reports_what_each_model_reports_alone() {
    let device = Device::default();
    for model in ModelKind::ALL
        .into_iter()
        .filter(|&m| m != ModelKind::ResNet9)
    {
        let data = [
            local_for(model, 23, 0),
            local_for(model, 37, 100),
            local_for(model, 8, 200),
            local_for(model, 0, 0),
            local_for(model, 50, 300),
        ];
        let models: Vec<Params> = (0..5).map(|i| Params::init(model, 40 + i)).collect();
        let tasks: Vec<(&Params, &LocalData)> = models.iter().zip(&data).collect();
        for &conv in convolutions(model) {
            for batch in [10, 2048] {
                let got = evaluate_cohort(&tasks, batch, &device, conv);
                assert_eq!(got.len(), tasks.len());
                for (i, ((p, d), got)) in tasks.iter().zip(got).enumerate() {
                    let want = evaluate(p, d, batch, &device).unwrap();
                    let got = got.unwrap();
                    let at = format!("{model}, {conv:?}, batch {batch}, pair {i}");
                    assert_eq!(got.total, d.len(), "{at}");
                    assert_eq!(
                        (&got.total_per_label, got.correct, &got.correct_per_label),
                        (&want.total_per_label, want.correct, &want.correct_per_label),
                        "{at}"
                    );
                    let close = |a: f64, b: f64| (a - b).abs() <= 1e-5 * b.abs().max(1.0);
                    assert!(close(got.loss_sum, want.loss_sum), "{at}: {got:?} {want:?}");
                    for l in 0..10 {
                        assert!(close(got.loss_per_label[l], want.loss_per_label[l]), "{at}");
                    }
                }
            }
        }
        // A group whose test sets are all empty: nothing to run, an empty report.
        let got = evaluate_cohort(&tasks[3..4], 10, &device, Convolution::Grouped);
        assert_eq!(got[0].as_ref().unwrap().total, 0);
    }
    // The errors, each beside a pair that is evaluated.
    let data = local(20, 0);
    let short = cut_short(&data);
    let good = Params::init(ModelKind::Mlp, 1);
    let mut wrong = good.clone();
    wrong.values.pop();
    let lenet = Params::init(ModelKind::LeNet5, 1);
    let tasks = [
        (&good, &data),
        (&wrong, &data),
        (&lenet, &data),
        (&good, &short),
    ];
    let got = evaluate_cohort(&tasks, 10, &device, Convolution::Im2col);
    assert_eq!(
        got[0].as_ref().unwrap().correct,
        evaluate(&good, &data, 10, &device).unwrap().correct
    );
    assert!(
        matches!(got[1], Err(TrainError::InvalidParams(_))),
        "{:?}",
        got[1]
    );
    assert!(
        matches!(got[2], Err(TrainError::InvalidConfig(_))),
        "{:?}",
        got[2]
    );
    assert!(matches!(got[3], Err(TrainError::Data(_))), "{:?}", got[3]);
}

/// Batched gradients are each model's gradient computed alone ([`gradient`]: StoCFL's anchor
/// gradient, the mean loss over all of a client's data, batch by batch): unequal shards, batches
/// that do not divide them and differ between models, groups of models (batches of 2 048 put two
/// models in a step), both convolutions; within 1e-5 of the largest component. A task with batch
/// 0, no samples, parameters of the wrong size, another architecture or unreadable images gets
/// its error and the others are computed.
#[test]
fn batched_gradients_are_each_models_gradient_alone() {
    let device = Device::default();
    // The colour LeNet-5 is left to the training and evaluation cases (its gradients are
    // those of training; CI time).
    for model in [ModelKind::LeNet5, ModelKind::Mlp] {
        let data = [
            local_for(model, 23, 0),
            local_for(model, 37, 100),
            local_for(model, 8, 200),
            local_for(model, 50, 300),
        ];
        let models: Vec<Params> = (0..4).map(|i| Params::init(model, 60 + i)).collect();
        for conv in [Convolution::Grouped, Convolution::Im2col] {
            for batches in [[10, 7, 10, 16], [2048; 4]] {
                let tasks: Vec<GradientTask<'_>> = models
                    .iter()
                    .zip(&data)
                    .zip(batches)
                    .map(|((p, d), b)| (p, d, b))
                    .collect();
                let got = gradient_cohort(&tasks, &device, conv);
                assert_eq!(got.len(), tasks.len());
                for (i, (&(p, d, b), got)) in tasks.iter().zip(got).enumerate() {
                    let want = gradient(p, d, b, &device).unwrap();
                    let got = got.unwrap();
                    assert_eq!(got.len(), want.len());
                    let scale = want.iter().fold(1e-3f32, |m, v| m.max(v.abs()));
                    let diff = got
                        .iter()
                        .zip(&want)
                        .map(|(x, y)| (x - y).abs())
                        .fold(0.0f32, f32::max);
                    assert!(
                        diff <= 1e-5 * scale,
                        "{model}, {conv:?}, batches {batches:?}, task {i}: {diff} of {scale}"
                    );
                }
            }
        }
    }
    // The errors, each beside a task that is computed.
    let data = local(20, 0);
    let (short, empty) = (cut_short(&data), local(0, 0));
    let good = Params::init(ModelKind::Mlp, 1);
    let mut wrong = good.clone();
    wrong.values.pop();
    let lenet = Params::init(ModelKind::LeNet5, 1);
    let tasks = [
        (&good, &data, 10),
        (&good, &data, 0),
        (&good, &empty, 10),
        (&wrong, &data, 10),
        (&lenet, &data, 10),
        (&good, &short, 10),
    ];
    let got = gradient_cohort(&tasks, &device, Convolution::Im2col);
    let want = gradient(&good, &data, 10, &device).unwrap();
    let first = got[0].as_ref().unwrap();
    assert!(first.iter().zip(&want).all(|(x, y)| (x - y).abs() <= 1e-6));
    let kinds: Vec<&str> = got[1..]
        .iter()
        .map(|g| match g {
            Err(TrainError::InvalidConfig(_)) => "config",
            Err(TrainError::NoData) => "no data",
            Err(TrainError::InvalidParams(_)) => "params",
            Err(TrainError::Data(_)) => "data",
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(kinds, ["config", "no data", "params", "config", "data"]);
}

/// ResNet-9 in a cohort (its blocks grouped convolutions and GroupNorms over the clients'
/// channels): each member trained as alone (one with a short last batch and a proximal term, one
/// smaller than a batch), and a batched evaluation equal to each model's alone. Small, as
/// ResNet-9 is 6.6 M parameters.
#[test]
fn resnet9_in_a_cohort_trains_and_evaluates_each_client_as_alone() {
    let (_, device) = common::device_from_env("EDGECFL_TEST_COHORT_DEVICE", "cpu");
    let model = ModelKind::ResNet9;
    let data = [local_for(model, 5, 0), local_for(model, 3, 100)];
    let starts: Vec<Params> = (0..2).map(|i| Params::init(model, 50 + i)).collect();
    let members = [
        Member {
            start: &starts[0],
            data: &data[0],
            cfg: cfg(1, 4, 0.01, 0.5, 1),
            prox: Some(Proximal {
                anchor: &starts[0],
                mu: 0.01,
            }),
        },
        Member {
            start: &starts[1],
            data: &data[1],
            cfg: cfg(1, 4, 0.02, 0.9, 2),
            prox: None,
        },
    ];
    check_against_alone(&members, &device);
    let tasks: Vec<(&Params, &LocalData)> = starts.iter().zip(&data).collect();
    let got = evaluate_cohort(&tasks, 4, &device, Convolution::Im2col);
    for ((p, d), got) in tasks.iter().zip(got) {
        let want = evaluate(p, d, 4, &device).unwrap();
        let got = got.unwrap();
        assert_eq!((got.total, got.correct), (want.total, want.correct));
        assert!((got.loss_sum - want.loss_sum).abs() <= 1e-5 * want.loss_sum.max(1.0));
    }
}
