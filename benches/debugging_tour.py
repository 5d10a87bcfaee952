"""Generates docs/debugging.md's examples (issue 49) from one small training run on the tpu
device, with PyTorch's own tools: a `torch.profiler` profile (its `key_averages()` table, a
Chrome trace and a timeline picture of it), an out-of-memory error under an emulated 64 MiB
device, and a memory snapshot (`torch.tpu.memory._snapshot()`, the format pytorch.org/memory_viz
reads) drawn as its active-memory timeline.

    TORCHTPU_DEVICE=1 python benches/debugging_tour.py   # about 20 s

Writes benches/results/debugging/ (trace.json, snapshot.pickle) and docs/img/{profile_timeline,
memory_snapshot}.png, and replaces the generated blocks of docs/debugging.md.
"""

from __future__ import annotations

import json
import re
import zlib
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benches" / "results" / "debugging"
IMG = ROOT / "docs" / "img"
DOC = ROOT / "docs" / "debugging.md"
MiB = 1 << 20


class Mlp(torch.nn.Module):
    def __init__(self, width=512, depth=3):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Linear(width, width) for _ in range(depth)
        )
        self.head = torch.nn.Linear(width, 10)

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


def train_step(model, opt, x, y):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


def main() -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    torch.tpu.memory._record_memory_history(max_entries=100_000)
    model = Mlp().to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = (
        torch.randn(256, 512, device="tpu"),
        torch.randint(0, 10, (256,), device="tpu"),
    )
    train_step(
        model, opt, x, y
    ).item()  # compiles the step's programs before the profile

    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
    ) as prof:
        for step in range(3):
            with record_function(f"train_step {step}"):
                train_step(model, opt, x, y).item()
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=12)
    trace = RESULTS / "trace.json"
    prof.export_chrome_trace(str(trace))

    snapshot = torch.tpu.memory._snapshot()
    torch.tpu.memory._dump_snapshot(str(RESULTS / "snapshot.pickle"))
    torch.tpu.memory._record_memory_history(enabled=None)

    # 64 MiB of device memory, as a small accelerator would have; the step's weights and Adam's
    # state take about 13 MiB of it. A batch 64 times larger does not fit its activations.
    torch.tpu.set_per_process_memory_fraction(64 * MiB / torch.tpu.mem_get_info()[1])
    try:
        big = torch.empty(256 * 64, 512, device="tpu").normal_()
        train_step(model, opt, big, y.repeat(64))
    except torch.OutOfMemoryError as e:
        oom = str(e)
    else:
        raise SystemExit(
            "debugging_tour: the large batch fitted; the example needs an error"
        )

    timeline(json.loads(trace.read_text())["traceEvents"], IMG / "profile_timeline.png")
    memory_picture(snapshot, IMG / "memory_snapshot.png")
    render({"profile": table, "oom": _relative(oom)})
    print(table)
    print(oom)


def _relative(text: str) -> str:
    """Paths in the message as the repository's (the picture should not name this machine)."""
    return text.replace(str(ROOT) + "/", "")


