"""PyTorch's functional collectives (`_c10d_functional.*`, what `torch.distributed.
_functional_collectives`, DTensor and DDP's compiled paths put in a graph) in compiled graphs.

- A collective of a group whose ranks are threads of this process on distinct tpu devices
  (the in-process transport of `tpu_dist`, `torchtpu.distributed.spawn`) becomes a StableHLO
  collective inside the compiled program: the exporter writes it as the compiler's `c10d.*`
  op, the graph compiles as one replicated program over the ranks' devices, and each rank's
  call meets the others' at the group's hub, which runs the program once for all
  (`distributed.inprocess.ReplicatedGraph`). `wait_tensor` is then nothing: the program's outputs are complete.
- Any other group (ranks in other processes, on the CPU plugin's host transport) cannot run
  inside one program: the graph is split at the collective, which runs eagerly through its
  process group, the regions around it compiled. `torchtpu.stats()["fallback_reasons"]` and
  `torchtpu.explain` record it, as kind "collective".
"""

from __future__ import annotations

import torch

from torchtpu.op_names import base_name

# The functional collectives a graph may hold, by base name; wait_tensor completes one.
FUNCTIONAL = (
    "_c10d_functional.all_reduce",
    "_c10d_functional.all_gather_into_tensor",
    "_c10d_functional.reduce_scatter_tensor",
    "_c10d_functional.all_to_all_single",
    "_c10d_functional.broadcast",
)
WAIT = "_c10d_functional.wait_tensor"


class Group:
    """An in-process group as a compiled program sees it: its hub's transport, this rank."""

    __slots__ = ("transport", "name")

    def __init__(self, transport, name: str):
        self.transport, self.name = transport, name

    @property
    def size(self) -> int:
        return self.transport.size


def _group_name(node) -> str:
    arg = node.args[-1] if node.args else node.kwargs.get("group_name")
    return arg if isinstance(arg, str) else str(arg)


def in_process_group(group_name: str) -> Group | None:
    """The group named `group_name` if its tpu backend is tpu_dist on the in-process
    transport, else None."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return None
    try:
        pg = dist.distributed_c10d._resolve_process_group(group_name)
        backend = pg._get_backend(torch.device("tpu"))
    except Exception:  # no such group, or no tpu backend in it
        return None
    transport = getattr(backend, "transport", None)
    if getattr(transport, "name", None) != "in-process":
        return None
    return Group(transport, group_name)


def split_reason(node) -> str | None:
    """Why a functional collective node cannot be inside the compiled program (the graph is
    split there), or None where it can."""
    base = base_name(node.target)
    if base == WAIT:
        src = node.args[0] if node.args else None
        if isinstance(src, torch.fx.Node) and base_name(src.target) in FUNCTIONAL:
            return split_reason(src)
        # A collective started outside this graph (an input still in flight): the wait must
        # really wait, so it runs eagerly; inside the program it would read the old values.
        return f"collective: {WAIT} of a collective started outside the graph waits through its process group"
    group = in_process_group(_group_name(node))
    if group is None:
        return (
            f"collective: {base} over group {_group_name(node)!r}, whose ranks are other processes, runs through its "
            "process group (tpu_dist); the graph is split at it"
        )
    if base == "_c10d_functional.all_to_all_single":
        outs, ins = node.args[1], node.args[2]
        if len(set(outs)) > 1 or len(set(ins)) > 1:
            return f"collective: {base} with uneven splits runs through its process group; the graph is split at it"
    return None
