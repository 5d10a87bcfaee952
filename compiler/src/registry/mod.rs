//! The op registry: everything the compiler knows per op, declared once (`table.rs`).
//!
//! Each entry holds the op's traits (elementwise, view, reduction, random, in-place, side
//! effects), its verifier signature (counts, required attributes, shape rule), its lowering
//! (a rule function, the StableHLO op or variant the rule is parameterised by, and a legality
//! check that refuses unsupported forms before anything is emitted), its decomposition policy
//! (which side wins where PyTorch also decomposes the op) and a slot for its sharding rule.
//!
//! Every other list is derived from it: the verifier's shape checks, CSE/DCE's purity,
//! `form-regions`' elementwise and reduction sets, the lowering's dispatch, Python's supported
//! set (`torchtpu._C.supported_ops`), `torchtpu-opt --list-ops` and `docs/ops.md`.
//! Ops the registry does not describe are still valid IR: the verifier checks only the
//! generic invariants, and lowering reports them unsupported (the backend runs them eagerly).

mod table;

use crate::ir::ops::{Arity, ShapeRule};
use crate::ir::OpName;
use crate::lower::legality::LegalFn;
use crate::lower::RuleFn;
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
    pub required_attrs: &'static [&'static str],
    pub shape: ShapeRule,
}

/// How an op is lowered to StableHLO.
#[derive(Clone, Copy)]
pub struct Lowering {
    /// The family rule that emits it, and its name (`elementwise::unary`) for listings.
    pub rule: RuleFn,
    pub rule_name: &'static str,
    /// What the family rule is parameterised by: the StableHLO/CHLO op it emits
    /// (`stablehlo.exponential`), a comparison direction (`LT`) or the variant (`isnan`).
    pub param: Option<&'static str>,
    /// Refuses forms the rule does not lower (`round` with `decimals != 0`) before anything is
    /// emitted, from the node's attributes and types alone.
    pub legal: Option<LegalFn>,
}

/// Which side wins where PyTorch (or torchtpu's Python decompositions) can also decompose an
/// op that the registry lowers. A test (`python/tests/test_registry.py`) fails when an op is
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

/// How an op's layouts over a device mesh follow from its operands' (`sharding::rules`):
/// the family rule and its name (`elementwise`, `dot`, ...), which explain reports as the
/// origin of every layout it decides. Ops without one are replicated.
#[derive(Clone, Copy)]
pub struct ShardingRule {
    pub rule: crate::sharding::rules::ShardingFn,
    pub name: &'static str,
}

/// How an op takes part in a channels-last region (`passes::assign_layouts`): which operands
/// and results are rank-4 activations that can be NHWC instead of NCHW, and what the op needs
/// told. Elementwise ops follow their operands without being told (`OpDef::layout_rule`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutRule {
    /// Results laid out like the (broadcast) operands.
    Elementwise,
    /// Operand 0 and result 0 NHWC by the `channels_last` attribute; the weight stays OIHW.
    Convolution,
    /// Operand 0 and result 0 NHWC by `channel_dim = 3`; the per-channel operands and results
    /// are unchanged.
    BatchNorm,
    /// The `dim` attribute renumbered; result 0 NHWC when kept rank-4 (`keepdim`).
    Reduction,
    /// Pooling: operand 0 and the 4-D results (values, indices) NHWC by `channels_last`.
    Pool,
}

/// One op, declared once.
#[derive(Clone, Copy)]
pub struct OpDef {
    /// `namespace.name`, without overload (`aten.add`); a rule handles every overload.
    pub name: &'static str,
    pub traits: Traits,
    pub signature: Option<Signature>,
    pub lowering: Option<Lowering>,
    pub decomposition: Decomposition,
    pub sharding: Option<ShardingRule>,
    pub layout: Option<LayoutRule>,
}

impl OpDef {
    /// An op with no traits, signature or lowering yet (the table's builder starts here).
    pub const fn new(name: &'static str) -> OpDef {
        OpDef {
            name,
            traits: Traits::NONE,
            signature: None,
            lowering: None,
            decomposition: Decomposition::None,
            sharding: None,
            layout: None,
        }
    }

    pub const fn traits(mut self, t: Traits) -> OpDef {
        self.traits = self.traits.union(t);
        self
    }

    pub const fn sig(mut self, s: Signature) -> OpDef {
        self.signature = Some(s);
        self
    }

