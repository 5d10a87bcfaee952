"""The IR's text form as Python writes it (docs/ir.md): the one writer of every program the
Python side hands the compiler, from the exporter's FX graphs (`compiled/exporter.py`) to the
device's one-op and random programs (`device/`) and the in-process collectives
(`distributed/inprocess.py`). The compiler parses it (`compiler/src/ir/parser.rs`) and says
where, by line and column, when it is wrong.

A leaf: it knows the text form and the IR's dtypes (read from the compiler: `_C.ir_dtypes`),
nothing of the paths that use it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

import torch

from torchtpu import _C

# torch dtype -> the IR's name of it, for every dtype the IR has (the compiler's own list).
IR_DTYPES = {getattr(torch, attr): name for name, attr in _C.ir_dtypes()}
TORCH_DTYPES = {v: k for k, v in IR_DTYPES.items()}


def type_text(dtype: torch.dtype, shape: Iterable[int]) -> str:
    """`f32[2, 3]`: a tensor type of a dtype the IR has (KeyError for one it lacks)."""
    return f"{IR_DTYPES[dtype]}{dims_text(shape)}"


def dims_text(shape: Iterable[int]) -> str:
    """`[2, 3]`: a shape, as a type's dims and as an int-list attribute."""
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


def float_text(v: float) -> str:
    """A float literal the parser reads back to the same value (`1.0`, `1e-05`, `nan`, `-inf`)."""
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    r = repr(float(v))
    return r if ("." in r or "e" in r or "n" in r) else r + ".0"


def string_text(s: str) -> str:
    """A quoted string literal with the parser's escapes."""
    out = ['"']
    for c in s:
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{{{ord(c):x}}}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def value_text(v) -> str | None:
    """The literal of a plain attribute value (None, bool, int, float, str, a list of bools,
    ints or floats), or None where `v` is none of these."""
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return float_text(v)
    if isinstance(v, str):
        return string_text(v)
    if isinstance(v, (list, tuple)):
        if all(isinstance(x, bool) for x in v) and v:
            return "[" + ", ".join(str(int(x)) for x in v) + "]"
        if all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            return "[" + ", ".join(str(x) for x in v) + "]"
        if all(isinstance(x, (int, float)) for x in v):
            return "[" + ", ".join(float_text(float(x)) for x in v) + "]"
    return None


def mesh_text(axes: Iterable[tuple[str, int]]) -> str:
    """The graph's mesh declaration: `mesh<["dp"=2, "tp"=2]>`."""
    return "mesh<[" + ", ".join(f'"{a}"={n}' for a, n in axes) + "]>"


def sharding_text(dims: Iterable[Iterable[str]]) -> str:
    """A value's sharding after its type: `sharding<[{"dp", "tp"}, {}]>`."""
    return "sharding<[" + ", ".join("{" + ", ".join(f'"{a}"' for a in axes) + "}" for axes in dims) + "]>"


def group_attrs(size: int) -> list[tuple[str, str]]:
    """A `c10d.*` op's replica group: every one of `size` ranks."""
    return [("groups", "[" + ", ".join(str(r) for r in range(size)) + "]"), ("group_size", str(size))]


class GraphWriter:
    """One graph: `graph @name(params) -> (types) {`, the mesh declaration if any, one line per
    op, `return ...`. Values are named by the writer (`%in0`, `%v1`), so no two collide."""

    def __init__(self, name: str):
        self.name = name
        self.params: list[str] = []
        self.lines: list[str] = []
        self.mesh: str | None = None
        self._count = 0

    def param(self, ty: str) -> str:
        """A new input of type `ty`; its value's name."""
        name = f"%in{len(self.params)}"
        self.params.append(f"{name}: {ty}")
        return name

    def declare_mesh(self, text: str) -> None:
        self.mesh = text

    def op(
        self,
        op: str,
        operands: Sequence[str],
        attrs: Iterable[tuple[str, str]] = (),
        ty: str | Sequence[str] = "",
        *,
        annotation: str = "",
        comment: str = "",
    ) -> str:
        """Writes `%vN = op(operands) {k = v, ...} : ty [annotation]  // comment`, the attributes
        in the order given (each value already a literal), and returns `%vN`. With a list of
        types it has that many results (`%vN:k = ... : (t1, t2)`, read as `result(%vN, i)`;
        an empty list: no results, no name)."""
        self._count += 1
        name = f"%v{self._count}"
        attrs = list(attrs)
        attr_part = " {" + ", ".join(f"{k} = {v}" for k, v in attrs) + "}" if attrs else ""
        if isinstance(ty, str):
            lhs, type_part = f"{name} = ", ty
        else:
            lhs = f"{name}:{len(ty)} = " if ty else ""
            type_part = "(" + ", ".join(ty) + ")"
        tail = (f" {annotation}" if annotation else "") + (f"  // {comment}" if comment else "")
        self.lines.append(f"  {lhs}{op}({', '.join(operands)}){attr_part} : {type_part}{tail}")
        return name

    @staticmethod
    def result(name: str, i: int) -> str:
        """The i-th result of a multi-result op."""
        return f"{name}#{i}"

    def first_op_line(self) -> int:
        """The 1-based line of the first op (the parser's errors name lines)."""
        return 2 + (self.mesh is not None)

    def text(self, outputs: Sequence[str], types: Sequence[str]) -> str:
        header = [f"  {self.mesh}"] if self.mesh is not None else []
        ret = f"  return {', '.join(outputs)}" if outputs else "  return"
        return (
            f"graph @{self.name}({', '.join(self.params)}) -> ({', '.join(types)}) {{\n"
            + "".join(line + "\n" for line in header + self.lines)
            + ret
            + "\n}\n"
        )


# A tensor type in a graph's header: `f32[2, 3]`, `i64[]`.
_TYPE = re.compile(r"\b(" + "|".join(sorted(TORCH_DTYPES, key=len, reverse=True)) + r")\[([^\]]*)\]")


def signature(text: str) -> tuple[list, list]:
    """The input and output types of the graph `text`, from its header line: (IR dtype name,
    dims) each, a dim an int or the name of a symbolic size."""
    header = text.split("\n", 1)[0]
    ins, _, outs = header.rpartition(") -> (")

    def types(s: str) -> list:
        return [(d, [int(x) if x.isdigit() else x for x in dims.split(", ") if x]) for d, dims in _TYPE.findall(s)]

    return types(ins), types(outs)


def without_names(text: str) -> str:
    """The graph `text` without its name and comments: two writers' texts of one program
    compare equal."""
    return re.sub(r"  // [^\n]*", "", re.sub(r"^graph @[^(]*", "graph @g", text))
