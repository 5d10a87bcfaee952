//! `tpu.rng_uniform`, `tpu.rng_normal`, `tpu.rng_integers`: every form the rules take lowers
//! to a module that verifies, and every form they do not take is a verifier or legality error
//! that names the op (never a panic, never a module XLA would refuse).

use torchtpu_compiler::ir::parse_graph;
use torchtpu_compiler::lower::{check_graph, LowerError, Lowering};

/// A graph of one draw of `op {attrs}` into `ty` from a state of type `state`.
fn one(op: &str, attrs: &str, state: &str, results: &str) -> String {
    format!(
        "graph @g(%s: {state}) -> {results} {{\n  %r:2 = tpu.{op}(%s) {{{attrs}}} : {results}\n  return %r#0, %r#1\n}}\n"
    )
}

fn draw(op: &str, attrs: &str, ty: &str) -> String {
    one(op, attrs, "i64[2]", &format!("(i64[2], {ty})"))
}

fn lower(text: &str) -> Result<String, LowerError> {
    let g = parse_graph(text).unwrap_or_else(|e| panic!("parses: {e}\n{text}"));
    Lowering::new().lower(&g).map(|m| m.text().expect("text module").to_string())
}

#[test]
fn every_form_lowers_and_verifies() {
    let cases = [
        ("rng_uniform", "high = 1.0, low = 0.0", "f32[4, 8]"),
        ("rng_uniform", "high = 2.5, low = -1.0", "f16[3]"),
        ("rng_uniform", "high = 1.0, low = 0.0", "bf16[2, 2]"),
        ("rng_uniform", "high = 1.0, low = 0", "f64[5]"),
        ("rng_uniform", "high = 1.0, low = 0.0", "f32[]"),
        ("rng_uniform", "high = 1.0, low = 0.0", "f32[0, 3]"),
        ("rng_normal", "mean = 0.0, std = 1.0", "f32[7]"),
        ("rng_normal", "mean = 2.0, std = 0.0", "bf16[4]"),
        ("rng_normal", "mean = -1.0, std = 3.0", "f16[2, 3]"),
        ("rng_normal", "mean = 0.0, std = 1.0", "f64[]"),
        ("rng_integers", "high = 10, low = -3", "i32[6]"),
        ("rng_integers", "high = 2, low = 0", "bool[6]"),
        ("rng_integers", "high = 256, low = 0", "u8[6]"),
        ("rng_integers", "high = 128, low = -128", "i8[6]"),
        ("rng_integers", "high = 9223372036854775807, low = -9223372036854775807", "i64[6]"),
        ("rng_integers", "high = 100, low = 0", "f32[6]"),
        ("rng_integers", "high = 257, low = -256", "bf16[6]"),
        ("rng_integers", "high = 5, low = 0", "f64[]"),
    ];
    for (op, attrs, ty) in cases {
        let text = draw(op, attrs, ty);
        let module = lower(&text).unwrap_or_else(|e| panic!("{op} {ty}: {e}"));
        assert!(module.contains("\"stablehlo.rng_bit_generator\""), "{op} {ty}:\n{module}");
        assert!(module.contains("#stablehlo<rng_algorithm THREE_FRY>"), "{op} {ty}:\n{module}");
        assert!(module.contains("(tensor<2xi64>) -> tensor<2xui64>"), "{op} {ty}: the state is bitcast to ui64");
        assert!(module.contains("(tensor<2xui64>) -> tensor<2xi64>"), "{op} {ty}: the next state back to i64");
    }
}

