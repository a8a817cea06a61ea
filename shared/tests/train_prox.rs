//! FedProx's proximal local training and the full-data gradient (StoCFL's anchor gradient).
//!
//! The gradient is checked against central finite differences of an independent f64 forward
//! pass written out here by hand (itself checked against [`evaluate`]), the proximal step against
//! the hand formula of one SGD step.

use burn::prelude::Device;
use edgecfl_shared::data::fmnist::FashionMnist;
use edgecfl_shared::model::{ModelKind, ParamLayout, Params};
use edgecfl_shared::train::{
    LocalData, MAX_TRAIN_THREADS, Proximal, TrainConfig, TrainError, evaluate, gradient,
    min_part_samples, to_unit, train_local, train_local_prox,
};

const KINDS: [ModelKind; 2] = [ModelKind::Mlp, ModelKind::LeNet5];

/// The largest |a − b| over two equally long vectors.
fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max)
}

fn local(n: usize, offset: usize) -> LocalData {
    let data = FashionMnist::bundled().unwrap();
    let idx: Vec<usize> = (offset..offset + n).collect();
    LocalData::from_dataset(&data.train, &idx, 0)
}

// ---------------------------------------------------------------------------------------------
// Independent f64 forward pass (PyTorch semantics: valid cross-correlation, max-pool 2×2 stride 2,
// flatten in (channel, row, column) order, linear weights stored [d_in, d_out]).

/// Named f64 views of the flat parameters.
struct P<'a> {
    v: &'a [f64],
    layout: ParamLayout,
}

impl P<'_> {
    fn get(&self, name: &str) -> &[f64] {
        &self.v[self.layout.entry(name).unwrap().range()]
    }
}

fn linear(x: &[f64], w: &[f64], b: &[f64]) -> Vec<f64> {
    let (d_in, d_out) = (x.len(), b.len());
    assert_eq!(w.len(), d_in * d_out);
    (0..d_out)
        .map(|j| b[j] + (0..d_in).map(|i| x[i] * w[i * d_out + j]).sum::<f64>())
        .collect()
}

fn relu(x: &mut [f64]) {
    for v in x {
        *v = v.max(0.0);
    }
}

/// Valid 5×5 cross-correlation: `x` is `[c_in, s, s]`, the result `[c_out, s-4, s-4]`.
fn conv5(x: &[f64], c_in: usize, s: usize, w: &[f64], b: &[f64]) -> Vec<f64> {
    let c_out = b.len();
    let o = s - 4;
    let mut out = vec![0.0; c_out * o * o];
    for co in 0..c_out {
        for y in 0..o {
            for xx in 0..o {
                let mut acc = b[co];
                for ci in 0..c_in {
                    for ky in 0..5 {
                        for kx in 0..5 {
                            acc += w[((co * c_in + ci) * 5 + ky) * 5 + kx]
                                * x[(ci * s + y + ky) * s + xx + kx];
                        }
                    }
                }
                out[(co * o + y) * o + xx] = acc;
            }
        }
    }
    out
}

fn maxpool2(x: &[f64], c: usize, s: usize) -> Vec<f64> {
    let o = s / 2;
    let mut out = vec![0.0; c * o * o];
    for ch in 0..c {
        for y in 0..o {
            for xx in 0..o {
                let at = |dy: usize, dx: usize| x[(ch * s + 2 * y + dy) * s + 2 * xx + dx];
                out[(ch * o + y) * o + xx] = at(0, 0).max(at(0, 1)).max(at(1, 0)).max(at(1, 1));
            }
        }
    }
    out
}

