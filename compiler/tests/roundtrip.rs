//! Property tests for the text form: printing then parsing is the identity on generated
//! graphs, and mutated texts never make the parser (or anything after it) panic.

use proptest::prelude::*;
use std::collections::BTreeMap;
use torchtpu_compiler::ir::{
    parse_graph, print_graph, verify, Attr, DType, Dim, Elements, Graph, Literal, OpName, SymRange, TensorType, Value,
};

fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.to_vec())
}

fn dim() -> impl Strategy<Value = Dim> {
    prop_oneof![4 => (0i64..9).prop_map(Dim::Static), 1 => (0u32..3).prop_map(Dim::Sym), 1 => Just(Dim::Static(1 << 40))]
}

fn tensor_type() -> impl Strategy<Value = TensorType> {
    (dtype(), prop::collection::vec(dim(), 0..4)).prop_map(|(d, s)| TensorType::new(d, s))
}

fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => any::<f64>(),
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
        1 => Just(-0.0),
        1 => Just(1e-5),
        1 => (-1000i32..1000).prop_map(|i| i as f64 * 0.25),
    ]
}

fn literal() -> impl Strategy<Value = Literal> {
    let float_types = prop::sample::select(vec![DType::F32, DType::F64, DType::F16, DType::BF16]);
    let int_types = prop::sample::select(vec![DType::I8, DType::I16, DType::I32, DType::I64, DType::U8]);
    let shape = prop::collection::vec(0i64..4, 0..3);
    prop_oneof![
        (float_types, shape.clone()).prop_flat_map(|(d, s)| {
            let n = s.iter().product::<i64>() as usize;
            prop::collection::vec(float(), n)
                .prop_map(move |v| Literal::new(TensorType::fixed(d, &s), Elements::Float(v)).unwrap())
        }),
        (int_types, shape.clone()).prop_flat_map(|(d, s)| {
            let n = s.iter().product::<i64>() as usize;
            prop::collection::vec(any::<i64>(), n)
                .prop_map(move |v| Literal::new(TensorType::fixed(d, &s), Elements::Int(v)).unwrap())
        }),
        shape.prop_flat_map(|s| {
            let n = s.iter().product::<i64>() as usize;
            prop::collection::vec(any::<bool>(), n)
                .prop_map(move |v| Literal::new(TensorType::fixed(DType::Bool, &s), Elements::Bool(v)).unwrap())
        }),
    ]
}

fn attr() -> impl Strategy<Value = Attr> {
    prop_oneof![
        Just(Attr::None),
        any::<bool>().prop_map(Attr::Bool),
        any::<i64>().prop_map(Attr::Int),
        float().prop_map(Attr::Float),
        any::<String>().prop_map(Attr::Str),
        dtype().prop_map(Attr::DType),
        prop::collection::vec(any::<i64>(), 0..5).prop_map(Attr::IntList),
        prop::collection::vec(float(), 1..5).prop_map(Attr::FloatList),
        literal().prop_map(Attr::Tensor),
    ]
}

fn ident() -> impl Strategy<Value = String> {
    "[a-z_][a-z0-9_]{0,8}"
}

fn op_name() -> impl Strategy<Value = OpName> {
    (
        prop::sample::select(vec!["aten", "tpu", "prims", "custom"]),
        ident(),
        prop::option::of("[A-Za-z_][A-Za-z0-9_]{0,6}"),
    )
        .prop_map(|(ns, name, ov)| OpName::new(ns, &name, ov.as_deref()))
}

/// A node: op, operand picks (indices into the values defined so far), attrs, result types.
type NodeSpec = (OpName, Vec<prop::sample::Index>, BTreeMap<String, Attr>, Vec<TensorType>);

fn node_spec() -> impl Strategy<Value = NodeSpec> {
    (
        op_name(),
        prop::collection::vec(any::<prop::sample::Index>(), 0..4),
        prop::collection::btree_map(ident(), attr(), 0..4),
        prop::collection::vec(tensor_type(), 0..4),
    )
}

fn graph() -> impl Strategy<Value = Graph> {
    (
        "[A-Za-z_][A-Za-z0-9_]{0,6}(\\.[a-z0-9_]{1,4})?",
        prop::collection::vec(tensor_type(), 0..4),
        prop::collection::btree_map(0u32..3, (0i64..4, prop::option::of(4i64..100)), 0..3),
        prop::collection::vec(node_spec(), 0..12),
        prop::collection::vec(any::<prop::sample::Index>(), 0..4),
    )
        .prop_map(|(name, inputs, symbols, nodes, outputs)| {
            let mut g = Graph::new(name);
            for (s, (min, max)) in symbols {
                g.symbols.insert(s, SymRange { min, max });
            }
            let mut values: Vec<Value> = inputs.into_iter().map(|t| g.add_input(t)).collect();
            for (op, picks, attrs, results) in nodes {
                let operands = if values.is_empty() { vec![] } else { picks.iter().map(|i| *i.get(&values)).collect() };
                let n = results.len();
                let id = g.add_op(op, operands, attrs, results);
                values.extend((0..n as u32).map(|r| Value::new(id, r)));
            }
            let outs = if values.is_empty() { vec![] } else { outputs.iter().map(|i| *i.get(&values)).collect() };
            g.set_outputs(outs);
            g
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn print_then_parse_is_identity(g in graph()) {
        let text = print_graph(&g);
        let parsed = parse_graph(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert!(parsed.structurally_equal(&g), "graphs differ after a round trip:\n{}", text);
        prop_assert_eq!(print_graph(&parsed), text);
    }

    #[test]
    fn mutated_texts_never_panic(
        g in graph(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..4, prop::sample::select(
            vec!['%', '#', '(', ')', '{', '}', '[', ']', ',', ':', '=', '-', '0', '9', 'x', '"', '<', '>', '\n', ' ', '.', 'é', '@'])), 1..6),
    ) {
        let mut chars: Vec<char> = print_graph(&g).chars().collect();
        for (at, kind, c) in edits {
            if chars.is_empty() { break; }
            let i = at.index(chars.len());
            match kind {
                0 => { chars.remove(i); }
                1 => chars.insert(i, c),
                2 => chars[i] = c,
                _ => chars.truncate(i),
            }
        }
        let text: String = chars.into_iter().collect();
        if let Ok(parsed) = parse_graph(&text) {
            // Whatever parses must verify (or not) without panicking, and print to a text
            // that parses back to the same graph.
            let _ = verify(&parsed);
            let printed = print_graph(&parsed);
            let again = parse_graph(&printed).map_err(|e| TestCaseError::fail(format!("{e}\n{printed}")))?;
            prop_assert!(again.structurally_equal(&parsed));
        }
    }
}

#[test]
fn non_finite_and_signed_zero_floats_survive() {
    let text = "graph @g() -> (f32[3]) {\n  %0 = tpu.constant() {value = dense<[nan, -inf, -0.0] : f32[3]>} : f32[3]\n  custom.op() {a = nan, b = -0.0, c = inf, d = [1e-5, -inf]} : ()\n  return %0\n}\n";
    let g = parse_graph(text).unwrap();
    assert_eq!(print_graph(&g), text);
}
