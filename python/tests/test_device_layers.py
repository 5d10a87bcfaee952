"""The eager device package's layering (docs/architecture.md, "The eager device's modules"): no
module of `torchtpu.device` imports another that imports it back, at module level or inside a
function, and the leaves import no other device module."""

from __future__ import annotations

import ast
import pathlib

import torchtpu.device

PACKAGE = pathlib.Path(torchtpu.device.__file__).parent
LEAVES = {"_state", "_frames", "_guard", "_trace", "_attention", "_optim"}
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


def test_the_device_package_has_no_import_cycle():
    edges = _imports()
    # Depth-first search for a back edge; the cycle is named if there is one.
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                cycle = path[path.index(n):] + [n]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        path.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)


def test_leaves_import_no_device_module():
    edges = _imports()
    for leaf in LEAVES:
        assert edges[leaf] == set(), (leaf, edges[leaf])
    for module, allowed in ALLOWED_BELOW.items():
        assert edges[module] <= allowed, (module, edges[module])
