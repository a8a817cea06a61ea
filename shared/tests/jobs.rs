//! Every kind of client job, through its one file (`shared/src/jobs/<kind>.rs`): a device's
//! answer to the job's command is byte for byte the simulator's answer to the job, the server
//! accepts it as that answer, and each kind's server-side judgement refuses what it must
//! (wrong dimensions, NaN, values out of range, a message of another kind).

use edgecfl_shared::client::ClientData;
use edgecfl_shared::cluster::spectral::{Estimate, Gram, Signature};
use edgecfl_shared::data::ImageShape;
use edgecfl_shared::data::fmnist::FashionMnist;
use edgecfl_shared::federation::{Answer, Job, Training};
use edgecfl_shared::jobs::{
    self, EvaluateJob, GradientJob, GramJob, PairJob, PickJob, Prox, Rejected, Rejection,
    RelevanceJob, SignatureJob,
};
use edgecfl_shared::model::{LayerSet, ModelKind, Params};
use edgecfl_shared::protocol::{Encoding, LabelEval, Tensor, ToCoordinator};
use edgecfl_shared::train::{Backend, LocalData, TrainConfig};

/// Pixels of a Fashion-MNIST image.
const PIXELS: usize = ImageShape::GREY_28.pixels();

fn training(start: &Params, seed: u64) -> Training<'_> {
    Training {
        start,
        cfg: TrainConfig {
            epochs: 1,
            batch_size: 10,
            lr: 0.05,
            momentum: 0.5,
            seed,
            threads: 1,
        },
        prox: None,
    }
}

/// A client of labels 0 and 1: 40 training and 20 test images of the bundled subset.
fn client_data() -> (LocalData, LocalData) {
    let data = FashionMnist::bundled().unwrap();
    let pick = |d: &edgecfl_shared::data::Dataset, n: usize| -> Vec<usize> {
        (0..d.labels.len())
            .filter(|&i| d.labels[i] < 2)
            .take(n)
            .collect()
    };
    (
        LocalData::from_dataset(&data.train, &pick(&data.train, 40), 0),
        LocalData::from_dataset(&data.test, &pick(&data.test, 20), 0),
    )
}

/// For every job a device does without state: its command, served by the device's entry point
/// (`jobs::serve`, what `edge-client run` calls), gives the very message the simulator's answer
/// (`Job::execute`, what `coordinator simulate` calls) encodes to; the server's judgement of that
/// message (`Job::accept`) is the simulator's answer again, in f32 exactly.
#[test]
fn a_device_answers_every_job_as_the_simulator_does() {
    let (train, test) = client_data();
    let data = ClientData {
        train: &train,
        test: Some(&test),
    };
    let device = Backend::Flex.device().unwrap();
    let mlp = Params::init(ModelKind::Mlp, 3);
    let other = Params::init(ModelKind::Mlp, 4);
    let layers = LayerSet::Final;
    let prox = Training {
        prox: Some(Prox {
            anchor: &mlp,
            mu: 0.3,
        }),
        ..training(&mlp, 2)
    };
    let signature = |stats| {
        Job::Signature(SignatureJob {
            train: training(&mlp, 5),
            layers: &layers,
            stats,
        })
    };
    let all = [
        Job::Train(training(&mlp, 1)),
        Job::Train(prox),
        signature(false),
        signature(true),
        Job::TrainPair(PairJob {
            global: training(&mlp, 6),
            cluster: Training {
                prox: Some(Prox {
                    anchor: &mlp,
                    mu: 0.2,
                }),
                ..training(&other, 6)
            },
        }),
        Job::Pick(PickJob {
            candidates: vec![&other, &mlp],
            train: training(&other, 7),
        }),
        Job::Gradient(GradientJob {
            at: &mlp,
            batch_size: 16,
        }),
        Job::Evaluate(EvaluateJob { model: &mlp }),
    ];
    for job in &all {
        let name = job.name();
        let cmd = job.command(Encoding::F32).unwrap();
        let on_device = jobs::serve(&cmd, data, &device, 1)
            .unwrap_or_else(|| panic!("{name}: the device does not serve its command"))
            .unwrap();
        let simulated = job.execute(data, &device).unwrap();
        assert!(job.accepts(&simulated), "{name}");
        assert_eq!(
            on_device,
            job.reply(&simulated, Encoding::F32).unwrap(),
            "{name}: device and simulator differ"
        );
        let judged = job.accept(on_device.clone()).unwrap();
        assert_eq!(judged.floats_up(), simulated.floats_up(), "{name}");
        assert_eq!(
            job.reply(&judged, Encoding::F32).unwrap(),
            on_device,
            "{name}: the accepted answer is not the one sent"
        );
    }
    // IFCA's client picked the model of lower loss, and both pair members trained on every sample.
    let Answer::Picked(p) = all[5].execute(data, &device).unwrap() else {
        panic!()
    };
    assert!(p.losses[p.choice] <= p.losses[1 - p.choice]);
    let Answer::Pair(pair) = all[4].execute(data, &device).unwrap() else {
        panic!()
    };
    assert_eq!((pair.global.samples, pair.cluster.samples), (40, 40));
}

