"""The sharding user API (torchtpu/sharding.py): meshes, specs, shard, parallelize plans,
sharding_constraint (eager, autograd, Dynamo) and how the exporter writes constraints. Nothing
here compiles through the engine."""

import os

import pytest
import torch
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

from torchtpu import _C
from torchtpu import sharding as S
from torchtpu.compiled.exporter import export
from torchtpu.errors import ShardingError

DEVICE_COUNT = S.device_count  # the real one, which the fixture replaces


@pytest.fixture(autouse=True)
def _isolated(monkeypatch):
    # Enough devices for every mesh here whatever the plugin has, and the module's globals
    # (ACTIVE, the default mesh) restored so that other tests see no mesh.
    monkeypatch.setattr(S, "device_count", lambda: 8)
    monkeypatch.setattr(S, "ACTIVE", S.ACTIVE)
    monkeypatch.setattr(S, "_LAST", None)


def mesh22():
    return S.Mesh((2, 2), ("dp", "tp"))


# Meshes.


def test_mesh_attributes_text_and_identity():
    m = mesh22()
    assert S.ACTIVE and S._LAST is m  # the default mesh of sharding_constraint
    assert m.shape == (2, 2) and m.axis_names == ("dp", "tp")
    assert m.axes == [("dp", 2), ("tp", 2)] and m.size == 4 and m.axis_size("tp") == 2
    assert repr(m) == 'Mesh(("dp"=2, "tp"=2))'
    assert m.text() == 'mesh<["dp"=2, "tp"=2]>'
    assert m == S.Mesh([2, 2], ["dp", "tp"]) and hash(m) == hash(S.Mesh((2, 2), ("dp", "tp")))
    assert m != S.Mesh((2, 2), ("tp", "dp")) and m != S.Mesh((4,), ("dp",))
    with pytest.raises(ShardingError, match="no axis 'x'"):
        m.axis_size("x")


@pytest.mark.parametrize(
    "shape, names, message",
    [
        ((2, 2), ("dp",), "2 axes but 1 names"),
        ((2, 2), ("dp", "dp"), "named twice"),
        ((2,), ("d-p",), "letters, digits"),
        ((0,), ("dp",), "sizes are integers >= 1"),
        ((), (), "at least one axis"),
    ],
)
def test_mesh_validation(shape, names, message):
    with pytest.raises(ShardingError, match=message):
        S.Mesh(shape, names)
    assert not S.ACTIVE  # a refused mesh activates nothing


def test_mesh_with_too_few_devices_says_how_to_get_more(monkeypatch):
    monkeypatch.setattr(S, "device_count", lambda: 2)
    with pytest.raises(ShardingError) as e:
        S.Mesh((2, 2), ("dp", "tp"))
    msg = str(e.value)
    assert "needs 4 devices but 2 PJRT devices" in msg and "TORCHTPU_CPU_DEVICES" in msg
    assert isinstance(e.value, ValueError)


def test_device_count_asks_the_extension(monkeypatch):
    monkeypatch.setattr(S, "device_count", DEVICE_COUNT)
    # The CPU plugin's default (the suite does not set TORCHTPU_CPU_DEVICES).
    assert S.device_count() == int(os.environ.get("TORCHTPU_CPU_DEVICES", 4))
    monkeypatch.setattr(_C, "device_count", lambda: 6)
    assert S.device_count() == 6


# Specs.


def test_spec_normalization_and_text():
    m = mesh22()
    s = S.ShardSpec.build(m, ("dp", None))
    assert s.dims == (("dp",), ()) and s.ir_text() == 'sharding<[{"dp"}, {}]>'
    both = S.ShardSpec.build(m, (("dp", "tp"), None))
    assert both.dims == (("dp", "tp"), ()) and both.ir_text() == 'sharding<[{"dp", "tp"}, {}]>'
    assert both.local_shape((8, 3)) == (2, 3) and s.local_shape((8, 3)) == (4, 3)
    assert S.ShardSpec.build(m, (None, None)).is_replicated() and not s.is_replicated()
    assert S.ShardSpec.build(m, ()).ir_text() == "sharding<[]>"
    assert s == S.ShardSpec.build(m, ["dp", None]) and len({s, S.ShardSpec.build(m, ("dp", None))}) == 1
    assert S.ShardSpec.build(m, (None, "tp")).user_spec() == (None, "tp")


