"""Checkers for chapter 6, "In production".

Each `check_*` takes the reader's answer first. Left as None (or a function that still raises
NotImplementedError) it prints "Not attempted yet"; a wrong answer raises AssertionError with a hint
(which way it is off and what to revisit, never the right value); a right one prints why it is right.
"""
from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable

import torch

from ...lab import hf
from ...lab.speedup import predicted_speedup
from ...lab.stats import SIGNIFICANCE, chi_square_gof
from ...models.toy import tiny_llama
from ...tree import Tree
from ...verify import verify_tree
from ..production import Costs, batch_speedup, breakeven_batch
from .common import answered, attempted, direction

# Exercise 1: a made-up accelerator whose target pass costs max(10 ms, 0.1 ms x B·k)
# (memory-bound until B·k = 100 tokens, then compute-bound) and whose draft step costs
# max(2 ms, 0.012 ms x B).
BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
TARGET_COSTS = {(B, k): max(10e-3, 0.1e-3 * B * k) for B in BATCH_SIZES for k in range(1, 9)}
DRAFT_COSTS = {(B, k): max(2e-3, 0.012e-3 * B * k) for B in BATCH_SIZES for k in range(1, 9)}


def check_breakeven_batch(answer: int | None, alpha: float = 0.7, gamma: int = 3) -> None:
    """Exercise 1: the smallest B in BATCH_SIZES at which speculation stops paying off (speedup <= 1)."""
    if not answered(answer, "a batch size from BATCH_SIZES"):
        return
    assert answer in BATCH_SIZES, (f"{answer} is not a batch size of the exercise's list. Hint: the "
                                  "answer is one of BATCH_SIZES")
    truth = breakeven_batch(TARGET_COSTS, DRAFT_COSTS, alpha, gamma)
    mine = batch_speedup(TARGET_COSTS, DRAFT_COSTS, alpha, gamma, answer)
    verdict = "speculation still pays there" if mine > 1 else "speculation no longer pays there"
    side = "not it" if truth is None else direction(answer, truth, "too large", "too small")
    assert answer == truth, (
        f"at B = {answer} the predicted speedup is {mine:.2f}×: {verdict}, but B = {answer} is {side}. "
        "Hint: for each B, c(B) = t_draft(B, 1) / t(B, 1) and the verify cost is t(B, γ+1) / t(B, 1); "
        "speedup = (1 - α^(γ+1)) / (1 - α) / (γ c(B) + t(B, γ+1) / t(B, 1)), eq-batch-speedup. Where does "
        "B·(γ+1) pass 100 tokens?")
    table = ", ".join(f"B={B}: {batch_speedup(TARGET_COSTS, DRAFT_COSTS, alpha, gamma, B):.2f}×"
                      for B in BATCH_SIZES)
    print(f"Correct: B = {truth}. Predicted speedups: {table}. Once B·(γ+1) tokens make the verify pass "
          "compute-bound, the γ extra tokens per sequence cost real time and the batch already keeps the "
          "hardware busy.")


# Exercise 2: a two-branch tree, Tree.from_branching((2, 1)): the root (node 0) has children 1 and 2;
# node 1 has child 3, node 2 has child 4. Greedy drafting put these tokens on the nodes
# (node 0 is the last context token):
NODE_TOKENS = [7, 3, 5, 4, 1]
TARGET_ARGMAX = [5, 2, 1, 0, 6]  # the target's argmax after each node's root-to-node path (one row per node)


def example_tree() -> tuple[Tree, torch.Tensor, torch.Tensor]:
    """(tree, node_tokens [5], target_probs [5, 8]) of exercise 2: one-hot rows on TARGET_ARGMAX."""
    tree = Tree.from_branching((2, 1))
    target_probs = torch.nn.functional.one_hot(torch.tensor(TARGET_ARGMAX), 8).double()  # [5] -> [5, 8]
    return tree, torch.tensor(NODE_TOKENS), target_probs


ORDINALS = ("first", "second", "third", "fourth", "fifth")  # words, so that no position reads as a token


