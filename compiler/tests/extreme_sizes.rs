//! Shapes at the edge of i64: element counts and byte sizes that overflow are errors (from
//! the verifier, or from the lowering's size limit), never panics or aborts.

use torchtpu_compiler::analysis::memory;
use torchtpu_compiler::ir::parse_graph;
use torchtpu_compiler::lower::{LowerError, Lowering, MAX_TENSOR_BYTES};
use torchtpu_compiler::passes::{PassManager, PipelineOptions, DEFAULT_PIPELINE};

fn lower(text: &str, limit: u64) -> Result<String, LowerError> {
    let g = parse_graph(text).expect("test IR parses");
    let hlo = Lowering::new().with_max_tensor_bytes(limit).lower(&g)?;
    Ok(hlo.text().unwrap_or_default().to_string())
}

#[test]
fn a_view_of_an_overflowing_input_is_an_error() {
    // Used to panic in lower/ops/shape.rs multiplying the dims.
    let text = "graph @g(%x: f32[4294967296, 4294967296]) -> (f32[1]) {\n  %0 = aten.view.default(%x) {size = [1]} : f32[1]\n  return %0\n}\n";
    match lower(text, MAX_TENSOR_BYTES) {
        Err(LowerError::Verify(e)) => assert!(e.message.contains("too large"), "{e}"),
        other => panic!("expected a verifier error, got {other:?}"),
    }
}

#[test]
fn the_memory_pipeline_rejects_an_overflowing_value_up_front() {
    // Used to panic in analysis/memory.rs under schedule-memory.
    let text = "graph @g(%x: f32[4611686018427387904]) -> (f32[4611686018427387904]) {\n  %0 = aten.exp.default(%x) : f32[4611686018427387904]\n  return %0\n}\n";
    let mut g = parse_graph(text).unwrap();
    let pm = PassManager::from_pipeline(DEFAULT_PIPELINE, PipelineOptions::default()).unwrap();
    let e = pm.run(&mut g, &mut std::io::sink()).unwrap_err().to_string();
    assert!(
        e.starts_with("IR is invalid before the pipeline: input 0: type f32[4611686018427387904] is too large"),
        "{e}"
    );
    // Unverified, the estimate saturates instead of overflowing.
    assert_eq!(memory::estimate(&g).unwrap().peak_bytes, u64::MAX);
}

#[test]
fn the_lowering_limit_covers_inputs_results_and_intermediates() {
    let input = "graph @g(%x: f32[64]) -> (f32[64]) {\n  %0 = aten.neg.default(%x) : f32[64]\n  return %0\n}\n";
    assert!(lower(input, 256).is_ok());
    match lower(input, 255) {
        Err(LowerError::TooLarge { node, op, bytes, limit }) => {
            assert_eq!((node.as_str(), op.as_str(), bytes, limit), ("%arg0", "input", 256, 255))
        }
        other => panic!("{other:?}"),
    }
    let result =
        "graph @g(%x: f32[1]) -> (f32[64]) {\n  %0 = aten.expand.default(%x) {size = [64]} : f32[64]\n  return %0\n}\n";
    let e = lower(result, 100).unwrap_err();
    assert_eq!(e.to_string(), "node %0 (aten.expand.default) needs a tensor of 256 bytes, over the limit of 100 bytes");
    // A bf16 mean accumulates in f32: 30 bf16 inputs (60 bytes) become a 120-byte tensor.
    let inner = "graph @g(%x: bf16[30]) -> (bf16[]) {\n  %0 = aten.mean.default(%x) : bf16[]\n  return %0\n}\n";
    assert!(lower(inner, 120).is_ok());
    assert!(matches!(lower(inner, 100), Err(LowerError::TooLarge { bytes: 120, .. })), "{:?}", lower(inner, 100));
}

#[test]
fn the_largest_representable_sizes_lower() {
    // 2^63 - 1 bytes is the most any one tensor may have; the module is only text here.
    let text = "graph @g(%x: u8[9223372036854775807]) -> (u8[9223372036854775807]) {\n  %0 = aten.neg.default(%x) : u8[9223372036854775807]\n  return %0\n}\n";
    let hlo = lower(text, MAX_TENSOR_BYTES).unwrap();
    assert!(hlo.contains("tensor<9223372036854775807xui8>"), "{hlo}");
}

#[test]
fn matmuls_whose_fused_width_would_overflow_stay_apart() {
    // Three 2^62-wide u8 projections of one input: the fused width (3 * 2^62) overflows i64.
    let w = "u8[1, 4611686018427387904]";
    let text = format!(
        "graph @g(%x: u8[1, 1], %a: {w}, %b: {w}, %c: {w}) -> ({w}, {w}, {w}) {{\n  %0 = aten.mm.default(%x, %a) : {w}\n  %1 = aten.mm.default(%x, %b) : {w}\n  %2 = aten.mm.default(%x, %c) : {w}\n  return %0, %1, %2\n}}\n"
    );
    let mut g = parse_graph(&text).unwrap();
    let pm = PassManager::from_pipeline("fuse-matmuls", PipelineOptions::default()).unwrap();
    let runs = pm.run(&mut g, &mut std::io::sink()).unwrap();
    assert!(!runs[0].changed);
    assert_eq!(g.op_count(), 3);
}

#[test]
fn polygamma_of_a_huge_order_lowers_promptly() {
    // Used to loop for ever computing n! for n = i64::MAX.
    let text = "graph @g(%x: f32[2]) -> (f32[2]) {\n  %0 = aten.polygamma.default(%x) {n = 9223372036854775807} : f32[2]\n  return %0\n}\n";
    let started = std::time::Instant::now();
    assert!(lower(text, MAX_TENSOR_BYTES).is_ok());
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}