def test_spec_encoding_round_trips():
    m = mesh22()
    for spec in [("dp", None), (("tp", "dp"), None, None), (), (None,)]:
        s = S.ShardSpec.build(m, spec)
        assert S.ShardSpec.decode(s.encode()) == s
    assert S.ShardSpec.build(m, (("dp", "tp"), None)).encode() == "dp=2,tp=2|dp+tp,_"
    with pytest.raises(ShardingError, match="malformed"):
        S.ShardSpec.decode("dp2|dp")


@pytest.mark.parametrize(
    "spec, message",
    [
        (("dp", "dp"), "more than once"),
        (("x", None), "axis 'x'"),
        ("dp", "one entry per tensor dim"),
        ((1, None), "must be an axis"),
    ],
)
def test_bad_specs(spec, message):
    with pytest.raises(ShardingError, match=message):
        S.ShardSpec.build(mesh22(), spec)


# shard.


def test_shard_annotates_the_same_object():
    m = mesh22()
    p = nn.Parameter(torch.randn(4, 6))
    assert S.shard(p, m, ("dp", None)) is p and isinstance(p, nn.Parameter)
    assert S.sharding_of(p) == S.ShardSpec.build(m, ("dp", None))
    assert S.sharding_of(torch.zeros(2)) is None
    assert S.unshard(p) is p and S.sharding_of(p) is None


def test_shard_refuses_a_dim_its_axes_do_not_divide():
    m = S.Mesh((2, 4), ("dp", "tp"))
    with pytest.raises(ShardingError) as e:
        S.shard(torch.zeros(8, 6), m, (None, "tp"), name="layer.weight")
    assert str(e.value) == "tensor 'layer.weight': dim 1 of size 6 is not divisible by mesh axis 'tp' (size 4)"
    with pytest.raises(ShardingError, match=r"shape \[4, 6\]: dim 0 of size 4 .* 'dpxtp' \(size 8\)"):
        S.shard(torch.zeros(4, 6), m, (("dp", "tp"), None))
    with pytest.raises(ShardingError, match="rank 1 but the spec"):
        S.shard(torch.zeros(4), m, ("dp", None))


# parallelize.


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = nn.Linear(16, 8)
        self.k_proj = nn.Linear(16, 8, bias=False)
        self.v_proj = nn.Linear(16, 8, bias=False)
        self.o_proj = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(32, 16)
        self.layers = nn.ModuleList([Block(), Block()])
        self.register_buffer("scale", torch.ones(3))


def specs(model):
    return {n: s for n, _, s in S.describe(model)}


def test_parallelize_tensor_parallel_then_fsdp():
    m = mesh22()
    model = Tiny()
    plan = {
        "": S.FSDP("dp"),  # listed first, applied last
        "embed": S.Colwise("tp"),
        "layers.*.[qkv]_proj": S.Colwise("tp"),
        "layers.*.o_proj": S.Rowwise("tp"),
        "layers.*.norm": S.Replicate(),
    }
    assert S.parallelize(model, m, plan) is model
    got = specs(model)
    # Each weight keeps its tensor-parallel split; FSDP takes the remaining divisible dim.
    assert got["embed.weight"] == 'sharding<[{"dp"}, {"tp"}]>'
    assert got["layers.0.q_proj.weight"] == 'sharding<[{"tp"}, {"dp"}]>'
    assert got["layers.1.v_proj.weight"] == 'sharding<[{"tp"}, {"dp"}]>'
    assert got["layers.0.q_proj.bias"] == 'sharding<[{"tp"}]>'  # no free dim left for dp
    assert got["layers.0.o_proj.weight"] == 'sharding<[{"dp"}, {"tp"}]>'
    assert got["layers.0.o_proj.bias"] == 'sharding<[{"dp"}]>'  # Rowwise leaves it to FSDP
    assert got["layers.0.norm.weight"] == 'sharding<[{"dp"}]>'
    assert got["scale"] == "replicated"  # buffers are listed, FSDP shards parameters only
    assert ("layers.1.o_proj.weight", (16, 8), 'sharding<[{"dp"}, {"tp"}]>') in S.describe(model)


