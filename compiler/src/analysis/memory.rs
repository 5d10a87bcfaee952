//! Liveness and a peak-memory estimate for a graph run in its canonical order.
//!
//! Model: every op result is one buffer, allocated when its node runs and freed after its
//! last consumer ran; graph outputs stay live to the end; inputs belong to the caller and
//! are resident throughout. Ops that only reinterpret a row-major buffer (view, reshape,
//! squeeze, unsqueeze, alias, ...) allocate nothing: their result shares the operand's buffer,
//! which then lives until the last use of any of its aliases. At a node, its operands and its
//! results coexist, so the live total is measured after allocating the node's results and
//! before freeing what it was the last user of. Symbolic dims count as 0 bytes and are
//! reported. XLA schedules and fuses on its own, so this estimates what the order we emit
//! asks for, not XLA's exact allocation.

use crate::ir::{Graph, NodeId, NodeKind, TensorType, Value};
use std::collections::HashMap;

/// Ops whose result is the operand's buffer read differently (no allocation).
pub fn is_alias_op(base: &str) -> bool {
    matches!(
        base,
        "aten.view"
            | "aten.reshape"
            | "aten._unsafe_view"
            | "aten.squeeze"
            | "aten.unsqueeze"
            | "aten.flatten"
            | "aten.alias"
            | "aten.detach"
    )
}

/// Bytes of a value and whether its type is symbolic (then 0 bytes). Sizes past u64 (only
/// unverified IR has them) saturate.
pub fn value_bytes(t: &TensorType) -> (u64, bool) {
    let (b, sym) = bytes_wide(t);
    (saturate(b), sym)
}

/// Sizes are summed in u128, so a few values near i64::MAX bytes each do not overflow; one
/// value counts at most u64::MAX bytes, so sums of them fit too.
fn bytes_wide(t: &TensorType) -> (u128, bool) {
    match t.static_dims() {
        Some(dims) => {
            let b = dims.iter().fold(t.dtype.size_bytes() as u128, |acc, &d| acc.saturating_mul(d.max(0) as u128));
            (b.min(u64::MAX as u128), false)
        }
        None => (0, true),
    }
}

