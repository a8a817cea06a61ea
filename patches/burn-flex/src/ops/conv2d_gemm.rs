//! edgecfl patch (not in burn-flex 0.22.1): 2-D convolution training as im2col + gemm, and a
//! max pool whose window equals its stride.
//!
//! burn-backend's default `conv2d_weight_backward` expresses the weight gradient as a convolution
//! whose kernel is the whole output gradient (batch and channels swapped), and
//! `conv2d_x_backward` as a transposed convolution; flex ran both, and small forward
//! convolutions, through its generic 3-D paths, and max pooling through a per-element 3-D
//! window search. For LeNet-5's layers (1-16 channels, 5×5 kernels, 8-24 pixel maps) these were
//! three quarters of a training step. Here, per sample `b` and group, with
//! `K = C_in/groups · kh · kw` and `P = out_h · out_w`, and `C_b` the `K × P` im2col matrix:
//!
//! ```text
//! forward  Y_b[O, P]  = W[O, K] · C_b[K, P] + bias
//! weight   dW[O, K]   = Σ_b dY_b[O, P] · C_b[K, P]ᵀ     (summed in sample order)
//! input    dX_b       = col2im(W[O, K]ᵀ · dY_b[O, P])
//! ```
//!
//! Any stride, dilation, groups and (asymmetric) padding; f32 and f64 natively, f16 and bf16
//! through f32. The weight gradient sums fixed chunks of 8 samples in parallel and adds the
//! chunks in order, so results do not depend on the thread count or on scheduling.

use alloc::vec;
use alloc::vec::Vec;

use burn_backend::DType;
use burn_backend::ops::ConvOptions;
use burn_std::{Bytes, Shape};
use bytemuck::Pod;
use num_traits::Float;

use crate::ops::module::{cast_from_f32, cast_to_f32};
use crate::{FlexTensor, Layout};

/// Samples per partial weight gradient (fixed, so the sum's order never depends on threads).
const WEIGHT_GRAD_CHUNK: usize = 8;

/// Forward convolutions with at most this many im2col elements per sample use [`conv2d`];
/// larger ones keep flex's tiled paths.
pub const FORWARD_MAX_COLS: usize = 1 << 18;

/// The geometry of one 2-D convolution.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    batch: usize,
    c_in: usize,
    in_h: usize,
    in_w: usize,
    c_out: usize,
    groups: usize,
    kh: usize,
    kw: usize,
    out_h: usize,
    out_w: usize,
    stride: [usize; 2],
    pad: [usize; 2],
    dilation: [usize; 2],
}

impl Geometry {
    fn new(x: &[usize], w: &[usize], out_hw: [usize; 2], options: &ConvOptions<2>) -> Self {
        Geometry {
            batch: x[0],
            c_in: x[1],
            in_h: x[2],
            in_w: x[3],
            c_out: w[0],
            groups: options.groups,
            kh: w[2],
            kw: w[3],
            out_h: out_hw[0],
            out_w: out_hw[1],
            stride: options.stride,
            pad: options.padding_begin(),
            dilation: options.dilation,
        }
    }
    /// Input channels per group.
    fn cg(&self) -> usize {
        self.c_in / self.groups
    }
    /// Output channels per group.
    fn og(&self) -> usize {
        self.c_out / self.groups
    }
    /// Rows of one group's im2col matrix.
    fn k(&self) -> usize {
        self.cg() * self.kh * self.kw
    }
    /// Output pixels per channel.
    fn p(&self) -> usize {
        self.out_h * self.out_w
    }
    fn x_len(&self) -> usize {
        self.c_in * self.in_h * self.in_w
    }
    fn y_len(&self) -> usize {
        self.c_out * self.p()
    }

    /// The input row and column a kernel tap reads for an output pixel, if inside the image.
    #[inline]
    fn source(&self, o: usize, k: usize, axis: usize) -> Option<usize> {
        let (n, _) =
            (o * self.stride[axis] + k * self.dilation[axis]).overflowing_sub(self.pad[axis]);
        let size = if axis == 0 { self.in_h } else { self.in_w };
        (n < size).then_some(n)
    }

