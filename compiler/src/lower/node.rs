//! What a lowering rule sees of its node: lowered operands, attributes by schema name, and the
//! declared result types. Tensor arguments are operands in schema order; every other argument
//! (scalars, lists, dtypes, `None` for an absent optional tensor) is an attribute named after
//! its schema parameter. `params` resolves a schema parameter list against that convention.

use super::emitter::Tv;
use super::error::{bad, RuleError, RuleResult};
use super::param::{FromParam, RuleParam};
use crate::ir::{Attr, DType, Node};
use crate::registry::attrs::{AttrKey, Kind};

pub struct NodeCtx<'c, 'a, 'n> {
    pub node: &'n Node,
    pub args: Vec<Tv<'c, 'a>>,
    /// Declared results: (dtype, static dims).
    pub results: Vec<(DType, Vec<i64>)>,
    /// Per result: whether anything reads it (a node or the graph's outputs). A rule may skip
    /// the work of an unread result (it still returns a value of the declared type).
    pub used: Vec<bool>,
    /// What the lowering table parameterises the family rule by for this op (`lower::param`).
    pub param: Option<RuleParam>,
}

/// One resolved schema parameter.
#[derive(Clone, Debug)]
pub enum Param<'c, 'a, 'n> {
    Tensor(Tv<'c, 'a>),
    Attr(&'n Attr),
    /// Neither an attribute nor an operand left: the parameter took its default.
    Absent,
}

impl<'c, 'a, 'n> Param<'c, 'a, 'n> {
    pub fn tensor(&self) -> Option<&Tv<'c, 'a>> {
        match self {
            Param::Tensor(t) => Some(t),
            _ => None,
        }
    }

    pub fn is_none(&self) -> bool {
        matches!(self, Param::Absent | Param::Attr(Attr::None))
    }
}

impl<'c, 'a, 'n> NodeCtx<'c, 'a, 'n> {
    /// The table's parameter for this op, of the kind the family rule takes; a missing one or
    /// one of another kind is a table bug.
    pub fn param<P: FromParam>(&self) -> RuleResult<P> {
        match self.param {
            Some(p) => P::from_param(p).ok_or_else(|| {
                RuleError::Bad(format!("the table gives this op's family rule a parameter of another kind ({p:?})"))
            }),
            None => bad!("the table gives this op's family rule no parameter"),
        }
    }

    pub fn out_dtype(&self) -> DType {
        self.results[0].0
    }

    pub fn out_dims(&self) -> &[i64] {
        &self.results[0].1
    }

    pub fn arg(&self, i: usize) -> RuleResult<&Tv<'c, 'a>> {
        match self.args.get(i) {
            Some(t) => Ok(t),
            None => bad!("expected at least {} tensor operands, got {}", i + 1, self.args.len()),
        }
    }

    /// The attribute `key` names, of its kind; missing or of another kind is bad IR.
    pub fn get<K: Kind>(&self, key: AttrKey<K>) -> RuleResult<K::Value<'n>> {
        match self.raw(key) {
            Some(a) => typed(key, a),
            None => bad!("missing attribute '{}'", key.name),
        }
    }

    /// The attribute `key` names, or `default` when absent or `none`.
    pub fn get_or<K: Kind>(&self, key: AttrKey<K>, default: K::Value<'n>) -> RuleResult<K::Value<'n>> {
        Ok(self.opt(key)?.unwrap_or(default))
    }

    /// The attribute `key` names, or None when absent or `none` (e.g. `sum`'s `dim=None`).
    pub fn opt<K: Kind>(&self, key: AttrKey<K>) -> RuleResult<Option<K::Value<'n>>> {
        match self.raw(key) {
            None | Some(Attr::None) => Ok(None),
            Some(a) => typed(key, a).map(Some),
        }
    }

    /// The attribute `key` names as written (a tensor-or-scalar the rule reads itself).
    pub fn raw<K>(&self, key: AttrKey<K>) -> Option<&'n Attr> {
        self.node.attrs.get(key.name)
    }

    /// Resolves schema parameters in order: an attribute of that name wins, else the next
    /// tensor operand, else `Absent`.
    pub fn params(&self, names: &[&str]) -> Vec<Param<'c, 'a, 'n>> {
        let mut next = 0;
        names
            .iter()
            .map(|n| match self.node.attrs.get(*n) {
                Some(a) => Param::Attr(a),
                None if next < self.args.len() => {
                    next += 1;
                    Param::Tensor(self.args[next - 1].clone())
                }
                None => Param::Absent,
            })
            .collect()
    }
}

/// The product of `dims` (an element count, or the extent of some dims), or a rule error when
/// it overflows i64. The verifier bounds every declared type, but rules also multiply dims
/// taken from attributes and shapes of their own making.
pub fn product(dims: impl IntoIterator<Item = i64>) -> RuleResult<i64> {
    let dims: Vec<i64> = dims.into_iter().collect();
    match crate::ir::types::checked_numel(&dims) {
        Some(n) => Ok(n),
        None => bad!("the product of dims {dims:?} overflows i64"),
    }
}

/// Normalises a possibly negative dim against `rank` (PyTorch wrapping; rank 0 accepts 0/-1).
pub fn dim(d: i64, rank: usize) -> RuleResult<usize> {
    match crate::ir::verifier::normalize_dim(d, rank) {
        Some(x) => Ok(x),
        None => bad!("dim {d} is out of range for rank {rank}"),
    }
}

/// As `dim`, for rules that index the dims: a 0-d tensor has no dim to slice, split or
/// select (PyTorch raises for those too).
pub fn axis(d: i64, rank: usize) -> RuleResult<usize> {
    if rank == 0 {
        return bad!("dim {d} of a 0-d tensor");
    }
    dim(d, rank)
}

/// `a` read as `key`'s kind, or bad IR naming the attribute and the kind it must be.
fn typed<K: Kind>(key: AttrKey<K>, a: &Attr) -> RuleResult<K::Value<'_>> {
    match K::read(a) {
        Some(v) => Ok(v),
        None => bad!("attribute '{}' must be {}, got {a:?}", key.name, K::KIND.describe()),
    }
}
