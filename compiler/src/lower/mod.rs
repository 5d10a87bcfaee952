//! Lowering: the IR to an MLIR module whose `func.func @main` holds StableHLO, built with
//! melior. The lowering side table (`table.rs`, keyed by the vocabulary's `OpId`) gives each op its family rule (`ops/`), the
//! rule's parameter and a legality check (`legality.rs`) run before anything is emitted; an op
//! without a lowering, or a form its check refuses, is `LowerError::Unsupported { op, node }`,
//! never a panic. Rules follow PyTorch semantics (see `docs/lowering.md`).

mod emitter;
pub mod error;
pub mod legality;
mod node;
pub(crate) mod ops;
mod promote;
pub mod table;

pub use emitter::{element_type, tensor_type};
pub use error::LowerError;
pub use legality::{check_graph, Refusal};
pub use ops::nn::convolution_runs_as_matmul;
pub use ops::RuleFn;
pub use promote::result_type;

use crate::ir::printer::ValueNames;
use crate::ir::{verify, Graph, NodeKind, TensorType, Value};
use emitter::{Emitter, Tv};
use error::RuleError;
use melior::dialect::{func, DialectHandle};
use melior::ir::attribute::{StringAttribute, TypeAttribute};
use melior::ir::operation::OperationLike;
use melior::ir::r#type::FunctionType;
use melior::ir::{Block, BlockLike, Location, Module, Region, RegionLike, Type};
use melior::Context;
use std::collections::HashMap;

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
        let names = ValueNames::for_graph(g);
        let ctx = &self.context;
        let loc = Location::unknown(ctx);
        let order =
            g.topo_order().map_err(|_| LowerError::Mlir { context: "graph".into(), message: "cycle".into() })?;

        let static_dims = |t: &TensorType, node: &str, op: &str| {
            t.static_dims().ok_or_else(|| LowerError::DynamicShape {
                op: op.into(),
                node: node.into(),
                ty: t.to_string(),
            })
        };
        let limit = self.max_tensor_bytes;
        let too_large = |bytes: u128, node: &str, op: &str| {
            let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
            (bytes > limit).then(|| LowerError::TooLarge { op: op.into(), node: node.into(), bytes, limit })
        };
        let input_types: Vec<TensorType> = g.inputs().iter().map(|&i| g.node(i).results[0].clone()).collect();
        let output_types: Vec<TensorType> = g.outputs().iter().map(|&v| g.value_type(v).clone()).collect();
        let mut arg_types: Vec<(Type, Location)> = Vec::new();
        for (i, t) in input_types.iter().enumerate() {
            let dims = static_dims(t, &format!("%arg{i}"), "input")?;
            if let Some(e) = too_large(type_bytes(t), &format!("%arg{i}"), "input") {
                return Err(e);
            }
            arg_types.push((tensor_type(ctx, t.dtype, &dims), loc));
        }
        let mut result_types: Vec<Type> = Vec::new();
        for t in &output_types {
            let dims = static_dims(t, "return", "output")?;
            result_types.push(tensor_type(ctx, t.dtype, &dims));
        }

        let block = Block::new(&arg_types);
        {
            let sizes = std::rc::Rc::new(emitter::TypeSizes::default());
            let e = Emitter { ctx, block: &block, loc, sizes: std::rc::Rc::clone(&sizes) };
            let mut values: HashMap<Value, Tv> = HashMap::new();
            for (i, &id) in g.inputs().iter().enumerate() {
                let t = &input_types[i];
                let v = block.argument(i).map_err(|e| mlir("block argument", e))?.into();
                values.insert(Value::new(id, 0), Tv { v, dtype: t.dtype, dims: t.static_dims().unwrap_or_default() });
            }
            for id in order {
                let node = g.node(id);
                let NodeKind::Op(op) = &node.kind else { continue };
                let node_name = names.node(id).to_string();
                let op_name = op.to_string();
                let mut results = Vec::with_capacity(node.results.len());
                for t in &node.results {
                    results.push((t.dtype, static_dims(t, &node_name, &op_name)?));
                    if let Some(e) = too_large(type_bytes(t), &node_name, &op_name) {
                        return Err(e);
                    }
                }
                let lowering = legality::check_node(g, id)
                    .map_err(|r| LowerError::Unsupported {
                        op: r.op,
                        node: node_name.clone(),
                        reason: r.reason,
                        loc: r.loc,
                    })?
                    .expect("an op node");
                // Every lowered op computes something; rules read `results[0]`.
                if node.results.is_empty() {
                    let message = "the node declares no results".to_string();
                    return Err(LowerError::BadNode { op: op_name, node: node_name, message });
                }
                let args: Vec<Tv> = node.operands.iter().map(|v| values[v].clone()).collect();
                let used = (0..node.results.len())
                    .map(|r| {
                        let v = Value::new(id, r as u32);
                        !g.uses(v).is_empty() || g.outputs().contains(&v)
                    })
                    .collect();
                let nctx = node::NodeCtx { node, args, results, used, param: lowering.param };
                let out = (lowering.rule)(&e, &nctx).map_err(|err| match err {
                    RuleError::Unsupported(reason) => LowerError::Unsupported {
                        op: op.base(),
                        node: node_name.clone(),
                        reason: Some(reason),
                        loc: node.loc,
                    },
                    RuleError::Bad(message) => {
                        LowerError::BadNode { op: op_name.clone(), node: node_name.clone(), message }
                    }
                    RuleError::Mlir(message) => {
                        LowerError::Mlir { context: format!("node {node_name} ({op_name})"), message }
                    }
                })?;
                // What the rule built: checked before anything reaches MLIR's verifier or XLA.
                let (largest, negative) = sizes.take();
                if let Some(dims) = negative {
                    let message = format!("the lowering built a tensor with negative dims {dims:?}");
                    return Err(LowerError::BadNode { op: op_name, node: node_name, message });
                }
                if let Some(e) = too_large(largest, &node_name, &op_name) {
                    return Err(e);
                }
                if out.len() != nctx.results.len() {
                    return Err(LowerError::BadNode {
                        op: op_name,
                        node: node_name,
                        message: format!("rule produced {} results, the IR declares {}", out.len(), nctx.results.len()),
                    });
                }
                for (r, (tv, (dtype, dims))) in out.into_iter().zip(&nctx.results).enumerate() {
                    if tv.dtype != *dtype || tv.dims != *dims {
                        return Err(LowerError::BadNode {
                            op: op_name,
                            node: node_name,
                            message: format!(
                                "result {r} lowers to {}, but the IR declares {}",
                                TensorType::fixed(tv.dtype, &tv.dims),
                                TensorType::fixed(*dtype, dims)
                            ),
                        });
                    }
                    let v = Value::new(id, r as u32);
                    let tv = match g.mesh.as_ref().and(g.sharding(v)) {
                        // Every decided layout is pinned, so XLA's partitioner follows the
                        // plan (and its collectives are the ones predicted). Layout ops pin
                        // themselves. A pending partial result is not: the plan's `partial`
                        // says where an all-reduce is due, not what each device holds (addmm's
                        // bias, a mean's divisor), which Shardy's `unreduced` would assert.
                        Some(s) if s.partial.is_empty() && !ops::layout::is_layout_op(op) => {
                            ops::layout::pin(&e, tv, s).map_err(|err| LowerError::Mlir {
                                context: format!("node {node_name} ({op_name}) layout"),
                                message: format!("{err:?}"),
                            })?
                        }
                        _ => tv,
                    };
                    values.insert(v, tv);
                }
            }
            let outs: Vec<_> = g.outputs().iter().map(|v| values[v].v).collect();
            block.append_operation(func::r#return(&outs, loc));
            erase_unused_transposes(&block);
        }
        let region = Region::new();
        region.append_block(block);
        let arg_tys: Vec<Type> = arg_types.iter().map(|(t, _)| *t).collect();
        let fn_type = FunctionType::new(ctx, &arg_tys, &result_types);
        let mut module = Module::new(loc);
        let mut fn_attrs = Vec::new();
        let sharding_of = |v: Value| -> Option<String> {
            g.mesh.as_ref()?;
            g.sharding(v).map(|s| format!("sdy.sharding = {}", ops::layout::sdy_sharding(&s.sdy_dims())))
        };
        let per_arg: Vec<Vec<String>> = g
            .inputs()
            .iter()
            .enumerate()
            .map(|(i, &id)| {
                let mut entries = Vec::new();
                if let Some((_, out)) = aliases.iter().find(|(input, _)| *input == i) {
                    entries.push(format!("tf.aliasing_output = {out} : i32"));
                }
                entries.extend(sharding_of(Value::new(id, 0)));
                entries
            })
            .collect();
        let per_result: Vec<Vec<String>> = g.outputs().iter().map(|&v| sharding_of(v).into_iter().collect()).collect();
        for (name, entries) in [("arg_attrs", per_arg), ("res_attrs", per_result)] {
            if entries.iter().all(Vec::is_empty) {
                continue;
            }
            let dicts: Vec<String> = entries.iter().map(|e| format!("{{{}}}", e.join(", "))).collect();
            let text = format!("[{}]", dicts.join(", "));
            let attr = melior::ir::Attribute::parse(ctx, &text)
                .ok_or_else(|| LowerError::Mlir { context: name.into(), message: format!("cannot parse {text}") })?;
            fn_attrs.push((melior::ir::Identifier::new(ctx, name), attr));
        }
        if let Some(mesh) = &g.mesh {
            mesh_declaration(ctx, &mut module, mesh, loc)?;
        }
        module.body().append_operation(func::func(
            ctx,
            StringAttribute::new(ctx, "main"),
            TypeAttribute::new(fn_type.into()),
            region,
            &fn_attrs,
            loc,
        ));
        if !module.as_operation().verify() {
            return Err(LowerError::Mlir {
                context: "module".into(),
                message: "the emitted module does not verify".into(),
            });
        }
        let code = match format {
            Format::Text => module.as_operation().to_string().into_bytes(),
            Format::Bytecode => module.as_operation().write_bytecode(),
        };
        Ok(StableHlo { format, code, inputs: input_types, outputs: output_types })
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
    use melior::ir::operation::{OperationBuilder, OperationMutLike};
    let parse = |text: &str| {
        melior::ir::Attribute::parse(ctx, text)
            .ok_or_else(|| LowerError::Mlir { context: "mesh".into(), message: format!("cannot parse {text}") })
    };
    let axes: Vec<String> = mesh.axes.iter().map(|(a, n)| format!("\"{a}\"={n}")).collect();
    let op = OperationBuilder::new("sdy.mesh", loc)
        .add_attributes(&[
            (melior::ir::Identifier::new(ctx, "sym_name"), StringAttribute::new(ctx, ops::layout::MESH).into()),
            (melior::ir::Identifier::new(ctx, "mesh"), parse(&format!("#sdy.mesh<[{}]>", axes.join(", ")))?),
        ])
        .build()
        .map_err(|e| mlir("sdy.mesh", e))?;
    module.body().append_operation(op);
    let mut m = module.as_operation_mut();
    m.set_attribute("mhlo.num_partitions", parse(&format!("{} : i32", mesh.devices()))?);
    m.set_attribute("mhlo.num_replicas", parse("1 : i32")?);
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
/// untransposed (`ops::linalg::dot`) leaves the node's transpose behind, and the emitted
/// module is read by people too.
fn erase_unused_transposes(block: &Block) {
    use melior::ir::operation::OperationLike;
    use melior::ir::BlockLike;
    let mut op = block.first_operation();
    while let Some(o) = op {
        op = o.next_in_block();
        let is_transpose = o.name().as_string_ref().as_str() == Ok("stablehlo.transpose");
        // SAFETY: `o` is a live operation of `block` with one result; the C API only reads
        // its use list, and erases it (its own operands' use lists drop it) when it has none.
        unsafe {
            if is_transpose
                && mlir_sys::mlirOpOperandIsNull(mlir_sys::mlirValueGetFirstUse(mlir_sys::mlirOperationGetResult(
                    o.to_raw(),
                    0,
                )))
            {
                mlir_sys::mlirOperationDestroy(o.to_raw());
            }
        }
    }
}
