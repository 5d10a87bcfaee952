"""How an ATen op runs on the `tpu` device: the Python path.

Every op without a kernel of its own (see `_kernels.py`) reaches the native boxed fallback
(`csrc/dispatch.cpp`), which runs views and cached programs itself (`_native.py`); a miss, or
a case the native path leaves alone, comes to `run`. By the op's schema:
- a view (returns alias an argument, nothing written) runs its Meta kernel on the `tpu`
  tensors themselves: PyTorch computes sizes, strides and offset, and the result shares the
  argument's storage, hence its device data (`_storage.py`);
- a functional op runs as a one-op program (`_programs.py`) on the device buffers of its
  tensor arguments (a view's `as_strided` is the program's first step); results become new
  `tpu` tensors;
- an in-place op (`add_`) or out= op runs its functional form, casts where eager would, and
  writes the result into the mutated tensors (through their views into shared storage);
- an op the compiler has no lowering for (or cannot export) runs on the CPU: arguments are
  copied to the host, the op runs there, results and mutated arguments are copied back. That
  fallback is counted per op in `torchtpu.stats()["eager_cpu_fallbacks"]` and warned about
  once; under TORCHTPU_FALLBACK=error (or `torchtpu.eager.fallback("error")`) it raises
  `torchtpu.UnsupportedError` instead.
A compile or execution failure of a one-op program follows the same policy as the compiled
path's (`policy.py`); a bug inside torchtpu is raised, never turned into a fallback.
"""

from __future__ import annotations

import math
import sys

import torch

from torchtpu import _C, _stats
from torchtpu._log import warn_once
from torchtpu.compiled.exporter import Unsupported
from torchtpu.device import _defer, _modes, _native, _programs, _schema, _storage
from torchtpu.device._frames import first_user_frame
from torchtpu.device._guard import guard as _guard
from torchtpu.errors import (
    DeviceAssertError,
    DeviceOpError,
    FallbackError,
    IndexOutOfRangeError,
    TorchTPUError,
    UnsupportedError,
)
from torchtpu.ir_text import IR_DTYPES

aten = torch.ops.aten
_DK = torch._C.DispatchKey
DEVICE = "tpu"


