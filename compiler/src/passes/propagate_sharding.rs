//! `propagate-sharding`: gives every value of a graph with a mesh its layout over the
//! devices, from the annotations (inputs, `tpu.sharding_constraint`) forward through each
//! op's sharding rule in the op registry. Where an operand's layout is not what its consumer
//! needs, a `tpu.reshard` node is inserted that records its collective and the bytes each
//! device receives; outputs with pending partial sums get their all-reduce the same way.
//! Graphs without a mesh are left alone.

use std::collections::HashMap;

use super::{Pass, PassDecl, PassError, PassOptions};
use crate::ir::{Graph, Mesh, NodeId, NodeKind, OpName, Origin, Sharding, Value};
use crate::registry::attrs::{BYTES, COLLECTIVE, CONSUMER, SHARDING};
use crate::sharding::rules::{replicated, OpView};
use crate::sharding::table::sharding_rule;
use crate::sharding::{is_layout_op, layout_of, reshard, Reshard, Target};

#[derive(Default)]
pub struct PropagateSharding {
    target: Target,
}

impl PropagateSharding {
    /// The pass for `target`, built directly (the driver's, with the target the engine gives).
    pub fn for_target(target: Target) -> PropagateSharding {
        PropagateSharding { target }
    }
}

impl PassDecl for PropagateSharding {
    const NAME: &'static str = "propagate-sharding";
    const DESCRIPTION: &'static str =
        "give every value a layout over the mesh from the annotations and the registry's sharding rules; insert reshards";
    const OPTIONS: &'static [(&'static str, &'static str)] =
        &[("reduce-scatter", "true (default) or false: whether the target's partitioner reduce-scatters")];

    fn with_options(opts: &PassOptions) -> Result<Self, String> {
        let mut pass = PropagateSharding::default();
        for (k, v) in opts {
            match (k.as_str(), v.as_str()) {
                ("reduce-scatter", "true") => pass.target.reduce_scatter = true,
                ("reduce-scatter", "false") => pass.target.reduce_scatter = false,
                ("reduce-scatter", _) => return Err(format!("reduce-scatter must be true or false, got '{v}'")),
                _ => return Err(format!("unknown option '{k}'")),
            }
        }
        Ok(pass)
    }

    /// Lowering needs every layout of a graph with a mesh decided: such a graph is propagated
    /// whatever the pipeline, for the target the engine gives.
    fn required(g: &Graph, target: &Target) -> Option<Self> {
        g.mesh.is_some().then(|| PropagateSharding::for_target(target.clone()))
    }
}

/// Writes what a layout change costs onto its node (the lowering reads `sharding`).
fn record(g: &mut Graph, id: NodeId, r: &Reshard, to: &Sharding) {
    let attrs = g.node_attrs_mut(id);
    COLLECTIVE.set(attrs, if r.is_noop() { "none".into() } else { r.collective.clone() });
    BYTES.set(attrs, r.bytes_per_device as i64);
    SHARDING.set(attrs, to.sdy_dims());
}

/// A value and the layout (dims, partial axes) a consumer wants it in.
type Wanted = (Value, Vec<Vec<String>>, Vec<String>);

struct Propagation<'g> {
    g: &'g mut Graph,
    mesh: Mesh,
    target: Target,
    /// The reshard already made for each wanted layout of a value.
    made: HashMap<Wanted, Value>,
}

impl Propagation<'_> {
    fn layout(&self, v: Value) -> Sharding {
        layout_of(self.g, v)
    }

    /// `v` in layout `want`: `v` itself when it already is, else a (shared) reshard of it.
    fn resharded(&mut self, v: Value, want: &Sharding, at: Option<NodeId>) -> Value {
        let have = self.layout(v);
        if have.same_layout(want) {
            return v;
        }
        let key = (v, want.dims.clone(), want.partial.clone());
        if let Some(&done) = self.made.get(&key) {
            return done;
        }
        let ty = self.g.value_type(v).clone();
        let cost = reshard(&self.mesh, &ty, &have, want, &self.target);
        let id = self.g.add_op(OpName::new("tpu", "reshard", None), vec![v], Default::default(), vec![ty]);
        let to = Sharding { origin: Origin::Reshard, ..want.clone() };
        record(self.g, id, &cost, &to);
        // The reshard is reported for, and at the line of, the node that first needed it.
        let (consumer, loc) = match at {
            Some(n) if n == v.node => ("output".to_string(), self.g.node(n).loc),
            Some(n) => (self.g.node(n).op().map(|o| o.to_string()).unwrap_or_default(), self.g.node(n).loc),
            None => ("output".to_string(), None),
        };
        CONSUMER.set(self.g.node_attrs_mut(id), consumer);
        if let Some(loc) = loc {
            self.g.set_loc(id, loc);
        }
        let out = Value::new(id, 0);
        self.g.set_sharding(out, to);
        self.made.insert(key, out);
        out
    }

    fn node(&mut self, id: NodeId) {
        let node = self.g.node(id);
        let NodeKind::Op(op) = &node.kind else { return };
        let operands = node.operands.clone();
        if is_layout_op(op) {
            // Its result layout is given (a constraint's by the user); record what it costs.
            let from = self.layout(operands[0]);
            let out = Value::new(id, 0);
            let to = self.g.sharding(out).cloned().unwrap_or_else(|| Sharding { origin: Origin::User, ..from.clone() });
            let cost = reshard(&self.mesh, self.g.value_type(out), &from, &to, &self.target);
            record(self.g, id, &cost, &to);
            self.g.set_sharding(out, to);
            return;
        }
        let layouts: Vec<Sharding> = operands.iter().map(|&v| self.layout(v)).collect();
        if node.results.is_empty() {
            return;
        }
        let decision = {
            let node = self.g.node(id);
            let view = OpView {
                node,
                types: operands.iter().map(|&v| self.g.value_type(v)).collect(),
                layouts,
                mesh: &self.mesh,
                target: self.target.clone(),
            };
            match sharding_rule(op) {
                // Rules read their first operand; an op without one (unverified IR) has none.
                Some(rule) if !operands.is_empty() || rule.name == "factory" => (rule.rule)(&view, rule.name),
                _ => replicated(&view, Origin::NoRule),
            }
        };
        for (slot, (v, want)) in operands.iter().zip(&decision.operands).enumerate() {
            let moved = self.resharded(*v, want, Some(id));
            if moved != *v {
                self.g.set_operand(id, slot as u32, moved);
            }
        }
        for (r, s) in decision.results.into_iter().enumerate() {
            self.g.set_sharding(Value::new(id, r as u32), s);
        }
    }
}

impl Pass for PropagateSharding {
    fn run(&self, g: &mut Graph) -> Result<bool, PassError> {
        let Some(mesh) = g.mesh.clone() else { return Ok(false) };
        let order = g.topo_order().map_err(|_| PassError("the graph has a cycle".into()))?;
        for v in g.input_values() {
            let s = layout_of(g, v);
            g.set_sharding(v, s);
        }
        let mut p = Propagation { g, mesh, target: self.target.clone(), made: HashMap::new() };
        for id in order {
            p.node(id);
        }
        // Outputs leave complete: pending sums are all-reduced.
        let outputs = p.g.outputs().to_vec();
        let done: Vec<Value> = outputs
            .iter()
            .map(|&v| {
                let have = p.layout(v);
                if have.partial.is_empty() {
                    v
                } else {
                    let want = Sharding { partial: Vec::new(), ..have };
                    // Reported at the line of the node whose result it completes.
                    p.resharded(v, &want, Some(v.node))
                }
            })
            .collect();
        p.g.set_outputs(done);
        Ok(true)
    }
}