/// MT-HFL's two jobs are stateful on a device (its worker pairs them), so `serve` leaves them to
/// it; their stateless `execute` is the simulator's computation: the uploaded signature is the
/// exact one rounded to the upload's encoding, and the relevance row of a client against itself
/// is 1 (the paper's r(i, i)).
#[test]
fn mthfl_jobs_compute_the_signature_and_the_row() {
    let (train, _) = client_data();
    let data = ClientData {
        train: &train,
        test: None,
    };
    let device = Backend::Flex.device().unwrap();
    let gram = Job::GramSignature(GramJob {
        d: PIXELS,
        k: 2,
        encoding: Encoding::F16,
    });
    let cmd = gram.command(Encoding::F32).unwrap();
    assert!(jobs::serve(&cmd, data, &device, 1).is_none());
    let Answer::Eigenpairs(uploaded) = gram.execute(data, &device).unwrap() else {
        panic!()
    };
    let exact = Gram::from_local_data(&train).unwrap().signature(2).unwrap();
    assert_eq!(uploaded, exact.rounded(Encoding::F16));
    assert_eq!(
        gram.accept(
            gram.reply(&Answer::Eigenpairs(uploaded.clone()), Encoding::F32)
                .unwrap()
        )
        .unwrap()
        .floats_up(),
        2 * PIXELS + 2
    );
    let all = [exact.clone(), exact];
    let relevance = Job::Relevance(RelevanceJob {
        all: &all,
        estimate: Estimate::Norm,
    });
    assert!(relevance.broadcast().unwrap().is_some());
    let Answer::Row(row) = relevance.execute(data, &device).unwrap() else {
        panic!()
    };
    assert_eq!(row.len(), 2);
    for r in row {
        assert!((r - 1.0).abs() < 1e-6, "{r}");
    }
}

fn reason(r: Result<Answer, Rejected>) -> Rejection {
    r.unwrap_err().reason
}

fn t(v: &[f32]) -> Tensor {
    Tensor::encode(v, Encoding::F32)
}