class _CpuFallback:
    """Marks a key whose op runs on the CPU, with why."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason


class OpInfo:
    """What the schema says about an op: its kind (view, functional, inplace, out, mutating:
    `torchtpu_eager::schema`'s classification, the shim's too), the functional op for inplace
    and out, and which arguments it writes."""

    __slots__ = ("op", "name", "kind", "functional", "written", "base", "out_names", "returns", "tensor_slots")

    def __init__(self, op):
        self.op = op
        self.name = op.name()
        self.base = "aten." + self.name.split("::", 1)[1].split(".")[0] if self.name.startswith("aten::") else self.name
        schema = op._schema
        args = schema.arguments
        self.kind, self.written, _ = _schema.classify(schema)
        rets = schema.returns
        self.returns = "tuple" if len(rets) != 1 else ("list" if isinstance(rets[0].type, torch.ListType) else "one")
        # Positional Tensor parameters: a wrapped number arrives there as a Python number.
        self.tensor_slots = tuple(
            i for i, a in enumerate(args) if isinstance(a.type, torch.TensorType) and not a.kwarg_only
        )
        # What an in-place or out= op computes is its functional overload, which only torch.ops
        # can find: without one the op is mutating.
        self.functional = _functional_of(op, schema, self.written) if self.written else None
        if self.functional is None and self.kind in (_schema.INPLACE, _schema.OUT):
            self.kind = _schema.MUTATING
        self.out_names = {args[i].name for i in self.written} if self.kind == "out" else set()
        if self.functional is not None:
            # What the compiler lowers is the functional form.
            fname = self.functional.name()
            self.base = "aten." + fname.split("::", 1)[1].split(".")[0]


def _signature(args, skip=()):
    return [(a.name, str(a.type)) for i, a in enumerate(args) if i not in skip]


# A factory's tensor options: its out= form has none (the out tensor says them), its
# functional form takes them as keyword-only arguments with defaults.
_OPTIONS = {"dtype", "layout", "device", "pin_memory"}


def _without_options(args):
    return [(a.name, str(a.type)) for a in args if not (a.kwarg_only and a.name in _OPTIONS)]


def _functional_of(op, schema, written):
    """The overload computing what `op` (in-place or out=) writes, or None."""
    ns, name = schema.name.split("::", 1)
    packet_ns = getattr(torch.ops, ns)
    if written == [0] and name.endswith("_"):
        # `add_.Tensor` is `add.Tensor`; `floor_divide_.Tensor` is `floor_divide.default`.
        packet = getattr(packet_ns, name[:-1], None)
        same = getattr(packet, op._overloadname, None) if packet is not None else None
        candidates = (
            ([same] if same is not None else []) + [getattr(packet, ov) for ov in packet.overloads()] if packet else []
        )
        want, matches = _signature(schema.arguments), (_signature,)
    else:
        packet = getattr(packet_ns, name, None)
        candidates = [getattr(packet, ov) for ov in packet.overloads()] if packet is not None else []
        # Factories (`arange.start_out`, `linspace.out`, `eye.m_out`): the functional form
        # with tensor options, the out tensor's dtype coming from the cast every out= result gets.
        want, matches = _signature(schema.arguments, skip=set(written)), (_signature, _without_options)
    candidates = [c for c in candidates if not _schema.writes(c._schema)]
    for match in matches:
        for candidate in candidates:
            if match(candidate._schema.arguments) == want:
                return candidate
    return None


_infos: dict = {}


def info_of(op) -> OpInfo:
    info = _infos.get(op)
    if info is None:
        info = _infos[op] = OpInfo(op)
        # Kept on the overload too: `OpOverload.__hash__` is Python code, an attribute read
        # is not (the per-op path reads it, and keys programs by the OpInfo).
        op._torchtpu_info = info
    return info


# ---------------------------------------------------------------- keys and leaves


def _is_tpu(t) -> bool:
    return t.device.type == DEVICE


def _flatten(x, key: list, leaves: list, floats: list, geoms: list, op_name: str) -> None:
    """Appends `x`'s part of the program key, the input buffer of each tensor leaf (tpu
    tensors and CPU scalars, in the order `_programs.build` makes inputs) with its geometry,
    and its Python floats (which may become inputs: the key then holds only a marker for each).

    A tpu leaf is passed as its storage's buffer: a view's geometry (the buffer's shape, the
    view's strides and offset) is in the key and its `as_strided` (or reshape) is the first
    step of the op's own program, instead of a program of its own."""
    if isinstance(x, torch.Tensor):
        # A tpu tensor is told by its storage's slot (cheaper than comparing `x.device`, and
        # the slot is what the leaf needs); a tpu storage without one is refused below.
        slot = None if x.is_cpu else _storage.tensor_slot(x)
        if slot is not None or _is_tpu(x):
            if slot is None or x.dtype is not slot.dtype:
                slot = _storage.checked_slot(x)  # raises the reason
                if x.dtype is not slot.dtype:
                    _retyped_leaf(x, key, leaves, geoms)
                    return
            b = slot.buffer
            leaves.append(b if b is not None and type(b) is not _storage.Pending else _storage.buffer_of(slot))
            shape = tuple(x.shape)
            if x.is_conj() or x.is_neg():
                # A lazily conjugated or negated view: the program resolves it after the view.
                geom = (slot.shape, tuple(x.stride()), x.storage_offset(), (x.is_conj(), x.is_neg()))
                key.append((x.dtype, shape) + geom)
                geoms.append(geom)
            elif x.numel() == slot.numel and x.storage_offset() == 0 and x.is_contiguous():  # _storage.is_whole
                if shape == slot.shape:
                    key.append((x.dtype, shape))
                    geoms.append(None)
                else:
                    key.append((x.dtype, shape, slot.shape))
                    geoms.append((slot.shape, None, 0))
            else:
                _storage.check_bounds(x, slot)
                geom = (slot.shape, tuple(x.stride()), x.storage_offset())
                key.append((x.dtype, shape) + geom)
                geoms.append(geom)
        elif x.dim() == 0 and x.device.type == "cpu":
            key.append(("cpu", x.dtype))
            geoms.append(None)
            leaves.append(_CpuLeaf(x, True))  # uploaded once the op's device is known (`_run`)
        elif x.device.type == "cpu" and op_name.split(".")[0] in _CPU_INDEX_OPS and not x.dtype.is_floating_point:
            # Indices may stay on the CPU, as PyTorch allows for CUDA tensors: copied per call.
            key.append(("cpu", x.dtype, tuple(x.shape)))
            geoms.append(None)
            leaves.append(_CpuLeaf(x, False))
        else:
            raise RuntimeError(
                f"Expected all tensors to be on the same device, but found at least two devices, "
                f"{DEVICE}:0 and {x.device}! (when checking arguments of {op_name}; only 0-d CPU "
                "tensors may be mixed with tpu tensors)"
            )
    elif isinstance(x, (list, tuple)):
        key.append(len(x))
        for v in x:
            _flatten(v, key, leaves, floats, geoms, op_name)
    elif type(x) is float:
        key.append(_FLOAT)
        floats.append(x)
    elif isinstance(x, (bool, int)):
        key.append((type(x), x))
    else:
        key.append(x)


def _retyped_leaf(x, key: list, leaves: list, geoms: list) -> None:
    """`_flatten`'s leaf for a view of a storage as another dtype (`view_as_complex` of a real
    tensor, `view_as_real` of a complex one): its values converted by a program of their own
    (`_storage.read`), passed as a dense buffer of its shape."""
    leaves.append(_storage.read(x))
    shape = tuple(x.shape)
    if x.is_conj() or x.is_neg():
        geom = (shape, _storage.contiguous_strides(shape), 0, (x.is_conj(), x.is_neg()))
        key.append(("retyped", x.dtype, shape) + geom)  # not a view's key: its program writes no base
        geoms.append(geom)
    else:
        key.append((x.dtype, shape))
        geoms.append(None)


class _CpuLeaf:
    """A CPU tensor among an op's leaves (a 0-d scalar, or CPU indices): uploaded to the op's
    device once that is known from its tpu leaves."""

    __slots__ = ("t", "scalar")

    def __init__(self, t, scalar: bool):
        self.t = t
        self.scalar = scalar

    def on(self, device: int):
        return _programs.scalar_buffer(self.t, device) if self.scalar else _storage.upload(self.t, device)


def mixed_devices(a: int, b: int, op_name: str) -> RuntimeError:
    return RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, {DEVICE}:{a} and "
        f"{DEVICE}:{b}! (when checking arguments of {op_name})"
    )


