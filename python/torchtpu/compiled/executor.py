"""Runs a compiled ATen graph: maps the FX graph's inputs to the program's, hands their
tensors to the Rust side (which checks them and reads their memory through DLPack) and wraps
the outputs as torch tensors without a copy."""

from __future__ import annotations

import logging
import os
import time

import torch

from torchtpu import _C, _stats, policy
from torchtpu import host_kernels as _host_kernels
from torchtpu import sharding as _sharding
from torchtpu.compiled.exporter import Exported
from torchtpu.errors import CompileError, ExecutionError, InputError, InternalError, OptionsError, ShardingError
from torchtpu.ir_text import TORCH_DTYPES, signature
from torchtpu.options import Options

log = logging.getLogger("torchtpu")


def _dump(exported: Exported, opts: Options, name: str) -> None:
    """IR as exported (`NAME.input.ir`), after the passes (`NAME.ir`: what was lowered), and
    its StableHLO (`NAME.stablehlo.mlir`), from one driver run. `torchtpu-opt NAME.ir
    --emit=stablehlo --donate-inputs` (without the flag when donate=False) reproduces the
    StableHLO byte for byte."""
    base = os.path.join(opts.dump_dir, name)
    optimised, stablehlo = _C.lower_ir(exported.text, opts.passes, opts.donate, with_ir=True)
    try:
        os.makedirs(opts.dump_dir, exist_ok=True)
        for suffix, text in (
            (".input.ir", f"// passes: {opts.passes}\n" + exported.text),
            (".ir", optimised),
            (".stablehlo.mlir", stablehlo),
        ):
            with open(base + suffix, "w") as f:
                f.write(text)
    except OSError as e:
        # The user's folder, not a torchtpu bug: raised, never a fallback.
        raise OptionsError(
            f"torchtpu option 'dump_dir' ({opts.dump_dir!r}): cannot write the graph dump there: {e}"
        ) from e
    log.info("dumped %s.{input.ir,ir,stablehlo.mlir}", base)


def compile_exported(exported: Exported, opts: Options, name: str, eager=None, checks=None) -> CompiledGraph:
    """`checks`: (IR output index, sites) of the index checks' flag (`index_checks.py`), an IR
    output that `exported.outputs` does not list."""
    if opts.dump_dir:
        _dump(exported, opts, name)
    graph = CompiledGraph(
        None,
        exported,
        name,
        None if opts.strict else eager,
        passes=opts.passes,
        donate=opts.donate,
        reference=eager,
        xla_options=opts.xla_options,
        checks=checks,
        host_kernels=opts.host_kernels,
    )
    if exported.group is not None:
        # Collectives of an in-process group: one replicated program over the ranks' devices,
        # compiled when the ranks first meet (`distributed.inprocess.ReplicatedGraph`).
        from torchtpu.distributed.inprocess import ReplicatedGraph

        graph.bind(ReplicatedGraph(exported.text, exported.group, name))
        return graph
    if _sharding.ACTIVE:
        # A mesh exists: the first call says whether this graph runs SPMD (its inputs'
        # layouts); the one-device program is compiled only if it does not.
        return graph
    graph.bind(
        _compile_one_device(
            exported.text, opts.passes, opts.donate, name, xla_options=opts.xla_options, host_kernels=opts.host_kernels
        )
    )
    return graph


def _compile_one_device(
    text: str,
    passes: str,
    donate: bool | None,
    name: str,
    xla_options: tuple | None = None,
    host_kernels: bool = False,
    **spmd,
):
    """Compiles IR text (with `spmd`: `mesh`, `input_shardings`, `output_shardings` for an SPMD
    program; `xla_options`: XLA option overrides; `host_kernels`: each matmul in the kernel
    measured faster, `torchtpu/host_kernels.py`) and records the compile in `torchtpu.stats()`."""
    start = time.perf_counter()
    choose = host_kernels and not spmd and _host_kernels.install()
    # One driver run (or a graph-cache hit, which keeps its estimate): the program says where
    # it came from and carries the memory estimate and the stage timings.
    program = _C.compile(text, passes, donate, xla_options=dict(xla_options or ()), choose_kernels=choose, **spmd)
    seconds = time.perf_counter() - start
    source = program.source
    _stats.bump("compile_seconds_saved", program.compile_seconds_saved)
    for warning in _C.cache_warnings():
        # A corrupt or unreadable cache entry: it was recompiled and replaced.
        log.warning("torchtpu cache: %s", warning)
    _stats.bump("compile_seconds", seconds)
    _stats.bump("graphs_compiled")
    if source == "compiled":
        _stats.bump("cache_misses")
    else:
        _stats.bump("cache_hits")
        _stats.bump("memory_hits" if source == "memory" else "disk_hits")
        if source == "waited":  # another process was compiling it: this one waited and read it
            _stats.bump("disk_hits_after_wait")
    log.info("compiled %s in %.1f ms (%s)", name, seconds * 1e3, source)
    # The peak-memory estimate of the graph as lowered (after the passes), per graph.
    _stats.record_graph(name, program.memory)
    return program


