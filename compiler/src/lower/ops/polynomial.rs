//! The orthogonal polynomial families of `torch.special` (Chebyshev T/U/V/W and their
//! shifted forms, Hermite H/He, Laguerre L, Legendre P), evaluated as ATen does: by the
//! three-term recurrence up to each element's degree `n` (truncated to an integer; negative
//! degrees give 0). One `stablehlo.while` runs k = 2..=max(n) over the whole tensor and keeps
//! P_k where k equals the element's degree.

use crate::ir::DType;
use crate::ir::Scalar;
use crate::lower::emitter::{Cmp, Emitter, Tv};
use crate::lower::error::{bad, RuleResult};
use crate::lower::names::hlo;
use crate::lower::node::{NodeCtx, Param};
use crate::lower::ops::reduce::reduce_with;
use crate::lower::param::{Polynomial, Reduction};

type R<'c, 'a> = RuleResult<Vec<Tv<'c, 'a>>>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    ChebyshevT,
    ChebyshevU,
    ChebyshevV,
    ChebyshevW,
    HermiteH,
    HermiteHe,
    Laguerre,
    Legendre,
}

/// The recurrence family of a polynomial, and whether its argument is shifted (2x - 1).
fn family(p: Polynomial) -> (Family, bool) {
    use Polynomial as P;
    match p {
        P::ChebyshevT => (Family::ChebyshevT, false),
        P::ChebyshevU => (Family::ChebyshevU, false),
        P::ChebyshevV => (Family::ChebyshevV, false),
        P::ChebyshevW => (Family::ChebyshevW, false),
        P::ShiftedChebyshevT => (Family::ChebyshevT, true),
        P::ShiftedChebyshevU => (Family::ChebyshevU, true),
        P::ShiftedChebyshevV => (Family::ChebyshevV, true),
        P::ShiftedChebyshevW => (Family::ChebyshevW, true),
        P::HermiteH => (Family::HermiteH, false),
        P::HermiteHe => (Family::HermiteHe, false),
        P::LaguerreL => (Family::Laguerre, false),
        P::LegendreP => (Family::Legendre, false),
    }
}

fn value<'c, 'a>(e: &Emitter<'c, 'a>, p: &Param<'c, 'a, '_>, d: DType, dims: &[i64]) -> RuleResult<Tv<'c, 'a>> {
    match p {
        Param::Tensor(t) => e.broadcast_to(&e.convert(t, d)?, dims),
        Param::Attr(a) => match Scalar::from_attr(a) {
            Some(s) => e.constant(d, dims, s),
            None => bad!("expected a tensor or a number"),
        },
        Param::Absent => bad!("missing operand"),
    }
}

/// P_1 given x (already shifted for the shifted families).
fn first<'c, 'b>(e: &Emitter<'c, 'b>, f: Family, x: &Tv<'c, 'b>) -> RuleResult<Tv<'c, 'b>> {
    let d = x.dtype;
    let c = |v: f64| e.constant(d, &x.dims, Scalar::F(v));
    let two_x = e.ew(hlo::ADD, &[x, x], d)?;
    Ok(match f {
        Family::ChebyshevT | Family::HermiteHe | Family::Legendre => x.clone(),
        Family::ChebyshevU | Family::HermiteH => two_x,
        Family::ChebyshevV => e.ew(hlo::SUBTRACT, &[&two_x, &c(1.0)?], d)?,
        Family::ChebyshevW => e.ew(hlo::ADD, &[&two_x, &c(1.0)?], d)?,
        Family::Laguerre => e.ew(hlo::SUBTRACT, &[&c(1.0)?, x], d)?,
    })
}

