"""torch.distributed on the `tpu` device: the `tpu_dist` backend (docs/distributed.md).

    device = torch.accelerator.current_accelerator()    # tpu
    dist.init_process_group()                           # "cpu:gloo,tpu:tpu_dist"

`register()` (called when the tpu device registers, and by the `torch.distributed.backends`
entry point for `init_process_group("tpu_dist")`) registers the backend for the `tpu` device.
`patch_for_tpu_use()` (where tpu is expected to be the accelerator, else at the first tpu
tensor or tpu_dist group) makes `init_process_group()` without a backend pick
"cpu:gloo,tpu:tpu_dist" where tpu is the accelerator (torch itself would make a group with only the accelerator's backend and
name it "undefined"). Where tpu is not the accelerator (the CPU plugin without
TORCHTPU_DEVICE=1) nothing changes: a CPU program stays plain gloo.

Layout: `backend` (`TpuDistBackend`, its `Work`, the desync check), `transport` (the seam
that picks how a group's bytes move, and `HostTransport`), `inprocess` (`InProcessTransport`:
ranks that are threads of this process), `threads` (`spawn`), `_errors`.
"""

from __future__ import annotations

import functools

import torch

NAME = "tpu_dist"
DEFAULT = "cpu:gloo,tpu:tpu_dist"
_registered = False


def spawn(fn, nprocs=None, args=(), **kwargs):
    """Runs `fn(rank, *args)` on `nprocs` ranks that are threads of this process, rank r on
    `tpu:r`, their collectives one replicated program each (`threads.spawn`)."""
    from torchtpu.distributed.threads import spawn as _spawn

    return _spawn(fn, nprocs, args, **kwargs)


def __getattr__(name: str):
    # The error types load torchtpu.errors (and so Dynamo): not at `import torch`, where the
    # device registers this backend.
    if name in ("CollectiveError", "CollectiveMismatchError"):
        from torchtpu.distributed import _errors

        return getattr(_errors, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _create(opts, backend_options=None):
    """The creator torch calls (extended API) for each group that uses tpu_dist."""
    from torchtpu.distributed.backend import TpuDistBackend

    patch_for_tpu_use()

    return TpuDistBackend(
        opts.store,
        opts.group_rank,
        opts.group_size,
        opts.timeout,
        group_name=opts.group_id,
        global_ranks=list(opts.global_ranks_in_group or []),
    )


def _default_backend(backend, device_id):
    """What `init_process_group` gets for `backend=None`: DEFAULT where the group's device is
    tpu (the accelerator, or device_id), else torch's own choice."""
    if backend is not None:
        return backend
    if device_id is not None:
        kind = device_id.type if isinstance(device_id, torch.device) else None
        if kind is None:  # an int: the accelerator's index
            acc = torch.accelerator.current_accelerator()
            kind = acc.type if acc is not None else None
        return DEFAULT if kind == "tpu" else None
    acc = torch.accelerator.current_accelerator(check_available=True)
    return DEFAULT if acc is not None and acc.type == "tpu" else None


def _patch_init_process_group() -> None:
    import sys

    import torch.distributed.distributed_c10d as c10d

    original = c10d.init_process_group
    if getattr(original, "_torchtpu", False):
        return

    @functools.wraps(original)
    def init_process_group(backend=None, *args, **kwargs):
        if backend is None and not args:
            backend = _default_backend(None, kwargs.get("device_id"))
        return original(backend, *args, **kwargs)

    init_process_group._torchtpu = True
    # The modules that hold it by name (imported before this ran): c10d, torch.distributed,
    # and DeviceMesh, whose `init_device_mesh` initialises the default group this way.
    for name in ("torch.distributed.distributed_c10d", "torch.distributed", "torch.distributed.device_mesh"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "init_process_group", None) is original:
            module.init_process_group = init_process_group


def register() -> None:
    """Registers `tpu_dist` for the `tpu` device (idempotent); the default-backend choice of
    `init_process_group()` with it."""
    global _registered
    if _registered:
        return
    import torch.distributed as dist

    if not dist.is_available():
        return
    if "TPU_DIST" not in dist.Backend._plugins:
        dist.Backend.register_backend(NAME, _create, extended_api=True, devices=["tpu"])
    _registered = True


def patch_for_tpu_use() -> None:
    """The patches to torch.distributed a tpu program needs (idempotent): the default-backend
    choice of `init_process_group()` and FSDP2's move of CPU states onto a tpu mesh. Applied
    with the device's others (`device/_patches.apply_for_tpu_use`) and at the first tpu_dist
    group, not at `import torch`."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    _patch_init_process_group()
    from torchtpu.distributed import _fsdp

    _fsdp.install()  # fully_shard of a CPU module onto a tpu mesh (HF Trainer's FSDP)


__all__ = ["register", "patch_for_tpu_use", "NAME", "DEFAULT", "CollectiveError", "CollectiveMismatchError"]