def op_device(leaves: list, kwargs, op_name: str) -> tuple[int, bool]:
    """The tpu device an op runs on: its tpu leaves' (all on one, or PyTorch's same-device
    error), else its `device=` argument, else the current device; and whether any leaf is a
    CPU tensor still to upload."""
    dev = -1
    cpu = False
    for b in leaves:
        if type(b) is _CpuLeaf:
            cpu = True
            continue
        d = b.device
        if d != dev:
            if dev >= 0:
                raise mixed_devices(dev, d, op_name)
            dev = d
    if dev < 0:
        given = kwargs.get("device") if kwargs else None
        if isinstance(given, torch.device) and given.type == DEVICE and given.index is not None:
            from torchtpu.device.module import check_index

            check_index(given.index)
            dev = given.index
        else:
            dev = _guard.current_device()
    return dev, cpu


_CPU_INDEX_OPS = {"aten::index", "aten::index_put_", "aten::index_put", "aten::_index_put_impl_"}
_FLOAT = "<float>"
# Under a key: the floats cannot be inputs (the op takes them only as attributes), so the
# program is kept per value under the key with the values appended.
_BAKED = "<baked>"


def _meta_of(x):
    if isinstance(x, torch.Tensor):
        if _is_tpu(x):
            return torch.empty(tuple(x.shape), dtype=x.dtype, device="meta")
        return x
    if isinstance(x, (list, tuple)):
        return type(x)(_meta_of(v) for v in x)
    return x


def _type_text(t) -> str:
    dims = ", ".join(str(d) for d in t.shape)
    where = "" if _is_tpu(t) else " (cpu)"
    return f"{IR_DTYPES.get(t.dtype, str(t.dtype))}[{dims}]{where}"


def user_frame() -> str | None:
    """The innermost frame outside torch and torchtpu: where the user called the op."""
    return first_user_frame(sys._getframe(1))[0]


