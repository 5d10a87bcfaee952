//! The verifier's error cases: each names the node, its op and what is wrong.

use std::collections::BTreeMap;
use torchtpu_compiler::ir::{parse_graph, print_graph, verify, DType, Graph, OpName, SourceLoc, TensorType, Value};

fn verify_text(text: &str) -> Result<(), String> {
    let g = parse_graph(text).expect("test IR parses");
    verify(&g).map_err(|e| e.to_string())
}

fn wrap(body: &str) -> String {
    format!("graph @g(%a: f32[2, 3], %b: f32[3, 4], %i: i64[3]) -> () {{\n{body}\n  return\n}}\n")
}

#[test]
fn a_well_formed_graph_verifies() {
    let text = wrap(concat!(
        "  %0 = aten.mm.default(%a, %b) : f32[2, 4]\n",
        "  %1 = aten.add.Tensor(%0, %0) : f32[2, 4]\n",
        "  %2 = aten.gt.Scalar(%1) {other = 0.0} : bool[2, 4]\n",
        "  %3 = aten.view.default(%1) {size = [-1]} : f32[8]\n",
        "  %4 = aten.permute.default(%a) {dims = [-1, 0]} : f32[3, 2]\n",
        "  %5:2 = aten.some_future_op.default(%a, %i) {anything = \"goes\"} : (f32[1], f32[2])",
    ));
    assert_eq!(verify_text(&text), Ok(()));
}

#[test]
fn operand_count() {
    let e = verify_text(&wrap("  %0 = aten.mm.default(%a) : f32[2, 4]")).unwrap_err();
    assert_eq!(e, "node %0 (aten.mm.default): expects 2 operands, got 1");
}

#[test]
fn result_count() {
    let e = verify_text(&wrap("  %0:2 = aten.relu.default(%a) : (f32[2, 3], f32[2, 3])")).unwrap_err();
    assert_eq!(e, "node %0 (aten.relu.default): expects 1 results, got 2");
}

#[test]
fn matmul_shapes() {
    let e = verify_text(&wrap("  %0 = aten.mm.default(%b, %a) : f32[3, 3]")).unwrap_err();
    assert_eq!(e, "node %0 (aten.mm.default): contracting dims differ: f32[3, 4] and f32[2, 3]");
    let e = verify_text(&wrap("  %0 = aten.mm.default(%a, %b) : f32[2, 5]")).unwrap_err();
    assert_eq!(
        e,
        "node %0 (aten.mm.default): result type f32[2, 5] does not match the operands: expected shape of f32[2, 4]"
    );
}

#[test]
fn broadcasting_and_comparisons() {
    let e = verify_text(&wrap("  %0 = aten.add.Tensor(%a, %b) : f32[2, 3]")).unwrap_err();
    assert_eq!(e, "node %0 (aten.add.Tensor): operand 1 of type f32[3, 4] does not broadcast with the others");
    let e = verify_text(&wrap("  %0 = aten.eq.Tensor(%a, %a) : f32[2, 3]")).unwrap_err();
    assert_eq!(e, "node %0 (aten.eq.Tensor): comparison result must be bool, got f32[2, 3]");
}

#[test]
fn reshape_and_permute() {
    let e = verify_text(&wrap("  %0 = aten.view.default(%a) {size = [5]} : f32[5]")).unwrap_err();
    assert_eq!(e, "node %0 (aten.view.default): reshape changes the element count: f32[2, 3] to f32[5]");
    let e = verify_text(&wrap("  %0 = aten.view.default(%a) {size = [2, 3]} : f32[3, 2]")).unwrap_err();
    assert_eq!(e, "node %0 (aten.view.default): size [2, 3] does not match the result type f32[3, 2]");
    let e = verify_text(&wrap("  %0 = aten.permute.default(%a) {dims = [0, 0]} : f32[2, 2]")).unwrap_err();
    assert_eq!(e, "node %0 (aten.permute.default): dims [0, 0] is not a permutation of rank 2");
    let e = verify_text(&wrap("  %0 = aten.view.default(%a) : f32[6]")).unwrap_err();
    assert_eq!(e, "node %0 (aten.view.default): missing required attribute 'size'");
}

