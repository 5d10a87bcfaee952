//! The graph: typed inputs, op nodes with typed results, and outputs, held in a petgraph
//! `StableGraph` whose edges mirror node operands (producer -> consumer).

use super::attr::Attr;
use super::sharding::{Mesh, Sharding};
use super::types::{SymRange, TensorType};
use crate::registry::attrs::AttrKey;
use crate::registry::{self, OpId};
use petgraph::stable_graph::{EdgeIndex, NodeIndex, StableDiGraph};
use petgraph::visit::{EdgeRef, NodeIndexable};
use petgraph::Direction;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::fmt;

pub type NodeId = NodeIndex<u32>;

/// One result of one node: the unit of data flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value {
    pub node: NodeId,
    pub result: u32,
}

impl Value {
    pub fn new(node: NodeId, result: u32) -> Value {
        Value { node, result }
    }
}

/// An op name: `namespace.name` plus an optional overload, e.g. `aten.add.Tensor`, with the
/// vocabulary's id of the op resolved once, where the name is made (parsed or built), so that
/// each layer's side table is read by id, not by a formatted string.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpName {
    pub namespace: String,
    pub name: String,
    pub overload: Option<String>,
    /// `registry::id_of_name(namespace.name)`; `None` for an op the vocabulary does not declare.
    id: Option<OpId>,
}

impl OpName {
    /// Parses `ns.name` or `ns.name.overload`.
    pub fn parse(s: &str) -> Option<OpName> {
        let mut parts = s.split('.');
        let namespace = parts.next()?;
        let name = parts.next()?;
        let overload = parts.next();
        if parts.next().is_some() || [Some(namespace), Some(name), overload].iter().flatten().any(|p| !is_ident(p)) {
            return None;
        }
        Some(OpName::new(namespace, name, overload))
    }

    pub fn new(namespace: &str, name: &str, overload: Option<&str>) -> OpName {
        let id = registry::id_of_name(&format!("{namespace}.{name}"));
        OpName { namespace: namespace.into(), name: name.into(), overload: overload.map(Into::into), id }
    }

    /// The vocabulary's id of this op (any overload), resolved when the name was made.
    pub fn id(&self) -> Option<OpId> {
        self.id
    }

    /// `namespace.name` without the overload: what op tables key on.
    pub fn base(&self) -> String {
        format!("{}.{}", self.namespace, self.name)
    }

    pub fn is(&self, namespace: &str, name: &str) -> bool {
        self.namespace == namespace && self.name == name
    }
}

pub(crate) fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl fmt::Display for OpName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.namespace, self.name)?;
        if let Some(o) = &self.overload {
            write!(f, ".{o}")?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum NodeKind {
    /// The graph's `index`-th input.
    Input(usize),
    Op(OpName),
}

impl NodeKind {
    /// Feeds what identifies the kind into a hasher (for CSE-style keys).
    pub fn op_hash<H: std::hash::Hasher>(&self, h: &mut H) {
        use std::hash::Hash;
        match self {
            NodeKind::Input(i) => (0u8, i).hash(h),
            NodeKind::Op(op) => (1u8, op).hash(h),
        }
    }
}

/// Where a node was written in the text form (1-based), for error messages. Not part of the
/// graph's meaning: printing, equality and cache keys ignore it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SourceLoc {
    pub line: u32,
    pub col: u32,
}

impl fmt::Display for SourceLoc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

#[derive(Clone, Debug)]
pub struct Node {
    pub kind: NodeKind,
    pub operands: Vec<Value>,
    /// Sorted by name, so the text form and equality do not depend on insertion order.
    pub attrs: BTreeMap<String, Attr>,
    pub results: Vec<TensorType>,
    /// Set by the parser; nodes that passes create have none.
    pub loc: Option<SourceLoc>,
    /// Creation order; breaks ties in the canonical (printing) order.
    seq: u64,
}

impl Node {
    pub fn op(&self) -> Option<&OpName> {
        match &self.kind {
            NodeKind::Op(op) => Some(op),
            NodeKind::Input(_) => None,
        }
    }

    /// The attribute `key` names, as written.
    pub fn attr<K>(&self, key: AttrKey<K>) -> Option<&Attr> {
        self.attrs.get(key.name)
    }
}

/// Edge weight: which result of the producer feeds which operand slot of the consumer.
#[derive(Clone, Copy, Debug)]
pub struct Use {
    pub result: u32,
    pub operand: u32,
}

#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub name: String,
    g: StableDiGraph<Node, Use, u32>,
    inputs: Vec<NodeId>,
    outputs: Vec<Value>,
    /// Declared ranges of symbolic dims (`s0` -> 0). Undeclared symbols are unbounded.
    pub symbols: BTreeMap<u32, SymRange>,
    /// The device mesh of an SPMD program (None: one device).
    pub mesh: Option<Mesh>,
    /// Per-value layouts over the mesh (a value without one is not yet decided).
    shardings: HashMap<Value, Sharding>,
    next_seq: u64,
}