    /// Whether each output row of each kernel tap reads `out_w` consecutive inputs of one input
    /// row (stride and dilation 1 along a row, no padding before it and the last tap inside it):
    /// then im2col and col2im move whole rows.
    fn whole_rows(&self) -> bool {
        self.stride[1] == 1
            && self.dilation[1] == 1
            && self.pad[1] == 0
            && self.out_w + self.kw <= self.in_w + 1
    }

    /// Fills `cols` (`K × P`, row-major) with group `g` of one sample `x` (`C_in × H × W`).
    fn im2col<T: Float>(&self, x: &[T], g: usize, cols: &mut [T]) {
        let (p, ow, kw, (h, w)) = (self.p(), self.out_w, self.kw, (self.in_h, self.in_w));
        let planes = &x[g * self.cg() * h * w..][..self.cg() * h * w];
        let whole_rows = self.whole_rows();
        for c in 0..self.cg() {
            for i in 0..self.kh {
                // The rows of taps (c, i, 0..kw), P elements each.
                let taps = &mut cols[(c * self.kh + i) * kw * p..][..kw * p];
                for oh in 0..self.out_h {
                    let Some(ih) = self.source(oh, i, 0) else {
                        for row in taps.chunks_mut(p) {
                            row[oh * ow..][..ow].fill(T::zero());
                        }
                        continue;
                    };
                    let src = &planes[(c * h + ih) * w..][..w];
                    if whole_rows {
                        // SAFETY: tap j's part of output row `oh` is taps[j·P + oh·ow..][..ow],
                        // inside `taps` (j < kw, (oh + 1)·ow ≤ P), and it copies src[j..][..ow],
                        // inside `src` (j + ow ≤ kw - 1 + ow ≤ w by `whole_rows`).
                        unsafe {
                            copy_taps(taps.as_mut_ptr().add(oh * ow), p, src.as_ptr(), kw, ow)
                        }
                    } else {
                        for (j, row) in taps.chunks_mut(p).enumerate() {
                            for (o, d) in row[oh * ow..][..ow].iter_mut().enumerate() {
                                *d = self.source(o, j, 1).map_or(T::zero(), |iw| src[iw]);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Adds `cols` (`K × P`) into group `g` of one sample's input gradient `dx` (`C_in × H × W`).
    fn col2im<T: Float>(&self, cols: &[T], g: usize, dx: &mut [T]) {
        let (p, ow) = (self.p(), self.out_w);
        let whole_rows = self.whole_rows();
        for c in 0..self.cg() {
            let plane =
                &mut dx[(g * self.cg() + c) * self.in_h * self.in_w..][..self.in_h * self.in_w];
            for i in 0..self.kh {
                for j in 0..self.kw {
                    let row = &cols[((c * self.kh + i) * self.kw + j) * p..][..p];
                    // Output row after output row, so that consecutive adds touch different input
                    // rows (taps j and j + 1 of one row overlap, and a read of what the previous
                    // add just stored, shifted by one element, stalls).
                    for oh in 0..self.out_h {
                        let Some(ih) = self.source(oh, i, 0) else {
                            continue;
                        };
                        let dst = &mut plane[ih * self.in_w..][..self.in_w];
                        let src = &row[oh * ow..][..ow];
                        if whole_rows {
                            for (d, &v) in dst[j..j + ow].iter_mut().zip(src) {
                                *d = *d + v;
                            }
                        } else {
                            for (o, &v) in src.iter().enumerate() {
                                if let Some(iw) = self.source(o, j, 1) {
                                    dst[iw] = dst[iw] + v;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `dst[j·stride + t] = src[j + t]` for `j < taps`, `t < n`: the rows of im2col (8-24 elements
/// in LeNet), in blocks of 8 the compiler keeps inline; bounds are checked once by the caller,
/// as a `memcpy` call or a bounds check per row cost as much as the copy.
///
/// # Safety
/// `dst` must be valid for writes and `src` for reads at every offset named above, and the two
/// must not overlap.
#[inline(always)]
unsafe fn copy_taps<T: Copy>(dst: *mut T, stride: usize, src: *const T, taps: usize, n: usize) {
    for j in 0..taps {
        // SAFETY: the caller's contract, offset by offset.
        unsafe {
            let (d, s) = (dst.add(j * stride), src.add(j));
            let mut t = 0;
            while t + 8 <= n {
                let block = s.add(t).cast::<[T; 8]>().read_unaligned();
                d.add(t).cast::<[T; 8]>().write_unaligned(block);
                t += 8;
            }
            for t in t..n {
                *d.add(t) = *s.add(t);
            }
        }
    }
}

/// `dst (m × n) = [dst +] lhs (m × k) · rhs (k × n)`, each with explicit (column, row) strides
/// (see `gemm::gemm`).
#[allow(clippy::too_many_arguments)]
#[inline]
fn gemm<T: Float + 'static>(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [T],
    dst_cs: usize,
    dst_rs: usize,
    accumulate: bool,
    lhs: &[T],
    lhs_cs: usize,
    lhs_rs: usize,
    rhs: &[T],
    rhs_cs: usize,
    rhs_rs: usize,
) {
    // The slices hold every element the strides reach (checked by the callers' shapes).
    debug_assert!(m == 0 || n == 0 || dst.len() > (m - 1) * dst_rs + (n - 1) * dst_cs);
    debug_assert!(m == 0 || k == 0 || lhs.len() > (m - 1) * lhs_rs + (k - 1) * lhs_cs);
    debug_assert!(n == 0 || k == 0 || rhs.len() > (k - 1) * rhs_rs + (n - 1) * rhs_cs);
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            dst_cs as isize,
            dst_rs as isize,
            accumulate,
            lhs.as_ptr(),
            lhs_cs as isize,
            lhs_rs as isize,
            rhs.as_ptr(),
            rhs_cs as isize,
            rhs_rs as isize,
            T::one(),
            T::one(),
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// Runs `f(scratch, index, item)` over the `len`-element items of `items`, on rayon's pool when
/// the `rayon` feature is on; `scratch` comes from `init`, once per worker, not once per item.
fn for_each_sample<T: Send, S, I, F>(items: &mut [T], len: usize, init: I, f: F)
where
    I: Fn() -> S + Sync + Send,
    F: Fn(&mut S, usize, &mut [T]) + Sync + Send,
{
    if len == 0 {
        return;
    }
    #[cfg(feature = "rayon")]
    {
        use rayon::prelude::*;
        items
            .par_chunks_mut(len)
            .enumerate()
            .for_each_init(init, |scratch, (b, s)| f(scratch, b, s));
    }
    #[cfg(not(feature = "rayon"))]
    {
        let mut scratch = init();
        for (b, s) in items.chunks_mut(len).enumerate() {
            f(&mut scratch, b, s);
        }
    }
}

fn forward_impl<T: Float + Pod + Send + Sync + 'static>(
    g: Geometry,
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
) -> Vec<T> {
    let (k, p, og) = (g.k(), g.p(), g.og());
    let mut y = vec![T::zero(); g.batch * g.y_len()];
    // Every element of `cols` is written before it is read, so one buffer serves all samples.
    let cols = || vec![T::zero(); k * p];
    for_each_sample(&mut y, g.y_len(), cols, |cols, b, y_b| {
        let x_b = &x[b * g.x_len()..][..g.x_len()];
        for grp in 0..g.groups {
            g.im2col(x_b, grp, cols);
            // Y_gᵀ[P, og] = C[K, P]ᵀ · W_g[og, K]ᵀ: P, the long side, runs along the kernel's
            // vector lanes. Element (p, o) of Y_gᵀ sits at y[o·P + p], of Cᵀ at cols[k·P + p],
            // of W_gᵀ at w[o·K + k].
            let y_g = &mut y_b[grp * og * p..][..og * p];
            let w_g = &w[grp * og * k..][..og * k];
            gemm(p, og, k, y_g, p, 1, false, cols, p, 1, w_g, k, 1);
        }
        if let Some(bias) = bias {
            for (row, &v) in y_b.chunks_mut(p).zip(bias) {
                row.iter_mut().for_each(|y| *y = *y + v);
            }
        }
    });
    y
}

fn weight_grad_impl<T: Float + Pod + Send + Sync + 'static>(
    g: Geometry,
    x: &[T],
    dy: &[T],
) -> Vec<T> {
    let (k, p, og) = (g.k(), g.p(), g.og());
    let w_len = g.c_out * k;
    let chunks = g.batch.div_ceil(WEIGHT_GRAD_CHUNK);
    let mut partial = vec![T::zero(); chunks.max(1) * w_len];
    let cols = || vec![T::zero(); k * p];
    for_each_sample(&mut partial, w_len, cols, |cols, chunk, dw| {
        let first = chunk * WEIGHT_GRAD_CHUNK;
        for b in first..(first + WEIGHT_GRAD_CHUNK).min(g.batch) {
            let x_b = &x[b * g.x_len()..][..g.x_len()];
            let dy_b = &dy[b * g.y_len()..][..g.y_len()];
            for grp in 0..g.groups {
                g.im2col(x_b, grp, cols);
                // dW_gᵀ[K, og] += C[K, P] · dY_g[og, P]ᵀ: K runs along the vector lanes.
                // Element (k, o) of dW_gᵀ sits at dw[o·K + k], (p, o) of dY_gᵀ at dy[o·P + p].
                let dw_g = &mut dw[grp * og * k..][..og * k];
                let dy_g = &dy_b[grp * og * p..][..og * p];
                gemm(k, og, p, dw_g, k, 1, b > first, cols, 1, p, dy_g, p, 1);
            }
        }
    });
    let (first, rest) = partial.split_at_mut(w_len);
    for part in rest.chunks(w_len) {
        first.iter_mut().zip(part).for_each(|(a, &b)| *a = *a + b);
    }
    partial.truncate(w_len);
    partial
}

fn x_grad_impl<T: Float + Pod + Send + Sync + 'static>(g: Geometry, w: &[T], dy: &[T]) -> Vec<T> {
    let (k, p, og) = (g.k(), g.p(), g.og());
    let mut dx = vec![T::zero(); g.batch * g.x_len()];
    let cols = || vec![T::zero(); k * p];
    for_each_sample(&mut dx, g.x_len(), cols, |cols, b, dx_b| {
        let dy_b = &dy[b * g.y_len()..][..g.y_len()];
        for grp in 0..g.groups {
            // C[K, P] = W_g[og, K]ᵀ · dY_g[og, P]: lhs element (k, o) sits at w[o·K + k].
            let w_g = &w[grp * og * k..][..og * k];
            let dy_g = &dy_b[grp * og * p..][..og * p];
            gemm(k, p, og, cols, 1, p, false, w_g, k, 1, dy_g, 1, p);
            g.col2im(cols, grp, dx_b);
        }
    });
    dx
}

/// The dtype-dispatching wrapper: f32/f64 natively, f16/bf16 through f32.
fn dispatch(
    tensors: Vec<FlexTensor>,
    shape: Shape,
    f32_op: impl Fn(&[&[f32]]) -> Vec<f32>,
    f64_op: impl Fn(&[&[f64]]) -> Vec<f64>,
) -> Option<FlexTensor> {
    let dtype = tensors[0].dtype();
    if tensors.iter().any(|t| t.dtype() != dtype) {
        return None;
    }
    let tensors: Vec<FlexTensor> = tensors.iter().map(FlexTensor::to_contiguous).collect();
    let build = |bytes, dtype| FlexTensor::new(bytes, Layout::contiguous(shape.clone()), dtype);
    match dtype {
        DType::F32 => {
            let s: Vec<&[f32]> = tensors.iter().map(|t| t.storage()).collect();
            Some(build(Bytes::from_elems(f32_op(&s)), DType::F32))
        }
        DType::F64 => {
            let s: Vec<&[f64]> = tensors.iter().map(|t| t.storage()).collect();
            Some(build(Bytes::from_elems(f64_op(&s)), DType::F64))
        }
        DType::F16 | DType::BF16 => {
            let wide: Vec<FlexTensor> = tensors
                .into_iter()
                .map(|t| match dtype {
                    DType::F16 => cast_to_f32(t, half::f16::to_f32),
                    _ => cast_to_f32(t, half::bf16::to_f32),
                })
                .collect();
            let s: Vec<&[f32]> = wide.iter().map(|t| t.storage()).collect();
            let out = build(Bytes::from_elems(f32_op(&s)), DType::F32);
            Some(match dtype {
                DType::F16 => cast_from_f32(out, half::f16::from_f32),
                _ => cast_from_f32(out, half::bf16::from_f32),
            })
        }
        _ => None,
    }
}

fn out_size(input: usize, k: usize, stride: usize, pad: (usize, usize), dilation: usize) -> usize {
    let span = dilation * (k - 1) + 1;
    (input + pad.0 + pad.1).saturating_sub(span) / stride + 1
}

/// The forward convolution, or `None` where flex's own paths are better (large per-sample
/// im2col) or cannot be matched (mixed dtypes, empty kernels).
pub fn conv2d(
    x: &FlexTensor,
    weight: &FlexTensor,
    bias: Option<&FlexTensor>,
    options: &ConvOptions<2>,
) -> Option<FlexTensor> {
    let (xs, ws) = (x.layout().shape().clone(), weight.layout().shape().clone());
    if ws[2] == 0 || ws[3] == 0 || options.groups == 0 || options.stride.contains(&0) {
        return None;
    }
    let span = |a: usize| options.dilation[a] * (ws[2 + a] - 1) + 1;
    if xs[2] + options.padding[0].0 + options.padding[0].1 < span(0)
        || xs[3] + options.padding[1].0 + options.padding[1].1 < span(1)
    {
        return None;
    }
    let out = [0, 1].map(|a| {
        out_size(
            xs[2 + a],
            ws[2 + a],
            options.stride[a],
            options.padding[a],
            options.dilation[a],
        )
    });
    let g = Geometry::new(&xs, &ws, out, options);
    if g.k() * g.p() > FORWARD_MAX_COLS {
        return None;
    }
    let mut tensors = vec![x.clone(), weight.clone()];
    tensors.extend(bias.cloned());
    let shape = Shape::from(vec![g.batch, g.c_out, g.out_h, g.out_w]);
    dispatch(
        tensors,
        shape,
        |t| forward_impl(g, t[0], t[1], t.get(2).copied()),
        |t| forward_impl(g, t[0], t[1], t.get(2).copied()),
    )
}

/// A backward pass's geometry (the output size read off the output gradient), with the input's
/// and the weight's shapes.
fn backward_geometry(
    x: &FlexTensor,
    weight: &FlexTensor,
    output_grad: &FlexTensor,
    options: &ConvOptions<2>,
) -> (Geometry, Shape, Shape) {
    let (xs, ws) = (x.layout().shape().clone(), weight.layout().shape().clone());
    let ys = output_grad.layout().shape();
    (Geometry::new(&xs, &ws, [ys[2], ys[3]], options), xs, ws)
}

/// The gradient of the convolution's weight, or `None` for dtypes it does not handle.
pub fn conv2d_weight_backward(
    x: &FlexTensor,
    weight: &FlexTensor,
    output_grad: &FlexTensor,
    options: &ConvOptions<2>,
) -> Option<FlexTensor> {
    let (g, _, ws) = backward_geometry(x, weight, output_grad, options);
    dispatch(
        vec![x.clone(), output_grad.clone()],
        ws,
        |t| weight_grad_impl(g, t[0], t[1]),
        |t| weight_grad_impl(g, t[0], t[1]),
    )
}

/// The gradient of the convolution's input, or `None` for dtypes it does not handle.
pub fn conv2d_x_backward(
    x: &FlexTensor,
    weight: &FlexTensor,
    output_grad: &FlexTensor,
    options: &ConvOptions<2>,
) -> Option<FlexTensor> {
    let (g, xs, _) = backward_geometry(x, weight, output_grad, options);
    dispatch(
        vec![weight.clone(), output_grad.clone()],
        xs,
        |t| x_grad_impl(g, t[0], t[1]),
        |t| x_grad_impl(g, t[0], t[1]),
    )
}

/// The gradient of the convolution's bias for f32, `db[o] = Σ_b Σ_p dY[b, o, p]`; `None` for
/// other dtypes.
///
/// burn-backend's default swaps the output gradient to `[O, B, H, W]`, copies it contiguous and
/// sums each channel's row front to back (flex's row sum without its `simd` feature). This adds
/// the same numbers in the same order (each channel: sample after sample, pixel after pixel), so
/// the result is bit-identical, but reads the output gradient where it lies and sums up to eight
/// channels side by side, so that their additions overlap instead of waiting on one another.
pub fn conv2d_bias_backward(output_grad: &FlexTensor) -> Option<FlexTensor> {
    if output_grad.dtype() != DType::F32 {
        return None;
    }
    let shape = output_grad.layout().shape().clone();
    let (c_out, p) = (shape[1], shape[2] * shape[3]);
    let dy = output_grad.to_contiguous();
    let dy: &[f32] = dy.storage();
    // The value an empty `Iterator::sum` starts from, as the default's row sum does.
    let mut db = vec![core::iter::empty::<f32>().sum::<f32>(); c_out];
    if c_out * p > 0 {
        for dy_b in dy.chunks_exact(c_out * p) {
            let mut o = 0;
            while o < c_out {
                let (acc, rows) = (&mut db[o..], &dy_b[o * p..]);
                o += match c_out - o {
                    8.. => add_rows::<8>(acc, rows, p),
                    4..=7 => add_rows::<4>(acc, rows, p),
                    2 | 3 => add_rows::<2>(acc, rows, p),
                    _ => add_rows::<1>(acc, rows, p),
                };
            }
        }
    }
    let bytes = Bytes::from_elems(db);
    Some(FlexTensor::new(
        bytes,
        Layout::contiguous(Shape::from(vec![c_out])),
        DType::F32,
    ))
}

/// Adds the first `N` rows of length `p` in `rows` into `acc[..N]`, each front to back; returns
/// `N`.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // `i` indexes N rows at once
fn add_rows<const N: usize>(acc: &mut [f32], rows: &[f32], p: usize) -> usize {
    let mut a: [f32; N] = core::array::from_fn(|r| acc[r]);
    let rows: [&[f32]; N] = core::array::from_fn(|r| &rows[r * p..][..p]);
    for i in 0..p {
        for r in 0..N {
            a[r] += rows[r][i];
        }
    }
    acc[..N].copy_from_slice(&a);
    N
}

/// Max pooling with indices for f32 when the window equals the stride and there is no padding,
/// dilation or ceil mode (LeNet's 2×2/2): the same values and indices (`h · W + w` in the input
/// plane; the first maximum wins, NaN propagates with the last NaN's index) as flex's generic
/// path. `None` for other settings.
pub fn max_pool2d_with_indices_f32(
    x: &FlexTensor,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    ceil_mode: bool,
) -> Option<(FlexTensor, FlexTensor)> {
    if x.dtype() != DType::F32
        || kernel != stride
        || padding != [0, 0]
        || dilation != [1, 1]
        || ceil_mode
        || kernel.contains(&0)
    {
        return None;
    }
    let x = x.to_contiguous();
    let s = x.layout().shape().clone();
    let (planes, in_h, in_w) = (s[0] * s[1], s[2], s[3]);
    let [kh, kw] = kernel;
    if in_h < kh || in_w < kw {
        return None;
    }
    let (out_h, out_w) = (in_h / kh, in_w / kw);
    let xd: &[f32] = x.storage();
    let plane_out = out_h * out_w;
    let mut out = vec![0f32; planes * plane_out];
    let mut idx = vec![0i64; planes * plane_out];
    {
        let mut pairs: Vec<(&mut [f32], &mut [i64])> = out
            .chunks_mut(plane_out.max(1))
            .zip(idx.chunks_mut(plane_out.max(1)))
            .collect();
        let pool_plane = |pl: usize, (o, ix): &mut (&mut [f32], &mut [i64])| {
            let src = &xd[pl * in_h * in_w..][..in_h * in_w];
            // Planes with a NaN take the general loop (NaN's index rule); the rest the 2×2 one.
            if kernel == [2, 2] && src.iter().fold(0u32, |n, v| n | u32::from(v.is_nan())) == 0 {
                pool_2x2(src, in_w, out_h, out_w, o, ix);
                return;
            }
            for oh in 0..out_h {
                for ow in 0..out_w {
                    let first = oh * kh * in_w + ow * kw;
                    let (mut best, mut at) = (src[first], first);
                    for i in 0..kh {
                        let base = (oh * kh + i) * in_w + ow * kw;
                        for (j, &v) in src[base..base + kw].iter().enumerate() {
                            // Branch-free select (the comparison is a coin flip on real
                            // data); NaN wins, so a later NaN replaces an earlier one.
                            let take = (v > best) | v.is_nan();
                            best = if take { v } else { best };
                            at = if take { base + j } else { at };
                        }
                    }
                    o[oh * out_w + ow] = best;
                    ix[oh * out_w + ow] = at as i64;
                }
            }
        };
        #[cfg(feature = "rayon")]
        {
            use rayon::prelude::*;
            pairs
                .par_iter_mut()
                .enumerate()
                .for_each(|(pl, pair)| pool_plane(pl, pair));
        }
        #[cfg(not(feature = "rayon"))]
        for (pl, pair) in pairs.iter_mut().enumerate() {
            pool_plane(pl, pair);
        }
    }
    let shape = Shape::from(vec![s[0], s[1], out_h, out_w]);
    Some((
        FlexTensor::new(
            Bytes::from_elems(out),
            Layout::contiguous(shape.clone()),
            DType::F32,
        ),
        FlexTensor::new(
            Bytes::from_elems(idx),
            Layout::contiguous(shape),
            DType::I64,
        ),
    ))
}

/// One plane of the 2×2/2 max pool without NaN: the maximum of the four corners, then the
/// first corner (reading order) equal to it, which is the general loop's choice (the first
/// maximum wins). Written as selects on whole rows so that the compiler vectorises them.
fn pool_2x2(src: &[f32], in_w: usize, out_h: usize, out_w: usize, o: &mut [f32], ix: &mut [i64]) {
    let row_step = in_w as i64;
    for oh in 0..out_h {
        let r0 = &src[2 * oh * in_w..][..2 * out_w];
        let r1 = &src[(2 * oh + 1) * in_w..][..2 * out_w];
        let o_row = &mut o[oh * out_w..][..out_w];
        let ix_row = &mut ix[oh * out_w..][..out_w];
        let (top, bottom) = (r0.chunks_exact(2), r1.chunks_exact(2));
        for (((t, b), y), i) in top.zip(bottom).zip(o_row.iter_mut()).zip(ix_row.iter_mut()) {
            let (a, b2, c, d) = (t[0], t[1], b[0], b[1]);
            let ab = if b2 > a { b2 } else { a };
            let cd = if d > c { d } else { c };
            let m = if cd > ab { cd } else { ab };
            // Corner 0..3 of the first maximum (row offset corner / 2, column corner % 2), as
            // arithmetic on 0/1 flags: branches here would defeat vectorisation.
            let not = |v: f32| u32::from(v != m);
            let corner = not(a) * (1 + not(b2) * (1 + not(c)));
            *y = m;
            *i = i64::from(corner & 1) + if corner >= 2 { row_step } else { 0 };
        }
        // The window's top-left offset in the plane, added once per row.
        for (ow, i) in ix_row.iter_mut().enumerate() {
            *i += (2 * oh * in_w + 2 * ow) as i64;
        }
    }
}
