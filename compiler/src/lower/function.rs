//! `@main` from a graph, in four steps (`Lowering::lower_aliased` runs them): its signature,
//! each node through its rule with the rule's contract checked, the function attributes
//! (donation aliases, Shardy shardings) and the finished, verified module.

use std::collections::HashMap;

use melior::dialect::func;
use melior::ir::attribute::{ArrayAttribute, DictionaryAttribute, IntegerAttribute, StringAttribute, TypeAttribute};
use melior::ir::operation::OperationLike;
use melior::ir::r#type::{FunctionType, IntegerType};
use melior::ir::{Attribute, Block, BlockLike, Identifier, Location, Module, Region, RegionLike, Type};
use melior::Context;

use super::emitter::{self, tensor_type, Emitter, Tv};
use super::error::{LowerError, RuleError};
use super::sdy::ShardingAttr;
use super::{
    erase_unused_transposes, legality, mesh_declaration, mlir, names, node, ops, type_bytes, Format, StableHlo,
};
use crate::ir::printer::ValueNames;
use crate::ir::{Graph, NodeId, NodeKind, TensorType, Value};

/// What every tensor of the module must respect.
pub(super) struct Limits {
    pub max_tensor_bytes: u64,
}

impl Limits {
    fn check(&self, bytes: u128, node: &str, op: &str) -> Result<(), LowerError> {
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        let limit = self.max_tensor_bytes;
        match bytes > limit {
            true => Err(LowerError::TooLarge { op: op.into(), node: node.into(), bytes, limit }),
            false => Ok(()),
        }
    }
}

fn static_dims(t: &TensorType, node: &str, op: &str) -> Result<Vec<i64>, LowerError> {
    t.static_dims().ok_or_else(|| LowerError::DynamicShape { op: op.into(), node: node.into(), ty: t.to_string() })
}

/// `@main`'s signature: the graph's input and output types, static and within the limits.
pub(super) struct Signature<'c> {
    pub inputs: Vec<TensorType>,
    pub outputs: Vec<TensorType>,
    pub arg_types: Vec<Type<'c>>,
    pub result_types: Vec<Type<'c>>,
}

