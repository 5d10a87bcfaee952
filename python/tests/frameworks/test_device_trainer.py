"""HF `Trainer` end to end on tpu (issue 28): a tiny Llama trained with Trainer's defaults
(pinned memory, the fused AdamW, gradient clipping, a linear schedule) and with DataLoader
workers, where tpu is the accelerator, against the same run on CPU (`use_cpu=True`), then
`save_pretrained` and a reload onto tpu.

Tolerances: each logged loss within 1e-5 of CPU's and every trained parameter within 1e-4
(float32, the same four steps; measured: the losses are equal to the printed digits).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import models
import pytest

pytest.importorskip("accelerate")

SCRIPT = r"""
import json, os, sys
os.environ["TORCHTPU_DEVICE"] = "1"
import torch, torchtpu, transformers
from accelerate.state import AcceleratorState, PartialState

from models import tiny_llama

out_dir, workers = sys.argv[1], int(sys.argv[2])

class Recording(transformers.Trainer):
    seen = set()
    def training_step(self, model, inputs, *args, **kwargs):
        Recording.seen.update(str(v.device) for v in inputs.values())
        return super().training_step(model, inputs, *args, **kwargs)

def train(device):
    AcceleratorState._reset_state(reset_partial_state=True)
    Recording.seen = set()
    model = tiny_llama.model(seed=0)
    args = transformers.TrainingArguments(
        output_dir=os.path.join(out_dir, device), per_device_train_batch_size=4, num_train_epochs=1,
        learning_rate=1e-3, report_to=[], use_cpu=device == "cpu", seed=0, logging_steps=1,
        save_strategy="no", dataloader_num_workers=workers, disable_tqdm=True)
    trainer = Recording(model=model, args=args, train_dataset=tiny_llama.Tokens(n=16, length=8))
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return trainer, model, losses, {
        "args_device": str(args.device), "state_device": str(PartialState().device),
        "accelerator_device": str(trainer.accelerator.device), "batches": sorted(Recording.seen),
        "params": sorted({p.device.type for p in model.parameters()}), "optim": args.optim,
        "pin_memory": args.dataloader_pin_memory}

before = torchtpu.stats()["eager_cpu_fallbacks"]
_, cpu_model, cpu_losses, cpu_info = train("cpu")
trainer, tpu_model, tpu_losses, tpu_info = train("tpu")
fallbacks = {k: v - before.get(k, 0) for k, v in torchtpu.stats()["eager_cpu_fallbacks"].items() if v != before.get(k, 0)}
worst = max((a.detach().cpu() - b.detach()).abs().max().item() for a, b in zip(tpu_model.parameters(), cpu_model.parameters()))
saved = os.path.join(out_dir, "saved")
trainer.save_model(saved)
back = transformers.LlamaForCausalLM.from_pretrained(saved, device_map="tpu")
reload_worst = max((a.cpu() - b.detach().cpu()).abs().max().item() for a, b in zip(back.parameters(), tpu_model.parameters()))
reload_devices = sorted({p.device.type for p in back.parameters()})
print(json.dumps(dict(cpu=cpu_info, tpu=tpu_info, cpu_losses=cpu_losses, tpu_losses=tpu_losses, worst=worst,
                      reload_worst=reload_worst, reload_devices=reload_devices, fallbacks=fallbacks)))
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_trainer_trains_on_tpu_like_cpu_and_saves(tmp_path, workers):
    env = dict(os.environ)
    env.pop("TORCHTPU_DEVICE", None)
    env["TORCHTPU_FALLBACK"] = "eager"  # a fallback is counted and asserted below, not raised in a worker
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), str(tmp_path), str(workers)],
        capture_output=True,
        text=True,
        env=models.importable(env),
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    tpu, cpu = got["tpu"], got["cpu"]
    # accelerate sees the device: the model, every batch and PartialState are on tpu.
    assert tpu["args_device"] == tpu["state_device"] == tpu["accelerator_device"] == "tpu:0", tpu
    assert tpu["batches"] == ["tpu:0"] and tpu["params"] == ["tpu"], tpu
    assert cpu["state_device"] == "cpu" and cpu["batches"] == ["cpu"], cpu
    assert tpu["optim"] == "adamw_torch_fused" and tpu["pin_memory"] is True  # Trainer's defaults
    assert got["fallbacks"] == {}, got["fallbacks"]
    assert len(got["tpu_losses"]) == len(got["cpu_losses"]) == 4
    for a, b in zip(got["tpu_losses"], got["cpu_losses"]):
        assert abs(a - b) <= 1e-5, (got["tpu_losses"], got["cpu_losses"])
    assert got["worst"] <= 1e-4, got["worst"]
    assert got["reload_devices"] == ["tpu"] and got["reload_worst"] == 0.0, got
