//! Legality before emission: the registry's checks refuse a form from the node's attributes
//! and types alone, and lowering reports exactly that refusal, with the node's source line.

use torchtpu_compiler::ir::parse_graph;
use torchtpu_compiler::lower::{check_graph, LowerError, Lowering};

const MIXED: &str = "graph @g(%x: f32[4], %b: bool[4]) -> (f32[4], f32[4], bool[4]) {
  %0 = aten.round.decimals(%x) {decimals = 2} : f32[4]
  %1 = aten.exp.default(%x) : f32[4]
  %2 = aten.abs.default(%b) : bool[4]
  %3 = aten.special_airy_ai.default(%x) : f32[4]
  return %0, %1, %2
}
";

#[test]
fn refusals_name_op_reason_and_line() {
    let g = parse_graph(MIXED).unwrap();
    let refused = check_graph(&g);
    let summary: Vec<(String, Option<String>, u32)> =
        refused.iter().map(|r| (r.op.clone(), r.reason.clone(), r.loc.map(|l| l.line).unwrap_or(0))).collect();
    assert_eq!(
        summary,
        vec![
            ("aten.round".to_string(), Some("round with decimals != 0".to_string()), 2),
            ("aten.abs".to_string(), Some("of a bool tensor".to_string()), 4),
            ("aten.special_airy_ai".to_string(), None, 5),
        ]
    );
}

#[test]
fn legal_forms_pass_and_lowering_reports_the_same_refusal() {
    let ok = parse_graph(
        "graph @g(%x: f32[4]) -> (f32[4]) {\n  %0 = aten.round.decimals(%x) {decimals = 0} : f32[4]\n  return %0\n}\n",
    )
    .unwrap();
    assert!(check_graph(&ok).is_empty());
    Lowering::new().lower(&ok).expect("decimals = 0 lowers");

    let g = parse_graph(
        "graph @g(%x: f32[4]) -> (f32[4]) {\n  %0 = aten.round.decimals(%x) {decimals = 2} : f32[4]\n  return %0\n}\n",
    )
    .unwrap();
    match Lowering::new().lower(&g) {
        Err(LowerError::Unsupported { op, reason, loc, .. }) => {
            assert_eq!(op, "aten.round");
            assert_eq!(reason.as_deref(), Some("round with decimals != 0"));
            assert_eq!(loc.map(|l| l.line), Some(2));
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
}