def test_parallelize_tensor_parallel_only():
    model = Tiny()
    S.parallelize(model, mesh22(), {"embed": S.Rowwise("tp"), "layers.*.q_proj": S.Colwise("dp")})
    got = specs(model)
    assert got["embed.weight"] == 'sharding<[{"tp"}, {}]>'
    assert got["layers.1.q_proj.weight"] == 'sharding<[{"dp"}, {}]>'
    assert got["layers.1.q_proj.bias"] == 'sharding<[{"dp"}]>'
    assert got["layers.1.k_proj.weight"] == "replicated"


def test_fsdp_takes_the_largest_divisible_dim():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Parameter(torch.zeros(3, 8, 6))  # 8: the largest divisible
            self.b = nn.Parameter(torch.zeros(6, 6))  # a tie: the lower dim
            self.c = nn.Parameter(torch.zeros(3, 5))  # nothing divides: unchanged
            self.d = nn.Parameter(torch.zeros(4, 10))  # 10 is divisible by 2 and larger

    model = S.parallelize(M(), mesh22(), {"*": S.FSDP("dp")})
    got = specs(model)
    assert got == {
        "a": 'sharding<[{}, {"dp"}, {}]>',
        "b": 'sharding<[{"dp"}, {}]>',
        "c": "replicated",
        "d": 'sharding<[{}, {"dp"}]>',
    }
    assert S.sharding_of(model.c) is None


def test_plan_errors():
    m = mesh22()
    with pytest.raises(ShardingError, match=r"'layers\.\*\.nope' matches no module; modules include 'embed', 'layers'"):
        S.parallelize(Tiny(), m, {"layers.*.nope": S.Colwise("tp")})
    with pytest.raises(ShardingError, match="module 'layers.0.norm' is a LayerNorm"):
        S.parallelize(Tiny(), m, {"layers.*.norm": S.Colwise("tp")})
    with pytest.raises(ShardingError, match="unknown style"):
        S.parallelize(Tiny(), m, {"embed": "colwise"})
    with pytest.raises(
        ShardingError, match="'layers.0.q_proj.weight': dim 0 of size 8 is not divisible by mesh axis 'tp'"
    ):
        S.parallelize(Tiny(), S.Mesh((1, 3), ("dp", "tp")), {"layers.*.q_proj": S.Colwise("tp")})


def test_pytorch_parallel_styles_map_to_ours():
    tp = pytest.importorskip("torch.distributed.tensor.parallel")
    model = Tiny()
    S.parallelize(model, mesh22(), {"layers.*.q_proj": tp.ColwiseParallel(), "layers.*.o_proj": tp.RowwiseParallel()})
    got = specs(model)
    assert got["layers.0.q_proj.weight"] == 'sharding<[{"tp"}, {}]>'  # the mesh's last axis
    assert got["layers.0.o_proj.weight"] == 'sharding<[{}, {"tp"}]>'
    S.parallelize(model, mesh22(), {"embed": tp.ColwiseParallel()}, tp_axis="dp")
    assert specs(model)["embed.weight"] == 'sharding<[{}, {"dp"}]>'


# sharding_constraint.


