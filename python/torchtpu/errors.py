"""torchtpu's exception types. Each reaches the caller of a compiled function as itself:
Dynamo wraps what a backend raises in `BackendCompilerFailed`, except the `ShortenTraceback`
family, which it passes through unchanged (it only trims its own frames), so these derive
from it. All are RuntimeErrors; `OptionsError` is also a ValueError.

    TorchTPUError
    ├── FallbackError          what falls back to eager in normal use (raised under strict)
    │   ├── UnsupportedError   an op or a form of it without a lowering: op, node, reason
    │   ├── CompileError       the PJRT plugin refused to compile the program
    │   ├── PluginError        the PJRT plugin cannot be loaded or started
    │   └── ExecutionError     the PJRT plugin failed running the program
    ├── InternalError          a bug in torchtpu (or an injected fault): never silent
    ├── OptionsError           a bad `options={...}` or pass pipeline (also a ValueError)
    ├── IRError                IR text a user handed in that does not parse or verify
    │                          (`canonical_ir`, `run_pipeline`): line, col (also a ValueError)
    ├── InputError             inputs that do not match a compiled program (count, dtype,
    │                          shape, device, strides): index (also a ValueError)
    ├── DeviceForkError        the device used in a process forked after it started
    ├── OpArgumentError        what eager's kernels refuse and meta kernels do not (mixed
    │                          dtypes in a matrix product, an empty max()): also an IndexError
    ├── IndexOutOfRangeError   an index out of range for its op (x[idx], gather, embedding, a
    │                          loss target), where XLA would clamp it: op, where, reads (also
    │                          an IndexError; index_checks.py)
    ├── DeviceAssertError      a check the program made on the device failed: an
    │                          `_assert_async` (one_hot's class range, a library's
    │                          `torch._assert_async`), or `x[mask] = v` with v's count not
    │                          the mask's: op, where, message (index_checks.py)
    └── ShardingError          a bad Mesh, sharding spec or plan, or a dim its axes do not
                               divide (torchtpu.sharding; also a ValueError)

The Rust extension raises these (`from_rust` maps its error enums onto them), so callers tell
cases apart by type, not by parsing messages. `kind` names the case in
`torchtpu.stats()["fallback_reasons"]`.
"""

from __future__ import annotations

try:
    from torch._dynamo.exc import ShortenTraceback as _PassedThrough
except ImportError:  # pragma: no cover - other torch versions
    _PassedThrough = RuntimeError


class TorchTPUError(_PassedThrough):
    kind = "error"

    def __init__(self, message: str):
        if _PassedThrough is RuntimeError:
            super().__init__(message)
        else:
            super().__init__(message, first_useful_frame=None)


class FallbackError(TorchTPUError):
    """What makes a graph (or a node of it) run eagerly in normal use; raised instead under
    options={"strict": True}. `ops` names the ops concerned, where known."""

    kind = "fallback"

    def __init__(self, message: str, ops: list[str] | None = None):
        super().__init__(message)
        self.ops = list(ops or [])


class UnsupportedError(FallbackError):
    """An op, or a form of it ("round with decimals != 0"), that torchtpu does not lower:
    `op` (namespace.name), `node` (the IR value or FX node) and `reason` (None: no lowering
    at all)."""

    kind = "unsupported"

    def __init__(
        self,
        message: str,
        ops: list[str] | None = None,
        op: str | None = None,
        node: str | None = None,
        reason: str | None = None,
        line: int | None = None,
        col: int | None = None,
    ):
        super().__init__(message, ops if ops is not None else ([op] if op else []))
        self.op, self.node, self.reason = op, node, reason
        # Where the refused node was written in the IR text, when the compiler knows.
        self.line, self.col = line, col


class CompileError(FallbackError):
    """The PJRT plugin refused to compile a program torchtpu built (the plugin's message)."""

    kind = "compile"


class PluginError(FallbackError):
    """The PJRT plugin could not be loaded or started: names the path tried and how to fix it."""

    kind = "plugin"


class ExecutionError(FallbackError):
    """The PJRT plugin failed running a compiled program."""

    kind = "execution"


class InternalError(TorchTPUError):
    """A bug inside torchtpu: a pass, the lowering or the runtime broke an invariant, or a
    Rust panic. In normal use the graph runs eagerly with a warning that names a reproduction
    (`repro.py`); under strict, and in torchtpu's own tests, it is raised. `stage` says where
    (export, verify, passes, lower, compile, execute)."""

    kind = "internal"

    def __init__(self, message: str, stage: str | None = None):
        super().__init__(message)
        self.stage = stage


class OptionsError(TorchTPUError, ValueError):
    """An unknown option or a value of the wrong type in `options={...}`."""

    kind = "options"


class IRError(TorchTPUError, ValueError):
    """IR text handed to `torchtpu.canonical_ir`/`run_pipeline` that does not parse or
    verify: `line` and `col` (1-based) where it was found, when known."""

    kind = "ir"

    def __init__(self, message: str, line: int | None = None, col: int | None = None):
        super().__init__(message)
        self.line, self.col = line, col


