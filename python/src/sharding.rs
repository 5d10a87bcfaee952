//! SPMD programs from Python: the wire forms of a mesh and its layouts (the engine annotates
//! the graph with them, `torchtpu_engine::MeshAnnotation`), and the sharding plan (layouts,
//! origins, collectives) as dicts for `torchtpu.sharding.explain` and `torchtpu.stats()`.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use torchtpu_engine::{Sharding, ShardingPlan};

/// `(axis, size)` pairs as given by `torchtpu.Mesh.axes`.
pub type WireMesh = Vec<(String, i64)>;
/// Per input: None (replicated, unannotated) or the axes of each dim.
pub type WireShardings = Vec<Option<Vec<Vec<String>>>>;

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
