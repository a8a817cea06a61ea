//! The patched burn-flex kernels (`patches/burn-flex`, `src/ops/conv2d_gemm.rs`) against direct
//! loops written here: 2-D convolution forward, its weight, input and bias gradients through
//! burn's autodiff (the bias gradient also bit for bit against burn-backend's default formula,
//! which the patch replaces), and max pooling with indices (and without, as an evaluation runs
//! it), over LeNet-5's shapes and the settings the patch also claims (stride, dilation, groups,
//! symmetric and asymmetric padding, a batch that is not a multiple of the weight gradient's
//! 8-sample chunks, a convolution too large for the patched forward path), and the unpadded
//! forward bit for bit against the inside of the padded one.

use burn::prelude::*;
use burn::tensor::TensorData;
use burn::tensor::module::{conv2d, max_pool2d, max_pool2d_with_indices};
use burn::tensor::ops::{ConvOptions, MaxPoolOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One convolution setting: input [b, c, h, w], weight [o, c/groups, kh, kw].
#[derive(Debug, Clone, Copy)]
struct Case {
    x: [usize; 4],
    w: [usize; 4],
    stride: [usize; 2],
    pad: [(usize, usize); 2],
    dilation: [usize; 2],
    groups: usize,
}

impl Case {
    fn out(&self) -> [usize; 2] {
        [0, 1].map(|a| {
            let span = self.dilation[a] * (self.w[2 + a] - 1) + 1;
            (self.x[2 + a] + self.pad[a].0 + self.pad[a].1 - span) / self.stride[a] + 1
        })
    }
}

/// Elements of a tensor of shape `s`.
fn n(s: [usize; 4]) -> usize {
    s.iter().product()
}

/// The bit patterns of `v`, to compare floats exactly.
fn bits(v: impl IntoIterator<Item = f32>) -> Vec<u32> {
    v.into_iter().map(f32::to_bits).collect()
}

fn random(rng: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// Direct loops in f64: the output, and the gradients of Σ y·r for the weight `r`.
#[allow(clippy::type_complexity)]
fn reference(
    c: &Case,
    x: &[f32],
    w: &[f32],
    bias: &[f32],
    r: &[f32],
) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let [b_n, c_in, h, wd] = c.x;
    let [o_n, cg, kh, kw] = c.w;
    let [oh_n, ow_n] = c.out();
    let og = o_n / c.groups;
    let mut y = vec![0f64; b_n * o_n * oh_n * ow_n];
    let mut dx = vec![0f64; x.len()];
    let mut dw = vec![0f64; w.len()];
    let mut db = vec![0f64; o_n];
    for b in 0..b_n {
        for o in 0..o_n {
            let g = o / og;
            for oh in 0..oh_n {
                for ow in 0..ow_n {
                    let yi = ((b * o_n + o) * oh_n + oh) * ow_n + ow;
                    let mut acc = f64::from(bias[o]);
                    let rv = f64::from(r[yi]);
                    db[o] += rv;
                    for ci in 0..cg {
                        let cx = g * cg + ci;
                        for i in 0..kh {
                            for j in 0..kw {
                                let ih = (oh * c.stride[0] + i * c.dilation[0]) as isize
                                    - c.pad[0].0 as isize;
                                let iw = (ow * c.stride[1] + j * c.dilation[1]) as isize
                                    - c.pad[1].0 as isize;
                                if ih < 0 || iw < 0 || ih >= h as isize || iw >= wd as isize {
                                    continue;
                                }
                                let xi = ((b * c_in + cx) * h + ih as usize) * wd + iw as usize;
                                let wi = ((o * cg + ci) * kh + i) * kw + j;
                                acc += f64::from(w[wi]) * f64::from(x[xi]);
                                dw[wi] += rv * f64::from(x[xi]);
                                dx[xi] += rv * f64::from(w[wi]);
                            }
                        }
                    }
                    y[yi] = acc;
                }
            }
        }
    }
    (y, dx, dw, db)
}

fn assert_close(what: &str, case: &Case, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what} length, {case:?}");
    let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (f64::from(g) - w).abs() <= 1e-5 * scale,
            "{what}[{i}] = {g}, direct loops give {w} ({case:?})"
        );
    }
}

