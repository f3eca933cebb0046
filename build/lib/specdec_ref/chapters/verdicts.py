"""The sentences that judge a measurement, as small functions of the numbers, so that the prose follows a live run.

Every function here returns the sentence a chapter prints (or glues) for its measurements; the tests feed
each one measurements on both sides of its threshold and check that the sentence changes with them.
"""
from __future__ import annotations

from collections.abc import Mapping


def kernel_verdict(before: Mapping[int, float], after: Mapping[int, float], k: int = 8, goal: float = 1.25) -> str:
    """Chapter 1: did prepacking make scoring k tokens nearly as cheap as one? before/after: t(k)/t(1) by k."""
    b, a = before[k], after[k]
    within = max(kk for kk in after if after[kk] <= goal) if any(v <= goal for v in after.values()) else None
    change = (f"prepacking cut the cost of scoring {k} tokens from {b:.2f}× to {a:.2f}× one token"
              if a < b else f"prepacking did not help here: scoring {k} tokens costs {a:.2f}× one token, "
                            f"against {b:.2f}× with F.linear")
    if a <= goal:
        return f"On this machine {change}: within {goal}×, as the memory-bound picture says."
    reach = (f"it stays within {goal}× up to k = {within}" if within and within > 1
             else f"no k > 1 stays within {goal}×")
    return (f"On this machine {change}, but {reach}: beyond that the matrix kernel runs out of arithmetic "
            "before the weights run out of bandwidth (a compute-bound small-batch kernel).")


def tree_vs_chain_verdict(tree: float, chain: float, tree_label: str = "the tree", chain_label: str = "the chain",
                          margin: float = 0.03) -> str:
    """Compare two speedups (or τ values): which is ahead, or a tie within `margin` (relative)."""
    if abs(tree - chain) <= margin * max(tree, chain):
        return f"{tree_label} and {chain_label} are level here ({tree:.2f} vs {chain:.2f})"
    better, worse = (tree_label, chain_label) if tree > chain else (chain_label, tree_label)
    return f"{better} is ahead of {worse} here ({max(tree, chain):.2f} vs {min(tree, chain):.2f})"


def overhead_verdict(ours_ms: float, hf_ms: float) -> str:
    """Our loop's overhead per target pass against Hugging Face assisted generation's."""
    if ours_ms <= hf_ms:
        return f"our loop spends {ours_ms:.1f} ms per target pass outside the models, at most Hugging Face's {hf_ms:.1f} ms"
    return (f"our loop spends {ours_ms:.1f} ms per target pass outside the models, more than Hugging Face's "
            f"{hf_ms:.1f} ms")


def adaptive_verdict(best_fixed: float, adaptive: Mapping[str, float], margin: float = 0.03) -> str:
    """Chapter 4: did any adaptive draft length beat the best fixed γ on this run? Speedups over plain decoding."""
    name, best = max(adaptive.items(), key=lambda kv: kv[1])
    if best > best_fixed * (1 + margin):
        return f"here the {name} beat the best fixed γ, {best:.2f}× against {best_fixed:.2f}×"
    if best < best_fixed * (1 - margin):
        return f"here no adaptive rule beat the best fixed γ: the best, the {name}, gave {best:.2f}× against {best_fixed:.2f}×"
    return f"here the {name} and the best fixed γ are level, {best:.2f}× against {best_fixed:.2f}×"
