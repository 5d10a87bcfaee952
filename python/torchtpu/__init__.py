"""torchtpu: a torch.compile backend whose compiler is written in Rust.

Today the package exposes the compiler core through ``torchtpu._C`` (the PyO3 extension):
parse, verify and print the graph IR, and run named passes over it. The Dynamo backend
(``torch.compile(model, backend="torchtpu")``) is not implemented yet; see README.md.
"""

from torchtpu import _C

__version__ = _C.__version__

__all__ = ["__version__", "canonical_ir", "list_passes", "run_pipeline"]


def canonical_ir(text: str) -> str:
    """Parse and verify IR text; return it in canonical printed form.

    Raises ValueError with the line and column of a parse error, or the verifier's message.
    """
    return _C.canonical_ir(text)


def run_pipeline(text: str, pipeline: str) -> str:
    """Run a pass pipeline such as ``"canonicalize,cse,dce"`` over IR text."""
    return _C.run_pipeline(text, pipeline)


def list_passes() -> list[tuple[str, str]]:
    """``(name, one-line description)`` of every registered compiler pass."""
    return list(_C.list_passes())