# ---------------------------------------------------------------- the fallback kernel


def _wrap_numbers(info, args: tuple) -> tuple:
    """PyTorch hands a wrapped number (`x % 4` is `remainder.Tensor(x, 4)`) to a Python kernel
    as a Python number; overloads that take only Tensors need it back as a 0-d CPU tensor.
    Its dtype keeps eager's promotion: a bool stays bool, an int is int64 (a 0-d tensor does
    not widen the tensors' dtype), a float is the default dtype unless a float64 tensor is
    among the arguments (then float64, keeping the number's precision), a complex likewise."""
    out = list(args)
    for i in info.tensor_slots:
        if i < len(out) and isinstance(out[i], (bool, int, float, complex)):
            v = out[i]
            if isinstance(v, bool):
                dtype = torch.bool
            elif isinstance(v, int):
                dtype = torch.int64
            else:
                wide = any(isinstance(a, torch.Tensor) and a.dtype in (torch.float64, torch.complex128) for a in args)
                if isinstance(v, complex):
                    dtype = torch.complex128 if wide else torch.complex64
                else:
                    dtype = torch.float64 if wide else torch.get_default_dtype()
            out[i] = torch.tensor(v, dtype=dtype)
    return tuple(out)


_NUMBERS = (bool, int, float, complex)

# XLA's compile time grows with a program's operand count (on the CPU plugin about 1.8 ms per
# operand: `torch.stack` of 3000 tensors compiled for 14 s), so a cat of more tensors than
# CAT_SPLIT_ABOVE is made of cats of CAT_GROUP tensors, whose one program serves every group of
# equal shapes, and a cat of their results (itself split again if there are still too many).
CAT_SPLIT_ABOVE = 128
CAT_GROUP = 64
_CAT = aten.cat.default


def _cat_in_groups(args, kwargs):
    tensors, rest = args[0], args[1:]
    parts = [_CAT(list(tensors[i : i + CAT_GROUP]), *rest, **kwargs) for i in range(0, len(tensors), CAT_GROUP)]
    return _CAT(parts, *rest, **kwargs)


def run(op, *args, **kwargs):
    """The boxed PrivateUse1 fallback: runs `op` on the tpu device."""
    _stats.count_eager_op()
    if op is _CAT and len(args[0]) > CAT_SPLIT_ABOVE:
        return _cat_in_groups(args, kwargs)
    info = getattr(op, "_torchtpu_info", None) or info_of(op)
    if info.tensor_slots:
        n = len(args)
        for i in info.tensor_slots:
            if i < n and type(args[i]) in _NUMBERS:
                args = _wrap_numbers(info, args)
                break
    if info.kind == "view":
        return _view(op, args, kwargs)
    if _modes.state.mode != "debug":
        return _run(info, op, args, kwargs)
    try:
        clean = _inputs_clean(args, kwargs) if _modes.state.check_finite else True
        result = _run(info, op, args, kwargs)
        _after_op(info, args, kwargs, result, clean)
        return result
    except (
        DeviceOpError,
        FallbackError,
        IndexOutOfRangeError,
        DeviceAssertError,
    ):  # a check's error names its op already
        raise
    except Exception as e:
        read = [v for k, v in kwargs.items() if k not in info.out_names]
        types = [_type_text(t) for t in _modes.tensors((args, read), tpu_only=False)]
        frame = user_frame()
        err = DeviceOpError(f"{info.name} on ({', '.join(types)}) failed at {frame}: {e}", info.name, types, frame)
        raise err from e


def _view(op, args, kwargs):
    out = op._op_dk(_DK.Meta, *args, **kwargs)
    for r in out if isinstance(out, (list, tuple)) else (out,):
        if isinstance(r, torch.Tensor) and (r.is_meta or r.is_cpu):
            raise NotImplementedError(f"torchtpu: view op {op} did not alias its tpu argument")
    return out


