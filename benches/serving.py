"""`transformers serve` on tpu against the same server on the CPU, in one run (docs/serving.md).

For each model (the tests' tiny Llama, and a ~125M Llama: hidden 768, 12 layers, 12 heads, 4 KV
heads, intermediate 2048, a 32000-id vocabulary; random weights saved locally) and each server
(below), the console script starts on a free local port, then `--rounds` rounds each send
`--requests` concurrent streamed chat completions of `--new-tokens` greedy tokens (prompts of one
token length). Per round: wall seconds, generated tokens per second (the servers' own
`completion_tokens` over the round's wall time), time to first token per request (the first chunk
carrying text; median and p90). Round 1 is the cold one (a fresh compile cache unless
`--cache-dir`): the table shows it apart and the later rounds' median. Every streamed answer is
compared with the CPU server's for the same prompt.

Servers (`--servers`, comma-separated):
    cpu-cb           --device cpu --continuous-batching            (CPU eager, the reference)
    tpu-cb-compile   --device tpu --continuous-batching --compile  (what issue 47 asks for; in
                     transformers 5.24 `--compile` does not reach the continuous-batching path)
    tpu-compile      --device tpu --compile                        (requests one at a time,
                     static cache, forward compiled with torchtpu)

    .venv/bin/python benches/serving.py                  # both models, ~1 hour on 2 cores
    .venv/bin/python benches/serving.py --models tiny    # minutes

Writes benches/results/serving.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import threading
import time

import httpx

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python" / "tests"))  # the tests' launcher and tiny Llama
import launch  # noqa: E402
from models import tiny_llama  # noqa: E402

RESULTS = ROOT / "benches" / "results" / "serving.json"
SERVE = str(pathlib.Path(sys.executable).parent / "transformers")
MODELS = {
    "tiny": {},  # tiny_llama.config(): hidden 32, 2 layers
    "llama-125m": dict(
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
        intermediate_size=2048,
        initializer_range=0.02,
        reserved_to=32000,
    ),
}
# The paged KV cache: pages of 32 tokens, enough for every request in flight; 256 tokens per batch.
CB_CACHE = [
    "--cb-block-size",
    "32",
    "--cb-num-blocks",
    "64",
    "--cb-max-batch-tokens",
    "256",
]
SERVERS = {
    "cpu-cb": ["--device", "cpu", "--continuous-batching", *CB_CACHE],
    "tpu-cb-compile": [
        "--device",
        "tpu",
        "--continuous-batching",
        "--compile",
        *CB_CACHE,
    ],
    "tpu-compile": ["--device", "tpu", "--compile"],
}
WORDS = "red green blue old young warm cold dark quick lazy bright small large quiet loud young".split()


def one_request(
    url: str, model: str, prompt: str, new_tokens: int, t0: float, out: dict
) -> None:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": new_tokens,
        "temperature": 0,
        "stream": True,
    }
    text, first, tokens = "", None, None
    try:
        with httpx.stream(
            "POST", url + "/v1/chat/completions", json=body, timeout=3600
        ) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    raise RuntimeError(chunk["error"])
                delta = chunk["choices"][0]["delta"] if chunk.get("choices") else {}
                if delta.get("content"):
                    first = first if first is not None else time.monotonic() - t0
                    text += delta["content"]
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
        out.update(text=text, ttft=first, tokens=tokens)
    except Exception as e:  # counted as an error of the round
        out.update(error=repr(e))


def run_round(url, model, prompts, new_tokens) -> dict:
    outs = [{} for _ in prompts]
    t0 = time.monotonic()
    threads = [
        threading.Thread(target=one_request, args=(url, model, p, new_tokens, t0, o))
        for p, o in zip(prompts, outs)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    ok = [o for o in outs if "error" not in o]
    tokens = sum(o["tokens"] or 0 for o in ok)
    ttfts = sorted(o["ttft"] for o in ok if o["ttft"] is not None)
    return {
        "wall_s": wall,
        "tokens": tokens,
        "tokens_per_s": tokens / wall,
        "ttft_median_s": statistics.median(ttfts) if ttfts else None,
        "ttft_p90_s": ttfts[min(len(ttfts) - 1, int(0.9 * len(ttfts)))]
        if ttfts
        else None,
        "errors": [o["error"] for o in outs if "error" in o],
        "texts": [o.get("text") for o in outs],
    }


def bench_server(name, flags, model_dir, prompts, args, cache_dir) -> dict:
    port = launch.free_port()
    cmd = [
        SERVE,
        "serve",
        model_dir,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *flags,
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TORCHTPU_CACHE_DIR=cache_dir)
    t = time.monotonic()
    with launch.server(cmd, ROOT, env, port, timeout=1800) as srv:
        start_s = time.monotonic() - t
        rounds = []
        for i in range(args.rounds):
            r = run_round(srv.url, model_dir, prompts, args.new_tokens)
            print(
                f"  {name} round {i + 1}: {r['wall_s']:.1f} s, {r['tokens_per_s']:.1f} tok/s, "
                f"TTFT median {r['ttft_median_s']}, errors {len(r['errors'])}",
                flush=True,
            )
            rounds.append(r)
    return {"flags": flags, "start_s": start_s, "rounds": rounds}


def summary(res: dict) -> dict:
    later = res["rounds"][1:] or res["rounds"]

    def med(key):
        vals = [r[key] for r in later if r[key] is not None]
        return statistics.median(vals) if vals else None

    return {
        "cold_wall_s": res["rounds"][0]["wall_s"],
        "tokens_per_s": med("tokens_per_s"),
        "ttft_median_s": med("ttft_median_s"),
        "ttft_p90_s": med("ttft_p90_s"),
        "errors": sum(len(r["errors"]) for r in res["rounds"]),
    }


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--servers", default=",".join(SERVERS))
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--cache-dir",
        help="torchtpu's compile cache for the servers (default: a fresh one)",
    )
    ap.add_argument(
        "--no-write",
        action="store_true",
        help="print only; leave benches/results/serving.json",
    )
    args = ap.parse_args()
    servers = args.servers.split(",")
    prompts = [f"the {WORDS[i % len(WORDS)]} fox" for i in range(args.requests)]
    data = {
        "date": time.strftime("%Y-%m-%d"),
        "requests": args.requests,
        "new_tokens": args.new_tokens,
        "rounds": args.rounds,
        "models": {},
    }
    with tempfile.TemporaryDirectory(prefix="serving-bench-") as tmp:
        cache_dir = args.cache_dir or os.path.join(tmp, "cache")
        for m in args.models.split(","):
            overrides = dict(MODELS[m])
            reserved = overrides.pop("reserved_to", None)
            model_dir = tiny_llama.save_servable(
                os.path.join(tmp, m), reserved_to=reserved, **overrides
            )
            print(f"{m}: {model_dir}", flush=True)
            results = {
                s: bench_server(s, SERVERS[s], model_dir, prompts, args, cache_dir)
                for s in servers
            }
            ref = (
                results["cpu-cb"]["rounds"][0]["texts"] if "cpu-cb" in results else None
            )
            for res in results.values():
                res["summary"] = summary(res)
                if ref is not None:
                    res["summary"]["answers_equal_cpu"] = all(
                        r["texts"] == ref for r in res["rounds"]
                    )
            for res in results.values():
                for r in res["rounds"]:
                    r.pop("texts")
            data["models"][m] = results
    print()
    print(
        f"{args.requests} concurrent streamed requests x {args.new_tokens} new tokens, greedy"
    )
    print()
    print(
        "| model | server | cold round (s) | tokens/s | TTFT median (s) | TTFT p90 (s) | errors | = CPU |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for m, results in data["models"].items():
        for s, res in results.items():
            x = res["summary"]
            eq = {True: "yes", False: "NO", None: "-"}[x.get("answers_equal_cpu")]
            print(
                f"| {m} | {s} | {x['cold_wall_s']:.1f} | {_fmt(x['tokens_per_s'])} | {_fmt(x['ttft_median_s'])} | "
                f"{_fmt(x['ttft_p90_s'])} | {x['errors']} | {eq} |"
            )
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(data, indent=1) + "\n")
        print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
