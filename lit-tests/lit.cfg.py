# lit configuration: every `.ir` file under lit-tests/ is a test whose `// RUN:` lines drive
# torchtpu-opt and FileCheck. Binaries come from target/release, as `make` builds them (override:
# TORCHTPU_BIN_DIR, e.g. target/debug);
# FileCheck and `not` from LLVM 22 (override: LLVM_BIN_DIR).
import os

import lit.formats

config.name = "torchtpu"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".ir"]
config.excludes = ["inputs"]
config.test_source_root = os.path.dirname(os.path.abspath(__file__))
config.test_exec_root = os.path.join(config.test_source_root, "Output")

repo_root = os.path.dirname(config.test_source_root)
bin_dir = os.environ.get("TORCHTPU_BIN_DIR", os.path.join(repo_root, "target", "release"))
llvm_bin = os.environ.get("LLVM_BIN_DIR", "/usr/lib/llvm-22/bin")

for tool, where in (("torchtpu-opt", bin_dir), ("FileCheck", llvm_bin), ("not", llvm_bin)):
    if not os.path.exists(os.path.join(where, tool)):
        lit_config.fatal(f"{tool} not found in {where}: run `make build` (or `cargo build --release --bins`) first")

config.environment["PATH"] = os.pathsep.join([bin_dir, llvm_bin, os.environ.get("PATH", "")])
config.substitutions.append(("%examples", os.path.join(repo_root, "examples")))
