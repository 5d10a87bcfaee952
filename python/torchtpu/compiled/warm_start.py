"""Warm start without tracing: torchtpu's compiled graphs as artifacts PyTorch's own caches keep.

A second process on the same disk cache used to trace again with Dynamo and AOTAutograd before
the disk cache gave it its programs (docs/cache.md). Two of PyTorch's caches skip that tracing
when the backend hands them something they can store:

- AOTAutograd's cache (`torch._functorch.config.enable_autograd_cache`, on by default) stores
  the result of AOTAutograd's tracing with the backend's compiled graphs, when the backend's
  compilers are `SerializableAOTDispatchCompiler`s returning an `OutputCode`. Here each compiled
  ATen graph is a `TorchTPUOutputCode`: its serialized form is an artifact (`pack`), never a
  PJRT handle. Plain `torch.compile` then skips AOTAutograd's tracing (Dynamo's still runs).
- `torch.compile(fn, fullgraph=True, backend="torchtpu").aot_compile(((args), {}))` with
  `.save_compiled_function(path)` and `torch.compiler.load_compiled_function(file)`: the load
  runs neither Dynamo nor AOTAutograd. The backend returns a `SerializableCallable`: an
  inference graph compiled without AOTAutograd's wrapper is a `DirectInference`; any other
  goes through AOTAutograd's bundled entry holding `TorchTPUOutputCode`s.

An artifact holds what the executor needs to run one compiled graph (`executor.CompiledGraph`):
the IR text, the compile settings, how the FX graph's inputs and outputs map onto the
program's, the index checks' sites, the input transforms of inference graphs (relaid and
folded weights) and the ATen graph itself, which is what runs eagerly where the program fails
at run time. Loading it compiles the IR through the engine, whose graph and executable disk
caches answer without a compile when the program was compiled on this machine before (an
XLA compile from the IR otherwise: still no tracing). An artifact is checked before it is
used: its SHA-256, its format, and the torchtpu (version and Python sources) and torch that
wrote it. In AOTAutograd's cache a failed check is a miss (the graph is traced and compiled
again); a loaded `aot_compile` artifact raises `ArtifactError`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import itertools
import logging
import pathlib
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._dynamo.aot_compile_types import SerializableCallable
from torch._dynamo.precompile_context import BackendCacheArtifact
from torch._inductor.output_code import OutputCode

from torchtpu import _C, _stats
from torchtpu import sharding as _sharding
from torchtpu.errors import TorchTPUError

log = logging.getLogger("torchtpu")

# The artifact's layout: MAGIC, the SHA-256 of the rest, then a pickle of
# {"format", "identity", "state"}. Bump FORMAT when `state` changes meaning.
MAGIC = b"TTPUART\0"
FORMAT = 1

_loaded_ids = itertools.count()


class ArtifactError(TorchTPUError):
    """A saved torchtpu artifact that cannot be used: damaged, of another format, or written by
    another torchtpu or torch. Compile the function again (`aot_compile`) with this one."""


class NotSaved(Exception):
    """Why a compiled graph has no artifact (a form the executor keeps state for that an
    artifact does not carry: per-size programs, eager partitions, SPMD, collectives)."""


# ---------------------------------------------------------------- identity


def identity() -> dict:
    """What an artifact is valid for: torchtpu's version and a digest of its Python sources
    (the decompositions, the exporter and the executor's metadata come from them; the compiler
    is keyed by the engine's graph cache itself), and torch's version. Computed once (~2 ms)."""
    cached = getattr(identity, "cache", None)
    if cached is None:
        root = pathlib.Path(__file__).parent.parent  # the torchtpu package
        h = hashlib.sha256()
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root)).encode() + b"\0")
            h.update(hashlib.sha256(path.read_bytes()).digest())
        cached = identity.cache = {
            "torchtpu": _C.__version__,
            "sources": h.hexdigest()[:16],
            "torch": torch.__version__,
        }
    return cached


def pack(state: dict) -> bytes:
    body = pickle.dumps({"format": FORMAT, "identity": identity(), "state": state}, protocol=pickle.HIGHEST_PROTOCOL)
    return MAGIC + hashlib.sha256(body).digest() + body


def unpack(data: bytes) -> dict:
    """The state `pack` wrote, after checking it; ArtifactError says what is wrong."""
    if not isinstance(data, (bytes, bytearray)) or data[: len(MAGIC)] != MAGIC:
        raise ArtifactError("not a torchtpu artifact (its header is missing)")
    digest, body = data[len(MAGIC) : len(MAGIC) + 32], data[len(MAGIC) + 32 :]
    if hashlib.sha256(body).digest() != digest:
        raise ArtifactError("the torchtpu artifact is damaged (its SHA-256 does not match)")
    try:
        content = pickle.loads(body)
    except Exception as e:  # noqa: BLE001 - a checksummed pickle that does not load: another torch
        raise ArtifactError(f"the torchtpu artifact does not load: {type(e).__name__}: {e}") from e
    if content.get("format") != FORMAT:
        raise ArtifactError(f"the torchtpu artifact has format {content.get('format')}, this torchtpu reads {FORMAT}")
    if content.get("identity") != identity():
        raise ArtifactError(
            f"the torchtpu artifact was written by {content.get('identity')}, this is {identity()}: "
            "compile the function again with this torchtpu"
        )
    return content["state"]


# ---------------------------------------------------------------- describe and rebuild


def _encode_op(op) -> tuple:
    if not isinstance(op, torch._ops.OpOverload):
        raise NotSaved(f"a view output made by {op!r}, not an ATen op")
    return (op._schema.name, op._overloadname)


def _decode_op(encoded: tuple):
    name, overload = encoded
    namespace, op = name.split("::")
    return getattr(getattr(getattr(torch.ops, namespace), op), overload or "default")


def _reduce_graph_module(gm: torch.fx.GraphModule) -> tuple:
    """The ATen graph as its code and attributes (GraphModule's own pickling, without the
    tracing metadata it keeps in `meta`)."""
    fn, (body, *rest) = gm.__reduce__()
    return (fn, ({**body, "meta": {}}, *rest))


def describe(fn, kind: str) -> dict:
    """The state an artifact carries for `fn`, what `backend.compile_aten_graph` returned;
    NotSaved says why there is none."""
    transforms = []
    inner = getattr(fn, "torchtpu_transforms", None)
    if inner is not None:
        steps, fn = inner
        for t in steps:
            from torchtpu.compiled.batch_norm_folding import FoldedInputs
            from torchtpu.compiled.weight_layout import RelaidInputs

            if isinstance(t, FoldedInputs):
                transforms.append(("fold", list(t.folds)))
            elif isinstance(t, RelaidInputs):
                transforms.append(("relayout", dict(t.perms)))
            else:
                raise NotSaved(f"an input transform {type(t).__name__}")
    graph = getattr(fn, "torchtpu_graph", None)
    if graph is None:
        raise NotSaved(
            "it is not one compiled program (per-size programs of a graph with symbolic shapes, eager partitions "
            "around unsupported ops, or a graph run eagerly)"
        )
    from torchtpu.compiled.executor import CompiledGraph

    if type(graph) is not CompiledGraph or graph.program is None or graph.mesh is not None or graph._spmd:
        raise NotSaved("its program is sharded (SPMD), replicated (collectives) or not compiled yet")
    outputs = []
    for spec in graph.outputs:
        value = spec.value
        if spec.kind == "view":
            value = [(_encode_op(op), args, kwargs) for op, args, kwargs in value]
        outputs.append((spec.kind, spec.index, value, spec.stride))
    reference = graph.reference
    if isinstance(reference, _LazyGraph):  # rebuilt from an artifact itself
        eager = reference.reduced
    elif isinstance(getattr(reference, "__self__", None), torch.fx.GraphModule):
        eager = _reduce_graph_module(reference.__self__)
    else:
        raise NotSaved("its eager form is not an FX graph")
    from torchtpu.options import Options

    # The compile settings the graph keeps (passes, donate, xla_options, ...: its attributes
    # named as options), and strict, which it keeps as "no eager fallback".
    settings = {f.name: getattr(graph, f.name) for f in dataclasses.fields(Options) if hasattr(graph, f.name)}
    settings["strict"] = graph.eager is None
    return {
        "kind": kind,
        "name": graph.name,
        "ir": graph.ir_text,
        "settings": settings,
        "inputs": [(spec.kind, spec.index, spec.value) for spec in graph.inputs],
        "outputs": outputs,
        "output_is_tuple": graph.output_is_tuple,
        "made_on": graph.made_on,
        "sites": graph.index_sites,
        "eager": eager,
        "transforms": transforms,
    }


def rebuild(state: dict):
    """The boxed callable `describe` described: its program compiled from the IR through the
    engine (a graph- and executable-cache hit when it was compiled on this machine before)."""
    from torchtpu.compiled.executor import compile_exported
    from torchtpu.compiled.exporter import Exported, InputSpec, OutputSpec
    from torchtpu.options import Options

    outputs = []
    for kind, index, value, stride in state["outputs"]:
        if kind == "view":
            value = [(_decode_op(op), a, k) for op, a, k in value]
        outputs.append(OutputSpec(kind, index, value, stride))
    exported = Exported(
        state["ir"],
        [InputSpec(kind, index, value) for kind, index, value in state["inputs"]],
        outputs,
        state["output_is_tuple"],
        ops=[],
        made_on=state["made_on"],
    )
    known = {f.name for f in dataclasses.fields(Options)}
    opts = Options(**{k: v for k, v in state["settings"].items() if k in known})
    name = f"{state['kind']}_loaded_{next(_loaded_ids)}"
    checks = None
    if state["sites"] is not None:
        checks = (sum(o.kind == "ir" for o in outputs), state["sites"])
    graph = compile_exported(exported, opts, name, eager=_LazyGraph(state["eager"]), checks=checks)
    _stats.bump("graphs_loaded")
    log.info("%s: loaded from an artifact (%s, saved as %s)", name, state["kind"], state["name"])
    boxed = _boxed(graph)
    if not state["transforms"]:
        return boxed
    from torchtpu.compiled.batch_norm_folding import FoldedInputs
    from torchtpu.compiled.weight_layout import RelaidInputs

    steps = [FoldedInputs(v) if k == "fold" else RelaidInputs(v) for k, v in state["transforms"]]

    def call(args):
        for t in steps:
            args = t.apply(args)
        return boxed(args)

    call._boxed_call = True
    call.torchtpu_transforms = (steps, boxed)
    return call


class _LazyGraph:
    """A saved graph's eager form (what runs where its program fails at run time, and what
    sharding.explain computes with), rebuilt from its code at its first use, not at the load."""

    def __init__(self, reduced: tuple):
        self.reduced, self.gm = reduced, None

    def __call__(self, *args):
        if self.gm is None:
            fn, fn_args = self.reduced
            self.gm = fn(*fn_args)
        return self.gm.forward(*args)


def _boxed(graph):
    def run(args):
        return graph(*args)

    run._boxed_call = True
    run.torchtpu_graph = graph
    return run


# ---------------------------------------------------------------- AOTAutograd's cache


@dataclasses.dataclass
class TorchTPUOutputCode(OutputCode):
    """One compiled ATen graph as AOTAutograd's cache keeps it (bundled): in memory the boxed
    callable; serialized, its artifact."""

    fn: Callable | None = None
    kind: str = "inference"
    artifact: bytes | None = None

    def __post_init__(self) -> None:
        self._boxed_call = True

    def __call__(self, inputs: Sequence[Any]) -> Any:
        return self.fn(inputs)

    def _artifact(self) -> bytes:
        if self.artifact is None:
            from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache

            try:
                self.artifact = pack(describe(self.fn, self.kind))
            except NotSaved as e:
                why = f"torchtpu keeps no artifact of this {self.kind} graph: {e}"
                if torch._functorch.config.strict_autograd_cache:  # aot_compile: the user's error
                    raise ArtifactError(why) from None
                raise BypassAOTAutogradCache(why) from None  # not cached: traced and compiled each time
        return self.artifact

    def prepare_for_serialization(self) -> None:
        self._artifact()
        self.fn = None

    def __getstate__(self) -> dict:
        # Serialized as its artifact (made here, not kept: the live object keeps only `fn`).
        state = self.__dict__.copy()
        if state.get("fn") is not None:
            if state.get("artifact") is None:
                state["artifact"] = TorchTPUOutputCode(self.fn, self.kind)._artifact()
            state["fn"] = None
        return state

    def post_compile(self, example_inputs, constants, graph_kwargs) -> None:
        if self.fn is not None:
            return
        from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache

        try:
            self.fn = rebuild(unpack(self.artifact))
        except ArtifactError as e:
            # A miss, not a failure: AOTAutograd traces and torchtpu compiles as without the entry.
            raise BypassAOTAutogradCache(str(e)) from None

    def set_triton_bundle(self, triton_bundle) -> None:
        pass


def takes_part(opts) -> bool:
    """Whether this graph's compiled programs go into AOTAutograd's cache: always under
    `aot_compile` and `caching_precompile`; otherwise with option `autograd_cache` and PyTorch's
    switches on, where nothing makes the result depend on more than the traced graph and the
    options (a sharding mesh's layouts, a dump folder that a hit would leave empty)."""
    from torch._functorch._aot_autograd.autograd_cache import (
        should_use_local_autograd_cache,
        should_use_remote_autograd_cache,
    )

    if torch._functorch.config.force_autograd_cache or torch._dynamo.config.caching_precompile:
        # aot_compile forces the cache and its entries must hold OutputCodes (a graph that has
        # no artifact is refused there, naming why); caching_precompile's entries are its bundles.
        return True
    if opts.dump_dir or _sharding.ACTIVE:
        return False
    return opts.autograd_cache and (should_use_local_autograd_cache() or should_use_remote_autograd_cache())


def cacheable(compiler: Callable, kind: str):
    """`compiler` (gm, inputs) -> boxed callable, as AOTAutograd's cache takes it."""
    from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler

    def compile_graph(gm, example_inputs):
        return TorchTPUOutputCode(compiler(gm, example_inputs), kind)

    return SerializableAOTDispatchCompiler(TorchTPUOutputCode, compile_graph)


@contextlib.contextmanager
def taking_part(opts):
    """Around AOTAutograd's call: the cache key names torchtpu and its options (PyTorch's key
    knows the traced graph, not what the backend does with it), entries are bundled (they hold
    the OutputCode itself, not an Inductor FX-graph-cache key), and the backward graph is
    compiled with the forward (an entry is written only once both are compiled, and a lazily
    compiled backward would be compiled outside this context)."""
    tag = torch.compiler.config.cache_key_tag
    ours = f"torchtpu {sorted(identity().items())} {opts!r}"
    with (
        torch.compiler.config.patch(cache_key_tag=f"{tag}|{ours}" if tag else ours),
        torch._functorch.config.patch(bundled_autograd_cache=True, force_non_lazy_backward_lowering=True),
    ):
        yield


# ---------------------------------------------------------------- aot_compile


def saving_ahead() -> bool:
    """Inside `aot_compile` (which asks AOTAutograd for nonce cache keys: its artifact is saved
    by the caller, never looked up), or under `torch._dynamo.config.caching_precompile` (Dynamo's
    own cache of guards and bytecode, which keeps each backend's result as an artifact)."""
    return bool(torch._functorch.config.bypass_autograd_cache_key or torch._dynamo.config.caching_precompile)


def direct(gm: torch.fx.GraphModule, boxed, single: bool) -> DirectInference:
    """An inference graph compiled without AOTAutograd's wrapper, as a callable `aot_compile`
    saves; under caching_precompile also recorded as the artifact of its Dynamo graph
    (AOTAutograd's cache records the others)."""
    fn = DirectInference(boxed, single)
    backend_id = getattr(gm, "_backend_id", None)
    if torch._dynamo.config.caching_precompile and backend_id is not None:
        from torch._dynamo.precompile_context import PrecompileContext

        try:
            data = DirectInference.serialize_compile_artifacts(fn)
        except ArtifactError as e:
            log.info("caching_precompile: %s", e)
        else:
            PrecompileContext.record_artifact(DirectArtifact(backend_id, data))
    return fn


class DirectInference(SerializableCallable):
    """An inference graph compiled without AOTAutograd's wrapper (`backend._inference_without_
    wrapper`), as `aot_compile` saves it: called with the Dynamo graph's inputs."""

    def __init__(self, boxed, single: bool):
        self.boxed, self.single = boxed, single

    def __call__(self, *args):
        out = self.boxed(list(args))
        return out[0] if self.single else out

    @classmethod
    def serialize_compile_artifacts(cls, fn: DirectInference) -> bytes:
        try:
            state = describe(fn.boxed, "inference")
        except NotSaved as e:
            raise ArtifactError(f"torchtpu cannot save this inference graph: {e}") from None
        return pickle.dumps({"single": fn.single, "graph": pack(state)})

    @classmethod
    def deserialize_compile_artifacts(cls, data: bytes) -> DirectInference:
        try:
            saved = pickle.load(io.BytesIO(data))
        except Exception as e:  # noqa: BLE001 - damaged before our own checksum
            raise ArtifactError(f"the torchtpu artifact does not load: {type(e).__name__}: {e}") from e
        return cls(rebuild(unpack(saved["graph"])), saved["single"])


class DirectArtifact(BackendCacheArtifact):
    """caching_precompile's record of a `DirectInference`: its serialized bytes."""

    def after_deserialization(self) -> DirectInference:
        return DirectInference.deserialize_compile_artifacts(self.content)


__all__ = [
    "ArtifactError",
    "DirectArtifact",
    "DirectInference",
    "TorchTPUOutputCode",
    "describe",
    "pack",
    "rebuild",
    "unpack",
]
