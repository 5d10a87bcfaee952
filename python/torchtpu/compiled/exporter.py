"""Writes an ATen-level FX graph (what AOTAutograd hands over) into torchtpu's IR text form.

Conventions (see docs/ir.md and docs/lowering.md): tensor arguments become operands in schema
order; every other argument becomes an attribute named after its schema parameter, with
defaults filled in and `none` for an absent optional tensor; a `Tensor?[]` list (index_put's
`indices`) becomes operands for the present entries plus an `indices` attribute listing their
positions. Result types come from each node's FakeTensor metadata (`meta["val"]`), i.e. from
PyTorch itself.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any

import torch
import torch.fx

from torchtpu import index_checks, ir_text
from torchtpu.errors import OpArgumentError, UnsupportedError
from torchtpu.ir_text import IR_DTYPES, GraphWriter, string_text, type_text, value_text
from torchtpu.op_names import base_name, op_name  # noqa: F401  (re-exported: callers name them here)


class Unsupported(UnsupportedError):
    """The graph cannot be expressed in the IR; `ops` names the offending ops and `fx_node` the
    node being written when that is where it failed (the backend then runs that node eagerly
    and compiles the rest)."""

    def __init__(self, message: str, ops: list[str] | None = None):
        super().__init__(message, ops or [])
        self.fx_node = None


@dataclasses.dataclass
class InputSpec:
    kind: str  # "arg": the graph's positional input `index`; "const": a module attribute
    index: int = -1
    value: torch.Tensor | None = None


@dataclasses.dataclass
class OutputSpec:
    # "ir": IR output `index`; "input": the graph's positional input `index` returned as it is
    # (no copy: AOTAutograd's forward graphs return parameters as saved tensors); "view": a
    # view of positional input `index`, made by applying the view ops `value` ((op, args,
    # kwargs), in order) to it; "none"; "value": a Python value returned as is
    kind: str
    index: int = -1
    value: Any = None
    # Eager's strides for this output when they are not the contiguous ones (a transposed
    # view, channels-last): the executor restrides to match; None when contiguous.
    stride: tuple | None = None


@dataclasses.dataclass
class Exported:
    text: str
    inputs: list[InputSpec]
    outputs: list[OutputSpec]
    output_is_tuple: bool
    ops: list[str]  # op names (namespace.name) in the graph, for stats and explain
    # The FX node each IR line was written for (line 1 is the graph's header): maps the
    # compiler's per-node refusals (`_C.check_lowerable`) back to the FX graph.
    nodes_by_line: dict = dataclasses.field(default_factory=dict)
    # The device mesh of the graph's sharding constraints (torchtpu.sharding.Mesh), or None.
    mesh: Any = None
    # The in-process group of the graph's collectives (`collectives.Group`), or None: the
    # graph is then one replicated program over the group's devices.
    group: Any = None
    # The tpu device a graph with no tensor inputs makes its results on (`arange(device="tpu")`
    # in `create_block_mask`), or None: such a graph runs there and returns tpu tensors.
    made_on: int | None = None


# PyTorch's functional collectives and their wait (`collectives.py`).
_COLLECTIVES = frozenset(
    (
        "_c10d_functional.all_reduce",
        "_c10d_functional.all_gather_into_tensor",
        "_c10d_functional.reduce_scatter_tensor",
        "_c10d_functional.all_to_all_single",
        "_c10d_functional.broadcast",
        "_c10d_functional.wait_tensor",
    )
)


def tensor_type(t, binding=None) -> str:
    """`f32[2, 3]`; symbolic sizes are evaluated under `binding` (specialize.py)."""
    if not isinstance(t, torch.Tensor):
        raise Unsupported(f"expected a tensor, got {type(t).__name__}")
    if t.dtype not in IR_DTYPES:
        raise Unsupported(f"dtype {t.dtype} is not supported")
    if t.layout != torch.strided:
        raise Unsupported(f"layout {t.layout} is not supported")
    dims = []
    for d in binding.shape(t) if binding is not None else t.shape:
        if not isinstance(d, int):
            raise Unsupported("symbolic shapes reach the exporter only after specialisation", ["<dynamic shape>"])
        dims.append(d)
    return type_text(t.dtype, dims)


def attr_text(v) -> str | None:
    """The IR text of a non-tensor argument, or None to leave it out (devices, layouts)."""
    if isinstance(v, torch.dtype):
        if v not in IR_DTYPES:
            raise Unsupported(f"dtype {v} is not supported")
        return IR_DTYPES[v]
    if isinstance(v, (torch.device, torch.layout)):
        return None
    if isinstance(v, torch.memory_format):
        return string_text(str(v))
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise Unsupported("symbolic scalars reach the exporter only after specialisation", ["<dynamic shape>"])
    text = value_text(v)
    if text is not None:
        return text
    if isinstance(v, complex):
        raise Unsupported("complex scalar arguments are not supported")
    raise Unsupported(f"argument of type {type(v).__name__} is not supported")


def is_non_overlapping_and_dense(shape, stride) -> bool:
    """Whether the strides are a permutation of a contiguous layout (each element stored
    once, no gaps), i.e. whether a dense buffer can be viewed with them."""
    dims = sorted((st, sz) for sz, st in zip(shape, stride) if sz != 1)
    expected = 1
    for st, sz in dims:
        if st != expected:
            return False
        expected *= sz
    return True


def _is_tensor_type(t) -> bool:
    return isinstance(t, torch.TensorType)


def _optional_of(t):
    return t.getElementType() if isinstance(t, torch.OptionalType) else None


def _list_of(t):
    return t.getElementType() if isinstance(t, torch.ListType) else None


def is_contiguous(shape, stride) -> bool:
    """Row-major strides for `shape`, ignoring the strides of size-1 dims."""
    expected = 1
    for sz, st in reversed(list(zip(shape, stride))):
        if sz != 1 and st != expected:
            return False
        expected *= sz
    return True


class _Writer:
    def __init__(self, gm: torch.fx.GraphModule, name: str, binding=None):
        self.gm = gm
        self.name = name
        # Symbolic sizes evaluated for one input signature (specialize.Binding), or None for
        # a graph with static shapes.
        self.binding = binding
        self.scalars: dict[torch.fx.Node, object] = {}  # size nodes -> their value
        self.values: dict[torch.fx.Node, str] = {}  # fx node -> IR value (or None: not a tensor)
        self.multi: dict[torch.fx.Node, int] = {}  # fx node -> number of IR results
        self.out = GraphWriter(name)
        self.inputs: list[InputSpec] = []
        self.arg_index: dict[torch.fx.Node, int] = {}  # placeholder -> positional input index
        self.ops: list[str] = []
        self.line_nodes: list[torch.fx.Node] = []  # the FX node of each entry of `lines`
        self.mesh = None  # the one mesh of the graph's sharding constraints
        self.group = None  # the one in-process group of the graph's collectives (`collectives.py`)

    def ref(self, n) -> str:
        if not isinstance(n, torch.fx.Node):
            raise Unsupported(f"expected a tensor-producing node, got {n!r}")
        v = self.values.get(n)
        if v is None:
            raise Unsupported(f"value {n.name} is not a tensor")
        return v

    def concrete(self, v):
        """An argument with size nodes and symbolic numbers replaced by their values."""
        if isinstance(v, torch.fx.Node) and v in self.scalars:
            return self.scalars[v]
        if isinstance(v, (list, tuple)):
            return type(v)(self.concrete(x) for x in v)
        if self.binding is not None and isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return self.binding.value(v)
        return v

    def size_node(self, node) -> bool:
        """Under a binding, a node computing a size becomes a number (no IR); an assertion on
        sizes is checked here."""
        from torchtpu.compiled.specialize import is_size_node

        if self.binding is None or not is_size_node(node):
            return False
        if node.target is torch.ops.aten._assert_scalar.default:
            if not self.concrete(node.args[0]):
                raise Unsupported(f"size assertion failed for these inputs: {node.args[1:]}")
            return True
        self.scalars[node] = self.binding.value(node.meta["val"])
        self.values[node] = None
        return True

    def add_input(self, val, spec: InputSpec) -> str:
        name = self.out.param(tensor_type(val, self.binding))
        self.inputs.append(spec)
        return name

    def number_operand(self, value, dtype) -> str:
        """A Python number passed for a tensor parameter, as a 0-d constant input of `dtype`."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():  # a real tensor, even while AOTAutograd traces
            const = torch.tensor(value, dtype=dtype)
        return self.add_input(const, InputSpec("const", value=const))

    def placeholder(self, node, index: int):
        val = node.meta.get("val")
        self.arg_index[node] = index
        if isinstance(val, torch.Tensor):
            self.values[node] = self.add_input(val, InputSpec("arg", index))
        elif self.size_node(node):
            pass
        elif not node.users:
            # A size (SymInt) input of a graph specialised to concrete sizes: baked in, unused.
            self.values[node] = None
        else:
            raise Unsupported(f"non-tensor graph input {node.name} ({type(val).__name__})", ["<dynamic shape>"])

    def get_attr(self, node):
        value = getattr(self.gm, node.target)
        if not isinstance(value, torch.Tensor):
            raise Unsupported(f"attribute {node.target} is not a tensor")
        self.values[node] = self.add_input(value, InputSpec("const", value=value))

    def call(self, node):
        target = node.target
        if self.size_node(node):
            return
        if target is operator.getitem:
            src, idx = node.args
            if src in self.multi:
                if not isinstance(idx, int) or not 0 <= idx < self.multi[src]:
                    raise Unsupported(f"getitem {idx} out of range")
                self.values[node] = None if self.values.get(src) is None else f"{self.values[src]}#{idx}"
                return
            raise Unsupported(f"getitem on {src.name}, which is not a multi-result op")
        args, kwargs = node.args, node.kwargs
        if is_out_dtype(node):
            # out_dtype(op, dtype, *args): `op` with its result in `dtype` (torchao's int8
            # matmuls into int32). Written as `op` with that result type: the rule sums in it.
            target, args = node.args[0], node.args[2:]
        full = op_name(target)
        if full == "torchtpu.sharding_constraint.default":
            return self.sharding_constraint(node)
        if full is not None and full.rsplit(".", 1)[0] in _COLLECTIVES:
            return self.collective(node, full.rsplit(".", 1)[0])
        if full is None:
            raise Unsupported(
                f"call to {getattr(target, '__name__', target)} is not an ATen op",
                [str(getattr(target, "__name__", target))],
            )
        base = ".".join(full.split(".")[:2])
        self.ops.append(base)
        _check_matrix_dtypes(args, node, full, base)
        _check_empty_reduction(node, full, base)
        schema = target._schema
        operands: list[str] = []
        attrs: list[tuple[str, str]] = []
        for i, arg in enumerate(schema.arguments):
            if i < len(args) and not arg.kwarg_only:
                value = args[i]
            elif arg.name in kwargs:
                value = kwargs[arg.name]
            elif arg.has_default_value():
                value = arg.default_value
            else:
                raise Unsupported(f"{full}: missing argument {arg.name}")
            value = self.concrete(value)
            t = arg.type
            if isinstance(value, complex) and _is_tensor_type(t):
                # The IR has no complex attributes: a complex Python number passed for a Tensor
                # parameter (`z * 1j`) becomes a 0-d c128 constant operand, which the rule
                # converts to the result dtype as eager converts a wrapped number. (A complex
                # `Scalar` parameter, `full(..., 1j)`, stays unsupported below.)
                operands.append(self.number_operand(value, torch.complex128))
            elif (
                _is_tensor_type(t)
                and isinstance(value, (int, float, bool))
                and i == 0
                and (base in _CONVERSIONS or not _has_tensor_operand(node))
            ):
                # A Python number as the op's own tensor (`_to_copy(0.1, dtype=f32)`, which
                # tracing leaves of a constant inside flex_attention's vmapped score_mod), or
                # an op on sizes alone (`torch.div(seq_len, w, rounding_mode="trunc")` with a
                # symbolic `seq_len`, Longformer's, a number under a binding): a 0-d constant
                # operand in the number's own dtype (f64, i64 or bool), as eager wraps it.
                operands.append(self.number_operand(value, _WRAPPED_DTYPES[type(value)]))
            elif _is_tensor_type(t) and isinstance(value, (int, float, bool)):
                # Decompositions pass Python numbers for Tensor parameters (mul.Tensor(x, 16)):
                # a scalar attribute, which the lowering reads as a wrapped number.
                attrs.append((arg.name, attr_text(value)))
            elif _is_tensor_type(t):
                operands.append(self.ref(value))
            elif _optional_of(t) is not None and _is_tensor_type(_optional_of(t)):
                if value is None:
                    attrs.append((arg.name, "none"))
                else:
                    operands.append(self.ref(value))
            elif _list_of(t) is not None and _is_tensor_type(_list_of(t)):
                operands.extend(self.ref(v) for v in value)
            elif _list_of(t) is not None and _optional_of(_list_of(t)) is not None:
                present = [i for i, v in enumerate(value) if v is not None]
                operands.extend(self.ref(value[i]) for i in present)
                attrs.append((arg.name, "[" + ", ".join(str(i) for i in present) + "]"))
            else:
                text = attr_text(value)
                if text is not None:
                    attrs.append((arg.name, text))
        val = node.meta.get("val")
        results = list(val) if isinstance(val, (list, tuple)) else [val]
        if any(r is not None and not isinstance(r, torch.Tensor) for r in results):
            raise Unsupported(f"{full} returns a non-tensor", [".".join(full.split(".")[:2])])
        is_multi = isinstance(val, (list, tuple))
        # Results that are None (optional outputs) still need a slot: give them a dummy type.
        types = [tensor_type(r, self.binding) if r is not None else "f32[0]" for r in results]
        if is_multi:
            self.multi[node] = len(types)
        name = self.out.op(full, operands, sorted(attrs), types if is_multi else types[0], comment=node.name)
        self.line_nodes.append(node)
        self.values[node] = name

    def sharding_constraint(self, node):
        """`%v = tpu.sharding_constraint(%x) : f32[8, 4] sharding<[{"dp"}, {}]>`; the graph
        declares the constraint's mesh once (`mesh<...>` after the header)."""
        from torchtpu.errors import ShardingError
        from torchtpu.sharding import ShardSpec

        x = node.args[0]
        spec = node.args[1] if len(node.args) > 1 else node.kwargs["spec"]
        s = ShardSpec.decode(spec)
        val = node.meta.get("val")
        ty = tensor_type(val, self.binding)
        s.check(self.binding.shape(val) if self.binding is not None else val.shape, f"sharding_constraint {node.name}")
        if self.mesh is not None and self.mesh != s.mesh:
            raise ShardingError(f"one graph uses two meshes: {self.mesh!r} and {s.mesh!r} (at {node.name})")
        self.mesh = s.mesh
        self.ops.append("tpu.sharding_constraint")
        name = self.out.op("tpu.sharding_constraint", [self.ref(x)], (), ty, annotation=s.ir_text(), comment=node.name)
        self.line_nodes.append(node)
        self.values[node] = name

    def collective(self, node, base: str):
        """A functional collective of an in-process group as the compiler's `c10d.*` op, its
        replica groups the group's ranks (`collectives.py`); `wait_tensor` is its input."""
        from torchtpu import collectives

        if base == collectives.WAIT:
            self.values[node] = self.ref(node.args[0])
            return
        reason = collectives.split_reason(node)
        if reason is not None:
            raise Unsupported(reason, [base])
        group = collectives.in_process_group(collectives._group_name(node))
        if self.group is not None and self.group.name != group.name:
            raise Unsupported(
                f"{base}: one graph with collectives of two groups ({self.group.name!r}, {group.name!r})", [base]
            )
        self.group = group
        group_attrs = ir_text.group_attrs(group.size)
        a = node.args
        x = self.ref(a[0])
        ty = tensor_type(node.meta.get("val"), self.binding)
        op = base.split(".", 1)[1]
        if op == "all_reduce":
            line = ("c10d.all_reduce", [*group_attrs, ("reduce_op", string_text(a[1]))])
        elif op == "all_gather_into_tensor":
            line = ("c10d.all_gather", [("dim", "0"), *group_attrs])
        elif op == "reduce_scatter_tensor":
            line = ("c10d.reduce_scatter", [("dim", "0"), *group_attrs, ("reduce_op", string_text(a[1]))])
        elif op == "all_to_all_single":
            line = ("c10d.all_to_all", [("concat_dim", "0"), *group_attrs, ("split_dim", "0")])
        else:  # broadcast
            line = ("c10d.broadcast", [*group_attrs, ("src", str(int(a[1])))])
        self.ops.append(base)
        name = self.out.op(line[0], [x], line[1], ty, comment=node.name)
        self.line_nodes.append(node)
        self.values[node] = name

    def view_of_input(self, node):
        """(positional input index, view ops) where `node` is a chain of view ops on a graph
        input, else None. Such an output is made at run time by those views of the caller's
        tensor, not by the program: AOTAutograd regenerates an output that aliases an input
        from the compiled output's own sizes and strides when its views have symbolic
        arguments (Longformer's overlapping `as_strided` chunks), which a program's dense
        copy gets wrong."""
        chain = []
        while node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and node.target.is_view:
            chain.append((node.target, self.concrete(tuple(node.args[1:])), self.concrete(dict(node.kwargs))))
            node = node.args[0]
            if not isinstance(node, torch.fx.Node):
                return None
        if not chain or node.op != "placeholder" or not isinstance(node.meta.get("val"), torch.Tensor):
            return None
        return self.arg_index[node], chain[::-1]

    def output(self, node):
        outs = node.args[0]
        is_tuple = isinstance(outs, (list, tuple))
        items = list(outs) if is_tuple else [outs]
        specs: list[OutputSpec] = []
        refs: list[str] = []
        types: list[str] = []
        # AOTAutograd describes each forward output; tensors saved for the backward graph only
        # feed torchtpu's own backward program, which reads them contiguous: restriding them
        # to eager's layout would cost a copy here and another one at the backward's input.
        descs = node.meta.get("desc")
        if not isinstance(descs, (list, tuple)) or len(descs) != len(items):
            descs = [None] * len(items)
        for item, desc in zip(items, descs):
            saved_for_backward = type(desc).__name__.startswith("SavedForBackwards")
            if item is None:
                specs.append(OutputSpec("none"))
            elif isinstance(item, torch.fx.Node) and item in self.scalars:
                specs.append(OutputSpec("value", value=self.scalars[item]))
            elif (
                isinstance(item, torch.fx.Node)
                and item.op == "placeholder"
                and isinstance(item.meta.get("val"), torch.Tensor)
            ):
                # An input returned unchanged: hand back the caller's tensor, as eager does,
                # instead of a copy made by the program.
                specs.append(OutputSpec("input", self.arg_index[item]))
            elif self.binding is not None and (view := self.view_of_input(item)) is not None:
                specs.append(OutputSpec("view", view[0], value=view[1]))
            elif isinstance(item, torch.fx.Node) and isinstance(item.meta.get("val"), torch.Tensor):
                val = item.meta["val"]
                b = self.binding
                shape, strides = (
                    (b.shape(val), b.stride(val)) if b is not None else (tuple(val.shape), tuple(val.stride()))
                )
                stride = None
                # Only dense, non-overlapping layouts (permutations of contiguous) are
                # reproduced; expanded views (stride 0) come back contiguous, as values.
                if (
                    not saved_for_backward
                    and math.prod(shape) > 1
                    and all(isinstance(s, int) for s in strides)
                    and not is_contiguous(shape, strides)
                    and is_non_overlapping_and_dense(shape, strides)
                ):
                    stride = strides
                specs.append(OutputSpec("ir", len(refs), stride=stride))
                refs.append(self.ref(item))
                types.append(tensor_type(val, b))
            elif isinstance(item, (int, float, bool)):
                specs.append(OutputSpec("value", value=item))
            else:
                raise Unsupported(f"graph output {item!r} is not a tensor", ["<non-tensor output>"])
        return specs, refs, types, is_tuple


