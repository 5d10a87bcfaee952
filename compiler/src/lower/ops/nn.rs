//! Neural-network ops kept whole by the decomposition table: softmax/log_softmax, layer
//! norm, batch norm (inference, functional training), dropout, convolution, max pooling.
//! Low-precision inputs are normalised in f32, as PyTorch's CPU kernels accumulate.

use crate::ir::DType;
use crate::ir::Scalar;
use crate::lower::emitter::{Cmp, Emitter, Tv};
use crate::lower::error::{bad, RuleResult};
use crate::lower::legality::Check;
use crate::lower::names::hlo;
use crate::lower::node::{dim, product, NodeCtx, Param};
use crate::lower::ops::reduce::reduce_with;
use crate::lower::param::{BatchNorm, Reduction, Softmax};
use crate::registry::attrs::{
    CHANNELS_LAST, CHANNEL_DIM, COUNT_INCLUDE_PAD, DILATION, DIM, DIVISOR_OVERRIDE, EPS, GROUPS, KERNEL_SIZE, MOMENTUM,
    NORMALIZED_SHAPE, OUTPUT_PADDING, P, PADDING, STRIDE, TRAIN, TRAINING, TRANSPOSED,
};

type R<'c, 'a> = RuleResult<Vec<Tv<'c, 'a>>>;

fn acc_type(d: DType) -> DType {
    if matches!(d, DType::F16 | DType::BF16) {
        DType::F32
    } else {
        d
    }
}

/// Reduces `x` over `axes` and broadcasts the result back to `x`'s shape.
fn reduce_keep<'c, 'a>(e: &Emitter<'c, 'a>, x: &Tv<'c, 'a>, axes: &[usize], kind: Reduction) -> RuleResult<Tv<'c, 'a>> {
    let r = reduce_with(e, x, axes, kind)?;
    let kept: Vec<i64> = (0..x.rank()).map(|i| if axes.contains(&i) { 1 } else { x.dims[i] }).collect();
    let r = e.reshape(&r, &kept)?;
    e.broadcast_to(&r, &x.dims)
}

/// _softmax(self, dim, half_to_float) and _log_softmax: max-subtracted for stability.
pub fn softmax<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let log = n.param::<Softmax>()? == Softmax::Log;
    let out = n.out_dtype();
    let compute = acc_type(out);
    let x = e.convert(n.arg(0)?, compute)?;
    if x.rank() == 0 {
        let v = e.constant(compute, &[], Scalar::F(if log { 0.0 } else { 1.0 }))?;
        return Ok(vec![e.convert(&v, out)?]);
    }
    let d = dim(n.get(DIM)?, x.rank())?;
    let max = reduce_keep(e, &x, &[d], Reduction::Max)?;
    let shifted = e.ew(hlo::SUBTRACT, &[&x, &max], compute)?;
    let ex = e.ew(hlo::EXPONENTIAL, &[&shifted], compute)?;
    let sum = reduce_keep(e, &ex, &[d], Reduction::Sum)?;
    let r = if log {
        let ls = e.ew(hlo::LOG, &[&sum], compute)?;
        e.ew(hlo::SUBTRACT, &[&shifted, &ls], compute)?
    } else {
        e.ew(hlo::DIVIDE, &[&ex, &sum], compute)?
    };
    Ok(vec![e.convert(&r, out)?])
}

/// Applies optional per-channel weight and bias, broadcast from `shape` into `x`'s dims.
fn affine<'c, 'a>(
    e: &Emitter<'c, 'a>,
    x: &Tv<'c, 'a>,
    weight: &Param<'c, 'a, '_>,
    bias: &Param<'c, 'a, '_>,
    shape: &[i64],
) -> RuleResult<Tv<'c, 'a>> {
    let d = x.dtype;
    let mut r = x.clone();
    if let Some(w) = weight.tensor() {
        let w = e.broadcast_to(&e.reshape(&e.convert(w, d)?, shape)?, &x.dims)?;
        r = e.ew(hlo::MULTIPLY, &[&r, &w], d)?;
    }
    if let Some(b) = bias.tensor() {
        let b = e.broadcast_to(&e.reshape(&e.convert(b, d)?, shape)?, &x.dims)?;
        r = e.ew(hlo::ADD, &[&r, &b], d)?;
    }
    Ok(r)
}

/// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd).
pub fn layer_norm<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let ps = n.params(&["input", "weight", "bias"]);
    let Some(input) = ps[0].tensor() else { return bad!("missing input") };
    let norm_rank = n.get(NORMALIZED_SHAPE)?.len();
    let rank = input.rank();
    if norm_rank > rank {
        return bad!("normalized_shape has more dims than the input");
    }
    let compute = acc_type(input.dtype);
    let x = e.convert(input, compute)?;
    let axes: Vec<usize> = (rank - norm_rank..rank).collect();
    let count: i64 = product(axes.iter().map(|&a| x.dims[a]))?;
    let cnt = e.constant(compute, &x.dims, Scalar::I(count))?;
    let mean = e.ew(hlo::DIVIDE, &[&reduce_keep(e, &x, &axes, Reduction::Sum)?, &cnt], compute)?;
    let centered = e.ew(hlo::SUBTRACT, &[&x, &mean], compute)?;
    let sq = e.ew(hlo::MULTIPLY, &[&centered, &centered], compute)?;
    let var = e.ew(hlo::DIVIDE, &[&reduce_keep(e, &sq, &axes, Reduction::Sum)?, &cnt], compute)?;
    let eps = e.constant(compute, &x.dims, Scalar::F(n.get_or(EPS, 1e-5)?))?;
    let rstd = e.ew(hlo::RSQRT, &[&e.ew(hlo::ADD, &[&var, &eps], compute)?], compute)?;
    let normed = e.ew(hlo::MULTIPLY, &[&centered, &rstd], compute)?;
    let wshape: Vec<i64> = x.dims[rank - norm_rank..].to_vec();
    let out = affine(e, &normed, &ps[1], &ps[2], &wshape)?;
    let stat = |t: &Tv<'c, 'a>, i: usize| -> RuleResult<Tv<'c, 'a>> {
        let (d, dims) = &n.results[i];
        // Every element along the normalised axes holds the same statistic: take one slice.
        let lo = vec![0; rank];
        let hi: Vec<i64> = (0..rank).map(|k| if axes.contains(&k) { 1 } else { t.dims[k] }).collect();
        let s = e.slice(t, &lo, &hi, &vec![1; rank])?;
        e.reshape(&e.convert(&s, *d)?, dims)
    };
    Ok(vec![e.convert(&out, n.out_dtype())?, stat(&mean, 1)?, stat(&rstd, 2)?])
}

/// Batch norm over channel dim 1 (or `channel_dim`): inference (`_no_training`), functional training (returns
/// updated running stats) and `_native_batch_norm_legit` (with or without running stats).
pub fn batch_norm<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let no_training = n.param::<BatchNorm>()? == BatchNorm::NoTraining;
    let no_stats = n.node.op().and_then(|o| o.overload.as_deref()) == Some("no_stats");
    let ps = if no_stats {
        n.params(&["input", "weight", "bias"])
    } else {
        n.params(&["input", "weight", "bias", "running_mean", "running_var"])
    };
    let Some(input) = ps[0].tensor() else { return bad!("missing input") };
    let training = !no_training && n.get_or(TRAINING, true)?;
    let momentum = n.get_or(MOMENTUM, 0.1)?;
    let eps = n.get_or(EPS, 1e-5)?;
    let rank = input.rank();
    if rank < 2 {
        return bad!("batch norm needs an input of rank >= 2");
    }
    let compute = acc_type(input.dtype);
    let x = e.convert(input, compute)?;
    // Channels are dim 1 (NCHW), or where the layout pass put them (`channel_dim`).
    let cd = dim(n.get_or(CHANNEL_DIM, 1)?, rank)?;
    let channels = x.dims[cd];
    let cshape: Vec<i64> = (0..rank).map(|i| if i == cd { channels } else { 1 }).collect();
    let axes: Vec<usize> = (0..rank).filter(|&i| i != cd).collect();
    let count: i64 = product(axes.iter().map(|&a| x.dims[a]))?;
    let per_channel = |t: &Tv<'c, 'a>| -> RuleResult<Tv<'c, 'a>> {
        e.broadcast_to(&e.reshape(&e.convert(t, compute)?, &cshape)?, &x.dims)
    };
    let c = |v: f64, dims: &[i64]| e.constant(compute, dims, Scalar::F(v));
    let (mean_b, var_b, batch_stats) = if training || no_stats {
        let cnt = c(count as f64, &x.dims)?;
        let mean = e.ew(hlo::DIVIDE, &[&reduce_keep(e, &x, &axes, Reduction::Sum)?, &cnt], compute)?;
        let centered = e.ew(hlo::SUBTRACT, &[&x, &mean], compute)?;
        let sq = e.ew(hlo::MULTIPLY, &[&centered, &centered], compute)?;
        let var = e.ew(hlo::DIVIDE, &[&reduce_keep(e, &sq, &axes, Reduction::Sum)?, &cnt], compute)?;
        (mean, var, true)
    } else {
        let (Some(rm), Some(rv)) = (ps[3].tensor(), ps[4].tensor()) else {
            return bad!("inference batch norm needs running stats");
        };
        (per_channel(rm)?, per_channel(rv)?, false)
    };
    let rstd = e.ew(hlo::RSQRT, &[&e.ew(hlo::ADD, &[&var_b, &c(eps, &x.dims)?], compute)?], compute)?;
    let centered = e.ew(hlo::SUBTRACT, &[&x, &mean_b], compute)?;
    let normed = e.ew(hlo::MULTIPLY, &[&centered, &rstd], compute)?;
    let out = e.convert(&affine(e, &normed, &ps[1], &ps[2], &cshape)?, n.out_dtype())?;
    // Per-channel vectors [C] of the batch statistics.
    let first = |t: &Tv<'c, 'a>| -> RuleResult<Tv<'c, 'a>> {
        let lo = vec![0; rank];
        let hi: Vec<i64> = (0..rank).map(|i| if i == cd { channels } else { 1 }).collect();
        e.reshape(&e.slice(t, &lo, &hi, &vec![1; rank])?, &[channels])
    };
    let declared = |i: usize, t: Tv<'c, 'a>| -> RuleResult<Tv<'c, 'a>> {
        let (d, dims) = &n.results[i];
        if product(dims.iter().copied())? == 0 {
            return e.constant(*d, dims, Scalar::I(0));
        }
        e.reshape(&e.convert(&t, *d)?, dims)
    };
    let mut outs = vec![out];
    if n.results.len() >= 3 {
        if batch_stats {
            outs.push(declared(1, first(&mean_b)?)?);
            outs.push(declared(2, first(&rstd)?)?);
        } else {
            outs.push(e.constant(n.results[1].0, &n.results[1].1, Scalar::I(0))?);
            outs.push(e.constant(n.results[2].0, &n.results[2].1, Scalar::I(0))?);
        }
    }
    if n.results.len() == 5 {
        let (Some(rm), Some(rv)) = (ps[3].tensor(), ps[4].tensor()) else {
            return bad!("functional batch norm needs running stats");
        };
        let (rm, rv) = (e.convert(rm, compute)?, e.convert(rv, compute)?);
        if training {
            let m = c(momentum, &[channels])?;
            let keep = c(1.0 - momentum, &[channels])?;
            let mean_c = first(&mean_b)?;
            // Running variance uses the unbiased estimate.
            let var_c = first(&var_b)?;
            let unbias = c(count as f64 / ((count - 1).max(1)) as f64, &[channels])?;
            let var_u = e.ew(hlo::MULTIPLY, &[&var_c, &unbias], compute)?;
            let mix = |old: &Tv<'c, 'a>, new: &Tv<'c, 'a>| -> RuleResult<Tv<'c, 'a>> {
                let a = e.ew(hlo::MULTIPLY, &[old, &keep], compute)?;
                let b = e.ew(hlo::MULTIPLY, &[new, &m], compute)?;
                e.ew(hlo::ADD, &[&a, &b], compute)
            };
            outs.push(declared(3, mix(&rm, &mean_c)?)?);
            outs.push(declared(4, mix(&rv, &var_u)?)?);
        } else {
            outs.push(declared(3, rm)?);
            outs.push(declared(4, rv)?);
        }
    }
    if outs.len() != n.results.len() {
        return bad!("batch norm with {} results is not a known form", n.results.len());
    }
    Ok(outs)
}

