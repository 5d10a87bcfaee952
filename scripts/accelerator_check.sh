#!/usr/bin/env bash
# Accelerator readiness (issue 48): on a machine with an NVIDIA GPU, install XLA's CUDA PJRT
# plugin into .venv, point torchtpu at it (TORCHTPU_PJRT_PLUGIN) and run a smoke check, the
# device and compile tests and `benches/performance.py --quick` on it; write one Markdown report.
#
#   scripts/accelerator_check.sh [--report PATH] [--logs DIR]  # needs nvidia-smi and a GPU
#   scripts/accelerator_check.sh --dry-run ...                 # CPU plugin, tiny subset, installs nothing
#
# The report goes to PATH (default $TMPDIR/torchtpu-accelerator-report.md), the steps' full logs
# to DIR (default a fresh folder under $TMPDIR), which the report names.
# Exit status: 0 every step passed, 1 a step failed (the report says which), 2 no GPU or bad usage.
# Environment (all optional):
#   ACCEL_WHEELS=DIR       install from a wheel folder only (offline: --no-index --find-links DIR)
#   ACCEL_INDEX_URL=URL    install from this index instead of PyPI
#   ACCEL_PJRT_VERSION=V   jax-cuda1X-pjrt version (default 0.11.2)
#   ACCEL_PJRT_PLUGIN=SO   use this plugin .so as it is: no install, no search
#   ACCEL_TESTS="F ..."    test files instead of the default set
#   ACCEL_BENCH_ARGS="..." performance.py's arguments instead of the default
#   ACCEL_TEST_TIMEOUT=S, ACCEL_BENCH_TIMEOUT=S  per-step limits in seconds
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VPY="$ROOT/.venv/bin/python"

# The CPU plugin setup installs (lammps-jax-pjrt-cpu 0.11.2) is built from jax 0.11.2's XLA: the
# CUDA plugin of the same version speaks the same PJRT C API, whose struct sizes the runtime
# declares (docs/runtime.md, "Version and ABI checks").
PJRT_VERSION="${ACCEL_PJRT_VERSION:-0.11.2}"
# The CUDA libraries of jax-cuda1X-plugin's `with-cuda` extra (0.10.2, its last release with a
# Python 3.11 wheel; the pjrt wheel has no extras). pip keeps any already installed version that
# satisfies these, so torch's own CUDA 13 wheels stay as they are.
CUDA13_LIBS=(nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvcc nvidia-cuda-runtime "nvidia-cudnn-cu13>=9.12,<10"
             nvidia-cufft nvidia-cusolver nvidia-cusparse nvidia-nccl-cu13 nvidia-nvjitlink nvidia-cuda-nvrtc
             nvidia-nvshmem-cu13 nvidia-nvvm)
CUDA12_LIBS=(nvidia-cublas-cu12 nvidia-cuda-cupti-cu12 "nvidia-cuda-nvcc-cu12>=12.6.85" nvidia-cuda-runtime-cu12
             "nvidia-cudnn-cu12>=9.8,<10" nvidia-cufft-cu12 nvidia-cusolver-cu12 nvidia-cusparse-cu12
             nvidia-nccl-cu12 nvidia-nvjitlink-cu12 nvidia-cuda-nvrtc-cu12 nvidia-nvshmem-cu12)

# What runs on the GPU: the eager device and the compiled path against CPU eager, a few minutes.
GPU_TESTS=(python/tests/structure/test_extension.py python/tests/compile/test_backend.py python/tests/device/test_device.py
           python/tests/device/test_device_native.py python/tests/device/test_device_models.py
           python/tests/compile/test_compile_inputs.py python/tests/compile/test_low_precision.py
           python/tests/compile/test_lowering_vs_eager.py)
DRY_TESTS=(python/tests/structure/test_extension.py)

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }

