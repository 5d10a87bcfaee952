"""Eager fallback inside a graph: the nodes the compiler cannot take are partitioned out and
run eagerly; every maximal supported region is compiled on its own. (Dynamo graph breaks are
the first layer, handled by Dynamo; a failed compile runs the whole ATen graph eagerly, the
third, in backend.py.)"""

from __future__ import annotations

import operator

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from torchtpu import _stats
from torchtpu._log import log, warn_once  # noqa: F401 - warn_once re-exported for callers
from torchtpu.errors import FallbackError  # noqa: F401 - re-exported: torchtpu.fallback.FallbackError
from torchtpu.executor import compile_exported
from torchtpu.exporter import Unsupported, export


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


def partition_and_compile(gm: torch.fx.GraphModule, unsupported: set, opts, name: str):
    """Returns a callable running `gm` with supported regions compiled, the rest eager."""
    partitioner = CapabilityBasedPartitioner(gm, _Support(unsupported), allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    fused = partitioner.fuse_partitions(partitions)
    for node in list(fused.graph.nodes):
        if node.op != "call_module":
            continue
        sub = getattr(fused, node.target)
        part_name = f"{name}_{node.target}"
        try:
            compiled = compile_exported(export(sub, part_name), opts, part_name)
        except (Unsupported, RuntimeError, ValueError) as e:
            _stats.bump("partitions_eager")
            _stats.record_fallback(f"partition {part_name}: {e}", getattr(e, "ops", []) or ["<compile failure>"])
            warn_once(part_name, f"torchtpu: running partition {part_name} eagerly: {e}")
            continue
        _stats.bump("partitions_compiled")
        setattr(fused, node.target, _CompiledPartition(compiled))
    fused.recompile()
    log.info("%s: %d compiled partitions around %d eager nodes", name, len(partitions), len(unsupported))
    return fused.forward