def test_constraint_eager_value_and_gradient():
    mesh22()
    x = torch.randn(8, 4, requires_grad=True)
    y = S.sharding_constraint(x, ("dp", None))
    assert torch.equal(y, x) and y is not x
    (y.sin() * 3).sum().backward()
    plain = torch.autograd.grad((x.sin() * 3).sum(), x)[0]
    assert torch.equal(x.grad, plain)


def test_constraint_checks_shapes_and_needs_a_mesh():
    with pytest.raises(ShardingError, match="needs a mesh"):
        S.sharding_constraint(torch.zeros(4), ("dp",))
    m = mesh22()
    with pytest.raises(ShardingError, match="dim 0 of size 7 is not divisible by mesh axis 'dp'"):
        S.sharding_constraint(torch.zeros(7, 4), ("dp", None))
    other = S.Mesh((4,), ("x",))  # now the default; an explicit mesh still wins
    assert S._LAST is other
    assert S.sharding_constraint(torch.ones(4, 2), (None, "tp"), mesh=m).sum() == 8


def test_constraint_traces_into_one_dynamo_graph_with_its_gradient():
    mesh22()
    graphs = []

    def backend(gm, example_inputs):
        from functorch.compile import make_boxed_func
        from torch._functorch.aot_autograd import aot_module_simplified

        def keep(g, _):
            graphs.append(g)
            return make_boxed_func(g.forward)

        return aot_module_simplified(gm, example_inputs, fw_compiler=keep, bw_compiler=keep)

    def f(x):
        return S.sharding_constraint(x * 2, ("dp", None)).relu()

    x = torch.randn(8, 4, requires_grad=True)
    torch.compile(f, backend=backend, fullgraph=True)(x).sum().backward()
    assert torch.equal(x.grad, (x > 0).float() * 2)
    targets = [[n.target for n in g.graph.nodes] for g in graphs]
    op = torch.ops.torchtpu.sharding_constraint.default
    assert len(graphs) == 2 and all(op in t for t in targets)  # forward, and the gradient's


# The exporter.


def test_exporter_writes_the_constraint_and_declares_the_mesh():
    mesh22()

    def f(x):
        return S.sharding_constraint(x * 2, ("dp", None)) + 1

    e = export(make_fx(f)(torch.randn(8, 4)), "g")
    assert e.text == (
        "graph @g(%in0: f32[8, 4]) -> (f32[8, 4]) {\n"
        '  mesh<["dp"=2, "tp"=2]>\n'
        "  %v1 = aten.mul.Tensor(%in0) {other = 2} : f32[8, 4]  // mul\n"
        '  %v2 = tpu.sharding_constraint(%v1) : f32[8, 4] sharding<[{"dp"}, {}]>  // sharding_constraint\n'
        "  %v3 = aten.add.Tensor(%v2) {alpha = 1, other = 1} : f32[8, 4]  // add\n"
        "  return %v3\n"
        "}\n"
    )
    assert e.mesh == S.Mesh((2, 2), ("dp", "tp"))
    assert "tpu.sharding_constraint" in e.ops
    # Line numbers still name the FX node written there, past the mesh line.
    lines = e.text.splitlines()
    assert all(lines[i - 1].endswith(f"// {n.name}") for i, n in e.nodes_by_line.items()) and 4 in e.nodes_by_line


def test_exporter_without_constraints_has_no_mesh():
    mesh22()
    e = export(make_fx(lambda x: x + 1)(torch.randn(2)), "g")
    assert e.mesh is None and "mesh<" not in e.text


def test_exporter_refuses_two_meshes_in_one_graph():
    a, b = mesh22(), S.Mesh((4,), ("dp",))

    def f(x):
        return S.sharding_constraint(S.sharding_constraint(x, ("dp",), mesh=a), ("dp",), mesh=b)

    gm = make_fx(f)(torch.randn(8))
    with pytest.raises(ShardingError, match="two meshes"):
        export(gm, "g")
