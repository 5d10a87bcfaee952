"""The persistent compilation cache through the backend: a second process loads executables
from disk instead of compiling; a corrupted entry is detected, recompiled and replaced; the
torchtpu-cache tool (also `python -m torchtpu.cache`) reads the cache the backend wrote."""

import json
import os
import subprocess
import sys

PROGRAM = r"""
import json, sys, torch, torchtpu
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).eval()
x = torch.randn(3, 8)
with torch.no_grad():
    y = torch.compile(model, backend="torchtpu")(x)
    torch.testing.assert_close(y, model(x), rtol=1e-5, atol=1e-5)
s = torchtpu.stats()
out = {k: s[k] for k in ("cache_misses", "disk_hits", "memory_hits", "compile_seconds_saved", "executions")}
out["graph_disk_hits"] = torchtpu._C.cache_stats()["graph_disk_hits"]
print(json.dumps(out))
"""


def run(cache_dir, extra_env=None):
    env = dict(os.environ, TORCHTPU_CACHE_DIR=str(cache_dir), **(extra_env or {}))
    r = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env, cwd="/")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def cache_tool(*args, cache_dir):
    return subprocess.run(
        [sys.executable, "-m", "torchtpu.cache", "--dir", str(cache_dir), *args], capture_output=True, text=True
    )