class IRProgram:
    """A program compiled straight from IR text (no FX graph): `input_types` is
    `[(torch dtype, shape)]`; calling it with a list of tensors returns its outputs.
    Used to replay reproductions (`replay.replay`)."""

    def __init__(self, text: str, passes: str, donate: bool | None):
        self.program = _C.compile(text, passes, donate)
        self.input_types = [(TORCH_DTYPES[d], tuple(s)) for d, s in self.program.input_types]

    def __call__(self, inputs: list) -> list:
        # Rust checks each tensor (CPU, dtype, shape, dense strides) before reading it.
        return [_from_dlpack(c) for c in self.program.run([t.contiguous() for t in inputs])]


def compile_ir(text: str, passes: str, donate: bool | None = None) -> IRProgram:
    return IRProgram(text, passes, donate)


class CompiledGraph:
    """Callable with the FX graph's positional inputs; returns its outputs.

    The per-call path is kept short (issue 8): Dynamo's guards already pinned every input's
    dtype, shape, strides and device, so a call hands the input tensors to the program, which
    checks each in Rust (host memory, dtype, shape, dense strides, byte size) before reading
    it through DLPack, and wraps the program's outputs, which share PJRT's memory (DLPack),
    as tensors. PJRT reads the inputs in place and keeps their buffers between calls
    (`Program.run`). An input the program refuses (`InputError`: not a dense CPU tensor of
    the compiled type) takes the checked path (a copy, or a clear error).

    A PJRT execution failure (`ExecutionError`) runs the graph eagerly, by policy; an internal
    error (a torchtpu bug, or TORCHTPU_INJECT_FAULT=execute) writes a reproduction and runs
    eagerly with a "torchtpu bug" warning (`policy.on_failure`). With `eager` None (strict)
    both raise."""

    def __init__(
        self,
        program,
        exported: Exported,
        name: str,
        eager=None,
        passes: str = "",
        donate: bool | None = None,
        reference=None,
        xla_options: tuple | None = None,
        host_kernels: bool = False,
        checks=None,
    ):
        self.program = program
        # The index checks (`index_checks.py`): their sites, whose flag is the program's last
        # output, after the results; None without checks.
        self.index_sites = None
        if checks is not None:
            flag, self.index_sites = checks
            if flag != sum(o.kind == "ir" for o in exported.outputs):
                raise InternalError(f"{name}: the index checks' flag is IR output {flag}, not the last", stage="export")
        # The graph run eagerly: what `torchtpu.sharding.explain` computes with, running nothing.
        self.reference = reference
        self.nodes_by_line = exported.nodes_by_line
        # Runs the graph eagerly if PJRT fails at run time (None: raise, as in strict mode).
        self.eager = eager
        self.name = name
        # What a reproduction of a failure at run time needs.
        self.ir_text, self.passes, self.donate, self.xla_options = exported.text, passes, donate, xla_options
        self.host_kernels = host_kernels
        self.inputs = exported.inputs
        self.outputs = exported.outputs
        self.made_on = exported.made_on
        self.output_is_tuple = exported.output_is_tuple
        # Per input: the positional argument it comes from, or -1 and the constant.
        self._sources = [(spec.index, None) if spec.kind == "arg" else (-1, spec.value) for spec in self.inputs]
        # The mesh the graph's own constraints use, and one SPMD program per input layout.
        self.mesh = exported.mesh
        self._spmd: dict = {}
        # Device copies of the graph's constants, for calls on tpu tensors.
        self._device_consts: dict | None = None
        self._device_results: dict | None = None
        # A backward graph: its forward (`backend.compile_aten_graph` links them), whose last
        # SPMD call's input layouts (`last_layouts`) its gradients take; the gradient layouts
        # of the last such call are kept (`_hints`: those input layouts and the hints).
        self.grads_of = None
        self.last_layouts: tuple | None = None
        self._hints = (None, None)
        # The program's outputs are the results as they are (no None, value or restride).
        self._plain = all(
            spec.kind == "ir" and spec.stride is None and spec.index == k for k, spec in enumerate(self.outputs)
        )
        if program is not None:
            self.bind(program)

    def bind(self, program) -> None:
        """Sets the one-device program (compiled at once, or at the first unsharded call)."""
        self.program = program
        self.in_types = [(TORCH_DTYPES[d], tuple(s)) for d, s in program.input_types]
        self.out_types = [(TORCH_DTYPES[d], tuple(s)) for d, s in program.output_types]
        results = len(program.output_types) - (self.index_sites is not None)
        self._plain = self._plain and len(self.outputs) == results

    def _checked(self, args) -> list:
        """The inputs as contiguous CPU tensors of the compiled types, or a clear error."""
        tensors = []
        for spec, (dtype, shape) in zip(self.inputs, self.in_types):
            t = args[spec.index] if spec.kind == "arg" else spec.value
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{self.name}: input {spec.index} is {type(t).__name__}, not a tensor")
            if t.device.type != "cpu":
                raise InputError(
                    f"{self.name}: input {spec.index} is on {t.device}; a compiled graph takes all its tensors "
                    "on the CPU or all on tpu: move them with .to('tpu') or .cpu()",
                    spec.index,
                )
            if t.dtype != dtype or tuple(t.shape) != shape:
                raise RuntimeError(
                    f"{self.name}: input {spec.index} is {t.dtype}{list(t.shape)}, compiled for {dtype}{list(shape)}"
                )
            tensors.append(t.contiguous())
        return tensors

    def _gradient_layouts(self) -> tuple | None:
        """Per program output, the layout of the forward argument it is the gradient of (AOT's
        backward returns one gradient per forward argument, in order), where shapes agree.
        Worked out once per layout signature of the forward."""
        forward = self.grads_of
        layouts = forward.last_layouts if forward is not None else None
        if layouts is None:
            return None
        if self._hints[0] == layouts:
            return self._hints[1]
        in_shapes, _ = _signature_shapes(forward.ir_text)
        by_arg = {
            src: (in_shapes[i], s) for i, ((src, _), s) in enumerate(zip(forward._sources, layouts)) if src >= 0 and s
        }
        _, shapes = _signature_shapes(self.ir_text)
        hints = [None] * len(shapes)
        for j, spec in enumerate(self.outputs):
            known = by_arg.get(j)
            if spec.kind == "ir" and known is not None and known[0] == shapes[spec.index]:
                hints[spec.index] = known[1]
        found = tuple(hints) if any(h is not None for h in hints) else None
        self._hints = (layouts, found)
        return found

    def _spmd_program(self, layouts: tuple):
        """The SPMD program for these input layouts (compiled once per layout signature: a
        changed sharding is one new compile, and no Dynamo recompile) and its outputs' specs."""
        hints = self._gradient_layouts()
        entry = self._spmd.get((layouts, hints))
        if entry is not None:
            return entry
        meshes = {s.mesh for s in layouts if s is not None} | ({self.mesh} if self.mesh is not None else set())
        if len(meshes) != 1:
            raise ShardingError(
                f"{self.name}: inputs and constraints use {len(meshes)} meshes {sorted(map(repr, meshes))}; one per graph"
            )
        mesh = meshes.pop()
        wire = [None if s is None else [list(d) for d in s.dims] for s in layouts]
        wire_out = (
            None
            if hints is None
            else [None if s is None or s.mesh != mesh else [list(d) for d in s.dims] for s in hints]
        )
        program = _compile_one_device(
            self.ir_text,
            self.passes,
            False,
            self.name,
            xla_options=self.xla_options,
            mesh=mesh.axes,
            input_shardings=wire,
            output_shardings=wire_out,
        )
        plan = program.sharding
        _stats.record_sharding(self.name, plan)
        outs = [
            None if not any(o["dims"]) else _sharding.ShardSpec(mesh, tuple(tuple(d) for d in o["dims"]))
            for o in plan["outputs"]
        ]
        log.info(
            "%s: SPMD over %d devices, %d collectives planned",
            self.name,
            plan["num_partitions"],
            len(plan["collectives"]),
        )
        entry = self._spmd[(layouts, hints)] = (program, outs)
        _sharding.RECENT_PROGRAMS.append((self.name, program))
        return entry

    def _run_spmd(self, args, tensors, layouts):
        for i, t in enumerate(tensors):
            if isinstance(t, torch.Tensor) and t.device.type != "cpu":
                # Not a DLPack refusal later: say what an SPMD program takes.
                raise ShardingError(
                    f"{self.name}: input {i} is on {t.device}; sharded (SPMD) programs take CPU tensors (the "
                    "engine splits them over the mesh's devices from host memory): call the sharded graph on "
                    "CPU tensors"
                )
        try:
            program, specs = self._spmd_program(layouts)
            if _sharding.EXPLAINING is not None and self.reference is not None:
                # explain: the plan is made (compiled), nothing runs on the devices.
                _sharding.EXPLAINING.append((self, program.sharding, tensors))
                return self._tag_reference(self.reference(*args), specs)
            outs = [_from_dlpack(c) for c in program.run([t.contiguous() for t in tensors])]
        except (CompileError, ExecutionError) as e:
            # The plugin refused or failed the SPMD program (one without SPMD support, say):
            # eager by policy, as for one device; strict (`eager` None) raises.
            policy.on_failure(e, f"SPMD graph {self.name}", self.eager is None)
            _stats.bump("graphs_fallback")
            return self.eager(*args)
        # Outputs keep their layout, so a graph they feed (the backward) runs sharded too.
        for out, spec in zip(outs, specs):
            if spec is not None:
                _sharding.tag(out, spec)
        return self._results(args, outs)

    def _tag_reference(self, results, specs):
        """explain's eager results as the program's would be (`_run_spmd`, `_results`): each
        output the program computes is a tensor of its own (an eager view is copied: PyTorch
        hands a saved view to the backward as a new object, without the layout) carrying its
        layout, so the graph it feeds (the backward) is planned for the layouts the real call
        gives it."""
        outs = list(results) if self.output_is_tuple else [results]
        for j, (spec, out) in enumerate(zip(self.outputs, outs)):
            if spec.kind == "ir" and spec.stride is None and isinstance(out, torch.Tensor):
                if out._base is not None:
                    out = outs[j] = out.clone()
                if specs[spec.index] is not None:
                    _sharding.tag(out, specs[spec.index])
        if not self.output_is_tuple:
            return outs[0]
        return tuple(outs) if isinstance(results, tuple) else outs

    def __call__(self, *args):
        tensors = [args[i] if i >= 0 else c for i, c in self._sources]
        if _sharding.ACTIVE:
            layouts = tuple(_sharding.sharding_of(t) for t in tensors)
            if self.mesh is not None or any(s is not None for s in layouts):
                self.last_layouts = layouts
                return self._run_spmd(args, tensors, layouts)
            self.last_layouts = None
        if self.program is None:
            self.bind(
                _compile_one_device(
                    self.ir_text,
                    self.passes,
                    self.donate,
                    self.name,
                    xla_options=self.xla_options,
                    host_kernels=self.host_kernels,
                )
            )
        if _sharding.EXPLAINING is not None and self.reference is not None:
            # explain meets a graph that runs on one device: compiled for the real call (just
            # now), computed eagerly, nothing run.
            return self.reference(*args)
        # The first input says the device (a per-call scan of every input would cost ~0.15 us
        # each); a later input on the other device is refused by either path's own check.
        on_tpu = tensors and isinstance(tensors[0], torch.Tensor) and tensors[0].device.type == "tpu"
        if on_tpu or self.made_on is not None:
            outs = self._run_device(tensors)
            return self._results(args, outs, device=outs[0].device if outs else tensors[0].device)
        try:
            try:
                # `tensors` keeps every input alive until the call returns.
                capsules = self.program.run(tensors)
            except InputError:
                capsules = self.program.run(self._checked(args))
        except ExecutionError as e:
            # PJRT failed running it: eager by policy (strict, `eager` None, raises).
            policy.on_failure(e, f"graph {self.name}", self.eager is None)
            _stats.bump("graphs_fallback")
            return self.eager(*args)
        except InternalError as e:
            # A torchtpu bug (or TORCHTPU_INJECT_FAULT=execute): a reproduction and a "torchtpu
            # bug" warning, then eager; strict raises.
            policy.on_failure(
                e,
                f"graph {self.name}",
                self.eager is None,
                ir_text=self.ir_text,
                passes=self.passes,
                donate=self.donate,
            )
            _stats.bump("graphs_fallback")
            return self.eager(*args)
        return self._results(args, [_from_dlpack(c) for c in capsules])

    def _run_device(self, tensors) -> list:
        """Runs on `tpu` tensors: their device buffers go in as they are and the outputs come
        back as `tpu` tensors, with no host round trip. The graph's constants (CPU tensors) are
        copied to the device once."""
        from torchtpu.device import _programs, _storage

        buffers = []
        for k, ((index, const), t) in enumerate(zip(self._sources, tensors)):
            if index < 0:
                if self._device_consts is None:
                    self._device_consts = {}
                b = self._device_consts.get(k)
                if b is None:
                    # A literal made on the device (`torch.tensor([...], device=x.device)`) is
                    # read where it is; a CPU constant is copied there once.
                    b = _storage.read(const) if const.device.type == "tpu" else _storage.upload(const, 0)
                    self._device_consts[k] = b
                buffers.append(b)
            elif t.device.type == "tpu":
                buffers.append(_storage.read(t))
            elif t.dim() == 0 and t.device.type == "cpu":
                # A 0-d CPU tensor mixes with tpu tensors, as in eager: a Python float under
                # dynamic=True arrives as one the user never made.
                buffers.append(_programs.scalar_buffer(t, 0))
            else:
                where = sorted({str(x.device) for x in tensors if isinstance(x, torch.Tensor)})
                raise InputError(
                    f"{self.name}: input {index} is on {t.device} while others are on tpu ({', '.join(where)}); "
                    "a compiled graph takes all its tensors on one device: move them with .to('tpu') or .cpu()",
                    index,
                )
        from torchtpu.device import _defer

        if _defer.state.region is not None:
            # DeferAndFuse: a compiled graph is a cut where its inputs are still pending.
            with _defer.cause("compiled_graph", self.name):
                buffers = _defer.resolved(buffers, self.name)
        # On the device of its tpu inputs (all on one: Dynamo's fake-tensor check refuses a
        # mix); constants and scalars made on tpu:0 are copied there once (`on_device`).
        device = next(
            (t.device.index for t in tensors if isinstance(t, torch.Tensor) and t.device.type == "tpu"),
            self.made_on or 0,
        )
        buffers = [_programs.on_device(b, device) for b in buffers]
        outs = self.program.run_device(buffers, False, device=device)
        return [_storage.new_tensor(s, d, b) for b, (d, s) in zip(outs, self.out_types)]

    def _results(self, args, outs: list, device: torch.device | None = None):
        """The graph's results from the program's outputs (None, values, inputs, restrides).
        `device`: where a run on tpu tensors put its outputs; the graph's constant results
        (a gradient folded to zeros, ...) are copied there once, as its constant inputs are."""
        if self.index_sites is not None:
            outs = self._check_indices(outs)
        if self._plain:
            return tuple(outs) if self.output_is_tuple else outs[0]
        results = []
        for spec in self.outputs:
            if spec.kind == "ir":
                out = outs[spec.index]
                if spec.stride is not None:
                    out = torch.empty_strided(out.shape, spec.stride, dtype=out.dtype, device=out.device).copy_(out)
                results.append(out)
            elif spec.kind == "input":
                results.append(args[spec.index])
            elif spec.kind == "view":
                out = args[spec.index]
                for op, op_args, op_kwargs in spec.value:
                    out = op(out, *op_args, **op_kwargs)
                results.append(out)
            elif spec.kind == "none":
                results.append(None)
            elif device is not None and isinstance(spec.value, torch.Tensor) and spec.value.device != device:
                results.append(self._constant_on(spec, device))
            else:
                results.append(spec.value)
        return tuple(results) if self.output_is_tuple else results[0]

    def _constant_on(self, spec, device: torch.device) -> torch.Tensor:
        if self._device_results is None:
            self._device_results = {}
        key = (id(spec), device)
        value = self._device_results.get(key)
        if value is None:
            value = self._device_results[key] = spec.value.to(device)
        # A fresh tensor per call, as the CPU path's results are not shared between calls
        # either where the caller may write them (gradients are accumulated in place).
        return value.clone()

    def _check_indices(self, outs: list) -> list:
        """The outputs without the index checks' flag, which is read now (CPU: the program has
        run) or, on tpu, at the next host read (`device/_checks.py`)."""
        flag = outs[-1]
        if flag.device.type == "cpu":
            if flag.numpy().any():
                from torchtpu import index_checks

                index_checks.raise_if_set(flag, self.index_sites)
        else:
            from torchtpu.device import _checks

            _checks.add_tensor(flag, self.index_sites)
        return outs[:-1]


_from_dlpack = torch._C._from_dlpack


def _signature_shapes(ir_text: str) -> tuple[list[tuple], list[tuple]]:
    """The input and output shapes of an IR graph's signature."""
    ins, outs = signature(ir_text)
    return [tuple(dims) for _, dims in ins], [tuple(dims) for _, dims in outs]
