"""Chapter 6's tree measurement: does a tree keep more tokens per target pass than a chain of as many
nodes?"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..generate import Stats, speculative_generate
from ..sampling import SamplingConfig
from ..tree import Tree, as_tree


@dataclass
class TreeVsChain:
    nodes: int  # drafted nodes per iteration, the same for both
    tree_accepted: float  # mean accepted draft tokens per target pass, tree
    chain_accepted: float  # ... chain of the same number of nodes
    tree_draft_passes: float  # draft forward passes per iteration (the tree's depth, the chain's length)
    chain_draft_passes: float
    tree_iterations: int  # iterations (target passes) measured for the tree
    chain_iterations: int


def accepted_length_vs_chain(target, draft, input_ids: torch.Tensor, *, tree: Tree | Sequence[int] = (2, 2),
                             max_new_tokens: int = 32, runs: int = 10,
                             sampling: SamplingConfig = SamplingConfig(),
                             seed: int = 0) -> TreeVsChain:  # input_ids [1, T]
    """Mean accepted tokens per target pass for a static `tree` and for a chain with as many drafted nodes.

    Each target pass emits accepted + 1 tokens. Counts only, no timing: the tree's pass scores its |𝒯|
    nodes, so whether it is faster too depends on how the hardware prices |𝒯| rows (measure that separately).
    Both run through the same loop, `speculative_generate`, with the tree given as a static Tree.
    """
    tree = as_tree(tree)
    results = []
    for shape in (tree, Tree.chain(tree.size)):
        generator = torch.Generator(device=input_ids.device).manual_seed(seed)
        full = Stats()
        for _ in range(runs):
            s = speculative_generate(target, draft, input_ids, max_new_tokens, tree=shape, sampling=sampling,
                                     generator=generator).stats
            full.accepted += s.accepted
            full.draft_calls += s.draft_calls
        n = len(full.accepted)
        results.append((sum(full.accepted) / n, full.draft_calls / n, n))
    (ta, td, tn), (ca, cd, cn) = results
    return TreeVsChain(tree.size, ta, ca, td, cd, tn, cn)
