"""specdec_ref: a readable, exact reference implementation of speculative decoding.

    import specdec_ref as sd
    target, draft, tok = sd.load_offline_pair()
    out = sd.speculative_generate(target, draft, ids, max_new_tokens=64, gamma=4)

The algorithm is the four modules at the top: sampling, verify, drafters, generate (plus cache and
device, which they use). The folders hold everything else: models/ (loaders, drafts, toys), lab/
(timing, statistics, broken samplers, the benchmark), chapters/ (figures, widgets, exercises) and
distill/ (draft training).
"""
from .cache import CachedModel, vocab_size
from .device import default_device, synchronize, time_fn
from .drafters import Drafter, FallbackDrafter, FeatureDrafter, ModelDrafter, NgramDrafter, ScheduledDrafter, TreeDrafter
from .generate import Generation, Stats, Step, autoregressive_generate, speculative_generate, speculative_step
from .models import PAIRS, HubPair, encode_chat, load_hf_pair, load_offline_pair, load_offline_target, load_pair
from .sampling import SamplingConfig, logits_to_probs, sample
from .kernels import kernel_path, prepack_for_cpu
from .tree import (Tree, TreeBudget, accepted_length_vs_chain, tree_speculative_generate, verify_tree,
                   verify_tree_deterministic)
from .verify import accepted_mass, residual, verify

__all__ = [
    "SamplingConfig", "logits_to_probs", "sample", "verify", "residual", "accepted_mass",
    "speculative_generate", "speculative_step", "autoregressive_generate", "Generation", "Stats", "Step",
    "CachedModel", "vocab_size", "Drafter", "ModelDrafter", "NgramDrafter", "ScheduledDrafter", "FallbackDrafter", "FeatureDrafter",
    "encode_chat", "load_offline_pair", "load_offline_target", "load_pair", "load_hf_pair", "PAIRS", "HubPair",
    "default_device", "synchronize", "time_fn",
    "Tree", "TreeBudget", "tree_speculative_generate", "verify_tree", "verify_tree_deterministic",
    "accepted_length_vs_chain", "TreeDrafter", "prepack_for_cpu", "kernel_path",
]