/// The training jobs' judgement: the run's model and size, finite values and losses, at least
/// one sample; IFCA's choice among the candidates with a finite loss for each.
#[test]
fn training_answers_are_checked() {
    let mlp = Params::init(ModelKind::Mlp, 1);
    let good = &mlp.values;
    let pair_job = Job::TrainPair(PairJob {
        global: training(&mlp, 0),
        cluster: training(&mlp, 0),
    });
    let pair = |cluster: &[f32], loss: f64| ToCoordinator::Pair {
        model: ModelKind::Mlp,
        global: t(good),
        cluster: t(cluster),
        samples: 10,
        global_loss: 0.5,
        cluster_loss: loss,
    };
    let Ok(Answer::Pair(p)) = pair_job.accept(pair(good, 0.4)) else {
        panic!("a good pair was refused")
    };
    assert_eq!(
        (p.global.loss, p.cluster.loss, p.cluster.samples),
        (0.5, 0.4, 10)
    );
    assert_eq!(
        reason(pair_job.accept(pair(&good[1..], 0.4))),
        Rejection::WrongSize
    );
    assert_eq!(
        reason(pair_job.accept(pair(good, f64::NAN))),
        Rejection::NotFinite
    );

    let train = Job::Train(training(&mlp, 0));
    let update = |model, samples| ToCoordinator::Update {
        model,
        params: t(good),
        samples,
        loss: 0.5,
    };
    assert!(train.accept(update(ModelKind::Mlp, 10)).is_ok());
    assert_eq!(
        reason(train.accept(update(ModelKind::LeNet5, 10))),
        Rejection::WrongSize
    );
    assert_eq!(
        reason(train.accept(update(ModelKind::Mlp, 0))),
        Rejection::NotFinite
    );
    assert_eq!(reason(train.accept(pair(good, 0.4))), Rejection::Unexpected);

    let pick = Job::Pick(PickJob {
        candidates: vec![&mlp, &mlp],
        train: training(&mlp, 0),
    });
    let picked = |choice: u32, losses: Vec<f64>| ToCoordinator::Picked {
        choice,
        losses,
        model: ModelKind::Mlp,
        params: t(good),
        samples: 10,
        loss: 0.5,
    };
    assert!(matches!(
        pick.accept(picked(1, vec![0.9, 0.3])),
        Ok(Answer::Picked(p)) if p.choice == 1
    ));
    for (choice, losses) in [
        (2, vec![0.9, 0.3]),
        (0, vec![0.9]),
        (0, vec![f64::NAN, 1.0]),
    ] {
        assert_eq!(
            reason(pick.accept(picked(choice, losses))),
            Rejection::Malformed
        );
    }

    let small = Params::new(ModelKind::Mlp, good.clone()).unwrap();
    let gradient = Job::Gradient(GradientJob {
        at: &small,
        batch_size: 10,
    });
    assert!(matches!(
        gradient.accept(ToCoordinator::Gradient { values: t(good) }),
        Ok(Answer::Gradient(_))
    ));
    assert_eq!(
        reason(gradient.accept(ToCoordinator::Gradient {
            values: t(&good[2..])
        })),
        Rejection::WrongSize
    );
}

/// Round 0's judgements: the signature's length is the selected layers'; AdaCFL's label
/// statistics have 1 to 10 classes and an entropy in [0, log₂ 10]; a signature with statistics is
/// not a plain one.
#[test]
fn signature_answers_are_checked() {
    let mlp = Params::init(ModelKind::Mlp, 1);
    let layers = LayerSet::Final; // 32 × 10 + 10 floats of the MLP
    let job = |stats| {
        Job::Signature(SignatureJob {
            train: training(&mlp, 0),
            layers: &layers,
            stats,
        })
    };
    let values = vec![0.5f32; 330];
    let plain = |n: usize| ToCoordinator::Signature {
        values: t(&values[..n]),
    };
    assert!(job(false).accept(plain(330)).is_ok());
    assert_eq!(reason(job(false).accept(plain(329))), Rejection::WrongSize);
    let stats = |classes: u32, entropy: f64| ToCoordinator::SignatureStats {
        values: t(&values),
        classes,
        entropy,
    };
    assert!(matches!(
        job(true).accept(stats(2, 1.0)),
        Ok(Answer::Signature(s)) if s.stats.is_some_and(|s| s.classes == 2)
    ));
    // 0 or 11 classes, negative entropy, entropy above log2(10): refused.
    for (c, e) in [(0, 0.0), (11, 1.0), (2, -0.1), (10, 3.4)] {
        assert_eq!(reason(job(true).accept(stats(c, e))), Rejection::Malformed);
    }
    assert_eq!(reason(job(true).accept(plain(330))), Rejection::Unexpected);
    assert_eq!(
        reason(job(false).accept(stats(2, 1.0))),
        Rejection::Unexpected
    );
}

