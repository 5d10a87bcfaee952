//! The op catalog: the vocabulary (`registry`) joined with every layer's side table
//! (lowering, sharding, layout). What `torchtpu-opt --list-ops`, `docs/ops.md` and Python's
//! registry view show. It sits above all the layers it joins; nothing below imports it.

use crate::lower::table::{lowering_of, Lowering};
use crate::passes::layout_rules::{layout_rule_of, LayoutRule};
use crate::registry::{self, OpDef, OpId};
use crate::sharding::table::{sharding_rule_of, ShardingRule};

/// One op with each layer's rule.
#[derive(Clone, Copy)]
pub struct OpEntry {
    pub def: &'static OpDef,
    pub lowering: Option<&'static Lowering>,
    pub sharding: Option<&'static ShardingRule>,
    pub layout: Option<LayoutRule>,
}

impl OpEntry {
    pub fn is_lowered(&self) -> bool {
        self.lowering.is_some()
    }
}

/// Every op of the vocabulary, in table order, with its rules.
pub fn entries() -> Vec<OpEntry> {
    registry::all()
        .iter()
        .map(|def| {
            let id: OpId = registry::id_of_name(def.name).expect("a table entry has an id");
            OpEntry { def, lowering: lowering_of(id), sharding: sharding_rule_of(id), layout: layout_rule_of(id) }
        })
        .collect()
}

/// One line per op: name, traits, lowering (rule and parameter), decomposition policy,
/// sharding and layout rules, signature. What `torchtpu-opt --list-ops` prints.
pub fn listing() -> String {
    let mut out = String::new();
    for e in entries() {
        let d = e.def;
        let traits = d.traits.names().join(",");
        let lowering = match e.lowering {
            Some(l) => match l.param {
                Some(p) => format!("{}({p})", l.rule_name),
                None => l.rule_name.to_string(),
            },
            None => "-".to_string(),
        };
        let legal = if e.lowering.and_then(|l| l.legal).is_some() { " legality-checked" } else { "" };
        let sig = match &d.signature {
            Some(s) => format!(" operands={} results={} shape={:?}", s.operands, s.results, s.shape),
            None => String::new(),
        };
        let sharding = e.sharding.map_or("-", |r| r.name);
        let layout = e.layout.map_or("-", LayoutRule::name);
        out.push_str(&format!(
            "{} traits=[{traits}] lowering={lowering}{legal} decomposition={} sharding={sharding} layout={layout}{sig}\n",
            d.name,
            d.decomposition.name()
        ));
    }
    out
}

/// `docs/ops.md`: the catalog as a Markdown table (a test compares it with the file).
pub fn markdown() -> String {
    let mut out = String::from(
        "# Ops\n\nGenerated from the op vocabulary (`compiler/src/registry/table.rs`) and each layer's side table \
         (`lower/table.rs`, `sharding/table.rs`, `passes/layout_rules.rs`) by\n\
         `torchtpu-opt --list-ops=markdown`; `compiler/tests/registry_docs.rs` fails when this file is stale.\n\n\
         - **lowering**: the family rule and what it is parameterised by; *checked*: a legality\n  \
         check refuses some forms before emission (that node runs eagerly, the rest compiles).\n\
         - **decomposition**: where PyTorch also decomposes the op, which side wins (`lowering`: Python\n  \
         leaves it whole; `python`: AOTAutograd decomposes it, the lowering serves direct IR).\n\
         - **sharding**: the rule `propagate-sharding` lays the op out over a mesh with (`docs/sharding.md`;\n  \
         blank: no rule, its inputs are gathered and its results replicated).\n\
         - **layout**: how the op takes part in a channels-last region of `assign-layouts` (blank: it\n  \
         ends the region).\n\
         - **verified**: the verifier's shape rule (blank: generic checks only).\n\n",
    );
    let entries = entries();
    let lowered = entries.iter().filter(|e| e.is_lowered()).count();
    out.push_str(&format!("{} ops, {lowered} lowered.\n\n", entries.len()));
    out.push_str(
        "| op | traits | lowering | decomposition | sharding | layout | verified |\n|---|---|---|---|---|---|---|\n",
    );
    for e in &entries {
        let d = e.def;
        let lowering = match e.lowering {
            Some(l) => {
                let p = l.param.map(|p| format!(" `{p}`")).unwrap_or_default();
                let c = if l.legal.is_some() { ", *checked*" } else { "" };
                format!("`{}`{p}{c}", l.rule_name)
            }
            None => "—".to_string(),
        };
        let sig = d.signature.map(|s| format!("{:?}", s.shape)).unwrap_or_default();
        out.push_str(&format!(
            "| `{}` | {} | {lowering} | {} | {} | {} | {sig} |\n",
            d.name,
            d.traits.names().join(", "),
            d.decomposition.name(),
            e.sharding.map(|r| format!("`{}`", r.name)).unwrap_or_default(),
            e.layout.map(|l| format!("`{}`", l.name())).unwrap_or_default(),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_has_one_line_per_op_with_every_layer() {
        assert_eq!(listing().lines().count(), registry::all().len());
        assert!(listing().contains(
            "aten.exp traits=[elementwise] lowering=elementwise::unary(stablehlo.exponential) decomposition=lowering \
             sharding=elementwise layout=elementwise"
        ));
        assert!(listing().contains("aten.convolution traits=[] lowering=nn::convolution"), "{}", listing());
    }
}