DRY_RUN=0; LOGS=""
REPORT="${TMPDIR:-/tmp}/torchtpu-accelerator-report.md"
while (($#)); do
  case "$1" in
    --dry-run) DRY_RUN=1 ;;
    --report) [[ $# -ge 2 ]] || { echo "--report needs a path" >&2; exit 2; }; REPORT="$2"; shift ;;
    --report=*) REPORT="${1#--report=}" ;;
    --logs) [[ $# -ge 2 ]] || { echo "--logs needs a folder" >&2; exit 2; }; LOGS="$2"; shift ;;
    --logs=*) LOGS="${1#--logs=}" ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
# Before the cd below: a relative path is the caller's.
REPORT="$(realpath -m "$REPORT")"; [[ -z "$LOGS" ]] || LOGS="$(realpath -m "$LOGS")"
cd "$ROOT"
[[ -x "$VPY" ]] || { echo "no $VPY: run \`make setup\` first" >&2; exit 2; }
mkdir -p "$(dirname "$REPORT")"

# --- the machine ---------------------------------------------------------------------------
GPU_NAME="none"; DRIVER="-"; CUDA_VERSION="-"
if ((DRY_RUN)); then
  MODE="dry run (CPU plugin)"
else
  MODE="GPU (CUDA PJRT plugin)"
  smi_out=""
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    why="nvidia-smi is not on PATH"
  elif ! smi_out="$(timeout 60 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)" \
      || [[ -z "$smi_out" ]]; then
    why="nvidia-smi failed: ${smi_out:-it listed no GPU}"
  else
    why=""
  fi
  if [[ -n "$why" ]]; then
    echo "no NVIDIA GPU found ($why); --dry-run checks this script on the CPU plugin" >&2
    exit 2
  fi
  # "NVIDIA H100 80GB HBM3, 550.54.15, 81559 MiB", one line per GPU.
  IFS=',' read -r GPU_NAME DRIVER gpu_mem <<<"$(head -n1 <<<"$smi_out")"
  GPU_NAME="$(wc -l <<<"$smi_out") x $GPU_NAME (${gpu_mem# })"; DRIVER="${DRIVER# }"
  # The highest CUDA version the driver supports is only in nvidia-smi's banner.
  CUDA_VERSION="$(timeout 60 nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9.]*\).*/\1/p' | head -n1 || true)"
fi
CPU_MODEL="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n1 || true)"

if [[ -n "$LOGS" ]]; then mkdir -p "$LOGS"; else LOGS="$(mktemp -d "${TMPDIR:-/tmp}/torchtpu-accelerator.XXXXXX")"; fi
# A fresh compile cache: every program is compiled by the plugin under test.
export TORCHTPU_CACHE_DIR="$LOGS/cache"

# --- steps: each runs under a timeout, its output in $LOGS/<name>.log; a failure is recorded --
STEP_ROWS=(); FAILED_STEPS=(); TEST_CMD=(); BENCH_CMD=()
run_step() {  # NAME SECONDS COMMAND...
  local name="$1" limit="$2" rc=0 start=$SECONDS status
  shift 2
  echo "[accelerator_check] $name: $*" >&2
  timeout --kill-after=30 "$limit" "$@" >"$LOGS/$name.log" 2>&1 || rc=$?
  case "$rc" in
    0) status="ok" ;;
    124|137) status="TIMED OUT after ${limit} s" ;;
    *) status="FAILED" ;;
  esac
  STEP_ROWS+=("| $name | $status | $rc | $((SECONDS - start)) |")
  ((rc == 0)) || FAILED_STEPS+=("$name")
  echo "[accelerator_check] $name: $status ($((SECONDS - start)) s)" >&2
}
skip_step() {  # NAME WHY: a step that could not run counts as failed
  STEP_ROWS+=("| $1 | SKIPPED: $2 | - | 0 |")
  FAILED_STEPS+=("$1")
}
show() { local v; v="$(field "$@")"; printf '%s' "${v:--}"; }  # for the report: "-" if none
step_ok() { [[ " ${FAILED_STEPS[*]} " != *" $1 "* ]]; }
field() {  # LOG KEY: the value of a "KEY<tab>VALUE" line a step printed
  awk -F'\t' -v k="$2" '$1 == k { v = $2 } END { print v }' "$LOGS/$1.log" 2>/dev/null || true
}

