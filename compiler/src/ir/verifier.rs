//! The verifier: structural invariants (operands name existing results, acyclicity, one result
//! per input, valid shapes) plus each known op's counts, required attributes and shape rule.

use super::attr::Attr;
use super::graph::{is_ident, Graph, NodeId, NodeKind, SourceLoc, Value};
use super::ops::ShapeRule;
use super::printer::ValueNames;
use super::types::{broadcast_shapes, DType, Dim, TensorType};
use crate::registry::attrs::{DIMS, SIZE, VALUE};
use std::fmt;

/// A verification failure, naming the node (as printed: `%3`, `%arg0`) and its op, and where
/// the node was written when it came from text. `Display` leaves the position out (callers
/// add their file name in front of `located()`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyError {
    pub node: Option<String>,
    pub op: Option<String>,
    pub message: String,
    pub loc: Option<SourceLoc>,
}

impl VerifyError {
    /// `LINE:COL: node %3 (op): message` when the position is known, else as `Display`: the
    /// form parse errors have, so tools print both as `file:LINE:COL: ...`.
    pub fn located(&self) -> String {
        match self.loc {
            Some(loc) => format!("{loc}: {self}"),
            None => self.to_string(),
        }
    }
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.node, &self.op) {
            (Some(n), Some(op)) => write!(f, "node {n} ({op}): {}", self.message),
            (Some(n), None) => write!(f, "node {n}: {}", self.message),
            _ => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for VerifyError {}

#[cfg(test)]
thread_local! {
    /// How many graphs this thread verified: the driver's tests count a compile's verifications.
    pub(crate) static VERIFIED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

pub fn verify(g: &Graph) -> Result<(), VerifyError> {
    #[cfg(test)]
    VERIFIED.with(|n| n.set(n.get() + 1));
    let graph_err = |message: String| VerifyError { node: None, op: None, message, loc: None };
    if !g.name.split(['.', '-']).all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')) {
        return Err(graph_err(format!("graph name '{}' must be letters, digits, '_', '.' or '-'", g.name)));
    }
    if let Err(on_cycle) = g.topo_order() {
        let names = ValueNames::for_graph(g);
        return Err(VerifyError {
            node: Some(names.node(on_cycle).to_string()),
            op: None,
            message: "the graph has a cycle through this node".into(),
            loc: g.node(on_cycle).loc,
        });
    }
    for (s, r) in &g.symbols {
        if r.max.is_some_and(|m| m < r.min) {
            return Err(graph_err(format!("symbol s{s} has an empty range")));
        }
    }
    for (i, &id) in g.inputs().iter().enumerate() {
        let n = g.node(id);
        if n.kind != NodeKind::Input(i) || n.results.len() != 1 || !n.operands.is_empty() {
            return Err(graph_err(format!("input {i} is malformed")));
        }
        check_type(&n.results[0]).map_err(|m| VerifyError { loc: n.loc, ..graph_err(format!("input {i}: {m}")) })?;
    }
    for (i, &o) in g.outputs().iter().enumerate() {
        if g.try_value_type(o).is_none() {
            return Err(graph_err(format!("output {i} refers to a value that does not exist")));
        }
    }
    if let Some(mesh) = &g.mesh {
        mesh.check().map_err(graph_err)?;
    }
    for id in g.petgraph().node_indices() {
        // Names are computed only on failure: printing every name costs more than verifying.
        verify_node(g, id).and_then(|()| verify_shardings(g, id)).map_err(|message| VerifyError {
            node: Some(ValueNames::for_graph(g).node(id).to_string()),
            op: g.node(id).op().map(|o| o.to_string()),
            message,
            loc: g.node(id).loc,
        })?;
    }
    Ok(())
}

fn check_type(t: &TensorType) -> Result<(), String> {
    if let Some(d) = t.shape.iter().find(|d| matches!(d, Dim::Static(n) if *n < 0)) {
        return Err(format!("type {t} has negative dimension {d}"));
    }
    if !t.size_fits() {
        return Err(format!("type {t} is too large: its size in bytes overflows i64"));
    }
    Ok(())
}

/// Each sharding of `id`'s results names the graph's mesh axes, once each, and divides its dims.
fn verify_shardings(g: &Graph, id: NodeId) -> Result<(), String> {
    if !g.has_shardings() {
        return Ok(());
    }
    for (r, ty) in g.node(id).results.iter().enumerate() {
        let Some(s) = g.sharding(Value::new(id, r as u32)) else { continue };
        let Some(mesh) = &g.mesh else {
            return Err(format!("result {r} has a sharding but the graph declares no mesh"));
        };
        s.check(mesh, ty).map_err(|m| format!("result {r}: {m}"))?;
    }
    Ok(())
}

fn verify_node(g: &Graph, id: NodeId) -> Result<(), String> {
    let node = g.node(id);
    let NodeKind::Op(op) = &node.kind else { return Ok(()) };
    for (i, v) in node.operands.iter().enumerate() {
        if g.try_value_type(*v).is_none() {
            return Err(format!("operand {i} refers to a value that does not exist"));
        }
    }
    for t in &node.results {
        check_type(t)?;
    }
    for (k, a) in &node.attrs {
        if !is_ident(k) {
            return Err(format!("attribute name '{k}' is not an identifier"));
        }
        if let Attr::Tensor(l) = a {
            check_type(&l.ty).map_err(|m| format!("attribute '{k}': {m}"))?;
            if l.ty.numel() != Some(l.elems.len() as i64) {
                return Err(format!("attribute '{k}': literal of type {} has {} elements", l.ty, l.elems.len()));
            }
        }
    }
    let Some(info) = crate::registry::lookup(op).and_then(|d| d.signature) else { return Ok(()) };
    if !info.operands.accepts(node.operands.len()) {
        return Err(format!("expects {} operands, got {}", info.operands, node.operands.len()));
    }
    if !info.results.accepts(node.results.len()) {
        return Err(format!("expects {} results, got {}", info.results, node.results.len()));
    }
    for a in info.required_attrs {
        match node.attrs.get(a.name) {
            None => return Err(format!("missing required attribute '{}'", a.name)),
            Some(v) if !a.kind.accepts(v) => {
                let mut text = String::new();
                crate::ir::printer::print_attr(&mut text, v);
                return Err(format!("attribute '{}' must be {}, got {text}", a.name, a.kind.describe()));
            }
            Some(_) => {}
        }
    }
    let operand = |i: usize| g.value_type(node.operands[i]);
    let result = &node.results[0];
    let shape_mismatch = |expected: &[Dim]| {
        let want = TensorType::new(result.dtype, expected.to_vec());
        Err(format!("result type {result} does not match the operands: expected shape of {want}"))
    };
    match info.shape {
        ShapeRule::Free => {}
        ShapeRule::SameShape => {
            if result.shape != operand(0).shape {
                return shape_mismatch(&operand(0).shape);
            }
        }
        ShapeRule::Broadcast | ShapeRule::Compare => {
            let mut shape: Vec<Dim> = Vec::new();
            for (i, v) in node.operands.iter().enumerate() {
                shape = broadcast_shapes(&shape, &g.value_type(*v).shape).ok_or_else(|| {
                    format!("operand {i} of type {} does not broadcast with the others", g.value_type(*v))
                })?;
            }
            if result.shape != shape {
                return shape_mismatch(&shape);
            }
            if info.shape == ShapeRule::Compare && result.dtype != DType::Bool {
                return Err(format!("comparison result must be bool, got {result}"));
            }
        }
        ShapeRule::MatMul | ShapeRule::BatchMatMul | ShapeRule::AddMm => {
            let (a, b) =
                if info.shape == ShapeRule::AddMm { (operand(1), operand(2)) } else { (operand(0), operand(1)) };
            let rank = if info.shape == ShapeRule::BatchMatMul { 3 } else { 2 };
            if a.rank() != rank || b.rank() != rank {
                return Err(format!("expects rank-{rank} operands, got {a} and {b}"));
            }
            let (ak, bk) = (a.shape[rank - 1], b.shape[rank - 2]);
            if ak != bk {
                return Err(format!("contracting dims differ: {a} and {b}"));
            }
            if rank == 3 && a.shape[0] != b.shape[0] {
                return Err(format!("batch dims differ: {a} and {b}"));
            }
            let mut expected = a.shape[..rank - 1].to_vec();
            expected.push(b.shape[rank - 1]);
            if result.shape != expected {
                return shape_mismatch(&expected);
            }
            if info.shape == ShapeRule::AddMm
                && broadcast_shapes(&operand(0).shape, &expected).as_deref() != Some(&expected[..])
            {
                return Err(format!("bias {} does not broadcast to {}", operand(0), result));
            }
        }
        ShapeRule::Reshape => {
            if let (Some(a), Some(b)) = (operand(0).numel(), result.numel()) {
                if a != b {
                    return Err(format!("reshape changes the element count: {} to {result}", operand(0)));
                }
            }
            if let (Some(Attr::IntList(size)), Some(dims)) = (node.attr(SIZE), result.static_dims()) {
                let resolved = resolve_size(size, operand(0).numel());
                if resolved.as_deref() != Some(&dims[..]) {
                    return Err(format!("size {size:?} does not match the result type {result}"));
                }
            }
        }
        ShapeRule::Permute => {
            let Some(Attr::IntList(perm)) = node.attr(DIMS) else { return Err("'dims' must be an int list".into()) };
            let input = operand(0);
            let perm = normalize_permutation(perm, input.rank())
                .ok_or_else(|| format!("dims {perm:?} is not a permutation of rank {}", input.rank()))?;
            let expected: Vec<Dim> = perm.iter().map(|&p| input.shape[p]).collect();
            if result.shape != expected {
                return shape_mismatch(&expected);
            }
        }
        ShapeRule::Constant => match node.attr(VALUE) {
            Some(Attr::Tensor(l)) if &l.ty == result => {}
            Some(Attr::Tensor(l)) => {
                return Err(format!("literal type {} differs from the result type {result}", l.ty))
            }
            _ => return Err("'value' must be a dense literal".into()),
        },
    }
    Ok(())
}

/// Resolves a `view` size list with at most one `-1` against a known element count.
pub fn resolve_size(size: &[i64], numel: Option<i64>) -> Option<Vec<i64>> {
    let unknown: Vec<usize> = size.iter().enumerate().filter(|(_, &d)| d == -1).map(|(i, _)| i).collect();
    if size.iter().any(|&d| d < -1) || unknown.len() > 1 {
        return None;
    }
    let mut out = size.to_vec();
    if let Some(&i) = unknown.first() {
        let known = size.iter().filter(|&&d| d != -1).try_fold(1i64, |acc, &d| acc.checked_mul(d))?;
        let numel = numel?;
        if known == 0 || numel % known != 0 {
            return None;
        }
        out[i] = numel / known;
    }
    Some(out)
}

/// Normalises negative dims and checks that `perm` is a permutation of `0..rank`.
pub fn normalize_permutation(perm: &[i64], rank: usize) -> Option<Vec<usize>> {
    if perm.len() != rank {
        return None;
    }
    let mut seen = vec![false; rank];
    let mut out = Vec::with_capacity(rank);
    for &p in perm {
        let d = normalize_dim(p, rank)?;
        if std::mem::replace(&mut seen[d], true) {
            return None;
        }
        out.push(d);
    }
    Some(out)
}

/// PyTorch's dim wrapping: `-1` is the last dim.
pub fn normalize_dim(d: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let d = if d < 0 { d + r } else { d };
    (0..r.max(1)).contains(&d).then_some(d as usize)
}

/// Convenience for passes: the type of a value, if the value is valid.
pub fn value_dims(g: &Graph, v: Value) -> Option<Vec<i64>> {
    g.try_value_type(v)?.static_dims()
}
