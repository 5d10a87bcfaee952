"""Checks that compiled and device programs make on the device: out-of-range indices, device
asserts (`_assert_async`) and masks' counts.

XLA's gather and scatter clamp an index that is out of range; PyTorch raises (CPU) or asserts
on the device (CUDA). `instrument` rewrites a decomposed ATen graph so that it computes, for
each node that reads indices (`index`, `index_put`, `gather`, `scatter*`, `index_select`,
`embedding`, ...), whether any of its indices is out of range, and returns the flags as one extra
`bool[k]` output appended to the graph's outputs (k: the number of check sites; one 0-d bool
for the device's one-op programs). The caller
strips that output and hands it to `raise_if_set` (now, or at the next host read: the device's
pending checks, `device/_checks.py`), which raises `IndexOutOfRangeError` naming the op and
the user's line.

Two more kinds of site raise `DeviceAssertError`, whatever `check_indices` says: an
`_assert_async(cond, msg)` node (PyTorch's one_hot decomposition asserts its class range;
libraries assert their own invariants) is taken out of the graph and its flag is `not cond`;
and `x[mask] = v` with one value per set element (the lowering places v's k-th value at the
k-th set element) flags a count of set elements that is not v's, the shape check CPU eager
makes from the data.

Each site's valid range is the op's own in CPU eager, measured: `index`/`index_put` (and
`index_fill`, `take`) take [-n, n); `gather`, `scatter*`, `index_select`, `index_add`,
`index_copy`, `embedding` and the loss targets of `nll_loss` take [0, n) (nll_loss's
decomposition replaces `ignore_index` by 0 before its gather). A decomposed node takes the range
of the op it came from (`meta["original_aten"]`): `index_add` becomes an `index_put`, which
alone would accept -1.
"""

from __future__ import annotations

import dataclasses
import os
import re

import torch

aten = torch.ops.aten

# "0" (or false/off/no) turns the checks off: the default of the device's switch
# (`torchtpu.eager.check_indices`) and of torch.compile's option `check_indices`.
CHECK_INDICES_ENV = "TORCHTPU_CHECK_INDICES"


def check_indices_default() -> bool:
    return os.environ.get(CHECK_INDICES_ENV, "1").strip().lower() not in ("0", "false", "off", "no")


# Ops (base names) whose indices CPU eager takes in [0, n) only, whatever they decompose into.
_NON_NEGATIVE = {
    "aten.embedding",
    "aten.embedding_dense_backward",
    "aten.gather",
    "aten.scatter",
    "aten.scatter_add",
    "aten.scatter_reduce",
    "aten.index_select",
    "aten.index_add",
    "aten.index_copy",
    "aten.nll_loss_forward",
    "aten.nll_loss2d_forward",
    "aten.nll_loss_backward",
    "aten.nll_loss2d_backward",
}
# Index masks (bool, uint8) select; they are never out of range.
_MASKS = (torch.bool, torch.uint8)


@dataclasses.dataclass(frozen=True)
class Site:
    """One check: `op` (the op the user called, `aten.nll_loss_forward`), `reads` (what reads the
    index there: `aten.gather index in [0, 3) (dim 1)`) and `where` (the user's file:line, when
    the graph knows it; the device gives it per run)."""

    op: str
    reads: str  # "aten.gather takes indices in [0, 3) along dim 1"; an assert's message
    where: str | None = None
    kind: str = "index"  # or "assert" (`_assert_async`, a mask's count): DeviceAssertError


def _base(target) -> str:
    name = target.name() if isinstance(target, torch._ops.OpOverload) else str(target)
    ns, _, rest = name.partition("::")
    return f"{ns}.{rest.split('.')[0]}" if rest else name


def _dim_size(val, dim: int):
    if val.dim() == 0:
        return 1
    return val.shape[dim % val.dim()]


def _index_list(node):
    """`index`/`index_put`: (index node, dim of self) per integer index tensor; a mask covers as
    many dims as it has."""
    out, dim = [], 0
    for idx in node.args[1]:
        if idx is None:
            dim += 1
            continue
        v = idx.meta["val"]
        if v.dtype in _MASKS:
            dim += max(v.dim(), 1)
            continue
        out.append((idx, dim))
        dim += 1
    return node.args[0], out