fn check(case: Case, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let [oh, ow] = case.out();
    let y_shape = [case.x[0], case.w[0], oh, ow];
    let (x, w) = (random(&mut rng, n(case.x)), random(&mut rng, n(case.w)));
    let (bias, r) = (random(&mut rng, case.w[0]), random(&mut rng, n(y_shape)));
    let (y_ref, dx_ref, dw_ref, db_ref) = reference(&case, &x, &w, &bias, &r);

    let device = Device::flex().autodiff();
    let xt = Tensor::<4>::from_data(TensorData::new(x, case.x), &device).require_grad();
    let wt = Tensor::<4>::from_data(TensorData::new(w, case.w), &device).require_grad();
    let bt = Tensor::<1>::from_data(TensorData::new(bias, [case.w[0]]), &device).require_grad();
    let rt = Tensor::<4>::from_data(TensorData::new(r, y_shape), &device);
    // burn-backend's default bias gradient, which the patch replaces: the output gradient (here
    // `r`) swapped to [O, B, H, W] and each channel's row summed.
    let db_default = rt
        .clone()
        .swap_dims(0, 1)
        .reshape([case.w[0], case.x[0] * oh * ow])
        .sum_dim(1);
    let options = ConvOptions::new_with_padding(case.stride, case.pad, case.dilation, case.groups);
    let y = conv2d(xt.clone(), wt.clone(), Some(bt.clone()), options);
    assert_eq!(y.dims(), y_shape, "{case:?}");
    let values = |t: Tensor<4>| t.into_data().iter::<f32>().collect::<Vec<_>>();
    assert_close("y", &case, &values(y.clone()), &y_ref);
    let grads = (y * rt).sum().backward();
    let dx = xt.grad(&grads).expect("x gradient");
    let dw = wt.grad(&grads).expect("weight gradient");
    let db = bt.grad(&grads).expect("bias gradient");
    assert_close("dx", &case, &values(dx), &dx_ref);
    assert_close("dw", &case, &values(dw), &dw_ref);
    let db = db.into_data().iter::<f32>().collect::<Vec<_>>();
    assert_close("db", &case, &db, &db_ref);
    // The same additions in the same order as the default: bit for bit its result.
    let db_default = db_default.into_data().iter::<f32>().collect::<Vec<_>>();
    assert_eq!(
        bits(db),
        bits(db_default),
        "db against the default, {case:?}"
    );
}

fn plain(x: [usize; 4], w: [usize; 4]) -> Case {
    Case {
        x,
        w,
        stride: [1, 1],
        pad: [(0, 0), (0, 0)],
        dilation: [1, 1],
        groups: 1,
    }
}

#[test]
fn lenet5_convolutions_match_direct_loops() {
    // conv1 and conv2 of LeNet-5; 17 samples: two full 8-sample chunks and one of 1.
    check(plain([17, 1, 28, 28], [6, 1, 5, 5]), 1);
    check(plain([3, 6, 12, 12], [16, 6, 5, 5]), 2);
}

#[test]
fn strided_padded_dilated_grouped_convolutions_match_direct_loops() {
    let base = plain([2, 4, 11, 9], [6, 4, 3, 3]);
    check(
        Case {
            stride: [2, 3],
            pad: [(1, 1), (2, 2)],
            ..base
        },
        3,
    );
    check(
        Case {
            pad: [(0, 2), (1, 0)],
            dilation: [2, 1],
            ..base
        },
        4,
    );
    check(
        Case {
            w: [6, 2, 3, 3],
            groups: 2,
            stride: [1, 2],
            ..base
        },
        5,
    );
    // Padding only after each row: the last taps read past the row's end.
    check(
        Case {
            pad: [(0, 0), (0, 2)],
            ..base
        },
        9,
    );
    // 1×1 kernel, one output pixel row.
    check(plain([9, 3, 1, 7], [2, 3, 1, 1]), 6);
    // 11 output channels: the bias gradient sums them in blocks of 8, 2 and 1.
    check(plain([5, 2, 6, 6], [11, 2, 3, 3]), 8);
}

/// The forward convolution without padding (im2col copying whole rows of taps) against the
/// interior of the same convolution padded by one on every side (im2col tap by tap, padding
/// checked per element), bit for bit: an interior output reads no padding, so both must hand
/// gemm the same taps in the same order.
fn check_unpadded_against_padded(x: [usize; 4], w: [usize; 4], groups: usize, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let device = Device::flex();
    let xt = Tensor::<4>::from_data(TensorData::new(random(&mut rng, n(x)), x), &device);
    let wt = Tensor::<4>::from_data(TensorData::new(random(&mut rng, n(w)), w), &device);
    let bt = Tensor::<1>::from_data(TensorData::new(random(&mut rng, w[0]), [w[0]]), &device);
    let pad = |p| ConvOptions::new_with_padding([1, 1], [(p, p), (p, p)], [1, 1], groups);
    let unpadded = conv2d(xt.clone(), wt.clone(), Some(bt.clone()), pad(0));
    let [b, o, oh, ow] = unpadded.dims();
    let padded = conv2d(xt, wt, Some(bt), pad(1)).slice([0..b, 0..o, 1..oh + 1, 1..ow + 1]);
    let values = |t: Tensor<4>| t.into_data().iter::<f32>().collect::<Vec<_>>();
    assert_eq!(
        bits(values(unpadded)),
        bits(values(padded)),
        "x {x:?}, w {w:?}, groups {groups}"
    );
}

