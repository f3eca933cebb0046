"""How often the feature head's top-k guesses contain the target's token, at each draft depth.

A tree keeps a drafted path only if, at every depth, the target's token is among the children drafted there.
`coverage_by_depth` measures exactly that ingredient, along the target's own greedy answers
(`lab.compare.target_answers`): at every answer position the head drafts from the true context (real target
features), then goes `depth` steps further, fed its *own* guessed features (as when drafting) and the *true*
tokens (so that depth d is judged on the path the target really took). coverage[d][k] = P(the target's
token at depth d is in the head's top k).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from ..cache import CachedModel


@dataclass
class Coverage:
    ks: tuple[int, ...]  # the k of coverage@k
    by_depth: list[dict[int, float]]  # by_depth[d - 1][k]: P(target token in the head's top k at depth d)
    path: list[dict[int, float]]  # path[d - 1][k]: P(every depth 1..d in the top k): what a k-ary tree keeps
    positions: int  # answer positions measured (at depth 1)

    def table(self) -> str:
        head = "depth | " + " | ".join(f"top-{k}" for k in self.ks) + " | path top-" + str(self.ks[-1])
        rows = [f"{d + 1:5d} | " + " | ".join(f"{row[k]:.2f}" for k in self.ks)
                + f" | {self.path[d][self.ks[-1]]:.2f}"
                for d, row in enumerate(self.by_depth)]
        return "\n".join([head, *rows])


def first_guesses(target, head, sequences: list[tuple[torch.Tensor, int]]):
    """Along sequences [(ids [L], n_prompt)], the head's guess at every answer position from the true context:
    yields (seq, t, f, target_logits, cache) with f [d] its guess of h_{t-1} (the feature that predicts
    seq[t]), target_logits [L, V] the target's (row t - 1 is p for seq[t]) and the head's cache holding only
    real features up to t - 2. A consumer that feeds the head more (deeper guesses) crops the cache back
    before asking for the next position."""
    for seq, n_prompt in sequences:
        lm = CachedModel(target, keep_hidden=getattr(head, "fuse_layers", ()) or True)
        target_logits = lm.logits(seq)  # [L, V]
        hidden, cache, n_fed = lm.hidden, DynamicCache(), 0  # [L, d] the target's final hidden states
        for t in range(max(n_prompt, 2), seq.shape[0]):  # predict seq[t] from seq[:t]
            f = head(hidden[n_fed:t - 1][None], seq[n_fed + 1:t][None], cache)[0, -1]  # [d] guess of h_{t-1}
            n_fed = t - 1
            yield seq, t, f, target_logits, cache


@torch.inference_mode()
def coverage_by_depth(target, head, sequences: list[tuple[torch.Tensor, int]], depth: int = 4,
                      ks: tuple[int, ...] = (1, 2, 4, 8)) -> Coverage:
    """Coverage@k per depth of a `FeatureHead` along sequences [(ids [L], n_prompt)] (see the module
    docstring)."""
    if depth < 1 or not ks or min(ks) < 1:
        raise ValueError(f"need depth >= 1 and ks of positive integers, got depth={depth}, ks={ks}")
    hits = [[0] * len(ks) for _ in range(depth)]
    path_hits = [[0] * len(ks) for _ in range(depth)]
    reached = [0] * depth
    for seq, t, f, _, cache in first_guesses(target, head, sequences):
        L, fed, alive = seq.shape[0], 0, [True] * len(ks)
        for d in range(min(depth, L - t)):
            top = head.logits(f).topk(max(ks)).indices  # [max k]
            rank_ok = [bool((top[:k] == seq[t + d]).any()) for k in ks]
            reached[d] += 1
            for i, ok in enumerate(rank_ok):
                hits[d][i] += ok
                alive[i] = alive[i] and ok
                path_hits[d][i] += alive[i]
            if d + 1 < min(depth, L - t):  # its own feature, the true token: one step deeper
                f = head(f[None, None], seq[t + d][None, None], cache)[0, 0]
                fed += 1
        if fed:
            cache.crop(-fed)  # only pairs of real target features stay
    by_depth = [{k: h / r if r else float("nan") for k, h in zip(ks, row)} for row, r in zip(hits, reached)]
    path = [{k: h / r if r else float("nan") for k, h in zip(ks, row)} for row, r in zip(path_hits, reached)]
    return Coverage(tuple(ks), by_depth, path, reached[0])


SHARPNESS_GRID = (0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.5)  # the factors record_head_quality.py tries


@torch.inference_mode()
def acceptance_by_sharpness(target, head, sequences: list[tuple[torch.Tensor, int]],
                            scales: tuple[float, ...] = SHARPNESS_GRID) -> dict[float, float]:
    """β = Σ_x min(p(x), q_s(x)) at depth 1, averaged along sequences [(ids [L], n_prompt)] (the target's
    answers sampled at T = 1), for q_s = softmax(s · the head's logits), each s in `scales`: the chance that
    a token drawn from q_s is kept (Leviathan et al. 2023). The head guesses every position from the target's
    real features, as at the first draft position of an iteration."""
    sums, n = {s: 0.0 for s in scales}, 0
    for seq, t, f, target_logits, _ in first_guesses(target, head, sequences):
        rows, keep = head.reduced_logits(f[None])  # [1, K], [K]
        p = target_logits[t - 1].float().softmax(-1)[keep]  # [K]; q is 0 off keep, so min is too
        for s in scales:
            sums[s] += float(torch.minimum(p, (s * rows[0].float()).softmax(-1)).sum())
        n += 1
    if n == 0:
        raise ValueError("no answer positions to measure: give sequences longer than their prompts")
    return {s: v / n for s, v in sums.items()}