# Matrix products and the positions of their matrix operands: eager's kernels refuse operands
# of different dtypes, which the meta kernels (so Dynamo and make_fx) let through.
_MATRIX_OPERANDS = {
    "aten.mm": (0, 1),
    "aten.bmm": (0, 1),
    "aten.dot": (0, 1),
    "aten.mv": (0, 1),
    "aten.vdot": (0, 1),
    "aten.addmm": (1, 2),
    "aten.baddbmm": (1, 2),
    "aten.addbmm": (1, 2),
    "aten.addmv": (1, 2),
}


# Conversions whose own tensor may be a Python number (their rules take an operand, not a
# wrapped-number attribute as binary ops' `self`/`other`).
_CONVERSIONS = frozenset({"aten._to_copy"})
# The dtype of a Python number wrapped as a tensor operand.
_WRAPPED_DTYPES = {bool: torch.bool, int: torch.int64, float: torch.float64}


def _has_tensor_operand(node: torch.fx.Node) -> bool:
    """Whether any argument of `node` is a tensor value (not a number or a size)."""
    found = []
    torch.fx.map_arg((node.args, node.kwargs), lambda n: found.append(isinstance(n.meta.get("val"), torch.Tensor)))
    return any(found)


def _check_matrix_dtypes(args, node, full: str, base: str) -> None:
    positions = _MATRIX_OPERANDS.get(base)
    if positions is None:
        return
    vals = [
        args[i].meta.get("val") if i < len(args) and isinstance(args[i], torch.fx.Node) else None for i in positions
    ]
    dtypes = [v.dtype for v in vals if isinstance(v, torch.Tensor)]
    if len(set(dtypes)) > 1:
        from torchtpu.index_checks import user_line

        where = user_line(node.meta.get("stack_trace"))
        raise OpArgumentError(
            f"{full}: expected its matrix operands to have the same dtype, as eager does, but got "
            f"{' and '.join(str(d) for d in dtypes)}{f' ({where})' if where else ''}; cast one (x.to(w.dtype)) "
            "or use torch.autocast"
        )