#[test]
fn required_attributes_have_their_declared_kind() {
    let e = verify_text(&wrap("  %0 = aten._softmax.default(%a) {dim = \"x\", half_to_float = false} : f32[2, 3]"))
        .unwrap_err();
    assert_eq!(e, "node %0 (aten._softmax.default): attribute 'dim' must be an int, got \"x\"");
    let e = verify_text(&wrap("  %0 = aten.view.default(%a) {size = 1.5} : f32[6]")).unwrap_err();
    assert_eq!(e, "node %0 (aten.view.default): attribute 'size' must be an int list, got 1.5");
    // What an exporter may write for a kind is accepted: one int for a list, an int for a number.
    verify_text(&wrap("  %0 = aten.view.default(%a) {size = 6} : f32[6]")).unwrap();
    verify_text(&wrap("  %0:2 = aten.native_dropout.default(%a) {p = 0, train = true} : (f32[2, 3], bool[2, 3])"))
        .unwrap();
}

#[test]
fn constants_must_match_their_type() {
    let e = verify_text(&wrap("  %0 = tpu.constant() {value = dense<[1, 2] : i64[2]>} : i32[2]")).unwrap_err();
    assert_eq!(e, "node %0 (tpu.constant): literal type i64[2] differs from the result type i32[2]");
}

#[test]
fn cycles_are_found() {
    // The parser cannot express a cycle; build one through the API.
    let mut g = Graph::new("cyclic");
    let x = g.add_input(TensorType::fixed(DType::F32, &[2]));
    let t = TensorType::fixed(DType::F32, &[2]);
    let neg = OpName::new("aten", "neg", Some("default"));
    let a = g.add_op(neg.clone(), vec![x], BTreeMap::new(), vec![t.clone()]);
    let b = g.add_op(neg, vec![Value::new(a, 0)], BTreeMap::new(), vec![t]);
    g.set_operand(a, 0, Value::new(b, 0));
    g.set_outputs(vec![Value::new(b, 0)]);
    let e = verify(&g).unwrap_err().to_string();
    assert!(e.contains("the graph has a cycle through this node"), "{e}");
}

#[test]
fn dangling_operands_and_outputs() {
    let mut g = Graph::new("dangling");
    let x = g.add_input(TensorType::fixed(DType::F32, &[2]));
    g.set_outputs(vec![Value::new(x.node, 3)]);
    assert_eq!(verify(&g).unwrap_err().to_string(), "output 0 refers to a value that does not exist");
    let id = g.add_op(
        OpName::new("aten", "neg", None),
        vec![Value::new(x.node, 1)],
        BTreeMap::new(),
        vec![TensorType::fixed(DType::F32, &[2])],
    );
    g.set_outputs(vec![Value::new(id, 0)]);
    assert_eq!(
        verify(&g).unwrap_err().to_string(),
        "node %0 (aten.neg): operand 0 refers to a value that does not exist"
    );
}

#[test]
fn graph_names_must_be_printable() {
    let g = Graph::new("has space");
    assert!(verify(&g).unwrap_err().to_string().contains("graph name 'has space'"));
}

fn verify_err(text: &str) -> torchtpu_compiler::ir::VerifyError {
    verify(&parse_graph(text).expect("test IR parses")).unwrap_err()
}