/// native_dropout(input, p, train) -> (output, mask). With `train` and 0 < p < 1 the mask
/// comes from XLA's RNG (`stablehlo.rng`, fresh each execution): statistically the same
/// as eager's, never bit-identical to it.
pub fn dropout<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let p = n.get_or(P, 0.5)?;
    let train = n.get_or(TRAIN, true)?;
    let dims = x.dims.clone();
    let out = n.out_dtype();
    if !train || p == 0.0 {
        return Ok(vec![e.convert(x, out)?, e.constant(DType::Bool, &dims, Scalar::B(true))?]);
    }
    if p >= 1.0 {
        return Ok(vec![e.constant(out, &dims, Scalar::I(0))?, e.constant(DType::Bool, &dims, Scalar::B(false))?]);
    }
    let lo = e.constant(DType::F32, &[], Scalar::F(0.0))?;
    let hi = e.constant(DType::F32, &[], Scalar::F(1.0))?;
    let shape_attr = e.attr(&format!(
        "dense<[{}]> : tensor<{}xi64>",
        dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "),
        dims.len()
    ))?;
    let shape = e.literal(DType::I64, &[dims.len() as i64], shape_attr)?;
    let u = e.op(
        hlo::RNG,
        &[&lo, &hi, &shape],
        DType::F32,
        &dims,
        &[("rng_distribution", e.attr("#stablehlo<rng_distribution UNIFORM>")?)],
    )?;
    let pc = e.constant(DType::F32, &dims, Scalar::F(p))?;
    let mask = e.compare(&u, &pc, Cmp::Ge)?;
    let xc = e.convert(x, out)?;
    let scale = e.constant(out, &dims, Scalar::F(1.0 / (1.0 - p)))?;
    let kept = e.ew(hlo::MULTIPLY, &[&xc, &e.convert(&mask, out)?], out)?;
    Ok(vec![e.ew(hlo::MULTIPLY, &[&kept, &scale], out)?, mask])
}

/// A window parameter (kernel_size, stride, padding, dilation, output_padding) per spatial
/// dim. PyTorch requires kernels, strides and dilations to be positive and padding to be
/// non-negative.
fn spatial(v: Vec<i64>, n: usize, what: &str) -> RuleResult<Vec<i64>> {
    let v = match v.len() {
        1 => vec![v[0]; n],
        k if k == n => v,
        k => return bad!("{what} has {k} values for {n} spatial dims"),
    };
    let min = if matches!(what, "padding" | "output_padding") { 0 } else { 1 };
    if v.iter().any(|&x| x < min) {
        return bad!("{what} {v:?} must be at least {min}");
    }
    Ok(v)
}

/// Window arithmetic is done in i128 (attributes and dims are any i64) and must come back
/// into i64.
fn fit(v: i128) -> RuleResult<i64> {
    match i64::try_from(v) {
        Ok(x) => Ok(x),
        Err(_) => bad!("window arithmetic overflows i64 ({v})"),
    }
}