# --- 1. install the plugin (GPU only) ------------------------------------------------------
PKG="-"; PLUGIN_SO=""
if ((DRY_RUN)); then
  unset TORCHTPU_PJRT_PLUGIN  # the runtime's own search finds setup's CPU plugin
elif [[ -n "${ACCEL_PJRT_PLUGIN:-}" ]]; then
  PLUGIN_SO="$ACCEL_PJRT_PLUGIN"
else
  cuda_major="${CUDA_VERSION%%.*}"
  if [[ "$cuda_major" =~ ^[0-9]+$ ]] && ((cuda_major >= 13)); then
    PKG="jax-cuda13-pjrt"; libs=("${CUDA13_LIBS[@]}")
  elif [[ "$cuda_major" == 12 ]]; then
    PKG="jax-cuda12-pjrt"; libs=("${CUDA12_LIBS[@]}")
  fi
  if [[ "$PKG" == "-" ]]; then
    skip_step install "the driver's CUDA version '${CUDA_VERSION:-unknown}' has no jax CUDA plugin (12 or 13)"
  else
    source_args=()
    [[ -n "${ACCEL_WHEELS:-}" ]] && source_args+=(--no-index --find-links "$ACCEL_WHEELS")
    [[ -n "${ACCEL_INDEX_URL:-}" ]] && source_args+=(--index-url "$ACCEL_INDEX_URL")
    run_step install 1800 "$VPY" -m pip install -q --disable-pip-version-check --no-cache-dir \
      "${source_args[@]}" "$PKG==$PJRT_VERSION" "${libs[@]}"
  fi
fi

# --- 2. find the plugin ----------------------------------------------------------------------
# By its installed files (the .so under jax_plugins/), or, in a dry run, where the runtime looks
# by default; the package is the distribution whose record lists the .so.
cat >"$LOGS/locate.py" <<'PY'
import importlib.metadata as md, importlib.util, pathlib, sys, torch
kind, arg = sys.argv[1], sys.argv[2]
if kind == "dist":
    dist = md.distribution(arg)
    so = [f for f in dist.files or [] if f.suffix == ".so" and "jax_plugins" in f.parts]
    if not so:
        sys.exit(f"{arg} lists no jax_plugins/*.so")
    path = pathlib.Path(dist.locate_file(so[0])).resolve()
else:
    if kind == "default":
        import torchtpu

        arg = torchtpu._C.plugin_path()
    path = pathlib.Path(arg).resolve()
    dists = md.distributions(path=[str(p) for p in path.parents[:3]])
    dist = next((d for d in dists if any(pathlib.Path(d.locate_file(f)).resolve() == path for f in d.files or [])), None)
if not path.is_file():
    sys.exit(f"no plugin at {path}")
