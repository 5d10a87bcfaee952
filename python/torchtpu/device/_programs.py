"""One-op programs for the eager `tpu` device: an ATen call on meta tensors is traced with
`make_fx` and the compiled path's decomposition table (an op without a lowering becomes its
decomposition), the exporter writes the trace as IR (the same conventions, op registry and
lowering as torch.compile graphs), and the engine compiles it through its caches. Programs are
kept per key (the op, its non-tensor arguments, the dtype, shape and view geometry of each
tensor), so a warm op costs a dict lookup and one PJRT execution.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import sys
import time

import torch

from torchtpu import _C, _stats, index_checks
from torchtpu.compiled.exporter import export
from torchtpu.device import _ahead, _buffers, _checks, _defer, _native, _schema, _state
from torchtpu.device._buffers import input_sources, mark_last, on_device  # noqa: F401  (used here and re-exported)
from torchtpu.device._frames import first_user_frame
from torchtpu.ir_text import IR_DTYPES, TORCH_DTYPES

aten = torch.ops.aten


def _add_scaled(x, y, *, alpha=1):
    return aten.add.Tensor(x, aten.mul.Tensor(y, alpha))


def _sub_scaled(x, y, *, alpha=1):
    return aten.sub.Tensor(x, aten.mul.Tensor(y, alpha))


def _addcdiv(x, t1, t2, *, value=1):
    return aten.add.Tensor(x, aten.mul.Tensor(aten.div.Tensor(t1, t2), value))


def _addcmul(x, t1, t2, *, value=1):
    return aten.add.Tensor(x, aten.mul.Tensor(aten.mul.Tensor(t1, t2), value))


def _lerp(x, end, weight):
    # PyTorch's formula: from the nearer end, for accuracy at both ends.
    diff = aten.sub.Tensor(end, x)
    low = aten.add.Tensor(x, aten.mul.Tensor(diff, weight))
    high = aten.sub.Tensor(end, aten.mul.Tensor(diff, aten.rsub.Scalar(weight, 1)))
    return aten.where.self(aten.lt.Scalar(aten.abs.default(weight), 0.5), low, high)


# Ops whose float arguments the lowering (or PyTorch's decomposition) reads as numbers:
# written with the float as a tensor operand instead, so that the float can be an input
# (SGD's `add_(grad, alpha=-lr)`, Adam's `addcdiv_(..., value=-step_size)`).
_LIFT_REWRITES = {
    aten.add.Tensor: _add_scaled,
    aten.sub.Tensor: _sub_scaled,
    aten.addcdiv.default: _addcdiv,
    aten.addcmul.default: _addcmul,
    aten.lerp.Scalar: _lerp,
}


def _tensor_sibling(op):
    """For an overload taking Scalars (`gt.Scalar`, `pow.Tensor_Scalar`), the overload of the
    same op taking Tensors in their place (`gt.Tensor`, `pow.Tensor_Tensor`), if there is one:
    called with 0-d tensors, its floats can be inputs."""
    schema = op._schema
    if not any(isinstance(a.type, torch.NumberType) for a in schema.arguments):
        return None
    want = [(a.name, "Tensor" if isinstance(a.type, torch.NumberType) else str(a.type)) for a in schema.arguments]
    packet = getattr(aten, schema.name.split("::", 1)[1])
    for ov in packet.overloads():
        candidate = getattr(packet, ov)
        cs = candidate._schema
        if _schema.writes(cs):
            continue
        if [(a.name, str(a.type)) for a in cs.arguments] == want:
            return candidate
    return None


class Program:
    """A one-op graph: which leaf (tensor argument, in flattening order) or constant feeds
    each IR input, and what each output is. `gm` (None for IR written by hand, `build_text`)
    is the traced graph, its placeholders the leaves in order: what DeferAndFuse (`_defer.py`)
    records and splices into a region. The executable is compiled at the first eager run
    (at once in strict and debug modes, not at all where every run is deferred)."""

    __slots__ = (
        "_compiled",
        "_donating",
        "text",
        "sources",
        "outputs",
        "out_types",
        "ir_types",
        "ir_nbytes",
        "ir_nodes",
        "name",
        "plain",
        "write_base",
        "gm",
        "serial",
        "key",
        "_placeholders",
        "checks",
    )

    def __init__(
        self, text, sources, outputs, name, out_types, ir_types, gm=None, compiled=None, key=None, checks=None
    ):
        self.text = text
        self._compiled = compiled
        self._donating = None  # compiled with outputs aliased to inputs (`run`'s `donate`)
        self.sources = sources  # per IR input: ("leaf", i) or ("const", DeviceBuffer)
        self.outputs = outputs  # exporter OutputSpecs
        self.out_types = out_types  # per output spec: (dtype, shape); (None, ()) for "none"
        self.ir_types = ir_types  # per IR output: (dtype, shape)
        self.ir_nbytes = [math.prod(shape) * dtype.itemsize for dtype, shape in ir_types]
        self.name = name
        self.gm = gm
        # Per IR output: the position in gm's output list that it is.
        self.ir_nodes = [
            j for k in range(len(ir_types)) for j, o in enumerate(outputs) if o.kind == "ir" and o.index == k
        ]
        # The index checks' sites (`index_checks.Site`), or None: then the last IR output (after
        # the results, and the last of gm's outputs) is their `bool[k]` flag, not a result.
        self.checks = checks
        if checks:
            self.ir_nodes.append(len(outputs))
        self.serial = next(_serials)  # names the program in region keys (`_defer.py`)
        self.key = key
        self._placeholders = None
        # Per output: whether it is the whole new buffer of an in-place target (`build`).
        self.write_base = None
        # The outputs are the IR's results in order (no None or other kinds to map).
        results = len(ir_types) - (1 if checks else 0)
        self.plain = all(o.kind == "ir" and o.index == k for k, o in enumerate(outputs)) and len(outputs) == results

    def placeholders(self) -> list:
        """The traced graph's placeholders: one per leaf, in order."""
        if self._placeholders is None:
            self._placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        return self._placeholders

    @property
    def program(self):
        if self._compiled is None:
            self._compiled = _compile(self.text)
        return self._compiled

    def run(self, leaves: list, wait: bool = True, device: int = 0, donate: list = ()) -> list:
        """Executes on `leaves` (device buffers on tpu:`device`, in flattening order); returns
        the device buffers of the IR outputs, on that device. `donate`: IR inputs nothing reads
        after the run (an in-place target's old buffer, `_dispatch._donations`), whose memory
        the results may take. In DeferAndFuse mode a traced program is recorded instead and its
        outputs are pending values (`_defer.Pending`). The index checks' flag, if any, is not
        among them: it goes to the pending checks (`_checks.py`)."""
        if _defer.state.active and self.gm is not None:
            outs = _defer.record(self, leaves, device)
        else:
            # A pending value among the leaves (this thread's region, or another thread's)
            # is computed first.
            leaves = _defer.resolved(leaves, self.name)
            inputs = [leaves[v] if k == "leaf" else on_device(v, device) for k, v in self.sources]
            if donate:
                if self._donating is None:
                    self._donating = _compile(self.text, donate=True)
                outs = self._donating.run_device(inputs, wait, list(donate), device=device)
            else:
                outs = self.program.run_device(inputs, wait, device=device)
            if not wait:
                mark_last(outs)
        if self.checks is not None:
            outs = list(outs)
            _checks.add(outs.pop(), self.checks, first_user_frame(sys._getframe(1))[0])
        return outs