/// Kernels with more positions than this are not rewritten as patches times a matmul (one
/// slice per position would be emitted).
const MAX_PATCH_POSITIONS: i64 = 4096;

/// Whether a convolution runs as patches times a matmul rather than `stablehlo.convolution`:
/// groups = 1 and a kernel with more positions than the input map (up to
/// `MAX_PATCH_POSITIONS`). XLA's algebraic simplifier swaps such a convolution's operands (the
/// kernel is the larger), and XLA CPU then runs the swapped, reversed-window form as a naive
/// loop: resnet18's last stage at 64x64 (3x3 kernels on 2x2 maps) took 10x eager. As patches
/// times a matmul it stays on the fast dot path. The weight-layout rewrite of inference graphs
/// asks this too: the matmul reads the weight as given, so relaying it would only add a copy.
pub fn convolution_runs_as_matmul(input_spatial: &[i64], kernel_spatial: &[i64], groups: i64) -> bool {
    let (Ok(kernel), Ok(input)) = (product(kernel_spatial.iter().copied()), product(input_spatial.iter().copied()))
    else {
        return false;
    };
    groups == 1 && kernel > input && kernel <= MAX_PATCH_POSITIONS
}

/// Convolutions of 1-3 spatial dims, the weight of the input's rank.
pub fn convolution_legal(c: &Check) -> Result<(), String> {
    let (x, w) = (c.operand_rank(0).unwrap_or(0), c.operand_rank(1).unwrap_or(0));
    if !(3..=5).contains(&x) || w != x {
        return Err(format!("convolution of rank-{x} input with rank-{w} weight"));
    }
    Ok(())
}

/// convolution(input, weight, bias?, stride, padding, dilation, transposed, output_padding,
/// groups) for 1-3 spatial dims, NC* layout. A transposed convolution is the gradient of a
/// convolution: the input is dilated by the stride (`lhs_dilation`), the kernel is flipped and
/// read with in/out features swapped, and padding is `dilation * (k - 1) - padding` (plus
/// `output_padding` on the high side).
pub fn convolution<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let ps = n.params(&["input", "weight", "bias"]);
    let (Some(x), Some(w)) = (ps[0].tensor(), ps[1].tensor()) else { return bad!("missing input or weight") };
    let transposed = n.get_or(TRANSPOSED, false)?;
    let sp = x.rank().saturating_sub(2);
    if !(1..=3).contains(&sp) || w.rank() != x.rank() {
        return bad!("convolution of rank-{} input with rank-{} weight", x.rank(), w.rank());
    }
    let stride = spatial(n.get(STRIDE)?, sp, "stride")?;
    let padding = spatial(n.get(PADDING)?, sp, "padding")?;
    let dilation = spatial(n.get(DILATION)?, sp, "dilation")?;
    let groups = n.get_or(GROUPS, 1)?;
    if groups < 1 {
        return bad!("groups must be positive");
    }
    // NHWC activations (the layout pass's `channels_last`); the kernel keeps its layout.
    let channels_last = n.get_or(CHANNELS_LAST, false)?;
    let x_spatial = if channels_last { &x.dims[1..=sp] } else { &x.dims[2..] };
    let out = n.out_dtype();
    let (xc, mut wc) = (e.convert(x, out)?, e.convert(w, out)?);
    let s: Vec<String> = (0..sp).map(|i| i.to_string()).collect();
    let dims = n.out_dims().to_vec();
    let (kernel_layout, lhs_dilation, strides, pads) = if transposed {
        let output_padding = match n.opt(OUTPUT_PADDING)? {
            Some(v) if !v.is_empty() => spatial(v, sp, "output_padding")?,
            _ => vec![0; sp],
        };
        // Flip the kernel's spatial dims.
        let flip: Vec<i64> = (2..w.rank() as i64).collect();
        wc = e.op(hlo::REVERSE, &[&wc], out, &wc.dims.clone(), &[("dimensions", e.i64_array(&flip))])?;
        if groups > 1 {
            // [C_in, C_out/g, k..] -> [C_in/g, C_out, k..] so that grouped features line up.
            let (cin, cout_g) = (wc.dims[0], wc.dims[1]);
            let k: Vec<i64> = wc.dims[2..].to_vec();
            let mut split = vec![groups, cin / groups, cout_g];
            split.extend(&k);
            let g = e.reshape(&wc, &split)?;
            let mut perm = vec![1, 0, 2];
            perm.extend(3..3 + sp);
            let g = e.transpose(&g, &perm)?;
            let mut merged = vec![cin / groups, groups * cout_g];
            merged.extend(&k);
            wc = e.reshape(&g, &merged)?;
        }
        let pads: Vec<[i64; 2]> = (0..sp)
            .map(|i| {
                let k = w.dims[2 + i] as i128;
                let lo = dilation[i] as i128 * (k - 1) - padding[i] as i128;
                Ok([fit(lo)?, fit(lo + output_padding[i] as i128)?])
            })
            .collect::<RuleResult<_>>()?;
        (format!("[i, o, {}]", s.join(", ")), stride.clone(), vec![1; sp], pads)
    } else {
        (format!("[o, i, {}]", s.join(", ")), vec![1; sp], stride.clone(), padding.iter().map(|&p| [p, p]).collect())
    };
    let mut y = if convolution_runs_as_matmul(x_spatial, &w.dims[2..], groups) {
        if channels_last {
            return bad!("a convolution run as patches times a matmul takes NCHW input, not channels_last");
        }
        conv_as_matmul(e, &xc, &wc, !transposed, &lhs_dilation, &dilation, &strides, &pads, &dims)?
    } else {
        conv_op(e, &xc, &wc, &kernel_layout, channels_last, &lhs_dilation, &dilation, &strides, &pads, groups, &dims)?
    };
    if let Some(b) = ps[2].tensor() {
        let c = if channels_last { dims.len() - 1 } else { 1 };
        let bshape: Vec<i64> = (0..dims.len()).map(|i| if i == c { dims[c] } else { 1 }).collect();
        let b = e.broadcast_to(&e.reshape(&e.convert(b, out)?, &bshape)?, &dims)?;
        y = e.ew(hlo::ADD, &[&y, &b], out)?;
    }
    Ok(vec![y])
}

