//! The layout side table of `assign-layouts`: how an op takes part in a channels-last region
//! (which operands and results are rank-4 activations that can be NHWC instead of NCHW, and
//! what the op needs told). Elementwise ops follow their operands without an entry. Keyed by
//! `OpId` (`registry::SideTable`).

use crate::ir::OpName;
use crate::registry::{self, OpId, SideTable, Traits};

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

impl LayoutRule {
    pub fn name(self) -> &'static str {
        match self {
            LayoutRule::Elementwise => "elementwise",
            LayoutRule::Convolution => "convolution",
            LayoutRule::BatchNorm => "batch-norm",
            LayoutRule::Reduction => "reduction",
            LayoutRule::Pool => "pool",
        }
    }
}

static RULES: SideTable<LayoutRule> = SideTable::new(|| TABLE.iter().map(|(op, r)| (*op, r)).collect());

/// The layout rule of the op `id`: its own, or `Elementwise` for an elementwise op.
pub fn layout_rule_of(id: OpId) -> Option<LayoutRule> {
    RULES.get(id).copied().or(id.def().traits.contains(Traits::ELEMENTWISE).then_some(LayoutRule::Elementwise))
}

/// The layout rule of `op` (any overload).
pub fn layout_rule(op: &OpName) -> Option<LayoutRule> {
    layout_rule_of(registry::id(op)?)
}

use LayoutRule as L;

// One line per op: the table reads as a table.
#[rustfmt::skip]
static TABLE: &[(&str, LayoutRule)] = &[
    // reductions
    ("aten.sum", L::Reduction),
    ("aten.mean", L::Reduction),
    ("aten.amax", L::Reduction),
    // neural-network ops
    ("aten._native_batch_norm_legit_no_training", L::BatchNorm),
    ("aten._native_batch_norm_legit_functional", L::BatchNorm),
    ("aten._native_batch_norm_legit", L::BatchNorm),
    ("aten.convolution", L::Convolution),
    ("aten.max_pool2d_with_indices", L::Pool),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_names_a_declared_op_once_and_elementwise_ops_follow() {
        assert_eq!(RULES.len(), TABLE.len());
        assert_eq!(layout_rule(&OpName::parse("aten.convolution.default").unwrap()), Some(LayoutRule::Convolution));
        assert_eq!(layout_rule(&OpName::parse("aten.relu.default").unwrap()), Some(LayoutRule::Elementwise));
        assert_eq!(layout_rule(&OpName::parse("aten.mm.default").unwrap()), None);
    }
}
