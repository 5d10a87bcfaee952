"""Decompositions of the functional `aten._foreach_*` ops into one op per list entry.

Optimizers (AdamW, Adam, SGD with momentum: their default `foreach` path) and
`clip_grad_norm_` call the multi-tensor `_foreach_*` ops; AOTAutograd functionalises the
in-place forms (`_foreach_mul_`) into the functional ones listed here. Each becomes the
per-tensor op on every entry, which the rest of the decomposition table and the lowering
take as usual, so a compiled training step compiles whole. XLA fuses the per-entry loops
itself, so nothing is lost against a multi-tensor kernel.

The table is built from the schemas PyTorch registers, so a `_foreach_*` op this module has
no rule for stays in the graph and is reported as unsupported (never guessed).
"""

from __future__ import annotations

import torch

aten = torch.ops.aten


def _number_or_tensor(op_tensor, op_number):
    def apply(a, b, **kw):
        return (op_number if isinstance(b, (int, float, bool)) else op_tensor)(a, b, **kw)

    return apply


def _add(a, b, alpha=1):
    return torch.add(a, b, alpha=alpha)


def _sub(a, b, alpha=1):
    return torch.sub(a, b, alpha=alpha)


def _addc(op):
    def apply(a, t1, t2, value=1):
        # `value` may be a 0-d tensor (the `.Tensor` overloads give one entry per list item).
        return a + value * op(t1, t2)

    return apply


def _norm(t, ord=2, dtype=None):
    return torch.linalg.vector_norm(t, ord, dtype=dtype)


def _powsum(t, ord=2, dtype=None):
    a = t.abs() if dtype is None else t.abs().to(dtype)
    return (a**ord).sum()


def _copy(self, src, non_blocking=False):
    return aten.copy.default(self, src)


# The per-entry function of each `_foreach_<name>`; unary ops not listed map to torch.<name>.
_PER_ENTRY = {
    "add": _add,
    "sub": _sub,
    "mul": torch.mul,
    "div": torch.div,
    "pow": torch.pow,
    "maximum": _number_or_tensor(torch.maximum, torch.clamp_min),
    "minimum": _number_or_tensor(torch.minimum, torch.clamp_max),
    "clamp_min": torch.clamp_min,
    "clamp_max": torch.clamp_max,
    "addcmul": _addc(torch.mul),
    "addcdiv": _addc(torch.div),
    "lerp": torch.lerp,
    "norm": _norm,
    "powsum": _powsum,
    "max": torch.amax,
    "mm": torch.mm,
    "copy": _copy,
    "clone": lambda t, memory_format=None: torch.clone(t),
    "zero": torch.zeros_like,
}
_UNARY = {
    "abs",
    "acos",
    "asin",
    "atan",
    "ceil",
    "cos",
    "cosh",
    "erf",
    "erfc",
    "exp",
    "expm1",
    "floor",
    "frac",
    "lgamma",
    "log",
    "log10",
    "log1p",
    "log2",
    "neg",
    "reciprocal",
    "round",
    "rsqrt",
    "sigmoid",
    "sign",
    "sin",
    "sinh",
    "sqrt",
    "tan",
    "tanh",
    "trunc",
}


def _per_entry(name: str):
    if name in _PER_ENTRY:
        return _PER_ENTRY[name]
    if name in _UNARY:
        return getattr(torch, name)
    return None


def _decomposition(schema, fn):
    """Calls `fn` once per list entry: list arguments (tensors or numbers) are indexed, a
    `scalars` tensor (one value per entry) is indexed, everything else is passed as is."""
    params = list(schema.arguments)

    def decompose(*args, **kwargs):
        bound = []
        for i, p in enumerate(params):
            if i < len(args):
                bound.append(args[i])
            elif p.name in kwargs:
                bound.append(kwargs[p.name])
            else:
                bound.append(p.default_value)
        lists = [i for i, p in enumerate(params) if str(p.type).startswith("List[")]
        n = len(bound[lists[0]])
        per_item_tensor = [i for i, p in enumerate(params) if p.name == "scalars" and str(p.type) == "Tensor"]
        out = []
        for k in range(n):
            call = [v[k] if i in lists or i in per_item_tensor else v for i, v in enumerate(bound)]
            # Trailing keyword parameters (alpha, value) keep their names.
            positional = [v for v, p in zip(call, params) if not p.kwarg_only]
            named = {p.name: v for v, p in zip(call, params) if p.kwarg_only}
            out.append(fn(*positional, **named))
        return out

    return decompose


def foreach_decompositions() -> dict:
    """{OpOverload: decomposition} for every functional `_foreach_*` overload with a rule."""
    table = {}
    for schema in torch._C._jit_get_all_schemas():
        name = schema.name
        if not name.startswith("aten::_foreach_") or name.endswith("_") or "out" in schema.overload_name:
            continue
        base = name[len("aten::_foreach_") :]
        fn = _per_entry(base)
        if fn is None:
            continue
        packet = getattr(aten, name[len("aten::") :])
        overload = getattr(packet, schema.overload_name or "default")
        table[overload] = _decomposition(schema, fn)
    return table
