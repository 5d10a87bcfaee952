"""Self-contained reproductions of torchtpu's internal errors.

When a graph fails inside torchtpu for a reason that is not "unsupported" (a pass, the
lowering or the runtime broke an invariant), the backend runs it eagerly, warns that this is a
torchtpu bug, and writes here:

- `NAME.ir`: the graph as exported (the compiler's input, `// passes:` and `// donate:` in its
  header), which `torchtpu-opt NAME.ir --pass-pipeline=... --emit=stablehlo` also replays;
- `NAME.repro.py`: `python NAME.repro.py` compiles and runs that IR through `torchtpu._C` on
  zero inputs of its declared types and exits 1 when the failure reproduces (`replay.py`).

This module only writes (the failure policy calls it); replaying compiles, so it lives apart,
above the executor, and nothing below imports it.

The folder is `TORCHTPU_REPRO_DIR`, else `torchtpu-repro` under the system's temp folder.
"""

from __future__ import annotations

import os
import re
import tempfile
import traceback


def repro_dir() -> str:
    return os.environ.get("TORCHTPU_REPRO_DIR") or os.path.join(tempfile.gettempdir(), "torchtpu-repro")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "graph"


_SCRIPT = '''"""torchtpu internal error, reproduced: {summary}

Stage: {stage}. Replay with `python {script}` (exit status 1: the failure reproduced), or
`torchtpu-opt {ir} --pass-pipeline={passes} --emit=stablehlo` for the compiler stages.
"""
import os
import sys
{fault}
from torchtpu.replay import replay

sys.exit(replay(os.path.join(os.path.dirname(os.path.abspath(__file__)), {ir!r})))
'''


def write(
    name: str,
    ir_text: str | None,
    passes: str,
    donate: bool | None,
    error: BaseException,
    stage: str | None,
    fx_code: str | None = None,
) -> str:
    """Writes the reproduction of `error` (raised compiling or running graph `name`) and
    returns the path of its script (or of the FX code, when the failure came before any IR)."""
    folder = repro_dir()
    os.makedirs(folder, exist_ok=True)
    base = os.path.join(folder, _safe(name))
    summary = " ".join(str(error).split())[:300].replace('"', "'")
    if ir_text is None:
        path = base + ".fx.py"
        with open(path, "w") as f:
            f.write(f"# torchtpu internal error at {stage}: {summary}\n# The FX graph handed to the exporter:\n")
            f.write(fx_code or "")
            f.write("\n# " + "\n# ".join("".join(traceback.format_exception(error)).splitlines()) + "\n")
        return path
    with open(base + ".ir", "w") as f:
        # donate None: the platform's default (`_C.donates_by_default`), as compiled.
        f.write(
            f"// passes: {passes}\n// donate: {'default' if donate is None else str(bool(donate)).lower()}\n" + ir_text
        )
    from torchtpu._C import FAULT_ENV  # the engine's name for it, TORCHTPU_INJECT_FAULT

    fault = os.environ.get(FAULT_ENV)
    fault_line = (
        f"os.environ.setdefault({FAULT_ENV!r}, {fault!r})  # the fault injected when it failed\n" if fault else ""
    )
    script = base + ".repro.py"
    with open(script, "w") as f:
        f.write(
            _SCRIPT.format(
                summary=summary,
                stage=stage,
                script=os.path.basename(script),
                ir=os.path.basename(base + ".ir"),
                passes=passes,
                fault=fault_line,
            )
        )
    return script