def _run(info: OpInfo, op, args, kwargs):
    key: list = [info, len(args)]
    leaves: list = []
    floats: list = []
    geoms: list = []
    name = info.name
    for a in args:  # `_flatten(args, ...)`, one call fewer per op
        _flatten(a, key, leaves, floats, geoms, name)
    if kwargs:
        out_names = info.out_names
        for k, v in kwargs.items():
            key.append(k)
            if k in out_names:
                # Written, not read: its dtype is in the key (the result is cast to it).
                key.append(tuple((t.dtype, tuple(t.shape)) for t in (v if isinstance(v, (list, tuple)) else [v])))
                continue
            _flatten(v, key, leaves, floats, geoms, info.name)
    key = tuple(key)
    programs = _programs._programs
    program = programs.get(key)
    if program is None:
        program = _build(info, op, args, kwargs, key, geoms, lift=bool(floats))
    baked = program is _BAKED
    if baked:
        baked_key = key + tuple(floats)
        program = programs.get(baked_key) or _build(info, op, args, kwargs, baked_key, geoms, lift=False)
        floats = ()
    if isinstance(program, _CpuFallback):
        return _on_cpu(info, op, args, kwargs, program.reason)
    dev, cpu = op_device(leaves, kwargs, name)
    tensor_leaves = leaves
    if cpu:
        leaves = [b.on(dev) if type(b) is _CpuLeaf else b for b in leaves]
    if floats:
        leaves = leaves + [_programs.float_buffer(f, dev) for f in floats]
    native = _modes.state.mode != "debug"  # strict and DeferAndFuse take the native path
    out_shapes = _out_shapes(info, kwargs) if native and info.kind == "out" else ()
    donate = _donations(info, program, args, kwargs, leaves, tensor_leaves) if info.kind in ("inplace", "out") else ()
    outs = program.run(leaves, not native, dev, donate)  # debug mode waits for each op
    result = _results(info, args, kwargs, program, outs, leaves)
    if native and tensor_leaves:
        # A native miss waits for how this ran (`_native.py`).
        _teach_native(info, program, tensor_leaves, len(floats), baked, args, kwargs, out_shapes)
    return result


def _donations(info: OpInfo, program, args, kwargs, leaves: list, flattened: list) -> list:
    """The IR inputs to donate when an in-place or out= op replaces a target's storage (`x.add_(y)`
    arrives as `add.out(x, y, out=x)`), by the native path's rule (`_C.eager_donations`,
    `torchtpu_eager::donation`): this describes each target as the Python path sees it. Its
    result replaces the storage's buffer where the target is a view the program scatters into
    (`write_base`: the result is the whole new buffer), or the whole storage, of the storage's
    dtype and not resized. The buffer's other holders are its references beyond the storage's
    slot and `leaves` (`flattened`, the leaves before floats were appended, holds it too where it
    is another list)."""
    if _defer.state.active:
        return []
    if info.kind == "inplace":
        targets = args[0] if args and isinstance(args[0], (list, tuple)) else args[:1]
    else:
        targets = [kwargs.get(a.name) for a in (info.op._schema.arguments[i] for i in info.written)]
    bases = program.write_base or ()
    described = []
    for k, t in enumerate(targets):
        slot = _storage.tensor_slot(t) if isinstance(t, torch.Tensor) else None
        buffer = slot.buffer if slot is not None else None
        if type(buffer) is not _C.DeviceBuffer:
            continue
        scattered = k < len(bases) and bases[k] is not None
        replaces = t.dtype is slot.dtype and (
            scattered
            or (
                not (info.kind == "out" and tuple(t.shape) != program.out_types[k][1])  # resized: another buffer
                and _storage.is_whole(t, slot)
            )
        )
        if not replaces:  # kept: the rest need not be counted
            described.append((False, [], buffer.nbytes, 0))
            continue
        read_by = [i for i, (kind, v) in enumerate(program.sources) if kind == "leaf" and leaves[v] is buffer]
        held = sum(1 for b in leaves if b is buffer)
        if flattened is not leaves:
            held += sum(1 for b in flattened if b is buffer)
        # References: the slot, each in the leaves' lists, `buffer` here and getrefcount's argument.
        others = abs(sys.getrefcount(buffer) - (1 + held + 2))
        described.append((replaces, read_by, buffer.nbytes, others))
    return _C.eager_donations(described) if described else []


def _out_shapes(info: OpInfo, kwargs) -> list | None:
    """The out= tensors' shapes before the op ran (None: a list of them)."""
    outs = [kwargs[info.op._schema.arguments[i].name] for i in info.written]
    return None if any(isinstance(t, (list, tuple)) for t in outs) else [tuple(t.shape) for t in outs]