fn logits(model: ModelKind, p: &P, img: &[f64]) -> Vec<f64> {
    match model {
        ModelKind::Mlp => {
            let mut h = linear(img, p.get("fc1.weight"), p.get("fc1.bias"));
            relu(&mut h);
            linear(&h, p.get("fc2.weight"), p.get("fc2.bias"))
        }
        ModelKind::LeNet5 => {
            let mut x = conv5(img, 1, 28, p.get("conv1.weight"), p.get("conv1.bias"));
            relu(&mut x);
            let x = maxpool2(&x, 6, 24);
            let mut x = conv5(&x, 6, 12, p.get("conv2.weight"), p.get("conv2.bias"));
            relu(&mut x);
            let x = maxpool2(&x, 16, 8);
            let mut x = linear(&x, p.get("fc1.weight"), p.get("fc1.bias"));
            relu(&mut x);
            let mut x = linear(&x, p.get("fc2.weight"), p.get("fc2.bias"));
            relu(&mut x);
            linear(&x, p.get("fc3.weight"), p.get("fc3.bias"))
        }
        ModelKind::LeNet5Rgb => {
            let mut x = conv5(img, 3, 32, p.get("conv1.weight"), p.get("conv1.bias"));
            relu(&mut x);
            let x = maxpool2(&x, 6, 28);
            let mut x = conv5(&x, 6, 14, p.get("conv2.weight"), p.get("conv2.bias"));
            relu(&mut x);
            let x = maxpool2(&x, 16, 10);
            let mut x = linear(&x, p.get("fc1.weight"), p.get("fc1.bias"));
            relu(&mut x);
            let mut x = linear(&x, p.get("fc2.weight"), p.get("fc2.bias"));
            relu(&mut x);
            linear(&x, p.get("fc3.weight"), p.get("fc3.bias"))
        }
        // ResNet-9's independent forward pass is numpy's (`tests/python/check_safetensors.py`,
        // run by `tests/model_export.rs`): in f64 loops here it would take minutes.
        ModelKind::ResNet9 => unimplemented!("ResNet-9 is checked against numpy"),
        // AdaCFL's CNNs: two convolutions (FmnistCNN's first padded by 2), one linear layer.
        ModelKind::MnistCnn | ModelKind::CifarCnn | ModelKind::FmnistCnn => {
            let s = model.input();
            let (c1, c2) = match model {
                ModelKind::MnistCnn => (20, 50),
                ModelKind::CifarCnn => (6, 16),
                _ => (16, 32),
            };
            let pad = if model == ModelKind::FmnistCnn { 2 } else { 0 };
            let size = s.height + 2 * pad;
            let img = zero_pad(img, s.channels, s.height, pad);
            let mut x = conv5(
                &img,
                s.channels,
                size,
                p.get("conv1.weight"),
                p.get("conv1.bias"),
            );
            relu(&mut x);
            let x = maxpool2(&x, c1, size - 4);
            let size = (size - 4) / 2;
            let mut x = conv5(&x, c1, size, p.get("conv2.weight"), p.get("conv2.bias"));
            relu(&mut x);
            let x = maxpool2(&x, c2, size - 4);
            linear(&x, p.get("fc.weight"), p.get("fc.bias"))
        }
    }
}

/// `x` (`[c, s, s]`) with `pad` zeros around each channel: `[c, s + 2·pad, s + 2·pad]`.
fn zero_pad(x: &[f64], c: usize, s: usize, pad: usize) -> Vec<f64> {
    let o = s + 2 * pad;
    let mut out = vec![0.0; c * o * o];
    for ch in 0..c {
        for y in 0..s {
            for xx in 0..s {
                out[(ch * o + y + pad) * o + xx + pad] = x[(ch * s + y) * s + xx];
            }
        }
    }
    out
}

/// Mean cross-entropy over `data` in f64.
fn mean_loss(model: ModelKind, v: &[f64], data: &LocalData) -> f64 {
    let p = P {
        v,
        layout: ParamLayout::of(model),
    };
    let mut sum = 0.0;
    let pixels = data.pixels().unwrap();
    let px = data.shape().pixels();
    for (i, &label) in data.labels.iter().enumerate() {
        let img: Vec<f64> = pixels[i * px..(i + 1) * px]
            .iter()
            .map(|&x| f64::from(to_unit(x)))
            .collect();
        let z = logits(model, &p, &img);
        assert_eq!(z.len(), 10);
        let m = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + z.iter().map(|&x| (x - m).exp()).sum::<f64>().ln();
        sum += lse - z[usize::from(label)];
    }
    sum / data.len() as f64
}

