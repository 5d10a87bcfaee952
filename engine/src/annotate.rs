//! A mesh and user layouts put onto a parsed graph before it compiles (`Options::mesh`).

use torchtpu_compiler::ir::{Graph, Mesh, OpName, Origin, Sharding, Value};

use crate::MeshAnnotation;

/// Puts the mesh and the inputs' layouts (user annotations) on `g`, checking each against its
/// input's type, and pins the outputs given a layout with a `tpu.sharding_constraint` each. A
/// graph that already declares a mesh (a `sharding_constraint` in it) must declare the same one.
/// The error says what is wrong, for `EngineError::Sharding`.
pub fn annotate(g: &mut Graph, annotation: &MeshAnnotation) -> Result<(), String> {
    let mesh = Mesh { axes: annotation.axes.clone() };
    mesh.check()?;
    if let Some(declared) = &g.mesh {
        if *declared != mesh {
            return Err(format!(
                "the graph's constraints use the {declared}, its inputs the {mesh}: one mesh per graph"
            ));
        }
    }
    if let Some(inputs) = &annotation.inputs {
        if inputs.len() != g.inputs().len() {
            return Err(format!("{} input shardings for {} inputs", inputs.len(), g.inputs().len()));
        }
        for (i, (v, dims)) in g.input_values().into_iter().zip(inputs).enumerate() {
            let Some(dims) = dims else { continue };
            let s = Sharding { dims: dims.clone(), partial: Vec::new(), origin: Origin::User };
            s.check(&mesh, g.value_type(v)).map_err(|m| format!("input {i}: {m}"))?;
            g.set_sharding(v, s);
        }
    }
    if let Some(outputs) = &annotation.outputs {
        if outputs.len() != g.outputs().len() {
            return Err(format!("{} output shardings for {} outputs", outputs.len(), g.outputs().len()));
        }
        let mut pinned = g.outputs().to_vec();
        for (k, dims) in outputs.iter().enumerate() {
            let Some(dims) = dims else { continue };
            let v = pinned[k];
            let ty = g.value_type(v).clone();
            let s = Sharding { dims: dims.clone(), partial: Vec::new(), origin: Origin::User };
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

#[cfg(test)]
mod tests {
    use super::*;
    use torchtpu_compiler::ir::parse_graph;

    const TWO_INPUTS: &str = "graph @g(%x: f32[8, 4], %y: f32[8, 4]) -> (f32[8, 4]) {\n  %0 = aten.add.Tensor(%x, %y) : f32[8, 4]\n  return %0\n}\n";

    fn dims(axes: &[&[&str]]) -> Option<Vec<Vec<String>>> {
        Some(axes.iter().map(|d| d.iter().map(|a| a.to_string()).collect()).collect())
    }

    #[test]
    fn inputs_get_user_layouts_and_pinned_outputs_a_constraint() {
        let mut g = parse_graph(TWO_INPUTS).unwrap();
        let a = MeshAnnotation {
            axes: vec![("dp".into(), 2)],
            inputs: Some(vec![dims(&[&["dp"], &[]]), None]),
            outputs: Some(vec![dims(&[&[], &[]])]),
        };
        annotate(&mut g, &a).unwrap();
        assert_eq!(g.mesh.as_ref().unwrap().axes, vec![("dp".to_string(), 2)]);
        let x = g.input_values()[0];
        assert_eq!(g.sharding(x).unwrap().origin, Origin::User);
        assert!(g.sharding(g.input_values()[1]).is_none());
        let out = g.outputs()[0];
        assert_eq!(g.node(out.node).op().unwrap().to_string(), "tpu.sharding_constraint");
    }

    #[test]
    fn a_layout_that_does_not_divide_or_a_wrong_count_is_an_error() {
        let mut g = parse_graph(TWO_INPUTS).unwrap();
        let three = MeshAnnotation {
            axes: vec![("dp".into(), 3)],
            inputs: Some(vec![dims(&[&["dp"], &[]]), None]),
            outputs: None,
        };
        assert!(annotate(&mut g, &three).unwrap_err().starts_with("input 0:"));
        let mut g = parse_graph(TWO_INPUTS).unwrap();
        let one = MeshAnnotation { axes: vec![("dp".into(), 2)], inputs: Some(vec![None]), outputs: None };
        assert_eq!(annotate(&mut g, &one).unwrap_err(), "1 input shardings for 2 inputs");
    }
}
