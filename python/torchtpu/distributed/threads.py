"""Many ranks in one process: `torchtpu.distributed.spawn(fn, nprocs)` runs `fn(rank, *args)`
in `nprocs` threads, rank r on `tpu:r`, each with its own torch.distributed world (default
group, sub-groups, DeviceMesh), as `torch.multiprocessing.spawn` runs processes. Their tpu
collectives take the in-process transport (`inprocess.py`): one replicated program over the
ranks' devices, nothing through the host.

torch.distributed keeps one world per process; PyTorch's own multi-threaded test groups
make it per thread the same way (its world object per thread, the C++ group registry in
thread-isolation mode). Autograd runs each backward on its calling thread here (PyTorch's
device threads would not see the rank's world in DDP's hooks).

The ranks share what a process has one of: the CPU generator and the tpu device's generator
(`torch.manual_seed` in a rank thread races with the others' draws: make models and data
before `spawn`, or pass them in), and module-level state in general.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

_installed = False
_install_lock = threading.Lock()


class _WorldData:
    """One thread's torch.distributed state: what `c10d._World` keeps in module globals."""

    def __init__(self) -> None:
        self.default_pg = None
        self.pg_map: dict = {}
        self.pg_names: dict = {}
        self.pg_group_ranks: dict = {}
        self.pg_backend_config: dict = {}
        self.group_count = 0
        self.tags_to_pg: dict = {}
        self.pg_to_tag: dict = {}
        self.pg_coalesce_state: dict = {}
        self.pg_flight_recorder_hooks: dict = {}
        self.comms: list = []

    # Derived from the fields above: `_World`'s own property reads them from `self`.
    pg_config_info = c10d._World.pg_config_info


class _ThreadWorlds:
    """Stands in for `c10d._world`: the spawning thread keeps the process's world, each
    other thread has its own `_WorldData`."""

    _local = threading.local()

    def __init__(self, main) -> None:
        object.__setattr__(self, "_main", main)
        object.__setattr__(self, "_owner", threading.get_ident())

    def _own(self):
        if threading.get_ident() == self._owner:
            return self._main
        world = getattr(self._local, "world", None)
        if world is None:
            world = self._local.world = _WorldData()
        return world

    def __getattr__(self, name):
        return getattr(self._own(), name)

    def __setattr__(self, name, value):
        setattr(self._own(), name, value)


def _install() -> None:
    global _installed
    with _install_lock:
        if _installed:
            return
        # The installing thread keeps the world it had (a default group made before spawn).
        c10d._world = _ThreadWorlds(c10d._world)
        torch._C._distributed_c10d._set_thread_isolation_mode(True)
        _installed = True


DEFER_REFUSED = (
    "torchtpu.distributed.spawn: the eager DeferAndFuse mode records one region per process, which ranks that are "
    "threads of one process would write into at once; spawn's ranks run in strict mode (leave defer_and_fuse "
    "before spawn), and ranks that are processes (torchrun) may use DeferAndFuse"
)


def _refuse_defer() -> None:
    from torchtpu.device import _defer

    if _defer.state.in_mode:
        raise NotImplementedError(DEFER_REFUSED)


class SpawnError(RuntimeError):
    """A rank of `spawn` raised: `rank` and the original exception (`__cause__`)."""

    def __init__(self, rank: int, error: BaseException, later: list[str] = ()):
        also = f" (then {', '.join(later)})" if later else ""
        super().__init__(f"torchtpu.distributed.spawn: rank {rank} raised {type(error).__name__}: {error}{also}")
        self.rank = rank


def _process_store(timeout: timedelta):
    """Under torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set, more than one process):
    this process's place among the processes and a function giving each thread its own
    client of a TCPStore all processes share (one client's blocking wait would hold its
    socket from the other threads); else (0, 1, a HashStore for all threads)."""
    procs = int(os.environ.get("WORLD_SIZE", "1"))
    if "RANK" not in os.environ or procs == 1:
        shared = dist.HashStore()
        return 0, 1, lambda: shared, None
    proc = int(os.environ["RANK"])
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    # torchrun's agent hosts the store at MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE); without
    # an agent, process 0 hosts it. A prefix of its own: the threads' keys never meet others'.
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    server = None
    if proc == 0 and not agent:
        server = dist.TCPStore(host, port, None, True, timeout=timeout, wait_for_workers=False)

    def client():
        return dist.PrefixStore("torchtpu_spawn/", dist.TCPStore(host, port, None, False, timeout=timeout))

    return proc, procs, client, server


def spawn(
    fn,
    nprocs: int | None = None,
    args: tuple = (),
    backend: str = "cpu:gloo,tpu:tpu_dist",
    timeout: timedelta = timedelta(seconds=60),
) -> list:
    """Runs `fn(rank, *args)` on `nprocs` threads (default: every tpu device), thread t with
    `torch.tpu.set_device(t)` and a process group already initialised (`backend`; CPU tensors
    go to gloo, tpu tensors to tpu_dist), destroyed afterwards. Alone, the ranks are the
    threads (0..nprocs-1). Under torchrun with P processes, the world is P x nprocs ranks:
    process p's threads are ranks p*nprocs.., so groups within a process take the in-process
    transport and groups across processes the host one (DP across processes, TP inside each).
    Returns this process's ranks' results in order; if a rank raises, raises `SpawnError` for
    the first such rank once every thread has ended (the group's timeout ends those waiting)."""
    n = torch.tpu.device_count() if nprocs is None else int(nprocs)
    if not 1 <= n <= torch.tpu.device_count():
        raise ValueError(
            f"torchtpu.distributed.spawn: nprocs={n}, but this process has {torch.tpu.device_count()} tpu devices"
        )
    _refuse_defer()
    _install()
    if "torch._dynamo" in sys.modules:
        # Dynamo loads its backends' entry points at the first lookup, and two threads doing
        # that at once collide ("duplicate name"): load them here, once.
        from torch._dynamo.backends.registry import list_backends

        list_backends()
    proc, procs, store_for_thread, _server = _process_store(timeout)
    results: list = [None] * n
    errors: list = [None] * n

    def run(local: int) -> None:
        torch.tpu.set_device(local)
        rank = proc * n + local
        with torch.autograd.set_multithreading_enabled(False):
            try:
                dist.init_process_group(
                    backend, rank=rank, world_size=procs * n, store=store_for_thread(), timeout=timeout
                )
                try:
                    results[local] = fn(rank, *args)
                finally:
                    dist.destroy_process_group()
            except BaseException as e:  # reported after every thread ends
                errors[local] = (time.monotonic(), e)

    threads = [threading.Thread(target=run, args=(r,), name=f"tpu_dist-rank{r}", daemon=True) for r in range(n)]
    # Each rank's init_process_group wraps sys.excepthook to prefix "[rankN]:"; the process's
    # own hook comes back once the ranks end.
    hook = sys.excepthook
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sys.excepthook = hook
    # DDP keeps the module in forward in a class attribute, saved and restored around each
    # forward: threads interleaving leave a stale one, which Dynamo would then optimise for.
    from torch.nn.parallel import DistributedDataParallel

    DistributedDataParallel._active_ddp_module = None
    failed = sorted((t, local, e) for local, (t, e) in ((l, x) for l, x in enumerate(errors) if x is not None))
    if failed:
        # The first to fail is the cause; the others mostly waited on it (their timeouts).
        _, local, e = failed[0]
        later = [f"rank {proc * n + lo}: {type(x).__name__}" for _, lo, x in failed[1:]]
        raise SpawnError(proc * n + local, e, later) from e
    return results
