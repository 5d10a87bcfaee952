"""SPMD sharding on the zoo's Llama (2 layers, d32): compile time at 1, 2, 4 and 8 devices,
predicted vs XLA's bytes per training step for DP, FSDP and TP, and the steady-state step
at 1 vs 4 devices. Each configuration runs in a fresh process (the CPU plugin's device
count, TORCHTPU_CPU_DEVICES, is read at engine start) with the persistent cache off, so
every compile is a real one.

    .venv/bin/python benches/sharding.py            # prints the tables of docs/sharding.md

These machines have 2 cores: N CPU "devices" share them, so steady-state times say what
partitioning costs here, not what it gains on real chips.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import json, statistics, sys, time
    import torch, transformers, torchtpu
    from torchtpu import sharding as S

    config = json.loads(sys.argv[1])
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, use_cache=False)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    ids = torch.randint(3, 128, (config["batch"], 8), generator=torch.Generator().manual_seed(0))
    tp = {f"model.layers.*.{m}": torchtpu.Colwise("tp") for m in
          ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")}
    tp.update({f"model.layers.*.{m}": torchtpu.Rowwise("tp") for m in ("self_attn.o_proj", "mlp.down_proj")})
    if config["mesh"]:
        mesh = torchtpu.Mesh(tuple(config["mesh"]), tuple(config["axes"]))
        plan = {}
        if config["tp"]:
            plan.update(tp)
        if config["fsdp"]:
            plan["*"] = torchtpu.FSDP("dp")
        if plan:
            torchtpu.parallelize(model, mesh, plan)
        if "dp" in config["axes"]:
            S.shard(ids, mesh, ("dp", None))
    compiled = torch.compile(model, backend="torchtpu")

    def step():
        loss = compiled(input_ids=ids, labels=ids).loss
        loss.backward()
        model.zero_grad(set_to_none=True)
        return loss

    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    times = []
    for _ in range(config["steps"]):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    predicted = actual = 0
    for name, program in S.RECENT_PROGRAMS:
        plan = program.sharding
        predicted += sum(c["bytes_per_device"] for c in plan["collectives"] if c["collective"] != "slice")
        actual += sum(b for _, b in program.compiled_collectives())
    stats = torchtpu.stats()
    print(json.dumps({"first_step_s": first, "compile_s": stats["compile_seconds"], "step_ms": 1e3 * statistics.median(times),
                      "predicted_bytes": predicted, "actual_bytes": actual, "programs": len(S.RECENT_PROGRAMS)}))
    """
)


def run(config: dict) -> dict:
    devices = max(4, config["mesh"] and eval("*".join(map(str, config["mesh"]))) or 1)
    env = dict(os.environ, TORCHTPU_CACHE="0", TORCHTPU_CPU_DEVICES=str(devices), TF_CPP_MIN_LOG_LEVEL="2")
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(config)], env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise SystemExit(f"{config}: {r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def base(**kw) -> dict:
    config = {"mesh": None, "axes": [], "tp": False, "fsdp": False, "batch": 8, "steps": 10}
    config.update(kw)
    return config


def main() -> None:
    print("## Compile time (Llama training step: forward + backward, first step)\n")
    print("| devices | mesh | plan | first step (s) | torchtpu compile (s) |")
    print("|---|---|---|---|---|")
    runs = {
        1: base(),
        2: base(mesh=[1, 2], axes=["dp", "tp"], tp=True),
        4: base(mesh=[2, 2], axes=["dp", "tp"], tp=True, fsdp=True),
        8: base(mesh=[2, 4], axes=["dp", "tp"], tp=True, fsdp=True),
    }
    results = {}
    for n, config in runs.items():
        r = results[n] = run(config)
        mesh = "x".join(map(str, config["mesh"])) if config["mesh"] else "-"
        plan = "+".join(p for p, on in (("TP", config["tp"]), ("FSDP", config["fsdp"])) if on) or "none"
        print(f"| {n} | {mesh} | {plan} | {r['first_step_s']:.2f} | {r['compile_s']:.2f} |")
    ratio = results[4]["first_step_s"] / results[1]["first_step_s"]
    print(f"\nFirst step at 4 devices / 1 device: {ratio:.2f}x\n")

    print("## Predicted vs XLA's bytes per device per training step (4 devices)\n")
    print("| plan | mesh | predicted (B) | XLA's program (B) |")
    print("|---|---|---|---|")
    for label, config in (
        ("DP", base(mesh=[4], axes=["dp"])),
        ("FSDP", base(mesh=[4], axes=["dp"], fsdp=True)),
        ("TP", base(mesh=[4], axes=["tp"], tp=True)),
        ("TP+FSDP", runs[4]),
    ):
        r = run(dict(config, steps=1))
        mesh = "x".join(map(str, config["mesh"]))
        print(f"| {label} | {mesh} | {r['predicted_bytes']} | {r['actual_bytes']} |")

    print("\n## Steady-state training step (median of 10)\n")
    print("| devices | plan | step (ms) |")
    print("|---|---|---|")
    print(f"| 1 | none | {results[1]['step_ms']:.1f} |")
    print(f"| 4 | TP+FSDP | {results[4]['step_ms']:.1f} |")


if __name__ == "__main__":
    main()