// ---------------------------------------------------------------------------------------------

/// The colour LeNet-5 (3×32×32, NIID-Bench's `SimpleCNN`) and AdaCFL's three CNNs that burn runs
/// are the hand-written ones above: the same mean loss on made-up images, and a gradient of the
/// same loss.
#[test]
fn colour_lenet5_and_adacfl_cnns_are_the_hand_written_networks() {
    for kind in [
        ModelKind::LeNet5Rgb,
        ModelKind::MnistCnn,
        ModelKind::CifarCnn,
        ModelKind::FmnistCnn,
    ] {
        is_the_hand_written_network(kind);
    }
    // The colour LeNet-5's images must be colour ones: Fashion-MNIST's are refused, with both
    // shapes named.
    let params = Params::init(ModelKind::LeNet5Rgb, 9);
    let grey = local(4, 0);
    let err = evaluate(&params, &grey, 4, &Device::flex()).unwrap_err();
    assert!(
        err.to_string().contains("3×32×32") && err.to_string().contains("1×28×28"),
        "{err}"
    );
}

fn is_the_hand_written_network(kind: ModelKind) {
    let shape = kind.input();
    let n = 6;
    let pixels: Vec<u8> = (0..n * shape.pixels())
        .map(|i| (i * 7919 % 253) as u8)
        .collect();
    let data = LocalData::with_shape(shape, pixels, (0..n).map(|i| (i * 7 % 10) as u8).collect());
    let device = Device::flex();
    let params = Params::init(kind, 9);
    let v: Vec<f64> = params.values.iter().map(|&x| f64::from(x)).collect();
    let reference = mean_loss(kind, &v, &data);
    let eval = evaluate(&params, &data, 4, &device).unwrap();
    let burn_loss = eval.loss_sum / eval.total as f64;
    assert!(
        (reference - burn_loss).abs() < 1e-5,
        "{kind}: f64 loss {reference} vs burn {burn_loss}"
    );
    // One coordinate of each tensor: the central difference of the f64 loss is burn's gradient
    // (a small step: a first-layer weight moves thousands of activations, and a larger one
    // carries some of them over a ReLU's or a pool's kink).
    let g = gradient(&params, &data, 6, &device).unwrap();
    let h = 1e-6;
    for e in &params.layout().entries {
        let i = e
            .range()
            .max_by(|&a, &b| g[a].abs().total_cmp(&g[b].abs()))
            .unwrap();
        let (mut up, mut down) = (v.clone(), v.clone());
        up[i] += h;
        down[i] -= h;
        let fd = (mean_loss(kind, &up, &data) - mean_loss(kind, &down, &data)) / (2.0 * h);
        let got = f64::from(g[i]);
        assert!(
            (fd - got).abs() <= 1e-3 * fd.abs().max(1e-2),
            "{kind} {}: finite difference {fd} vs burn {got}",
            e.name
        );
    }
}

