//! The op registry as Python sees it: what is lowered, each op's traits and decomposition
//! policy (`torchtpu.compiled.decompositions` derives its table from them), and the per-node legality
//! check the backend's partitioner asks before compiling a graph.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use torchtpu_engine::legality::{self, catalog};

/// One dict per registry entry: name, traits (list), lowered (bool), rule, param,
/// decomposition ("none", "lowering" or "python").
#[pyfunction]
pub fn op_registry(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    crate::guarded(py, "lower", || {
        catalog::entries()
            .iter()
            .map(|o| {
                let e = PyDict::new(py);
                e.set_item("name", o.def.name)?;
                e.set_item("traits", o.def.traits.names())?;
                e.set_item("lowered", o.is_lowered())?;
                e.set_item("rule", o.lowering.map(|l| l.rule_name))?;
                e.set_item("param", o.lowering.and_then(|l| l.param).map(|p| p.to_string()))?;
                e.set_item("decomposition", o.def.decomposition.name())?;
                Ok(e)
            })
            .collect()
    })
}

/// One refused node as Python sees it: (line, op, reason).
type Refused = (Option<u32>, String, Option<String>);

/// The nodes of IR `text` the lowering refuses, as `(line, op, reason)`: `reason` is None
/// for an op with no lowering, else the form its legality check refused. A parse error is
/// an internal error (the text comes from torchtpu's exporter).
#[pyfunction]
pub fn check_lowerable(py: Python<'_>, text: &str) -> PyResult<Vec<Refused>> {
    crate::guarded(py, "lower", || {
        let refused =
            legality::refusals(text).map_err(|e| crate::internal(py, "parse", &format!("parse error at {e}")))?;
        Ok(refused.into_iter().map(|r| (r.loc.map(|l| l.line), r.op, r.reason)).collect())
    })
}