class InputError(TorchTPUError, ValueError):
    """Inputs that do not match a compiled program: their count, or input `index`'s dtype,
    shape, device or layout (the extension checks each before reading its memory)."""

    kind = "input"

    def __init__(self, message: str, index: int | None = None):
        super().__init__(message)
        self.index = index


class ShardingError(TorchTPUError, ValueError):
    """A bad `torchtpu.Mesh`, sharding spec or `parallelize` plan, or a tensor dim that is not
    divisible by the mesh axes splitting it: the message names the tensor, dim and axis."""

    kind = "sharding"


class DeviceForkError(TorchTPUError):
    """The tpu device (its PJRT plugin) was used in a process forked after the parent had
    started it, as CUDA refuses ("Cannot re-initialize CUDA in forked subprocess"): the plugin's
    threads did not survive the fork, so the call would hang. Use the 'spawn' start method.
    Never a fallback: raised as it is."""

    kind = "forked"


class OpArgumentError(TorchTPUError, IndexError):
    """Arguments that eager's kernels refuse but the meta kernels (so Dynamo and make_fx) let
    through, found when the graph is written: a matrix product of operands of different
    dtypes (an f32 weight and a bf16, f64 or integer input), a reduction without an identity
    (`max()`, `argmin()`) over no elements. torchtpu refuses them too instead of computing
    something (a promoted dtype, -inf). The user's code to fix: never a fallback. Also an
    IndexError, as eager's empty-reduction error is."""

    kind = "op_argument"


_BY_KIND = {
    cls.kind: cls
    for cls in (
        DeviceForkError,
        UnsupportedError,
        CompileError,
        PluginError,
        ExecutionError,
        InternalError,
        OptionsError,
        IRError,
        InputError,
        ShardingError,
    )
}


def from_rust(kind: str, message: str, fields: dict | None = None) -> TorchTPUError:
    """The exception for a Rust error: `kind` is one of unsupported, compile, plugin,
    execution, internal, options, ir, input; `fields` its structured parts (op, node, reason,
    line, col; stage; line, col; index)."""
    cls = _BY_KIND.get(kind, InternalError)
    fields = dict(fields or {})
    if cls is UnsupportedError:
        return cls(
            message,
            op=fields.get("op"),
            node=fields.get("node"),
            reason=fields.get("reason"),
            line=fields.get("line"),
            col=fields.get("col"),
        )
    if cls is InternalError:
        return cls(message, stage=fields.get("stage"))
    if cls is IRError:
        return cls(message, line=fields.get("line"), col=fields.get("col"))
    if cls is InputError:
        return cls(message, index=fields.get("index"))
    return cls(message)


class RecompileError(TorchTPUError):
    """Under TORCHTPU_EAGER_CACHE_ONLY=1, DeferAndFuse mode would compile after warm-up: `what`
    names the region (its key, op count, cut reason and site, and how it differs from the
    nearest cached region)."""

    kind = "recompile"

    def __init__(self, message: str, what: str):
        super().__init__(message)
        self.what = what


class DeviceOpError(TorchTPUError):
    """An op on the `tpu` device failed (debug mode, `torchtpu.eager.mode("debug")`): `op` (the
    ATen overload), `input_types` (`f32[4, 4]` per tensor argument) and `frame` (the user's
    `file:line` that called it)."""

    kind = "device_op"

    def __init__(self, message: str, op: str = "", input_types=(), frame: str | None = None):
        super().__init__(message)
        self.op = op
        self.input_types = list(input_types)
        self.frame = frame


class NonFiniteError(DeviceOpError):
    """Debug mode with `check_finite`: the first op on the `tpu` device whose result holds a
    NaN or an infinity where none of its inputs did."""

    kind = "non_finite"


class DeviceAssertError(TorchTPUError):
    """A condition the program checked on the device did not hold: an `_assert_async` (its
    message, as CPU eager's RuntimeError says it) or a shape eager checks from data (`x[mask]
    = v` with v's count not the mask's). Raised at the next host read, as CUDA's device
    assert: `op`, `where` (the user's `file:line`, where known) and `message`. A user's bug:
    raised, never a fallback (index_checks.py)."""

    kind = "device_assert"

    def __init__(self, message: str, op: str = "", where: str | None = None, check: str = ""):
        super().__init__(message)
        self.op, self.where, self.check = op, where, check


# The user's mistakes: raised as they are wherever a failure could otherwise mean "run
# eagerly" (`policy.on_failure`, `fallback.compile_graph`), since eager would not fix them.
RAISED_AS_IS = (DeviceForkError, OpArgumentError, ShardingError, OptionsError)


class IndexOutOfRangeError(TorchTPUError, IndexError):
    """An index out of range for the op that read it (`x[idx]`, `gather`, `embedding`, a loss
    target), where CPU eager raises and XLA would clamp: `op` (the op called), `where` (the
    user's `file:line`, where known) and `reads` (what read the index, with its valid range).
    Both a RuntimeError (as CUDA's device assert and CPU's gather raise) and an IndexError (as
    CPU's indexing raises). A user's bug: raised, never a fallback (index_checks.py)."""

    kind = "index"

    def __init__(self, message: str, op: str = "", where: str | None = None, reads: str = ""):
        super().__init__(message)
        self.op, self.where, self.reads = op, where, reads
