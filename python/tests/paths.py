"""Where the tests' files are. The tests are grouped by layer in the folders below this one
(compile/, sharding/, device/, distributed/, frameworks/, structure/); what they share (the
workers torchrun launches, the harnesses, models/) stays here, which conftest.py puts on
`sys.path`."""

import os
import pathlib

TESTS = pathlib.Path(__file__).resolve().parent
ROOT = TESTS.parents[1]
# The CLIs (torchtpu-opt...), where `make` builds them (Makefile `BIN`); as in lit-tests/lit.cfg.py,
# TORCHTPU_BIN_DIR overrides it.
BIN = pathlib.Path(os.environ.get("TORCHTPU_BIN_DIR", ROOT / "target" / "release"))
