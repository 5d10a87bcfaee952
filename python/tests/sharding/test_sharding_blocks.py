"""Which block each device reads and writes, over every small shape (issue 26, item 8).

Every rank-1..4 shape with unit dims: dims from {1, 2, 4} on the 1-D meshes (2) and (4),
from {1, 4} on the 2-D mesh (2, 2) (a 4 split by either axis or both), plus shapes from the
issue, blocks of odd extents and several split dims whose block is still one run. Each is
taken under every layout the mesh allows: each mesh axis on each dim or on none, axes
sharing a dim in both orders. Per mesh, two compiled programs are checked against PyTorch
eager and against the single-device program on the same values:

- inputs: `tanh(x) * 2` on inputs sharded in the layout: the devices read their blocks of
  the host tensor, and the result keeps the layout, so the host assembles it from the same
  blocks;
- reshard: inputs sharded in another layout of the same shape (one per shape replicated),
  results constrained to the layout (`sharding_constraint`): collectives, then assembly;
  over the shapes of rank <= 2 and the extra ones (see `check_mesh`).

Each case's layout, the shape device 0 held and the result's layout are asserted too.
Tolerances: against eager 1e-5 relative / 1e-6 absolute (XLA's tanh against PyTorch's);
against the single-device program 1e-6 / 1e-7 (the same elementwise kernel); a wrong block
is off by O(1). All cases of a mesh share one graph per run (one input each): two SPMD
compiles per mesh and one single-device compile. It runs in a subprocess under a timeout: a hang fails
the test instead of stalling the suite.

A layout whose axes do not divide a dim is refused by `shard` and `sharding_constraint`
with a ShardingError naming the dim, its size and the axis (checked for every such case)."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from paths import TESTS

import torchtpu
from torchtpu import sharding as S

# name: (mesh shape, axis names, the dim sizes its shapes are made of). On the 2-D mesh dims
# of 4 (split by one axis or both) and 1; EXTRA_SHAPES adds 2s split by both axes at once.
MESHES = {
    "2": ((2,), ("x",), (1, 2, 4)),
    "4": ((4,), ("x",), (1, 2, 4)),
    "2x2": ((2, 2), ("a", "b"), (1, 4)),
}
# Shapes from the issue, blocks of odd extents (3, 6 split by 2), and several split dims whose
# blocks are still one run ([2, 2, 4] split on dims 0 and 1: local [1, 1, 4]).
EXTRA_SHAPES = [
    (1, 8), (1, 1, 8), (1, 4, 6), (1, 2, 4), (2, 3, 4), (1, 6, 1), (6,), (1, 1, 1, 6),
    (2, 2, 4), (2, 4, 2), (1, 2, 2, 4), (2, 1, 2, 2), (2, 2),
]  # fmt: skip


def shapes(sizes=(1, 2, 4)):
    out = [s for r in range(1, 5) for s in itertools.product(sizes, repeat=r)]
    return out + [s for s in EXTRA_SHAPES if s not in out]


def layouts(shape, axes):
    """Every layout of `shape` over mesh `axes` [(name, size)]: each axis on one dim or none,
    axes sharing a dim in every order. Returns (divisible, not divisible) lists of dims
    tuples (one tuple of axis names per dim)."""
    names, sizes, rank = [a for a, _ in axes], dict(axes), len(shape)
    found = []
    for assign in itertools.product(range(-1, rank), repeat=len(names)):
        groups = {}
        for name, d in zip(names, assign):
            if d >= 0:
                groups.setdefault(d, []).append(name)
        for orders in itertools.product(*(itertools.permutations(g) for g in groups.values())):
            dims = [()] * rank
            for d, order in zip(groups, orders):
                dims[d] = tuple(order)
            if tuple(dims) not in found:
                found.append(tuple(dims))
    ok = [ds for ds in found if all(shape[k] % math.prod(sizes[a] for a in ds[k]) == 0 for k in range(rank))]
    return ok, [ds for ds in found if ds not in ok]


def spec_of(dims):
    """The user's spec for a dims tuple: ("x", None), (("a", "b"),)."""
    return tuple(None if not a else a[0] if len(a) == 1 else a for a in dims)