/// One `stablehlo.convolution` of NC* (or, `channels_last`, N*C) input `x` with kernel `w`
/// (`kernel_layout` names its dims); the result has the input's layout.
#[allow(clippy::too_many_arguments)]
fn conv_op<'c, 'a>(
    e: &Emitter<'c, 'a>,
    x: &Tv<'c, 'a>,
    w: &Tv<'c, 'a>,
    kernel_layout: &str,
    channels_last: bool,
    lhs_dilation: &[i64],
    dilation: &[i64],
    strides: &[i64],
    pads: &[[i64; 2]],
    groups: i64,
    dims: &[i64],
) -> RuleResult<Tv<'c, 'a>> {
    let sp = x.rank() - 2;
    let s: Vec<String> = (0..sp).map(|i| i.to_string()).collect();
    let act = if channels_last { format!("[b, {}, f]", s.join(", ")) } else { format!("[b, f, {}]", s.join(", ")) };
    let layout = format!("{act}x{kernel_layout}->{act}");
    let pad = pads.iter().map(|p| format!("[{}, {}]", p[0], p[1])).collect::<Vec<_>>().join(", ");
    let attrs = [
        ("dimension_numbers", e.attr(&format!("#stablehlo.conv<{layout}>"))?),
        ("window_strides", e.i64_array(strides)),
        ("padding", e.attr(&format!("dense<[{pad}]> : tensor<{sp}x2xi64>"))?),
        ("lhs_dilation", e.i64_array(lhs_dilation)),
        ("rhs_dilation", e.i64_array(dilation)),
        ("feature_group_count", e.attr(&format!("{groups} : i64"))?),
        ("batch_group_count", e.attr("1 : i64")?),
    ];
    e.op(hlo::CONVOLUTION, &[x, w], x.dtype, dims, &attrs)
}

/// The same convolution (groups = 1) as patches times a matmul: the input padded (and dilated
/// by `lhs_dilation`) once, one strided slice per kernel position stacked into
/// [N, C, K, out...], contracted over (C, K) with the kernel read as [., ., K]
/// (`kernel_oi`: [O, C, k...], else [C, O, k...]), then moved back to [N, O, out...].
#[allow(clippy::too_many_arguments)]
fn conv_as_matmul<'c, 'a>(
    e: &Emitter<'c, 'a>,
    x: &Tv<'c, 'a>,
    w: &Tv<'c, 'a>,
    kernel_oi: bool,
    lhs_dilation: &[i64],
    dilation: &[i64],
    strides: &[i64],
    pads: &[[i64; 2]],
    dims: &[i64],
) -> RuleResult<Tv<'c, 'a>> {
    let (r, sp) = (x.rank(), x.rank() - 2);
    let (n, c) = (x.dims[0], x.dims[1]);
    let zero = e.constant(x.dtype, &[], Scalar::I(0))?;
    let mut low = vec![0, 0];
    let mut high = vec![0, 0];
    let mut interior = vec![0, 0];
    for i in 0..sp {
        low.push(pads[i][0]);
        high.push(pads[i][1]);
        interior.push(lhs_dilation[i].saturating_sub(1));
    }
    let xp = e.pad(x, &zero, &low, &high, &interior)?;
    let ks = &w.dims[2..];
    let out_sp = &dims[2..];
    let positions: i64 = product(ks.iter().copied())?;
    let mut parts = Vec::with_capacity(positions as usize);
    let mut stacked = vec![n, c, 1];
    stacked.extend(out_sp);
    for flat in 0..positions {
        // The kernel position's multi-index, row-major over the kernel's spatial dims.
        let mut rest = flat;
        let mut k = vec![0; sp];
        for i in (0..sp).rev() {
            k[i] = rest % ks[i];
            rest /= ks[i];
        }
        let mut start = vec![0, 0];
        let mut limit = vec![n, c];
        let mut step = vec![1, 1];
        for i in 0..sp {
            let first = k[i] as i128 * dilation[i] as i128;
            start.push(fit(first)?);
            limit.push(fit(first + strides[i] as i128 * (out_sp[i] as i128 - 1) + 1)?);
            step.push(strides[i]);
        }
        parts.push(e.reshape(&e.slice(&xp, &start, &limit, &step)?, &stacked)?);
    }
    let mut cols_dims = vec![n, c, positions];
    cols_dims.extend(out_sp);
    let cols = e.concatenate(&parts, 2, x.dtype, &cols_dims)?;
    let wk = e.reshape(w, &[w.dims[0], w.dims[1], positions])?;
    let dot = |lhs: &Tv<'c, 'a>, rhs: &Tv<'c, 'a>, contracting: &str, dims: &[i64]| {
        let text = format!("#stablehlo.dot<{contracting}>");
        e.op(hlo::DOT_GENERAL, &[lhs, rhs], x.dtype, dims, &[("dot_dimension_numbers", e.attr(&text)?)])
    };
    let mut perm: Vec<usize> = Vec::with_capacity(r);
    let prod = if kernel_oi {
        // [O, C, K] is the left operand, read row-major: on small maps it is the larger
        // operand, and as the right one XLA copied it into place in every call (resnet18's
        // 512x512 3x3 stage at 2x2: 4.4 ms per training forward vs 0.6).
        let mut dims = vec![w.dims[0], n];
        dims.extend(out_sp);
        perm.extend([1, 0]);
        perm.extend(2..r);
        dot(&wk, &cols, "lhs_contracting_dimensions = [1, 2], rhs_contracting_dimensions = [1, 2]", &dims)?
    } else {
        // A transposed convolution's [C, O, K] kernel contracts its leading dim: as the left
        // operand it ran 1.8x slower (the weight transposed either way).
        let mut dims = vec![n];
        dims.extend(out_sp);
        dims.push(w.dims[1]);
        perm.extend([0, r - 1]);
        perm.extend(1..r - 1);
        dot(&cols, &wk, "lhs_contracting_dimensions = [1, 2], rhs_contracting_dimensions = [0, 2]", &dims)?
    };
    e.transpose(&prod, &perm)
}