    /// Lowered by `rule` (the table's `rule!` gives the function and its name).
    pub const fn rule(mut self, (rule, rule_name): (RuleFn, &'static str)) -> OpDef {
        self.lowering = Some(Lowering { rule, rule_name, param: None, legal: None });
        self
    }

    /// Lowered by the family `rule`, parameterised by `param`.
    pub const fn rule_with(mut self, (rule, rule_name): (RuleFn, &'static str), param: &'static str) -> OpDef {
        self.lowering = Some(Lowering { rule, rule_name, param: Some(param), legal: None });
        self
    }

    /// The legality check of the lowering set before (`rule`/`rule_with` come first: the
    /// table does not compile otherwise).
    pub const fn legal(mut self, legal: LegalFn) -> OpDef {
        match &mut self.lowering {
            Some(l) => l.legal = Some(legal),
            None => panic!("OpDef::legal before OpDef::rule"),
        }
        self
    }

    /// Sharded by the family rule `s` (the table's `S::*` constants).
    pub const fn shard(mut self, s: ShardingRule) -> OpDef {
        self.sharding = Some(s);
        self
    }

    /// Takes part in channels-last regions by `l`.
    pub const fn layout(mut self, l: LayoutRule) -> OpDef {
        self.layout = Some(l);
        self
    }

    /// The op's layout rule: its own, or `Elementwise` for an elementwise op.
    pub fn layout_rule(&self) -> Option<LayoutRule> {
        self.layout.or(self.traits.contains(Traits::ELEMENTWISE).then_some(LayoutRule::Elementwise))
    }

    pub const fn decomposition(mut self, d: Decomposition) -> OpDef {
        self.decomposition = d;
        self
    }

    pub fn is_lowered(&self) -> bool {
        self.lowering.is_some()
    }
}

fn index() -> &'static HashMap<&'static str, &'static OpDef> {
    static INDEX: OnceLock<HashMap<&'static str, &'static OpDef>> = OnceLock::new();
    INDEX.get_or_init(|| table::OPS.iter().map(|d| (d.name, d)).collect())
}

/// The entry of `op` (any overload), or `None` for an op the registry does not describe.
pub fn lookup(op: &OpName) -> Option<&'static OpDef> {
    lookup_name(&op.base())
}

/// The entry of `namespace.name` (no overload).
pub fn lookup_name(name: &str) -> Option<&'static OpDef> {
    index().get(name).copied()
}

/// Every entry, in table order.
pub fn all() -> &'static [OpDef] {
    table::OPS
}

/// The ops with a lowering (`namespace.name`), in table order: what the backend compiles.
pub fn lowered_ops() -> Vec<&'static str> {
    all().iter().filter(|d| d.is_lowered()).map(|d| d.name).collect()
}

/// Whether `op` is lowered at all (a form of it may still be refused by its legality check).
pub fn is_lowered(op: &OpName) -> bool {
    lookup(op).is_some_and(OpDef::is_lowered)
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

/// One line per op: name, traits, lowering (rule and parameter), decomposition policy,
/// signature. What `torchtpu-opt --list-ops` prints.
pub fn listing() -> String {
    let mut out = String::new();
    for d in all() {
        let traits = d.traits.names().join(",");
        let lowering = match &d.lowering {
            Some(l) => match l.param {
                Some(p) => format!("{}({p})", l.rule_name),
                None => l.rule_name.to_string(),
            },
            None => "-".to_string(),
        };
        let legal = if d.lowering.and_then(|l| l.legal).is_some() { " legality-checked" } else { "" };
        let sig = match &d.signature {
            Some(s) => format!(" operands={} results={} shape={:?}", s.operands, s.results, s.shape),
            None => String::new(),
        };
        let sharding = d.sharding.map_or("-", |r| r.name);
        out.push_str(&format!(
            "{} traits=[{traits}] lowering={lowering}{legal} decomposition={} sharding={sharding}{sig}\n",
            d.name,
            d.decomposition.name()
        ));
    }
    out
}

/// `docs/ops.md`: the registry as a Markdown table (a test compares it with the file).
pub fn markdown() -> String {
    let mut out = String::from(
        "# Ops\n\nGenerated from the op registry (`compiler/src/registry/table.rs`) by\n\
         `torchtpu-opt --list-ops=markdown`; `compiler/tests/registry_docs.rs` fails when this file is stale.\n\n\
         - **lowering**: the family rule and what it is parameterised by; *checked*: a legality\n  \
         check refuses some forms before emission (that node runs eagerly, the rest compiles).\n\
         - **decomposition**: where PyTorch also decomposes the op, which side wins (`lowering`: Python\n  \
         leaves it whole; `python`: AOTAutograd decomposes it, the lowering serves direct IR).\n\
         - **sharding**: the rule `propagate-sharding` lays the op out over a mesh with (`docs/sharding.md`;\n  \
         blank: no rule, its inputs are gathered and its results replicated).\n\
         - **verified**: the verifier's shape rule (blank: generic checks only).\n\n",
    );
    let lowered = all().iter().filter(|d| d.is_lowered()).count();
    out.push_str(&format!("{} ops, {lowered} lowered.\n\n", all().len()));
    out.push_str("| op | traits | lowering | decomposition | sharding | verified |\n|---|---|---|---|---|---|\n");
    for d in all() {
        let lowering = match &d.lowering {
            Some(l) => {
                let p = l.param.map(|p| format!(" `{p}`")).unwrap_or_default();
                let c = if l.legal.is_some() { ", *checked*" } else { "" };
                format!("`{}`{p}{c}", l.rule_name)
            }
            None => "—".to_string(),
        };
        let sig = d.signature.map(|s| format!("{:?}", s.shape)).unwrap_or_default();
        out.push_str(&format!(
            "| `{}` | {} | {lowering} | {} | {} | {sig} |\n",
            d.name,
            d.traits.names().join(", "),
            d.decomposition.name(),
            d.sharding.map(|r| format!("`{}`", r.name)).unwrap_or_default()
        ));
    }
    out
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
        assert!(is_lowered(&op));
        assert!(lookup(&OpName::parse("aten.no_such_op").unwrap()).is_none());
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

    #[test]
    fn listing_has_one_line_per_op() {
        assert_eq!(listing().lines().count(), all().len());
        assert!(listing().contains("aten.exp traits=[elementwise] lowering=elementwise::unary(stablehlo.exponential)"));
    }
}