def local_shape(shape, dims, axes):
    sizes = dict(axes)
    return [n // math.prod(sizes[a] for a in ds) for n, ds in zip(shape, dims)]


def cases(key):
    shape_, names, sizes = MESHES[key]
    axes = list(zip(names, shape_))
    return [(s, dims) for s in shapes(sizes) for dims in layouts(s, axes)[0]]


def check_mesh(key: str) -> list[str]:
    """Runs the two programs over every case of mesh `key` (one graph each, one input per
    case); returns the failures, one line each."""
    shape_, names, _ = MESHES[key]
    mesh = torchtpu.Mesh(shape_, names)
    axes = mesh.axes
    todo = cases(key)
    # reshard: case i's input is laid out as the next case of the same shape (the last as the
    # first: replicated), its result constrained to case i's layout.
    by_shape = {}
    for i, (s, _) in enumerate(todo):
        by_shape.setdefault(s, []).append(i)
    source = [0] * len(todo)
    for members in by_shape.values():
        for j, i in enumerate(members):
            source[i] = todo[members[(j + 1) % len(members)]][1]
    # The reshard run takes the shapes of rank <= 2 and the extra ones (ranks 1 to 4): XLA's
    # compile of the collectives is most of its time, and how the host assembles a result
    # depends on its layout only, which the inputs run covers for every shape.
    some = [i for i, (s, _) in enumerate(todo) if len(s) <= 2 or s in EXTRA_SHAPES]
    encoded = [S.ShardSpec.build(mesh, spec_of(todo[i][1])).encode() for i in some]
    plain = [torch.randn(s, generator=torch.Generator().manual_seed(i)) for i, (s, _) in enumerate(todo)]
    want = [torch.tanh(x) * 2 for x in plain]

    follow = torch.compile(lambda xs: [torch.tanh(x) * 2 for x in xs], backend="torchtpu")
    # The custom op `sharding_constraint` writes, called directly: Dynamo inlining the
    # wrapper's checks once per case would be most of the test's time.
    constrained = torch.compile(
        lambda xs: [torch.ops.torchtpu.sharding_constraint(torch.tanh(x) * 2, e) for x, e in zip(xs, encoded)],
        backend="torchtpu",
    )
    base = follow([x.clone() for x in plain])  # no layout: the one-device program
    failures = []
    runs = {
        "inputs": (follow, list(range(len(todo))), [d for _, d in todo]),  # the result follows the input
        "reshard": (constrained, some, source),
    }
    for what, (fn, picked, in_dims) in runs.items():
        xs = [S.shard(plain[i].clone(), mesh, spec_of(in_dims[i])) for i in picked]
        S.RECENT_PROGRAMS.clear()
        try:
            got = fn(xs)
        except Exception as e:  # one line, then the next run
            failures.append(f"mesh {key} {what}: {type(e).__name__}: {e}")
            continue
        programs = [p for _, p in S.RECENT_PROGRAMS]
        if len(programs) != 1:
            failures.append(f"mesh {key} {what}: {len(programs)} SPMD programs compiled, expected 1")
            continue
        held, _ = programs[0].partition_shapes()
        for k, (i, out) in enumerate(zip(picked, got)):
            shape, dims = todo[i]
            label = f"mesh {key} {what}: {list(shape)} {spec_of(dims)} from {spec_of(in_dims[i])}"
            if held[0][k] != local_shape(shape, in_dims[i], axes):
                failures.append(f"{label}: device 0 held {held[0][k]}")
            layout = S.sharding_of(out)
            got_dims = layout.dims if layout is not None else tuple(() for _ in shape)
            if got_dims != dims:
                failures.append(f"{label}: output laid out as {got_dims}")
            if not torch.allclose(out, want[i], rtol=1e-5, atol=1e-6):
                wrong = (out - want[i]).abs().gt(1e-4).sum().item()
                failures.append(f"{label}: {wrong} of {out.numel()} elements differ from eager")
            elif not torch.allclose(out, base[i], rtol=1e-6, atol=1e-7):
                failures.append(f"{label}: differs from the single-device program")
    print(f"mesh {key}: {len(todo)} cases")
    return failures


# `make test` runs the 2-D mesh (axes sharing a dim, both orders); the 1-D meshes are the same
# sweep on fewer layouts (~80 s together), in `make test-slow`.
@pytest.mark.parametrize("key", [pytest.param(k, marks=pytest.mark.slow) if k != "2x2" else k for k in MESHES])
def test_every_block_of_every_small_shape_matches_eager(key):
    """In a fresh process, under a timeout: a hang fails the test."""
    tests = os.path.dirname(os.path.abspath(__file__))
    script = textwrap.dedent(
        f"""
        import sys
        sys.path[:0] = [{tests!r}, {str(TESTS)!r}]
        import test_sharding_blocks as t
        failures = t.check_mesh({key!r})
        print("\\n".join(failures[:40]))
        print("failures", len(failures))
        """
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    assert r.stdout.rstrip().endswith("failures 0"), r.stdout[-6000:]


def test_case_counts():
    """The enumeration covers what it says: every axis on every dim (or none), both orders."""
    ok, bad = layouts((4, 1), [("a", 2), ("b", 2)])
    assert set(ok) == {((), ()), (("a",), ()), (("b",), ()), (("a", "b"), ()), (("b", "a"), ())}
    assert set(bad) == {
        ((), ("a",)),
        ((), ("b",)),
        (("a",), ("b",)),
        (("b",), ("a",)),
        ((), ("a", "b")),
        ((), ("b", "a")),
    }
    base = [s for s in shapes() if set(s) <= {1, 2, 4}]
    assert len(base) == 3 + 9 + 27 + 81 and all(s in shapes() for s in EXTRA_SHAPES)
    counts = {key: len(cases(key)) for key in MESHES}
    assert all(n > 250 for n in counts.values()), counts


@pytest.fixture
def _restore_mesh():
    active, last = S.ACTIVE, S._LAST
    yield
    torch._dynamo.reset()
    S.ACTIVE, S._LAST = active, last


@pytest.mark.parametrize("key", list(MESHES))
def test_every_non_divisible_layout_is_a_clear_error(key, _restore_mesh):
    mesh = torchtpu.Mesh(*MESHES[key][:2])
    count = 0
    for shape in shapes(MESHES[key][2]):
        for dims in layouts(shape, mesh.axes)[1]:
            k = next(k for k, ds in enumerate(dims) if shape[k] % math.prod(mesh.axis_size(a) for a in ds))
            axis = dims[k][0] if len(dims[k]) == 1 else "x".join(dims[k])
            with pytest.raises(
                torchtpu.ShardingError, match=rf"dim {k} of size {shape[k]} is not divisible by mesh axis '{axis}'"
            ):
                S.shard(torch.zeros(shape), mesh, spec_of(dims))
            count += 1
    assert count > 100


def test_a_non_divisible_constraint_is_a_clear_error(_restore_mesh):
    mesh = torchtpu.Mesh((4,), ("x",))
    f = torch.compile(lambda x: S.sharding_constraint(x * 2, (None, "x"), mesh), backend="torchtpu")
    with pytest.raises(torchtpu.ShardingError, match=r"dim 1 of size 2 is not divisible by mesh axis 'x' \(size 4\)"):
        f(torch.randn(4, 2))