impl Graph {
    pub fn new(name: impl Into<String>) -> Graph {
        Graph { name: name.into(), ..Graph::default() }
    }

    // ---- construction -------------------------------------------------------------------

    pub fn add_input(&mut self, ty: TensorType) -> Value {
        let index = self.inputs.len();
        let id = self.add_raw(NodeKind::Input(index), Vec::new(), BTreeMap::new(), vec![ty]);
        self.inputs.push(id);
        Value::new(id, 0)
    }

    /// Adds an op node. Operands must name existing nodes; the verifier checks the rest.
    pub fn add_op(
        &mut self,
        op: OpName,
        operands: Vec<Value>,
        attrs: BTreeMap<String, Attr>,
        results: Vec<TensorType>,
    ) -> NodeId {
        self.add_raw(NodeKind::Op(op), operands, attrs, results)
    }

    fn add_raw(
        &mut self,
        kind: NodeKind,
        operands: Vec<Value>,
        attrs: BTreeMap<String, Attr>,
        results: Vec<TensorType>,
    ) -> NodeId {
        let seq = self.next_seq;
        self.next_seq += 1;
        let id = self.g.add_node(Node { kind, operands: operands.clone(), attrs, results, loc: None, seq });
        for (i, v) in operands.iter().enumerate() {
            self.g.add_edge(v.node, id, Use { result: v.result, operand: i as u32 });
        }
        id
    }

    pub fn set_outputs(&mut self, outputs: Vec<Value>) {
        self.outputs = outputs;
    }

    /// Makes `order` (a topological order of every node) the canonical order: creation
    /// numbers are reassigned so that the tie-breaking in `topo_order` reproduces it.
    pub fn set_order(&mut self, order: &[NodeId]) {
        debug_assert_eq!(order.len(), self.g.node_count());
        for (i, &id) in order.iter().enumerate() {
            self.g[id].seq = i as u64;
        }
        self.next_seq = order.len() as u64;
    }

    // ---- queries --------------------------------------------------------------------------

    pub fn node(&self, id: NodeId) -> &Node {
        &self.g[id]
    }

    /// Mutable access to attributes and result types. Operands change only through
    /// `set_operand` / `replace_all_uses`, which keep the edges in step.
    pub fn node_attrs_mut(&mut self, id: NodeId) -> &mut BTreeMap<String, Attr> {
        &mut self.g[id].attrs
    }

    /// Records where the node was written (the parser does; see `SourceLoc`).
    pub fn set_loc(&mut self, id: NodeId, loc: SourceLoc) {
        self.g[id].loc = Some(loc);
    }

    pub fn contains(&self, id: NodeId) -> bool {
        self.g.contains_node(id)
    }

    pub fn value_type(&self, v: Value) -> &TensorType {
        &self.g[v.node].results[v.result as usize]
    }

    /// The type of a value, or `None` if the value names a missing node or result.
    pub fn try_value_type(&self, v: Value) -> Option<&TensorType> {
        self.g.node_weight(v.node)?.results.get(v.result as usize)
    }

    pub fn inputs(&self) -> &[NodeId] {
        &self.inputs
    }

    pub fn input_values(&self) -> Vec<Value> {
        self.inputs.iter().map(|&n| Value::new(n, 0)).collect()
    }

    pub fn outputs(&self) -> &[Value] {
        &self.outputs
    }

    pub fn node_count(&self) -> usize {
        self.g.node_count()
    }

    /// Number of op nodes (inputs excluded).
    pub fn op_count(&self) -> usize {
        self.g.node_count() - self.inputs.len()
    }

    pub fn petgraph(&self) -> &StableDiGraph<Node, Use, u32> {
        &self.g
    }

    /// Consumers of `v`: (node, operand slot), in no particular order.
    pub fn uses(&self, v: Value) -> Vec<(NodeId, u32)> {
        self.g
            .edges_directed(v.node, Direction::Outgoing)
            .filter(|e| e.weight().result == v.result)
            .map(|e| (e.target(), e.weight().operand))
            .collect()
    }

    /// Whether any node or output reads any result of `id`.
    pub fn has_uses(&self, id: NodeId) -> bool {
        self.g.edges_directed(id, Direction::Outgoing).next().is_some() || self.outputs.iter().any(|o| o.node == id)
    }

    pub fn is_output(&self, v: Value) -> bool {
        self.outputs.contains(&v)
    }

    /// The canonical order: a topological order with ties broken by creation order, so
    /// inputs come first and the order is deterministic. `Err` holds a node on a cycle.
    pub fn topo_order(&self) -> Result<Vec<NodeId>, NodeId> {
        // In-degrees in a dense vector indexed by node index (StableGraph keeps indices
        // below node_bound), which is much cheaper than a map on large graphs.
        let mut indegree = vec![0usize; self.g.node_bound()];
        let mut ready = BinaryHeap::new();
        for id in self.g.node_indices() {
            let d = self.g.edges_directed(id, Direction::Incoming).count();
            indegree[id.index()] = d;
            if d == 0 {
                ready.push(Reverse((self.g[id].seq, id)));
            }
        }
        let mut order = Vec::with_capacity(self.g.node_count());
        while let Some(Reverse((_, id))) = ready.pop() {
            order.push(id);
            for e in self.g.edges_directed(id, Direction::Outgoing) {
                let t = e.target();
                let d = &mut indegree[t.index()];
                *d -= 1;
                if *d == 0 {
                    ready.push(Reverse((self.g[t].seq, t)));
                }
            }
        }
        if order.len() == self.g.node_count() {
            Ok(order)
        } else {
            let stuck = self.g.node_indices().find(|id| indegree[id.index()] > 0);
            Err(stuck.expect("a node with remaining in-degree"))
        }
    }

