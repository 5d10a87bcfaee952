//! IR text and pass pipelines a user hands in (`torchtpu.canonical_ir`, `run_pipeline`,
//! `lower_ir`, the `passes` option): checked, transformed and lowered by the driver, with
//! the user's mistakes told apart from torchtpu's (`EngineError::text_fault`).

use torchtpu_compiler::driver::{self, DriverError, Timings};
use torchtpu_compiler::ir::print_graph;
use torchtpu_compiler::lower::Format;
use torchtpu_compiler::passes::{PassManager, PipelineOptions};

use crate::{with_driver, EngineError, Options};

/// Parses IR text, verifies it, and prints it back in canonical form.
pub fn canonical_ir(text: &str) -> Result<String, EngineError> {
    let g = with_driver(|cx| cx.check_text(text, &mut Timings::default()))?;
    Ok(print_graph(&g))
}

/// Runs a pass pipeline (`"canonicalize,cse,dce"`) over IR text and returns the result.
pub fn run_pipeline(text: &str, pipeline: &str) -> Result<String, EngineError> {
    let options = driver::Options {
        analyze: false,
        donate_inputs: false,
        emit: None,
        ..driver::Options::with_pipeline(pipeline)
    };
    let c = with_driver(|cx| cx.compile_text(text, &options, &mut std::io::sink()))?;
    Ok(print_graph(&c.graph))
}

/// Checks a pipeline's syntax, pass names and options without running it.
pub fn check_pipeline(pipeline: &str) -> Result<(), EngineError> {
    PassManager::from_pipeline(pipeline, PipelineOptions::default()).map_err(DriverError::Pipeline)?;
    Ok(())
}

/// Lowers IR text (after `options`' pipeline) to StableHLO text in one driver run: returns
/// (the IR after the passes, the StableHLO text).
pub fn lower_text(text: &str, options: &Options) -> Result<(String, String), EngineError> {
    let c = with_driver(|cx| cx.compile_text(text, &options.driver(Some(Format::Text)), &mut std::io::sink()))?;
    let hlo = c.hlo.as_ref().and_then(|h| h.text()).unwrap_or_default().to_string();
    Ok((print_graph(&c.graph), hlo))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TextFault;

    #[test]
    fn user_mistakes_are_told_apart_with_their_position() {
        let e = canonical_ir("graph @g(%x: f32[2]) -> (f32[2]) {\n  return %y\n}\n").unwrap_err();
        assert!(matches!(e.text_fault(), Some(TextFault::Ir { line: Some(2), .. })), "{e:?}");
        let e = check_pipeline("cse,no-such-pass").unwrap_err();
        assert_eq!(e.text_fault(), Some(TextFault::Pipeline));
        assert!(check_pipeline(crate::DEFAULT_PIPELINE).is_ok());
    }

    #[test]
    fn a_pipeline_runs_over_text_and_lowering_returns_both_forms() {
        let text = "graph @g(%x: f32[2]) -> (f32[2]) {\n  %0 = aten.neg.default(%x) : f32[2]\n  %1 = aten.neg.default(%x) : f32[2]\n  %2 = aten.add.Tensor(%0, %1) : f32[2]\n  return %2\n}\n";
        let after = run_pipeline(text, "cse").unwrap();
        assert_eq!(after.matches("aten.neg").count(), 1, "{after}");
        let (ir, hlo) = lower_text(text, &Options::with_pipeline("cse")).unwrap();
        assert_eq!(ir, after);
        assert!(hlo.contains("stablehlo.negate"), "{hlo}");
    }
}