/// P_k from p = P_{k-2}, q = P_{k-1}; `k` is a float tensor of x's shape.
fn next<'c, 'b>(
    e: &Emitter<'c, 'b>,
    f: Family,
    x: &Tv<'c, 'b>,
    k: &Tv<'c, 'b>,
    p: &Tv<'c, 'b>,
    q: &Tv<'c, 'b>,
) -> RuleResult<Tv<'c, 'b>> {
    let d = x.dtype;
    let c = |v: f64| e.constant(d, &x.dims, Scalar::F(v));
    let mul = |a: &Tv<'c, 'b>, b: &Tv<'c, 'b>| e.ew(hlo::MULTIPLY, &[a, b], d);
    let sub = |a: &Tv<'c, 'b>, b: &Tv<'c, 'b>| e.ew(hlo::SUBTRACT, &[a, b], d);
    let add = |a: &Tv<'c, 'b>, b: &Tv<'c, 'b>| e.ew(hlo::ADD, &[a, b], d);
    let km1 = sub(k, &c(1.0)?)?;
    Ok(match f {
        // 2x q - p
        Family::ChebyshevT | Family::ChebyshevU | Family::ChebyshevV | Family::ChebyshevW => {
            sub(&mul(&add(x, x)?, q)?, p)?
        }
        // 2x q - 2(k-1) p
        Family::HermiteH => sub(&mul(&add(x, x)?, q)?, &mul(&add(&km1, &km1)?, p)?)?,
        // x q - (k-1) p
        Family::HermiteHe => sub(&mul(x, q)?, &mul(&km1, p)?)?,
        // ((2(k-1) + 1 - x) q - (k-1) p) / k
        Family::Laguerre => {
            let a = sub(&add(&add(&km1, &km1)?, &c(1.0)?)?, x)?;
            e.ew(hlo::DIVIDE, &[&sub(&mul(&a, q)?, &mul(&km1, p)?)?, k], d)?
        }
        // ((2(k-1) + 1) x q - (k-1) p) / k
        Family::Legendre => {
            let a = add(&add(&km1, &km1)?, &c(1.0)?)?;
            e.ew(hlo::DIVIDE, &[&sub(&mul(&mul(&a, x)?, q)?, &mul(&km1, p)?)?, k], d)?
        }
    })
}

/// special_*_polynomial_*(x, n) in all overloads (x and/or n may be numbers).
pub fn polynomial<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let poly: Polynomial = n.param()?;
    let name = poly.text();
    let (f, shifted) = family(poly);
    let d = n.out_dtype();
    if !d.is_float() {
        return bad!("{name} must produce a float result");
    }
    let dims = n.out_dims().to_vec();
    let ps = n.params(&["x", "n"]);
    let mut x = value(e, &ps[0], d, &dims)?;
    if shifted {
        let one = e.constant(d, &dims, Scalar::F(1.0))?;
        x = e.ew(hlo::SUBTRACT, &[&e.ew(hlo::ADD, &[&x, &x], d)?, &one], d)?;
    }
    // The degree, truncated toward zero as ATen's static_cast<int64_t>.
    let deg = match &ps[1] {
        Param::Tensor(t) if !t.dtype.is_float() => e.broadcast_to(&e.convert(t, DType::I64)?, &dims)?,
        other => e.convert(&value(e, other, d, &dims)?, DType::I64)?,
    };
    let p0 = e.constant(d, &dims, Scalar::F(1.0))?;
    let p1 = first(e, f, &x)?;
    let zero = e.constant(d, &dims, Scalar::F(0.0))?;
    let is =
        |k: i64| -> RuleResult<Tv<'c, 'a>> { e.compare(&deg, &e.constant(DType::I64, &dims, Scalar::I(k))?, Cmp::Eq) };
    let start = e.select(&is(0)?, &p0, &e.select(&is(1)?, &p1, &zero)?)?;
    let all: Vec<usize> = (0..dims.len()).collect();
    let max_deg = reduce_with(e, &deg, &all, Reduction::Max)?;
    let k0 = e.constant(DType::I64, &[], Scalar::I(2))?;
    let out = e.while_loop(
        &[&k0, &max_deg, &x, &deg, &p0, &p1, &start],
        |b, s| b.compare(&s[0], &s[1], Cmp::Le),
        |b, s| {
            let (k, max_deg, x, deg, p, q, res) = (&s[0], &s[1], &s[2], &s[3], &s[4], &s[5], &s[6]);
            let dims = x.dims.clone();
            let kf = b.broadcast_in_dim(&b.convert(k, d)?, &dims, &[])?;
            let r = next(b, f, x, &kf, p, q)?;
            let ki = b.broadcast_in_dim(k, &dims, &[])?;
            let hit = b.compare(deg, &ki, Cmp::Eq)?;
            let res = b.select(&hit, &r, res)?;
            let k1 = b.ew(hlo::ADD, &[k, &b.constant(DType::I64, &[], Scalar::I(1))?], DType::I64)?;
            Ok(vec![k1, max_deg.clone(), x.clone(), deg.clone(), q.clone(), r, res])
        },
    )?;
    Ok(vec![out[6].clone()])
}