fn saturate(b: u128) -> u64 {
    u64::try_from(b).unwrap_or(u64::MAX)
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemoryEstimate {
    /// Largest live total, in bytes (inputs included).
    pub peak_bytes: u64,
    /// The node at which the peak occurs (None for a graph without ops).
    pub peak_node: Option<NodeId>,
    /// Bytes of the graph's inputs (resident throughout).
    pub input_bytes: u64,
    /// Bytes of distinct output buffers.
    pub output_bytes: u64,
    /// Bytes allocated over the whole run (every op buffer once).
    pub allocated_bytes: u64,
    /// Number of buffers the ops allocate.
    pub buffers: usize,
    /// Live bytes at each op node, in canonical order.
    pub live_at: Vec<(NodeId, u64)>,
    /// Some type had a symbolic dim (counted as 0 bytes).
    pub has_symbolic: bool,
}

/// The estimate as computed, in u128; `MemoryEstimate` saturates it to u64.
#[derive(Default)]
struct Wide {
    peak: u128,
    peak_node: Option<NodeId>,
    input: u128,
    output: u128,
    allocated: u128,
    buffers: usize,
    live_at: Vec<(NodeId, u128)>,
    has_symbolic: bool,
}

impl Wide {
    fn narrow(self) -> MemoryEstimate {
        MemoryEstimate {
            peak_bytes: saturate(self.peak),
            peak_node: self.peak_node,
            input_bytes: saturate(self.input),
            output_bytes: saturate(self.output),
            allocated_bytes: saturate(self.allocated),
            buffers: self.buffers,
            live_at: self.live_at.into_iter().map(|(id, b)| (id, saturate(b))).collect(),
            has_symbolic: self.has_symbolic,
        }
    }
}

/// The buffer each value lives in: its own, or (for alias ops) its operand's.
pub(crate) struct Buffers {
    pub of_value: HashMap<Value, usize>,
    pub bytes: Vec<u128>,
    pub is_input: Vec<bool>,
}

pub(crate) fn assign_buffers(g: &Graph, order: &[NodeId], has_symbolic: &mut bool) -> Buffers {
    let mut b = Buffers { of_value: HashMap::new(), bytes: Vec::new(), is_input: Vec::new() };
    for &id in order {
        let node = g.node(id);
        let alias = node.op().is_some_and(|op| is_alias_op(&op.base())) && node.operands.len() == 1;
        for (r, ty) in node.results.iter().enumerate() {
            let v = Value::new(id, r as u32);
            if alias {
                let buf = b.of_value[&node.operands[0]];
                b.of_value.insert(v, buf);
                continue;
            }
            let (bytes, sym) = bytes_wide(ty);
            *has_symbolic |= sym;
            b.of_value.insert(v, b.bytes.len());
            b.bytes.push(bytes);
            b.is_input.push(matches!(node.kind, NodeKind::Input(_)));
        }
    }
    b
}

/// Estimates peak memory for the graph's canonical order.
pub fn estimate(g: &Graph) -> Result<MemoryEstimate, NodeId> {
    estimate_order(g, &g.topo_order()?)
}

/// Estimates peak memory for `order` (a topological order of every node).
pub fn estimate_order(g: &Graph, order: &[NodeId]) -> Result<MemoryEstimate, NodeId> {
    Ok(estimate_wide(g, order).narrow())
}

fn estimate_wide(g: &Graph, order: &[NodeId]) -> Wide {
    let mut est = Wide::default();
    let bufs = assign_buffers(g, order, &mut est.has_symbolic);
    let position: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, &id)| (id, i)).collect();
    // Last position at which each buffer is read; outputs are read "after the end".
    let mut last_use = vec![0usize; bufs.bytes.len()];
    let end = order.len();
    for &id in order {
        for v in &g.node(id).operands {
            let buf = bufs.of_value[v];
            last_use[buf] = last_use[buf].max(position[&id]);
        }
    }
    let mut output_seen = vec![false; bufs.bytes.len()];
    for v in g.outputs() {
        let buf = bufs.of_value[v];
        last_use[buf] = end;
        if !output_seen[buf] {
            output_seen[buf] = true;
            est.output = est.output.saturating_add(bufs.bytes[buf]);
        }
    }
    // Buffers to free after each position.
    let mut frees: Vec<Vec<usize>> = vec![Vec::new(); end + 1];
    for (buf, &pos) in last_use.iter().enumerate() {
        if !bufs.is_input[buf] {
            frees[pos].push(buf);
        }
    }
    est.input =
        bufs.bytes.iter().zip(&bufs.is_input).filter(|(_, &i)| i).fold(0u128, |acc, (b, _)| acc.saturating_add(*b));
    let mut live = est.input;
    est.peak = live;
    let mut allocated = vec![false; bufs.bytes.len()];
    for (pos, &id) in order.iter().enumerate() {
        let node = g.node(id);
        if matches!(node.kind, NodeKind::Input(_)) {
            continue;
        }
        for r in 0..node.results.len() as u32 {
            let buf = bufs.of_value[&Value::new(id, r)];
            if !allocated[buf] && !bufs.is_input[buf] {
                allocated[buf] = true;
                live = live.saturating_add(bufs.bytes[buf]);
                est.allocated = est.allocated.saturating_add(bufs.bytes[buf]);
                est.buffers += 1;
                // A result nobody reads is freed right after its node.
                if last_use[buf] == 0 && !frees[pos].contains(&buf) {
                    frees[pos].push(buf);
                }
            }
        }
        est.live_at.push((id, live));
        if live > est.peak || est.peak_node.is_none() {
            est.peak = est.peak.max(live);
            if live >= est.peak {
                est.peak_node = Some(id);
            }
        }
        for &buf in &frees[pos] {
            if allocated[buf] {
                live = live.saturating_sub(bufs.bytes[buf]);
                allocated[buf] = false;
            }
        }
    }
    est
}