def _build(info: OpInfo, op, args, kwargs, key, geoms, lift: bool):
    kind = info.kind
    programs = _programs._programs
    if kind == "mutating" or info.base not in _supported_or_decomposed():
        reason = "no lowering" if kind != "mutating" else "mutates its arguments in a way torchtpu does not model"
        marker = programs[key] = _CpuFallback(reason)
        return marker
    meta_args = tuple(_meta_of(a) for a in args)
    meta_kwargs = {k: _meta_of(v) for k, v in kwargs.items()}
    write_base = None
    try:
        if kind == "functional":
            target, f_args, f_kwargs, cast_to = op, meta_args, meta_kwargs, None
        else:
            functional = info.functional
            # Eager's own checks (broadcasting into self, dtype casts) on meta tensors first.
            op(*meta_args, **meta_kwargs)
            if kind == "inplace":
                target, f_args, f_kwargs = functional, meta_args, meta_kwargs
                first = args[0]
                targets = list(first) if isinstance(first, (list, tuple)) else [first]
                cast_to = [t.dtype for t in targets]
                write_base = _write_base(targets, geoms)
            else:
                names = [op._schema.arguments[i].name for i in info.written]
                target, f_args = functional, meta_args
                f_kwargs = {k: v for k, v in meta_kwargs.items() if k not in names}
                cast_to = [kwargs[n].dtype for n in names]
        if lift:
            try:
                return _programs.build(
                    key, target, f_args, f_kwargs, cast_to, lift_floats=True, geoms=geoms, write_base=write_base
                )
            except (Unsupported, UnsupportedError, TorchTPUError):
                raise
            except Exception:
                # The op takes these floats only as numbers (an attribute of its lowering).
                programs[key] = _BAKED
                return _BAKED
        return _programs.build(key, target, f_args, f_kwargs, cast_to, geoms=geoms, write_base=write_base)
    except (Unsupported, UnsupportedError) as e:
        marker = programs[key] = _CpuFallback(str(e))
        return marker
    except TorchTPUError as e:
        from torchtpu.policy import on_failure

        on_failure(e, f"tpu op {info.name}", _modes.fallback_is_error())
        marker = programs[key] = _CpuFallback(f"{e.kind} failure: {e}")
        return marker


def _write_base(targets, geoms):
    """For an in-place op's targets (its first leaves): per target, its leaf index where the
    target is a strided view whose new base the program can compute (the scatter in the same
    program), else None. Targets sharing a storage are written one after another instead: two
    new bases computed from one old base would each lose the other's write."""
    storages = [t.untyped_storage()._cdata for t in targets]
    if len(set(storages)) != len(storages):
        return None
    # A lazily conjugated or negated view (its geometry carries the bits) and a view of its storage
    # as another dtype (read by a program of its own, `_retyped_leaf`) are written as
    # `_storage.write` writes them.
    out = [
        i if geoms[i] is not None and len(geoms[i]) == 3 and geoms[i][1] is not None else None
        for i in range(len(targets))
    ]
    return out if any(j is not None for j in out) else None


_SUPPORTED: set | None = None


def _supported_or_decomposed() -> set:
    """Base names of the ops a program can be made of: lowered ones, and ones torchtpu's
    decomposition table (the compiled path's) rewrites."""
    global _SUPPORTED
    if _SUPPORTED is None:
        from torchtpu.compiled.decompositions import decomposition_table

        names = set(_C.supported_ops())
        for op in decomposition_table():
            if isinstance(op, torch._ops.OpOverload):
                ns, name = op._schema.name.split("::", 1)
                names.add(f"{ns}.{name.split('.')[0]}")
        _SUPPORTED = names
    return _SUPPORTED


