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

from torchtpu import _C, _stats, policy
from torchtpu._log import log, warn_once  # noqa: F401 - warn_once re-exported for callers
from torchtpu.errors import FallbackError, InternalError, UnsupportedError  # noqa: F401 - FallbackError re-exported
from torchtpu.executor import compile_exported
from torchtpu.exporter import export

# Partitioning again around nodes found only while compiling a region stops after this many
# rounds (each round removes at least one node, so this bounds pathological graphs only).
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


def _compile_region(sub: torch.fx.GraphModule, opts, name: str, depth: int):
    """A compiled callable for region `sub`, or its own partitioning around the nodes found
    unsupported in it, or None (it runs eagerly: `policy.on_failure` decided so)."""
    exported = None
    try:
        exported = export(sub, name)
        refused = set(refused_nodes(exported))
        if not refused:
            return compile_exported(exported, opts, name, eager=sub.forward)
    except UnsupportedError as e:
        node = unsupported_node(e, exported)
        if node is None or depth >= MAX_ROUNDS:
            policy.on_failure(e, f"partition {name}", opts.strict)
            return None
        refused = {node}
    except FallbackError as e:
        policy.on_failure(e, f"partition {name}", opts.strict)
        return None
    except Exception as e:  # noqa: BLE001 - a bug in torchtpu: loud, with a reproduction
        error = policy.as_internal(e, "export" if exported is None else "compile")
        policy.on_failure(error, f"partition {name}", opts.strict, ir_text=exported and exported.text, passes=opts.passes, donate=opts.donate, fx_code=sub.code)
        return None
    ops = sorted({str(getattr(n.target, "__name__", n.target)) for n in refused})
    message = f"partition {name}: nodes the lowering refuses run eagerly: {ops}"
    policy.on_failure(UnsupportedError(f"torchtpu (strict): {message}" if opts.strict else message, ops), f"partition {name}", opts.strict)
    return partition_and_compile(sub, refused, opts, name, depth + 1)


def partition_and_compile(gm: torch.fx.GraphModule, unsupported: set, opts, name: str, depth: int = 0):
    """Returns a callable running `gm` with supported regions compiled, the rest eager."""
    partitioner = CapabilityBasedPartitioner(gm, _Support(unsupported), allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    fused = partitioner.fuse_partitions(partitions)
    for node in list(fused.graph.nodes):
        if node.op != "call_module":
            continue
        sub = getattr(fused, node.target)
        part_name = f"{name}_{node.target}"
        compiled = _compile_region(sub, opts, part_name, depth)
        if compiled is None:
            _stats.bump("partitions_eager")
            continue
        _stats.bump("partitions_compiled")
        setattr(fused, node.target, _CompiledPartition(compiled))
    fused.recompile()
    log.info("%s: %d compiled partitions around %d eager nodes", name, len(partitions), len(unsupported))
    return fused.forward
