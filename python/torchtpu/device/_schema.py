"""An op's kind from its schema: `torchtpu_eager::schema`'s classification (`_C.eager_classify`),
the one the dispatcher shim reads too. The device modules ask here rather than reading alias
annotations themselves (`structure/test_layers.py` checks it)."""

from __future__ import annotations

from torchtpu import _C

VIEW, FUNCTIONAL, INPLACE, OUT, MUTATING = "view", "functional", "inplace", "out", "mutating"


def _param(a) -> tuple:
    """A schema argument or return as `_C.eager_classify` reads it: (aliased, alias set,
    writes, keyword-only)."""
    alias = a.alias_info
    if alias is None:
        return (False, "", False, a.kwarg_only)
    return (True, "|".join(sorted(alias.before_set)), alias.is_write, a.kwarg_only)


def classify(schema) -> tuple[str, list[int], list[int | None]]:
    """(kind, the arguments it writes, per return the argument it is or None). An in-place or
    out= kind is the schema's: the op runs as such only where it has a functional form
    (`_dispatch.OpInfo`)."""
    return _C.eager_classify([_param(a) for a in schema.arguments], [_param(r) for r in schema.returns])


def writes(schema) -> bool:
    return bool(classify(schema)[1])
