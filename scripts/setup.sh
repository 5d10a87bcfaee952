#!/usr/bin/env bash
# One idempotent setup for a fresh machine: Debian packages (MLIR 22, FileCheck),
# the .venv with pinned Python tools and torch, the PJRT CPU plugin, and the extension.
# Every step checks whether its result is already present and skips it if so.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

VENV="$ROOT/.venv"
PLUGIN_DIR="$VENV/pjrt"          # documented in README.md and docs/architecture.md
PY="${PYTHON:-python3}"

TORCH_VERSION=2.15.0
MATURIN_VERSION=1.16.0
PYTEST_VERSION=9.2.0
LIT_VERSION=18.1.8
NUMPY_VERSION=2.4.6        # PyTorch's OpInfo database (the OpInfo harness) needs it
EXPECTTEST_VERSION=0.3.0   # imported by torch.testing._internal
TORCHVISION_VERSION=0.29.2 # the model zoo (python/tests/models)
TRANSFORMERS_VERSION=5.24.0
MATPLOTLIB_VERSION=3.11.2   # benches/performance.py plots (docs/img)
ACCELERATE_VERSION=1.15.0   # HF Trainer and device_map (the tests of what a user runs)
PYTEST_TIMEOUT_VERSION=2.4.0 # every test under a timeout: a hang fails, it does not stall CI
PYTEST_XDIST_VERSION=3.8.0 # `make test` runs the pytest suite on two workers (one per core)
RUFF_VERSION=0.17.6        # `make lint`: format and lint python/
TORCHAO_VERSION=0.18.0     # quantization (python/tests/compile/test_quantization.py, docs/quantization.md)
TORCHTITAN_VERSION=0.3.0   # examples/torchtitan (llama3 debug model on tpu); its datasets<4.8 holds huggingface_hub<2
# `transformers serve` (transformers' `serving` extra; docs/serving.md, python/tests/frameworks/test_serving.py)
OPENAI_VERSION=3.63.0
UVICORN_VERSION=0.55.0
FASTAPI_VERSION=0.165.0
STARLETTE_VERSION=1.10.0
NINJA_VERSION=1.13.2       # the C++ shim's sources compile in parallel (torch's BuildExtension)
UV_VERSION=0.9.30          # installs the rest: 76 s with bytecode where pip took ~4.5 minutes
PLUGIN_PKG=lammps-jax-pjrt-cpu
PLUGIN_VERSION=0.11.2

APT_PACKAGES=(libmlir-22-dev llvm-22-dev libpolly-22-dev libzstd-dev libclang1-22
              libclang-common-22-dev llvm-22-tools)

log() { printf '[setup] %s\n' "$*"; }

# --- Rust lint tools (make lint) --------------------------------------------
for tool in rustfmt clippy; do
  if ! cargo "${tool/rustfmt/fmt}" --version >/dev/null 2>&1; then
    log "installing the Rust component $tool"
    rustup component add "$tool"
  fi
done

# --- Debian packages -------------------------------------------------------
missing=()
for p in "${APT_PACKAGES[@]}"; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" = "install ok installed" ] || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  log "Debian packages present"
fi

# --- virtual environment ----------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"

# Which pinned requirements are missing (one interpreter start; `pip show` is slow).
REQS=("torch==$TORCH_VERSION" "maturin==$MATURIN_VERSION" "pytest==$PYTEST_VERSION" "lit==$LIT_VERSION"
      "numpy==$NUMPY_VERSION" "expecttest==$EXPECTTEST_VERSION"
      "torchvision==$TORCHVISION_VERSION" "transformers==$TRANSFORMERS_VERSION" "matplotlib==$MATPLOTLIB_VERSION"
      "accelerate==$ACCELERATE_VERSION" "pytest-timeout==$PYTEST_TIMEOUT_VERSION"
      "pytest-xdist==$PYTEST_XDIST_VERSION" "ruff==$RUFF_VERSION" "torchao==$TORCHAO_VERSION"
      "torchtitan==$TORCHTITAN_VERSION" "openai==$OPENAI_VERSION" "uvicorn==$UVICORN_VERSION"
      "fastapi==$FASTAPI_VERSION" "starlette==$STARLETTE_VERSION" "ninja==$NINJA_VERSION")
