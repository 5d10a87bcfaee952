"""Warm start without tracing (torchtpu/compiled/warm_start.py, docs/cache.md "Warm start without
tracing"): a process saves `aot_compile`d functions and fills AOTAutograd's cache, a fresh one
loads them and runs without Dynamo or AOTAutograd tracing (for the saved functions) and without
a compile (its programs come from the disk cache), and gets eager's results."""

import json
import os
import subprocess
import sys

import paths
import pytest
import torch

import torchtpu
from torchtpu.compiled import warm_start

TESTS = str(paths.TESTS)

# Saves (argv "save") or loads (argv "load") three aot_compile'd functions: an MLP's inference
# (compiled without AOTAutograd's wrapper), its training step (forward and backward, through
# AOTAutograd's bundled entry) and a CNN's inference (batch norms folded, weights relaid); then
# compiles the MLP's training step with options={"autograd_cache": True} (AOTAutograd's cache),
# and an inference function under caching_precompile (Dynamo's cache).
CHILD = r"""
import json, os, sys, warnings
warnings.simplefilter("ignore")
import torch, torchtpu
from torch._dynamo.utils import counters
sys.path.insert(0, sys.argv[1])
from models.small import CNN, MLP
import paths
mode, folder = sys.argv[2], sys.argv[3]

def run(model, x):
    return model(x)

def models():
    torch.manual_seed(0)
    mlp, cnn = MLP(), CNN().eval()
    with torch.no_grad():  # batch norms with statistics of their own
        for bn in (cnn.bn1, cnn.bn2):
            bn.running_mean.uniform_(-0.5, 0.5); bn.running_var.uniform_(0.5, 2.0)
    return mlp, cnn, torch.randn(16, 12), torch.randn(2, 3, 16, 16)

def grads(model):
    return [p.grad.clone() for p in model.parameters()]

def errors(got, want):
    return max((a - b).abs().max().item() for a, b in zip(got, want))

mlp, cnn, x, image = models()
out = {}
with torch.no_grad():
    want_mlp, want_cnn = mlp(x), cnn(image)
mlp(x).sum().backward()
want_grads = grads(mlp)
mlp.zero_grad()

cases = {"infer": (mlp, x, False), "train": (mlp, x, True), "cnn": (cnn, image, False)}
for name, (model, arg, train) in cases.items():
    path = os.path.join(folder, name + ".pt")
    with torch.enable_grad() if train else torch.no_grad():
        if mode == "save":
            # dynamic=False: `run` traced again at other shapes would otherwise get symbolic sizes.
            fn = torch.compile(run, fullgraph=True, dynamic=False, backend="torchtpu").aot_compile(((model, arg), {}))
        else:
            with open(path, "rb") as f:
                fn = torch.compiler.load_compiled_function(f)
        y = fn(model, arg)
    if train:
        y.sum().backward()
        out["train_grad_error"] = errors(grads(model), want_grads)
        model.zero_grad()
    out[name + "_error"] = (y - (want_cnn if model is cnn else want_mlp)).abs().max().item()
    if mode == "save":
        fn.save_compiled_function(path)
s = torchtpu.stats()
out["loaded"] = {k: s[k] for k in ("graphs_seen", "graphs_loaded", "graphs_compiled", "disk_hits", "cache_misses")}
out["frames"] = counters["stats"]["unique_graphs"]

# Plain torch.compile, AOTAutograd's cache on: the second process skips AOTAutograd's tracing.
y = torch.compile(mlp, backend="torchtpu", options={"autograd_cache": True})(x)
y.sum().backward()
out["cached_error"] = max((y - want_mlp).abs().max().item(), errors(grads(mlp), want_grads))
s = torchtpu.stats()
out["cached"] = {k: s[k] - out["loaded"][k] for k in out["loaded"]}
out["aot_cache"] = dict(counters["aot_autograd"])

# Dynamo's own cache (caching_precompile): the second process loads guards, bytecode and the
# backend's artifact (an inference graph without AOTAutograd's wrapper) at torch.compile.
torch._dynamo.config.caching_precompile = True
before = torchtpu.stats()

def doubled(x):
    return mlp(x) * 2

with torch.no_grad():
    y = torch.compile(doubled, backend="torchtpu")(x)
out["precompile_error"] = (y - 2 * want_mlp).abs().max().item()
if mode == "save":
    torch.compiler.save_cache_artifacts()
s = torchtpu.stats()
out["precompiled"] = {k: s[k] - before[k] for k in out["loaded"]}
out["dynamo_cache"] = dict(counters["dynamo_cache"])
print(json.dumps(out))
"""


