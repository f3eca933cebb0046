"""Small helpers shared by the chapters: quick mode, showing package source, gluing numbers into prose."""
from __future__ import annotations

import importlib.util
import inspect
import os

import torch

QUICK = os.environ.get("SPECDEC_QUICK", "0") not in ("", "0", "false", "False")  # CI sets SPECDEC_QUICK=1

# Where Colab installs the package from. REPO_URL must equal _config.yml's `repository.url`
# (the launch buttons use that). Each chapter's install cell pins a commit, not a moving branch, so a chapter
# opened later still gets the package it was written against: scripts/sync_install_cells.py writes the last
# commit that changed the package (the commit lives outside the package, so pinning it never changes the
# package), and tests/test_colab.py checks that the package at that commit is the package at HEAD.
REPO_URL = "https://github.com/specdec-book/specdec-book"


# The transformers releases the tests run under: 5.24 in CI (constraints.txt), 5.17 on the GPU image (the
# cache-keyword tests, tests/test_cache_keyword.py, cover both). Colab's install cell pins this range, so that
# pip neither keeps an older preinstalled release nor pulls a newer 5.x that no test has seen.
TRANSFORMERS_TESTED = ("5.17", "5.24")  # oldest and newest release tested
TRANSFORMERS_SPEC = "transformers>=5.17,<5.25"  # that range, with the newest one's patch releases


def install_spec(commit: str) -> str:
    """What a chapter's install cell pip-installs: the package at one commit of REPO_URL."""
    return f"specdec_ref @ git+{REPO_URL}@{commit}"


def install_args(commit: str) -> str:
    """The install cell's pip arguments: the package at one commit and the tested transformers range."""
    return f'"{install_spec(commit)}" "{TRANSFORMERS_SPEC}"'


# opens on a GPU runtime
COLAB_METADATA = {"accelerator": "GPU", "colab": {"gpuType": "T4", "provenance": []}}

GLUE_PREFIX = "application/papermill.record/"  # MyST-NB's mime prefix for values glued with display=False


def quick(full, small, quick_mode: bool | None = None):
    """`small` in quick mode (SPECDEC_QUICK=1, or quick_mode=True from a chapter's knobs cell),
    else `full`."""
    return small if (QUICK if quick_mode is None else quick_mode) else full


def glue(name: str, value, display: bool = True) -> None:
    """Store a value under `name` for the book's `{glue:text}` roles, with or without MyST-NB installed.

    MyST-NB reads glued values from the cell's outputs: a display_data output whose metadata names the
    value. This writes the same output MyST-NB's own `glue` writes, so a chapter executed where MyST-NB
    is missing (Colab, a reader's laptop) still renders correctly when the book is built from it.
    The chapters print every headline number as well, because Colab shows `{glue:text}` roles as raw text.
    """
    # numpy / torch scalars -> Python numbers, so that `{glue:text}`name:.2f`` can format them (np.float64's
    # repr is not a float)
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        value = value.item()
    if importlib.util.find_spec("myst_nb") is not None:
        from myst_nb import glue as myst_glue
        myst_glue(name, value, display=display)
        return
    from IPython.core.formatters import format_display_data
    from IPython.display import display as ipy_display
    bundle, metadata = format_display_data(value)
    prefix = "" if display else GLUE_PREFIX
    metadata["scrapbook"] = dict(name=name, mime_prefix=prefix)
    ipy_display({prefix + k: v for k, v in bundle.items()}, raw=True, metadata=metadata)


COPY_LIMIT_BYTES = 4 * 2**30  # the largest model copy a chapter makes just to compare dtypes


def copy_in_dtype(model, dtype: torch.dtype, *, max_bytes: int = COPY_LIMIT_BYTES):
    """model itself if already in dtype, else a copy in dtype;
    None (and a printed reason) if the copy is too big.

    Too big: over max_bytes, or, on a GPU, over 80% of its free memory. A 7B target on a GPU is never
    deep-copied to float32 (28 GB) just to draw a comparison curve.
    """
    if model.dtype == dtype:
        return model
    n_bytes = sum(p.numel() for p in model.parameters()) * torch.finfo(dtype).bits // 8
    device = next(model.parameters()).device
    free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else None
    if n_bytes > max_bytes or (free is not None and n_bytes > 0.8 * free):
        where = f", {free / 2**30:.1f} GiB free on {device}" if free is not None else ""
        print(f"Skipped: a {str(dtype).removeprefix('torch.')} copy of this model would take "
              f"{n_bytes / 2**30:.1f} GiB (limit {max_bytes / 2**30:.0f} GiB{where}); it stays in "
              f"{str(model.dtype).removeprefix('torch.')}.")
        return None
    from ..models.aot import copy_model  # here: scripts/sync_install_cells.py imports this module lightly
    return copy_model(model).to(dtype)  # without a compiled pass: it serves the original's weights


def show_source(obj) -> None:
    """Display the package's own source for obj, so the book shows exactly the code that runs."""
    from IPython.display import Markdown, display
    display(Markdown(f"```python\n{inspect.getsource(obj)}```"))


def in_colab() -> bool:
    """True inside Google Colab."""
    try:
        return importlib.util.find_spec("google.colab") is not None
    except ModuleNotFoundError:  # no `google` package at all
        return False