/// max_pool2d_with_indices(self, kernel_size, stride=[], padding=0, dilation=1,
/// ceil_mode=False) -> (values, flat indices into each H*W plane). Padding never wins (it
/// holds -inf); ties keep the first index; NaN wins, as in PyTorch.
pub fn max_pool2d<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let r = x.rank();
    if r != 3 && r != 4 {
        return bad!("max_pool2d needs a 3-D or 4-D input");
    }
    let kernel = spatial(n.get(KERNEL_SIZE)?, 2, "kernel_size")?;
    let stride = match n.opt(STRIDE)? {
        Some(s) if !s.is_empty() => spatial(s, 2, "stride")?,
        _ => kernel.clone(),
    };
    let padding = spatial(n.get(PADDING).unwrap_or(vec![0]), 2, "padding")?;
    let dilation = spatial(n.get(DILATION).unwrap_or(vec![1]), 2, "dilation")?;
    let out_dims = n.out_dims().to_vec();
    if out_dims.len() != r || n.results.len() != 2 {
        return bad!("max_pool2d_with_indices of a rank-{r} input declares {:?}", n.results);
    }
    // The window dims: the last two, or H and W of an NHWC input (the layout pass's
    // `channels_last`). Indices count positions in each H x W plane either way.
    let (hd, wd) = if n.get_or(CHANNELS_LAST, false)? {
        if r != 4 {
            return bad!("channels_last max_pool2d needs a 4-D input");
        }
        (1, 2)
    } else {
        (r - 2, r - 1)
    };
    let (h, w) = (x.dims[hd], x.dims[wd]);
    // Extra high padding so that ceil_mode windows exist; the declared output size rules.
    let mut pads = vec![[0i64, 0i64]; r];
    for (k, (size, out_size)) in [(h, out_dims[hd]), (w, out_dims[wd])].into_iter().enumerate() {
        let need = (out_size as i128 - 1) * stride[k] as i128 + (kernel[k] as i128 - 1) * dilation[k] as i128 + 1;
        let high = fit((need - size as i128 - padding[k] as i128).max(padding[k] as i128))?;
        pads[[hd, wd][k]] = [padding[k], high];
    }
    let mut win = vec![1i64; r];
    let mut strides = vec![1i64; r];
    let mut dil = vec![1i64; r];
    for (k, d) in [hd, wd].into_iter().enumerate() {
        win[d] = kernel[k];
        strides[d] = stride[k];
        dil[d] = dilation[k];
    }
    let pad_text = pads.iter().map(|p| format!("[{}, {}]", p[0], p[1])).collect::<Vec<_>>().join(", ");
    let d = x.dtype;
    let neg_inf = e.constant(d, &[], Scalar::F(if d.is_float() { f64::NEG_INFINITY } else { i64::MIN as f64 }))?;
    let attrs = vec![
        ("window_dimensions", e.i64_array(&win)),
        ("window_strides", e.i64_array(&strides)),
        ("window_dilations", e.i64_array(&dil)),
        ("padding", e.attr(&format!("dense<[{pad_text}]> : tensor<{r}x2xi64>"))?),
    ];
    if !n.used.get(1).copied().unwrap_or(true) {
        // Nothing reads the indices (inference): a plain max window, NaN winning as in
        // PyTorch; the variadic (value, index) window costs XLA CPU about twice as much.
        let region = e.scalar_region(&[d, d], |b, a| Ok(vec![b.minmax(&a[0], &a[1], true)?]))?;
        let vals = e.build(hlo::REDUCE_WINDOW, &[x.v, neg_inf.v], &[e.ty(d, &out_dims)], &attrs, vec![region])?;
        let values = Tv { v: vals[0], dtype: d, dims: out_dims.clone() };
        let unread = e.constant(DType::I64, &n.results[1].1, Scalar::I(0))?;
        return Ok(vec![values, unread]);
    }
    let idx_plane = {
        let rows = e.iota(DType::I64, &x.dims, hd)?;
        let cols = e.iota(DType::I64, &x.dims, wd)?;
        let wc = e.constant(DType::I64, &x.dims, Scalar::I(w))?;
        let base = e.ew(hlo::MULTIPLY, &[&rows, &wc], DType::I64)?;
        e.ew(hlo::ADD, &[&base, &cols], DType::I64)?
    };
    let zero = e.constant(DType::I64, &[], Scalar::I(-1))?;
    let region = e.scalar_region(&[d, DType::I64, d, DType::I64], |b, a| {
        let (av, ai, bv, bi) = (&a[0], &a[1], &a[2], &a[3]);
        let gt = b.compare(av, bv, Cmp::Gt)?;
        let eq = b.compare(av, bv, Cmp::Eq)?;
        let earlier = b.compare(ai, bi, Cmp::Lt)?;
        let tie = b.ew(hlo::AND, &[&eq, &earlier], DType::Bool)?;
        let mut pick = b.ew(hlo::OR, &[&gt, &tie], DType::Bool)?;
        if d.is_float() {
            let a_nan = b.compare(av, av, Cmp::Ne)?;
            let b_nan = b.compare(bv, bv, Cmp::Ne)?;
            let not_b_nan = b.ew(hlo::NOT, &[&b_nan], DType::Bool)?;
            let a_only = b.ew(hlo::AND, &[&a_nan, &not_b_nan], DType::Bool)?;
            let not_a_nan = b.ew(hlo::NOT, &[&a_nan], DType::Bool)?;
            let keep_b = b.ew(hlo::AND, &[&b_nan, &not_a_nan], DType::Bool)?;
            pick = b.ew(hlo::OR, &[&pick, &a_only], DType::Bool)?;
            let not_keep_b = b.ew(hlo::NOT, &[&keep_b], DType::Bool)?;
            pick = b.ew(hlo::AND, &[&pick, &not_keep_b], DType::Bool)?;
        }
        Ok(vec![b.select(&pick, av, bv)?, b.select(&pick, ai, bi)?])
    })?;
    let vals = e.build(
        hlo::REDUCE_WINDOW,
        &[x.v, idx_plane.v, neg_inf.v, zero.v],
        &[e.ty(d, &out_dims), e.ty(DType::I64, &n.results[1].1)],
        &attrs,
        vec![region],
    )?;
    let values = Tv { v: vals[0], dtype: d, dims: out_dims.clone() };
    let indices = Tv { v: vals[1], dtype: DType::I64, dims: n.results[1].1.clone() };
    Ok(vec![e.convert(&values, n.out_dtype())?, e.convert(&indices, n.results[1].0)?])
}

