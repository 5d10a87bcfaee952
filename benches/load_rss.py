"""Peak host memory of `from_pretrained(dir, device_map=...)` against the checkpoint's size.

Saves a Llama checkpoint (safetensors) of about `--params` parameters, then loads it in a
fresh process per device map, resetting the process's peak RSS (`/proc/self/clear_refs`) just
before the load. Reports, above the pre-load RSS, in MiB and as a ratio to the checkpoint's
bytes: the peak RSS (which counts safetensors' mapped file as the loader reads it, pages the
kernel can drop), the peak anonymous RSS (the process's own copies; polled every millisecond
from outside) and the final anonymous RSS.

On the CPU plugin a tpu device's buffers are host memory, so the loaded model itself is one
checkpoint's worth of anonymous RSS; a second full copy shows as a peak near 2x.

    .venv/bin/python benches/load_rss.py --params 60e6
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CHILD = r"""
import json, os, sys
os.environ["TORCHTPU_DEVICE"] = "1"
import torch, torchtpu, transformers

def status():
    fields = {}
    for line in open("/proc/self/status"):
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            fields[k] = int(v.split()[0]) * 1024
    return fields

path, device_map = sys.argv[1], sys.argv[2]
torch.ones(1, device="tpu")  # the plugin starts before the baseline
before = status()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets VmHWM to the current RSS
print("start", flush=True)
model = transformers.LlamaForCausalLM.from_pretrained(path, device_map=device_map)
after = status()
print(json.dumps({"before": before, "after": after,
                  "devices": sorted({p.device.type for p in model.parameters()})}), flush=True)
"""


def sample_anon(proc: subprocess.Popen, peak: list) -> None:
    """The child's largest RssAnon, polled every millisecond until it exits."""
    path = f"/proc/{proc.pid}/status"
    while proc.poll() is None:
        try:
            for line in open(path):
                if line.startswith("RssAnon:"):
                    peak[0] = max(peak[0], int(line.split()[1]) * 1024)
        except OSError:
            return
        time.sleep(0.001)


def load(path: str, device_map: str) -> dict:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, path, device_map], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    peak = [0]
    for line in proc.stdout:
        if line.strip() == "start":
            sampler = threading.Thread(target=sample_anon, args=(proc, peak))
            sampler.start()
        elif line.startswith("{"):
            row = json.loads(line)
    proc.wait()
    sampler.join()
    row["anon_peak"] = peak[0]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", type=float, default=60e6, help="about this many parameters")
    ap.add_argument("--device-maps", default="cpu,tpu,auto")
    args = ap.parse_args()
    import transformers

    hidden, layers, vocab = 512, 8, 32000
    per_layer = 4 * hidden * hidden + 3 * hidden * 1376
    layers = max(1, round((args.params - 2 * vocab * hidden) / per_layer))
    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=1376,
                                   num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=4)
    with tempfile.TemporaryDirectory() as d:
        transformers.LlamaForCausalLM(cfg).save_pretrained(d)
        ckpt = sum(p.stat().st_size for p in Path(d).glob("*.safetensors"))
        print(f"checkpoint: {ckpt / 2**20:.0f} MiB ({layers} layers)")
        print(f"{'device_map':>10} {'peak MiB':>9} {'peak/ckpt':>9} {'anon peak MiB':>13} {'anon/ckpt':>9} "
              f"{'final anon MiB':>14}")
        for dm in args.device_maps.split(","):
            row = load(d, dm)
            b, a = row["before"], row["after"]
            peak = a["VmHWM"] - b["VmRSS"]
            anon_peak = row["anon_peak"] - b["RssAnon"]
            anon = a["RssAnon"] - b["RssAnon"]
            print(f"{dm:>10} {peak / 2**20:9.0f} {peak / ckpt:9.2f} {anon_peak / 2**20:13.0f} {anon_peak / ckpt:9.2f} "
                  f"{anon / 2**20:14.0f}   on {row['devices']}")


if __name__ == "__main__":
    main()
