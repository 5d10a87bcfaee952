"""torchtpu: a torch.compile backend whose compiler is written in Rust.

    model = torch.compile(model, backend="torchtpu")                 # no import needed
    model = torch.compile(model, backend="torchtpu", options={"strict": True})

Options: `strict` (raise instead of falling back to eager), `dump_dir` (write each graph's IR
and StableHLO; also TORCHTPU_DUMP_DIR), `passes` (the pass pipeline). `torchtpu.stats()` says
what was compiled, what fell back and why; `torchtpu.explain(model, *args)` reports which ops
would fall back before you run anything compiled. Logging goes to the `torchtpu` logger.
"""

import os

# The XLA plugin logs INFO lines (e.g. each client option it applies) to stderr unless told
# otherwise; a user who wants them sets TF_CPP_MIN_LOG_LEVEL=0.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from torchtpu import _C  # noqa: E402
from torchtpu._stats import reset_stats, stats  # noqa: E402

# Loaded at first use: torchtpu.errors imports Dynamo (its exceptions derive from Dynamo's
# pass-through type), which `import torch` must not pay for when the tpu device autoloads.
_ERRORS = (
    "CompileError",
    "DeviceAssertError",
    "DeviceOpError",
    "ExecutionError",
    "FallbackError",
    "IndexOutOfRangeError",
    "InputError",
    "InternalError",
    "IRError",
    "NonFiniteError",
    "OptionsError",
    "PluginError",
    "RecompileError",
    "ShardingError",
    "TorchTPUError",
    "UnsupportedError",
)
_SHARDING = ("FSDP", "Colwise", "Mesh", "Replicate", "Rowwise", "parallelize", "shard", "sharding_constraint")
_LAZY = {
    **{name: ("torchtpu.errors", name) for name in _ERRORS},
    **{name: ("torchtpu.sharding", name) for name in _SHARDING},
    "sharding": ("torchtpu.sharding", None),
    "eager": ("torchtpu.eager", None),
}


def __getattr__(name: str):
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'torchtpu' has no attribute {name!r}")
    import importlib

    module = importlib.import_module(target[0])
    value = module if target[1] is None else getattr(module, target[1])
    globals()[name] = value
    return value


__version__ = _C.__version__

__all__ = [
    "__version__",
    *_ERRORS,
    *_SHARDING,
    "sharding",
    "eager",
    "canonical_ir",
    "explain",
    "list_passes",
    "reset_stats",
    "run_pipeline",
    "stats",
]


def canonical_ir(text: str) -> str:
    """Parse and verify IR text; return it in canonical printed form.

    Raises `torchtpu.IRError` (a ValueError) with the message and `.line`/`.col` of a parse or
    verifier error.
    """
    return _C.canonical_ir(text)


def run_pipeline(text: str, pipeline: str) -> str:
    """Run a pass pipeline such as ``"canonicalize,cse,dce"`` over IR text (through the
    compiler driver). Malformed IR raises `torchtpu.IRError`, a malformed or unknown pipeline
    `torchtpu.OptionsError` (both ValueErrors); a failing pass `torchtpu.InternalError`."""
    return _C.run_pipeline(text, pipeline)


def list_passes() -> list[tuple[str, str]]:
    """``(name, one-line description)`` of every registered compiler pass."""
    return list(_C.list_passes())


def explain(model, *args, **kwargs) -> dict:
    """Traces `model(*args, **kwargs)` the way the backend would and reports, without compiling:
    the number of graphs (Dynamo graph breaks and their reasons) and the ops that would run
    eagerly for want of a lowering. Prints a summary and returns it as a dict."""
    # A private module: a submodule named `explain` would replace this function on import.
    from torchtpu._explain import explain as _explain

    return _explain(model, *args, **kwargs)


def _register_backend() -> None:
    """Registers `torchtpu` with Dynamo, and `tpu` (the name transformers compiles tpu models
    with), unless their entry points are installed or they are already known: when Dynamo
    loads an entry point it registers the function itself, and registering twice is an error.
    (Checking the entry points first keeps `import torchtpu` from importing Dynamo, which the
    `tpu` device's autoload at `import torch` must not do.)"""
    from importlib.metadata import entry_points

    installed = {ep.name for ep in entry_points(group="torch_dynamo_backends")}
    names = [n for n in ("torchtpu", "tpu") if n not in installed]
    if not names:
        return
    try:
        from torch._dynamo.backends import registry
    except Exception:  # torch missing or too old: the compiler core still works
        return
    from torchtpu.compiled.backend import torchtpu_backend

    for name in names:
        if name not in registry._COMPILER_FNS and registry._BACKENDS.get(name) is None:
            registry.register_backend(compiler_fn=torchtpu_backend, name=name)


_register_backend()