/// MT-HFL's round 0: a malformed signature or relevance row is a typed rejection, an answer of
/// one job is unexpected for the other.
#[test]
fn mthfl_answers_are_checked() {
    let features: Vec<f32> = (0..10 * PIXELS)
        .map(|i| ((i * 7) % 11) as f32 / 10.0)
        .collect();
    let sig = Gram::from_features(&features, PIXELS)
        .unwrap()
        .signature(2)
        .unwrap();
    let eig = |s: &Signature| ToCoordinator::Eigenpairs(s.to_wire(Encoding::F32));
    let gram = Job::GramSignature(GramJob {
        d: PIXELS,
        k: 2,
        encoding: Encoding::F32,
    });
    let mut nan = sig.clone();
    nan.values[1] = f32::NAN;
    let mut negative = sig.clone();
    negative.values[0] = -1.0;
    assert_eq!(reason(gram.accept(eig(&nan))), Rejection::NotFinite);
    assert_eq!(reason(gram.accept(eig(&negative))), Rejection::BadValue);
    assert_eq!(
        reason(gram.accept(eig(&sig.truncated(1)))),
        Rejection::WrongSize
    );
    let row = |v: &[f32]| ToCoordinator::RelevanceRow { row: t(v) };
    assert_eq!(reason(gram.accept(row(&[1.0, 0.5]))), Rejection::Unexpected);
    let Ok(Answer::Eigenpairs(got)) = gram.accept(eig(&sig)) else {
        panic!("a good signature was refused");
    };
    assert_eq!(got, sig);

    let all = [sig.clone(), sig.clone(), sig.clone()];
    let relevance = Job::Relevance(RelevanceJob {
        all: &all,
        estimate: Estimate::Norm,
    });
    assert_eq!(
        reason(relevance.accept(row(&[1.0, 0.5]))),
        Rejection::WrongSize
    );
    assert_eq!(
        reason(relevance.accept(row(&[1.0, f32::NAN, 0.5]))),
        Rejection::NotFinite
    );
    assert_eq!(
        reason(relevance.accept(row(&[1.0, 2.0, 0.5]))),
        Rejection::BadValue
    );
    assert_eq!(reason(relevance.accept(eig(&sig))), Rejection::Unexpected);
    let Ok(Answer::Row(r)) = relevance.accept(row(&[1.0, 0.25, 0.5])) else {
        panic!("a good row was refused");
    };
    assert_eq!(r, vec![1.0, 0.25, 0.5]);
}

/// An evaluation is rebuilt from its label counts (the accuracy and the proportional view by
/// hand) and refused when a count cannot be.
#[test]
fn evaluation_is_rebuilt_from_label_counts() {
    let mlp = Params::init(ModelKind::Mlp, 1);
    let job = Job::Evaluate(EvaluateJob { model: &mlp });
    let per_label = vec![
        LabelEval {
            label: 1,
            correct: 8,
            total: 10,
            loss_sum: 1.0,
            trained: 30,
        },
        LabelEval {
            label: 4,
            correct: 1,
            total: 10,
            loss_sum: 3.0,
            trained: 10,
        },
    ];
    let Ok(Answer::Evaluation(r)) = job.accept(ToCoordinator::Evaluation { per_label }) else {
        panic!("evaluation refused");
    };
    assert_eq!((r.correct, r.total), (9, 20));
    assert!((r.accuracy() - 0.45).abs() < 1e-12 && (r.loss() - 0.2).abs() < 1e-12);
    // Proportional view: label 1 weighs 30 / 40, label 4 10 / 40: 0.75·0.8 + 0.25·0.1.
    let p = r.proportional_accuracy().unwrap();
    assert!((p - 0.625).abs() < 1e-12, "{p}");
    // Label 10 does not exist; a negative cross-entropy; finite losses summing to infinity.
    let entry = |label, loss_sum| LabelEval {
        label,
        correct: 1,
        total: 1,
        loss_sum,
        trained: 1,
    };
    for bad in [
        vec![entry(10, 0.0)],
        vec![entry(2, -1.0)],
        vec![entry(2, f64::MAX), entry(3, f64::MAX)],
    ] {
        assert_eq!(
            reason(job.accept(ToCoordinator::Evaluation { per_label: bad })),
            Rejection::Malformed
        );
    }
}