/// The 2-D pooling geometry shared by avg_pool2d and its backward.
struct Pool2d {
    kernel: Vec<i64>,
    stride: Vec<i64>,
    padding: Vec<i64>,
    count_include_pad: bool,
    divisor_override: Option<i64>,
}

impl Pool2d {
    fn read(n: &NodeCtx) -> RuleResult<Pool2d> {
        let kernel = spatial(n.get(KERNEL_SIZE)?, 2, "kernel_size")?;
        let stride = match n.opt(STRIDE)? {
            Some(s) if !s.is_empty() => spatial(s, 2, "stride")?,
            _ => kernel.clone(),
        };
        let padding = spatial(n.get(PADDING).unwrap_or(vec![0]), 2, "padding")?;
        let divisor_override = match n.raw(DIVISOR_OVERRIDE) {
            None | Some(crate::ir::Attr::None) => None,
            Some(_) => Some(n.get(DIVISOR_OVERRIDE)?),
        };
        Ok(Pool2d { kernel, stride, padding, count_include_pad: n.get_or(COUNT_INCLUDE_PAD, true)?, divisor_override })
    }

    /// Per-dim [low, high] padding of a rank-`r` input of spatial size `hw` so that every
    /// window of the declared `out` size exists (ceil_mode windows run past the high side).
    fn pads(&self, r: usize, hw: [i64; 2], out: [i64; 2]) -> RuleResult<Vec<[i64; 2]>> {
        let mut pads = vec![[0i64, 0i64]; r];
        for k in 0..2 {
            let need = (out[k] as i128 - 1) * self.stride[k] as i128 + self.kernel[k] as i128;
            let p = self.padding[k] as i128;
            pads[r - 2 + k] = [self.padding[k], fit((need - hw[k] as i128 - p).max(p))?];
        }
        Ok(pads)
    }