/// Input/output aliasing for buffer donation: each output, in order, is paired with the first
/// unpaired input of exactly its type. The runtime hands every execution private copies of
/// the inputs, so any such pairing is safe; XLA then writes the output into the input's
/// buffer (copying first if the input is still read after the output is produced), which
/// saves the output's allocation. Mutated inputs (an optimizer's parameters, batch norm's
/// running statistics) come back as outputs of their own type, so they pair naturally.
pub fn donation_pairs(g: &Graph) -> Vec<(usize, usize)> {
    let inputs: Vec<&TensorType> = g.inputs().iter().map(|&i| &g.node(i).results[0]).collect();
    let mut taken = vec![false; inputs.len()];
    let mut pairs = Vec::new();
    for (o, v) in g.outputs().iter().enumerate() {
        let ty = g.value_type(*v);
        if ty.static_dims().is_none() || ty.numel() == Some(0) {
            continue;
        }
        // An output that is an input as is: pair it with that input first.
        let same = g.inputs().iter().position(|&i| i == v.node).filter(|&i| !taken[i]);
        let pick = same.or_else(|| (0..inputs.len()).find(|&i| !taken[i] && inputs[i] == ty));
        if let Some(i) = pick {
            taken[i] = true;
            pairs.push((i, o));
        }
    }
    pairs
}

/// The peak estimate when the inputs in `donated` (by input index) are freed after their last
/// reader instead of staying resident.
pub fn estimate_with_donation(g: &Graph, donated: &[usize]) -> Result<MemoryEstimate, NodeId> {
    let order = g.topo_order()?;
    let mut est = estimate_wide(g, &order);
    if donated.is_empty() {
        return Ok(est.narrow());
    }
    // Replay the live totals, subtracting each donated input from its last reader on.
    let position: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, &id)| (id, i)).collect();
    let mut release = vec![0u128; order.len() + 1];
    for &i in donated {
        let id = g.inputs()[i];
        let v = Value::new(id, 0);
        if g.outputs().contains(&v) {
            continue;
        }
        let last = g.uses(v).iter().map(|(user, _)| position[user]).max().unwrap_or(0);
        release[last] = release[last].saturating_add(bytes_wide(&g.node(id).results[0]).0);
    }
    let mut freed = 0u128;
    let mut peak = 0u128;
    let mut peak_node = est.peak_node;
    let mut op_index = 0;
    for (pos, &id) in order.iter().enumerate() {
        if matches!(g.node(id).kind, NodeKind::Input(_)) {
            freed = freed.saturating_add(release[pos]);
            continue;
        }
        let live = est.live_at[op_index].1.saturating_sub(freed);
        est.live_at[op_index].1 = live;
        if live >= peak {
            peak = live;
            peak_node = Some(id);
        }
        op_index += 1;
        freed = freed.saturating_add(release[pos]);
    }
    // A graph without ops peaks at its inputs.
    est.peak = if op_index == 0 { est.input } else { peak };
    est.peak_node = peak_node;
    Ok(est.narrow())
}

/// "1.5 MiB" style sizes for reports.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = b as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{x:.2} {}", UNITS[u])
    }
}

/// How the printed IR names `id`: `%12 (aten.mm.default)` for an op (ops are %0, %1, ... in
/// canonical order), `input` for a graph input.
pub fn node_name(g: &Graph, id: NodeId) -> String {
    let name = g.node(id).op().map(|o| o.to_string()).unwrap_or_else(|| "input".into());
    let printed = g
        .topo_order()
        .ok()
        .and_then(|order| order.iter().filter(|&&n| matches!(g.node(n).kind, NodeKind::Op(_))).position(|&n| n == id));
    match printed {
        Some(i) => format!("%{i} ({name})"),
        None => name,
    }
}