def _dim_index(node):
    # (self, dim, index, ...): gather, scatter*, index_select, index_add, index_copy, index_fill.
    return node.args[0], [(node.args[2], node.args[1])]


def _embedding(node):
    return node.args[0], [(node.args[1], 0)]


# Per op overload that reads indices: (the indexed tensor, [(index node, its dim)]), and whether
# the node alone takes negative indices (overridden by the op it came from, `_NON_NEGATIVE`).
_RULES = {
    aten.index.Tensor: (_index_list, True),
    aten.index_put.default: (_index_list, True),
    aten.index_put_.default: (_index_list, True),
    aten._index_put_impl_.default: (_index_list, True),
    aten.gather.default: (_dim_index, False),
    aten.scatter.src: (_dim_index, False),
    aten.scatter.value: (_dim_index, False),
    aten.scatter.reduce: (_dim_index, False),
    aten.scatter.value_reduce: (_dim_index, False),
    aten.scatter_add.default: (_dim_index, False),
    aten.scatter_reduce.two: (_dim_index, False),
    aten.index_select.default: (_dim_index, False),
    aten.index_add.default: (_dim_index, False),
    aten.index_copy.default: (_dim_index, False),
    aten.index_fill.int_Scalar: (_dim_index, True),
    aten.index_fill.int_Tensor: (_dim_index, True),
    aten.embedding.default: (_embedding, False),
}

_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def _outside_torch(filename: str) -> bool:
    # The same rule as the device's frame walk (`device/_defer.first_user_frame`).
    return not (
        "/torch/" in filename
        or "/torchtpu/" in filename
        or filename.startswith("<frozen")
        or filename.endswith("/contextlib.py")
    )


def user_line(stack_trace: str | None) -> str | None:
    """The innermost `file:line` outside torch and torchtpu in an FX node's `stack_trace`."""
    if not stack_trace:
        return None
    for filename, line in reversed(_FRAME.findall(stack_trace)):
        if _outside_torch(filename):
            return f"{filename}:{line}"
    return None


@dataclasses.dataclass
class Instrumented:
    """A copy of a graph with the checks added: `gm` (its outputs the original's, then the
    flags: `bool[len(sites)]`, or one 0-d bool), `sites`, and `original` (copied node -> node
    of the graph it was copied from, for refusals the caller maps back)."""

    gm: torch.fx.GraphModule
    sites: tuple
    original: dict


def _call(graph, target, args, val):
    node = graph.call_function(target, args)
    node.meta["val"] = val
    return node


def _bools(shape):
    """A value (`meta["val"]`) for a new bool node: a meta tensor, or for symbolic sizes one made
    by the fake mode that owns them (a graph's values may come from several fake modes, which
    do not mix)."""
    if all(isinstance(d, int) for d in shape):
        return torch.empty(tuple(shape), dtype=torch.bool, device="meta")
    mode = next(d.node.shape_env for d in shape if isinstance(d, torch.SymInt))
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(shape_env=mode, allow_non_fake_inputs=True):
        return torch.empty(tuple(shape), dtype=torch.bool)


def _flag(graph, index, lo: int, n: int):
    """A 0-d bool node: whether any element of `index` lies outside [lo, n), or None where no
    value of its dtype can (a bound past the dtype's range would wrap when the lowering
    converts it to that dtype)."""
    v = index.meta["val"]
    info = torch.iinfo(v.dtype)
    elementwise = _bools(v.shape)
    tests = []
    if lo > info.min:
        tests.append(_call(graph, aten.lt.Scalar, (index, lo), elementwise))
    if n <= info.max:
        tests.append(_call(graph, aten.ge.Scalar, (index, n), elementwise))
    if not tests:
        return None
    either = tests[0] if len(tests) == 1 else _call(graph, aten.logical_or.default, tuple(tests), elementwise)
    return _call(graph, aten.any.default, (either,), _bools(()))


# Device asserts: `_assert_async(cond[, msg])` (one_hot's class range in PyTorch's decomposition,
# libraries' own checks). Their nodes are taken out of the graph and become flags, `not cond`.
_ASSERTS = (aten._assert_async.default, aten._assert_async.msg)


