//! Cross-replica collectives of replicated programs (`c10d.*`): the StableHLO form of
//! PyTorch's functional collectives. A replicated program runs once per replica, each on its
//! own device; `groups` lists replica ids group by group (flattened, `group_size` each), so
//! `groups = [0, 1, 2, 3], group_size = 2` is the two groups {0, 1} and {2, 3}. Which device a
//! replica is, is the runtime's choice (its device assignment), not the compiler's.

use crate::ir::{DType, Scalar};
use crate::lower::emitter::{Emitter, Tv};
use crate::lower::error::{bad, RuleResult};
use crate::lower::legality::Check;
use crate::lower::names::hlo;
use crate::lower::node::NodeCtx;
use crate::registry::attrs::{CONCAT_DIM, DIM, GROUPS, GROUPS_LIST, GROUP_SIZE, REDUCE_OP, SPLIT_DIM, SRC};

type R<'c, 'a> = RuleResult<Vec<Tv<'c, 'a>>>;

/// The reductions a collective takes (PyTorch's `ReduceOp` names, lower case).
const REDUCE_OPS: [&str; 5] = ["sum", "avg", "product", "min", "max"];

/// The replica groups as StableHLO's `replica_groups` attribute text.
fn replica_groups(n: &NodeCtx) -> RuleResult<(String, i64)> {
    let ids = n.get(GROUPS_LIST)?;
    let size = n.get(GROUP_SIZE)?;
    if size < 1 || ids.is_empty() || ids.len() as i64 % size != 0 {
        return bad!("groups {ids:?} do not split into groups of {size}");
    }
    let rows: Vec<String> = ids
        .chunks(size as usize)
        .map(|g| format!("[{}]", g.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")))
        .collect();
    let text = format!("dense<[{}]> : tensor<{}x{}xi64>", rows.join(", "), rows.len(), size);
    Ok((text, size))
}

/// The scalar combiner of a reduction over `d` (`avg` sums; the caller divides).
fn combiner(kind: &str, d: DType) -> &'static str {
    match (kind, d) {
        ("sum" | "avg", DType::Bool) | ("max", DType::Bool) => hlo::OR,
        ("product", DType::Bool) | ("min", DType::Bool) => hlo::AND,
        ("sum" | "avg", _) => hlo::ADD,
        ("product", _) => hlo::MULTIPLY,
        ("max", _) => hlo::MAXIMUM,
        _ => hlo::MINIMUM,
    }
}

/// Emits a reducing collective (`stablehlo.all_reduce` or `reduce_scatter`) of `x` with the
/// reduction `kind`, then divides by the group size for `avg`.
fn reducing<'c, 'a>(
    e: &Emitter<'c, 'a>,
    n: &NodeCtx<'c, 'a, '_>,
    name: &str,
    extra: &[(&str, melior::ir::Attribute<'c>)],
) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let kind = n.get_or(REDUCE_OP, "sum")?;
    let (groups, size) = replica_groups(n)?;
    let d = x.dtype;
    let op = combiner(kind, d);
    let region = e.scalar_region(&[d, d], |b, a| Ok(vec![b.ew(op, &[&a[0], &a[1]], d)?]))?;
    let mut attrs = vec![("replica_groups", e.attr(&groups)?)];
    attrs.extend_from_slice(extra);
    let dims = n.out_dims().to_vec();
    let v = e.build(name, &[x.v], &[e.ty(d, &dims)], &attrs, vec![region])?[0];
    let out = Tv { v, dtype: d, dims };
    if kind != "avg" {
        return Ok(vec![out]);
    }
    let count = e.constant(d, &out.dims, Scalar::I(size))?;
    Ok(vec![e.ew(hlo::DIVIDE, &[&out, &count], d)?])
}

/// `c10d.all_reduce(x) {reduce_op, groups, group_size}`: every replica of a group gets the
/// reduction of the group's values.
pub fn all_reduce<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    reducing(e, n, hlo::ALL_REDUCE, &[])
}

/// `c10d.reduce_scatter(x) {reduce_op, dim, groups, group_size}`: the reduction, split along
/// `dim` in group order; replica i of a group keeps the i-th piece.
pub fn reduce_scatter<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let dim = n.get_or(DIM, 0)?;
    let scatter = e.attr(&format!("{dim} : i64"))?;
    reducing(e, n, hlo::REDUCE_SCATTER, &[("scatter_dimension", scatter)])
}

