//! The op vocabulary at the IR floor: what every layer may know of an op, declared once
//! (`table.rs`): its identity ([`OpId`]), traits (elementwise, view, reduction, random,
//! in-place, side effects), verifier signature (counts, required attributes, shape rule) and
//! decomposition policy (which side wins where PyTorch also decomposes the op).
//!
//! Each layer above keeps its own rules in a side table keyed by [`OpId`] ([`SideTable`]):
//! lowering (`lower/table.rs`), sharding (`sharding/table.rs`) and layout
//! (`passes/layout_rules.rs`). `crate::catalog` joins them for `torchtpu-opt --list-ops`,
//! `docs/ops.md` and Python's registry view. This module imports nothing above the IR
//! (`compiler/tests/layering.rs` checks), so the verifier's signatures no longer pull in
//! lowering.
//!
//! Ops the registry does not describe are still valid IR: the verifier checks only the
//! generic invariants, and lowering reports them unsupported (the backend runs them eagerly).

pub mod attrs;
mod table;

use crate::ir::ops::{Arity, ShapeRule};
use crate::ir::OpName;
use std::collections::HashMap;
use std::sync::OnceLock;

/// Properties of an op that passes and analyses rely on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traits(u8);

impl Traits {
    pub const NONE: Traits = Traits(0);
    /// Each result element depends only on the operand elements at its index (after
    /// broadcasting): `form-regions` fuses these.
    pub const ELEMENTWISE: Traits = Traits(1);
    /// In PyTorch the result shares its operand's memory (reshape, permute, slice, ...).
    pub const VIEW: Traits = Traits(1 << 1);
    /// Reduces dims of its operand (sum, amax, var, argmax, ...).
    pub const REDUCTION: Traits = Traits(1 << 2);
    /// Draws from a random generator: never merged by CSE.
    pub const RANDOM: Traits = Traits(1 << 3);
    /// Writes into an operand: never removed by DCE or merged by CSE.
    pub const IN_PLACE: Traits = Traits(1 << 4);
    /// An effect beyond its results (printing, assertions): kept like an in-place op.
    pub const SIDE_EFFECTS: Traits = Traits(1 << 5);

    const NAMES: [(Traits, &'static str); 6] = [
        (Traits::ELEMENTWISE, "elementwise"),
        (Traits::VIEW, "view"),
        (Traits::REDUCTION, "reduction"),
        (Traits::RANDOM, "random"),
        (Traits::IN_PLACE, "in-place"),
        (Traits::SIDE_EFFECTS, "side-effects"),
    ];

    pub const fn union(self, other: Traits) -> Traits {
        Traits(self.0 | other.0)
    }

    pub const fn contains(self, other: Traits) -> bool {
        self.0 & other.0 == other.0
    }

    /// The trait names, in a fixed order (`elementwise`, `view`, ...).
    pub fn names(self) -> Vec<&'static str> {
        Self::NAMES.iter().filter(|(t, _)| self.contains(*t)).map(|(_, n)| *n).collect()
    }
}

/// What the verifier checks of a node of this op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signature {
    pub operands: Arity,
    pub results: Arity,
    /// Attributes every node of the op carries, each of its declared kind (`attrs.rs`).
    pub required_attrs: &'static [attrs::AttrSpec],
    pub shape: ShapeRule,
}

/// Which side wins where PyTorch (or torchtpu's Python decompositions) can also decompose an
/// op that the registry lowers. A test (`python/tests/structure/test_registry.py`) fails when an op is
/// decomposed in Python and lowered here without one of the explicit policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decomposition {
    /// No decomposition is taken in Python: the lowering is the only route.
    None,
    /// PyTorch has a decomposition, but the lowering wins: Python leaves the op whole.
    Lowering,
    /// Python's decomposition wins in `torch.compile` graphs (AOTAutograd applies it); the
    /// lowering serves IR written directly and single-op programs.
    Python,
}

impl Decomposition {
    pub fn name(self) -> &'static str {
        match self {
            Decomposition::None => "none",
            Decomposition::Lowering => "lowering",
            Decomposition::Python => "python",
        }
    }
}

/// One op, declared once.
#[derive(Clone, Copy)]
pub struct OpDef {
    /// `namespace.name`, without overload (`aten.add`); a rule handles every overload.
    pub name: &'static str,
    pub traits: Traits,
    pub signature: Option<Signature>,
    pub decomposition: Decomposition,
}

impl OpDef {
    /// An op with no traits or signature yet (the table's builder starts here).
    pub const fn new(name: &'static str) -> OpDef {
        OpDef { name, traits: Traits::NONE, signature: None, decomposition: Decomposition::None }
    }

    pub const fn traits(mut self, t: Traits) -> OpDef {
        self.traits = self.traits.union(t);
        self
    }

    pub const fn sig(mut self, s: Signature) -> OpDef {
        self.signature = Some(s);
        self
    }

    pub const fn decomposition(mut self, d: Decomposition) -> OpDef {
        self.decomposition = d;
        self
    }
}

/// An op of the table, by its position: what side tables are keyed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(u16);

impl OpId {
    pub fn index(self) -> usize {
        self.0 as usize
    }

    pub fn def(self) -> &'static OpDef {
        &table::OPS[self.index()]
    }
}