def is_assert(node) -> bool:
    """Whether `node` is a device assert, which `instrument` turns into a flag output."""
    return node.op == "call_function" and node.target in _ASSERTS


def _masked_put(node):
    """(mask, its first dim, n) for `x[mask] = v` with one value per set element (v's size at
    the mask's count a static n != 1; the lowering places v's k-th at the k-th set element),
    else None. Eager checks that n is the count; the program does (`_count_flag`)."""
    if node.op != "call_function" or node.target not in (
        aten.index_put.default,
        aten.index_put_.default,
        aten._index_put_impl_.default,
    ):
        return None
    present = [(p, i) for p, i in enumerate(node.args[1]) if i is not None]
    if len(present) != 1:
        return None
    p, mask = present[0]
    x, m, v = (a.meta.get("val") for a in (node.args[0], mask, node.args[2]))
    if not all(isinstance(t, torch.Tensor) for t in (x, m, v)) or m.dtype not in _MASKS or m.dim() == 0:
        return None
    lead = x.dim() - m.dim() + 1 - v.dim()
    n = v.shape[p - lead] if p >= lead else 1
    return (mask, p, n) if isinstance(n, int) and n != 1 else None


def sites_in(gm: torch.fx.GraphModule, indices: bool = True) -> bool:
    """Whether `gm` has a check to make (cheap: no copy): a node that reads indices (with
    `indices`), a device assert or a mask whose count must be v's."""
    return any(
        (indices and n.op == "call_function" and n.target in _RULES) or is_assert(n) or _masked_put(n) is not None
        for n in gm.graph.nodes
    )


def _assert_flag(graph, cond):
    """A 0-d bool node: whether `cond` (one value, of any dtype) is zero."""
    v = cond.meta["val"]
    zero = _call(graph, aten.eq.Scalar, (cond, 0), _bools(v.shape))
    return zero if v.dim() == 0 else _call(graph, aten.any.default, (zero,), _bools(()))


def _count_flag(graph, mask, n: int):
    """A 0-d bool node: whether the mask's count of set elements is not `n`."""
    count = _call(graph, aten.sum.default, (mask,), torch.empty((), dtype=torch.int64, device="meta"))
    return _call(graph, aten.ne.Scalar, (count, n), _bools(()))