/// An estimate as data that outlives its graph (the driver's result, a graph-cache entry's
/// sidecar): the node at the peak by its printed name, and what donation changes.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MemorySummary {
    pub peak_bytes: u64,
    /// The node at the peak as printed (`node_name`); None for a graph without ops.
    pub peak_at: Option<String>,
    pub input_bytes: u64,
    pub output_bytes: u64,
    pub allocated_bytes: u64,
    pub buffers: usize,
    pub has_symbolic: bool,
    /// Inputs donated to outputs (0 without donation) and their bytes.
    pub donated_inputs: usize,
    pub donated_bytes: u64,
    /// The peak if no input were donated (`peak_bytes` when none is).
    pub peak_bytes_without_donation: u64,
}

impl MemorySummary {
    /// The summary of `est` (without donation) for `g`.
    pub fn of(g: &Graph, est: &MemoryEstimate) -> MemorySummary {
        MemorySummary {
            peak_bytes: est.peak_bytes,
            peak_at: est.peak_node.map(|id| node_name(g, id)),
            input_bytes: est.input_bytes,
            output_bytes: est.output_bytes,
            allocated_bytes: est.allocated_bytes,
            buffers: est.buffers,
            has_symbolic: est.has_symbolic,
            donated_inputs: 0,
            donated_bytes: 0,
            peak_bytes_without_donation: est.peak_bytes,
        }
    }

    /// The estimate of `g` with the inputs `donated` (by index) freed after their last reader.
    pub fn with_donation(g: &Graph, donated: &[usize]) -> Result<MemorySummary, NodeId> {
        let plain = estimate(g)?;
        if donated.is_empty() {
            return Ok(MemorySummary::of(g, &plain));
        }
        let est = estimate_with_donation(g, donated)?;
        let bytes =
            donated.iter().map(|&i| value_bytes(&g.node(g.inputs()[i]).results[0]).0).fold(0u64, u64::saturating_add);
        Ok(MemorySummary {
            donated_inputs: donated.len(),
            donated_bytes: bytes,
            peak_bytes_without_donation: plain.peak_bytes,
            ..MemorySummary::of(g, &est)
        })
    }

    /// The one-line report `torchtpu-opt --print-memory` prints.
    pub fn report(&self) -> String {
        let peak_at = self.peak_at.as_ref().map(|p| format!(" at {p}")).unwrap_or_default();
        let mut s = format!(
            "// memory: peak {} ({} bytes){peak_at}; inputs {}, outputs {}, {} buffers allocating {}",
            human_bytes(self.peak_bytes),
            self.peak_bytes,
            human_bytes(self.input_bytes),
            human_bytes(self.output_bytes),
            self.buffers,
            human_bytes(self.allocated_bytes),
        );
        if self.has_symbolic {
            s.push_str("; symbolic dims counted as 0 bytes");
        }
        s
    }
}

