//! The graph IR: types, attributes, the graph itself, its text form, and the verifier.

pub mod attr;
pub mod graph;
pub mod ops;
pub mod parser;
pub mod printer;
pub mod scalar;
pub mod sharding;
pub mod types;
pub mod verifier;

pub use attr::{Attr, Elements, Literal};
pub use graph::{Graph, Node, NodeId, NodeKind, OpName, SourceLoc, Value};
pub use parser::{parse_graph, parse_layout, ParseError};
pub use printer::print_graph;
pub use scalar::Scalar;
pub use sharding::{Mesh, Origin, Sharding};
pub use types::{DType, Dim, SymRange, TensorType};
pub use verifier::{verify, VerifyError};
