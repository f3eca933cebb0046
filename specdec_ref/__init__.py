"""specdec_ref: a readable, exact reference implementation of speculative decoding.

    import specdec_ref as sd
    target, draft, tok = sd.load_offline_pair()
    out = sd.speculative_generate(target, draft, ids, max_new_tokens=64, gamma=4)

The algorithm is the modules at the top, each importing only those below it: generate (the one loop, for
chains and trees), drafters, tree (tree shapes, masks and the tree rule), verify, and at the bottom
sampling, cache and device. cli is the command line. The folders hold everything else: models/ (loaders,
drafts, toys, CPU kernels), lab/ (timing, statistics, broken samplers, the benchmark), chapters/ (figures,
widgets, exercises) and distill/ (draft training).
"""
from .cache import CachedModel, vocab_size
from .device import default_device, synchronize
from .lab.timing import time_fn
from .drafters import (Drafter, FallbackDrafter, FeatureDrafter, ModelDrafter, NgramDrafter, ScheduledDrafter,
                       TreeDrafter)
from .generate import (Generation, Stats, Step, autoregressive_generate, speculative_generate,
                       speculative_step, tree_step)
from .models import (PAIRS, HubPair, encode_chat, load_hf_pair, load_offline_pair, load_offline_target,
                     load_pair)
from .sampling import SamplingConfig, logits_to_probs, sample
from .models.kernels import kernel_path, prepack_for_cpu
from .tree import Tree, TreeBudget
from .verify import accepted_mass, residual, verify, verify_block, verify_tree

__all__ = [
    "SamplingConfig", "logits_to_probs", "sample", "verify", "verify_block", "residual", "accepted_mass",
    "speculative_generate", "speculative_step", "tree_step", "autoregressive_generate",
    "Generation", "Stats", "Step",
    "CachedModel", "vocab_size",
    "Drafter", "ModelDrafter", "NgramDrafter", "ScheduledDrafter", "FallbackDrafter", "FeatureDrafter",
    "encode_chat", "load_offline_pair", "load_offline_target", "load_pair", "load_hf_pair",
    "PAIRS", "HubPair",
    "default_device", "synchronize", "time_fn",
    "Tree", "TreeBudget", "verify_tree", "TreeDrafter", "prepack_for_cpu", "kernel_path",
]