/// The report `torchtpu-opt --print-memory` prints.
pub fn report(g: &Graph, est: &MemoryEstimate) -> String {
    MemorySummary::of(g, est).report()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::parser::parse_graph as parse;

    fn est(text: &str) -> MemoryEstimate {
        estimate(&parse(text).unwrap()).unwrap()
    }

    #[test]
    fn chain_frees_each_intermediate_after_its_consumer() {
        // input 400 B; %0 400 B; %1 400 B (while %0 is live): peak 1200 at %1; %2 reuses %0's space.
        let e = est("graph @g(%x: f32[100]) -> (f32[100]) {\n  %0 = aten.exp.default(%x) : f32[100]\n  %1 = aten.exp.default(%0) : f32[100]\n  %2 = aten.exp.default(%1) : f32[100]\n  return %2\n}\n");
        assert_eq!(e.input_bytes, 400);
        assert_eq!(e.peak_bytes, 1200);
        assert_eq!(e.allocated_bytes, 1200);
        assert_eq!(e.output_bytes, 400);
        assert_eq!(e.buffers, 3);
    }

    #[test]
    fn views_share_their_operand_buffer() {
        let e = est("graph @g(%x: f32[10, 10]) -> (f32[100]) {\n  %0 = aten.exp.default(%x) : f32[10, 10]\n  %1 = aten.view.default(%0) {size = [100]} : f32[100]\n  return %1\n}\n");
        assert_eq!(e.buffers, 1);
        assert_eq!(e.peak_bytes, 800);
    }

    #[test]
    fn outputs_pair_with_inputs_of_their_type() {
        // The updated running mean (f32[4]) pairs with the running-mean input, not with x.
        let g = parse("graph @g(%x: f32[2, 4], %mean: f32[4]) -> (f32[2, 4], f32[4]) {\n  %0 = aten.relu.default(%x) : f32[2, 4]\n  %1 = aten.mul.Tensor(%mean) {other = 0.9} : f32[4]\n  return %0, %1\n}\n").unwrap();
        assert_eq!(donation_pairs(&g), vec![(0, 0), (1, 1)]);
        // Donating x frees its 32 bytes after relu read it: the peak is x + relu's result at
        // relu, then relu + mean + mul instead of x + relu + mean + mul.
        let plain = estimate(&g).unwrap();
        let donated = estimate_with_donation(&g, &[0, 1]).unwrap();
        assert_eq!(plain.peak_bytes, 32 + 16 + 32 + 16);
        assert_eq!(donated.peak_bytes, 32 + 16 + 32);
    }

    #[test]
    fn values_used_late_stay_live() {
        // %0 is read again by %2, so it coexists with %1 and %2.
        let e = est("graph @g(%x: f32[10]) -> (f32[10]) {\n  %0 = aten.exp.default(%x) : f32[10]\n  %1 = aten.exp.default(%x) : f32[10]\n  %2 = aten.add.Tensor(%0, %1) : f32[10]\n  return %2\n}\n");
        assert_eq!(e.peak_bytes, 40 * 4);
    }

    #[test]
    fn sizes_past_u64_saturate_instead_of_overflowing() {
        // Unverified IR (the verifier rejects these types): 2^64 bytes per value, three live.
        let e = est("graph @g(%x: f32[4611686018427387904]) -> (f32[4611686018427387904]) {\n  %0 = aten.exp.default(%x) : f32[4611686018427387904]\n  %1 = aten.exp.default(%0) : f32[4611686018427387904]\n  return %1\n}\n");
        assert_eq!(e.peak_bytes, u64::MAX);
        assert_eq!(e.input_bytes, u64::MAX);
        assert!(!e.has_symbolic);
        let g = parse("graph @g(%x: i64[9223372036854775807, 9223372036854775807]) -> (i64[9223372036854775807, 9223372036854775807]) {\n  %0 = aten.neg.default(%x) : i64[9223372036854775807, 9223372036854775807]\n  return %0\n}\n").unwrap();
        let donated = estimate_with_donation(&g, &[0]).unwrap();
        assert_eq!(donated.peak_bytes, u64::MAX);
        assert_eq!(value_bytes(&g.node(g.inputs()[0]).results[0]), (u64::MAX, false));
    }

    #[test]
    fn a_summary_names_its_peak_and_what_donation_saves() {
        let g = parse("graph @g(%x: f32[2, 4], %mean: f32[4]) -> (f32[2, 4], f32[4]) {\n  %0 = aten.relu.default(%x) : f32[2, 4]\n  %1 = aten.mul.Tensor(%mean) {other = 0.9} : f32[4]\n  return %0, %1\n}\n").unwrap();
        let s = MemorySummary::with_donation(&g, &[0, 1]).unwrap();
        assert_eq!((s.donated_inputs, s.donated_bytes, s.peak_bytes_without_donation), (2, 48, 96));
        assert_eq!(s.peak_at.as_deref(), Some("%0 (aten.relu.default)"));
    }
}
