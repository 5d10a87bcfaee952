"""Concrete sizes for a graph with symbolic shapes, without re-tracing it.

A graph Dynamo captured with dynamic shapes holds sizes as symbols (`s77`) and size
expressions (`2*s53`). The compiler takes static shapes, so each new input signature gets
its own program. Re-tracing the ATen graph with `make_fx` for every signature costs ~0.1-0.3 s
on a small decoder (per generated token under a dynamic KV cache); instead, a `Binding` reads
every symbol's value off one call's inputs and the exporter evaluates each node's symbolic
shape under it. The result is the graph a re-trace would give, node for node (tested).

Whatever cannot be evaluated this way (an unbacked, data-dependent size; a placeholder
whose size expression disagrees with the input) raises `NotSpecializable`, and the caller
re-traces instead.
"""

from __future__ import annotations

import torch

_SYM = (torch.SymInt, torch.SymFloat, torch.SymBool)


class NotSpecializable(Exception):
    """The graph's sizes cannot be read off the inputs; re-trace instead."""


def _expr(v):
    return v.node.expr


class Binding:
    """The value of every size symbol of `gm` for one call's `args`."""

    def __init__(self, gm: torch.fx.GraphModule, args):
        import sympy

        self._sympy = sympy
        self.values: dict = {}
        self._memo: dict = {}
        checks = []
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(args):
            raise NotSpecializable(f"{len(placeholders)} placeholders, {len(args)} inputs")
        for node, arg in zip(placeholders, args):
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor):
                if not isinstance(arg, torch.Tensor) or arg.dim() != val.dim():
                    raise NotSpecializable(f"input {node.name} is not a rank-{val.dim()} tensor")
                pairs = list(zip(val.shape, arg.shape))
            elif isinstance(val, _SYM):
                pairs = [(val, arg)]
            else:
                continue
            for sym, actual in pairs:
                if not isinstance(sym, _SYM):
                    continue
                e = _expr(sym)
                if isinstance(e, sympy.Symbol) and e not in self.values:
                    self.values[e] = sympy.sympify(actual)
                else:
                    checks.append((sym, actual))
        for sym, actual in checks:
            if self.value(sym) != actual:
                raise NotSpecializable(f"size {_expr(sym)} is {self.value(sym)} by the other inputs, {actual} here")

    def value(self, v):
        """A Python number for a SymInt/SymFloat/SymBool (or a number); lists elementwise."""
        if isinstance(v, (list, tuple)):
            return type(v)(self.value(x) for x in v)
        if not isinstance(v, _SYM):
            return v
        e = _expr(v)
        memo_key = (type(v), e)  # the Python type of the value depends on the Sym kind
        hit = self._memo.get(memo_key)
        if hit is None:
            r = self._sympy.sympify(e.xreplace(self.values))
            if r is self._sympy.true or r is self._sympy.false:
                hit = bool(r)
            elif not r.is_number:
                raise NotSpecializable(f"size {e} depends on symbols no input gives ({r.free_symbols})")
            elif isinstance(v, torch.SymInt):
                hit = int(r)
            elif isinstance(v, torch.SymBool):
                hit = bool(r)
            else:
                hit = float(r)
            self._memo[memo_key] = hit
        return hit

    def shape(self, t: torch.Tensor) -> tuple:
        return tuple(self.value(d) for d in t.shape)

    def stride(self, t: torch.Tensor) -> tuple:
        return tuple(self.value(s) for s in t.stride())


def is_size_node(node: torch.fx.Node) -> bool:
    """A node computing a size (SymInt arithmetic, `sym_size`) or asserting on one: under a
    binding it is a number, not a program op."""
    val = node.meta.get("val")
    return isinstance(val, (*_SYM, int, float, bool)) or node.target is torch.ops.aten._assert_scalar.default


def has_unbacked(gm: torch.fx.GraphModule) -> bool:
    """Whether the graph creates data-dependent sizes (`nonzero`, `.item()`), which no input
    shape gives."""
    for node in gm.graph.nodes:
        if node.meta.get("unbacked_bindings"):
            return True
    return False