#[test]
fn errors_name_the_line_and_column_the_node_came_from() {
    // `wrap` puts the body on line 2; the node starts at column 3.
    let e = verify_err(&wrap("  %0 = aten.mm.default(%a) : f32[2, 4]"));
    assert_eq!(e.loc, Some(SourceLoc { line: 2, col: 3 }));
    assert_eq!(e.located(), "2:3: node %0 (aten.mm.default): expects 2 operands, got 1");
    // Display stays without the position (callers add `file:` in front of `located()`).
    assert_eq!(e.to_string(), "node %0 (aten.mm.default): expects 2 operands, got 1");
    // A node without results starts at its op name; later lines count.
    let e = verify_err(&wrap("  %0 = aten.relu.default(%a) : f32[2, 3]\n    aten.mm.default(%a) : ()"));
    assert_eq!(e.located(), "3:5: node %1 (aten.mm.default): expects 2 operands, got 1");
    // An input names its own position.
    let e = verify_err("graph @g(%a: f32[2],\n         %big: f32[4294967296, 4294967296, 4]) -> () {\n  return\n}\n");
    assert_eq!(
        e.located(),
        "2:10: input 1: type f32[4294967296, 4294967296, 4] is too large: its size in bytes overflows i64"
    );
}

#[test]
fn graphs_built_through_the_api_have_no_positions() {
    let mut g = Graph::new("api");
    let x = g.add_input(TensorType::fixed(DType::F32, &[2]));
    g.add_op(
        OpName::new("aten", "mm", Some("default")),
        vec![x],
        BTreeMap::new(),
        vec![TensorType::fixed(DType::F32, &[2])],
    );
    let e = verify(&g).unwrap_err();
    assert_eq!(e.loc, None);
    assert_eq!(e.located(), e.to_string());
}

#[test]
fn positions_do_not_change_printing_or_equality() {
    let a = parse_graph(&wrap("  %0 = aten.mm.default(%a, %b) : f32[2, 4]")).unwrap();
    let b = parse_graph(&wrap("\n\n     %0 = aten.mm.default(%a, %b) : f32[2, 4]")).unwrap();
    assert!(a.structurally_equal(&b));
    assert_eq!(print_graph(&a), print_graph(&b));
}

#[test]
fn sizes_that_overflow_are_rejected_naming_the_value() {
    let too_large = |ty: &str| format!("type {ty} is too large: its size in bytes overflows i64");
    // Element count overflows i64.
    let e = verify_text("graph @g(%x: f32[4294967296, 4294967296]) -> () {\n  return\n}\n").unwrap_err();
    assert_eq!(e, format!("input 0: {}", too_large("f32[4294967296, 4294967296]")));
    // Element count fits, byte size does not (2^62 f32 elements are 2^64 bytes).
    let e = verify_text(&wrap(
        "  %0 = aten.full.default() {fill_value = 1.0, size = [4611686018427387904]} : f32[4611686018427387904]",
    ))
    .unwrap_err();
    assert_eq!(e, format!("node %0 (aten.full.default): {}", too_large("f32[4611686018427387904]")));
    let e = verify_text(&wrap(
        "  %0 = aten.full.default() {fill_value = 1, size = [9223372036854775807]} : i64[9223372036854775807]",
    ))
    .unwrap_err();
    assert!(e.ends_with(&too_large("i64[9223372036854775807]")), "{e}");
    // A zero dim does not hide an overflowing product of the others.
    let e = verify_text(&wrap("  %0 = aten.full.default() {fill_value = 1, size = [0, 4294967296, 4294967296]} : u8[0, 4294967296, 4294967296]")).unwrap_err();
    assert!(e.ends_with(&too_large("u8[0, 4294967296, 4294967296]")), "{e}");
    // The largest sizes that fit, symbolic dims and literal types are accepted / checked.
    assert_eq!(verify_text("graph @g(%x: u8[9223372036854775807], %y: f32[2305843009213693951], %z: f32[s0, 4294967296]) -> () {\n  return\n}\n"), Ok(()));
    let e = verify_text(&wrap(
        "  %0 = tpu.constant() {value = dense<[] : u8[0, 4294967296, 4294967296]>} : u8[0, 4294967296, 4294967296]",
    ))
    .unwrap_err();
    assert!(e.contains("is too large"), "{e}");
}
