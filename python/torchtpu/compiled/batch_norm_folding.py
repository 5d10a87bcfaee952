"""Inference batch norms folded into the convolutions before them, once per weight version.

In an inference graph, `_native_batch_norm_legit_no_training(convolution(x, w, b), gamma,
beta, mean, var, eps)` is an affine map per output channel: with s = gamma / sqrt(var + eps)
it equals `convolution(x, w * s, (b - mean) * s + beta)`. XLA CPU cannot fuse the batch norm
into its convolution call, so unfolded it is one more pass over every activation. The folded
weight and bias depend on parameters and buffers only: the graph's weight placeholder takes
the folded weight, and the bias placeholder (or, without a bias, the running mean's, which
nothing else reads) the folded bias. `FoldedInputs` computes both from the caller's tensors
and keeps them while every tensor involved is the same object at the same version, so an
in-place update of a weight or a running statistic is seen at the next call (the way
`weight_layout.RelaidInputs` keeps relaid weights).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
import torch.fx

aten = torch.ops.aten


@dataclass(frozen=True)
class Fold:
    """Where one folded convolution's tensors are among the graph's positional inputs."""

    weight: int
    bias: int | None  # the convolution's own bias, if any
    gamma: int | None
    beta: int | None
    mean: int
    var: int
    eps: float
    bias_slot: int  # the input that carries the folded bias


def _only_user(node: torch.fx.Node, user: torch.fx.Node) -> bool:
    return list(node.users) == [user]


def fold_batch_norms(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, list[Fold]]:
    """A copy of `gm` with every foldable convolution + inference batch norm pair replaced by
    one convolution, and the folds to apply to its inputs; `gm` and [] when none qualifies."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    index = {n: i for i, n in enumerate(placeholders)}

    def ph(node) -> int | None:
        return index.get(node) if isinstance(node, torch.fx.Node) else None

    pairs = []
    for bn in gm.graph.nodes:
        if bn.target is not aten._native_batch_norm_legit_no_training.default:
            continue
        conv, gamma, beta, mean, var = bn.args[:5]
        eps = bn.args[6] if len(bn.args) > 6 else bn.kwargs.get("eps", 1e-5)
        if not (isinstance(conv, torch.fx.Node) and conv.target is aten.convolution.default and _only_user(conv, bn)):
            continue
        if len(conv.args) < 9 or conv.args[6]:  # transposed
            continue
        w, b = conv.args[1], conv.args[2]
        slots = {"weight": ph(w), "mean": ph(mean), "var": ph(var)}
        if None in slots.values() or not _only_user(w, conv):
            continue
        if b is not None and (ph(b) is None or not _only_user(b, conv)):
            continue
        if (gamma is not None and ph(gamma) is None) or (beta is not None and ph(beta) is None):
            continue
        outs = list(bn.users)
        if not all(u.target is operator.getitem for u in outs) or any(u.args[1] != 0 and u.users for u in outs):
            continue
        dtypes = {n.meta["val"].dtype for n in (w, b, gamma, beta, mean, var) if isinstance(n, torch.fx.Node)}
        if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
            continue  # mixed precision: left to the graph, which casts as eager does
        bias_slot = ph(b) if b is not None else slots["mean"]
        if b is None and not _only_user(mean, bn):
            continue  # the running mean is read elsewhere: it cannot carry the bias
        pairs.append(
            (
                conv,
                bn,
                Fold(slots["weight"], ph(b), ph(gamma), ph(beta), slots["mean"], slots["var"], float(eps), bias_slot),
            )
        )
    # Each fold rewrites only inputs that its own convolution or batch norm alone reads, so
    # no two folds touch the same input.
    if not pairs:
        return gm, []
    graph = torch.fx.Graph()
    env: dict = {}
    out = graph.graph_copy(gm.graph, env)
    graph.output(out)
    for conv, bn, fold in pairs:
        c, n = env[conv], env[bn]
        bias = env[placeholders[fold.bias_slot]]
        args = list(c.args)
        args[2] = bias
        with graph.inserting_after(n):
            folded = graph.call_function(aten.convolution.default, tuple(args))
        folded.meta["val"] = c.meta["val"]
        for user in list(n.users):
            if user.args[1] == 0:
                user.replace_all_uses_with(folded)
            graph.erase_node(user)
        graph.erase_node(n)
        graph.erase_node(c)
    graph.eliminate_dead_code()
    graph.lint()
    return torch.fx.GraphModule(gm, graph), [fold for _, _, fold in pairs]


class FoldedInputs:
    """The folded weights and biases, recomputed only when a tensor they are made of is
    another object or at another version."""

    __slots__ = ("folds", "_kept")

    def __init__(self, folds: list[Fold]):
        self.folds = folds
        self._kept: dict = {}  # fold index -> (sources, versions, folded weight, folded bias)

    def apply(self, args) -> list:
        args = list(args)
        originals = list(args)
        for k, fold in enumerate(self.folds):
            slots = (fold.weight, fold.bias, fold.gamma, fold.beta, fold.mean, fold.var)
            sources = tuple(originals[i] if i is not None else None for i in slots)
            versions = tuple(t._version if t is not None else None for t in sources)
            kept = self._kept.get(k)
            if kept is None or any(a is not b for a, b in zip(kept[0], sources)) or kept[1] != versions:
                kept = self._kept[k] = (sources, versions, *self._fold(fold, *sources))
            args[fold.weight], args[fold.bias_slot] = kept[2], kept[3]
        return args

    @staticmethod
    def _fold(fold: Fold, w, b, gamma, beta, mean, var):
        with torch.no_grad():
            # In f32 at least: the folded tensors are rounded once, to the weight's dtype.
            acc = torch.promote_types(w.dtype, torch.float32)
            scale = torch.rsqrt(var.to(acc) + fold.eps)
            if gamma is not None:
                scale = scale * gamma.to(acc)
            shift = -mean.to(acc) if b is None else b.to(acc) - mean.to(acc)
            shift = shift * scale
            if beta is not None:
                shift = shift + beta.to(acc)
            weight = w.to(acc) * scale.reshape(-1, *([1] * (w.dim() - 1)))
            return weight.to(w.dtype).contiguous(), shift.to(w.dtype)