_serials = itertools.count()


def _compile(text: str, donate: bool = False):
    _defer.check_compile_allowed("a one-op program")
    start = time.perf_counter()
    compiled = _C.compile(text, donate=donate)
    _count(compiled, time.perf_counter() - start)
    return compiled


def _count(compiled, seconds: float) -> None:
    _stats.bump("eager_programs_compiled")
    _stats.bump("eager_compile_seconds", seconds)
    _stats.bump("eager_cache_misses" if compiled.source == "compiled" else "eager_cache_hits")


def _types_of(gm, outputs) -> tuple[list, list]:
    """Per output spec and per IR output, (dtype, shape), from the traced graph's values."""
    nodes = gm.graph.output_node().args[0]
    out_types, ir_types = [], {}
    for node, spec in zip(nodes, outputs):
        val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        t = (val.dtype, tuple(val.shape)) if isinstance(val, torch.Tensor) else (None, ())
        out_types.append(t)
        if spec.kind == "ir":
            ir_types[spec.index] = t
    return out_types, [ir_types[k] for k in range(len(ir_types))]


# Programs with index checks (True) and without: `_programs` is the dict of the current
# setting (`torchtpu.eager.check_indices`, `use_checks`), so a program key need not carry it.
class BoundedCache(dict):
    """A dict that starts afresh when it holds `limit` keys: shapes that change at every step
    would otherwise grow it without bound (each key keeps a compiled program alive). A reset
    costs only rebuilds, from the engine's executable caches, and is counted in
    `torchtpu.stats()["eager_cache_resets"]`."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def __setitem__(self, key, value):
        if key not in self and len(self) >= self.limit:
            self.clear()
            _stats.bump("eager_cache_resets")
        super().__setitem__(key, value)


# One-op programs kept per key, per index-check setting.
PROGRAM_LIMIT = 8192
_by_checks: dict = {True: BoundedCache(PROGRAM_LIMIT), False: BoundedCache(PROGRAM_LIMIT)}
checks_on = index_checks.check_indices_default()
_programs: dict = _by_checks[checks_on]
_native.set_checks(checks_on)


def build(
    key,
    op,
    meta_args,
    meta_kwargs,
    cast_to: list | None = None,
    lift_floats: bool = False,
    geoms: list | None = None,
    write_base: list | None = None,
) -> Program:
    """Compiles `op(*meta_args, **meta_kwargs)`, whose tensor leaves are meta tensors (or CPU
    0-d tensors: scalars), into a Program kept under `key`. The op is traced with torchtpu's
    decomposition table (the compiled path's), so an op without a lowering of its own runs as
    the program of its decomposition. `cast_to[i]`, where given, converts output i to that
    dtype in the same program (an in-place op writing a wider result into its argument).

    With `lift_floats`, the Python floats among the arguments are leaves too (0-d f64 inputs,
    after the tensors), fed their values at each call: a learning rate or a bias correction
    that changes every step then never recompiles.

    `geoms[i]`, where not None, says that tensor leaf i is passed as its storage's buffer:
    (buffer shape, strides, offset) of the view the op reads (strides None: a reshape), taken
    inside the program.

    `write_base[i]`, where not None, is the leaf (a strided view, the target of an in-place
    op) whose whole buffer output i becomes: the result scattered into it in the same program,
    instead of a scatter program of its own."""
    program = _programs.get(key)
    if program is not None:
        return program
    args = (op, meta_args, meta_kwargs, cast_to, lift_floats, geoms, write_base, checks_on)
    if _defer.state.active:
        # Recorded, not run: the registry's legality checks stand in for a compile (what
        # strict mode's compile would refuse becomes a CPU fallback the same way).
        with _build_lock:
            program = _programs.get(key)
            if program is not None:
                return program
            traced = trace(*args)
            refused = _C.check_lowerable(traced.text)
            if refused:
                from torchtpu.compiled.exporter import Unsupported

                line, bad, reason = refused[0]
                raise Unsupported(f"{bad}: {reason}" if reason else f"no lowering for {bad}", [bad])
            return _keep(key, traced, write_base)
    # The pool may have built it ahead of use (`_ahead.py`: the same ops at new sizes).
    spec = _ahead.spec_of(*args) if _ahead.enabled() else None
    traced, predicted = _ahead.take(spec)
    if traced is not None:
        traced.count_taken()
    else:
        with _build_lock:
            program = _programs.get(key)
            if program is not None:
                return program
            traced = trace(*args)
        traced.compile()  # outside the lock: XLA's compile releases the GIL, others trace
    program = _keep(key, traced, write_base)
    _ahead.learned(spec, [shape for _, shape in traced.out_types], predicted, trace)
    return program


# make_fx keeps its tracer in module globals (`CURRENT_PATCHER`...): two threads tracing at
# once break each other's trace. One trace at a time; a thread that waited may find the
# program the other built.
_build_lock = _state.build_lock


@contextlib.contextmanager
def _as_traced_alone():
    """The op is traced with the caller's dispatch modes put aside and Python dispatch on. A
    FakeTensorMode computes a literal's value for real (Dynamo's propagation of
    `torch.tensor([], device=x.device).sum()`) under `no_dispatch()` with its own mode on the
    stack: make_fx then recorded nothing and baked the meta result in as a constant, which
    failed at upload (`BufferError: Cannot pack tensors on meta`)."""
    from torch.utils._python_dispatch import _disable_current_modes

    with (
        torch._C._SetExcludeDispatchKeyGuard(torch._C.DispatchKey.Python, False),
        torch._C._SetExcludeDispatchKeyGuard(torch._C.DispatchKey.PythonTLSSnapshot, False),
        _disable_current_modes(),
    ):
        yield


@contextlib.contextmanager
def _one_fake_mode():
    """make_fx, tracing meta tensors for real, records each value's metadata as a fake tensor
    made under a FakeTensorMode of its own unless a tracing context names one, and each
    FakeTensorMode captures the Python stack when made (with source lines): about 16 of them
    per op took half of a trace under a deep stack (TorchTitan's). One mode for the whole
    trace instead, through the context a trace inside Dynamo already has."""
    from torch._guards import TracingContext, tracing

    if TracingContext.try_get() is not None:
        yield
        return
    from torch._subclasses.fake_tensor import FakeTensorMode

    with tracing(TracingContext(FakeTensorMode(allow_fallback_kernels=True))):
        yield


class Traced:
    """A one-op program traced and exported, before it is kept under a key: on the op's
    thread, or on the pool ahead of use (`_ahead.py`), which also compiles it there."""

    __slots__ = ("text", "sources", "outputs", "out_types", "ir_types", "gm", "name", "checks", "compiled", "seconds")

    def __init__(self, text, sources, outputs, out_types, ir_types, gm, name, checks):
        self.text, self.sources, self.outputs, self.gm, self.name = text, sources, outputs, gm, name
        self.out_types, self.ir_types, self.checks = out_types, ir_types, checks
        self.compiled = None
        self.seconds = 0.0

    def compile(self) -> None:
        self.compiled = _compile(self.text)

    def compile_ahead(self) -> None:
        """On the pool: compiled, counted when an op takes it (`count`)."""
        start = time.perf_counter()
        self.compiled = _C.compile(self.text, donate=False)
        self.seconds = time.perf_counter() - start

    def count_taken(self) -> None:
        """An op took it from the pool: counted as the op's own compile would be, and ahead."""
        _stats.bump("eager_programs_ahead")
        _count(self.compiled, self.seconds)


def trace(op, meta_args, meta_kwargs, cast_to, lift_floats, geoms, write_base, checks) -> Traced:
    """`build`'s trace and export of `op(*meta_args, **meta_kwargs)`, with index checks if
    `checks`; not compiled."""
    with _build_lock, _as_traced_alone():
        return _trace_locked(op, meta_args, meta_kwargs, cast_to, lift_floats, geoms, write_base, checks)


def _trace_locked(op, meta_args, meta_kwargs, cast_to, lift_floats, geoms, write_base, checks) -> Traced:
    from torch.fx.experimental.proxy_tensor import make_fx

    from torchtpu.compiled.decompositions import decomposition_table

    table = decomposition_table()
    leaves: list = []
    floats: list = []

    def collect(x):
        if isinstance(x, torch.Tensor):
            geom = geoms[len(leaves)] if geoms is not None else None
            leaves.append(x if geom is None else torch.empty(geom[0], dtype=x.dtype, device="meta"))
        elif isinstance(x, (list, tuple)):
            for v in x:
                collect(v)
        elif lift_floats and type(x) is float:
            floats.append(x)

    collect(meta_args)
    collect(list(meta_kwargs.values()))
    n_tensors = len(leaves)
    lifted = [torch.tensor(f, dtype=torch.float64) for f in floats]

    def rebuild(x, it, fit):
        if isinstance(x, torch.Tensor):
            i, base = next(it)
            geom = geoms[i] if geoms is not None else None
            if geom is None:
                return base
            if geom[1] is None:
                return aten.view.default(base, list(x.shape))
            # The view, made dense: the op (and its decomposition's own views) then sees a
            # value whose strides are its own, as the lowering reads it.
            v = aten.clone.default(aten.as_strided.default(base, list(x.shape), list(geom[1]), geom[2]))
            conj, neg = geom[3] if len(geom) > 3 else (False, False)
            if conj:
                v = aten.conj_physical.default(v)
            if neg:
                v = aten.neg.default(v)
            return v
        if isinstance(x, (list, tuple)):
            return type(x)(rebuild(v, it, fit) for v in x)
        if lift_floats and type(x) is float:
            return next(fit)
        return x

    call = (_LIFT_REWRITES.get(op) or _tensor_sibling(op) or table.get(op, op)) if lift_floats else op

    def fn(*inputs):
        it, fit = iter(enumerate(inputs[:n_tensors])), iter(inputs[n_tensors:])
        args = tuple(rebuild(a, it, fit) for a in meta_args)
        kwargs = {k: rebuild(v, it, fit) for k, v in meta_kwargs.items()}
        result = call(*args, **kwargs)
        outs = list(result) if isinstance(result, (list, tuple)) else [result]
        if cast_to is not None:
            outs = [o.to(d) if d is not None and o.dtype != d else o for o, d in zip(outs, cast_to)]
        if write_base is not None:
            for i, j in enumerate(write_base):
                if j is not None:
                    _, stride, offset = geoms[j]
                    outs[i] = aten.as_strided_scatter.default(
                        inputs[j], outs[i], list(outs[i].shape), list(stride), offset
                    )
        return outs

    with _one_fake_mode():
        gm = make_fx(fn, decomposition_table=table)(*leaves, *lifted)
    if lift_floats:
        # A 0-d tensor promotes like a Python number only within a dtype category: where the
        # lifted form's result dtypes differ from the op's own, the floats stay numbers.
        expected = op(*meta_args, **meta_kwargs)
        expected = list(expected) if isinstance(expected, (list, tuple)) else [expected]
        if cast_to is not None:
            expected = [d if d is not None else e.dtype for e, d in zip(expected, cast_to)]
        else:
            expected = [e.dtype if isinstance(e, torch.Tensor) else None for e in expected]
        got = [n.meta["val"].dtype for n in gm.graph.output_node().args[0] if isinstance(n, torch.fx.Node)]
        if got != [d for d in expected if d is not None]:
            raise TypeError(f"lifting floats of {op} changes its result dtypes ({got} vs {expected})")
    name = "eager_" + str(op).replace(".", "_").replace("::", "_")
    checked = index_checks.instrument(gm, called=op, one_flag=True, indices=checks)
    if checked is not None:
        gm = checked.gm  # its last output is the checks' flag (`Program.checks`)
    exported = export(gm, name)
    sources = [("leaf", v) if k == "arg" else (k, v) for k, v in input_sources(exported)]
    outputs = exported.outputs if checked is None else exported.outputs[:-1]
    out_types, ir_types = _types_of(gm, outputs)
    if checked is not None:
        ir_types.append((torch.bool, ()))  # one flag for the program's sites
    sites = None if checked is None else checked.sites
    return Traced(exported.text, sources, outputs, out_types, ir_types, gm, name, sites)


def _keep(key, traced: Traced, write_base) -> Program:
    program = Program(
        traced.text,
        traced.sources,
        traced.outputs,
        traced.name,
        traced.out_types,
        traced.ir_types,
        gm=traced.gm,
        compiled=traced.compiled,
        key=key,
        checks=traced.checks,
    )
    program.write_base = write_base
    _programs[key] = program
    return program


def build_text(key, text: str, name: str) -> Program:
    """Compiles IR `text` (its inputs are the leaves, in order) into a Program kept under
    `key`: for the device's own `tpu.*` ops, which have no ATen form to trace."""
    from torchtpu.compiled.exporter import OutputSpec

    compiled = _compile(text)
    n_out = len(compiled.output_types)
    types = [(TORCH_DTYPES[d], tuple(s)) for d, s in compiled.output_types]
    n_in = len(compiled.input_types)
    outputs = [OutputSpec("ir", i) for i in range(n_out)]
    program = Program(text, [("leaf", i) for i in range(n_in)], outputs, name, types, types, compiled=compiled, key=key)
    _programs[key] = program
    return program


def clear() -> None:
    """Forgets every kept program (the engine's caches still hold the executables)."""
    for programs in _by_checks.values():
        programs.clear()
    _scalars.clear()
    _native.clear()
    _ahead.clear()


def use_checks(on: bool) -> None:
    """Whether programs built from now on check their indices (`index_checks.py`)."""
    global _programs, checks_on
    checks_on = bool(on)
    _programs = _by_checks[checks_on]
    _native.set_checks(checks_on)


# ---------------------------------------------------------------- data movement programs


def _meta(shape, dtype):
    return torch.empty(shape, dtype=dtype, device="meta")


def zeros(shape, dtype, device: int = 0):
    """Zeros of `shape` and `dtype` on tpu:`device`: up to 4 KiB uploaded, as the native path
    gives a small unwritten storage its zeros; larger ones a zeros program's output (computed
    on the device, not copied there)."""
    shape = tuple(shape)
    shared = _C.eager_zeros(_native.dtype_code(dtype), list(shape), device)
    if shared is not None:
        return shared
    key = ("zeros", shape, dtype)
    p = _programs.get(key) or build(key, aten.zeros.default, (list(shape),), {"dtype": dtype, "device": "meta"})
    return p.run([], device=device)[0]


def reshape(buffer, shape, new_shape, dtype):
    key = ("reshape", shape, new_shape, dtype)
    p = _programs.get(key) or build(key, aten.view.default, (_meta(shape, dtype), list(new_shape)), {})
    return p.run([buffer], device=buffer.device)[0]


def strided_read(buffer, shape, dtype, size, stride, offset):
    """The view (size, stride, offset) of a row-major buffer of `shape`, made dense."""
    key = ("as_strided", shape, dtype, size, stride, offset)
    p = _programs.get(key) or build(
        key, aten.as_strided.default, (_meta(shape, dtype), list(size), list(stride), offset), {}
    )
    return p.run([buffer], device=buffer.device)[0]


def pad_flat(buffer, shape, dtype, numel: int):
    """The row-major buffer of `shape` flattened and padded with zeros to `numel` elements (a
    grown storage, `_storage.resize_storage`)."""
    old = math.prod(shape)
    key = ("pad_flat", shape, dtype, numel)
    p = _programs.get(key) or build(
        key, aten.constant_pad_nd.default, (_meta((old,), dtype), [0, numel - old], 0), {}, geoms=[(shape, None, 0)]
    )
    return p.run([buffer], device=buffer.device)[0]


def retyped(buffer, shape, dtype, to, size, stride=None, offset=0):
    """The view (size, stride, offset) of a row-major buffer of `shape` and `dtype`, made dense
    and converted to `to`, a complex dtype and its real component dtype either way round:
    `view_as_complex` pairs the view's last dim (of 2) into complex elements, `view_as_real`
    splits each complex element into a new last dim of 2 (a view of a storage as another
    dtype, `_storage.read`). `stride` None: the view is the buffer reshaped to `size`. One
    program: the view is its first step."""
    op = aten.view_as_complex.default if to.is_complex else aten.view_as_real.default
    shape, size = tuple(shape), tuple(size)
    key = ("retyped", shape, dtype, to, size, None if stride is None else tuple(stride), offset)
    p = _programs.get(key)
    if p is None:
        if stride is None:
            geom = None if size == shape else (shape, None, 0)
        else:
            geom = (shape, tuple(stride), offset)
        p = build(key, op, (_meta(size, dtype),), {}, geoms=[geom])
    return p.run([buffer], device=buffer.device)[0]


def bitcast(buffer, shape, dtype, to):
    """A row-major buffer of `shape` and `dtype` read as `to`, flat: its bytes unchanged
    (`prims.view_of_dtype`, a storage adopting the dtype of a `Tensor.view(dtype)` of it)."""
    shape = tuple(shape)
    numel = math.prod(shape)
    key = ("bitcast", shape, dtype, to)
    p = _programs.get(key)
    if p is None:
        geom = None if shape == (numel,) else (shape, None, 0)
        p = build(key, torch.ops.prims.view_of_dtype.default, (_meta((numel,), dtype), to), {}, geoms=[geom])
    return p.run([buffer], device=buffer.device)[0]


def unary(op, buffer, shape, dtype):
    """`op` (a one-tensor ATen op: `conj_physical`, `neg`) of a dense buffer of `shape` and `dtype`."""
    shape = tuple(shape)
    key = ("unary", op, shape, dtype)
    p = _programs.get(key) or build(key, op, (_meta(shape, dtype),), {})
    return p.run([buffer], device=buffer.device)[0]


def strided_write_key(shape, dtype, size, stride, offset) -> tuple:
    return ("as_strided_scatter", tuple(shape), dtype, tuple(size), tuple(stride), offset)


def strided_write(base, shape, dtype, src, size, stride, offset):
    """`base` (row-major, of `shape`) with the view (size, stride, offset) replaced by `src`."""
    key = strided_write_key(shape, dtype, size, stride, offset)
    p = _programs.get(key) or build(
        key,
        aten.as_strided_scatter.default,
        (_meta(shape, dtype), _meta(size, dtype), list(size), list(stride), offset),
        {},
    )
    return p.run([base, src], device=base.device)[0]


# CPU scalars (0-d tensors, Python numbers lifted to inputs) uploaded once per (dtype, value);
# the sign is in the key so that -0.0 and 0.0 stay apart.
_scalars: dict = {}
_SCALAR_CACHE_LIMIT = 4096


def _scalar(dtype, value, make, device: int):
    key = (dtype, value, math.copysign(1.0, value) if isinstance(value, float) else 0, device)
    b = _scalars.get(key)
    if b is None:
        if len(_scalars) >= _SCALAR_CACHE_LIMIT:
            _scalars.clear()
        b = _scalars[key] = make()
    return b


def float_buffer(value: float, device: int = 0):
    """A 0-d f64 buffer on tpu:`device` holding `value` (a float argument lifted to an input):
    the native path's cached buffer of that value (`_C.eager_scalar`), so that an op recorded by
    either path reads the same external."""
    return _C.eager_scalar("f64", float(value), device)


def scalar_buffer(t: torch.Tensor, device: int = 0):
    """A buffer on tpu:`device` holding the CPU 0-d tensor `t` (from the native path's cache,
    as `float_buffer`; dtypes it lacks from this module's)."""
    value = t.item()
    b = _C.eager_scalar(IR_DTYPES[t.dtype], value, device) if t.dtype in IR_DTYPES else None
    return b if b is not None else _scalar(t.dtype, value, lambda: _buffers.upload(t, device), device)


def wait_all() -> None:
    """Waits for the device's enqueued work (`torch.tpu.synchronize`): the open region runs, then
    the native path's and the Python path's last executions are waited for, then the index
    checks of what ran are read (`_checks.py`)."""
    _defer.flush("synchronize")
    _native.wait()
    _buffers.wait_last()
    _checks.check()
