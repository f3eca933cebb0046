"""Small helpers shared by the chapters: quick mode, showing package source, the knobs."""
from __future__ import annotations

import inspect
import os

QUICK = os.environ.get("SPECDEC_QUICK", "0") not in ("", "0", "false", "False")  # CI sets SPECDEC_QUICK=1


def quick(full, small):
    """`small` under SPECDEC_QUICK=1 (CI), `full` otherwise."""
    return small if QUICK else full


def show_source(obj) -> None:
    """Display the package's own source for obj, so the book shows exactly the code that runs."""
    from IPython.display import Markdown, display
    display(Markdown(f"```python\n{inspect.getsource(obj)}```"))


def in_colab() -> bool:
    try:
        import google.colab  # noqa: F401
        return True
    except ImportError:
        return False
