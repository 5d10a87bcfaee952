//! Legality before emission: whether the lowering table takes a node, decided from the
//! node's op, attributes and types alone, before anything is emitted. A refused node is
//! `LowerError::Unsupported` with the check's reason; the backend asks for every node of a
//! graph at once (`check_graph`) and runs the refused ones eagerly while the rest compiles.

use super::table::{lowering, Lowering};
use crate::ir::{Attr, DType, Graph, Node, NodeId, NodeKind, SourceLoc, TensorType};
use crate::registry::attrs::{AttrKey, Kind};

/// A legality check: `Err(reason)` refuses the node's form ("round with decimals != 0").
pub type LegalFn = fn(&Check) -> Result<(), String>;

/// What a legality check sees: the node (attributes, declared results) and its operand types.
pub struct Check<'g> {
    pub node: &'g Node,
    pub operands: Vec<&'g TensorType>,
}

impl<'g> Check<'g> {
    /// The attribute `key` names as written.
    pub fn raw<K>(&self, key: AttrKey<K>) -> Option<&'g Attr> {
        self.node.attrs.get(key.name)
    }

    /// The attribute `key` names, `default` when absent, `none` or of another kind (ill-typed
    /// attributes are left to the rule, which reports them as bad IR).
    pub fn get_or<K: Kind>(&self, key: AttrKey<K>, default: K::Value<'g>) -> K::Value<'g> {
        self.raw(key).and_then(|a| K::read(a)).unwrap_or(default)
    }

    pub fn out_dtype(&self) -> Option<DType> {
        self.node.results.first().map(|t| t.dtype)
    }

    pub fn operand_dtype(&self, i: usize) -> Option<DType> {
        self.operands.get(i).map(|t| t.dtype)
    }

    pub fn operand_rank(&self, i: usize) -> Option<usize> {
        self.operands.get(i).map(|t| t.rank())
    }
}

/// A node the lowering does not take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub node: NodeId,
    /// `namespace.name` (no overload).
    pub op: String,
    /// `None`: the op has no lowering at all; else the form the legality check refused.
    pub reason: Option<String>,
    /// Where the node was written, when it came from text.
    pub loc: Option<SourceLoc>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.reason {
            Some(r) => write!(f, "{}: {r}", self.op),
            None => write!(f, "{}: no lowering", self.op),
        }
    }
}

/// The lowering of node `id`, or why there is none. Inputs always lower.
pub fn check_node(g: &Graph, id: NodeId) -> Result<Option<&'static Lowering>, Refusal> {
    let node = g.node(id);
    let NodeKind::Op(op) = &node.kind else { return Ok(None) };
    let refuse = |reason| Refusal { node: id, op: op.base(), reason, loc: node.loc };
    let Some(lowering) = lowering(op) else { return Err(refuse(None)) };
    if let Some(legal) = lowering.legal {
        let check = Check { node, operands: node.operands.iter().map(|v| g.value_type(*v)).collect() };
        legal(&check).map_err(|reason| refuse(Some(reason)))?;
    }
    Ok(Some(lowering))
}

/// Every node of `g` the lowering does not take, in node order.
pub fn check_graph(g: &Graph) -> Vec<Refusal> {
    let mut out: Vec<Refusal> = g.petgraph().node_indices().filter_map(|id| check_node(g, id).err()).collect();
    out.sort_by_key(|r| (r.loc.map(|l| (l.line, l.col)), r.node.index()));
    out
}