#[test]
fn unpadded_forward_equals_the_padded_forward_inside_bit_for_bit() {
    // LeNet-5's two convolutions.
    check_unpadded_against_padded([5, 1, 28, 28], [6, 1, 5, 5], 1, 10);
    check_unpadded_against_padded([5, 6, 12, 12], [16, 6, 5, 5], 1, 11);
    // Output rows of 3 pixels (whole-row copies of 3 elements), two groups, and a 1×1 kernel
    // over rows of 19 pixels (copies of 8 + 8 + 3).
    check_unpadded_against_padded([3, 4, 13, 5], [11, 4, 3, 3], 1, 12);
    check_unpadded_against_padded([2, 4, 9, 9], [6, 2, 3, 2], 2, 13);
    check_unpadded_against_padded([2, 3, 4, 19], [5, 3, 1, 1], 1, 14);
}

#[test]
fn large_convolution_keeps_flex_forward_and_patched_gradients() {
    // 3·7·7 × 58·58 im2col elements per sample: above the patched forward's limit (2^18).
    check(plain([2, 3, 64, 64], [4, 3, 7, 7]), 7);
}

#[test]
fn max_pool_values_indices_and_gradient_match_direct_loops() {
    let device = Device::flex().autodiff();
    // (shape, window, seed, NaN): 2×2 without NaN takes the patch's 2×2 loop; planes with a NaN
    // and other windows take its general loop.
    let cases = [
        ([3, 6, 24, 24], 2, 8u64, false),
        ([2, 3, 8, 8], 2, 10, true),
        ([2, 2, 7, 8], 3, 9, true),
    ];
    for (shape, k, seed, nan) in cases {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // Values from a small set, so windows hold ties: the first maximum must win. With NaN,
        // one value in 20 is NaN: NaN wins, and the last NaN of a window gives the index.
        let x: Vec<f32> = (0..shape.iter().product())
            .map(|_| match rng.random_range(0u8..40) {
                38 | 39 if nan => f32::NAN,
                v => f32::from(v % 4),
            })
            .collect();
        let xt = Tensor::<4>::from_data(TensorData::new(x.clone(), shape), &device).require_grad();
        let (y, idx) = max_pool2d_with_indices(xt.clone(), MaxPoolOptions::new([k, k]));
        let [b_n, c_n, h, w] = shape;
        let (oh_n, ow_n) = (h / k, w / k);
        assert_eq!(y.dims(), [b_n, c_n, oh_n, ow_n]);
        let yv: Vec<f32> = y.clone().into_data().iter::<f32>().collect();
        let iv: Vec<i64> = idx.into_data().iter::<i64>().collect();
        // Without autodiff (an evaluation), `max_pool2d` alone: the same values, bit for bit.
        let plain = Tensor::<4>::from_data(TensorData::new(x.clone(), shape), &Device::flex());
        let yp: Vec<u32> = max_pool2d(plain, MaxPoolOptions::new([k, k]))
            .into_data()
            .iter::<f32>()
            .map(f32::to_bits)
            .collect();
        assert_eq!(yp, yv.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        let mut dx_ref = vec![0f32; x.len()];
        for plane in 0..b_n * c_n {
            for oh in 0..oh_n {
                for ow in 0..ow_n {
                    let (mut best, mut at) = (f32::NEG_INFINITY, usize::MAX);
                    for i in 0..k {
                        for j in 0..k {
                            let p = (oh * k + i) * w + ow * k + j;
                            let v = x[plane * h * w + p];
                            if at == usize::MAX || v > best || v.is_nan() {
                                best = x[plane * h * w + p];
                                at = p;
                            }
                        }
                    }
                    let o = (plane * oh_n + oh) * ow_n + ow;
                    assert_eq!(yv[o].to_bits(), best.to_bits(), "value at {o}");
                    assert_eq!(iv[o], at as i64, "index at {o}");
                    dx_ref[plane * h * w + at] += 1.0 + o as f32;
                }
            }
        }
        let weights: Vec<f32> = (0..yv.len()).map(|o| 1.0 + o as f32).collect();
        let wt = Tensor::<4>::from_data(TensorData::new(weights, y.dims()), &device);
        let grads = (y * wt).sum().backward();
        let dx: Vec<f32> = xt.grad(&grads).unwrap().into_data().iter::<f32>().collect();
        assert_eq!(dx, dx_ref, "max pool gradient");
    }
}