# Reductions without an identity: eager refuses them over no elements (CPU: "Expected
# reduction dim to be specified for input.numel() == 0"), a lowering would give -inf or 0.
_NO_IDENTITY = {"aten.max", "aten.min", "aten.argmax", "aten.argmin", "aten.amax", "aten.amin"}


def _check_empty_reduction(node, full: str, base: str) -> None:
    if base not in _NO_IDENTITY or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return
    val = node.args[0].meta.get("val")
    if not isinstance(val, torch.Tensor) or val.numel() != 0:
        return
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    dims = [] if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    if base in ("aten.amax", "aten.amin") and not dims:
        dims = list(range(val.dim()))
    if not isinstance(dims, list) or not all(isinstance(d, int) for d in dims):
        return
    empty = [d for d in dims if val.shape[d] == 0] if dims else [None]
    if empty:
        what = "specify a reduction dim of non-zero size" if empty[0] is None else f"dim {empty[0]} has size 0"
        raise OpArgumentError(
            f"{full}: cannot reduce over zero elements of a {list(val.shape)} tensor ({what}), as eager refuses"
        )


def export(gm: torch.fx.GraphModule, name: str = "graph", binding=None) -> Exported:
    """IR text plus how to map the FX graph's inputs and outputs onto the IR's. A graph with
    symbolic shapes is exported for the sizes `binding` (specialize.Binding) gives."""
    w = _Writer(gm, name, binding)
    out = None
    index = 0
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            w.placeholder(node, index)
            index += 1
        elif node.op == "get_attr":
            w.get_attr(node)
        elif node.op == "call_function":
            try:
                w.call(node)
            except Unsupported as e:
                e.fx_node = e.fx_node or node
                raise
        elif node.op == "output":
            out = w.output(node)
        else:
            raise Unsupported(f"FX node kind {node.op} ({node.target}) is not supported", [str(node.target)])
    specs, refs, types, is_tuple = out
    # The IR declares `sym` lines (none are written here), then the mesh, then the nodes.
    if w.mesh is not None:
        w.out.declare_mesh(w.mesh.text())
    text = w.out.text(refs, types)
    first = w.out.first_op_line()
    nodes_by_line = {first + i: n for i, n in enumerate(w.line_nodes)}
    return Exported(text, w.inputs, specs, is_tuple, w.ops, nodes_by_line, w.mesh, w.group, _made_on(gm))


