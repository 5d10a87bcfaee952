"""tpu_dist across processes on GPU/TPU plugins (multinode.py, `_C.configure_distributed`):
what runs without a GPU. The engine is process-wide, so what starts it runs in a subprocess."""

import os
import subprocess
import sys
import textwrap
from datetime import timedelta

import pytest
import torch.distributed as dist

from torchtpu import _C
from torchtpu.distributed import multinode
from torchtpu.distributed.transport import HostTransport, pick_transport


def _run(code: str, **env) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("TORCHTPU_DIST_")}
    full.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=full, capture_output=True, text=True, timeout=240
    )


@pytest.mark.parametrize("kind", ["hash", "tcp"])
def test_the_rust_store_calls_the_c10d_store(kind):
    store = (
        dist.HashStore() if kind == "hash" else dist.TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=10))
    )
    got, tried, absent, timed_out = _C._kv_store_probe(store, "topology/0", b"\x00bin\xff", "never", 50)
    assert got == tried == b"\x00bin\xff"
    assert absent is None
    assert timed_out.startswith("DeadlineExceeded") and '"never"' in timed_out and "50 ms" in timed_out
    assert store.get("topology/0") == b"\x00bin\xff"  # the same store, no prefix of its own


def test_configure_refuses_bad_arguments_and_a_started_engine_and_the_cpu_plugin_refuses_nodes():
    r = _run(
        """
        import torch.distributed as dist
        from torchtpu import _C
        from torchtpu.distributed import multinode
        s = dist.HashStore()
        for bad in [(2, 2), (-1, 2), (0, 0)]:
            try:
                _C.configure_distributed(*bad, s)
            except RuntimeError as e:
                assert "node_id < num_nodes" in str(e), e
            else:
                raise AssertionError(bad)
        try:
            _C.configure_distributed(0, 2, object())
        except TypeError as e:
            assert "torch.distributed.Store" in str(e), e
        assert multinode.configuration() is None and not _C.engine_started()
        try:
            multinode.configure(s, 0, 2)
        except Exception as e:
            print("START:", type(e).__name__, e)
        assert multinode.configuration() == (0, 2) and _C.engine_started()
        try:
            multinode.configure(s, 0, 2)
        except RuntimeError as e:
            print("AGAIN:", e)
        """
    )
    assert r.returncode == 0, r.stderr
    start = next(l for l in r.stdout.splitlines() if l.startswith("START:"))
    assert "PluginError" in start and "cannot create a client across processes (node 0 of 2)" in start, start
    # The plugin names whichever of the two it checks first.
    assert any(
        f"Unexpected option name passed to PJRT_Client_Create: {o}" in start for o in ("node_id", "num_nodes")
    ), start
    again = next(l for l in r.stdout.splitlines() if l.startswith("AGAIN:"))
    assert "already started" in again, again


def test_the_environment_without_a_store_is_a_clear_error():
    r = _run(
        """
        from torchtpu import _C
        try:
            _C.platform_name()
        except Exception as e:
            print("ERR:", type(e).__name__, e)
        """,
        TORCHTPU_DIST_NODE_ID="0",
        TORCHTPU_DIST_NUM_NODES="2",
    )
    assert r.returncode == 0, r.stderr
    assert "no key-value store was configured" in r.stdout and "multinode.configure" in r.stdout, r.stdout


class _FakeC:
    def __init__(self, cfg, platform):
        self.cfg, self.platform, self.started = cfg, platform, cfg is not None

    def distributed_configuration(self):
        return self.cfg

    def engine_started(self):
        return self.started

    def platform_name(self):
        return self.platform


@pytest.fixture
def host():
    return HostTransport(dist.HashStore(), 0, 1, timedelta(seconds=30))


def test_transport_for_picks_the_xla_transport_only_for_configured_non_cpu_clients(monkeypatch, host):
    monkeypatch.delenv("TORCHTPU_DIST_TRANSPORT", raising=False)
    monkeypatch.delenv(multinode.NODE_ID_ENV, raising=False)
    monkeypatch.delenv(multinode.NUM_NODES_ENV, raising=False)
    store, t = dist.HashStore(), timedelta(seconds=30)
    for cfg, platform, want in [(None, "cpu", None), ((0, 1), "cpu", None), ((0, 1), "cuda", "xla-processes")]:
        monkeypatch.setattr(multinode, "_C", lambda: _FakeC(cfg, platform))
        got = multinode.transport_for(store, 0, 1, t, None, host)
        assert (got and got.name) == want, (cfg, platform, got)
    # Groups outside the client's nodes, and the host override, keep the host transport.
    monkeypatch.setattr(multinode, "_C", lambda: _FakeC((0, 2), "cuda"))
    assert multinode.transport_for(store, 0, 3, t, None, host) is None
    assert multinode.transport_for(store, 0, 2, t, [1, 5], host) is None
    assert multinode.transport_for(store, 0, 2, t, [0, 1], host).members == [0, 1]
    monkeypatch.setenv("TORCHTPU_DIST_TRANSPORT", "host")
    assert multinode.transport_for(store, 0, 2, t, None, host) is None


def test_the_xla_transport_exchanges_through_gloo_and_names_what_its_collectives_lack(host):
    x = multinode.XlaProcessTransport(0, 1, [0], 0, 1, host)
    assert x.exchange([3, 4]) == [[3, 4]]
    x.barrier(True).wait()
    for call in [
        lambda: x.all_reduce([], None, True),
        lambda: x.broadcast([], 0, True),
        lambda: x.send([], 0, 0, True),
    ]:
        with pytest.raises(NotImplementedError) as e:
            call()
        msg = str(e.value)
        assert "across processes is not implemented" in msg and "PJRT_Client_Devices" in msg, msg
        assert "TORCHTPU_DIST_TRANSPORT=host" in msg, msg


def test_the_environment_names_a_whole_world_group(monkeypatch):
    monkeypatch.setenv(multinode.NODE_ID_ENV, "1")
    monkeypatch.setenv(multinode.NUM_NODES_ENV, "2")
    monkeypatch.setattr(multinode, "_C", lambda: _FakeC(None, "cuda"))
    with pytest.raises(ValueError, match="rank 0 of a 3-process group"):
        multinode._maybe_configure_from_env(dist.HashStore(), 0, 3, None)
    monkeypatch.setenv(multinode.NUM_NODES_ENV, "")
    with pytest.raises(ValueError, match="set both"):
        multinode.requested()


def test_pick_transport_on_the_cpu_plugin_keeps_the_host_transport(monkeypatch):
    monkeypatch.delenv(multinode.NODE_ID_ENV, raising=False)
    monkeypatch.delenv(multinode.NUM_NODES_ENV, raising=False)
    from torchtpu.distributed import inprocess

    # As for ranks in separate processes (a one-rank group here is "in process").
    monkeypatch.setattr(inprocess, "members_in_process", lambda *a: None)
    t = pick_transport(dist.HashStore(), 0, 1, timedelta(seconds=30), None)
    assert t.name == "host"
