"""Saved convolution activations cross from the forward to the backward program channels-last.

XLA's CPU compiler runs convolutions NHWC and keeps the activations between them NHWC inside
one program (layout assignment; optimised HLO reads `dim_labels=b01f_01io->b01f`). What it
cannot choose is the layout of a program's parameters and results: those are row-major in
the logical shape. A training forward therefore transposed every saved NCHW activation to
NCHW on its way out, and the backward transposed it back to NHWC on its way in (resnet18 at
batch 16: 100 transposes, 105 MB, in the backward alone).

After AOTAutograd's partitioner has split the joint graph, this pass picks the saved values
whose layout follows a convolution: 4-D floating-point values produced by a convolution, or
by an op that keeps its input's layout (elementwise, batch norm, pooling) applied to such a
value. The forward returns each as an NHWC tensor (`aten.permute` to [N, H, W, C] before the
output, which XLA turns into a bitcast of the NHWC value it computed) and the backward takes
it NHWC and permutes it back to NCHW (a bitcast again, into the NHWC its convolutions read).
The two programs agree by construction; nothing else sees a saved value, and the eager
fallback runs the same rewritten graphs.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

aten = torch.ops.aten

TO_NHWC = [0, 2, 3, 1]
FROM_NHWC = [0, 3, 1, 2]

# Ops whose 4-D result has the layout of their 4-D inputs inside a channels-last region (the
# compiler's assign-layouts pass): batch norm, pooling and elementwise ops.
_FOLLOWERS = {
    aten.relu.default,
    aten.threshold.default,
    aten.add.Tensor,
    aten.sub.Tensor,
    aten.mul.Tensor,
    aten.div.Tensor,
    aten.clone.default,
    aten.alias.default,
    aten.detach.default,
    aten.hardtanh.default,
    aten.sigmoid.default,
    aten.tanh.default,
    aten.silu.default,
    aten.gelu.default,
    aten.leaky_relu.default,
    aten.where.self,
    aten.le.Scalar,
    aten.rsqrt.default,
    aten._native_batch_norm_legit_functional.default,
    aten._native_batch_norm_legit_no_training.default,
    aten.native_batch_norm.default,
    aten.max_pool2d_with_indices.default,
    aten.avg_pool2d.default,
    operator.getitem,
}


def _is_4d_float(node) -> bool:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return isinstance(val, torch.Tensor) and val.dim() == 4 and val.is_floating_point()


def _carries_layout(node: torch.fx.Node) -> bool:
    """A 4-D floating-point value, or a multi-result op (batch norm, pooling) picked from."""
    return _is_4d_float(node) or isinstance(node.meta.get("val"), (tuple, list))


def _convolution_layouts(graph: torch.fx.Graph) -> set:
    """The nodes whose values are laid out like a convolution's activations, in one pass in
    graph (topological) order."""
    follows: set = set()
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is aten.convolution.default:
            if not node.args[6]:  # a transposed convolution's output is left alone
                follows.add(node)
        elif node.target in _FOLLOWERS and any(a in follows for a in node.all_input_nodes if _carries_layout(a)):
            follows.add(node)
    return follows


def _contiguous_like(val: torch.Tensor, shape) -> torch.Tensor:
    mode = getattr(val, "fake_mode", None)
    if mode is None:
        return torch.empty(shape, dtype=val.dtype, device=val.device)
    with mode:
        return torch.empty(shape, dtype=val.dtype, device=val.device)


def relayout_saved_activations(fw: torch.fx.GraphModule, bw: torch.fx.GraphModule, num_fwd_outputs: int) -> list[str]:
    """Rewrites `fw` and `bw` in place so that the chosen saved values cross NHWC; returns
    their names (empty when none qualifies, and then nothing is changed)."""
    output = next(iter(fw.graph.find_nodes(op="output")))
    outs = list(output.args[0])
    bw_inputs = {n.name: n for n in bw.graph.find_nodes(op="placeholder")}
    follows = _convolution_layouts(fw.graph)
    chosen = [
        i
        for i in range(num_fwd_outputs, len(outs))
        if isinstance(outs[i], torch.fx.Node)
        and _is_4d_float(outs[i])
        and outs[i].name in bw_inputs
        and outs[i] in follows
    ]
    names = []
    for i in chosen:
        value = outs[i]
        val = value.meta["val"]
        nhwc = [val.shape[d] for d in TO_NHWC]
        with fw.graph.inserting_before(output):
            permuted = fw.graph.call_function(aten.permute.default, (value, TO_NHWC))
        # Contiguous NHWC: the program's result is row-major in that shape.
        permuted.meta["val"] = _contiguous_like(val, nhwc)
        outs[i] = permuted
        ph = bw_inputs[value.name]
        users = list(ph.users)
        with bw.graph.inserting_after(ph):
            back = bw.graph.call_function(aten.permute.default, (ph, FROM_NHWC))
        back.meta["val"] = ph.meta["val"]
        ph.meta["val"] = _contiguous_like(val, nhwc)
        for user in users:
            user.replace_input_with(ph, back)
        names.append(value.name)
    if names:
        output.args = (tuple(outs),) + tuple(output.args[1:])
        for gm in (fw, bw):
            gm.graph.lint()
            gm.recompile()
    return names
