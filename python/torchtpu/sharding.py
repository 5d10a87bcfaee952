"""SPMD sharding, the user's side: a device `Mesh`, per-tensor annotations (`shard`), in-graph
constraints (`sharding_constraint`) and whole-model plans (`parallelize`).

    mesh = torchtpu.Mesh((2, 2), ("dp", "tp"))
    torchtpu.shard(x, mesh, ("dp", None))                       # split dim 0 over "dp"
    torchtpu.parallelize(model, mesh, {"layers.*.q_proj": torchtpu.Colwise("tp"),
                                       "layers.*.o_proj": torchtpu.Rowwise("tp"),
                                       "*": torchtpu.FSDP("dp")})

An annotation is only metadata on the tensor (`_torchtpu_sharding`, a `ShardSpec`); the
compiler propagates it through the graph and partitions the program over the mesh's devices.
A spec has one entry per tensor dim: a mesh axis name, None (replicated) or a tuple of axes
(major to minor) that together split that dim.
"""

from __future__ import annotations

import collections
import dataclasses
import fnmatch
import math
import re

import torch

from torchtpu import _C, ir_text
from torchtpu.errors import ShardingError

# Set once any Mesh exists: the executor looks for shardings only then, so programs of a
# process that never shards pay nothing per call.
ACTIVE = False
# The last Mesh created: the default of `sharding_constraint`.
_LAST: Mesh | None = None

_AXIS_NAME = re.compile(r"[A-Za-z0-9_]+\Z")


def device_count() -> int:
    """The number of PJRT devices the engine has (the CPU plugin's is TORCHTPU_CPU_DEVICES)."""
    return int(_C.device_count())


def _check_axes(axes) -> tuple[tuple[str, int], ...]:
    if not axes:
        raise ShardingError("a Mesh needs at least one axis")
    seen = set()
    for name, size in axes:
        if not isinstance(name, str) or not _AXIS_NAME.match(name):
            raise ShardingError(f"mesh axis name {name!r} must be letters, digits or '_'")
        if name in seen:
            raise ShardingError(f"mesh axis {name!r} is named twice")
        seen.add(name)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ShardingError(f"mesh axis {name!r} has size {size!r}; sizes are integers >= 1")
    return tuple(axes)


class Mesh:
    """A named, row-major grid of devices: `Mesh((2, 2), ("dp", "tp"))` is 4 devices, device
    d at coordinates (d // 2, d % 2)."""

    def __init__(self, shape, axis_names):
        global ACTIVE, _LAST
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        axis_names = (axis_names,) if isinstance(axis_names, str) else tuple(axis_names)
        if len(shape) != len(axis_names):
            raise ShardingError(f"Mesh shape {shape} has {len(shape)} axes but {len(axis_names)} names {axis_names}")
        self._axes = _check_axes(tuple(zip(axis_names, shape)))
        have = device_count()
        if self.size > have:
            raise ShardingError(
                f"{self!r} needs {self.size} devices but {have} PJRT devices are present; the CPU "
                f"plugin's device count is set with the environment variable TORCHTPU_CPU_DEVICES "
                f"(read when the engine starts), e.g. TORCHTPU_CPU_DEVICES={self.size}"
            )
        ACTIVE, _LAST = True, self

    @classmethod
    def _trusted(cls, axes) -> Mesh:
        """A mesh decoded from a spec string: validated when the user built it, so neither the
        device count is asked again nor the default mesh changed."""
        m = cls.__new__(cls)
        m._axes = _check_axes(tuple(axes))
        return m

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(n for _, n in self._axes)

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(a for a, _ in self._axes)

    @property
    def axes(self) -> list[tuple[str, int]]:
        return list(self._axes)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def axis_size(self, name: str) -> int:
        for a, n in self._axes:
            if a == name:
                return n
        raise ShardingError(f"{self!r} has no axis {name!r} (axes: {', '.join(self.axis_names)})")

    def text(self) -> str:
        """The IR's mesh declaration: `mesh<["dp"=2, "tp"=2]>`."""
        return ir_text.mesh_text(self._axes)

    def __eq__(self, other):
        return isinstance(other, Mesh) and self._axes == other._axes

    def __hash__(self):
        return hash(self._axes)

    def __repr__(self):
        return "Mesh((" + ", ".join(f'"{a}"={n}' for a, n in self._axes) + "))"


