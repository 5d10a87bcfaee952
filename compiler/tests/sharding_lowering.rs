//! SPMD graphs end to end in the compiler: the StableHLO a sharded MLP lowers to (a snapshot:
//! the mesh, the partition count, `sdy.sharding` on arguments and results and the
//! `sdy.sharding_constraint`s are what XLA's partitioner follows), the plan beside it, and the
//! text form of meshes and shardings (printing then parsing is the identity, and structural
//! equality sees every sharding).

use std::collections::BTreeMap;
use torchtpu_compiler::driver::{Context, Format, Options, ShardingPlan};
use torchtpu_compiler::ir::{
    parse_graph, print_graph, verify, Attr, DType, Graph, Mesh, OpName, Origin, Sharding, TensorType, Value,
};

/// A Megatron MLP: column-parallel first layer, row-parallel second, batch over dp.
const MLP: &str = r#"graph @mlp(%x: f32[8, 16] sharding<[{"dp"}, {}]>, %w1: f32[32, 16] sharding<[{"tp"}, {}]>, %w2: f32[16, 32] sharding<[{}, {"tp"}]>) -> (f32[8, 16]) {
  mesh<["dp"=2, "tp"=2]>
  %0 = aten.t.default(%w1) : f32[16, 32]
  %1 = aten.mm.default(%x, %0) : f32[8, 32]
  %2 = aten.relu.default(%1) : f32[8, 32]
  %3 = tpu.sharding_constraint(%2) : f32[8, 32] sharding<[{"dp"}, {"tp"}]>
  %4 = aten.t.default(%w2) : f32[32, 16]
  %5 = aten.mm.default(%3, %4) : f32[8, 16]
  return %5
}
"#;

fn compile_mlp() -> torchtpu_compiler::driver::Compiled {
    // No pipeline: the driver runs propagate-sharding on every graph with a mesh.
    let options = Options { emit: Some(Format::Text), ..Options::with_pipeline("") };
    Context::new().compile_text(MLP, &options, &mut std::io::sink()).expect("the sharded MLP compiles")
}

#[test]
fn sharded_mlp_stablehlo() {
    let compiled = compile_mlp();
    let text = compiled.hlo.as_ref().and_then(|m| m.text()).expect("text was asked for").to_owned();
    insta::assert_snapshot!(text);
}

