//! Lowering: the IR to an MLIR module whose `func.func @main` holds StableHLO, built with
//! melior. The lowering side table (`table.rs`, keyed by the vocabulary's `OpId`) gives each op its family rule (`ops/`), the
//! rule's parameter and a legality check (`legality.rs`) run before anything is emitted; an op
//! without a lowering, or a form its check refuses, is `LowerError::Unsupported { op, node }`,
//! never a panic. Rules follow PyTorch semantics (see `docs/lowering.md`).

mod emitter;
pub mod error;
mod function;
pub mod legality;
mod mlir_ffi;
pub mod names;
mod node;
pub(crate) mod ops;
pub mod param;
mod promote;
pub mod sdy;
pub mod table;

pub use emitter::{element_type, tensor_type};
pub use error::LowerError;
pub use legality::{check_graph, Refusal};
pub use ops::nn::convolution_runs_as_matmul;
pub use ops::RuleFn;
pub use promote::result_type;

use crate::ir::{verify, Graph, TensorType};
use crate::lower::names::hlo;
use melior::dialect::DialectHandle;
use melior::ir::attribute::StringAttribute;
use melior::ir::operation::OperationLike;
use melior::ir::{Block, BlockLike, Location, Module};
use melior::Context;

/// The serialized form of a lowered module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// MLIR text (generic form for StableHLO ops): for people, dumps and lit tests.
    Text,
    /// MLIR bytecode: what PJRT is given (about 10x cheaper to write than text).
    Bytecode,
}

/// A lowered program: the serialized StableHLO module and its signature.
#[derive(Clone, Debug)]
pub struct StableHlo {
    pub format: Format,
    pub code: Vec<u8>,
    pub inputs: Vec<TensorType>,
    pub outputs: Vec<TensorType>,
}

impl StableHlo {
    /// The module text, when lowered as `Format::Text`.
    pub fn text(&self) -> Option<&str> {
        match self.format {
            Format::Text => std::str::from_utf8(&self.code).ok(),
            Format::Bytecode => None,
        }
    }
}

/// An MLIR context set up for StableHLO emission: `func` loaded, other dialects unregistered.
/// Creating one costs milliseconds, so callers that lower many graphs keep one.
pub struct Lowering {
    context: Context,
    max_tensor_bytes: u64,
}

/// The default limit on any one tensor of a lowered module: XLA computes byte sizes in
/// int64, and a type past that makes its compiler throw a C++ exception through the PJRT C
/// API (which aborts the process).
pub const MAX_TENSOR_BYTES: u64 = i64::MAX as u64;

impl Default for Lowering {
    fn default() -> Self {
        Self::new()
    }
}

impl Lowering {
    pub fn new() -> Lowering {
        let context = Context::new();
        DialectHandle::func().load_dialect(&context);
        context.set_allow_unregistered_dialects(true);
        Lowering { context, max_tensor_bytes: MAX_TENSOR_BYTES }
    }

    /// Refuses (`LowerError::TooLarge`) any value or intermediate tensor over `bytes`: a
    /// device's compiler may fail on absurd sizes in ways that cannot be caught (the engine
    /// sets a lower limit than the default `MAX_TENSOR_BYTES`).
    pub fn with_max_tensor_bytes(mut self, bytes: u64) -> Lowering {
        self.set_max_tensor_bytes(bytes);
        self
    }

    pub fn set_max_tensor_bytes(&mut self, bytes: u64) {
        self.max_tensor_bytes = bytes.min(MAX_TENSOR_BYTES);
    }

    pub fn max_tensor_bytes(&self) -> u64 {
        self.max_tensor_bytes
    }

    /// Lowers a verified graph with static shapes to a StableHLO module text.
    pub fn lower(&self, g: &Graph) -> Result<StableHlo, LowerError> {
        self.lower_as(g, Format::Text)
    }

    /// Lowers a verified graph with static shapes to a StableHLO module in `format`.
    pub fn lower_as(&self, g: &Graph, format: Format) -> Result<StableHlo, LowerError> {
        self.lower_aliased(g, format, &[])
    }