def test_second_process_loads_from_disk_and_corruption_is_recompiled(tmp_path):
    first, _ = run(tmp_path)
    assert first["cache_misses"] >= 1 and first["disk_hits"] == 0, first

    second, _ = run(tmp_path)
    assert second["cache_misses"] == 0, second  # no XLA compile at all
    assert second["disk_hits"] == first["cache_misses"], second
    assert second["compile_seconds_saved"] > 0, second
    assert second["graph_disk_hits"] == second["disk_hits"], second  # no lowering either

    listed = cache_tool("list", "--json", cache_dir=tmp_path)
    assert listed.returncode == 0, listed.stderr
    entries = json.loads(listed.stdout)
    assert len(entries) >= 1

    # Flip bytes in the middle of every entry's payload: verify must see it, the backend
    # must recompile (and still give the right answer), and then the cache is whole again.
    bins = list(tmp_path.rglob("*.bin"))  # both levels' entries
    assert bins
    for b in bins:
        data = bytearray(b.read_bytes())
        for i in range(len(data) // 2, len(data) // 2 + 16):
            data[i] ^= 0xFF
        b.write_bytes(bytes(data))
    assert cache_tool("verify", cache_dir=tmp_path).returncode != 0

    third, stderr = run(tmp_path)
    assert third["cache_misses"] == first["cache_misses"] and third["disk_hits"] == 0, third
    assert third["graph_disk_hits"] == 0, third
    assert "torchtpu cache" in stderr, stderr  # the discarded entry is reported
    ok = cache_tool("verify", cache_dir=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_a_compiled_graph_shows_up_at_both_levels(tmp_path):
    run(tmp_path)
    listed = cache_tool("list", "--json", cache_dir=tmp_path)
    assert listed.returncode == 0, listed.stderr
    entries = json.loads(listed.stdout)
    levels = {e["level"] for e in entries}
    assert levels == {"graph", "executable"}, entries
    graphs = [e for e in entries if e["level"] == "graph"]
    assert all(e["meta"]["level"] == "graph" and "compiler_build" in e["meta"]["components"] for e in graphs), graphs
    # The text form has the level column; stats and verify count both levels.
    text = cache_tool("list", cache_dir=tmp_path).stdout
    assert text.splitlines()[0].split()[0] == "LEVEL", text
    assert any(line.startswith("graph ") for line in text.splitlines()), text
    stats = json.loads(cache_tool("--json", "stats", cache_dir=tmp_path).stdout)
    assert [level["level"] for level in stats["levels"]] == ["graph", "executable"], stats
    assert all(level["entries"] >= 1 for level in stats["levels"]), stats
    verified = json.loads(cache_tool("--json", "verify", "--checksums-only", cache_dir=tmp_path).stdout)
    assert verified["bad"] == [] and all(n >= 1 for n in verified["checked_per_level"]), verified
    # clear covers both.
    assert cache_tool("clear", cache_dir=tmp_path).returncode == 0
    assert json.loads(cache_tool("list", "--json", cache_dir=tmp_path).stdout) == []


def test_cache_can_be_disabled(tmp_path):
    first, _ = run(tmp_path, {"TORCHTPU_CACHE": "0"})
    second, _ = run(tmp_path, {"TORCHTPU_CACHE": "0"})
    assert second["disk_hits"] == 0 and second["cache_misses"] == first["cache_misses"]
    assert not list(tmp_path.rglob("*.bin"))


def test_cache_tool_on_an_absent_cache_is_a_clear_message(tmp_path):
    r = cache_tool("list", cache_dir=tmp_path / "nowhere")
    assert r.returncode != 0
    assert "nowhere" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


# A rank of a host: warms the engine up on a small program (plugin loaded and hashed), then
# meets the other ranks at a barrier placed just before the model's compile, so they all miss
# the same programs at once; prints its counters for the model alone.
RANK_PROGRAM = r"""
import json, os, sys, time, torch, torchtpu
import torchtpu.compiled.executor as executor
sync_dir, rank, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.compile(lambda x: x * 2 + 1, backend="torchtpu")(torch.ones(3))
compile_one = executor._compile_one_device

def at_the_barrier(*args, **kwargs):
    executor._compile_one_device = compile_one
    open(os.path.join(sync_dir, f"ready-{rank}"), "w").close()
    deadline = time.monotonic() + 60
    while sum(f.startswith("ready-") for f in os.listdir(sync_dir)) < ranks:
        assert time.monotonic() < deadline, "the other ranks never came"
        time.sleep(0.001)
    return compile_one(*args, **kwargs)

executor._compile_one_device = at_the_barrier
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8)
).eval()
x = torch.randn(5, 32)
before, graph_before = torchtpu.stats(), torchtpu._C.cache_stats()
with torch.no_grad():
    y = torch.compile(model, backend="torchtpu")(x)
    torch.testing.assert_close(y, model(x), rtol=1e-5, atol=1e-5)
after, graph_after = torchtpu.stats(), torchtpu._C.cache_stats()
out = {k: after[k] - before[k] for k in ("cache_misses", "disk_hits", "disk_hits_after_wait", "graphs_compiled")}
out.update({k: graph_after[k] - graph_before[k] for k in ("graph_misses", "graph_disk_hits_after_wait", "lock_timeouts")})
print(json.dumps(out))
"""


def test_ranks_of_a_host_compile_each_program_once_and_the_others_wait_and_read(tmp_path):
    """Two processes (as torchrun starts the ranks of a host) compile the same model against
    one fresh cache folder at the same moment: the PJRT compile happens once in all, and the
    others wait for it and read the executable from disk (docs/cache.md, "Shared by the ranks
    of a host")."""
    ranks = 2
    cache, sync = tmp_path / "cache", tmp_path / "sync"
    sync.mkdir()
    env = dict(os.environ, TORCHTPU_CACHE_DIR=str(cache))
    env.pop("TORCHTPU_CACHE_SHARED", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK_PROGRAM, str(sync), str(rank), str(ranks)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd="/",
        )
        for rank in range(ranks)
    ]
    try:
        results = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(r["graphs_compiled"] == 1 and r["lock_timeouts"] == 0 for r in results), results
    # One PJRT compile in total; every other rank read it from disk, most after waiting for
    # the compile in flight (a rank that reached it late finds the entry already written). The
    # wait is for the executable, or for the graph when its lowering compiled the program to
    # race host kernels (docs/backend.md, "Host kernels").
    assert sum(r["cache_misses"] for r in results) == 1, results
    assert sum(r["disk_hits"] for r in results) == ranks - 1, results
    assert sum(r["disk_hits_after_wait"] + r["graph_disk_hits_after_wait"] for r in results) >= 1, results
    # The graph level too: lowered once.
    assert sum(r["graph_misses"] for r in results) == 1, results
    # No lock file is left, and what the cache wrote is private to this user.
    assert not list(cache.rglob("*.lock"))
    for path in [cache, *cache.rglob("*")]:
        assert path.stat().st_mode & 0o777 == (0o700 if path.is_dir() else 0o600), path