def _results(info: OpInfo, args, kwargs, program, outs, inputs):
    if program.plain:
        values = outs
    else:
        values = []
        for spec in program.outputs:
            if spec.kind == "ir":
                values.append(outs[spec.index])
            elif spec.kind == "none":
                values.append(None)
            elif spec.kind == "input":
                # The op returned an input as it is: its buffer, shared (buffers never change).
                values.append(inputs[spec.index])
            else:
                raise NotImplementedError(f"torchtpu: output kind {spec.kind} of an eager program ({info.name})")
    if info.kind == "inplace":
        target = args[0]
        targets = target if isinstance(target, (list, tuple)) else (target,)  # `_foreach_*_`: a list
        bases = program.write_base or (None,) * len(targets)
        for t, v, base in zip(targets, values, bases):
            if base is not None:
                _storage.slot_of(t).buffer = v  # the program scattered the result into it
            else:
                _storage.write(t, v)
        return None if target is not targets[0] else target
    if info.kind == "out":
        names = [info.op._schema.arguments[i].name for i in info.written]
        targets = [kwargs[n] for n in names]
        for t, v, (_dtype, shape) in zip(targets, values, program.out_types):
            if tuple(t.shape) != shape:
                resize(t, shape)
            _storage.write(t, v)
        return targets[0] if len(targets) == 1 else tuple(targets)
    new = _storage.new_result
    tensors = [None if v is None else new(shape, dtype, v) for v, (dtype, shape) in zip(values, program.out_types)]
    if info.returns == "one":
        return tensors[0]
    if info.returns == "list":
        return tensors
    return tuple(tensors)


