//! SPMD programs from Python: a mesh and per-input layouts put onto parsed IR before it is
//! compiled, and the sharding plan (layouts, origins, collectives) as dicts for
//! `torchtpu.sharding.explain` and `torchtpu.stats()`.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use torchtpu_engine::driver::ShardingPlan;
use torchtpu_engine::ir::{Graph, Mesh, OpName, Origin, Sharding, Value};

/// `(axis, size)` pairs as given by `torchtpu.Mesh.axes`.
pub type WireMesh = Vec<(String, i64)>;
/// Per input: None (replicated, unannotated) or the axes of each dim.
pub type WireShardings = Vec<Option<Vec<Vec<String>>>>;

/// Puts `mesh` and the inputs' layouts (user annotations) on `g`, checking each against its
/// input's type, and pins the outputs given a layout in `outputs` (a backward graph's
/// gradients, in their parameters' layouts) with a `tpu.sharding_constraint` each. A graph
/// that already declares a mesh (a `sharding_constraint` in it) must declare the same one.
pub fn annotate(
    g: &mut Graph,
    mesh: WireMesh,
    inputs: WireShardings,
    outputs: Option<WireShardings>,
) -> Result<(), String> {
    let mesh = Mesh { axes: mesh };
    mesh.check()?;
    if let Some(declared) = &g.mesh {
        if *declared != mesh {
            return Err(format!(
                "the graph's constraints use the {declared}, its inputs the {mesh}: one mesh per graph"
            ));
        }
    }
    if inputs.len() != g.inputs().len() {
        return Err(format!("{} input shardings for {} inputs", inputs.len(), g.inputs().len()));
    }
    for (i, (v, dims)) in g.input_values().into_iter().zip(inputs).enumerate() {
        let Some(dims) = dims else { continue };
        let s = Sharding { dims, partial: Vec::new(), origin: Origin::User };
        s.check(&mesh, g.value_type(v)).map_err(|m| format!("input {i}: {m}"))?;
        g.set_sharding(v, s);
    }
    if let Some(outputs) = outputs {
        if outputs.len() != g.outputs().len() {
            return Err(format!("{} output shardings for {} outputs", outputs.len(), g.outputs().len()));
        }
        let mut pinned = g.outputs().to_vec();
        for (k, dims) in outputs.into_iter().enumerate() {
            let Some(dims) = dims else { continue };
            let v = pinned[k];
            let ty = g.value_type(v).clone();
            let s = Sharding { dims, partial: Vec::new(), origin: Origin::User };
            s.check(&mesh, &ty).map_err(|m| format!("output {k}: {m}"))?;
            let op = OpName::new("tpu", "sharding_constraint", None);
            let id = g.add_op(op, vec![v], Default::default(), vec![ty]);
            pinned[k] = Value::new(id, 0);
            g.set_sharding(pinned[k], s);
        }
        g.set_outputs(pinned);
    }
    g.mesh = Some(mesh);
    Ok(())
}

fn layout_dict<'py>(py: Python<'py>, s: &Sharding) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("dims", s.dims.clone())?;
    d.set_item("partial", s.partial.clone())?;
    d.set_item("origin", s.origin.text())?;
    d.set_item("text", s.sdy_dims())?;
    Ok(d)
}

/// The plan as a dict: mesh, num_partitions, inputs, outputs (layout dicts), collectives
/// (node, consumer, collective, bytes_per_device, line, to), total_bytes_per_device.
pub fn plan_dict<'py>(py: Python<'py>, plan: &ShardingPlan) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("mesh", plan.mesh.axes.clone())?;
    d.set_item("num_partitions", plan.num_partitions())?;
    let layouts = |ls: &[Sharding]| ls.iter().map(|s| layout_dict(py, s)).collect::<PyResult<Vec<_>>>();
    d.set_item("inputs", layouts(&plan.inputs)?)?;
    d.set_item("outputs", layouts(&plan.outputs)?)?;
    let mut collectives = Vec::new();
    for c in &plan.collectives {
        let e = PyDict::new(py);
        e.set_item("node", &c.node)?;
        e.set_item("consumer", &c.consumer)?;
        e.set_item("collective", &c.collective)?;
        e.set_item("bytes_per_device", c.bytes_per_device)?;
        e.set_item("line", c.line)?;
        e.set_item("to", layout_dict(py, &c.to)?)?;
        collectives.push(e);
    }
    d.set_item("collectives", collectives)?;
    d.set_item("total_bytes_per_device", plan.total_bytes_per_device)?;
    Ok(d)
}
