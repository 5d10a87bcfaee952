"""Runs a compiled ATen graph: maps the FX graph's inputs to the program's, allocates the
outputs as torch tensors, and lets the Rust side copy from and into their memory directly."""

from __future__ import annotations

import logging
import os
import time

import torch

from torchtpu import _C, _stats
from torchtpu._log import warn_once
from torchtpu.exporter import TORCH_DTYPES, Exported
from torchtpu.options import Options

log = logging.getLogger("torchtpu")


def _dump(exported: Exported, opts: Options, name: str) -> None:
    """IR as exported (`NAME.input.ir`), after the passes (`NAME.ir`: what was lowered), and
    its StableHLO (`NAME.stablehlo.mlir`). `torchtpu-opt NAME.ir --emit=stablehlo
    --donate-inputs` (without the flag when donate=False) reproduces the StableHLO byte for byte."""
    os.makedirs(opts.dump_dir, exist_ok=True)
    base = os.path.join(opts.dump_dir, name)
    optimised = _C.run_pipeline(exported.text, opts.passes)
    with open(base + ".input.ir", "w") as f:
        f.write(f"// passes: {opts.passes}\n" + exported.text)
    with open(base + ".ir", "w") as f:
        f.write(optimised)
    with open(base + ".stablehlo.mlir", "w") as f:
        f.write(_C.lower_ir(optimised, "", opts.donate))
    log.info("dumped %s.{input.ir,ir,stablehlo.mlir}", base)


def compile_exported(exported: Exported, opts: Options, name: str, eager=None) -> "CompiledGraph":
    if opts.dump_dir:
        _dump(exported, opts, name)
    start = time.perf_counter()
    program, source, saved = _C.compile(exported.text, opts.passes, opts.donate)
    seconds = time.perf_counter() - start
    _stats.bump("compile_seconds_saved", saved)
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
    log.info("compiled %s in %.1f ms (%s)", name, seconds * 1e3, source)
    # The peak-memory estimate of the graph as lowered (after the passes), per graph.
    _stats.record_graph(name, _C.memory_estimate(exported.text, opts.passes, opts.donate))
    return CompiledGraph(program, exported, name, None if opts.strict else eager)


class IRProgram:
    """A program compiled straight from IR text (no FX graph): `input_types` is
    `[(torch dtype, shape)]`; calling it with a list of tensors returns its outputs.
    Used to replay reproductions (`repro.replay`)."""

    def __init__(self, text: str, passes: str, donate: bool):
        self.program, _, _ = _C.compile(text, passes, donate)
        self.input_types = [(TORCH_DTYPES[d], tuple(s)) for d, s in self.program.input_types]

    def __call__(self, inputs: list) -> list:
        tensors = [t.contiguous() for t in inputs]
        return [_from_dlpack(c) for c in self.program.run([t.data_ptr() for t in tensors])]


def compile_ir(text: str, passes: str, donate: bool = True) -> IRProgram:
    return IRProgram(text, passes, donate)


class CompiledGraph:
    """Callable with the FX graph's positional inputs; returns its outputs.

    The per-call path is kept short (issue 8): Dynamo's guards already pinned every input's
    dtype, shape, strides and device, so a call gathers each input's address and wraps the
    program's outputs, which share PJRT's memory (DLPack), as tensors. PJRT reads the inputs
    in place and keeps their buffers between calls (`Program.run`). An input that is not a
    contiguous tensor of the compiled type takes the checked path (copy or clear error)."""

    def __init__(self, program, exported: Exported, name: str, eager=None):
        self.program = program
        # Runs the graph eagerly if PJRT fails at run time (None: raise, as in strict mode).
        self.eager = eager
        self.name = name
        self.inputs = exported.inputs
        self.outputs = exported.outputs
        self.output_is_tuple = exported.output_is_tuple
        self.in_types = [(TORCH_DTYPES[d], tuple(s)) for d, s in program.input_types]
        # Per input: the positional argument it comes from, or -1 and the constant.
        self._sources = [(spec.index, None) if spec.kind == "arg" else (-1, spec.value) for spec in self.inputs]
        # Bytes of each input as compiled: Rust reads exactly this much from each address.
        self._nbytes = program.input_bytes
        # The program's outputs are the results as they are (no None, value or restride).
        self._plain = len(self.outputs) == len(program.output_types) and all(
            spec.kind == "ir" and spec.stride is None and spec.index == k for k, spec in enumerate(self.outputs)
        )

    def _checked(self, args) -> list:
        """The inputs as contiguous CPU tensors of the compiled types, or a clear error."""
        tensors = []
        for spec, (dtype, shape) in zip(self.inputs, self.in_types):
            t = args[spec.index] if spec.kind == "arg" else spec.value
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{self.name}: input {spec.index} is {type(t).__name__}, not a tensor")
            if t.device.type != "cpu":
                raise RuntimeError(f"{self.name}: input on device {t.device}; torchtpu takes CPU tensors")
            if t.dtype != dtype or tuple(t.shape) != shape:
                raise RuntimeError(f"{self.name}: input {spec.index} is {t.dtype}{list(t.shape)}, compiled for {dtype}{list(shape)}")
            tensors.append(t.contiguous())
        return tensors

    def __call__(self, *args):
        tensors = [args[i] if i >= 0 else c for i, c in self._sources]
        try:
            # Dynamo's guards pin dtype and shape; what memory safety needs (host memory,
            # dense, exactly the compiled size) is checked here, cheaply, on every call.
            if not all(t.is_cpu and t.is_contiguous() and t.nbytes == n for t, n in zip(tensors, self._nbytes)):
                raise TypeError
            ptrs = [t.data_ptr() for t in tensors]
        except (TypeError, AttributeError):
            tensors = self._checked(args)
            ptrs = [t.data_ptr() for t in tensors]
        try:
            # `tensors` keeps every input alive until the call returns.
            capsules = self.program.run(ptrs)
        except (RuntimeError, ValueError) as e:
            self._checked(args)  # a wrong input type or shape: say so, rather than fall back
            if self.eager is None:
                raise
            warn_once(self.name + ":run", f"torchtpu: PJRT failed running {self.name}, running it eagerly: {e}")
            _stats.bump("graphs_fallback")
            _stats.record_fallback(f"graph {self.name}: execution failed: {e}", ["<execution failure>"])
            return self.eager(*args)
        outs = [_from_dlpack(c) for c in capsules]
        if self._plain:
            return tuple(outs) if self.output_is_tuple else outs[0]
        results = []
        for spec in self.outputs:
            if spec.kind == "ir":
                out = outs[spec.index]
                if spec.stride is not None:
                    out = torch.empty_strided(out.shape, spec.stride, dtype=out.dtype).copy_(out)
                results.append(out)
            elif spec.kind == "input":
                results.append(args[spec.index])
            elif spec.kind == "none":
                results.append(None)
            else:
                results.append(spec.value)
        return tuple(results) if self.output_is_tuple else results[0]


_from_dlpack = torch._C._from_dlpack