def timeline(events, path: Path) -> None:
    """The second profiled step as Perfetto draws it: the host's ops and ranges above, the tpu
    device's programs below, each on its own row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    step = next(
        e
        for e in events
        if e.get("cat") == "user_annotation" and e["name"] == "train_step 1"
    )
    lo, hi = step["ts"], step["ts"] + step["dur"]
    rows = {
        "ranges": [e for e in events if e.get("cat") == "user_annotation"],
        "host ops": [
            e
            for e in events
            if e.get("cat") == "cpu_op"
            and e["name"].startswith(("aten::", "Optimizer"))
        ],
        "launches": [e for e in events if e.get("cat") == "privateuse1_runtime"],
        "tpu:0 programs": [e for e in events if e.get("cat") == "kernel"],
        "tpu:0 copies": [e for e in events if e.get("cat") == "gpu_memcpy"],
    }
    fig, ax = plt.subplots(figsize=(11, 3.2))
    colors = plt.get_cmap("tab20").colors
    for i, (label, evs) in enumerate(rows.items()):
        y = len(rows) - 1 - i
        bars = [
            ((e["ts"] - lo) / 1e3, e.get("dur", 0) / 1e3)
            for e in evs
            if lo <= e["ts"] <= hi
        ]
        names = [e["name"] for e in evs if lo <= e["ts"] <= hi]
        ax.broken_barh(
            bars,
            (y - 0.35, 0.7),
            facecolors=[colors[zlib.crc32(n.encode()) % len(colors)] for n in names],
        )
    kernels = [e for e in rows["tpu:0 programs"] if lo <= e["ts"] <= hi]
    for e in sorted(kernels, key=lambda e: -e["dur"])[:4]:
        short = e["name"].removeprefix("eager_aten_").removesuffix("_default")
        ax.text(
            (e["ts"] - lo + e["dur"] / 2) / 1e3,
            0.5,
            short,
            fontsize=6.5,
            ha="center",
            va="center",
        )
    ax.set_yticks(range(len(rows)), list(reversed(rows)))
    ax.set_xlabel("ms from the start of train_step 1")
    ax.set_title(
        "torch.profiler: one training step on the tpu device (export_chrome_trace, drawn)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def memory_picture(snapshot: dict, path: Path) -> None:
    """memory_viz's "Active Memory Timeline" of device 0: each live block a band, stacked in
    the order it was allocated, colored by the user's line that made it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torchtpu

    libraries = (str(Path(torch.__file__).parent), str(Path(torchtpu.__file__).parent))
    events = [
        e
        for e in snapshot["device_traces"][0]
        if e["action"] in ("alloc", "free_completed")
    ]
    live: dict = {}  # addr -> (size, where), in allocation order
    bands: dict = {}  # (addr, first event) -> (where, [(bottom, top) per event])
    for i, e in enumerate(events):
        if e["action"] == "alloc":
            frames = [
                f
                for f in e.get("frames", [])
                if not f["filename"].startswith(("<", *libraries))
            ]
            where = (
                f"{Path(frames[0]['filename']).name}:{frames[0]['line']} {frames[0]['name']}"
                if frames
                else "?"
            )
            live[e["addr"]] = (e["size"], where, i)
        else:
            live.pop(e["addr"], None)
        base = 0
        for addr, (size, where, born) in live.items():
            spans = bands.setdefault((addr, born), (where, [(0, 0)] * born))[1]
            spans.extend([(0, 0)] * (i - len(spans)))
            spans.append((base, base + size))
            base += size
    lines = sorted({where for where, _ in bands.values()})
    palette = dict(zip(lines, plt.get_cmap("tab10").colors))
    fig, ax = plt.subplots(figsize=(11, 3.6))
    for where, spans in bands.values():
        spans = spans + [(0, 0)] * (len(events) - len(spans))
        ax.fill_between(
            range(len(events)),
            [a / MiB for a, _ in spans],
            [b / MiB for _, b in spans],
            step="post",
            color=palette.get(where, "grey"),
            linewidth=0,
        )
    from matplotlib.patches import Patch

    handles = [Patch(color=color, label=where) for where, color in palette.items()]
    ax.set_xlabel("allocation events (torch.tpu.memory._record_memory_history)")
    ax.set_ylabel("MiB live on tpu:0")
    ax.set_title("torch.tpu.memory._snapshot(): active memory over four training steps")
    ax.legend(
        handles=handles,
        fontsize=7,
        loc="upper left",
        title="blocks made at",
        title_fontsize=7,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(blocks: dict) -> None:
    """Replaces each `<!-- generated: NAME -->` ... `<!-- end: NAME -->` block of the page."""
    text = DOC.read_text()
    for name, body in blocks.items():
        pattern = re.compile(
            rf"(<!-- generated: {name} -->\n).*?(<!-- end: {name} -->)", re.DOTALL
        )
        if not pattern.search(text):
            raise SystemExit(f"debugging_tour: {DOC} has no generated block {name!r}")
        block = "```text\n" + body.rstrip() + "\n```\n"
        text = pattern.sub(lambda m, block=block: m.group(1) + block + m.group(2), text)
    DOC.write_text(text)


if __name__ == "__main__":
    main()
