"""One rank of a training framework's run across processes (test_training_frameworks.py),
launched by torchrun or `accelerate launch`. Each scenario trains the shared tiny Llama on tpu and
then the same way on the CPU (gloo) in the same process, and saves both runs' losses and what
each rank saw in `rank{RANK}.pt`. tpu goes first: its run makes the default group
(`cpu:gloo,tpu:tpu_dist`), which the CPU run then uses for its CPU tensors.

    python frameworks_worker.py SCENARIO OUT_DIR
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TORCHTPU_DEVICE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import transformers  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from accelerate.state import AcceleratorState, PartialState  # noqa: E402
from models import tiny_llama  # noqa: E402

RANK = int(os.environ.get("RANK", 0))


def _save(out_dir: str, results: dict) -> None:
    torch.save(results, os.path.join(out_dir, f"rank{RANK}.pt"))


def _params(model) -> dict:
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


class _Recording(transformers.Trainer):
    seen: set = set()

    def training_step(self, model, inputs, *args, **kwargs):
        _Recording.seen.update(str(v.device) for v in inputs.values())
        return super().training_step(model, inputs, *args, **kwargs)


def _trainer_run(out_dir: str, device: str, fsdp: bool) -> dict:
    AcceleratorState._reset_state(reset_partial_state=True)
    _Recording.seen = set()
    model = tiny_llama.model(seed=0)
    extra = {}
    if fsdp and device == "tpu":
        extra = dict(
            fsdp="full_shard",
            fsdp_config={
                "fsdp_version": 2,
                "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"],
                "state_dict_type": "FULL_STATE_DICT",
                "reshard_after_forward": True,
            },
        )
    args = transformers.TrainingArguments(
        output_dir=os.path.join(out_dir, device),
        per_device_train_batch_size=2,
        num_train_epochs=1,
        max_steps=3,
        learning_rate=1e-3,
        report_to=[],
        use_cpu=device == "cpu",
        seed=0,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        dataloader_pin_memory=False,
        **extra,
    )
    trainer = _Recording(model=model, args=args, train_dataset=tiny_llama.Tokens(n=12))
    trainer.train()
    saved = os.path.join(out_dir, f"saved-{device}")
    trainer.save_model(saved)
    state = PartialState()
    info = {
        "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
        "distributed_type": str(state.distributed_type),
        "num_processes": state.num_processes,
        "state_device": str(state.device),
        "args_device": str(args.device),
        "batches": sorted(_Recording.seen),
        "params_devices": sorted({str(p.device) for p in trainer.model.parameters()}),
        "sharded": all(type(p).__name__ == "DTensor" for p in trainer.model.parameters()),
        "world": dist.get_world_size() if dist.is_initialized() else 1,
        "saved": saved,
    }
    dist.barrier()
    return info


def trainer(out_dir: str, fsdp: bool = False) -> None:
    """HF `Trainer` with its defaults, as `torchrun` starts it: DDP (or FSDP2) over `tpu_dist`."""
    tpu = _trainer_run(out_dir, "tpu", fsdp)
    cpu = _trainer_run(out_dir, "cpu", False)
    results = {"tpu": tpu, "cpu": cpu}
    if RANK == 0:
        # `save_model` from rank 0 reloads onto tpu with the CPU run's trained weights.
        back = transformers.LlamaForCausalLM.from_pretrained(tpu["saved"], device_map="tpu")
        want = transformers.LlamaForCausalLM.from_pretrained(cpu["saved"])
        results["reload_devices"] = sorted({str(p.device) for p in back.parameters()})
        results["reload_worst"] = max(
            (a.detach().cpu() - b.detach()).abs().max().item() for a, b in zip(back.parameters(), want.parameters())
        )
    _save(out_dir, results)


def trainer_fsdp(out_dir: str) -> None:
    trainer(out_dir, fsdp=True)


def _accelerate_run(cpu: bool) -> dict:
    AcceleratorState._reset_state(reset_partial_state=True)
    accelerator = Accelerator(cpu=cpu)
    torch.manual_seed(0)
    model = tiny_llama.model(seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(
        tiny_llama.Tokens(n=12), batch_size=2, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    model, opt, loader = accelerator.prepare(model, opt, loader)
    losses, devices = [], set()
    for batch in loader:
        devices.update(str(v.device) for v in batch.values())
        loss = model(**batch).loss
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
        losses.append(accelerator.reduce(loss.detach(), "mean").item())
    accelerator.wait_for_everyone()
    return {
        "losses": losses,
        "batches": sorted(devices),
        "device": str(accelerator.device),
        "distributed_type": str(accelerator.distributed_type),
        "num_processes": accelerator.num_processes,
        "params": _params(accelerator.unwrap_model(model)),
    }


def accelerate_loop(out_dir: str) -> None:
    """accelerate's own `Accelerator` in a plain training loop, as `accelerate launch` starts it."""
    _save(out_dir, {"tpu": _accelerate_run(cpu=False), "cpu": _accelerate_run(cpu=True)})


SCENARIOS = {"trainer": trainer, "trainer_fsdp": trainer_fsdp, "accelerate_loop": accelerate_loop}


if __name__ == "__main__":
    SCENARIOS[sys.argv[1]](sys.argv[2])
    if dist.is_initialized():
        dist.destroy_process_group()