    // ---- rewriting ------------------------------------------------------------------------

    /// Points operand `slot` of `user` at `to`.
    pub fn set_operand(&mut self, user: NodeId, slot: u32, to: Value) {
        let old = self.g[user].operands[slot as usize];
        let edge: Option<EdgeIndex<u32>> =
            self.g.edges_connecting(old.node, user).find(|e| e.weight().operand == slot).map(|e| e.id());
        if let Some(e) = edge {
            self.g.remove_edge(e);
        }
        self.g[user].operands[slot as usize] = to;
        self.g.add_edge(to.node, user, Use { result: to.result, operand: slot });
    }

    /// Redirects every use of `from` (operands and graph outputs) to `to`.
    pub fn replace_all_uses(&mut self, from: Value, to: Value) {
        if from == to {
            return;
        }
        for (user, slot) in self.uses(from) {
            self.set_operand(user, slot, to);
        }
        for o in &mut self.outputs {
            if *o == from {
                *o = to;
            }
        }
    }

    /// Removes an op node that nothing uses any more.
    pub fn remove_node(&mut self, id: NodeId) {
        debug_assert!(!self.has_uses(id), "removing a node that still has uses");
        debug_assert!(matches!(self.g[id].kind, NodeKind::Op(_)), "inputs cannot be removed");
        self.shardings.retain(|v, _| v.node != id);
        self.g.remove_node(id);
    }

    // ---- sharding -------------------------------------------------------------------------

    pub fn sharding(&self, v: Value) -> Option<&Sharding> {
        self.shardings.get(&v)
    }

    pub fn set_sharding(&mut self, v: Value, s: Sharding) {
        self.shardings.insert(v, s);
    }

    pub fn clear_sharding(&mut self, v: Value) {
        self.shardings.remove(&v);
    }

    /// Whether any value has a sharding.
    pub fn has_shardings(&self) -> bool {
        !self.shardings.is_empty()
    }

    /// Structural equality: same name, symbols, input types, outputs, and the same nodes in
    /// canonical order with the same ops, attributes, result types and operands (compared by
    /// canonical position, not by petgraph index).
    pub fn structurally_equal(&self, other: &Graph) -> bool {
        if self.name != other.name
            || self.symbols != other.symbols
            || self.mesh != other.mesh
            || self.inputs.len() != other.inputs.len()
        {
            return false;
        }
        let (Ok(a), Ok(b)) = (self.topo_order(), other.topo_order()) else { return false };
        // Inputs are compared by index (the header), op nodes by their canonical position.
        let ops = |g: &Graph, order: Vec<NodeId>| -> Vec<NodeId> {
            order.into_iter().filter(|n| matches!(g.g[*n].kind, NodeKind::Op(_))).collect()
        };
        let (a, b) = (ops(self, a), ops(other, b));
        if a.len() != b.len() {
            return false;
        }
        let positions = |g: &Graph, order: &[NodeId]| -> HashMap<NodeId, usize> {
            let inputs = g.inputs.iter().enumerate().map(|(i, n)| (*n, usize::MAX - i));
            order.iter().enumerate().map(|(i, n)| (*n, i)).chain(inputs).collect()
        };
        let (pos_a, pos_b) = (positions(self, &a), positions(other, &b));
        let inputs_equal = self.inputs.iter().zip(&other.inputs).all(|(x, y)| {
            self.g[*x].results == other.g[*y].results
                && self.sharding(Value::new(*x, 0)) == other.sharding(Value::new(*y, 0))
        });
        if !inputs_equal {
            return false;
        }
        let same_value = |x: &Value, y: &Value| pos_a[&x.node] == pos_b[&y.node] && x.result == y.result;
        let nodes_equal = a.iter().zip(&b).all(|(&na, &nb)| {
            let (x, y) = (&self.g[na], &other.g[nb]);
            x.kind == y.kind
                && x.attrs == y.attrs
                && x.results == y.results
                && (0..x.results.len() as u32)
                    .all(|r| self.sharding(Value::new(na, r)) == other.sharding(Value::new(nb, r)))
                && x.operands.len() == y.operands.len()
                && x.operands.iter().zip(&y.operands).all(|(p, q)| same_value(p, q))
        });
        nodes_equal
            && self.outputs.len() == other.outputs.len()
            && self.outputs.iter().zip(&other.outputs).all(|(p, q)| same_value(p, q))
    }
}