def check_tree_by_hand(answer: list[int] | None) -> None:
    """Exercise 2: the tokens one greedy tree iteration emits (accepted draft tokens,
    then the target's own)."""
    if not answered(answer, "the list of emitted tokens, e.g. [3, 4, 2]"):
        return
    tree, node_tokens, target_probs = example_tree()
    # greedy: the point-mass walk on one-hot rows
    path, next_token = verify_tree(tree, node_tokens, target_probs)
    truth = node_tokens[path].tolist() + next_token.tolist()
    mine = list(answer)
    right = next((i for i, (a, t) in enumerate(zip(mine, truth)) if a != t), min(len(mine), len(truth)))
    where = (f"its {ORDINALS[right]} token is wrong" if right < min(len(mine), len(truth))
             else f"it is {direction(len(mine), len(truth), 'too long', 'too short')}")
    assert mine == truth, (
        f"{mine} is not what the greedy walk emits: {where}. Hint: start at the root; TARGET_ARGMAX[0] is "
        "the target's argmax after the root: which child carries that token? Move there and repeat; when no "
        "child matches (or you reach a leaf), emit the target's argmax at that node (TARGET_ARGMAX[node]) "
        "and stop")
    print(f"Correct: the walk accepts nodes {path} (tokens {node_tokens[path].tolist()}) and emits the "
          f"target's {int(next_token)} after them: {len(truth)} tokens from one target pass. A chain that "
          f"drafted only the first candidate (token {NODE_TOKENS[1]}) would have kept none and emitted 1 "
          "token.")


# Exercise 3: Hugging Face settings that make assisted generation draft like our loop with γ = GAMMA.
# The checker puts them where transformers 5 reads them (the draft's generation_config, through
# `hf.assistant_settings`), runs Hugging Face on `hf_checker_pair()` and counts the draft's forward passes
# before each of the target's.
GAMMA = 3
HF_PROMPT = [1, 2, 3, 4]
HF_NEW_TOKENS = 24  # one token per iteration on the checker's pair, so HF_NEW_TOKENS iterations