#[test]
fn gradient_matches_finite_differences() {
    let data = local(20, 0);
    let device = Device::flex();
    for kind in KINDS {
        let params = Params::init(kind, 5);
        let v: Vec<f64> = params.values.iter().map(|&x| f64::from(x)).collect();
        // The hand-written forward is the model burn runs.
        let reference = mean_loss(kind, &v, &data);
        let eval = evaluate(&params, &data, 8, &device).unwrap();
        let burn_loss = eval.loss_sum / eval.total as f64;
        assert!(
            (reference - burn_loss).abs() < 1e-5,
            "{kind}: f64 loss {reference} vs burn {burn_loss}"
        );

        let g = gradient(&params, &data, 6, &device).unwrap();
        assert_eq!(g.len(), params.values.len());
        let h = 1e-5;
        let mut checked = 0;
        for e in &params.layout().entries {
            let r = e.range();
            let largest = r
                .clone()
                .max_by(|&a, &b| g[a].abs().total_cmp(&g[b].abs()))
                .unwrap();
            assert!(g[largest] != 0.0, "{kind} {}: gradient all zero", e.name);
            let coords = [
                r.start,
                r.start + e.len() / 2,
                r.end - 1,
                r.start + (e.len() * 7) / 11,
                largest,
            ];
            for i in coords {
                let mut plus = v.clone();
                plus[i] += h;
                let mut minus = v.clone();
                minus[i] -= h;
                let fd =
                    (mean_loss(kind, &plus, &data) - mean_loss(kind, &minus, &data)) / (2.0 * h);
                let got = f64::from(g[i]);
                assert!(
                    (got - fd).abs() <= 2e-5 + 1e-3 * fd.abs(),
                    "{kind} {} [{}]: gradient {got} vs finite difference {fd}",
                    e.name,
                    i - r.start
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 5 * params.layout().entries.len());
    }
}

#[test]
fn gradient_does_not_depend_on_batch_size() {
    let data = local(23, 100);
    let device = Device::flex();
    for kind in KINDS {
        let params = Params::init(kind, 11);
        let whole = gradient(&params, &data, 23, &device).unwrap();
        let scale = whole.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        assert!(scale > 0.0);
        for batch in [1, 4, 7, 100] {
            let g = gradient(&params, &data, batch, &device).unwrap();
            let worst = max_abs_diff(&g, &whole);
            assert!(
                worst <= 1e-5 * scale.max(1.0),
                "{kind} batch {batch}: max difference {worst} (scale {scale})"
            );
        }
    }
}

#[test]
fn no_or_zero_proximal_term_is_plain_training() {
    let data = local(30, 200);
    let device = Device::flex();
    let cfg = TrainConfig {
        epochs: 2,
        batch_size: 7,
        lr: 0.05,
        momentum: 0.5,
        seed: 3,
        threads: 1,
    };
    for kind in KINDS {
        let p0 = Params::init(kind, 1);
        let anchor = Params::init(kind, 2);
        let (plain, rep) = train_local(&p0, &data, &cfg, &device).unwrap();
        assert_ne!(plain, p0);
        let (none, rep_none) = train_local_prox(&p0, &data, &cfg, None, &device).unwrap();
        let zero = Proximal {
            anchor: &anchor,
            mu: 0.0,
        };
        let (mu0, rep_mu0) = train_local_prox(&p0, &data, &cfg, Some(zero), &device).unwrap();
        // Bit for bit.
        let bits = |p: &Params| p.values.iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
        assert_eq!(bits(&plain), bits(&none), "{kind}: None");
        assert_eq!(bits(&plain), bits(&mu0), "{kind}: μ = 0");
        for r in [rep_none, rep_mu0] {
            assert_eq!(r.last_epoch_loss.to_bits(), rep.last_epoch_loss.to_bits());
            assert_eq!((r.steps, r.samples), (rep.steps, rep.samples));
        }
    }
}

#[test]
fn one_proximal_sgd_step_adds_mu_times_distance_to_the_gradient() {
    let device = Device::flex();
    let (lr, mu) = (0.05, 0.8);
    // One step: the whole data in one batch, no momentum.
    let cfg = TrainConfig {
        epochs: 1,
        batch_size: 1,
        lr,
        momentum: 0.0,
        seed: 0,
        threads: 1,
    };
    // A batch of 4 smallest parts, split over 1, 2, 3 and 4 threads (LeNet-5: parts of 64, 32,
    // 22 or 21, and 16 samples): the same step.
    for (kind, threads) in KINDS.into_iter().flat_map(|k| [1, 2, 3, 4].map(|t| (k, t))) {
        let n = 4 * min_part_samples(kind);
        let data = local(n, 300);
        let cfg = TrainConfig {
            threads,
            batch_size: n,
            ..cfg
        };
        let p0 = Params::init(kind, 21);
        let anchor = Params::init(kind, 22);
        let (plain, rep) = train_local(&p0, &data, &cfg, &device).unwrap();
        let prox = Proximal {
            anchor: &anchor,
            mu,
        };
        let (got, rep_prox) = train_local_prox(&p0, &data, &cfg, Some(prox), &device).unwrap();
        assert_eq!(rep.steps, 1);
        assert_eq!(rep_prox.steps, 1);
        // The report is the data loss at θ₀, the same with or without the term.
        assert_eq!(rep_prox.last_epoch_loss, rep.last_epoch_loss);
        let kind = format!("{kind}, {threads} thread(s)");
        // θ₁ = θ₀ − lr(∇L + μ(θ₀ − a)) = plain step − lr·μ·(θ₀ − a).
        let mut worst = 0.0f64;
        let mut moved = 0.0f64;
        for i in 0..p0.values.len() {
            let pull = lr * mu * (f64::from(p0.values[i]) - f64::from(anchor.values[i]));
            let want = f64::from(plain.values[i]) - pull;
            worst = worst.max((f64::from(got.values[i]) - want).abs());
            moved = moved.max(pull.abs());
        }
        assert!(moved > 5e-3, "{kind}: the anchor is away from the start");
        assert!(
            worst < 1e-6,
            "{kind}: max deviation {worst} from the hand step"
        );
        // And the step agrees with the full-data gradient: θ₁ = θ₀ − lr·∇L.
        let g = gradient(&p0, &data, n, &device).unwrap();
        for (i, ((&start, &end), &grad)) in p0.values.iter().zip(&plain.values).zip(&g).enumerate()
        {
            let want = f64::from(start) - lr * f64::from(grad);
            assert!((f64::from(end) - want).abs() < 1e-6, "{kind} [{i}]");
        }
    }
}

#[test]
fn split_batches_train_the_same_model_up_to_rounding_and_repeat_exactly() {
    let device = Device::flex();
    for kind in KINDS {
        // Two batches of 3 smallest parts and 2 samples, and a last batch of 10 (not cut): on 2
        // threads 2 parts, on 3 or more 3 (LeNet-5: 110 samples in batches of 50, parts of 25,
        // or 17 + 17 + 16).
        let batch = 3 * min_part_samples(kind) + 2;
        let data = local(2 * batch + 10, 400);
        let base = TrainConfig {
            epochs: 2,
            batch_size: batch,
            lr: 0.05,
            momentum: 0.5,
            seed: 5,
            threads: 1,
        };
        let p0 = Params::init(kind, 31);
        let anchor = Params::init(kind, 32);
        for prox in [
            None,
            Some(Proximal {
                anchor: &anchor,
                mu: 0.3,
            }),
        ] {
            let (one, rep_one) = train_local_prox(&p0, &data, &base, prox, &device).unwrap();
            let moved = max_abs_diff(&one.values, &p0.values);
            for threads in [2, 3, 16] {
                let cfg = TrainConfig { threads, ..base };
                let (got, rep) = train_local_prox(&p0, &data, &cfg, prox, &device).unwrap();
                let (again, rep_again) = train_local_prox(&p0, &data, &cfg, prox, &device).unwrap();
                let what = format!("{kind}, μ {:?}, {threads} threads", prox.map(|p| p.mu));
                // The same floats every time for the same thread count.
                assert_eq!(got, again, "{what}: repeat");
                assert_eq!(rep.last_epoch_loss, rep_again.last_epoch_loss);
                assert_eq!((rep.steps, rep.samples), (rep_one.steps, rep_one.samples));
                // The same training as one thread, up to float rounding over 6 steps.
                let worst = max_abs_diff(&got.values, &one.values);
                assert!(
                    worst < 1e-5 && worst < moved * 1e-3,
                    "{what}: {worst} from one thread (training moved {moved})"
                );
                let dl = (rep.last_epoch_loss - rep_one.last_epoch_loss).abs();
                assert!(dl < 1e-5, "{what}: loss {dl} from one thread");
            }
        }
    }
}

#[test]
fn a_stronger_proximal_term_stays_closer_to_the_anchor() {
    let data = local(40, 400);
    let device = Device::flex();
    let cfg = TrainConfig {
        epochs: 3,
        batch_size: 10,
        lr: 0.02,
        momentum: 0.5,
        seed: 8,
        threads: 1,
    };
    let dist = |a: &Params, b: &Params| {
        a.values
            .iter()
            .zip(&b.values)
            .map(|(x, y)| f64::from(x - y).powi(2))
            .sum::<f64>()
            .sqrt()
    };
    for kind in KINDS {
        let p0 = Params::init(kind, 31);
        let anchor = Params::init(kind, 32);
        let start = dist(&p0, &anchor);
        let mut last = f64::INFINITY;
        for mu in [0.0, 0.5, 5.0, 50.0] {
            let prox = Proximal {
                anchor: &anchor,
                mu,
            };
            let (out, rep) = train_local_prox(&p0, &data, &cfg, Some(prox), &device).unwrap();
            assert!(rep.last_epoch_loss.is_finite());
            let d = dist(&out, &anchor);
            assert!(d < last, "{kind} μ = {mu}: distance {d} not below {last}");
            last = d;
        }
        // 12 steps with lr·μ = 1 contract most of the way to the anchor.
        assert!(last < 0.2 * start, "{kind}: {last} of {start}");
    }
}

#[test]
fn bad_proximal_or_gradient_input_is_a_typed_error() {
    let data = local(10, 0);
    let device = Device::flex();
    let cfg = TrainConfig {
        epochs: 1,
        batch_size: 5,
        lr: 0.01,
        momentum: 0.0,
        seed: 0,
        threads: 1,
    };
    let p = Params::init(ModelKind::LeNet5, 0);
    let mlp = Params::init(ModelKind::Mlp, 0);
    for threads in [0, MAX_TRAIN_THREADS + 1] {
        assert!(matches!(
            train_local(&p, &data, &TrainConfig { threads, ..cfg }, &device),
            Err(TrainError::InvalidConfig(_))
        ));
    }
    let short = Params {
        model: ModelKind::LeNet5,
        values: vec![0.0; 10],
    };
    let mut nan = p.clone();
    nan.values[3] = f32::NAN;
    let train = |anchor: &Params, mu: f64| {
        train_local_prox(&p, &data, &cfg, Some(Proximal { anchor, mu }), &device)
    };
    for (anchor, what) in [(&mlp, "other model"), (&short, "wrong length")] {
        match train(anchor, 0.1) {
            Err(TrainError::AnchorMismatch {
                model,
                expected,
                anchor_model,
                got,
            }) => {
                assert_eq!((model, expected), (ModelKind::LeNet5, 44426), "{what}");
                assert_eq!((anchor_model, got), (anchor.model, anchor.values.len()));
            }
            other => panic!("{what}: {other:?}"),
        }
    }
    assert!(matches!(
        train(&nan, 0.1),
        Err(TrainError::InvalidConfig(_))
    ));
    for mu in [-0.1, f64::NAN, f64::INFINITY] {
        assert!(
            matches!(train(&p, mu), Err(TrainError::InvalidConfig(_))),
            "μ = {mu}"
        );
    }
    // Parameters that do not fit their model.
    assert!(matches!(
        train_local_prox(&short, &data, &cfg, None, &device),
        Err(TrainError::InvalidParams(_))
    ));
    assert!(matches!(
        gradient(&short, &data, 5, &device),
        Err(TrainError::InvalidParams(_))
    ));
    // The gradient needs samples and a batch size.
    assert!(matches!(
        gradient(&p, &LocalData::default(), 5, &device),
        Err(TrainError::NoData)
    ));
    assert!(matches!(
        gradient(&p, &data, 0, &device),
        Err(TrainError::InvalidConfig(_))
    ));
}