    fn window(&self, r: usize) -> (Vec<i64>, Vec<i64>) {
        let mut win = vec![1i64; r];
        let mut strides = vec![1i64; r];
        for k in 0..2 {
            win[r - 2 + k] = self.kernel[k];
            strides[r - 2 + k] = self.stride[k];
        }
        (win, strides)
    }

    /// What each output window divides by, shaped like the output: the override, or the
    /// number of window elements inside the input (count_include_pad=False) or inside the
    /// input plus its explicit padding (True), as PyTorch counts them.
    fn divisor<'c, 'a>(
        &self,
        e: &Emitter<'c, 'a>,
        d: DType,
        in_dims: &[i64],
        out_dims: &[i64],
    ) -> RuleResult<Tv<'c, 'a>> {
        if let Some(v) = self.divisor_override {
            return e.constant(d, out_dims, Scalar::I(v));
        }
        let r = in_dims.len();
        let hw = [in_dims[r - 2], in_dims[r - 1]];
        let mut pads = self.pads(r, hw, [out_dims[r - 2], out_dims[r - 1]])?;
        // Count over one plane (the count does not depend on batch or channel), then broadcast.
        let mut plane = vec![1i64; r];
        plane[r - 2] = hw[0];
        plane[r - 1] = hw[1];
        let mut ones = e.constant(d, &plane, Scalar::I(1))?;
        if self.count_include_pad {
            let one = e.constant(d, &[], Scalar::I(1))?;
            let mut lo = vec![0; r];
            let mut hi = vec![0; r];
            for k in 0..2 {
                lo[r - 2 + k] = self.padding[k];
                hi[r - 2 + k] = self.padding[k];
                pads[r - 2 + k] = [0, pads[r - 2 + k][1] - self.padding[k]];
            }
            ones = e.pad(&ones, &one, &lo, &hi, &vec![0; r])?;
        }
        let (win, strides) = self.window(r);
        let mut out_plane = vec![1i64; r];
        out_plane[r - 2] = out_dims[r - 2];
        out_plane[r - 1] = out_dims[r - 1];
        let counts = e.window_sum(&ones, &win, &strides, &pads, &out_plane)?;
        e.broadcast_to(&counts, out_dims)
    }
}

/// avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
/// divisor_override): a window sum divided by PyTorch's divisor.
pub fn avg_pool2d<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let r = x.rank();
    if r != 3 && r != 4 {
        return bad!("avg_pool2d needs a 3-D or 4-D input");
    }
    let out = n.out_dtype();
    let acc = acc_type(out);
    let p = Pool2d::read(n)?;
    let out_dims = n.out_dims().to_vec();
    if out_dims.len() != r {
        return bad!("avg_pool2d of a rank-{r} input declares a rank-{} result", out_dims.len());
    }
    let pads = p.pads(r, [x.dims[r - 2], x.dims[r - 1]], [out_dims[r - 2], out_dims[r - 1]])?;
    let (win, strides) = p.window(r);
    let sum = e.window_sum(&e.convert(x, acc)?, &win, &strides, &pads, &out_dims)?;
    let div = p.divisor(e, acc, &x.dims, &out_dims)?;
    let avg = e.ew(hlo::DIVIDE, &[&sum, &div], acc)?;
    Ok(vec![e.convert(&avg, out)?])
}

/// avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
/// count_include_pad, divisor_override): each input element receives the sum of
/// grad/divisor over the windows that cover it - the gradient spread back with a transposed
/// window sum (interior padding by stride-1, then a stride-1 window sum).
pub fn avg_pool2d_backward<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let (g, x) = (n.arg(0)?, n.arg(1)?);
    let r = x.rank();
    if r != 3 && r != 4 {
        return bad!("avg_pool2d_backward needs a 3-D or 4-D input");
    }
    let out = n.out_dtype();
    let acc = acc_type(out);
    let p = Pool2d::read(n)?;
    if g.rank() != r {
        return bad!("avg_pool2d_backward: grad of rank {} for a rank-{r} input", g.rank());
    }
    let g = e.convert(g, acc)?;
    let div = p.divisor(e, acc, &x.dims, &g.dims)?;
    let scaled = e.ew(hlo::DIVIDE, &[&g, &div], acc)?;
    let zero = e.constant(acc, &[], Scalar::I(0))?;
    let (mut lo, mut hi, mut interior) = (vec![0; r], vec![0; r], vec![0; r]);
    let mut win = vec![1i64; r];
    for k in 0..2 {
        let (size, kern, s, pad) =
            (x.dims[r - 2 + k] as i128, p.kernel[k] as i128, p.stride[k] as i128, p.padding[k] as i128);
        let dilated = (g.dims[r - 2 + k] as i128 - 1) * s + 1;
        interior[r - 2 + k] = fit(s - 1)?;
        lo[r - 2 + k] = fit(kern - 1 - pad)?;
        // After a stride-1 window of `kern`, exactly `size` positions remain.
        hi[r - 2 + k] = fit(size + kern - 1 - (kern - 1 - pad) - dilated)?;
        win[r - 2 + k] = p.kernel[k];
    }
    let spread = e.pad(&scaled, &zero, &lo, &hi, &interior)?;
    let grad = e.window_sum(&spread, &win, &vec![1; r], &vec![[0, 0]; r], &x.dims)?;
    Ok(vec![e.convert(&grad, out)?])
}