@dataclasses.dataclass(frozen=True)
class ShardSpec:
    """A normalized sharding: per tensor dim, the mesh axes splitting it (major to minor);
    axes not named anywhere replicate the tensor."""

    mesh: Mesh
    dims: tuple[tuple[str, ...], ...]

    @classmethod
    def build(cls, mesh: Mesh, spec) -> ShardSpec:
        """From a user spec: one entry per dim, each an axis name, None or a tuple of names."""
        if isinstance(spec, ShardSpec):
            if mesh is not None and spec.mesh != mesh:
                raise ShardingError(f"{spec!r} is over {spec.mesh!r}, not {mesh!r}")
            return spec
        if not isinstance(mesh, Mesh):
            raise ShardingError(f"expected a torchtpu.Mesh, got {type(mesh).__name__}")
        if isinstance(spec, str) or not isinstance(spec, (tuple, list)):
            raise ShardingError(f"a spec is a tuple with one entry per tensor dim, got {spec!r}")
        dims, used = [], set()
        for entry in spec:
            axes = () if entry is None else (entry,) if isinstance(entry, str) else entry
            if not isinstance(axes, (tuple, list)) or not all(isinstance(a, str) for a in axes):
                raise ShardingError(f"spec entry {entry!r} in {spec!r} must be an axis name, None or a tuple of names")
            for a in axes:
                if a not in mesh.axis_names:
                    raise ShardingError(f"spec {spec!r} names axis {a!r}, which {mesh!r} does not have")
                if a in used:
                    raise ShardingError(f"spec {spec!r} uses mesh axis {a!r} more than once")
                used.add(a)
            dims.append(tuple(axes))
        return cls(mesh, tuple(dims))

    def split(self, dim: int) -> int:
        """How many pieces dim `dim` is cut into."""
        n = 1
        for a in self.dims[dim]:  # a loop, not a generator: Dynamo traces this
            n *= self.mesh.axis_size(a)
        return n

    def check(self, shape, what: str | None = None) -> None:
        """Raises ShardingError unless `shape` has this rank and each dim divides evenly; dims
        that are not plain ints (symbolic) are left to the compiler."""
        shape = tuple(shape)
        what = what or f"tensor of shape {list(shape)}"
        if len(shape) != len(self.dims):
            raise ShardingError(
                f"{what} has rank {len(shape)} but the spec {self.user_spec()} has {len(self.dims)} entries"
            )
        for d, (size, axes) in enumerate(zip(shape, self.dims)):
            n = self.split(d)
            if isinstance(size, int) and size % n:
                axis = axes[0] if len(axes) == 1 else "x".join(axes)
                raise ShardingError(f"{what}: dim {d} of size {size} is not divisible by mesh axis {axis!r} (size {n})")

    def local_shape(self, shape) -> tuple[int, ...]:
        """The shape of each device's piece."""
        self.check(shape)
        return tuple(s // self.split(d) for d, s in enumerate(shape))

    def is_replicated(self) -> bool:
        return not any(self.dims)

    def user_spec(self) -> tuple:
        """The spec in the user's form: ("dp", None), (("dp", "tp"),)."""
        return tuple(None if not a else a[0] if len(a) == 1 else a for a in self.dims)

    def ir_text(self) -> str:
        """`sharding<[{"dp", "tp"}, {}]>`, the IR's sharding after a type."""
        return ir_text.sharding_text(self.dims)

    def encode(self) -> str:
        """The custom op's string argument: mesh `|` dims, e.g. `dp=2,tp=2|dp+tp,_`."""
        mesh = ",".join(f"{a}={n}" for a, n in self.mesh.axes)
        return mesh + "|" + ",".join("+".join(axes) or "_" for axes in self.dims)

    @classmethod
    def decode(cls, text: str) -> ShardSpec:
        """The inverse of `encode`."""
        try:
            mesh_part, dims_part = text.split("|")
            axes = [(a, int(n)) for a, n in (item.split("=") for item in mesh_part.split(","))]
            dims = [] if dims_part == "" else [() if d == "_" else tuple(d.split("+")) for d in dims_part.split(",")]
        except ValueError:
            raise ShardingError(f"malformed sharding spec string {text!r}") from None
        return cls.build(Mesh._trusted(axes), dims)

    def __repr__(self):
        return f"ShardSpec({self.mesh!r}, {self.user_spec()!r})"


def _describe(t: torch.Tensor, name: str | None) -> str:
    return f"tensor {name!r}" if name else f"tensor of shape {list(t.shape)}"


def _check_on_cpu(t: torch.Tensor, what: str) -> None:
    """SPMD programs read their inputs from host memory, each device its block
    (`engine/src/spmd.rs`), and return CPU tensors: a tensor elsewhere (the eager `tpu`
    device's, whose buffer is on one device) cannot be split that way."""
    if t.device.type != "cpu":
        raise ShardingError(
            f"{what} is on {t.device}; sharded (SPMD) programs take CPU tensors: the engine splits each over "
            "the mesh's devices from host memory and returns CPU results. Shard a CPU tensor (.cpu()) and keep a "
            "parallelized module on the CPU"
        )


def shard(tensor: torch.Tensor, mesh: Mesh, spec, name: str | None = None) -> torch.Tensor:
    """Annotates `tensor` (a parameter, buffer or input) with how it lies over `mesh`, and
    returns the same object."""
    s = ShardSpec.build(mesh, spec)
    if not isinstance(tensor, torch.Tensor):
        raise ShardingError(f"shard expects a tensor, got {type(tensor).__name__}")
    _check_on_cpu(tensor, _describe(tensor, name))
    s.check(tensor.shape, _describe(tensor, name))
    tensor._torchtpu_sharding = s
    return tensor


def sharding_of(t) -> ShardSpec | None:
    return getattr(t, "_torchtpu_sharding", None)


def tag(t: torch.Tensor, spec: ShardSpec) -> torch.Tensor:
    """Marks an SPMD program's output with the layout it was computed in (no checks: the
    compiler decided it)."""
    t._torchtpu_sharding = spec
    return t


def unshard(t: torch.Tensor) -> torch.Tensor:
    if hasattr(t, "_torchtpu_sharding"):
        del t._torchtpu_sharding
    return t


# In-graph constraint: a custom op, so that it survives Dynamo and AOTAutograd as one node the
# exporter writes as `tpu.sharding_constraint`. Its value is its input (a copy: a custom op's
# output may not alias its input).
@torch.library.custom_op("torchtpu::sharding_constraint", mutates_args=())
def _constraint_op(x: torch.Tensor, spec: str) -> torch.Tensor:
    return x.clone()


@_constraint_op.register_fake
def _(x, spec):
    return torch.empty_like(x)


def _setup_context(ctx, inputs, output):
    ctx.spec = inputs[1]


def _backward(ctx, grad):
    # The gradient has the value's shape and is laid out the same way (as JAX transposes
    # with_sharding_constraint).
    return torch.ops.torchtpu.sharding_constraint(grad, ctx.spec), None


_constraint_op.register_autograd(_backward, setup_context=_setup_context)


def sharding_constraint(t: torch.Tensor, spec, mesh: Mesh | None = None) -> torch.Tensor:
    """`t`, required to be laid out as `spec` at this point of the program (inside a compiled
    forward); `mesh` defaults to the last Mesh created."""
    mesh = mesh if mesh is not None else _LAST
    if mesh is None and not isinstance(spec, ShardSpec):
        raise ShardingError("sharding_constraint needs a mesh: create a torchtpu.Mesh first or pass mesh=")
    s = ShardSpec.build(mesh, spec)
    s.check(t.shape)
    return torch.ops.torchtpu.sharding_constraint(t, s.encode())


# Plans.


@dataclasses.dataclass(frozen=True)
class Colwise:
    """Split a Linear's output features (weight [out, in] -> (axis, None), bias -> (axis,)),
    or an Embedding's embedding dim (weight -> (None, axis))."""

    axis: str


@dataclasses.dataclass(frozen=True)
class Rowwise:
    """Split a Linear's input features (weight -> (None, axis), bias replicated), or an
    Embedding's vocabulary (weight -> (axis, None))."""

    axis: str


@dataclasses.dataclass(frozen=True)
class Replicate:
    """Leave the module's parameters replicated."""


@dataclasses.dataclass(frozen=True)
class FSDP:
    """Shard every parameter of the module on `axis` along its largest dim that divides evenly
    and no other style has split (applied after the other styles)."""

    axis: str


def _torch_style(style, tp_axis: str):
    """PyTorch's ColwiseParallel / RowwiseParallel as our styles (None: not one of them)."""
    try:
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    except Exception:  # torch built without distributed
        return None
    if isinstance(style, ColwiseParallel):
        return Colwise(tp_axis)
    if isinstance(style, RowwiseParallel):
        return Rowwise(tp_axis)
    return None


def _split_module(mesh, name, module, style):
    colwise = isinstance(style, Colwise)
    if isinstance(module, torch.nn.Linear):
        shard(module.weight, mesh, (style.axis, None) if colwise else (None, style.axis), name=f"{name}.weight")
        if module.bias is not None and colwise:
            shard(module.bias, mesh, (style.axis,), name=f"{name}.bias")
    elif isinstance(module, torch.nn.Embedding):
        shard(module.weight, mesh, (None, style.axis) if colwise else (style.axis, None), name=f"{name}.weight")
    else:
        raise ShardingError(
            f"{type(style).__name__} applies to nn.Linear and nn.Embedding; module {name!r} is a {type(module).__name__}"
        )


def _fsdp(mesh, name, param, axis):
    s = sharding_of(param)
    dims = list(s.dims) if s is not None else [()] * param.dim()
    if any(axis in d for d in dims):
        return
    n = mesh.axis_size(axis)
    free = [d for d in range(param.dim()) if not dims[d] and param.shape[d] % n == 0]
    if not free:
        return
    best = max(free, key=lambda d: (param.shape[d], -d))  # largest; ties: the lower index
    dims[best] = (axis,)
    shard(param, mesh, tuple(dims), name=name)


def parallelize(model: torch.nn.Module, mesh: Mesh, plan: dict, tp_axis: str | None = None) -> torch.nn.Module:
    """Annotates `model`'s parameters in place after `plan` ({fnmatch pattern over
    named_modules() names: style}) and returns the model. Styles apply in plan order, FSDP
    last; PyTorch's ColwiseParallel/RowwiseParallel act on `tp_axis` (default: the mesh's
    last axis)."""
    tp_axis = tp_axis if tp_axis is not None else mesh.axis_names[-1]
    mesh.axis_size(tp_axis)  # raises for an unknown axis
    for kind, named in (("parameter", model.named_parameters()), ("buffer", model.named_buffers())):
        for pn, t in named:
            _check_on_cpu(t, f"{kind} {pn!r}")  # before any is annotated
    modules = dict(model.named_modules())
    matched = []
    for pattern, style in plan.items():
        if not isinstance(style, (Colwise, Rowwise, Replicate, FSDP)):
            converted = _torch_style(style, tp_axis)
            if converted is None:
                raise ShardingError(
                    f"plan entry {pattern!r}: unknown style {style!r} (Colwise, Rowwise, Replicate, FSDP, "
                    "or torch's ColwiseParallel/RowwiseParallel)"
                )
            style = converted
        names = [n for n in modules if fnmatch.fnmatchcase(n, pattern)]
        if not names:
            some = ", ".join(repr(n) for n in list(modules)[1:11]) or "(only the root, '')"
            raise ShardingError(f"plan pattern {pattern!r} matches no module; modules include {some}")
        matched.append((style, names))
    for style, names in matched:
        if isinstance(style, (Colwise, Rowwise)):
            for n in names:
                _split_module(mesh, n, modules[n], style)
    for style, names in matched:
        if isinstance(style, FSDP):
            params = {}
            for n in names:
                for pn, p in modules[n].named_parameters():
                    params.setdefault(id(p), (f"{n}.{pn}" if n else pn, p))
            for pn, p in params.values():
                _fsdp(mesh, pn, p, style.axis)
    return model


def describe(model: torch.nn.Module) -> list[tuple[str, tuple, str]]:
    """(name, shape, sharding text or "replicated") for each parameter and buffer."""
    out = []
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        s = sharding_of(t)
        out.append((name, tuple(t.shape), "replicated" if s is None or s.is_replicated() else s.ir_text()))
    return out


# --- explain -------------------------------------------------------------------------------

# The SPMD programs compiled last, `(graph name, _C.Program)`: their `sharding` plan,
# `partition_shapes()` and `compiled_collectives()` (for tests and debugging).
RECENT_PROGRAMS: collections.deque = collections.deque(maxlen=64)

# While `explain` runs: the (graph, plan, input tensors) of every SPMD program it met.
EXPLAINING: list | None = None


def _user_frame(node) -> str | None:
    """The last `File "...", line N` of an FX node's stack trace: the user's code."""
    trace = node.meta.get("stack_trace") if node is not None else None
    if not trace:
        return None
    frames = [line.strip() for line in trace.splitlines() if line.strip().startswith("File ")]
    if not frames:
        return None
    path, _, rest = frames[-1][len("File ") :].partition(", line ")
    return f"{path.strip(chr(34))}:{rest.split(',')[0]}"


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _layout_text(layout: dict) -> str:
    origin = layout["origin"]
    origin = {"user": "annotated", "unannotated": "replicated, not annotated"}.get(
        origin, origin.replace("rule:", "rule ")
    )
    return f"{layout['text']}  ({origin})"


def _plan_backward(out) -> None:
    """Runs the backward of `out`'s tensors that need one (a training call) with gradients of
    ones and no `.grad` written: a compiled backward plans (compiles) its SPMD programs and
    computes eagerly, as explain's forward does. An output's gradient in the real call is a
    tensor PyTorch makes, unannotated, as these are."""
    from torch.utils import _pytree

    roots = [t for t in _pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    if not roots:
        return
    # The leaves the graph reaches: asking for their gradients runs every node above them,
    # the compiled backward included, and accumulates nothing.
    leaves, seen, stack = [], set(), [t.grad_fn for t in roots]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        variable = getattr(fn, "variable", None)
        if isinstance(variable, torch.Tensor):
            leaves.append(variable)
        stack.extend(f for f, _ in fn.next_functions)
    if leaves:
        torch.autograd.grad(roots, leaves, grad_outputs=[torch.ones_like(t) for t in roots], allow_unused=True)


def explain(compiled, *args, **kwargs) -> dict:
    """Plans `compiled(*args, **kwargs)` without running anything on the devices: traces and
    compiles it under the caller's grad mode, as the real call will (a training call: its
    forward, and its backward from gradients of ones; under `torch.no_grad()`: the inference
    graph), so the programs are made and cached for the real call; computes the results
    eagerly; and prints per graph every input, parameter and output with its layout and
    origin, every collective with its bytes per device and the user code that needs it, and
    the communication per call. No `.grad` is written. Returns `{graph: plan}` (the dicts of
    `torchtpu.stats()["graphs"][graph]["sharding"]`, with `input_names` and each
    collective's `source` added)."""
    global EXPLAINING
    module = getattr(compiled, "_orig_mod", compiled)
    names = {}
    if isinstance(module, torch.nn.Module):
        names.update({id(p): n for n, p in module.named_parameters()})
        names.update({id(b): n for n, b in module.named_buffers()})
    for i, a in enumerate(args):
        names.setdefault(id(a), f"input {i}")
    for k, a in kwargs.items():
        names.setdefault(id(a), f"input {k!r}")
    EXPLAINING = []
    try:
        # Under the caller's grad mode, as the real call will run: with gradients, Dynamo's
        # graph is AOTAutograd's forward, and the backward is planned here too.
        out = compiled(*args, **kwargs)
        _plan_backward(out)
        met = EXPLAINING
    finally:
        EXPLAINING = None
    report = {}
    lines = []
    for graph, plan, tensors in met:
        plan = dict(plan)
        plan["input_names"] = [names.get(id(t), f"arg {i}") for i, t in enumerate(tensors)]
        for c in plan["collectives"]:
            c["source"] = _user_frame(graph.nodes_by_line.get(c["line"])) if c["line"] else None
        report[graph.name] = plan
        mesh = ", ".join(f"{a}={n}" for a, n in plan["mesh"])
        lines.append(f"graph {graph.name}: {plan['num_partitions']} devices, mesh ({mesh})")
        for name, layout, t in zip(plan["input_names"], plan["inputs"], tensors):
            lines.append(f"  in  {name:<40} {str(list(t.shape)):<14} {_layout_text(layout)}")
        for i, layout in enumerate(plan["outputs"]):
            lines.append(f"  out {i:<40} {'':<14} {_layout_text(layout)}")
        for c in plan["collectives"]:
            where = c["source"] or (f"IR line {c['line']}" if c["line"] else "graph output")
            lines.append(
                f"  {c['collective']:<12} {_fmt_bytes(c['bytes_per_device']):>10}/device  before {c['consumer']}  at {where}"
            )
        lines.append(f"  communication per call: {_fmt_bytes(plan['total_bytes_per_device'])} per device")
    print("\n".join(lines) if lines else "explain: no sharded graph (nothing is annotated)")
    return report