fn index() -> &'static HashMap<&'static str, OpId> {
    static INDEX: OnceLock<HashMap<&'static str, OpId>> = OnceLock::new();
    INDEX.get_or_init(|| {
        let ids = (0..table::OPS.len()).map(|i| OpId(u16::try_from(i).expect("fewer than 65536 ops")));
        table::OPS.iter().map(|d| d.name).zip(ids).collect()
    })
}

/// The id of `op` (any overload), or `None` for an op the registry does not describe.
pub fn id(op: &OpName) -> Option<OpId> {
    op.id()
}

/// The id of `namespace.name` (no overload).
pub fn id_of_name(name: &str) -> Option<OpId> {
    index().get(name).copied()
}

/// The entry of `op` (any overload), or `None` for an op the registry does not describe.
pub fn lookup(op: &OpName) -> Option<&'static OpDef> {
    id(op).map(OpId::def)
}

/// The entry of `namespace.name` (no overload).
pub fn lookup_name(name: &str) -> Option<&'static OpDef> {
    id_of_name(name).map(OpId::def)
}

/// Every entry, in table order.
pub fn all() -> &'static [OpDef] {
    table::OPS
}

/// A layer's rules keyed by [`OpId`]: built once from the layer's `(op name, rule)` list.
/// A name the vocabulary does not declare, or one given twice, is a bug in that layer's
/// table: the build panics, and each layer's unit test builds its table.
pub struct SideTable<T: 'static> {
    by_id: OnceLock<Vec<Option<&'static T>>>,
    entries: fn() -> Vec<(&'static str, &'static T)>,
}

impl<T: Sync + 'static> SideTable<T> {
    pub const fn new(entries: fn() -> Vec<(&'static str, &'static T)>) -> SideTable<T> {
        SideTable { by_id: OnceLock::new(), entries }
    }

    fn by_id(&self) -> &[Option<&'static T>] {
        self.by_id.get_or_init(|| {
            let mut by_id = vec![None; table::OPS.len()];
            for (name, rule) in (self.entries)() {
                let id = id_of_name(name).unwrap_or_else(|| panic!("side table names undeclared op {name}"));
                assert!(by_id[id.index()].replace(rule).is_none(), "side table gives {name} twice");
            }
            by_id
        })
    }

    pub fn get(&self, id: OpId) -> Option<&'static T> {
        self.by_id()[id.index()]
    }

    /// The rule of `op` (any overload).
    pub fn of(&self, op: &OpName) -> Option<&'static T> {
        self.get(id(op)?)
    }

    /// How many ops have a rule.
    pub fn len(&self) -> usize {
        self.by_id().iter().flatten().count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn has_name_effects(op: &OpName) -> bool {
    // Ops the registry does not describe: in-place ATen ops end in `_`.
    op.name.ends_with('_') || matches!(op.name.as_str(), "print" | "_assert_async")
}

/// Ops whose results depend on hidden state (RNG): never merged by CSE.
pub fn is_nondeterministic(op: &OpName) -> bool {
    lookup(op).is_some_and(|d| d.traits.contains(Traits::RANDOM))
}

/// Ops with effects beyond their results: never removed by DCE and never merged by CSE.
pub fn has_side_effects(op: &OpName) -> bool {
    match lookup(op) {
        Some(d) => d.traits.contains(Traits::IN_PLACE) || d.traits.contains(Traits::SIDE_EFFECTS),
        None => has_name_effects(op),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_op_is_declared_once() {
        let mut seen = HashSet::new();
        for d in all() {
            assert!(seen.insert(d.name), "{} is declared twice", d.name);
            assert!(d.name.contains('.') && !d.name.ends_with('.'), "{}: namespace.name", d.name);
        }
    }

    #[test]
    fn lookup_ignores_overloads() {
        let op = OpName::parse("aten.add.Tensor").unwrap();
        assert_eq!(lookup(&op).map(|d| d.name), Some("aten.add"));
        assert_eq!(id(&op).map(|i| i.def().name), Some("aten.add"));
        assert!(lookup(&OpName::parse("aten.no_such_op").unwrap()).is_none());
    }

    #[test]
    fn an_op_name_carries_its_id_from_where_it_is_made() {
        // Parsed and built names resolve the id once; every layer's lookup reads it.
        for op in [OpName::parse("aten.mm.default").unwrap(), OpName::new("aten", "mm", None)] {
            assert_eq!(op.id(), id_of_name("aten.mm"));
            assert!(op.id().is_some());
        }
        assert_eq!(OpName::new("aten", "no_such_op", Some("default")).id(), None);
        // Every declared op's name resolves to its own id.
        for (i, d) in all().iter().enumerate() {
            let (ns, name) = d.name.split_once('.').unwrap();
            assert_eq!(OpName::new(ns, name, None).id().map(OpId::index), Some(i), "{}", d.name);
        }
    }

    #[test]
    fn traits_drive_purity() {
        let dropout = OpName::parse("aten.native_dropout.default").unwrap();
        assert!(is_nondeterministic(&dropout) && !has_side_effects(&dropout));
        // Unregistered in-place ops are recognised by name.
        assert!(has_side_effects(&OpName::parse("aten.add_.Tensor").unwrap()));
        assert!(!has_side_effects(&OpName::parse("aten.add.Tensor").unwrap()));
    }

    #[test]
    fn random_ops_are_never_elementwise_or_views() {
        for d in all() {
            if d.traits.contains(Traits::RANDOM) {
                assert!(!d.traits.contains(Traits::ELEMENTWISE) && !d.traits.contains(Traits::VIEW), "{}", d.name);
            }
        }
    }
}
