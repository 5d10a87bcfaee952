//! What a lowering rule sees of its node: lowered operands, attributes by schema name, and the
//! declared result types. Tensor arguments are operands in schema order; every other argument
//! (scalars, lists, dtypes, `None` for an absent optional tensor) is an attribute named after
//! its schema parameter. `params` resolves a schema parameter list against that convention.

use super::emitter::Tv;
use super::error::{bad, RuleError, RuleResult};
use super::param::{FromParam, RuleParam};
use crate::ir::{Attr, DType, Node};

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

    pub fn attr(&self, name: &str) -> Option<&'n Attr> {
        self.node.attrs.get(name)
    }

    pub fn arg(&self, i: usize) -> RuleResult<&Tv<'c, 'a>> {
        match self.args.get(i) {
            Some(t) => Ok(t),
            None => bad!("expected at least {} tensor operands, got {}", i + 1, self.args.len()),
        }
    }

    pub fn int(&self, name: &str) -> RuleResult<i64> {
        match self.attr(name) {
            Some(Attr::Int(i)) => Ok(*i),
            Some(Attr::Bool(b)) => Ok(*b as i64),
            Some(other) => bad!("attribute '{name}' must be an int, got {other:?}"),
            None => bad!("missing attribute '{name}'"),
        }
    }

    pub fn int_or(&self, name: &str, default: i64) -> RuleResult<i64> {
        match self.attr(name) {
            None | Some(Attr::None) => Ok(default),
            Some(_) => self.int(name),
        }
    }

    pub fn ints(&self, name: &str) -> RuleResult<Vec<i64>> {
        match self.attr(name) {
            Some(Attr::IntList(v)) => Ok(v.clone()),
            Some(Attr::Int(i)) => Ok(vec![*i]),
            Some(other) => bad!("attribute '{name}' must be an int list, got {other:?}"),
            None => bad!("missing attribute '{name}'"),
        }
    }

    /// An int list, or `None` when absent or `none` (e.g. `sum`'s `dim=None`).
    pub fn opt_ints(&self, name: &str) -> RuleResult<Option<Vec<i64>>> {
        match self.attr(name) {
            None | Some(Attr::None) => Ok(None),
            Some(_) => self.ints(name).map(Some),
        }
    }

    pub fn float_or(&self, name: &str, default: f64) -> RuleResult<f64> {
        match self.attr(name) {
            None | Some(Attr::None) => Ok(default),
            Some(a) => match a.as_number() {
                Some(x) => Ok(x),
                None => bad!("attribute '{name}' must be a number, got {a:?}"),
            },
        }
    }

    pub fn bool_or(&self, name: &str, default: bool) -> RuleResult<bool> {
        match self.attr(name) {
            None | Some(Attr::None) => Ok(default),
            Some(Attr::Bool(b)) => Ok(*b),
            Some(Attr::Int(i)) => Ok(*i != 0),
            Some(a) => bad!("attribute '{name}' must be a bool, got {a:?}"),
        }
    }

    pub fn str_or<'s>(&'s self, name: &str, default: &'s str) -> RuleResult<&'s str> {
        match self.attr(name) {
            None | Some(Attr::None) => Ok(default),
            Some(Attr::Str(s)) => Ok(s),
            Some(a) => bad!("attribute '{name}' must be a string, got {a:?}"),
        }
    }

    /// Resolves schema parameters in order: an attribute of that name wins, else the next
    /// tensor operand, else `Absent`.
    pub fn params(&self, names: &[&str]) -> Vec<Param<'c, 'a, 'n>> {
        let mut next = 0;
        names
            .iter()
            .map(|n| match self.attr(n) {
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
