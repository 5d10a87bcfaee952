"""tpu_dist across processes on GPU/TPU plugins: one PJRT client spanning the processes.

GPU plugins create a client that spans processes when each process passes `node_id` /
`num_nodes` and key-value store callbacks at client creation (`Client::with_distributed` in
the runtime). Here the store is the c10d store (`torch.distributed.Store`), under the prefix
`torchtpu/pjrt/`, and the engine is configured before it starts:

- explicitly: `configure(store, node_id, num_nodes)` (node id and count default to
  `TORCHTPU_DIST_NODE_ID` / `TORCHTPU_DIST_NUM_NODES`);
- or by `dist.init_process_group()` when those variables are set: the tpu_dist backend's first
  group (this process `node_id` of `num_nodes` ranks) configures the engine with its store
  and starts it (`pick_transport` -> `transport_for`).

Either way the engine starts right away with the GIL released: the plugin calls the store
from its own threads while the client is made. `configure` after the engine started raises
RuntimeError. The XLA CPU plugin refuses `node_id` ("Unexpected option name passed to
PJRT_Client_Create: node_id", measured), so there the engine's start fails with that message,
and without the variables a CPU program keeps the host transport.

`XlaProcessTransport` is what a group gets on such a client. What runs today: the desync
check's exchange and barrier (through the host transport's gloo group). Its collectives as
XLA programs across processes are not written yet (no GPU to run them on): each raises
NotImplementedError naming what is missing. See docs/distributed.md, "GPU/TPU plugins across
processes".
"""

from __future__ import annotations

import os
from datetime import timedelta

from torch._C._distributed_c10d import PrefixStore

NODE_ID_ENV = "TORCHTPU_DIST_NODE_ID"
NUM_NODES_ENV = "TORCHTPU_DIST_NUM_NODES"
#: The prefix of the plugin's keys in the c10d store (the header leaves collisions to us).
STORE_PREFIX = "torchtpu/pjrt/"


def _C():
    from torchtpu import _C as c

    return c


def requested() -> tuple[int, int] | None:
    """`(node_id, num_nodes)` from the environment, or None when neither variable is set."""
    node, nodes = os.environ.get(NODE_ID_ENV, "").strip(), os.environ.get(NUM_NODES_ENV, "").strip()
    if not node and not nodes:
        return None
    if not node or not nodes:
        raise ValueError(f"set both {NODE_ID_ENV} and {NUM_NODES_ENV}, or neither")
    try:
        return int(node), int(nodes)
    except ValueError:
        raise ValueError(f"{NODE_ID_ENV}={node!r} and {NUM_NODES_ENV}={nodes!r} must be integers") from None


def configuration() -> tuple[int, int] | None:
    """`(node_id, num_nodes)` the engine was configured with, or None."""
    return _C().distributed_configuration()


def configure(store, node_id: int | None = None, num_nodes: int | None = None, start: bool = True) -> tuple[int, int]:
    """Makes the engine's client span `num_nodes` processes, this one `node_id`, exchanging
    through `store` (a `torch.distributed.Store` all of them share; its keys go under
    `torchtpu/pjrt/`). Must be called before the engine starts (the tpu device's or the
    compiler's first use), else RuntimeError. With `start` (the default) the engine starts
    now, with the GIL released; every process must do the same, since creating the client
    waits for all of them."""
    c = _C()
    got = c.configure_distributed(node_id, num_nodes, PrefixStore(STORE_PREFIX, store))
    if start:
        c.start_engine()
    return tuple(got)


def _maybe_configure_from_env(store, rank: int, size: int, global_ranks) -> None:
    """The first group of a process whose environment asks for a client across processes
    (this rank `node_id` of `num_nodes`) configures and starts the engine with its store."""
    want = requested()
    if want is None or configuration() is not None or _C().engine_started():
        return
    node_id, num_nodes = want
    if global_ranks is not None and list(global_ranks) != list(range(size)):
        return  # a sub-group: only the whole world's group configures
    if (rank, size) != (node_id, num_nodes):
        raise ValueError(
            f"{NODE_ID_ENV}={node_id} and {NUM_NODES_ENV}={num_nodes}, but this process is rank {rank} of a "
            f"{size}-process group: the PJRT nodes are the processes of the default group"
        )
    configure(store, node_id, num_nodes)


