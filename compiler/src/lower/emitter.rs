//! The StableHLO builder: every `stablehlo.*` op is built with melior's generic
//! `OperationBuilder` (StableHLO is not an upstream dialect), with the attribute forms XLA
//! accepts (`array<i64: ...>`, `#stablehlo<comparison_direction GT>`, ...). Lowering rules use
//! these helpers and never write MLIR text themselves, except attribute literals parsed by MLIR.

use super::error::{RuleError, RuleResult};
use crate::ir::DType;
use crate::ir::Scalar;
use crate::lower::names::hlo;
use melior::ir::attribute::{DenseElementsAttribute, DenseI64ArrayAttribute};
use melior::ir::operation::OperationBuilder;
use melior::ir::r#type::{IntegerType, RankedTensorType};
use melior::ir::{Attribute, Block, BlockLike, Identifier, Location, Region, RegionLike, Type, Value};
use melior::Context;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// A lowered value with its static type.
#[derive(Clone, Debug)]
pub struct Tv<'c, 'a> {
    pub v: Value<'c, 'a>,
    pub dtype: DType,
    pub dims: Vec<i64>,
}

impl<'c, 'a> Tv<'c, 'a> {
    pub fn rank(&self) -> usize {
        self.dims.len()
    }
}

pub struct Emitter<'c, 'a> {
    pub ctx: &'c Context,
    pub block: &'a Block<'c>,
    pub loc: Location<'c>,
    /// What the rules asked `ty` for, shared with region emitters; the driver checks it
    /// after each node.
    pub sizes: Rc<TypeSizes>,
}

/// The largest tensor type a rule made (in bytes), and the first one with a negative dim:
/// rules compute shapes of their own from attributes, and a type XLA cannot represent
/// (more than i64::MAX bytes) makes its compiler throw a C++ exception or die.
#[derive(Debug, Default)]
pub struct TypeSizes {
    largest: Cell<u128>,
    negative: RefCell<Option<Vec<i64>>>,
}

impl TypeSizes {
    fn record(&self, d: DType, dims: &[i64]) {
        if dims.iter().any(|&x| x < 0) {
            self.negative.borrow_mut().get_or_insert_with(|| dims.to_vec());
        }
        let bytes = dims.iter().fold(d.size_bytes() as u128, |acc, &x| acc.saturating_mul(x.max(0) as u128));
        self.largest.set(self.largest.get().max(bytes));
    }

    /// The largest size in bytes and the first negative shape since the last `take`.
    pub fn take(&self) -> (u128, Option<Vec<i64>>) {
        (self.largest.take(), self.negative.take())
    }
}

/// StableHLO comparison directions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Cmp {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Cmp::Eq => "EQ",
            Cmp::Ne => "NE",
            Cmp::Lt => "LT",
            Cmp::Le => "LE",
            Cmp::Gt => "GT",
            Cmp::Ge => "GE",
        }
    }
}

pub fn element_type<'c>(ctx: &'c Context, d: DType) -> Type<'c> {
    match d {
        DType::F16 => Type::float16(ctx),
        DType::BF16 => Type::bfloat16(ctx),
        DType::F32 => Type::float32(ctx),
        DType::F64 => Type::float64(ctx),
        DType::I8 => IntegerType::new(ctx, 8).into(),
        DType::I16 => IntegerType::new(ctx, 16).into(),
        DType::I32 => IntegerType::new(ctx, 32).into(),
        DType::I64 => IntegerType::new(ctx, 64).into(),
        DType::U8 => IntegerType::unsigned(ctx, 8).into(),
        DType::Bool => IntegerType::new(ctx, 1).into(),
        DType::C64 => Type::parse(ctx, "complex<f32>").expect("complex<f32> parses"),
        DType::C128 => Type::parse(ctx, "complex<f64>").expect("complex<f64> parses"),
    }
}

pub fn tensor_type<'c>(ctx: &'c Context, d: DType, dims: &[i64]) -> Type<'c> {
    let dims: Vec<u64> = dims.iter().map(|&x| x as u64).collect();
    RankedTensorType::new(&dims, element_type(ctx, d), None).into()
}