def _child(mode: str, folder) -> dict:
    env = dict(
        os.environ,
        TORCHTPU_CACHE_DIR=str(folder / "torchtpu"),
        TORCHINDUCTOR_CACHE_DIR=str(folder / "inductor"),
        PYTHONWARNINGS="ignore",
    )
    r = subprocess.run(
        [sys.executable, "-c", CHILD, TESTS, mode, str(folder)], capture_output=True, text=True, env=env, check=False
    )
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_fresh_process_loads_and_runs_without_tracing_or_compiling(tmp_path):
    saved = _child("save", tmp_path)
    assert saved["loaded"]["graphs_seen"] == 3 and saved["loaded"]["cache_misses"] >= 4, saved
    assert saved["aot_cache"].get("autograd_cache_saved", 0) >= 1, saved

    loaded = _child("load", tmp_path)
    for key in ("infer_error", "train_error", "train_grad_error", "cnn_error", "cached_error"):
        assert loaded[key] < 1e-5, (key, loaded)
    # The loaded functions: no Dynamo frame, no graph handed to the backend, no compile; the
    # four programs (inference, forward, backward, CNN) rebuilt from their artifacts, each
    # program read from the disk cache.
    assert loaded["frames"] == 0, loaded
    assert loaded["loaded"] == {
        "graphs_seen": 0,
        "graphs_loaded": 4,
        "graphs_compiled": 4,
        "disk_hits": 4,
        "cache_misses": 0,
    }, loaded
    # Plain torch.compile with AOTAutograd's cache: Dynamo traces (one graph seen), AOTAutograd
    # does not (a hit), and forward and backward come from their artifacts.
    assert loaded["aot_cache"].get("autograd_cache_hit") == 1, loaded
    assert loaded["cached"]["graphs_seen"] == 1 and loaded["cached"]["graphs_loaded"] == 2, loaded
    assert loaded["cached"]["cache_misses"] == 0, loaded
    # caching_precompile: Dynamo's cache hit, nothing traced, the program from its artifact.
    assert loaded["dynamo_cache"] == {"dynamo_cache_hit": 1}, loaded
    assert loaded["precompiled"]["graphs_seen"] == 0 and loaded["precompiled"]["graphs_loaded"] == 1, loaded
    assert loaded["precompiled"]["cache_misses"] == 0 and loaded["precompile_error"] < 1e-5, loaded


def test_a_damaged_or_foreign_artifact_is_refused_with_a_clear_error(monkeypatch):
    data = warm_start.pack({"ir": "graph"})
    assert warm_start.unpack(data) == {"ir": "graph"}
    flipped = bytearray(data)
    flipped[-3] ^= 1
    with pytest.raises(warm_start.ArtifactError, match="damaged"):
        warm_start.unpack(bytes(flipped))
    with pytest.raises(warm_start.ArtifactError, match="not a torchtpu artifact"):
        warm_start.unpack(b"PK\x03\x04" + data)
    monkeypatch.setattr(warm_start.identity, "cache", {**warm_start.identity(), "sources": "0" * 16})
    with pytest.raises(warm_start.ArtifactError, match="compile the function again"):
        warm_start.unpack(data)


def _mlp_step(model, x):
    y = torch.compile(model, backend="torchtpu", options={"autograd_cache": True})(x)
    y.sum().backward()
    return y


def test_a_damaged_entry_of_autograds_cache_is_a_miss_and_recompiled(tmp_path, monkeypatch):
    from models.small import MLP
    from torch._dynamo.utils import counters

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    model, x = MLP(), torch.randn(8, 12)
    torch._dynamo.reset()
    counters.clear()
    _mlp_step(model, x)
    assert counters["aot_autograd"]["autograd_cache_saved"] == 1, dict(counters["aot_autograd"])

    # The entry is found again, but each graph's artifact reads back with a flipped byte: the
    # checksum refuses it, AOTAutograd counts a bypass and traces, torchtpu compiles (its
    # programs from the memory cache), and the results are right.
    def damaged(self, state):
        self.__dict__.update(state, artifact=state["artifact"][:-1] + bytes([state["artifact"][-1] ^ 1]))

    monkeypatch.setattr(warm_start.TorchTPUOutputCode, "__setstate__", damaged, raising=False)
    torch._dynamo.reset()
    counters.clear()
    torchtpu.reset_stats()
    model.zero_grad()
    y = _mlp_step(model, x)
    assert counters["aot_autograd"]["autograd_cache_bypass"] == 1, dict(counters["aot_autograd"])
    assert torchtpu.stats()["graphs_loaded"] == 0 and torchtpu.stats()["graphs_compiled"] == 2
    torch.testing.assert_close(y, model(x))


def test_a_graph_without_an_artifact_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # aot_compile writes AOTAutograd entries
    # Symbolic shapes: programs per input size, which an artifact does not carry.
    for grad in (False, True):  # without AOTAutograd's wrapper, and through AOTAutograd's entry
        fn = torch.compile(lambda t: t.sin() * 2, fullgraph=True, backend="torchtpu", dynamic=True)
        x = torch.randn(4, 3, requires_grad=grad)
        with pytest.raises(warm_start.ArtifactError, match="per-size programs"):
            fn.aot_compile(((x,), {})).save_compiled_function(str(tmp_path / "fn.pt"))


@pytest.mark.allow_fallback
def test_a_loaded_program_that_fails_at_run_time_runs_its_saved_graph_eagerly(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))

    def f(x, w):
        return (x @ w).relu() + 1

    x, w = torch.randn(8, 4), torch.randn(4, 3)
    path = str(tmp_path / "f.pt")
    with torch.no_grad():
        compiled = torch.compile(f, fullgraph=True, backend="torchtpu", options={"strict": False})
        compiled.aot_compile(((x, w), {})).save_compiled_function(path)
        torchtpu.reset_stats()
        with open(path, "rb") as fh:
            loaded = torch.compiler.load_compiled_function(fh)
        monkeypatch.setenv("TORCHTPU_INJECT_FAULT", "execute")  # the program fails when it runs
        with pytest.warns(RuntimeWarning, match="torchtpu bug"):
            y = loaded(x, w)
    torch.testing.assert_close(y, f(x, w))
    assert torchtpu.stats()["graphs_loaded"] == 1 and torchtpu.stats()["graphs_fallback"] == 1