def resize(t: torch.Tensor, shape) -> None:
    """`t.resize_(shape)` (an out= tensor of another shape, often PyTorch's own `empty({0})`), as
    eager resizes: `t`'s storage grows in place when it holds too few elements (keeping its
    data, every tensor sharing it sees the growth, `_storage.resize_storage`), then `t` is
    pointed (PyTorch's Meta `set_`) at it with contiguous strides."""
    shape = tuple(shape)
    slot = _storage.slot_of(t)
    storage = t.untyped_storage()
    offset = t.storage_offset()
    # In bytes: `t` may view its storage as another dtype (`_storage.RETYPED`).
    needed = (offset + math.prod(shape)) * t.element_size()
    itemsize = slot.dtype.itemsize
    if needed > slot.numel * itemsize:
        storage.resize_(-(-needed // itemsize) * itemsize)
    aten.set_.source_Storage_storage_offset._op_dk(
        _DK.Meta, t, storage, offset, list(shape), list(_storage.contiguous_strides(shape))
    )


# ---------------------------------------------------------------- on the CPU


def _to_cpu(x, why=("host_read", None)):
    if isinstance(x, torch.Tensor) and _is_tpu(x):
        # A tensor of its own (DLPack memory cannot be resized, and out= ops resize).
        return _storage.to_host(x, why).clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_to_cpu(v, why) for v in x)
    return x


def _on_cpu(info: OpInfo, op, args, kwargs, reason: str):
    if _modes.fallback_is_error():
        raise UnsupportedError(f"{info.name} has no tpu program ({reason}); TORCHTPU_FALLBACK=error", [info.base])
    _stats.record_eager_fallback(info.base)
    warn_once(f"tpu-cpu:{info.name}", f"torchtpu: {info.name} runs on the CPU for the tpu device ({reason})")
    why = ("cpu_fallback", f"{info.name} ({reason})")
    tpu = _modes.tensors((args, kwargs))
    dev = tpu[0].device.index if tpu else _guard.current_device()
    for t in tpu[1:]:
        if t.device.index != dev:
            raise mixed_devices(dev, t.device.index, info.name)
    cpu_args = tuple(_to_cpu(a, why) for a in args)
    cpu_kwargs = {k: _to_cpu(v, why) for k, v in kwargs.items()}
    out = op(*cpu_args, **cpu_kwargs)
    # Mutated arguments: copy their new values back into the tpu tensors.
    schema_args = op._schema.arguments
    written = {}
    for i in info.written:
        a = schema_args[i]
        orig = args[i] if i < len(args) and not a.kwarg_only else kwargs.get(a.name)
        cpu = cpu_args[i] if i < len(args) and not a.kwarg_only else cpu_kwargs.get(a.name)
        if isinstance(orig, torch.Tensor) and _is_tpu(orig):
            if tuple(orig.shape) != tuple(cpu.shape):
                resize(orig, cpu.shape)
            _storage.write(orig, _storage.upload(cpu, dev))
            written[id(cpu)] = orig

    def back(r):
        if isinstance(r, torch.Tensor):
            if id(r) in written:
                return written[id(r)]
            return _storage.from_host(r, dev)
        if isinstance(r, (list, tuple)):
            return type(r)(back(v) for v in r)
        return r

    return back(out)


# ---------------------------------------------------------------- what Rust learns after a miss


def _teach_native(info, program, leaves, n_floats: int, baked: bool, args, kwargs, out_shapes) -> bool:
    """Tells Rust how `program` ran `info.op` on `leaves` (the Python path's tensor leaves, before
    upload), if the op's pending native key waits for it and the run is one Rust repeats as it
    is: outputs that are the program's results in order (then its index checks' flag, which Rust
    hands to `_checks.add_native`), and results that become new tensors, whole in-place targets
    (or the base the program scattered into), or whole out= tensors of the results' shapes.
    `out_shapes` are the out= tensors' shapes before the run. Returns whether Rust took it."""
    if not program.plain:
        return False
    dtypes = []
    for leaf in leaves:
        if type(leaf) is _CpuLeaf:
            if not leaf.scalar:
                return False
            dtypes.append(IR_DTYPES[leaf.t.dtype])
        else:
            dtypes.append(None)
    kind = info.kind
    if kind == "functional":
        results = [(dtype, _native.dtype_code(dtype), list(shape)) for dtype, shape in program.out_types]
        how = "new"
    elif kind == "inplace":
        target = args[0]
        targets = target if isinstance(target, (list, tuple)) else (target,)
        bases = program.write_base or (None,) * len(targets)
        results = [("base", None) if base is not None else _write_of(t) for t, base in zip(targets, bases)]
        how = "inplace"
    elif kind == "out" and out_shapes is not None:
        names = [info.op._schema.arguments[i].name for i in info.written]
        results = []
        for n, (_dtype, shape), before in zip(names, program.out_types, out_shapes):
            if tuple(before) != tuple(shape):
                return False  # resized: the Python path's
            results.append(_write_of(kwargs[n]))
        how = "out"
    else:
        return False
    if any(w is None for w in results if how != "new"):
        return False
    return _C.eager_learn(info.name, program, program.sources, dtypes, n_floats, baked, how, results)


def _write_of(t):
    """How a result is written into `t` (`_storage.write`): ("whole", None), ("strided", the
    scatter `Program` `_storage.write` ran), or None (a case the Python path keeps)."""
    slot = _storage.slot_of(t)
    if t.dtype is not slot.dtype or t.is_conj() or t.is_neg():
        return None  # converted, conjugated or negated on the way in (`_storage.write`)
    if _storage.is_whole(t, slot):
        return ("whole", None)
    p = _programs._programs.get(
        _programs.strided_write_key(slot.shape, slot.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset())
    )
    if p is None or not p.plain or p.checks is not None or p.sources != [("leaf", 0), ("leaf", 1)]:
        return None
    return ("strided", p)


# ---------------------------------------------------------------- debug mode's checks


def _has_non_finite(t: torch.Tensor) -> bool:
    if not (t.dtype.is_floating_point or t.dtype.is_complex) or t.numel() == 0:
        return False
    return not bool(torch.isfinite(_storage.to_host(t)).all())


def _inputs_clean(args, kwargs) -> bool:
    """Whether no tpu tensor among the arguments holds a NaN or an infinity (checked before an
    op runs, since an in-place op overwrites its input)."""
    return not any(_has_non_finite(t) for t in _modes.tensors((args, kwargs)))


def _after_op(info, args, kwargs, result, inputs_were_clean: bool) -> None:
    """Debug mode, after `info.op` ran: waits for its results; with `check_finite`, raises
    NonFiniteError if they hold a NaN or infinity and its inputs did not."""
    from torchtpu.errors import NonFiniteError

    outs = _modes.tensors(result)
    for t in outs:
        slot = _storage.slot_of(t)
        if slot.buffer is not None:
            slot.buffer.wait()
    if not _modes.state.check_finite or not inputs_were_clean:
        return
    if not any(_has_non_finite(t) for t in outs):
        return
    types = [_type_text(t) for t in _modes.tensors((args, kwargs))]
    frame = user_frame()
    raise NonFiniteError(
        f"{info.name} on ({', '.join(types)}) produced NaN or Inf at {frame} (its inputs were finite)",
        info.name,
        types,
        frame,
    )