def _shape_text(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def instrument(
    gm: torch.fx.GraphModule, binding=None, called=None, one_flag: bool = False, indices: bool = True
) -> Instrumented | None:
    """`gm` with its checks, or None where it has none: index checks (with `indices`), device
    asserts (`_assert_async`, its node replaced by its flag) and masks' counts. `binding` gives
    the sizes of a graph with symbolic shapes (specialize.Binding); `called` names the op for
    nodes that do not say which op they came from (the device's one-op programs). With
    `one_flag` the flag is one 0-d bool for all the sites (the device combines such flags,
    `_checks.py`)."""
    if not sites_in(gm, indices):
        return None
    graph = torch.fx.Graph()
    env: dict = {}
    output = None
    for node in gm.graph.nodes:
        if node.op == "output":
            output = node
            continue
        if is_assert(node):
            continue  # its flag stands in for it (below); nothing uses an assert's result
        env[node] = graph.node_copy(node, lambda n: env[n])
    flags, sites = [], []
    for node in gm.graph.nodes:
        where = user_line(node.meta.get("stack_trace"))
        if is_assert(node):
            message = node.args[1] if len(node.args) > 1 else "Expected Tensor with single nonzero value, but got zero"
            flags.append(_assert_flag(graph, env[node.args[0]]))
            sites.append(Site("aten._assert_async", str(message), where, "assert"))
            continue
        masked = _masked_put(node)
        if masked is not None:
            mask, p, n = masked
            v = node.args[2].meta["val"]
            result = list(node.args[0].meta["val"].shape)
            result[p : p + mask.meta["val"].dim()] = ["N"]
            message = (
                f"shape mismatch: value tensor of shape {_shape_text(v.shape)} cannot be broadcast to indexing result "
                f"of shape {_shape_text(result)}: N, the mask's count of set elements, is not {n}"
            )
            flags.append(_count_flag(graph, env[mask], n))
            sites.append(Site(_base(node.meta.get("original_aten") or node.target), message, where, "assert"))
        if not indices:
            continue
        rule = _RULES.get(node.target) if node.op == "call_function" else None
        if rule is None:
            continue
        collect, negative_ok = rule
        original = node.meta.get("original_aten")
        op = _base(original) if original is not None else (_base(called) if called is not None else _base(node.target))
        if op in _NON_NEGATIVE:
            negative_ok = False
        source, indices = collect(node)
        source_val = source.meta["val"]
        for index, dim in indices:
            v = index.meta.get("val")
            if not isinstance(v, torch.Tensor) or v.dtype.is_floating_point or v.dtype in _MASKS:
                continue
            n = _dim_size(source_val, dim)
            if binding is not None:
                n = binding.value(n)
            if not isinstance(n, int):
                continue  # a symbolic size without a binding: not exported as such either
            lo = -n if negative_ok else 0
            flag = _flag(graph, env[index], lo, n)
            if flag is None:
                continue
            flags.append(flag)
            reads = f"{_base(node.target)} takes indices in [{lo}, {n}) along dim {dim}"
            sites.append(Site(op, reads, where))
    if not flags:
        return None
    stacked = _call(graph, aten.stack.default, (flags,), _bools((len(flags),)))
    if one_flag:
        stacked = _call(graph, aten.any.default, (stacked,), _bools(()))
    outs = output.args[0]
    items = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    new_out = graph.output(tuple(env[x] if isinstance(x, torch.fx.Node) else x for x in items) + (stacked,))
    new_out.meta = dict(output.meta)
    descs = output.meta.get("desc")
    if isinstance(descs, (list, tuple)) and len(descs) == len(items):
        new_out.meta["desc"] = list(descs) + [None]  # the exporter matches descriptions to outputs
    checked = torch.fx.GraphModule(gm, graph)
    return Instrumented(checked, tuple(sites), {new: old for old, new in env.items()})


def strip(exported, output_is_tuple: bool):
    """The Exported of an instrumented graph as its caller sees the original: without the flag
    output, and a single output again where the original returned one. Returns (exported, the
    flag's IR output index)."""
    flag = exported.outputs[-1]
    return dataclasses.replace(exported, outputs=exported.outputs[:-1], output_is_tuple=output_is_tuple), flag.index


def returns_tuple(gm: torch.fx.GraphModule) -> bool:
    return isinstance(gm.graph.output_node().args[0], (list, tuple))


def error(flags, sites, where: str | None = None):
    """The `IndexOutOfRangeError` (an assert's or a count's site: `DeviceAssertError`) for a set
    flag (`flags`: a CPU bool tensor, one per site), or None."""
    if not bool(flags.any()):
        return None
    from torchtpu.errors import DeviceAssertError, IndexOutOfRangeError

    if flags.dim() == 0:  # one flag for all the sites (`instrument(..., one_flag=True)`)
        site = sites[0]
        reads, more = " or ".join(s.reads for s in sites), ""
    else:
        bad = [s for s, f in zip(sites, flags.tolist()) if f]
        site, reads = bad[0], bad[0].reads
        more = f" (and {len(bad) - 1} more check{'s' if len(bad) > 2 else ''} of this program)" if len(bad) > 1 else ""
    at = site.where or where
    if site.kind == "assert":
        return DeviceAssertError(
            f"{reads}{f' (at {at})' if at else ''}{more}: a check torchtpu's program made on the device, where CPU "
            f"eager raises at once",
            op=site.op,
            where=at,
            check=reads,
        )
    return IndexOutOfRangeError(
        f"{site.op}: index out of range{f' at {at}' if at else ''} ({reads}){more}. torchtpu raises as "
        "CPU eager does where XLA would clamp the index; the checks are turned off by "
        "options={'check_indices': False}, torchtpu.eager.check_indices(False) or TORCHTPU_CHECK_INDICES=0",
        op=site.op,
        where=at,
        reads=reads,
    )


def raise_if_set(flags, sites, where: str | None = None) -> None:
    e = error(flags, sites, where)
    if e is not None:
        raise e
