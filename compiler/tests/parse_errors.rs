//! Parse errors name the line and column and say what was expected.

use torchtpu_compiler::ir::parse_graph;

fn err(text: &str) -> String {
    parse_graph(text).expect_err("text should not parse").to_string()
}

#[test]
fn unknown_dtype_points_at_it() {
    let e = err("graph @g(%a: f33[2]) -> () {\n  return\n}\n");
    assert_eq!(e, "1:14: unknown dtype 'f33' (expected one of f16 bf16 f32 f64 i8 i16 i32 i64 u8 bool c64 c128)");
}

#[test]
fn undefined_value_names_line_and_column() {
    let e = err("graph @g(%a: f32[2]) -> (f32[2]) {\n  %0 = aten.neg.default(%b) : f32[2]\n  return %0\n}\n");
    assert_eq!(e, "2:25: use of undefined value '%b'");
}

#[test]
fn missing_token_says_what_was_expected() {
    let e = err("graph @g(%a: f32[2]) -> (f32[2]) {\n  %0 = aten.neg.default(%a : f32[2]\n  return %0\n}\n");
    assert_eq!(e, "2:28: expected ',' or ')', found ':'");
}

#[test]
fn multi_result_values_need_an_index() {
    let text = "graph @g(%a: f32[2]) -> (f32[2]) {\n  %0:2 = aten.foo.default(%a) : (f32[2], f32[2])\n  return %0\n}\n";
    assert_eq!(err(text), "3:10: '%0' has 2 results; pick one with '%0#N'");
    let text =
        "graph @g(%a: f32[2]) -> (f32[2]) {\n  %0:2 = aten.foo.default(%a) : (f32[2], f32[2])\n  return %0#2\n}\n";
    assert_eq!(err(text), "3:13: '%0' has 2 results; #2 is out of range");
}

#[test]
fn return_types_must_match_the_signature() {
    let e = err("graph @g(%a: f32[2]) -> (f64[2]) {\n  return %a\n}\n");
    assert_eq!(e, "1:26: result 0 is declared f64[2] but return gives f32[2]");
    let e = err("graph @g(%a: f32[2]) -> (f32[2], f32[2]) {\n  return %a\n}\n");
    assert_eq!(e, "2:3: return has 1 values but the signature declares 2");
}

#[test]
fn redefinition_and_duplicates_are_rejected() {
    assert_eq!(err("graph @g(%a: f32[2], %a: f32[2]) -> () {\n  return\n}"), "1:22: redefinition of value '%a'");
    let e = err("graph @g(%a: f32[2]) -> () {\n  %0 = aten.x(%a) {k = 1, k = 2} : f32[2]\n  return\n}");
    assert_eq!(e, "2:27: duplicate attribute 'k'");
}

#[test]
fn bad_literals_and_numbers() {
    let e = err("graph @g() -> () {\n  %0 = tpu.constant() {value = dense<[1.0] : f32[2]>} : f32[2]\n  return\n}");
    assert_eq!(e, "2:32: literal of type f32[2] needs 2 elements, got 1");
    let e = err("graph @g() -> () {\n  %0 = tpu.constant() {value = dense<[1.5] : i32[1]>} : i32[1]\n  return\n}");
    assert_eq!(e, "2:39: element does not fit a i32 literal");
    let e = err("graph @g() -> () {\n  %0 = aten.x() {n = 99999999999999999999} : f32[1]\n  return\n}");
    assert_eq!(e, "2:22: integer '99999999999999999999' is out of range for i64");
}

#[test]
fn lexical_errors() {
    assert_eq!(err("graph @g() -> () {\n  $\n}"), "2:3: unexpected character '$'");
    assert_eq!(err("graph @g() -> () {\n  %0 = a.b() {s = \"abc\n}"), "2:19: unterminated string");
    assert_eq!(err(""), "1:1: expected 'graph', found end of input");
    assert_eq!(
        err("graph @g() -> () {\n  return\n} extra"),
        "3:3: expected end of input after the graph's '}', found 'extra'"
    );
}

#[test]
fn op_names_need_a_namespace() {
    let e = err("graph @g(%a: f32[2]) -> () {\n  %0 = neg(%a) : f32[2]\n  return\n}");
    assert_eq!(e, "2:8: 'neg' is not an op name like 'aten.add.Tensor'");
}

#[test]
fn symbols_and_dims() {
    let e = err("graph @g(%a: f32[-1]) -> () {\n  return\n}");
    assert_eq!(e, "1:18: dimension -1 is negative");
    let e = err("graph @g(%a: f32[s0]) -> () {\n  sym s0 in [8, 2]\n  return\n}");
    assert_eq!(e, "2:17: symbol range [8, 2] is empty");
    let e = err("graph @g(%a: f32[q]) -> () {\n  return\n}");
    assert_eq!(e, "1:18: expected a dimension (integer or symbol like 's0'), found 'q'");
}
