"""Checkers for chapter 6, "In production".

Each `check_*` takes the reader's answer first. Left as None it prints "Not attempted yet"; a wrong
answer raises AssertionError with a hint; a right one prints why it is right.
"""
from __future__ import annotations

import torch

from ...tree import Tree, verify_tree_greedy
from ..production import batch_speedup, breakeven_batch
from .common import answered

# Exercise 1: a made-up accelerator whose target pass costs max(10 ms, 0.1 ms x B·k) (memory-bound until B·k = 100
# tokens, then compute-bound) and whose draft step costs max(2 ms, 0.012 ms x B).
BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
TARGET_COSTS = {(B, k): max(10e-3, 0.1e-3 * B * k) for B in BATCH_SIZES for k in range(1, 9)}
DRAFT_COSTS = {(B, k): max(2e-3, 0.012e-3 * B * k) for B in BATCH_SIZES for k in range(1, 9)}


def check_breakeven_batch(answer: int | None, alpha: float = 0.7, gamma: int = 3) -> None:
    """Exercise 1: the smallest B in BATCH_SIZES at which speculation stops paying off (speedup <= 1)."""
    if not answered(answer, "a batch size from BATCH_SIZES"):
        return
    truth = breakeven_batch(TARGET_COSTS, DRAFT_COSTS, alpha, gamma)
    table = ", ".join(f"B={B}: {batch_speedup(TARGET_COSTS, DRAFT_COSTS, alpha, gamma, B):.2f}×" for B in BATCH_SIZES)
    assert answer == truth, (
        f"the smallest B with speedup <= 1 is not {answer}. Hint: for each B, c(B) = t_draft(B, 1) / t(B, 1) and the "
        f"verify cost is t(B, γ+1) / t(B, 1); speedup = (1 - α^(γ+1)) / (1 - α) / (γ c(B) + t(B, γ+1) / t(B, 1)). "
        f"Where does B·(γ+1) pass 100 tokens?")
    print(f"Correct: B = {truth}. Predicted speedups: {table}. Once B·(γ+1) tokens make the verify pass "
          "compute-bound, the γ extra tokens per sequence cost real time and the batch already keeps the hardware busy.")


# Exercise 2: a two-branch tree, Tree.from_branching((2, 1)): the root (node 0) has children 1 and 2; node 1 has
# child 3, node 2 has child 4. Greedy drafting put these tokens on the nodes (node 0 is the last context token):
NODE_TOKENS = [7, 3, 5, 4, 1]
TARGET_ARGMAX = [5, 2, 1, 0, 6]  # the target's argmax after each node's root-to-node path (one row per node)


def example_tree() -> tuple[Tree, torch.Tensor, torch.Tensor]:
    """(tree, node_tokens [5], target_probs [5, 8]) of exercise 2: one-hot rows on TARGET_ARGMAX."""
    tree = Tree.from_branching((2, 1))
    target_probs = torch.nn.functional.one_hot(torch.tensor(TARGET_ARGMAX), 8).double()  # [5] -> [5, 8]
    return tree, torch.tensor(NODE_TOKENS), target_probs


def check_tree_by_hand(answer: list[int] | None) -> None:
    """Exercise 2: the tokens one greedy tree iteration emits (accepted draft tokens, then the target's own)."""
    if not answered(answer, "the list of emitted tokens, e.g. [3, 4, 2]"):
        return
    tree, node_tokens, target_probs = example_tree()
    path, next_token = verify_tree_greedy(tree, node_tokens, target_probs)
    truth = node_tokens[path].tolist() + next_token.tolist()
    assert list(answer) == truth, (
        f"{list(answer)} is not what the greedy walk emits. Hint: start at the root; the target's argmax after the "
        f"root is {TARGET_ARGMAX[0]}: which child carries that token? Move there and repeat; when no child matches "
        "(or you reach a leaf), emit the target's argmax at that node and stop")
    print(f"Correct: the walk accepts nodes {path} (tokens {node_tokens[path].tolist()}) and emits the target's "
          f"{int(next_token)} after them: {len(truth)} tokens from one target pass. A chain that drafted only the "
          f"first candidate (token {NODE_TOKENS[1]}) would have kept none and emitted 1 token.")


# Exercise 3: Hugging Face settings that make `generate(assistant_model=...)` draft like our loop with γ = GAMMA.
GAMMA = 3


def check_hf_settings(answer: dict | None) -> None:
    """Exercise 3: the generate() keyword arguments for a constant γ = 3 with no early stop."""
    if not answered(answer, "a dict of generate() keyword arguments"):
        return
    want = {"num_assistant_tokens": GAMMA, "num_assistant_tokens_schedule": "constant",
            "assistant_confidence_threshold": 0.0}
    for key, value in want.items():
        assert key in answer, f"missing {key!r}: without it Hugging Face uses its own default for it"
        assert answer[key] == value, (f"{key} = {answer[key]!r} does not draft like γ = {GAMMA} every iteration; "
                                      "read the defaults printed in the chapter")
    print("Correct: γ = 3 every iteration, never changed by the schedule, and no confidence stop "
          "(a threshold of 0 is never undercut).")
