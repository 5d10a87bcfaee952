"""Device memory peak of the zoo's Llama training step (AdamW) on the tpu device, with in-place
ops donating their target to their program (issue 49, item 4) and without, side by side in one
process, per eager mode.

    TORCHTPU_DEVICE=1 python benches/inplace_peak.py [--json PATH]

Three settings of the smallest donated target (`_C.eager_set_donate_min_bytes`): none (no
donation: the "before"), the default (1 MiB and up: the "after") and every target. Each runs
three steps from the same weights; the peak (`torch.tpu.max_memory_allocated`) is that of the
third step. A last row does the same for a wider Llama (hidden 512), whose weights pass 1 MiB.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python" / "tests"))

import torchtpu
import torchtpu.eager
from torchtpu import _C

MiB = 1 << 20
SETTINGS = {"none": 1 << 62, "default (>= 1 MiB)": 1 << 20, "every target": 0}


def zoo_llama():
    from models import zoo

    spec = zoo.BY_NAME["llama"]
    return spec.build, spec.inputs()["input_ids"]


def wide_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=512, hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip

    def build():
        torch.manual_seed(0)
        return LlamaForCausalLM(config)

    return build, torch.randint(
        0, 512, (2, 32), generator=torch.Generator().manual_seed(0)
    )


def measure(build, ids, mode: str, donate_min: int) -> dict:
    old = _C.eager_set_donate_min_bytes(donate_min)
    try:
        with torchtpu.eager.mode(mode), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = build().to("tpu")
            model.train()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            ids_tpu = ids.to("tpu")
            losses = []
            for step in range(3):
                if step == 2:
                    torch.tpu.synchronize()
                    torch.tpu.reset_peak_memory_stats()
                    base = torch.tpu.memory_allocated()
                    t = time.perf_counter()
                loss = model(input_ids=ids_tpu, labels=ids_tpu).loss
                loss.backward()
                opt.step()
                opt.zero_grad()
                losses.append(loss.item())
            seconds = time.perf_counter() - t
            peak = torch.tpu.max_memory_allocated()
        del model, opt, ids_tpu
        return {
            "peak_mib": peak / MiB,
            "resident_mib": base / MiB,
            "step_ms": seconds * 1e3,
            "losses": losses,
        }
    finally:
        _C.eager_set_donate_min_bytes(old)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--json", type=Path, default=ROOT / "benches" / "results" / "inplace_peak.json"
    )
    args = parser.parse_args()
    rows = []
    for model_name, (build, ids) in {
        "zoo llama": zoo_llama(),
        "llama hidden 512": wide_llama(),
    }.items():
        for mode in ("strict", "defer_and_fuse"):
            for setting, donate_min in SETTINGS.items():
                r = measure(build, ids, mode, donate_min)
                rows.append(
                    {"model": model_name, "mode": mode, "donation": setting, **r}
                )
                print(
                    f"{model_name:17s} {mode:15s} {setting:19s} peak {r['peak_mib']:7.2f} MiB "
                    f"(resident {r['resident_mib']:6.2f}) step {r['step_ms']:7.1f} ms loss {r['losses'][-1]:.5f}",
                    flush=True,
                )
    # Donation changes where results are written, never what they are.
    for key in {(r["model"], r["mode"]) for r in rows}:
        same = [r["losses"] for r in rows if (r["model"], r["mode"]) == key]
        assert all(s == same[0] for s in same), (key, same)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=1) + "\n"
    )


if __name__ == "__main__":
    main()