#[test]
fn word_width_follows_the_dtype() {
    let f32 = lower(&draw("rng_uniform", "high = 1.0, low = 0.0", "f32[4]")).unwrap();
    assert!(f32.contains("-> (tensor<2xui64>, tensor<4xui32>)"), "{f32}");
    let bf16 = lower(&draw("rng_uniform", "high = 1.0, low = 0.0", "bf16[4]")).unwrap();
    assert!(bf16.contains("-> (tensor<2xui64>, tensor<4xui32>)"), "{bf16}");
    let f64 = lower(&draw("rng_uniform", "high = 1.0, low = 0.0", "f64[4]")).unwrap();
    assert!(f64.contains("-> (tensor<2xui64>, tensor<4xui64>)"), "{f64}");
    // Box–Muller draws two words per value.
    let normal = lower(&draw("rng_normal", "mean = 0.0, std = 1.0", "f32[4]")).unwrap();
    assert!(normal.contains("-> (tensor<2xui64>, tensor<2x4xui32>)"), "{normal}");
    assert!(normal.contains("stablehlo.log") && normal.contains("stablehlo.cosine"));
    // Integers always come from 64-bit words.
    let ints = lower(&draw("rng_integers", "high = 10, low = 0", "i32[4]")).unwrap();
    assert!(ints.contains("-> (tensor<2xui64>, tensor<4xui64>)"), "{ints}");
    assert!(ints.contains("\"stablehlo.remainder\""), "{ints}");
}

#[test]
fn uniform_is_clamped_below_high() {
    // The largest f32 below 1.0 bounds the result: rounding never reaches high.
    let m = lower(&draw("rng_uniform", "high = 1.0, low = 0.0", "f32[4]")).unwrap();
    assert!(m.contains("dense<0.99999994> : tensor<f32>"), "{m}");
    assert!(m.contains("\"stablehlo.minimum\""), "{m}");
    // bf16 is computed in f32, converted, then clamped in bf16.
    let m = lower(&draw("rng_uniform", "high = 1.0, low = 0.0", "bf16[4]")).unwrap();
    assert!(m.contains("tensor<4xf32>) -> tensor<4xbf16>"), "{m}");
    assert!(m.contains("dense<9.960930e-01> : tensor<bf16>"), "{m}");
}

/// The reason `op`'s legality check gives for `text`, which lowering reports too.
fn refusal(text: &str, op: &str) -> String {
    let g = parse_graph(text).unwrap_or_else(|e| panic!("parses: {e}\n{text}"));
    let refused = check_graph(&g);
    assert_eq!(refused.len(), 1, "{text}: {refused:?}");
    assert_eq!(refused[0].op, op);
    let reason = refused[0].reason.clone().expect("a reason");
    match Lowering::new().lower(&g) {
        Err(e @ LowerError::Unsupported { .. }) => {
            let message = e.to_string();
            assert!(message.contains(op) && message.contains(&reason), "{message}");
        }
        other => panic!("{text}: expected Unsupported, got {other:?}"),
    }
    reason
}

