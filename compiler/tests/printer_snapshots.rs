//! Snapshots of the printer: the text form is the contract between Python dumps, lit tests
//! and the cache, so any change to it shows up here.

use std::collections::BTreeMap;
use torchtpu_compiler::ir::{
    print_graph, Attr, DType, Dim, Elements, Graph, Literal, OpName, SymRange, TensorType, Value,
};

fn attrs(items: Vec<(&str, Attr)>) -> BTreeMap<String, Attr> {
    items.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

#[test]
fn layer_norm_block() {
    let mut g = Graph::new("layer_norm_block");
    let f32_2x8 = TensorType::fixed(DType::F32, &[2, 8]);
    let x = g.add_input(f32_2x8.clone());
    let w = g.add_input(TensorType::fixed(DType::F32, &[8]));
    let b = g.add_input(TensorType::fixed(DType::F32, &[8]));
    let ln = g.add_op(
        OpName::new("aten", "native_layer_norm", Some("default")),
        vec![x, w, b],
        attrs(vec![("normalized_shape", Attr::IntList(vec![8])), ("eps", Attr::Float(1e-5))]),
        vec![f32_2x8.clone(), TensorType::fixed(DType::F32, &[2, 1]), TensorType::fixed(DType::F32, &[2, 1])],
    );
    let gelu = g.add_op(
        OpName::new("aten", "gelu", Some("default")),
        vec![Value::new(ln, 0)],
        attrs(vec![("approximate", Attr::Str("tanh".into()))]),
        vec![f32_2x8.clone()],
    );
    let cast = g.add_op(
        OpName::new("aten", "_to_copy", Some("default")),
        vec![Value::new(gelu, 0)],
        attrs(vec![("dtype", Attr::DType(DType::BF16)), ("layout", Attr::None), ("non_blocking", Attr::Bool(false))]),
        vec![TensorType::fixed(DType::BF16, &[2, 8])],
    );
    g.set_outputs(vec![Value::new(cast, 0), Value::new(ln, 1), Value::new(ln, 2)]);
    insta::assert_snapshot!(print_graph(&g));
}

#[test]
fn symbols_constants_and_every_attribute_kind() {
    let mut g = Graph::new("dynamic.batch");
    g.symbols.insert(0, SymRange { min: 2, max: Some(1024) });
    g.symbols.insert(1, SymRange { min: 0, max: None });
    let x = g.add_input(TensorType::new(DType::F32, vec![Dim::Sym(0), Dim::Static(4)]));
    let idx = g.add_input(TensorType::new(DType::I64, vec![Dim::Sym(1)]));
    let c = g.add_op(
        OpName::new("tpu", "constant", None),
        vec![],
        attrs(vec![(
            "value",
            Attr::Tensor(
                Literal::new(
                    TensorType::fixed(DType::F32, &[4]),
                    Elements::Float(vec![0.1, -0.0, f64::INFINITY, f64::NAN]),
                )
                .unwrap(),
            ),
        )]),
        vec![TensorType::fixed(DType::F32, &[4])],
    );
    let m = g.add_op(
        OpName::new("aten", "mul", Some("Tensor")),
        vec![x, Value::new(c, 0)],
        BTreeMap::new(),
        vec![TensorType::new(DType::F32, vec![Dim::Sym(0), Dim::Static(4)])],
    );
    let k = g.add_op(
        OpName::new("custom", "kitchen_sink", None),
        vec![Value::new(m, 0), idx],
        attrs(vec![
            ("i", Attr::Int(i64::MIN)),
            ("f", Attr::Float(-1.5e300)),
            ("nan", Attr::Float(f64::NAN)),
            ("ninf", Attr::Float(f64::NEG_INFINITY)),
            ("s", Attr::Str("quote \" backslash \\ newline \n tab \t bell \u{7}".into())),
            ("ints", Attr::IntList(vec![])),
            ("floats", Attr::FloatList(vec![1.0, 2.5e-8])),
            (
                "mask",
                Attr::Tensor(
                    Literal::new(TensorType::fixed(DType::Bool, &[2]), Elements::Bool(vec![true, false])).unwrap(),
                ),
            ),
            (
                "small",
                Attr::Tensor(Literal::new(TensorType::fixed(DType::I8, &[2]), Elements::Int(vec![-128, 300])).unwrap()),
            ),
            ("none", Attr::None),
        ]),
        vec![],
    );
    let _ = k;
    g.set_outputs(vec![Value::new(m, 0)]);
    insta::assert_snapshot!(print_graph(&g));
}
