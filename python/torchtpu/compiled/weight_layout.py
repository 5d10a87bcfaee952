"""Convolution weights given to XLA in the layout its CPU convolutions run in.

XLA's CPU compiler runs every convolution as NHWC activations and HWIO weights. A weight
arrives as an OIHW parameter, so the program relays it on every call: for resnet18 at batch 1
that is 45.7 MB transposed (and as much copied) per call, most of the gap to eager. In an
inference graph, a placeholder used only as the weight of non-transposed convolutions is
therefore declared HWIO, with an `aten.permute` back to OIHW in front of its convolutions
(which XLA folds into the parameter's layout); the executor feeds it the weight permuted once
per tensor version and keeps that copy (`RelaidInputs`), so an in-place update of the weight
is seen at the next call.
"""

from __future__ import annotations

import torch
import torch.fx

from torchtpu import _C

aten = torch.ops.aten

# OIHW -> HWIO, and its inverse for the permute in the graph.
TO_HWIO = (2, 3, 1, 0)
FROM_HWIO = (3, 2, 0, 1)


def _conv_weight_only(node: torch.fx.Node) -> bool:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dim() != 4 or not node.users:
        return False
    for user in node.users:
        if user.target is not aten.convolution.default or len(user.args) < 7:
            return False
        if user.args[1] is not node or user.args[0] is node or user.args[6]:  # weight, not transposed
            return False
        # A convolution the lowering runs as a matmul reads the OIHW weight as it is.
        x = user.args[0].meta.get("val") if isinstance(user.args[0], torch.fx.Node) else None
        groups = user.args[8] if len(user.args) > 8 else 1
        dims = [list(x.shape[2:]), list(val.shape[2:])] if isinstance(x, torch.Tensor) else None
        if dims and all(isinstance(d, int) for d in dims[0] + dims[1] + [groups]):
            if _C.convolution_runs_as_matmul(*dims, groups):
                return False
    return True


def relayout_conv_weights(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, dict]:
    """A copy of `gm` whose convolution-weight placeholders are HWIO, and {positional input
    index: permutation to apply to that input}; `gm` itself is unchanged (it stays the graph
    that runs eagerly on the original inputs). Returns `gm` and {} when nothing qualifies."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    chosen = [i for i, n in enumerate(placeholders) if _conv_weight_only(n)]
    if not chosen:
        return gm, {}
    graph = torch.fx.Graph()
    env: dict = {}
    out = graph.graph_copy(gm.graph, env)
    graph.output(out)
    copied = [env[n] for n in placeholders]
    for i in chosen:
        ph = copied[i]
        original = ph.meta["val"]
        users = list(ph.users)
        with graph.inserting_after(ph):
            back = graph.call_function(aten.permute.default, (ph, list(FROM_HWIO)))
        back.meta["val"] = original
        for user in users:
            user.replace_input_with(ph, back)
        ph.meta["val"] = original.permute(*TO_HWIO)
    graph.lint()
    return torch.fx.GraphModule(gm, graph), {i: TO_HWIO for i in chosen}


class RelaidInputs:
    """The permuted copies of relaid inputs, one per input position, each kept while the
    caller passes the same tensor at the same version."""

    __slots__ = ("perms", "_kept")

    def __init__(self, perms: dict):
        self.perms = perms  # positional input index -> permutation
        self._kept: dict = {}  # index -> (tensor, version, permuted copy)

    def apply(self, args) -> list:
        args = list(args)
        for index, perm in self.perms.items():
            t = args[index]
            kept = self._kept.get(index)
            if kept is None or kept[0] is not t or kept[1] != t._version:
                with torch.no_grad():
                    copy = t.detach().permute(*perm).contiguous()
                kept = self._kept[index] = (t, t._version, copy)
            args[index] = kept[2]
        return args