/// `c10d.all_gather(x) {dim, groups, group_size}`: the group's values concatenated along
/// `dim` in group order, on every replica of the group.
pub fn all_gather<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let (groups, _) = replica_groups(n)?;
    let dim = n.get_or(DIM, 0)?;
    let attrs = [("all_gather_dim", e.attr(&format!("{dim} : i64"))?), ("replica_groups", e.attr(&groups)?)];
    Ok(vec![e.op(hlo::ALL_GATHER, &[x], x.dtype, n.out_dims(), &attrs)?])
}

/// `c10d.all_to_all(x) {split_dim, concat_dim, groups, group_size}`: `x` split along
/// `split_dim` into `group_size` equal pieces, piece j sent to the group's j-th replica, the
/// received pieces concatenated along `concat_dim` in group order.
pub fn all_to_all<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let (groups, size) = replica_groups(n)?;
    let attrs = [
        ("split_dimension", e.attr(&format!("{} : i64", n.get_or(SPLIT_DIM, 0)?))?),
        ("concat_dimension", e.attr(&format!("{} : i64", n.get_or(CONCAT_DIM, 0)?))?),
        ("split_count", e.attr(&format!("{size} : i64"))?),
        ("replica_groups", e.attr(&groups)?),
    ];
    Ok(vec![e.op(hlo::ALL_TO_ALL, &[x], x.dtype, n.out_dims(), &attrs)?])
}

/// `c10d.broadcast(x) {src, groups, group_size}`: every replica of a group gets the value of
/// the group's `src`-th replica. An all-gather along a new leading dim and a slice of row
/// `src`: one collective that every plugin runs (a one-to-many permute is not a permute).
pub fn broadcast<'c, 'a>(e: &Emitter<'c, 'a>, n: &NodeCtx<'c, 'a, '_>) -> R<'c, 'a> {
    let x = n.arg(0)?;
    let (groups, size) = replica_groups(n)?;
    let src = n.get(SRC)?;
    let mut one = vec![1];
    one.extend_from_slice(&x.dims);
    let lifted = e.reshape(x, &one)?;
    let mut all = one.clone();
    all[0] = size;
    let attrs = [("all_gather_dim", e.attr("0 : i64")?), ("replica_groups", e.attr(&groups)?)];
    let gathered = e.op(hlo::ALL_GATHER, &[&lifted], x.dtype, &all, &attrs)?;
    let mut start = vec![0; all.len()];
    start[0] = src;
    let mut limit = all.clone();
    limit[0] = src + 1;
    let row = e.slice(&gathered, &start, &limit, &vec![1; all.len()])?;
    Ok(vec![e.reshape(&row, &x.dims)?])
}

/// The groups every collective checks: ids that split into groups of `group_size`, each id
/// at most once.
fn groups_legal(c: &Check) -> Result<(), String> {
    let Some(crate::ir::Attr::IntList(ids)) = c.raw(GROUPS) else {
        return Err("needs `groups`, the replica ids group by group".into());
    };
    let size = c.get_or(GROUP_SIZE, 0);
    if size < 1 || ids.is_empty() || ids.len() as i64 % size != 0 {
        return Err(format!("groups {ids:?} do not split into groups of {size}"));
    }
    let mut seen = ids.clone();
    seen.sort_unstable();
    seen.dedup();
    if seen.len() != ids.len() || seen[0] < 0 {
        return Err(format!("groups {ids:?} name a replica twice or a negative one"));
    }
    Ok(())
}

pub fn reducing_legal(c: &Check) -> Result<(), String> {
    groups_legal(c)?;
    let kind = c.get_or(REDUCE_OP, "sum");
    if !REDUCE_OPS.contains(&kind) {
        return Err(format!("reduce_op {kind:?} is not one of {REDUCE_OPS:?}"));
    }
    if kind == "avg" && !c.operand_dtype(0).is_some_and(|d| d.is_float() || d.is_complex()) {
        return Err("reduce_op \"avg\" needs a floating-point tensor (as NCCL's)".into());
    }
    Ok(())
}

pub fn gather_legal(c: &Check) -> Result<(), String> {
    groups_legal(c)
}

pub fn broadcast_legal(c: &Check) -> Result<(), String> {
    groups_legal(c)?;
    let src = c.get_or(SRC, -1);
    if !(0..c.get_or(GROUP_SIZE, 0)).contains(&src) {
        return Err(format!("src {src} is not a position in the group"));
    }
    Ok(())
}
