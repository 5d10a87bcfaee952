"""The Python package's layering (docs/architecture.md, "The eager device's modules"): no module
of `torchtpu` (every subpackage's included: `device`, `distributed`) imports another that imports
it back, at module level or inside a function, and the device's leaves import no other device
module."""

from __future__ import annotations

import ast
import pathlib
import re

import torch

import torchtpu.device

PACKAGE = pathlib.Path(torchtpu.device.__file__).parent
ROOT = PACKAGE.parent
LEAVES = {"_state", "_frames", "_guard", "_trace", "_attention", "_optim", "_schema"}
ALLOWED_BELOW = {"_buffers": {"_guard"}}


def _imports() -> dict[str, set[str]]:
    """Per module of the package, the package's modules it imports anywhere in its text."""
    modules = {p.stem: p for p in PACKAGE.glob("*.py")}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == "torchtpu.device":
                    edges[name] |= {a.name for a in node.names if a.name in modules}
                elif node.module.startswith("torchtpu.device."):
                    edges[name].add(node.module.split(".")[2])
            elif isinstance(node, ast.Import):
                edges[name] |= {a.name.split(".")[2] for a in node.names if a.name.startswith("torchtpu.device.")}
        edges[name].discard(name)
    return edges


# The native extensions: importing one runs no module of the package.
_EXTENSIONS = {"_C", "_device_shim"}


def _package_imports() -> dict[str, set[str]]:
    """Per module of `torchtpu`, every subpackage's included (named by dotted path below
    `torchtpu`: `device._defer`, `distributed.inprocess`; a package by its own name, the root
    as ""), the package's modules it imports anywhere in its text, inside functions too."""
    modules: dict[str, pathlib.Path] = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torchtpu":
                base = node.module.removeprefix("torchtpu").lstrip(".")
                for alias in node.names:
                    if not base and alias.name in _EXTENSIONS:
                        continue
                    full = f"{base}.{alias.name}" if base else alias.name
                    # A submodule if there is one of that name, else a name from `base` itself.
                    edges[name].add(full if full in modules else base)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "torchtpu":
                        rest = alias.name.removeprefix("torchtpu").lstrip(".")
                        if rest in modules:
                            edges[name].add(rest)
        edges[name].discard(name)
    return edges


def _find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `edges` (depth-first search for a back edge), or None."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n) :] + [n]
            if n not in state and (found := visit(n)):
                return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_the_device_package_has_no_import_cycle():
    cycle = _find_cycle(_imports())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_package_has_no_import_cycle():
    edges = _package_imports()
    seen = {
        "",
        "compiled",
        "compiled.executor",
        "options",
        "device",
        "device._defer",
        "distributed",
        "distributed.inprocess",
    }
    assert seen <= set(edges)  # the walk sees every subpackage
    cycle = _find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_leaves_import_no_device_module():
    edges = _imports()
    for leaf in LEAVES:
        assert edges[leaf] == set(), (leaf, edges[leaf])
    for module, allowed in ALLOWED_BELOW.items():
        assert edges[module] <= allowed, (module, edges[module])


def _string_parts(tree: ast.AST):
    """Every string literal of a module (f-strings' literal parts included), docstrings left out."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


# A graph's header (`graph @name(`) or an op line's left-hand side (`%v1 = `, `%v1:2 = `).
_IR_TEXT = re.compile(r"^\s*graph @|%\w+(:\d+)? = ")


def test_the_ir_text_has_one_writer():
    """Every program Python hands the compiler is written by `torchtpu/ir_text.py`; no other
    module writes a graph header or an op line of its own."""
    writers = [
        f"{path.relative_to(ROOT.parent)}:{line}"
        for path in sorted(ROOT.rglob("*.py"))
        if path.name != "ir_text.py"
        for line, text in _string_parts(ast.parse(path.read_text()))
        if _IR_TEXT.search(text)
    ]
    assert writers == [], f"IR text written outside ir_text.py: {writers}"


def test_the_writer_writes_what_the_compiler_parses():
    from torchtpu import canonical_ir
    from torchtpu.ir_text import GraphWriter, group_attrs, mesh_text, sharding_text, string_text, type_text

    w = GraphWriter("g")
    x = w.param(type_text(torch.float32, [4, 2]))
    w.declare_mesh(mesh_text([("dp", 2)]))
    s = w.op("tpu.sharding_constraint", [x], (), "f32[4, 2]", annotation=sharding_text([("dp",), ()]), comment="c")
    g = w.op("aten.gelu.default", [s], [("approximate", string_text("tanh"))], "f32[4, 2]")
    r = w.op("c10d.all_reduce", [g], [*group_attrs(1), ("reduce_op", string_text("sum"))], "f32[4, 2]")
    m = w.op("aten.max.dim", [r], [("dim", "1")], ["f32[4]", "i64[4]"])
    text = w.text([w.result(m, 0), w.result(m, 1)], ["f32[4]", "i64[4]"])
    assert w.first_op_line() == 3  # header, mesh, then the ops
    printed = canonical_ir(text)
    for part in ("aten.gelu.default", "c10d.all_reduce", "aten.max.dim", 'sharding<[{"dp"}, {}]>'):
        assert part in printed, (part, printed)


def test_the_op_classification_has_one_owner():
    """An op's kind (view, functional, in-place, out=, mutating) is `torchtpu_eager::schema`'s,
    which the shim reads through the native API and Python through `device/_schema.py`: no other
    module reads the schema's write annotations to decide it again."""
    readers = [
        f"{path.relative_to(ROOT.parent)}:{node.lineno}"
        for path in sorted(ROOT.rglob("*.py"))
        if path != PACKAGE / "_schema.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr in ("is_write", "before_set")
    ]
    assert readers == [], f"schema write annotations read outside device/_schema.py: {readers}"


def test_the_classification_reads_pytorchs_schemas_as_the_rules_say():
    from torchtpu.device import _dispatch, _schema

    aten = torch.ops.aten
    kinds = {
        aten.transpose.int: _schema.VIEW,
        aten.split.Tensor: _schema.VIEW,  # a list of aliases
        aten.add.Tensor: _schema.FUNCTIONAL,
        aten.add_.Tensor: _schema.INPLACE,
        aten.add.out: _schema.OUT,
        aten.max.dim_max: _schema.OUT,
        aten._amp_foreach_non_finite_check_and_unscale_.default: _schema.MUTATING,
    }
    assert {op: _dispatch.info_of(op).kind for op in kinds} == kinds
    assert _schema.classify(aten.max.dim_max._schema)[1:] == ([3, 4], [3, 4])
    assert _schema.classify(aten.add_.Tensor._schema)[1:] == ([0], [0])