#[test]
fn sharded_mlp_plan() {
    let compiled = compile_mlp();
    let plan = compiled.analyses.sharding.as_ref().expect("a graph with a mesh has a plan");
    assert_eq!(plan, &ShardingPlan::of(&compiled.graph).unwrap());
    assert_eq!(plan.num_partitions(), 4);
    let dims = |s: &Sharding| s.sdy_dims();
    assert_eq!(
        plan.inputs.iter().map(dims).collect::<Vec<_>>(),
        [r#"[{"dp"}, {}]"#, r#"[{"tp"}, {}]"#, r#"[{}, {"tp"}]"#]
    );
    assert!(plan.inputs.iter().all(|s| s.origin == Origin::User));
    assert_eq!(plan.outputs.len(), 1);
    assert_eq!((dims(&plan.outputs[0]), &plan.outputs[0].origin), (r#"[{"dp"}, {}]"#.to_string(), &Origin::Reshard));
    // The constraint costs nothing (the first layer already gives [dp, tp]); the second
    // layer's partial sum over tp is all-reduced on each device's [4, 16] piece.
    assert_eq!(plan.collectives.len(), 1, "{:?}", plan.collectives);
    let c = &plan.collectives[0];
    assert_eq!((c.consumer.as_str(), c.collective.as_str(), c.bytes_per_device), ("output", "all-reduce", 256));
    assert_eq!(plan.total_bytes_per_device, 256);
}

fn attrs(items: Vec<(&str, Attr)>) -> BTreeMap<String, Attr> {
    items.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

fn s(dims: &[&[&str]], partial: &[&str], origin: Origin) -> Sharding {
    Sharding {
        dims: dims.iter().map(|d| d.iter().map(|a| a.to_string()).collect()).collect(),
        partial: partial.iter().map(|a| a.to_string()).collect(),
        origin,
    }
}

/// A graph with a 3-axis mesh and a sharding of every kind: user and unannotated inputs, a
/// multi-result node with a layout per result (one left without), a partial sum over two
/// axes, a reshard with its attributes, a constraint, and every origin.
fn sharded_graph() -> Graph {
    let mut g = Graph::new("sharded");
    g.mesh = Some(Mesh { axes: vec![("dp".into(), 2), ("tp".into(), 2), ("sp".into(), 1)] });
    let t = |shape: &[i64]| TensorType::fixed(DType::F32, shape);
    let x = g.add_input(t(&[8, 4, 16]));
    g.set_sharding(x, s(&[&["dp"], &[], &["tp"]], &[], Origin::User));
    let w = g.add_input(t(&[16]));
    g.set_sharding(w, s(&[&[]], &[], Origin::Unannotated));
    let b = g.add_input(t(&[16]));
    let ln = g.add_op(
        OpName::new("aten", "native_layer_norm", Some("default")),
        vec![x, w, b],
        attrs(vec![("normalized_shape", Attr::IntList(vec![16])), ("eps", Attr::Float(1e-5))]),
        vec![t(&[8, 4, 16]), t(&[8, 4, 1]), t(&[8, 4, 1])],
    );
    g.set_sharding(Value::new(ln, 0), s(&[&["dp"], &[], &[]], &[], Origin::Rule("normalize".into())));
    g.set_sharding(Value::new(ln, 2), s(&[&["dp"], &[], &[]], &[], Origin::Rule("normalize".into())));
    let flip = g.add_op(
        OpName::new("aten", "flip", Some("default")),
        vec![Value::new(ln, 0)],
        attrs(vec![("dims", Attr::IntList(vec![2]))]),
        vec![t(&[8, 4, 16])],
    );
    g.set_sharding(Value::new(flip, 0), s(&[&[], &[], &[]], &[], Origin::NoRule));
    let pin = g.add_op(
        OpName::new("tpu", "sharding_constraint", None),
        vec![Value::new(flip, 0)],
        attrs(vec![]),
        vec![t(&[8, 4, 16])],
    );
    g.set_sharding(Value::new(pin, 0), s(&[&["dp", "sp"], &[], &[]], &[], Origin::User));
    let sum = g.add_op(
        OpName::new("aten", "sum", Some("default")),
        vec![Value::new(pin, 0)],
        attrs(vec![]),
        vec![TensorType::fixed(DType::F32, &[])],
    );
    g.set_sharding(Value::new(sum, 0), s(&[], &["dp", "sp"], Origin::Rule("reduce".into())));
    let reshard = g.add_op(
        OpName::new("tpu", "reshard", None),
        vec![Value::new(sum, 0)],
        attrs(vec![
            ("bytes", Attr::Int(4)),
            ("collective", Attr::Str("all-reduce".into())),
            ("sharding", Attr::Str("[]".into())),
        ]),
        vec![TensorType::fixed(DType::F32, &[])],
    );
    g.set_sharding(Value::new(reshard, 0), s(&[], &[], Origin::Reshard));
    g.set_outputs(vec![Value::new(pin, 0), Value::new(ln, 1), Value::new(ln, 2), Value::new(reshard, 0)]);
    g
}

#[test]
fn print_then_parse_is_the_identity_with_shardings() {
    let g = sharded_graph();
    verify(&g).expect("the built graph verifies");
    let text = print_graph(&g);
    for needle in [
        r#"mesh<["dp"=2, "tp"=2, "sp"=1]>"#,
        r#"%arg0: f32[8, 4, 16] sharding<[{"dp"}, {}, {"tp"}]>"#,
        r#"%arg1: f32[16] sharding<[{}], origin = "unannotated">"#,
        "%arg2: f32[16]) ->",
        r#"(f32[8, 4, 16] sharding<[{"dp"}, {}, {}], origin = "rule:normalize">, f32[8, 4, 1], f32[8, 4, 1] sharding<[{"dp"}, {}, {}], origin = "rule:normalize">)"#,
        r#"origin = "no-rule""#,
        r#": f32[8, 4, 16] sharding<[{"dp", "sp"}, {}, {}]>"#,
        r#"sharding<[], partial = {"dp", "sp"}, origin = "rule:reduce">"#,
        r#"sharding<[], origin = "reshard">"#,
    ] {
        assert!(text.contains(needle), "{needle} not in\n{text}");
    }
    let parsed = parse_graph(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(g.structurally_equal(&parsed), "parse(print(g)) differs from g:\n{text}\n{}", print_graph(&parsed));
    assert_eq!(print_graph(&parsed), text);
    // Every sharding came back, origin included.
    assert_eq!(parsed.mesh, g.mesh);
    for (a, b) in g.input_values().into_iter().zip(parsed.input_values()) {
        assert_eq!(g.sharding(a), parsed.sharding(b));
    }
    for (a, b) in g.outputs().iter().zip(parsed.outputs()) {
        assert_eq!(g.sharding(*a), parsed.sharding(*b));
    }
}

#[test]
fn a_propagated_graph_prints_and_parses_back() {
    let compiled = compile_mlp();
    let text = print_graph(&compiled.graph);
    let parsed = parse_graph(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    verify(&parsed).expect("the propagated graph verifies after a round trip");
    assert!(compiled.graph.structurally_equal(&parsed), "{text}");
    assert_eq!(print_graph(&parsed), text);
}

#[test]
fn structural_equality_tells_one_sharding_apart() {
    let g = sharded_graph();
    assert!(g.structurally_equal(&sharded_graph()));
    let input = g.input_values()[0];
    let [ln, pin, sum] = {
        let ids: Vec<_> = g.topo_order().unwrap().into_iter().filter(|&n| g.node(n).op().is_some()).collect();
        let find = |name: &str| *ids.iter().find(|&&n| g.node(n).op().unwrap().name == name).unwrap();
        [find("native_layer_norm"), find("sharding_constraint"), find("sum")]
    };
    type Change = Box<dyn Fn(&mut Graph)>;
    let changes: Vec<(&str, Change)> = vec![
        ("an input's dims", Box::new(move |g| g.set_sharding(input, s(&[&["tp"], &[], &["dp"]], &[], Origin::User)))),
        (
            "an input's origin",
            Box::new(move |g| g.set_sharding(input, s(&[&["dp"], &[], &["tp"]], &[], Origin::Unannotated))),
        ),
        ("an input's sharding removed", Box::new(move |g| g.clear_sharding(input))),
        (
            "a result's axis order",
            Box::new(move |g| g.set_sharding(Value::new(pin, 0), s(&[&["sp", "dp"], &[], &[]], &[], Origin::User))),
        ),
        (
            "a second result's sharding added",
            Box::new(move |g| {
                g.set_sharding(Value::new(ln, 1), s(&[&["dp"], &[], &[]], &[], Origin::Rule("normalize".into())))
            }),
        ),
        ("a third result's sharding removed", Box::new(move |g| g.clear_sharding(Value::new(ln, 2)))),
        (
            "a partial axis",
            Box::new(move |g| g.set_sharding(Value::new(sum, 0), s(&[], &["dp"], Origin::Rule("reduce".into())))),
        ),
        (
            "a rule name",
            Box::new(move |g| g.set_sharding(Value::new(sum, 0), s(&[], &["dp", "sp"], Origin::Rule("dot".into())))),
        ),
        (
            "the mesh",
            Box::new(|g| g.mesh = Some(Mesh { axes: vec![("dp".into(), 2), ("tp".into(), 2), ("sp".into(), 2)] })),
        ),
    ];
    for (what, change) in changes {
        let mut h = sharded_graph();
        change(&mut h);
        assert!(!g.structurally_equal(&h), "{what}: graphs reported equal\n{}", print_graph(&h));
        assert!(!h.structurally_equal(&g), "{what}: not symmetric");
        assert_ne!(print_graph(&g), print_graph(&h), "{what}: the text form does not show it");
    }
}