def _made_on(gm: torch.fx.GraphModule) -> int | None:
    """The tpu device of the results of a graph that takes no tensors (see `Exported.made_on`)."""
    if any(isinstance(n.meta.get("val"), torch.Tensor) for n in gm.graph.nodes if n.op == "placeholder"):
        return None
    outputs = next((n for n in gm.graph.nodes if n.op == "output"), None)
    vals = torch.fx.node.map_arg(outputs.args, lambda n: n.meta.get("val")) if outputs is not None else ()
    flat = torch.utils._pytree.tree_leaves(vals)
    return next((v.device.index or 0 for v in flat if isinstance(v, torch.Tensor) and v.device.type == "tpu"), None)


# The ops `out_dtype` is lowered for: matrix products whose rule sums in the result dtype.
OUT_DTYPE_OPS = frozenset({"aten.mm", "aten.bmm", "aten.addmm"})


def is_out_dtype(node: torch.fx.Node) -> bool:
    """A call of `torch.ops.higher_order.out_dtype(op, dtype, *args)`."""
    return node.op == "call_function" and node.target is getattr(torch.ops.higher_order, "out_dtype", None)


def unsupported_nodes(
    gm: torch.fx.GraphModule, supported: set[str], sizes_known: bool = False
) -> dict[torch.fx.Node, str]:
    """Nodes the compiler cannot take, with the reason (op not lowered, dtype, ...). With
    `sizes_known` (a binding will give every size), size computations are not ops."""
    from torchtpu.compiled.specialize import is_size_node

    bad = {}
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if sizes_known and is_size_node(node):
            continue
        base = base_name(node.args[0] if is_out_dtype(node) else node.target)
        if is_out_dtype(node) and base not in OUT_DTYPE_OPS:
            bad[node] = f"out_dtype of {base or node.args[0]} (lowered for {', '.join(sorted(OUT_DTYPE_OPS))})"
            continue
        if base == "torchtpu.sharding_constraint":
            continue  # written as tpu.sharding_constraint, a layout the compiler keeps
        if index_checks.is_assert(node):
            continue  # a device assert: `index_checks.instrument` makes it a flag output
        if base in _COLLECTIVES:
            from torchtpu.collectives import split_reason

            reason = split_reason(node)  # in the program (in-process group) or split at it
            if reason is not None:
                bad[node] = reason
            continue
        if base is None:
            bad[node] = f"{getattr(node.target, '__name__', node.target)} is not an ATen op"
            continue
        if base not in supported:
            bad[node] = f"no lowering for {base}"
            continue
        vals = node.meta.get("val")
        for v in vals if isinstance(vals, (list, tuple)) else [vals]:
            if isinstance(v, torch.Tensor) and v.dtype not in IR_DTYPES:
                bad[node] = f"{base} on dtype {v.dtype}"
    return bad