#[test]
fn bad_forms_are_legality_errors_naming_the_op() {
    let cases: &[(&str, String, &str)] = &[
        // not a float dtype
        ("tpu.rng_uniform", draw("rng_uniform", "high = 1.0, low = 0.0", "i32[4]"), "not i32"),
        ("tpu.rng_normal", draw("rng_normal", "mean = 0.0, std = 1.0", "bool[4]"), "not bool"),
        ("tpu.rng_uniform", draw("rng_uniform", "high = 1.0, low = 0.0", "c64[4]"), "not c64"),
        ("tpu.rng_integers", draw("rng_integers", "high = 1, low = 0", "c64[4]"), "not c64"),
        // the state
        (
            "tpu.rng_uniform",
            one("rng_uniform", "high = 1.0, low = 0.0", "i32[2]", "(i64[2], f32[4])"),
            "i64[2], got i32[2]",
        ),
        (
            "tpu.rng_normal",
            one("rng_normal", "mean = 0.0, std = 1.0", "i64[3]", "(i64[2], f32[4])"),
            "i64[2], got i64[3]",
        ),
        ("tpu.rng_integers", one("rng_integers", "high = 4, low = 0", "i64[2]", "(f32[2], i32[4])"), "result 0"),
        // the range
        ("tpu.rng_uniform", draw("rng_uniform", "high = 0.0, low = 0.0", "f32[4]"), "low 0 must be below high 0"),
        ("tpu.rng_uniform", draw("rng_uniform", "high = 1.0, low = 2.0", "f32[4]"), "must be below"),
        ("tpu.rng_uniform", draw("rng_uniform", "high = inf, low = 0.0", "f32[4]"), "finite"),
        ("tpu.rng_uniform", draw("rng_uniform", "high = 3e38, low = -3e38", "f32[4]"), "overflows"),
        ("tpu.rng_uniform", draw("rng_uniform", "high = 1e6, low = 1e5", "f16[4]"), "no f16 value"),
        ("tpu.rng_uniform", draw("rng_uniform", "high = 1.002, low = 1.001", "bf16[4]"), "no bf16 value"),
        ("tpu.rng_normal", draw("rng_normal", "mean = 0.0, std = -1.0", "f32[4]"), "std -1 must be >= 0"),
        ("tpu.rng_normal", draw("rng_normal", "mean = nan, std = 1.0", "f32[4]"), "finite"),
        ("tpu.rng_integers", draw("rng_integers", "high = 3, low = 3", "i32[4]"), "low 3 must be below high 3"),
        ("tpu.rng_integers", draw("rng_integers", "high = 3.0, low = 0", "i32[4]"), "must be an int"),
        ("tpu.rng_integers", draw("rng_integers", "high = 300, low = 0", "u8[4]"), "does not fit u8"),
        ("tpu.rng_integers", draw("rng_integers", "high = 0, low = -1", "u8[4]"), "does not fit u8"),
        ("tpu.rng_integers", draw("rng_integers", "high = 3, low = 0", "bool[4]"), "does not fit bool"),
        ("tpu.rng_integers", draw("rng_integers", "high = 16777218, low = 0", "f32[4]"), "does not fit f32"),
    ];
    for (op, text, want) in cases {
        let reason = refusal(text, op);
        assert!(reason.contains(want), "{op}: {reason:?} should say {want:?}\n{text}");
    }
}

#[test]
fn wrong_counts_and_missing_attributes_are_verifier_errors_naming_the_op() {
    let cases = [
        // one result
        (
            "graph @g(%s: i64[2]) -> (f32[4]) {\n  %r = tpu.rng_uniform(%s) {high = 1.0, low = 0.0} : f32[4]\n  return %r\n}\n",
            "tpu.rng_uniform",
            "expects 2 results",
        ),
        // no state
        (
            "graph @g(%s: i64[2]) -> (i64[2], f32[4]) {\n  %r:2 = tpu.rng_normal() {mean = 0.0, std = 1.0} : (i64[2], f32[4])\n  return %r#0, %r#1\n}\n",
            "tpu.rng_normal",
            "expects 1 operands",
        ),
        // missing bounds
        (
            "graph @g(%s: i64[2]) -> (i64[2], i32[4]) {\n  %r:2 = tpu.rng_integers(%s) {low = 0} : (i64[2], i32[4])\n  return %r#0, %r#1\n}\n",
            "tpu.rng_integers",
            "missing required attribute 'high'",
        ),
    ];
    for (text, op, want) in cases {
        let g = parse_graph(text).unwrap();
        let err = Lowering::new().lower(&g).expect_err(text);
        let message = err.to_string();
        assert!(matches!(err, LowerError::Verify(_)), "{text}: {message}");
        assert!(message.contains(op) && message.contains(want), "{message} should name {op} and say {want}");
    }
}

#[test]
fn draws_are_pure_functions_of_their_state() {
    // Two draws from one state are the same numbers: CSE may merge them, and DCE may drop an
    // unread draw (the next state is a result, nothing is hidden).
    use torchtpu_compiler::ir::OpName;
    use torchtpu_compiler::registry::{has_side_effects, is_nondeterministic};
    for op in ["tpu.rng_uniform", "tpu.rng_normal", "tpu.rng_integers"] {
        let op = OpName::parse(op).unwrap();
        assert!(!is_nondeterministic(&op) && !has_side_effects(&op), "{op}");
        assert!(torchtpu_compiler::lower::table::is_lowered(&op), "{op}");
    }
}