def transport_for(store, rank: int, size: int, timeout: timedelta, global_ranks, host):
    """The transport of a group whose processes share one PJRT client across processes, or
    None (the caller keeps `host`): not configured, the CPU platform, `TORCHTPU_DIST_TRANSPORT=host`,
    or a group with ranks outside the client's nodes."""
    if os.environ.get("TORCHTPU_DIST_TRANSPORT", "").strip().lower() == "host":
        return None
    _maybe_configure_from_env(store, rank, size, global_ranks)
    cfg = configuration()
    if cfg is None:
        return None
    if _C().platform_name() == "cpu":  # starts the engine (configured: it fails clearly on CPU)
        return None
    node_id, num_nodes = cfg
    members = list(global_ranks) if global_ranks is not None else list(range(size))
    if global_ranks is None and size != num_nodes:
        return None
    if any(not 0 <= r < num_nodes for r in members):
        return None
    return XlaProcessTransport(rank, size, members, node_id, num_nodes, host)


_MISSING = (
    "tpu_dist: {op} as one XLA program across processes is not implemented yet. The engine's PJRT client "
    "spans the processes (node {node} of {nodes}), but a program across them also needs: the client's "
    "global device list (PJRT_Client_Devices, not bound by torchtpu's runtime) to build a device "
    "assignment over every process's devices; compiling the collective with num_replicas = the group's "
    "devices and that assignment; and executing each process's share on its addressable devices "
    "(ReplicatedProgram runs only programs whose replicas are all in this process). Until then set "
    "TORCHTPU_DIST_TRANSPORT=host (the gloo host transport) or leave {env_id}/{env_n} unset."
)


class XlaProcessTransport:
    """A group whose processes are nodes of one PJRT client (GPU/TPU plugins). The desync
    check's `exchange` and `barrier` go through the host transport's gloo group; every
    collective raises NotImplementedError (see `_MISSING`)."""

    name = "xla-processes"

    def __init__(self, rank: int, size: int, members: list[int], node_id: int, num_nodes: int, host):
        self.rank, self.size, self.members = rank, size, members
        self.node_id, self.num_nodes = node_id, num_nodes
        self.host = host

    def exchange(self, values):
        return self.host.exchange(values)

    def barrier(self, sync):
        return self.host.barrier(sync)

    def set_timeout(self, timeout):
        self.host.set_timeout(timeout)

    def _missing(self, op: str):
        raise NotImplementedError(
            _MISSING.format(op=op, node=self.node_id, nodes=self.num_nodes, env_id=NODE_ID_ENV, env_n=NUM_NODES_ENV)
        )

    def all_reduce(self, tensors, red, sync):
        self._missing("all_reduce")

    def broadcast(self, tensors, root, sync):
        self._missing("broadcast")

    def reduce(self, tensors, root, red, sync):
        self._missing("reduce")

    def all_gather(self, outputs, inputs, sync):
        self._missing("all_gather")

    def all_gather_into(self, outputs, inputs, sync):
        self._missing("all_gather_into_tensor")

    def reduce_scatter(self, outputs, inputs, red, sync):
        self._missing("reduce_scatter")

    def reduce_scatter_tensor(self, outputs, inputs, red, sync):
        self._missing("reduce_scatter_tensor")

    def all_to_all(self, outputs, inputs, sync):
        self._missing("all_to_all")

    def all_to_all_single(self, output, input, out_splits, in_splits, sync):
        self._missing("all_to_all_single")

    def gather(self, outputs, inputs, root, sync):
        self._missing("gather")

    def scatter(self, outputs, inputs, root, sync):
        self._missing("scatter")

    def send(self, tensors, dst, tag, sync):
        self._missing("send")

    def recv(self, tensors, src, tag, sync):
        self._missing("recv")