impl<'c, 'a> Emitter<'c, 'a> {
    pub fn ty(&self, d: DType, dims: &[i64]) -> Type<'c> {
        self.sizes.record(d, dims);
        tensor_type(self.ctx, d, dims)
    }

    pub fn attr(&self, text: &str) -> RuleResult<Attribute<'c>> {
        Attribute::parse(self.ctx, text).ok_or_else(|| RuleError::Mlir(format!("cannot parse attribute `{text}`")))
    }

    pub fn i64_array(&self, v: &[i64]) -> Attribute<'c> {
        DenseI64ArrayAttribute::new(self.ctx, v).into()
    }

    /// Builds and appends an op; returns all its results.
    pub fn build(
        &self,
        name: &str,
        operands: &[Value<'c, 'a>],
        results: &[Type<'c>],
        attrs: &[(&str, Attribute<'c>)],
        regions: Vec<Region<'c>>,
    ) -> RuleResult<Vec<Value<'c, 'a>>> {
        let attrs: Vec<(Identifier<'c>, Attribute<'c>)> =
            attrs.iter().map(|(k, a)| (Identifier::new(self.ctx, k), *a)).collect();
        let op = OperationBuilder::new(name, self.loc)
            .add_operands(operands)
            .add_results(results)
            .add_attributes(&attrs)
            .add_regions_vec(regions)
            .build()?;
        let op = self.block.append_operation(op);
        (0..results.len()).map(|i| Ok(op.result(i)?.into())).collect()
    }

    /// A single-result op producing a tensor of `dtype[dims]`.
    pub fn op(
        &self,
        name: &str,
        operands: &[&Tv<'c, 'a>],
        dtype: DType,
        dims: &[i64],
        attrs: &[(&str, Attribute<'c>)],
    ) -> RuleResult<Tv<'c, 'a>> {
        let vals: Vec<Value<'c, 'a>> = operands.iter().map(|t| t.v).collect();
        let v = self.build(name, &vals, &[self.ty(dtype, dims)], attrs, Vec::new())?[0];
        Ok(Tv { v, dtype, dims: dims.to_vec() })
    }

    /// PyTorch's true division `a / b` (operands already in `dtype` and `a`'s shape), as its
    /// kernel computes it. XLA divides by a constant or a broadcast scalar as `a * (1 / b)`,
    /// and `1 / b` rounds: `x / 127.5` came out one bit off for most `x` (enough to flip
    /// torchao's rounding of an activation to int8), and a mean's division by its count too.
    /// Such an f32 division runs in f64 and is rounded back: XLA's reciprocal is off by at
    /// most 2^-52 relative there, and a quotient of two f32 numbers is never within 2^-49 of
    /// an f32 rounding midpoint, so the result is the f32 quotient exactly. (An optimization
    /// barrier on the divisor does not stop XLA. A divisor broadcast along some dims only,
    /// `x / rows`, is still divided by its reciprocal: XLA drops the f64 there unless
    /// `xla_allow_excess_precision` is off.)
    pub fn true_divide(&self, a: &Tv<'c, 'a>, b: &Tv<'c, 'a>, dtype: DType) -> RuleResult<Tv<'c, 'a>> {
        if dtype != DType::F32 || !self.is_scalar_divisor(b) {
            return self.ew(hlo::DIVIDE, &[a, b], dtype);
        }
        let dims = a.dims.clone();
        let (a64, b64) = (self.convert(a, DType::F64)?, self.convert(b, DType::F64)?);
        let q = self.ew(hlo::DIVIDE, &[&a64, &b64], DType::F64)?;
        self.op(hlo::CONVERT, &[&q], DType::F32, &dims, &[])
    }

    /// Whether `b` is a constant or a broadcast of a rank-0 value.
    fn is_scalar_divisor(&self, b: &Tv<'c, 'a>) -> bool {
        use melior::ir::operation::OperationLike;
        use melior::ir::r#type::ShapedTypeLike;
        use melior::ir::ValueLike;
        let Some(op) = producer(b) else { return false };
        match op.name().as_string_ref().as_str() {
            Ok(hlo::CONSTANT) => true,
            Ok(hlo::BROADCAST_IN_DIM) => {
                op.operand(0).is_ok_and(|v| RankedTensorType::try_from(v.r#type()).is_ok_and(|t| t.rank() == 0))
            }
            _ => false,
        }
    }

    /// An elementwise op whose operands already share the result's shape.
    pub fn ew(&self, name: &str, operands: &[&Tv<'c, 'a>], dtype: DType) -> RuleResult<Tv<'c, 'a>> {
        let dims = operands[0].dims.clone();
        self.op(name, operands, dtype, &dims, &[])
    }

    /// A splat constant of `dtype[dims]`.
    pub fn constant(&self, dtype: DType, dims: &[i64], value: Scalar) -> RuleResult<Tv<'c, 'a>> {
        let value = value.cast(dtype).unwrap_or(value);
        let scalar_ty = self.ty(dtype, &[]);
        let attr: Attribute<'c> = match (dtype, value) {
            (DType::Bool, v) => DenseElementsAttribute::bool_splat(scalar_ty, v.as_f64() != 0.0).into(),
            (d, v) if d.is_float() => self.attr(&format!("dense<{}> : {}", float_literal(d, v.as_f64()), scalar_ty))?,
            (d, Scalar::I(i)) if d.is_integer() => self.attr(&format!("dense<{i}> : {scalar_ty}"))?,
            (d, v) if d.is_integer() => self.attr(&format!("dense<{}> : {scalar_ty}", v.as_f64() as i64))?,
            (d, v) if d.is_complex() => {
                let part = if d == DType::C128 { DType::F64 } else { DType::F32 };
                self.attr(&format!(
                    "dense<({}, {})> : {scalar_ty}",
                    float_literal(part, v.as_f64()),
                    float_literal(part, 0.0)
                ))?
            }
            (d, _) => return Err(RuleError::Unsupported(format!("constants of dtype {d}"))),
        };
        let c = self.build(hlo::CONSTANT, &[], &[scalar_ty], &[("value", attr)], Vec::new())?[0];
        let scalar = Tv { v: c, dtype, dims: vec![] };
        if dims.is_empty() {
            Ok(scalar)
        } else {
            self.broadcast_in_dim(&scalar, dims, &[])
        }
    }

    /// A constant tensor from an attribute literal (`dense<...> : tensor<...>`).
    pub fn literal(&self, dtype: DType, dims: &[i64], attr: Attribute<'c>) -> RuleResult<Tv<'c, 'a>> {
        let v = self.build(hlo::CONSTANT, &[], &[self.ty(dtype, dims)], &[("value", attr)], Vec::new())?[0];
        Ok(Tv { v, dtype, dims: dims.to_vec() })
    }

    /// A value-preserving conversion: what a rule uses to bring an operand to its compute
    /// dtype. Complex to real would drop the imaginary part, which no op but an explicit cast
    /// means, so it is refused (the node runs eagerly) rather than computed wrongly; complex to
    /// bool is "nonzero", as in PyTorch.
    pub fn convert(&self, x: &Tv<'c, 'a>, to: DType) -> RuleResult<Tv<'c, 'a>> {
        if x.dtype == to {
            return Ok(x.clone());
        }
        if x.dtype.is_complex() && to == DType::Bool {
            let (re, im) = self.complex_parts(x)?;
            let nonzero = |p: &Tv<'c, 'a>| self.compare(p, &self.constant(p.dtype, &p.dims, Scalar::I(0))?, Cmp::Ne);
            return self.ew(hlo::OR, &[&nonzero(&re)?, &nonzero(&im)?], DType::Bool);
        }
        if x.dtype.is_complex() && !to.is_complex() {
            return Err(RuleError::Unsupported(format!(
                "a {} operand where the rule computes in {to} (its imaginary part would be lost)",
                x.dtype
            )));
        }
        if to == DType::Bool {
            // x != 0, exactly as PyTorch's bool conversion (NaN -> true).
            let zero = self.constant(x.dtype, &x.dims, Scalar::I(0))?;
            return self.compare(x, &zero, Cmp::Ne);
        }
        self.op(hlo::CONVERT, &[x], to, &x.dims.clone(), &[])
    }

    /// PyTorch's cast (`_to_copy`, `to`, `copy_`): as `convert`, except that complex to real
    /// keeps the real part (StableHLO leaves that conversion undefined).
    pub fn cast(&self, x: &Tv<'c, 'a>, to: DType) -> RuleResult<Tv<'c, 'a>> {
        if x.dtype.is_complex() && !to.is_complex() && to != DType::Bool {
            let (re, _) = self.complex_parts(x)?;
            return self.convert(&re, to);
        }
        self.convert(x, to)
    }

    /// The real and imaginary parts of a complex tensor, in its component dtype.
    pub fn complex_parts(&self, x: &Tv<'c, 'a>) -> RuleResult<(Tv<'c, 'a>, Tv<'c, 'a>)> {
        let part = x.dtype.real_part();
        let re = self.op(hlo::REAL, &[x], part, &x.dims.clone(), &[])?;
        let im = self.op(hlo::IMAG, &[x], part, &x.dims.clone(), &[])?;
        Ok((re, im))
    }

    pub fn broadcast_in_dim(&self, x: &Tv<'c, 'a>, dims: &[i64], mapping: &[i64]) -> RuleResult<Tv<'c, 'a>> {
        self.op(hlo::BROADCAST_IN_DIM, &[x], x.dtype, dims, &[("broadcast_dimensions", self.i64_array(mapping))])
    }

    /// PyTorch broadcasting of `x` to `dims` (trailing alignment; size-1 dims stretch).
    pub fn broadcast_to(&self, x: &Tv<'c, 'a>, dims: &[i64]) -> RuleResult<Tv<'c, 'a>> {
        if x.dims == dims {
            return Ok(x.clone());
        }
        if x.rank() > dims.len() {
            return Err(RuleError::Bad(format!("cannot broadcast {:?} to {:?}", x.dims, dims)));
        }
        let offset = dims.len() - x.rank();
        for (i, &d) in x.dims.iter().enumerate() {
            if d != 1 && d != dims[offset + i] {
                return Err(RuleError::Bad(format!("cannot broadcast {:?} to {:?}", x.dims, dims)));
            }
        }
        // Size-1 dims that stretch are reshaped away first: broadcast_in_dim requires each
        // operand dim to be 1 or equal to its target, which holds, so map dims directly.
        let mapping: Vec<i64> = (0..x.rank()).map(|i| (offset + i) as i64).collect();
        self.broadcast_in_dim(x, dims, &mapping)
    }

    pub fn reshape(&self, x: &Tv<'c, 'a>, dims: &[i64]) -> RuleResult<Tv<'c, 'a>> {
        if x.dims == dims {
            return Ok(x.clone());
        }
        self.op(hlo::RESHAPE, &[x], x.dtype, dims, &[])
    }

    pub fn transpose(&self, x: &Tv<'c, 'a>, perm: &[usize]) -> RuleResult<Tv<'c, 'a>> {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(x.clone());
        }
        if perm.len() != x.rank() || perm.iter().any(|&p| p >= x.rank()) {
            return Err(RuleError::Bad(format!("{perm:?} is not a permutation of rank {}", x.rank())));
        }
        let dims: Vec<i64> = perm.iter().map(|&p| x.dims[p]).collect();
        let perm: Vec<i64> = perm.iter().map(|&p| p as i64).collect();
        self.op(hlo::TRANSPOSE, &[x], x.dtype, &dims, &[("permutation", self.i64_array(&perm))])
    }

    /// `y` when `x` is this module's `stablehlo.transpose(y)` with exactly `perm`: lets a
    /// consumer read `y` directly instead (a dot contracting the other dim).
    pub fn transpose_source(&self, x: &Tv<'c, 'a>, perm: &[usize]) -> Option<Tv<'c, 'a>> {
        use melior::ir::operation::OperationLike;
        let op = producer(x)?;
        if op.name().as_string_ref().as_str().ok()? != hlo::TRANSPOSE {
            return None;
        }
        let attr = DenseI64ArrayAttribute::try_from(op.attribute("permutation").ok()?).ok()?;
        if attr.len() != perm.len() || perm.iter().enumerate().any(|(i, &p)| attr.element(i).ok() != Some(p as i64)) {
            return None;
        }
        let mut dims = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            dims[p] = x.dims[i];
        }
        Some(Tv { v: op.operand(0).ok()?, dtype: x.dtype, dims })
    }

    /// Elementwise comparison; both operands must share dtype and shape. Floats compare with
    /// IEEE semantics (NaN unordered), unsigned ints as unsigned.
    pub fn compare(&self, a: &Tv<'c, 'a>, b: &Tv<'c, 'a>, dir: Cmp) -> RuleResult<Tv<'c, 'a>> {
        let kind = if a.dtype.is_float() || a.dtype.is_complex() {
            "FLOAT"
        } else if matches!(a.dtype, DType::U8 | DType::Bool) {
            "UNSIGNED"
        } else {
            "SIGNED"
        };
        let attrs = [
            ("comparison_direction", self.attr(&format!("#stablehlo<comparison_direction {}>", dir.name()))?),
            ("compare_type", self.attr(&format!("#stablehlo<comparison_type {kind}>"))?),
        ];
        self.op(hlo::COMPARE, &[a, b], DType::Bool, &a.dims.clone(), &attrs)
    }

    /// Elementwise max/min with PyTorch's NaN propagation (XLA's CPU max/min only keep a NaN
    /// from the first operand).
    pub fn minmax(&self, a: &Tv<'c, 'a>, b: &Tv<'c, 'a>, max: bool) -> RuleResult<Tv<'c, 'a>> {
        let d = a.dtype;
        if d == DType::Bool {
            return self.ew(if max { hlo::OR } else { hlo::AND }, &[a, b], d);
        }
        let r = self.ew(if max { hlo::MAXIMUM } else { hlo::MINIMUM }, &[a, b], d)?;
        if !d.is_float() {
            return Ok(r);
        }
        let b_nan = self.compare(b, b, Cmp::Ne)?;
        let r = self.select(&b_nan, b, &r)?;
        let a_nan = self.compare(a, a, Cmp::Ne)?;
        self.select(&a_nan, a, &r)
    }

    pub fn select(&self, pred: &Tv<'c, 'a>, on_true: &Tv<'c, 'a>, on_false: &Tv<'c, 'a>) -> RuleResult<Tv<'c, 'a>> {
        self.op(hlo::SELECT, &[pred, on_true, on_false], on_true.dtype, &on_true.dims.clone(), &[])
    }

    /// `stablehlo.slice` with static start/limit/stride per dim.
    pub fn slice(&self, x: &Tv<'c, 'a>, start: &[i64], limit: &[i64], stride: &[i64]) -> RuleResult<Tv<'c, 'a>> {
        let r = x.rank();
        if start.len() != r || limit.len() != r || stride.len() != r || stride.iter().any(|&st| st < 1) {
            return Err(RuleError::Bad(format!(
                "bad slice of {:?}: start {start:?}, limit {limit:?}, stride {stride:?}",
                x.dims
            )));
        }
        // In i128: bounds come from attributes, of any magnitude.
        let dims: Vec<i64> = (0..r)
            .map(|i| {
                let len = ((limit[i] as i128 - start[i] as i128).max(0) + stride[i] as i128 - 1) / stride[i] as i128;
                i64::try_from(len)
                    .map_err(|_| RuleError::Bad(format!("slice [{}, {}) is too long", start[i], limit[i])))
            })
            .collect::<RuleResult<_>>()?;
        self.op(
            hlo::SLICE,
            &[x],
            x.dtype,
            &dims,
            &[
                ("start_indices", self.i64_array(start)),
                ("limit_indices", self.i64_array(limit)),
                ("strides", self.i64_array(stride)),
            ],
        )
    }

    /// `stablehlo.pad`: `low`/`high` edge padding (negative crops) and `interior` padding
    /// between elements, filled with the scalar `value`.
    pub fn pad(
        &self,
        x: &Tv<'c, 'a>,
        value: &Tv<'c, 'a>,
        low: &[i64],
        high: &[i64],
        interior: &[i64],
    ) -> RuleResult<Tv<'c, 'a>> {
        let r = x.rank();
        if low.len() != r || high.len() != r || interior.len() != r || interior.iter().any(|&n| n < 0) {
            return Err(RuleError::Bad(format!(
                "bad pad of {:?}: low {low:?}, high {high:?}, interior {interior:?}",
                x.dims
            )));
        }
        // In i128: padding amounts come from attributes, of any magnitude.
        let dims: Vec<i64> = (0..r)
            .map(|i| {
                let (d, n) = (x.dims[i] as i128, interior[i] as i128);
                let len = low[i] as i128 + high[i] as i128 + d + (d - 1).max(0) * n;
                i64::try_from(len).ok().filter(|&l| l >= 0).ok_or_else(|| {
                    RuleError::Bad(format!("padding {:?} by {low:?}/{high:?}/{interior:?} gives dim {len}", x.dims))
                })
            })
            .collect::<RuleResult<_>>()?;
        self.op(
            hlo::PAD,
            &[x, value],
            x.dtype,
            &dims,
            &[
                ("edge_padding_low", self.i64_array(low)),
                ("edge_padding_high", self.i64_array(high)),
                ("interior_padding", self.i64_array(interior)),
            ],
        )
    }

    /// A summing `stablehlo.reduce_window` with zero padding given per dim as [low, high].
    pub fn window_sum(
        &self,
        x: &Tv<'c, 'a>,
        window: &[i64],
        strides: &[i64],
        pads: &[[i64; 2]],
        out_dims: &[i64],
    ) -> RuleResult<Tv<'c, 'a>> {
        let d = x.dtype;
        let r = x.rank();
        let region = self.scalar_region(&[d, d], |b, a| Ok(vec![b.ew(hlo::ADD, &[&a[0], &a[1]], d)?]))?;
        let init = self.constant(d, &[], Scalar::I(0))?;
        let pad_text = pads.iter().map(|p| format!("[{}, {}]", p[0], p[1])).collect::<Vec<_>>().join(", ");
        let vals = self.build(
            hlo::REDUCE_WINDOW,
            &[x.v, init.v],
            &[self.ty(d, out_dims)],
            &[
                ("window_dimensions", self.i64_array(window)),
                ("window_strides", self.i64_array(strides)),
                ("padding", self.attr(&format!("dense<[{pad_text}]> : tensor<{r}x2xi64>"))?),
            ],
            vec![region],
        )?;
        Ok(Tv { v: vals[0], dtype: d, dims: out_dims.to_vec() })
    }

    /// Concatenation along `dim` of parts that already share the result dtype.
    pub fn concatenate(&self, parts: &[Tv<'c, 'a>], dim: usize, dtype: DType, dims: &[i64]) -> RuleResult<Tv<'c, 'a>> {
        if parts.len() == 1 {
            return self.reshape(&parts[0], dims);
        }
        let refs: Vec<&Tv<'c, 'a>> = parts.iter().collect();
        self.op(hlo::CONCATENATE, &refs, dtype, dims, &[("dimension", self.attr(&format!("{dim} : i64"))?)])
    }

    pub fn iota(&self, dtype: DType, dims: &[i64], dim: usize) -> RuleResult<Tv<'c, 'a>> {
        let attr = self.attr(&format!("{dim} : i64"))?;
        let v = self.build(hlo::IOTA, &[], &[self.ty(dtype, dims)], &[("iota_dimension", attr)], Vec::new())?[0];
        Ok(Tv { v, dtype, dims: dims.to_vec() })
    }

    /// A region with one block of scalar arguments, whose body `body` builds and returns
    /// the values for `stablehlo.return`.
    pub fn scalar_region(
        &self,
        arg_types: &[DType],
        body: impl for<'b> FnOnce(&Emitter<'c, 'b>, &[Tv<'c, 'b>]) -> RuleResult<Vec<Tv<'c, 'b>>>,
    ) -> RuleResult<Region<'c>> {
        let args: Vec<(DType, Vec<i64>)> = arg_types.iter().map(|d| (*d, Vec::new())).collect();
        self.tensor_region(&args, body)
    }

    /// An inclusive prefix scan along `dim`: a `stablehlo.reduce_window` whose window covers
    /// the whole dim, padded in front with the inits, so position i combines elements 0..=i.
    /// `region` combines (accumulated..., next...) scalars, one per input.
    pub fn prefix_scan(
        &self,
        inputs: &[&Tv<'c, 'a>],
        inits: &[&Tv<'c, 'a>],
        dim: usize,
        region: Region<'c>,
    ) -> RuleResult<Vec<Tv<'c, 'a>>> {
        let dims = inputs[0].dims.clone();
        let r = dims.len();
        let Some(&size) = dims.get(dim) else {
            return Err(RuleError::Bad(format!("scan along dim {dim} of a rank-{r} tensor")));
        };
        let win: Vec<i64> = (0..r).map(|i| if i == dim { size.max(1) } else { 1 }).collect();
        let pads = (0..r)
            .map(|i| if i == dim { format!("[{}, 0]", (size - 1).max(0)) } else { "[0, 0]".into() })
            .collect::<Vec<_>>()
            .join(", ");
        let mut operands: Vec<Value<'c, 'a>> = inputs.iter().map(|t| t.v).collect();
        operands.extend(inits.iter().map(|t| t.v));
        let results: Vec<Type<'c>> = inputs.iter().map(|t| self.ty(t.dtype, &dims)).collect();
        let vals = self.build(
            hlo::REDUCE_WINDOW,
            &operands,
            &results,
            &[
                ("window_dimensions", self.i64_array(&win)),
                ("window_strides", self.i64_array(&vec![1; r])),
                ("padding", self.attr(&format!("dense<[{pads}]> : tensor<{r}x2xi64>"))?),
            ],
            vec![region],
        )?;
        Ok(vals.into_iter().zip(inputs).map(|(v, t)| Tv { v, dtype: t.dtype, dims: dims.clone() }).collect())
    }

    /// A region with one block whose arguments have the types of `args`; `body` builds the
    /// values for `stablehlo.return`.
    pub fn tensor_region(
        &self,
        args: &[(DType, Vec<i64>)],
        body: impl for<'b> FnOnce(&Emitter<'c, 'b>, &[Tv<'c, 'b>]) -> RuleResult<Vec<Tv<'c, 'b>>>,
    ) -> RuleResult<Region<'c>> {
        let types: Vec<(Type<'c>, Location<'c>)> = args.iter().map(|(d, dims)| (self.ty(*d, dims), self.loc)).collect();
        let block = Block::new(&types);
        {
            let inner = Emitter { ctx: self.ctx, block: &block, loc: self.loc, sizes: Rc::clone(&self.sizes) };
            let params: Vec<Tv<'c, '_>> = args
                .iter()
                .enumerate()
                .map(|(i, (d, dims))| Ok(Tv { v: block.argument(i)?.into(), dtype: *d, dims: dims.clone() }))
                .collect::<RuleResult<_>>()?;
            let out = body(&inner, &params)?;
            let vals: Vec<Value<'c, '_>> = out.iter().map(|t| t.v).collect();
            inner.build(hlo::RETURN, &vals, &[], &[], Vec::new())?;
        }
        let region = Region::new();
        region.append_block(block);
        Ok(region)
    }

    /// `stablehlo.while` over the carried values `init`: `cond` returns a scalar bool, `body`
    /// the next values (same types). Returns the final values.
    pub fn while_loop(
        &self,
        init: &[&Tv<'c, 'a>],
        cond: impl for<'b> FnOnce(&Emitter<'c, 'b>, &[Tv<'c, 'b>]) -> RuleResult<Tv<'c, 'b>>,
        body: impl for<'b> FnOnce(&Emitter<'c, 'b>, &[Tv<'c, 'b>]) -> RuleResult<Vec<Tv<'c, 'b>>>,
    ) -> RuleResult<Vec<Tv<'c, 'a>>> {
        let sig: Vec<(DType, Vec<i64>)> = init.iter().map(|t| (t.dtype, t.dims.clone())).collect();
        let cond_region = self.tensor_region(&sig, |b, a| Ok(vec![cond(b, a)?]))?;
        let body_region = self.tensor_region(&sig, body)?;
        let operands: Vec<Value<'c, 'a>> = init.iter().map(|t| t.v).collect();
        let results: Vec<Type<'c>> = sig.iter().map(|(d, dims)| self.ty(*d, dims)).collect();
        let vals = self.build(hlo::WHILE, &operands, &results, &[], vec![cond_region, body_region])?;
        Ok(vals.into_iter().zip(sig).map(|(v, (dtype, dims))| Tv { v, dtype, dims }).collect())
    }

    /// `stablehlo.reduce` of several operands over `dims`, with a scalar body.
    pub fn reduce(
        &self,
        inputs: &[&Tv<'c, 'a>],
        inits: &[&Tv<'c, 'a>],
        dims: &[usize],
        body: impl for<'b> FnOnce(&Emitter<'c, 'b>, &[Tv<'c, 'b>]) -> RuleResult<Vec<Tv<'c, 'b>>>,
    ) -> RuleResult<Vec<Tv<'c, 'a>>> {
        let in_dims = &inputs[0].dims;
        let out_dims: Vec<i64> = (0..in_dims.len()).filter(|i| !dims.contains(i)).map(|i| in_dims[i]).collect();
        let dtypes: Vec<DType> = inputs.iter().map(|t| t.dtype).collect();
        let mut arg_types = dtypes.clone();
        arg_types.extend(dtypes.iter().copied());
        let region = self.scalar_region(&arg_types, body)?;
        let mut operands: Vec<Value<'c, 'a>> = inputs.iter().map(|t| t.v).collect();
        operands.extend(inits.iter().map(|t| t.v));
        let results: Vec<Type<'c>> = dtypes.iter().map(|d| self.ty(*d, &out_dims)).collect();
        let dims_i64: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let vals =
            self.build(hlo::REDUCE, &operands, &results, &[("dimensions", self.i64_array(&dims_i64))], vec![region])?;
        Ok(vals.into_iter().zip(dtypes).map(|(v, dtype)| Tv { v, dtype, dims: out_dims.clone() }).collect())
    }
}

/// A float literal of type `d` that MLIR reads back exactly: shortest decimal (always with a
/// `.`, which MLIR requires), or the type's hex bit pattern for NaN and infinities.
pub fn float_literal(d: DType, x: f64) -> String {
    // Values past the dtype's range round to infinity (as PyTorch stores them); MLIR refuses
    // out-of-range decimal literals. The bounds are where rounding reaches infinity.
    let overflows = match d {
        DType::F64 => false,
        DType::F16 => x.abs() >= 65520.0,
        DType::BF16 => x.abs() >= 3.396_177_6e38,
        _ => (x as f32).is_infinite(),
    };
    let x = if overflows && x.is_finite() { f64::INFINITY.copysign(x) } else { x };
    if x.is_finite() {
        let s = if d == DType::F64 { format!("{x:?}") } else { format!("{:?}", x as f32) };
        return if s.contains('.') {
            s
        } else if let Some(e) = s.find('e') {
            format!("{}.0{}", &s[..e], &s[e..])
        } else {
            format!("{s}.0")
        };
    }
    let (nan, inf, ninf) = match d {
        DType::F64 => ("0x7FF8000000000000", "0x7FF0000000000000", "0xFFF0000000000000"),
        DType::F16 => ("0x7E00", "0x7C00", "0xFC00"),
        DType::BF16 => ("0x7FC0", "0x7F80", "0xFF80"),
        _ => ("0x7FC00000", "0x7F800000", "0xFF800000"),
    };
    (if x.is_nan() {
        nan
    } else if x > 0.0 {
        inf
    } else {
        ninf
    })
    .to_string()
}

/// The op of this module that produced `x` (None for a block argument).
fn producer<'c, 'a>(x: &Tv<'c, 'a>) -> Option<melior::ir::operation::OperationRef<'c, 'a>> {
    melior::ir::operation::OperationResult::try_from(x.v).ok().map(|r| r.owner())
}
