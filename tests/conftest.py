"""Shared fixtures, and the one thread-count policy for the whole suite.

Threads: one, for every test. The toy models are tiny (extra threads only add overhead), and on a
shared 2-core CPU two threads thrash; even the real 135M model ran its tests faster on one.
Every test that loads the real model is marked `slow` automatically, so `pytest -m "not slow"` is a
fast loop; CI runs everything.
"""
import os
import warnings

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never touch the Hugging Face Hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_collection_modifyitems(items):
    for item in items:
        if "offline_pair" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def toy_pair():
    """A float64 6-token Llama and a perturbed copy as its draft (acceptance around 0.6)."""
    from specdec_ref.models.toy import tiny_pair
    return tiny_pair(vocab_size=6, seed=0, noise=0.15)


@pytest.fixture(scope="session")
def offline_pair():
    """The real offline target (SmolLM2-135M-Instruct) in float32, with the distilled LM draft."""
    from specdec_ref import load_offline_pair
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_offline_pair(dtype=torch.float32, draft="lm")


@pytest.fixture
def nbclient():
    """nbclient, with kernel messages read in slices of a second (scripts/nbclient_poll.py): after a widget
    cell it could otherwise sit out a whole cell timeout (jupyter/nbclient#312)."""
    import sys
    from pathlib import Path
    nbclient = pytest.importorskip("nbclient")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import nbclient_poll
    nbclient_poll.install()
    return nbclient