def hf_checker_pair(vocab_size: int = 8, seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(target, draft) for exercise 3: a tiny random Llama, and a copy whose LM head is shifted by one token
    and scaled by 0.01.

    The draft's token is never the target's (every draft is rejected, so each iteration emits one token and
    the count has no luck in it), and the draft is never sure (its top probability is about 1 / vocab_size,
    so any confidence stop above that ends every draft after one token). Its generation_config asks for the
    "heuristic" schedule, as a checkpoint saved before transformers 4.45 does: a setting an answer leaves
    out keeps the draft's own.
    """
    target = tiny_llama(vocab_size, seed=seed, hidden=16, dtype=torch.float32)
    draft = copy.deepcopy(target)
    with torch.no_grad():  # [V, d]: the draft's row i is the target's row i - 1
        draft.lm_head.weight.copy_(0.01 * target.lm_head.weight.roll(1, dims=0))
    draft.generation_config.num_assistant_tokens_schedule = "heuristic"
    return target, draft


def hf_draft_lengths(target, draft, **keywords) -> list[int]:
    """Greedy assisted generation on HF_PROMPT -> the draft length of every iteration (forward hooks).

    keywords go to `generate()` as they are (the route transformers 5 ignores for the assistant's settings).
    """
    ids = torch.tensor([HF_PROMPT])  # [1, T]
    return hf.draft_lengths(target, draft, lambda: target.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=HF_NEW_TOKENS, min_new_tokens=0,
        do_sample=False, assistant_model=draft, **keywords))


def _hf_hint(judged: list[int]) -> str:
    """What the measured draft lengths say is wrong (iterations with room for γ): never the right values."""
    shown = ", ".join(map(str, judged[:8])) + (", ..." if len(judged) > 8 else "")
    if max(judged) > GAMMA:
        return (f"your settings drafted up to {max(judged)} tokens in one iteration (lengths: {shown}), more "
                "than γ. Hint: which setting caps the number of tokens drafted per iteration?")
    if len(set(judged)) > 1:
        return (f"the draft length moved between iterations (lengths: {shown}): after each rejected draft "
                "something shortened the next one. Hint: which setting decides whether the length may "
                "change?")
    if judged[0] == 1:
        return ("every draft stopped after one token. This checker's draft is never sure of its token, so "
                "something cuts a draft short where the draft doubts it. Hint: which setting stops a draft "
                "early, and which value of it is never undercut?")
    return f"your settings draft {judged[0]} tokens every iteration: the same length each time, but not γ"


def check_hf_settings(answer: dict | None) -> None:
    """Exercise 3: the assistant settings (a dict) for a draft of exactly γ = GAMMA tokens every iteration.

    Judged by what Hugging Face does with them: the draft's forward passes are counted before every target
    pass, with the settings on the draft's generation_config (where transformers 5 reads them).
    """
    if not answered(answer, "a dict of Hugging Face assistant settings"):
        return
    assert isinstance(answer, dict), f"the answer must be a dict of settings, got {type(answer).__name__}"
    unknown = sorted(set(answer) - set(hf.ASSISTANT_SETTINGS))
    assert not unknown, (f"{unknown}: not assistant settings transformers reads from the draft's config. "
                         "Hint: the chapter prints the names of the settings and their defaults")
    target, draft = hf_checker_pair()
    try:
        with hf.assistant_settings(draft, **answer):
            lengths = hf_draft_lengths(target, draft)
    except ValueError as e:  # the message starts with the setting's name
        key = str(e).split(" ")[0]
        raise AssertionError(f"Hugging Face cannot use {key} = {answer.get(key)!r}. Hint: the chapter "
                             "prints every setting with its default, which shows what kind of value it takes"
                             ) from None
    assert len(lengths) == HF_NEW_TOKENS, f"expected one token per iteration here, got {lengths}; report this"
    judged = lengths[:HF_NEW_TOKENS - GAMMA]  # the iterations with room for γ tokens before max_new_tokens
    assert judged == [GAMMA] * len(judged), _hf_hint(judged)
    threshold = answer.get("assistant_confidence_threshold")
    assert not threshold, (
        "your drafts were never cut short here, but only because this draft's confidence never fell below "
        f"{threshold}; with a real draft that stop still ends drafts early. Hint: which threshold is never "
        "undercut?")
    keywords, defaults = hf_draft_lengths(target, draft, **answer), hf_draft_lengths(target, draft)
    print(f"Correct: Hugging Face drafted {GAMMA} tokens in each of the {len(judged)} iterations with room "
          "for them: never changed by the schedule, never cut short by the confidence stop (no probability "
          "is below 0). Passed as generate() keywords instead, the same settings drafted "
          f"{sum(keywords) / len(keywords):.2f} tokens per iteration here (the draft's own settings: "
          f"{sum(defaults) / len(defaults):.2f}): transformers 5 reads them from the draft's "
          "generation_config, which `hf.assistant_settings` sets for one call and restores after it.")


# Exercise 4: sampled verification at one node of a dynamic tree, whose children are the draft's top-k tokens.
# p_target at the node, [V = 6]
NODE_PROBS = torch.tensor([0.30, 0.05, 0.35, 0.10, 0.15, 0.05], dtype=torch.float64)
# the children's tokens, the draft's top-3 (distinct), tried in this order
NODE_CANDIDATES = torch.tensor([2, 0, 4])
# (p_target, candidates): the example, one child, children holding no mass, children holding it all
NODE_CASES = (
    (NODE_PROBS, NODE_CANDIDATES),
    (NODE_PROBS, torch.tensor([3])),
    (torch.tensor([0.0, 0.4, 0.0, 0.3, 0.0, 0.3], dtype=torch.float64), torch.tensor([0, 2, 4])),
    (torch.tensor([0.5, 0.5, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64), torch.tensor([1, 0])),
)
NODE_SAMPLES = 3000  # draws per case for the chi-square test
NODE_SEED = 0  # seeds the torch.Generator of every case


def emitted_counts(fn: Callable, target_probs: torch.Tensor, candidates: torch.Tensor, n: int = NODE_SAMPLES,
                   seed: int = NODE_SEED) -> Counter:
    """How often fn(target_probs, candidates, generator) emits each token in n calls,
    from one seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    counts = Counter()
    for _ in range(n):
        token = fn(target_probs.clone(), candidates, generator)
        counts[int(token)] += 1
    return counts


def point_mass_verify_without_removal(target_probs, candidates, generator):  # [V], [k] -> int
    """A known-wrong variant: a rejected candidate is never removed,
    so it can come back in the final sample."""
    for x in candidates:
        if torch.rand((), generator=generator, dtype=target_probs.dtype) < target_probs[x]:
            return int(x)
    return int(torch.multinomial(target_probs, 1, generator=generator))


def check_point_mass_verify(fn: Callable, n: int = NODE_SAMPLES, seed: int = NODE_SEED,
                            level: float = SIGNIFICANCE) -> None:
    """Exercise 4: fn(target_probs [V], candidates [k], generator) -> the emitted token (an int).

    Judged by chi-square goodness of fit of n emitted tokens against target_probs, at significance `level`,
    with a fixed seed, on every case of NODE_CASES; the same test must reject the known-wrong variant.
    """
    if not attempted(fn, NODE_PROBS.clone(), NODE_CANDIDATES, torch.Generator().manual_seed(seed)):
        return
    for probs, cands in NODE_CASES:
        token = fn(probs.clone(), cands, torch.Generator().manual_seed(seed))
        assert int(token) in range(probs.shape[0]), (
            f"fn must return a token id in [0, {probs.shape[0]}), got {token!r}")
        counts = emitted_counts(fn, probs, cands, n, seed)
        exact = {i: float(p) for i, p in enumerate(probs.tolist()) if p > 0}
        result = chi_square_gof(counts, exact)
        emitted = {k: round(v / n, 3) for k, v in sorted(counts.items())}
        assert not result.rejects(level), (
            f"with p_target = {probs.tolist()} and candidates {cands.tolist()}, the emitted tokens are not "
            f"distributed as p_target: {result}, level {level}. Emitted frequencies: {emitted}. Hint: after "
            "a rejection, set the rejected token's probability to 0 and divide by what is left before trying "
            "the next candidate, and sample the final token from what is left")
        print(f"candidates {cands.tolist()}: {result} -> no evidence of a difference from p_target at level "
              f"{level}")
    wrong = chi_square_gof(
        emitted_counts(point_mass_verify_without_removal, NODE_PROBS, NODE_CANDIDATES, n, seed),
        {i: float(p) for i, p in enumerate(NODE_PROBS.tolist())})
    assert wrong.rejects(level), f"the test lost its power against the wrong variant ({wrong}); report this"
    print("The same test, same n and seed, rejects a variant that never removes rejected candidates "
          f"({wrong}). Correct: your rule emits exactly p_target, whatever the candidates.")


# Exercise 5: the batch speedup S(B) from measured costs t(B, k) and draft costs t_draft(B, 1).
def check_batch_speedup(fn: Callable, costs: Costs | None = None, draft_costs: Costs | None = None,
                        alpha: float = 0.7, rel: float = 1e-6) -> None:
    """Exercise 5: fn(costs, draft_costs, alpha, gamma, B) -> S(B), eq. (eq-batch-speedup) at a measured B.

    Judged against `production.batch_speedup` at every measured B and every γ with γ + 1 measured.
    Defaults: the made-up accelerator of exercise 1.
    """
    costs = TARGET_COSTS if costs is None else costs
    draft_costs = DRAFT_COSTS if draft_costs is None else draft_costs
    Bs, ks = sorted({b for b, _ in costs}), sorted({k for _, k in costs})
    gammas = [k - 1 for k in ks if k > 1]
    if not gammas:
        raise ValueError("costs must hold t(B, k) for k = 1 and at least one k > 1")
    if not attempted(fn, costs, draft_costs, alpha, gammas[0], Bs[0]):
        return
    for B in Bs:
        for gamma in gammas:
            got = float(fn(costs, draft_costs, alpha, gamma, B))
            want = batch_speedup(costs, draft_costs, alpha, gamma, B)
            # t(B, γ+1) = t(B, 1)
            textbook = predicted_speedup(alpha, gamma, draft_costs[(B, 1)] / costs[(B, 1)])
            hint = ("Hint: you used the textbook formula, which assumes t(B, γ+1) = t(B, 1); divide by "
                    "γ·c(B) + t(B, γ+1)/t(B, 1) instead" if abs(got - textbook) <= rel * abs(got)
                    else "Hint: c(B) = t_draft(B, 1)/t(B, 1) and the verify cost t(B, γ+1)/t(B, 1) are both "
                         "taken at the same B; the numerator is (1 - α^(γ+1))/(1 - α)")
            assert abs(got - want) <= rel * abs(want), (
                f"S(B = {B}) at γ = {gamma}: your {got:.4f} is {direction(got, want)}. {hint}")
    table = ", ".join(f"B={B}: {batch_speedup(costs, draft_costs, alpha, gammas[-1], B):.2f}×" for B in Bs)
    print(f"Correct at every measured B and γ in {gammas}. At γ = {gammas[-1]}, α = {alpha:.2f}: {table}.")