mapfile -t want < <("$VPY" - "${REQS[@]}" <<'PYEOF'
import sys, importlib.metadata as md
for req in sys.argv[1:]:
    name, version = req.split("==")
    try:
        ok = md.version(name) == version
    except md.PackageNotFoundError:
        ok = False
    if not ok:
        print(req)
PYEOF
)
# uv (from PyPI, into the venv) installs the packages: it downloads and unpacks in parallel.
UV="$VENV/bin/uv"
ensure_uv() {
  if [ "$("$UV" --version 2>/dev/null | cut -d' ' -f2)" != "$UV_VERSION" ]; then
    "$VPY" -m pip install -q --disable-pip-version-check --no-cache-dir "uv==$UV_VERSION"
  fi
}
if ((${#want[@]})); then
  log "installing: ${want[*]}"
  ensure_uv
  # No wheel cache: torch and its CUDA wheels are ~5 GB, and a cached copy doubles the disk
  # a fresh machine needs (a CI run once failed with "No space left on device" here).
  # Bytecode compiled now, as pip does and uv does not by default: where PYTHONDONTWRITEBYTECODE
  # is set (CI), every process would otherwise compile torch's and transformers' sources again
  # (a clean clone's pytest took 38.5 minutes instead of 29).
  "$UV" pip install -q --no-cache --compile-bytecode --python "$VPY" "${want[@]}"
else
  log "Python packages present"
fi

# --- PJRT CPU plugin --------------------------------------------------------
PLUGIN_SO="$PLUGIN_DIR/lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so"
if [ ! -f "$PLUGIN_SO" ] || [ "$(cat "$PLUGIN_DIR/.version" 2>/dev/null)" != "$PLUGIN_VERSION" ]; then
  log "installing PJRT CPU plugin $PLUGIN_PKG==$PLUGIN_VERSION into $PLUGIN_DIR"
  rm -rf "$PLUGIN_DIR"
  ensure_uv
  "$UV" pip install -q --no-cache --python "$VPY" --no-deps --target "$PLUGIN_DIR" "$PLUGIN_PKG==$PLUGIN_VERSION"
  echo "$PLUGIN_VERSION" > "$PLUGIN_DIR/.version"
else
  log "PJRT CPU plugin present: $PLUGIN_SO"
fi

# --- the extension (torchtpu._C) and the device's shim (torchtpu._device_shim) --------------
# Built at the same time: each leaves a core idle in its serial steps (rustc's last crates and
# links, the shim's last file), which the other fills.

# The extension into the venv, rebuilt only when a Rust or Python source is newer than the last
# install stamp. Release: every model call crosses this extension, and a debug build costs
# ~100 us per call of a tiny graph (benches/call_overhead.py); the release build takes ~80 s more.
STAMP="$VENV/.torchtpu-ext.stamp"
build_extension() {
  if [ ! -f "$STAMP" ] || [ -n "$(find Cargo.toml Cargo.lock compiler runtime engine eager python -newer "$STAMP" \
        \( -name '*.rs' -o -name '*.toml' -o -name '*.py' -o -name Cargo.lock \) -print -quit 2>/dev/null)" ]; then
    log "building torchtpu._C (release) into $VENV"
    VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH" CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}" \
      "$VENV/bin/maturin" develop --release -q -m python/Cargo.toml
    touch "$STAMP"
  else
    log "torchtpu._C up to date"
  fi
}

# The shim: a small C++ extension against the installed torch's headers (docs/eager.md,
# "Devices"), built here, never at import; rebuilt when its source, its build script or torch
# changed.
build_shim() {
  local so
  so="$(ls python/torchtpu/_device_shim*.so 2>/dev/null | head -n1 || true)"
  if [ -z "$so" ] || [ -n "$(find python/torchtpu/csrc -newer "$so" 2>/dev/null)" ] \
      || [ python/setup_shim.py -nt "$so" ] \
      || [ -n "$(find "$VENV"/lib/python*/site-packages/torch/version.py -newer "$so" 2>/dev/null)" ]; then
    log "building torchtpu._device_shim against the installed torch"
    # Without autoload: torch's start would register the tpu device, which needs this very guard.
    # The venv's bin first: torch's BuildExtension looks for `ninja` on PATH.
    (cd python && PATH="$VENV/bin:$PATH" TORCH_DEVICE_BACKEND_AUTOLOAD=0 MAX_JOBS="${CARGO_BUILD_JOBS:-2}" \
      "$VPY" setup_shim.py -q build_ext --inplace --build-temp "$ROOT/target/device-guard")
  else
    log "torchtpu._device_shim up to date"
  fi
}

build_extension & extension_pid=$!
build_shim & shim_pid=$!
extension_status=0; shim_status=0
wait "$extension_pid" || extension_status=$?
wait "$shim_pid" || shim_status=$?
if ((extension_status || shim_status)); then
  log "failed: torchtpu._C (status $extension_status), torchtpu._device_shim (status $shim_status)"
  exit 1
fi
log "done"