    /// As `lower_as`, with input/output aliasing for buffer donation: each `(input, output)`
    /// pair becomes `tf.aliasing_output = output` on `@main`'s argument `input`, which PJRT
    /// turns into donation of that argument's buffer (`analysis::memory::donation_pairs`).
    pub fn lower_aliased(
        &self,
        g: &Graph,
        format: Format,
        aliases: &[(usize, usize)],
    ) -> Result<StableHlo, LowerError> {
        verify(g)?;
        self.lower_verified(g, format, aliases)
    }

    /// [`Lowering::lower_aliased`] of a graph verified since its last change, not verified
    /// again: the driver's, which verifies at entry and after each pass that changed the graph
    /// (one verification per compile).
    pub(crate) fn lower_verified(
        &self,
        g: &Graph,
        format: Format,
        aliases: &[(usize, usize)],
    ) -> Result<StableHlo, LowerError> {
        let ctx = &self.context;
        let loc = Location::unknown(ctx);
        let limits = function::Limits { max_tensor_bytes: self.max_tensor_bytes };
        let sig = function::Signature::of(ctx, g, &limits)?;
        let block = Block::new(&sig.arg_types.iter().map(|&t| (t, loc)).collect::<Vec<_>>());
        function::lower_body(ctx, &block, loc, g, &sig, &limits)?;
        let fn_attrs = function::attributes(ctx, g, aliases);
        function::finish(ctx, g, block, &sig, fn_attrs, loc, format)
    }
}

/// An SPMD module's mesh: `sdy.mesh @mesh = <["dp"=2, "tp"=2]>` (generic form) and the
/// partition count on the module, which XLA reads with the compile options' device assignment.
fn mesh_declaration<'c>(
    ctx: &'c melior::Context,
    module: &mut Module<'c>,
    mesh: &crate::ir::Mesh,
    loc: Location<'c>,
) -> Result<(), LowerError> {
    use melior::ir::attribute::IntegerAttribute;
    use melior::ir::operation::{OperationBuilder, OperationMutLike};
    use melior::ir::r#type::IntegerType;
    use melior::ir::Identifier;
    let op = OperationBuilder::new(names::sdy::MESH, loc)
        .add_attributes(&[
            (Identifier::new(ctx, "sym_name"), StringAttribute::new(ctx, sdy::MESH_SYMBOL).into()),
            (Identifier::new(ctx, "mesh"), sdy::MeshAttr(mesh).build(ctx)),
        ])
        .build()
        .map_err(|e| mlir(names::sdy::MESH, e))?;
    module.body().append_operation(op);
    let i32_attr = |n: i64| IntegerAttribute::new(IntegerType::new(ctx, 32).into(), n).into();
    let mut m = module.as_operation_mut();
    m.set_attribute("mhlo.num_partitions", i32_attr(mesh.devices()));
    m.set_attribute("mhlo.num_replicas", i32_attr(1));
    Ok(())
}

/// Bytes of a static type, without overflow (the verifier bounds them by i64::MAX).
fn type_bytes(t: &TensorType) -> u128 {
    t.static_dims()
        .unwrap_or_default()
        .iter()
        .fold(t.dtype.size_bytes() as u128, |acc, &d| acc.saturating_mul(d.max(0) as u128))
}

fn mlir(context: &str, e: melior::Error) -> LowerError {
    LowerError::Mlir { context: context.into(), message: e.to_string() }
}

/// Lowers with a fresh context (convenient; keep a `Lowering` to lower many graphs).
pub fn lower_to_stablehlo(g: &Graph) -> Result<StableHlo, LowerError> {
    Lowering::new().lower(g)
}

/// Erases the `stablehlo.transpose`s nothing reads: a matmul that reads its operand
/// untransposed (`ops::linalg::dot_in`) leaves the node's transpose behind, and the emitted
/// module is read by people too.
fn erase_unused_transposes(block: &Block) {
    use melior::ir::BlockLike;
    let mut op = block.first_operation();
    while let Some(o) = op {
        op = o.next_in_block();
        if o.name().as_string_ref().as_str() == Ok(hlo::TRANSPOSE) {
            mlir_ffi::erase_if_first_result_unused(o);
        }
    }
}
