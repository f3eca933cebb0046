import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never touch the Hugging Face Hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _threads(request):
    """One thread for the tiny models (extra threads only add overhead, and thrash on a shared CPU);
    two for tests that run the real 135M model."""
    torch.set_num_threads(2 if "offline_pair" in request.fixturenames else 1)


@pytest.fixture(scope="session")
def toy_pair():
    """A float64 6-token Llama and a perturbed copy as its draft (acceptance around 0.6)."""
    from specdec_ref.toy import tiny_pair
    return tiny_pair(vocab_size=6, seed=0, noise=0.15)


@pytest.fixture(scope="session")
def offline_pair():
    """The real offline target (SmolLM2-135M-Instruct, fp32) with whatever draft load_offline_pair ships."""
    import warnings

    from specdec_ref import load_offline_pair
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_offline_pair()