print(f"package\t{dist.metadata['Name'] if dist else '-'}\nversion\t{dist.version if dist else '-'}")
print(f"path\t{path}\ntorch\t{torch.__version__}")
# The CUDA wheels' library folders and the toolkit folder (nvvm/libdevice, bin/ptxas) that XLA
# needs: torchtpu loads the .so directly, without jax's Python code that would point at them.
spec = importlib.util.find_spec("nvidia") if kind != "default" else None
roots = [pathlib.Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
libs = sorted({str(f.parent) for r in roots for f in r.glob("**/lib/lib*.so*")})
libdevice = next((f for r in roots for f in r.glob("**/nvvm/libdevice/libdevice*.bc")), None)
print(f"ld_library_path\t{':'.join(libs)}\ncuda_data_dir\t{libdevice.parents[2] if libdevice else ''}")
PY
if ((DRY_RUN)); then
  run_step plugin 300 "$VPY" "$LOGS/locate.py" default -
elif [[ -n "$PLUGIN_SO" ]]; then
  run_step plugin 300 "$VPY" "$LOGS/locate.py" path "$PLUGIN_SO"
elif step_ok install; then
  run_step plugin 300 "$VPY" "$LOGS/locate.py" dist "$PKG"
else
  skip_step plugin "the install failed"
fi
PLUGIN_SO="$(field plugin path)"
if ! ((DRY_RUN)) && [[ -n "$PLUGIN_SO" ]]; then
  export TORCHTPU_PJRT_PLUGIN="$PLUGIN_SO"
  extra_libs="$(field plugin ld_library_path)"
  if [[ -n "$extra_libs" ]]; then export LD_LIBRARY_PATH="$extra_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
  cuda_dir="$(field plugin cuda_data_dir)"
  if [[ -n "$cuda_dir" && "${XLA_FLAGS:-}" != *xla_gpu_cuda_data_dir* ]]; then
    export XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_gpu_cuda_data_dir=$cuda_dir"
  fi
fi

# --- 3. smoke check, tests, benchmark --------------------------------------------------------
# The plugin loads, names its platform, and an eager op and a compiled function match CPU eager.
# The tolerance admits TF32, XLA's default for f32 matmuls on recent GPUs.
cat >"$LOGS/smoke.py" <<'PY'
import sys, torch, torchtpu

want_gpu = sys.argv[1] == "gpu"
x = torch.randn(64, 64)
eager = (x.to("tpu") @ x.to("tpu")).relu().cpu()
compiled = torch.compile(lambda a: torch.tanh(a @ a).sum(0), backend="torchtpu")(x)
err = max(float((eager - (x @ x).relu()).abs().max() / (x @ x).abs().max()),
          float((compiled - torch.tanh(x @ x).sum(0)).abs().max() / torch.tanh(x @ x).sum(0).abs().max()))
platform = torchtpu._C.platform_name()
print(f"platform\t{platform}\ndevices\t{torch.tpu.device_count()} x {torch.tpu.get_device_name()}")
print(f"max_rel_error\t{err:.1e}\nplugin_loaded\t{torchtpu._C.plugin_path()}")
if want_gpu == (platform.lower() == "cpu"):
    sys.exit(f"platform {platform!r}: not the plugin this run is for")
sys.exit(0 if err < 1e-2 else f"results differ from CPU eager by {err:.1e}")
PY
if [[ -n "$PLUGIN_SO" ]]; then
  if ((DRY_RUN)); then
    tests=("${DRY_TESTS[@]}"); pytest_args=(-x -q); bench_args=(--quick --models mlp); limit=300
  else
    tests=("${GPU_TESTS[@]}"); pytest_args=(-q -m "not slow" --durations=10)
    bench_args=(--quick); limit=1800
  fi
  [[ -n "${ACCEL_TESTS:-}" ]] && read -r -a tests <<<"$ACCEL_TESTS"
  [[ -n "${ACCEL_BENCH_ARGS:-}" ]] && read -r -a bench_args <<<"$ACCEL_BENCH_ARGS"
  run_step smoke 600 "$VPY" "$LOGS/smoke.py" "$( ((DRY_RUN)) && echo cpu || echo gpu)"
  # One pytest process (no xdist workers): XLA's GPU client reserves most of the GPU's memory
  # when it starts, so two processes would not both fit.
  TEST_CMD=("$VPY" -m pytest -p no:cacheprovider "${pytest_args[@]}" "${tests[@]}")
  run_step tests "${ACCEL_TEST_TIMEOUT:-$limit}" "${TEST_CMD[@]}"
  BENCH_CMD=("$VPY" benches/performance.py "${bench_args[@]}")
  run_step bench "${ACCEL_BENCH_TIMEOUT:-$limit}" "${BENCH_CMD[@]}"
else
  for s in smoke tests bench; do skip_step "$s" "no plugin"; done
fi

# --- 4. the report ---------------------------------------------------------------------------
# shellcheck disable=SC2016  # the backquotes are Markdown's
code() { printf '`%s`' "$*"; }
cmd() {  # a command as Markdown code, arguments with spaces quoted
  local out="" a
  for a in "$@"; do [[ "$a" != *[[:space:]]* ]] || a="\"$a\""; out+="${out:+ }$a"; done
  code "$out"
}
fence() { printf '```\n'; cat; printf '```\n'; }
{
  echo "# torchtpu accelerator readiness"
  echo
  echo "- Mode: $MODE"
  echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- Commit: $(git rev-parse --short HEAD 2>/dev/null || echo -)$(git diff --quiet HEAD 2>/dev/null || echo ' (uncommitted changes)')"
  if ((${#FAILED_STEPS[@]})); then echo "- Result: FAILED (${FAILED_STEPS[*]})"; else echo "- Result: PASSED"; fi
  echo
  echo "## Machine"
  echo
  echo "- GPU: $GPU_NAME"
  echo "- Driver: $DRIVER"
  echo "- CUDA (driver): ${CUDA_VERSION:--}"
  echo "- CPU: ${CPU_MODEL:-unknown}, $(nproc) cores"
  echo "- torch: $(show plugin torch)"
  echo
  echo "## Plugin"
  echo
  pkg="$(show plugin package) $(show plugin version)"
  [[ -f "$LOGS/plugin.log" || "$PKG" == "-" ]] || pkg="$PKG==$PJRT_VERSION (not installed)"
  echo "- Package: $pkg"
  echo "- Path: ${PLUGIN_SO:--}"
  default_search="unset (the runtime's default search: setup's CPU plugin)"
  echo "- TORCHTPU_PJRT_PLUGIN: ${TORCHTPU_PJRT_PLUGIN:-$default_search}"
  echo "- Platform: $(show smoke platform), devices: $(show smoke devices)"
  echo "- Smoke check, max relative error vs CPU eager: $(show smoke max_rel_error)"
  if ! ((DRY_RUN)); then
    echo "- LD_LIBRARY_PATH: ${LD_LIBRARY_PATH:-unset}"
    echo "- XLA_FLAGS: ${XLA_FLAGS:-unset}"
  fi
  echo
  echo "## Steps"
  echo
  echo "| step | status | exit | seconds |"
  echo "|---|---|---|---|"
  printf '%s\n' "${STEP_ROWS[@]}"
  echo
  echo "## Tests"
  echo
  if ((${#TEST_CMD[@]})); then echo "Command: $(cmd .venv/bin/python "${TEST_CMD[@]:1}")"; else echo "Not run."; fi
  echo
  # pytest's last line that counts outcomes ("15 passed in 12.40s").
  summary="$(grep -E '[0-9]+ (passed|failed|errors?|skipped)|no tests ran' "$LOGS/tests.log" 2>/dev/null | tail -n1 || true)"
  echo "Summary: $(code "${summary:-none}")"
  echo
  echo "## Benchmark"
  echo
  if ((${#BENCH_CMD[@]})); then echo "Command: $(cmd .venv/bin/python "${BENCH_CMD[@]:1}")"; else echo "Not run."; fi
  echo
  # Its per-row progress lines and steady-state tables (the rest of --quick's output is other
  # benches' sections, from their stored results, not this run's).
  rows="$(grep -E '^[a-z0-9_]+/[0-9]+/(inference|training) ' "$LOGS/bench.log" 2>/dev/null || true)"
  if [[ -n "$rows" ]]; then fence <<<"$rows"; else echo "No results."; fi
  echo
  awk '/^## / { keep = /^## Steady-state/; if (keep) { print "#" $0; next } } keep' "$LOGS/bench.log" 2>/dev/null || true
  if ((${#FAILED_STEPS[@]})); then
    echo
    echo "## Failures"
    for s in "${FAILED_STEPS[@]}"; do
      [[ -f "$LOGS/$s.log" ]] || continue
      echo
      echo "### $s (last 40 lines)"
      echo
      tail -n 40 "$LOGS/$s.log" | fence
    done
  fi
  echo
  echo "Full logs: $LOGS"
} >"$REPORT.tmp" || true  # `|| true`: a report line that fails must not stop the rest
mv -f "$REPORT.tmp" "$REPORT" || { echo "cannot write the report to $REPORT" >&2; exit 1; }
echo "[accelerator_check] report: $REPORT" >&2
if ((${#FAILED_STEPS[@]})); then exit 1; fi
