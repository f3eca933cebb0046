"""specdec_ref: a readable, exact reference implementation of speculative decoding.

    import specdec_ref as sd
    target, draft, tok = sd.load_offline_pair()
    out = sd.speculative_generate(target, draft, ids, max_new_tokens=64, gamma=4)
"""
from .drafters import CachedModel, Drafter, ModelDrafter, NgramDrafter
from .generate import Generation, Stats, Step, autoregressive_generate, speculative_generate
from .models import PAIRS, HubPair, encode_chat, load_hf_pair, load_offline_pair, load_offline_target, load_pair
from .sampling import SamplingConfig, logits_to_probs, sample
from .timing import default_device, synchronize, time_fn
from .verify import accepted_mass, residual, verify

__all__ = [
    "SamplingConfig", "logits_to_probs", "sample", "verify", "residual", "accepted_mass",
    "speculative_generate", "autoregressive_generate", "Generation", "Stats", "Step",
    "CachedModel", "Drafter", "ModelDrafter", "NgramDrafter",
    "encode_chat", "load_offline_pair", "load_offline_target", "load_pair", "load_hf_pair", "PAIRS", "HubPair",
    "default_device", "synchronize", "time_fn",
]
