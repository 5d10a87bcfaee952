"""Eager fallback inside a graph: the nodes the compiler does not take are partitioned out
and run eagerly, each alone; every maximal supported region around them is compiled on its
own. (Dynamo graph breaks are the first layer, handled by Dynamo; what else fails is decided
by `policy.on_failure`.)

A node is not taken when its op has no lowering, when the registry's legality check refuses
its form (`_C.check_lowerable`, asked once per region before it is compiled), when the
exporter cannot write one of its arguments, or when lowering refuses it late (the error names
its IR line). In the last three cases the region is partitioned again around that node."""

from __future__ import annotations

import operator

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from torchtpu import _C, _stats, index_checks, policy
from torchtpu._log import log, warn_once  # noqa: F401 - warn_once re-exported for callers
from torchtpu.compiled.executor import compile_exported
from torchtpu.compiled.exporter import base_name, export
from torchtpu.compiled.specialize import NotSpecializable
from torchtpu.errors import RAISED_AS_IS, FallbackError, InternalError, ShardingError, UnsupportedError  # noqa: F401 - FallbackError re-exported

# Partitioning a region again around a node found only while compiling it stops after this
# many nested rounds (each removes at least one node, so this bounds pathological graphs only).
MAX_ROUNDS = 16


class _Support(OperatorSupportBase):
    def __init__(self, unsupported: set):
        self.unsupported = unsupported

    def is_node_supported(self, submodules, node) -> bool:
        if node.op != "call_function" or node in self.unsupported:
            return False
        if node.target is operator.getitem:
            return node.args[0] not in self.unsupported
        return True


class _CompiledPartition(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def refused_nodes(exported) -> dict:
    """The FX nodes whose IR the registry's legality checks refuse, with the reason (asked
    once per graph or region, before compiling it)."""
    bad = {}
    for line, op, reason in _C.check_lowerable(exported.text):
        node = exported.nodes_by_line.get(line)
        if node is None:  # an IR line the exporter did not write for a node: a bug
            raise InternalError(f"the compiler refused {op} at line {line}, which no FX node wrote", stage="export")
        bad[node] = f"{op}: {reason}" if reason else f"no lowering for {op}"
    return bad


def unsupported_node(error, exported):
    """The FX node an UnsupportedError is about, when it can be told: the node the exporter
    was writing, or the IR line the compiler refused (`line`)."""
    node = getattr(error, "fx_node", None)
    if node is None and exported is not None and getattr(error, "line", None) is not None:
        node = exported.nodes_by_line.get(error.line)
    return node


def op_label(target) -> str:
    """How `stats()["fallback_ops"]` names a node's op: `namespace.name`, else its callable."""
    return base_name(target) or str(getattr(target, "__name__", target))


def compile_graph(gm: torch.fx.GraphModule, opts, name: str, where: str, binding=None, depth: int = 0):
    """Compiles `gm` (a whole ATen graph, or a region of one) for the backend. Returns its
    compiled callable, or its partitioning around the nodes the compiler does not take, or
    None: it is to run eagerly as a whole (`policy.on_failure` decided so; strict raised).
    Under a `binding`, a refused node raises NotSpecializable: the caller re-traces that size."""
    exported = None
    checked = None  # the graph with its checks (index_checks.py), exported instead
    try:
        # Device asserts and masks' counts are checked whatever `check_indices` says: the
        # graph has them, and without them a wrong count would write silently.
        checked = index_checks.instrument(gm, binding, indices=opts.check_indices)
        policy.inject_fault("export")
        exported = export(gm if checked is None else checked.gm, name, binding)
        refused = refused_nodes(exported)
        if checked is not None:
            refused = {checked.original.get(n, n): why for n, why in refused.items()}
        if not refused:
            if checked is not None:
                exported, flag = index_checks.strip(exported, index_checks.returns_tuple(gm))
                return compile_exported(exported, opts, name, eager=gm.forward, checks=(flag, checked.sites))
            return compile_exported(exported, opts, name, eager=gm.forward)
    except UnsupportedError as e:
        # The exporter's refusal names the node it was writing, a late (emission-time) one
        # its IR line: that node runs eagerly alone, the rest compiles.
        node = unsupported_node(e, exported)
        if node is not None and checked is not None:
            node = checked.original.get(node, node)
        if node is None or depth > MAX_ROUNDS:
            text = exported and exported.text
            policy.on_failure(e, where, opts.strict, ir_text=text, passes=opts.passes, donate=opts.donate)
            return None
        refused = {node: str(e)}
    except FallbackError as e:  # the plugin refused or failed: eager by policy
        policy.on_failure(e, where, opts.strict)
        return None
    except NotSpecializable:
        raise  # sizes a binding cannot give: the caller re-traces with them instead
    except RAISED_AS_IS:
        raise  # the user's mesh, layout, options or dtypes: theirs to fix, never a fallback
    except Exception as e:  # noqa: BLE001 - a bug in torchtpu: loud, with a reproduction
        error = policy.as_internal(e, "export" if exported is None else "compile")
        text = exported and exported.text
        policy.on_failure(
            error, where, opts.strict, ir_text=text, passes=opts.passes, donate=opts.donate, fx_code=gm.code
        )
        return None
    if binding is not None:
        raise NotSpecializable(f"nodes the lowering refuses: {sorted(set(refused.values()))}")
    return partition_around(gm, refused, opts, name, where, depth)


def partition_around(gm: torch.fx.GraphModule, bad: dict, opts, name: str, where: str, depth: int = 0):
    """Records why the nodes `bad` (node -> reason) run eagerly (strict raises
    UnsupportedError) and returns `gm` partitioned around them."""
    # A collective of a group across processes is where the program must end: a split by
    # design (collectives.py), recorded as such, never a fallback (strict does not raise).
    splits = {n: r for n, r in bad.items() if r.startswith("collective:")}
    if splits:
        why = f"{where}: split at collectives that run through their process group: " + ", ".join(
            sorted(set(splits.values()))
        )
        _stats.record_fallback("collective", where, why, sorted({op_label(n.target) for n in splits}))
        log.info("%s", why)
    others = {n: r for n, r in bad.items() if n not in splits}
    if others:
        reason = f"{where}: ops without a lowering run eagerly: " + ", ".join(sorted(set(others.values())))
        message = f"torchtpu (strict): {reason}" if opts.strict else reason
        policy.on_failure(UnsupportedError(message, [op_label(n.target) for n in others]), where, opts.strict)
        if depth == 0:
            _stats.bump("graphs_fallback")  # the graph runs partly eagerly
    return partition_and_compile(gm, set(bad), opts, name, depth)


def partition_and_compile(gm: torch.fx.GraphModule, unsupported: set, opts, name: str, depth: int = 0):
    """Returns a callable running `gm` with supported regions compiled (`compile_graph`, one
    level deeper), the rest eager."""
    partitioner = CapabilityBasedPartitioner(gm, _Support(unsupported), allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    fused = partitioner.fuse_partitions(partitions)
    for node in list(fused.graph.nodes):
        if node.op != "call_module":
            continue
        sub = getattr(fused, node.target)
        part_name = f"{name}_{node.target}"
        compiled = compile_graph(sub, opts, part_name, f"partition {part_name}", depth=depth + 1)
        if compiled is None:
            _stats.bump("partitions_eager")
            continue
        _stats.bump("partitions_compiled")
        setattr(fused, node.target, _CompiledPartition(compiled))
    fused.recompile()
    log.info("%s: %d compiled partitions around %d eager nodes", name, len(partitions), len(unsupported))
    return fused.forward
