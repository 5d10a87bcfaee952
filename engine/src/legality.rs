//! The op catalog (vocabulary and each layer's rules) and the legality checks, for the backend's partitioner: which nodes of a
//! graph the lowering takes, asked once per graph before anything is compiled.

pub use torchtpu_compiler::catalog;
pub use torchtpu_compiler::lower::Refusal;

use torchtpu_compiler::ir::{parse_graph, ParseError};

/// Every node of the IR `text` that the lowering refuses (no lowering, or a form its
/// legality check refuses), with the line it was written on.
pub fn refusals(text: &str) -> Result<Vec<Refusal>, ParseError> {
    Ok(torchtpu_compiler::lower::check_graph(&parse_graph(text)?))
}