impl<'c> Signature<'c> {
    pub fn of(ctx: &'c Context, g: &Graph, limits: &Limits) -> Result<Signature<'c>, LowerError> {
        let inputs: Vec<TensorType> = g.inputs().iter().map(|&i| g.node(i).results[0].clone()).collect();
        let outputs: Vec<TensorType> = g.outputs().iter().map(|&v| g.value_type(v).clone()).collect();
        let mut arg_types = Vec::with_capacity(inputs.len());
        for (i, t) in inputs.iter().enumerate() {
            let name = format!("%arg{i}");
            let dims = static_dims(t, &name, "input")?;
            limits.check(type_bytes(t), &name, "input")?;
            arg_types.push(tensor_type(ctx, t.dtype, &dims));
        }
        let mut result_types = Vec::with_capacity(outputs.len());
        for t in &outputs {
            result_types.push(tensor_type(ctx, t.dtype, &static_dims(t, "return", "output")?));
        }
        Ok(Signature { inputs, outputs, arg_types, result_types })
    }
}

/// Every node of `g`, in order, into `block`, then the return.
pub(super) fn lower_body<'c>(
    ctx: &'c Context,
    block: &Block<'c>,
    loc: Location<'c>,
    g: &Graph,
    sig: &Signature<'c>,
    limits: &Limits,
) -> Result<(), LowerError> {
    let order = g.topo_order().map_err(|_| LowerError::Mlir { context: "graph".into(), message: "cycle".into() })?;
    let names = ValueNames::for_graph(g);
    let sizes = std::rc::Rc::new(emitter::TypeSizes::default());
    let e = Emitter { ctx, block, loc, sizes: std::rc::Rc::clone(&sizes) };
    let mut values: HashMap<Value, Tv> = HashMap::new();
    for (i, &id) in g.inputs().iter().enumerate() {
        let t = &sig.inputs[i];
        let v = block.argument(i).map_err(|e| mlir("block argument", e))?.into();
        values.insert(Value::new(id, 0), Tv { v, dtype: t.dtype, dims: t.static_dims().unwrap_or_default() });
    }
    for id in order {
        if matches!(g.node(id).kind, NodeKind::Op(_)) {
            lower_node(&e, &sizes, g, id, names.node(id), &mut values, limits)?;
        }
    }
    let outs: Vec<_> = g.outputs().iter().map(|v| values[v].v).collect();
    block.append_operation(func::r#return(&outs, loc));
    erase_unused_transposes(block);
    Ok(())
}

/// One node through its rule: legality first, then the rule, then its contract (sizes,
/// result count and types) before anything reaches MLIR's verifier or XLA; results of an
/// SPMD graph pinned to their planned layouts.
fn lower_node<'c, 'a>(
    e: &Emitter<'c, 'a>,
    sizes: &emitter::TypeSizes,
    g: &Graph,
    id: NodeId,
    node_name: &str,
    values: &mut HashMap<Value, Tv<'c, 'a>>,
    limits: &Limits,
) -> Result<(), LowerError> {
    let node = g.node(id);
    let NodeKind::Op(op) = &node.kind else { return Ok(()) };
    let op_name = op.to_string();
    let bad = |message: String| LowerError::BadNode { op: op_name.clone(), node: node_name.into(), message };
    let mut results = Vec::with_capacity(node.results.len());
    for t in &node.results {
        results.push((t.dtype, static_dims(t, node_name, &op_name)?));
        limits.check(type_bytes(t), node_name, &op_name)?;
    }
    let lowering = legality::check_node(g, id)
        .map_err(|r| LowerError::Unsupported { op: r.op, node: node_name.into(), reason: r.reason, loc: r.loc })?
        .expect("an op node");
    // Every lowered op computes something; rules read `results[0]`.
    if node.results.is_empty() {
        return Err(bad("the node declares no results".into()));
    }
    let args: Vec<Tv> = node.operands.iter().map(|v| values[v].clone()).collect();
    let used = (0..node.results.len())
        .map(|r| {
            let v = Value::new(id, r as u32);
            !g.uses(v).is_empty() || g.outputs().contains(&v)
        })
        .collect();
    let nctx = node::NodeCtx { node, args, results, used, param: lowering.param };
    let out = (lowering.rule)(e, &nctx).map_err(|err| match err {
        RuleError::Unsupported(reason) => {
            LowerError::Unsupported { op: op.base(), node: node_name.into(), reason: Some(reason), loc: node.loc }
        }
        RuleError::Bad(message) => bad(message),
        RuleError::Mlir(message) => LowerError::Mlir { context: format!("node {node_name} ({op_name})"), message },
    })?;
    // What the rule built: checked before anything reaches MLIR's verifier or XLA.
    let (largest, negative) = sizes.take();
    if let Some(dims) = negative {
        return Err(bad(format!("the lowering built a tensor with negative dims {dims:?}")));
    }
    limits.check(largest, node_name, &op_name)?;
    if out.len() != nctx.results.len() {
        return Err(bad(format!("rule produced {} results, the IR declares {}", out.len(), nctx.results.len())));
    }
    for (r, (tv, (dtype, dims))) in out.into_iter().zip(&nctx.results).enumerate() {
        if tv.dtype != *dtype || tv.dims != *dims {
            return Err(bad(format!(
                "result {r} lowers to {}, but the IR declares {}",
                TensorType::fixed(tv.dtype, &tv.dims),
                TensorType::fixed(*dtype, dims)
            )));
        }
        let v = Value::new(id, r as u32);
        let tv = match g.mesh.as_ref().and(g.sharding(v)) {
            // Every decided layout is pinned, so XLA's partitioner follows the plan (and its
            // collectives are the ones predicted). Layout ops pin themselves. A pending
            // partial result is not: the plan's `partial` says where an all-reduce is due, not
            // what each device holds (addmm's bias, a mean's divisor), which Shardy's
            // `unreduced` would assert.
            Some(s) if s.partial.is_empty() && !ops::layout::is_layout_op(op) => {
                ops::layout::pin(e, tv, s).map_err(|err| LowerError::Mlir {
                    context: format!("node {node_name} ({op_name}) layout"),
                    message: format!("{err:?}"),
                })?
            }
            _ => tv,
        };
        values.insert(v, tv);
    }
    Ok(())
}

/// `@main`'s argument and result attributes: donation (`tf.aliasing_output`) and, in an SPMD
/// graph, each value's Shardy sharding.
pub(super) fn attributes<'c>(
    ctx: &'c Context,
    g: &Graph,
    aliases: &[(usize, usize)],
) -> Vec<(Identifier<'c>, Attribute<'c>)> {
    let sharding_of = |v: Value| -> Option<(Identifier<'c>, Attribute<'c>)> {
        g.mesh.as_ref()?;
        let s = g.sharding(v)?;
        Some((Identifier::new(ctx, names::SDY_SHARDING_ATTR), ShardingAttr::of(s).build(ctx)))
    };
    let per_arg: Vec<Vec<(Identifier<'c>, Attribute<'c>)>> = g
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, &id)| {
            let mut entries = Vec::new();
            if let Some((_, out)) = aliases.iter().find(|(input, _)| *input == i) {
                let index = IntegerAttribute::new(IntegerType::new(ctx, 32).into(), *out as i64);
                entries.push((Identifier::new(ctx, "tf.aliasing_output"), index.into()));
            }
            entries.extend(sharding_of(Value::new(id, 0)));
            entries
        })
        .collect();
    let per_result: Vec<Vec<_>> = g.outputs().iter().map(|&v| sharding_of(v).into_iter().collect()).collect();
    let mut fn_attrs = Vec::new();
    for (name, entries) in [("arg_attrs", per_arg), ("res_attrs", per_result)] {
        if entries.iter().all(Vec::is_empty) {
            continue;
        }
        let dicts: Vec<Attribute<'c>> = entries.iter().map(|e| DictionaryAttribute::new(ctx, e).into()).collect();
        fn_attrs.push((Identifier::new(ctx, name), ArrayAttribute::new(ctx, &dicts).into()));
    }
    fn_attrs
}

/// The module: the mesh declaration of an SPMD graph, `@main`, verified and serialised.
pub(super) fn finish<'c>(
    ctx: &'c Context,
    g: &Graph,
    block: Block<'c>,
    sig: &Signature<'c>,
    fn_attrs: Vec<(Identifier<'c>, Attribute<'c>)>,
    loc: Location<'c>,
    format: Format,
) -> Result<StableHlo, LowerError> {
    let region = Region::new();
    region.append_block(block);
    let fn_type = FunctionType::new(ctx, &sig.arg_types, &sig.result_types);
    let mut module = Module::new(loc);
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
    Ok(StableHlo { format, code, inputs: sig.inputs.clone(), outputs: sig.outputs.clone() })
}
