"""Plain autoregressive decoding and speculative decoding, with the same sampling and cache code.

One loop, `speculative_generate`, runs every method: a chain of γ draft tokens per iteration
(`speculative_step`), or a tree of guesses (`tree_step`: a static `Tree` of sampled children, or an
EAGLE-2 dynamic tree grown to a `TreeBudget`). Both steps return a `Step`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Callable

import torch

from .cache import CachedModel, cached_model, vocab_size
from .device import seconds_since, start_timer
from .drafters import TREE_MEMBERS, Drafter, ModelDrafter, TreeDrafter, as_drafter, missing_members
from .sampling import SamplingConfig, argmax, logits_to_probs, point_masses, sample
from .tree import Tree, TreeBudget, as_tree, tree_attention_mask, tree_position_ids
from .verify import verify, verify_block, verify_greedy, verify_tree, verify_tree_greedy

# the rules a compiled draw and chain verdict compute (`CachedModel.packaged_sampling`); where a chapter or
# `lab.broken` swaps either of them in this module, the loop runs what was swapped in instead
PACKAGED_RULES = (logits_to_probs, verify)


@dataclass
class Stats:
    accepted: list[int] = field(default_factory=list)  # draft tokens accepted, one entry per iteration
    drafted: list[int] = field(default_factory=list)  # draft tokens proposed, one entry per iteration
    target_calls: int = 0  # target forward passes (prefill included)
    draft_calls: int = 0  # draft forward passes (or lookups, for a drafter that is not a model)
    seconds: float = 0.0  # wall time of the whole generation, device synchronised
    tree: bool = False  # True for a tree: accepted counts path nodes, drafted counts tree nodes

    @property
    def acceptance_rate(self) -> float:
        """Fraction of drafted tokens that were accepted (nan if nothing was drafted).

        Tokens discarded after a rejection count as drafted, so this is lower than α below.
        """
        return sum(self.accepted) / sum(self.drafted) if sum(self.drafted) else float("nan")

    @property
    def alpha(self) -> float:
        """Estimate of α, the probability that one draft token is accepted (Leviathan et al.'s α):
        accepted / examined, where an iteration examines its accepted tokens plus the one it rejected."""
        examined = sum(a + (a < d) for a, d in zip(self.accepted, self.drafted))
        return sum(self.accepted) / examined if examined else float("nan")


@dataclass
class Step:
    """Everything one draft/verify iteration saw and did (passed to `on_step`, for chapters and debugging).

    A chain and a tree fill the same fields; a tree also sets `tree` and `path`. For a tree, draft_tokens are
    nodes 1..|𝒯| and row i of draft_probs / target_probs belongs to node i (row 0: the root, the last token).
    """
    context_len: int  # tokens in the sequence before this iteration
    draft_tokens: torch.Tensor  # [γ] proposed tokens (a tree: [n_nodes], the drafted nodes breadth first)
    # [γ, V] distributions they were sampled from (a tree: [n_nodes+1, V], a static tree's children drawn
    # i.i.d. from its rows, a dynamic tree's without replacement; or None when its children were chosen
    # deterministically: top-k or a lookup, judged as point masses)
    draft_probs: torch.Tensor | None
    # [γ+1, V] the target's distributions at the same positions (a tree: [n_nodes+1, V]); given as a function
    # that builds them (greedy: `one_hot_rows`), they are built on first read
    target_probs: torch.Tensor
    n_accepted: int  # length of the accepted prefix (a tree: of the accepted path)
    next_token: int  # the replacement (if n_accepted < γ) or bonus token (if n_accepted == γ)
    target_cache_before: int  # tokens in the target's KV cache after scoring, before rollback
    target_cache_after: int  # ... after rollback
    draft_cache_before: int  # tokens in the draft's KV cache after drafting (0 for a drafter without one)
    draft_cache_after: int
    tree: Tree | None = None  # the tree drafted (None for a chain)
    path: list[int] | None = None  # accepted node ids, root excluded (None for a chain)

    @property
    def n_drafted(self) -> int:
        return self.draft_tokens.shape[0]


def _target_probs(step: Step) -> torch.Tensor:
    rows = step.__dict__["_target_probs"]
    if callable(rows):  # built now, once
        rows = step.__dict__["_target_probs"] = rows()
    return rows


def _set_target_probs(step: Step, rows) -> None:
    step.__dict__["_target_probs"] = rows


# a property in place of the field the dataclass made (its __init__ assigns through the setter)
Step.target_probs = property(_target_probs, _set_target_probs)


@dataclass
class Generation:
    tokens: torch.Tensor  # [n_new] the new tokens only, on the models' device
    stats: Stats

    @property
    def tokens_per_second(self) -> float:
        return self.tokens.shape[0] / self.stats.seconds if self.stats.seconds > 0 else float("nan")


def context_length(model) -> int | None:
    return getattr(model.config, "max_position_embeddings", None)


def check_inputs(model, input_ids, max_new_tokens: int, sampling: SamplingConfig,
                 name: str = "model") -> None:  # input_ids [1, T]
    """Refuse bad input with a message that says what to fix."""
    if not isinstance(sampling, SamplingConfig):
        raise ValueError(f"sampling must be a specdec_ref.SamplingConfig, got {type(sampling).__name__}")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    if not torch.is_tensor(input_ids) or input_ids.dim() != 2:
        raise ValueError(f"input_ids must be a [1, T] LongTensor, "
                         f"got {getattr(input_ids, 'shape', type(input_ids))}")
    if input_ids.shape[0] != 1:
        raise ValueError(f"input_ids must hold exactly one sequence (batch size 1), "
                         f"got batch size {input_ids.shape[0]}")
    if input_ids.shape[1] == 0:
        raise ValueError("the prompt is empty: input_ids must contain at least one token")
    if input_ids.dtype not in (torch.long, torch.int32, torch.int64):
        raise ValueError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
    V = vocab_size(model)
    lo, hi = int(input_ids.min()), int(input_ids.max())
    if lo < 0 or hi >= V:
        raise ValueError(f"token ids must lie in [0, {V}) for the {name}'s vocabulary, "
                         f"got ids in [{lo}, {hi}]")
    n_ctx = context_length(model)
    if n_ctx is not None and input_ids.shape[1] + max_new_tokens > n_ctx:
        raise ValueError(f"prompt ({input_ids.shape[1]} tokens) + max_new_tokens ({max_new_tokens}) exceeds "
                         f"the {name}'s context of {n_ctx} tokens; "
                         "shorten the prompt or ask for fewer tokens")


def check_generator(generator: torch.Generator | None, device: torch.device) -> None:
    """torch samples with a generator only on the generator's own device: say so up front, not deep inside
    torch."""
    if generator is not None and torch.device(generator.device).type != torch.device(device).type:
        raise ValueError(f"the generator is on {generator.device} but the models' inputs are on {device}; "
                         f"create it there: torch.Generator(device={str(device)!r}).manual_seed(seed)")


def trim_new_tokens(tokens: torch.Tensor, n_prompt: int, max_new_tokens: int,
                    eos_token_id) -> tuple[torch.Tensor, bool]:
    """Cut the new tokens at max_new_tokens and right after the first EOS; say whether to stop."""
    new = tokens[n_prompt:n_prompt + max_new_tokens]
    if eos_token_id is not None:
        hits = (new == eos_token_id).nonzero()
        if hits.numel():
            return new[: int(hits[0]) + 1], True
    return new, new.shape[0] >= max_new_tokens


@torch.inference_mode()
def autoregressive_generate(model, input_ids: torch.Tensor, max_new_tokens: int, *,
                            sampling: SamplingConfig = SamplingConfig(),
                            generator: torch.Generator | None = None, eos_token_id: int | None = None,
                            cache: str = "auto") -> Generation:  # [1, T] -> [n_new]
    """The baseline: one target forward pass per new token. cache: see `cache.cached_model`."""
    check_inputs(model, input_ids, max_new_tokens, sampling, "model")
    check_generator(generator, input_ids.device)
    t0 = start_timer(input_ids.device)
    lm = cached_model(model, cache=cache, max_len=input_ids.shape[1] + max_new_tokens, name="model")
    tokens, n_prompt = input_ids[0].long(), input_ids.shape[1]
    new, done = trim_new_tokens(tokens, n_prompt, max_new_tokens, eos_token_id)
    while not done:
        logits = lm.logits(tokens, keep=1)  # [1, V]
        if sampling.greedy:
            token = greedy_tokens(lm, logits)  # [1]
        else:
            token = sampled_token(lm, logits, sampling, generator)  # [1]
        tokens = torch.cat([tokens, token])
        new, done = trim_new_tokens(tokens, n_prompt, max_new_tokens, eos_token_id)
    lm.check_finite()
    stats = Stats(target_calls=lm.calls, seconds=seconds_since(t0, input_ids.device))
    return Generation(new, stats)


def greedy_tokens(lm: CachedModel, logits: torch.Tensor) -> torch.Tensor:  # [k, V] -> [k]
    """Each row's argmax: the one a compiled pass computed inside (vectorised, `CachedModel.pass_argmax`),
    else `sampling.argmax`."""
    best = lm.pass_argmax(logits)
    return argmax(logits) if best is None else best


def sampled_packages(lm: CachedModel):
    """The compiled draw and chain verdict for lm's logits (`CachedModel.packaged_sampling`), where this
    machine built them and the loop's rules are the ones they compute (`PACKAGED_RULES`); else None."""
    return lm.packaged_sampling() if (logits_to_probs, verify) == PACKAGED_RULES else None


def sampled_token(lm: CachedModel, logits: torch.Tensor, sampling: SamplingConfig,
                  generator: torch.Generator | None) -> torch.Tensor:  # [1, V] -> [1]
    """`sample(logits_to_probs(logits[0], sampling))`, in one compiled call where `sampled_packages` gives
    one (the same uniform from the generator, so the same token)."""
    packaged = sampled_packages(lm)
    token = None if packaged is None else packaged.draw(logits, sampling, generator)
    return sample(logits_to_probs(logits[0], sampling), generator) if token is None else token


def one_hot_rows(best: torch.Tensor, logits: torch.Tensor) -> Callable[[], torch.Tensor]:  # [k] -> [k, V]
    """The target's greedy distributions, one-hot on `best`, as a function that builds them: greedy
    verification never reads them, so `Step.target_probs` builds them only when somebody looks (a tenth of a
    millisecond for a chain's rows on a 2-core CPU, more for a tree's)."""
    return lambda: point_masses(best, logits.shape[-1], logits.dtype)


def speculative_step(target_lm: CachedModel, drafter: Drafter, tokens: torch.Tensor, gamma: int,
                     sampling: SamplingConfig, generator: torch.Generator | None, verification: str = "token",
                     ) -> tuple[torch.Tensor, Step]:  # [T] -> ([T + n_accepted + 1], Step)
    """One iteration: draft γ tokens, score them in one target pass, keep an exact prefix, roll back.
    verification: "token" (`verify`) or "block" (`verify_block`); greedy, both keep the argmax's prefix."""
    # 1. the draft proposes up to γ tokens, one at a time
    draft_tokens, draft_probs = drafter.propose(tokens, gamma, sampling, generator)  # [γ], [γ, V]
    g = draft_tokens.shape[0]  # a lookup drafter may find fewer than γ
    # 2. the target scores all γ+1 positions in one forward pass
    target_logits = target_lm.logits(torch.cat([tokens, draft_tokens]), keep=g + 1)  # [γ+1, V]
    # 3. keep an exact prefix of the draft, plus one replacement or bonus token
    # greedy: the same tokens from the argmax alone, the one-hot rows built for Step only (`verify_greedy`;
    # lab.broken.using_verify sets it to None, to judge greedy chains too); sampled, `verify`'s verdict in one
    # compiled call where this machine built one (`sampled_packages`)
    packaged = sampled_packages(target_lm) if not sampling.greedy and verification == "token" else None
    judged = None if packaged is None else packaged.judge(draft_tokens, draft_probs, target_logits, sampling,
                                                          generator)
    if sampling.greedy and verify_greedy is not None:
        best = greedy_tokens(target_lm, target_logits)  # [γ+1]
        n, next_token = verify_greedy(draft_tokens, best)
        target_probs = one_hot_rows(best, target_logits)  # [γ+1, V], built if Step's reader asks
    elif judged is not None:
        n, next_token = judged
        target_probs = lambda: logits_to_probs(target_logits, sampling)  # noqa: E731 [γ+1, V], as greedy's
    else:
        target_probs = logits_to_probs(target_logits, sampling)  # [γ+1, V]
        rule = verify_block if verification == "block" else verify
        n, next_token = rule(draft_tokens, draft_probs.to(target_probs.dtype), target_probs, generator)
    # 4. append, and roll both caches back to the tokens that survived (the newest token is not fed yet)
    cache_before = target_lm.n_cached, drafter.n_cached
    new_tokens = torch.cat([tokens, draft_tokens[:n], next_token])  # [T + n + 1]
    target_lm.rollback(new_tokens.shape[0] - 1)
    # hidden [T + n, d] if the drafter asked for it, else None
    drafter.sync(new_tokens.shape[0] - 1, target_lm.hidden)
    step = Step(context_len=tokens.shape[0], draft_tokens=draft_tokens, draft_probs=draft_probs,
                target_probs=target_probs, n_accepted=n, next_token=int(next_token),
                target_cache_before=cache_before[0], target_cache_after=target_lm.n_cached,
                draft_cache_before=cache_before[1], draft_cache_after=drafter.n_cached)
    return new_tokens, step


def tree_step(target_lm: CachedModel, drafter: TreeDrafter, tokens: torch.Tensor, shape: Tree | TreeBudget,
              sampling: SamplingConfig, generator: torch.Generator | None, max_depth: int | None = None,
              ) -> tuple[torch.Tensor, Step]:  # [T] -> ([T + len(path) + 1], Step)
    """One iteration with a tree: draft it, score every node in one target pass, keep an exact path, roll
    back."""
    T = tokens.shape[0]
    # 1. the drafter drafts a tree: node 0 is the last context token, nodes 1..|𝒯| are guesses
    tree, node_tokens, draft_probs = drafter.propose_tree(tokens, shape, sampling, generator, max_depth)
    N = tree.size  # |𝒯|, n_nodes in the shape comments
    # 2. the target scores every node in one pass: each row sees the context and its own ancestors only
    flat, start = torch.cat([tokens, node_tokens[1:]]), target_lm.n_cached  # [T + n_nodes]
    # [1, 1, q, q]: among the pass's rows (the cached context before them is seen)
    mask = tree_attention_mask(tree, T, start, T + N, target_lm.dtype, tokens.device, among_rows=True)
    positions = tree_position_ids(tree, T, start, T + N, tokens.device)  # [q]
    # [n_nodes+1, V]
    target_logits = target_lm.logits(flat, keep=N + 1, position_ids=positions, attention_mask=mask)
    # 3. walk down the tree, keeping an exact path, plus one replacement or bonus token
    if sampling.greedy:  # the same path from the argmax alone (`verify_tree_greedy`), the rows for Step only
        best = greedy_tokens(target_lm, target_logits)  # [n_nodes+1]
        path, next_token = verify_tree_greedy(tree, node_tokens, best)
        target_probs = one_hot_rows(best, target_logits)  # [n_nodes+1, V], built if Step's reader asks
    else:
        target_probs = logits_to_probs(target_logits, sampling)  # [n_nodes+1, V]
        if draft_probs is not None:
            draft_probs = draft_probs.to(target_probs.dtype)
        # a dynamic tree's sampled children were drawn without replacement, a static tree's i.i.d.
        path, next_token = verify_tree(tree, node_tokens, target_probs, draft_probs, generator,
                                       replacement=not isinstance(shape, TreeBudget))
    # 4. keep the path's keys and values (node i sits at flattened row T - 1 + i), drop the other nodes
    cache_before = target_lm.n_cached, drafter.n_cached
    target_lm.keep_rows(T, [T - 1 + i for i in path])
    new_tokens = torch.cat([tokens, node_tokens[path], next_token])  # [T + len(path) + 1]
    drafter.sync(new_tokens.shape[0] - 1, target_lm.hidden)
    step = Step(context_len=T, draft_tokens=node_tokens[1:], draft_probs=draft_probs,
                target_probs=target_probs, n_accepted=len(path), next_token=int(next_token),
                target_cache_before=cache_before[0], target_cache_after=target_lm.n_cached,
                draft_cache_before=cache_before[1], draft_cache_after=drafter.n_cached, tree=tree, path=path)
    return new_tokens, step


def as_method(drafter: Drafter, gamma: int | None, tree, sampling: SamplingConfig) -> int | Tree | TreeBudget:
    """What each iteration drafts: a chain of γ (an int), a static Tree, or a TreeBudget; with neither gamma
    nor tree, the drafter's `default_method(sampling)` (a chain of its `default_gamma` for a chain-only
    drafter)."""
    if gamma is not None and tree is not None:
        raise ValueError("give gamma (a chain) or tree (a Tree, branching factors such as (2, 2), "
                         "or a TreeBudget), not both")
    if gamma is None and tree is None:
        default = (drafter.default_method(sampling) if isinstance(drafter, TreeDrafter)
                   else drafter.default_gamma)
        gamma, tree = (default, None) if isinstance(default, int) else (None, default)
    if tree is None:
        if not isinstance(gamma, int) or isinstance(gamma, bool) or gamma < 1:
            raise ValueError(f"gamma must be an integer >= 1, got {gamma!r}")
        return gamma
    missing = missing_members(drafter, TREE_MEMBERS)
    if missing:
        raise ValueError(f"{type(drafter).__name__} cannot draft a tree (it lacks {', '.join(missing)}: see "
                         "specdec_ref.TreeDrafter); give gamma for a chain")
    return tree if isinstance(tree, TreeBudget) else as_tree(tree)


def rows_per_pass(method: int | Tree | TreeBudget) -> int:
    """The most draft tokens one target pass scores: γ, or the tree's nodes."""
    if isinstance(method, int):
        return method
    return method.n_nodes if isinstance(method, TreeBudget) else method.size


def check_speculative_inputs(target, drafter: Drafter, input_ids: torch.Tensor, max_new_tokens: int,
                             gamma: int | None, tree, sampling: SamplingConfig,
                             generator: torch.Generator | None) -> int | Tree | TreeBudget:  # [1, T]
    """Everything `speculative_generate` refuses, for every method, with a message that says what to fix;
    returns the method each iteration drafts (`as_method`)."""
    check_inputs(target, input_ids, max_new_tokens, sampling, "target")
    check_generator(generator, input_ids.device)
    if isinstance(drafter, ModelDrafter):
        check_inputs(drafter.lm.model, input_ids, max_new_tokens, sampling, "draft")
    if drafter.vocab_size != vocab_size(target):
        raise ValueError(f"draft and target vocabularies differ "
                         f"({drafter.vocab_size} vs {vocab_size(target)}); "
                         "they must share a tokenizer (slice padded heads to the tokenizer's length)")
    method = as_method(drafter, gamma, tree, sampling)
    if isinstance(method, Tree) and sampling.greedy:
        widest = max(len(method.children(i)) for i in range(method.size + 1))
        if widest > vocab_size(target):
            raise ValueError(f"greedy drafting proposes distinct tokens, so a node can have at most "
                             f"{vocab_size(target)} children (the vocabulary), got {widest}")
    return method


@torch.inference_mode()
def speculative_generate(target, draft, input_ids: torch.Tensor, max_new_tokens: int, *,
                         gamma: int | None = None, tree: Tree | Sequence[int] | TreeBudget | None = None,
                         sampling: SamplingConfig = SamplingConfig(),
                         generator: torch.Generator | None = None, eos_token_id: int | None = None,
                         on_step: Callable[[Step], None] | None = None,
                         cache: str = "auto", verification: str = "token") -> Generation:  # [1, T] -> [n_new]
    """Draft cheaply, verify in one target pass, keep an exact prefix, repeat.

    `draft` is a Hugging Face causal LM or any `Drafter`. gamma drafts a chain of γ tokens per iteration;
    tree drafts a tree instead: a `TreeBudget` (EAGLE-2's dynamic tree, from any `TreeDrafter`), or a static
    `Tree` / branching factors such as (2, 2) (sampled children, SpecInfer's rule). With neither, the
    drafter's own `default_method(sampling)` (chosen by measurement for the offline pair's head). `on_step`
    sees every iteration's `Step`. cache chooses the target's KV cache: "auto" (the target's compiled CPU pass
    where this machine has built one, `models.aot`, else dynamic), "dynamic", "static" (preallocated) or
    "compiled" (static + CUDA graphs), see `cache.cached_model`; the loop is the same for all of them.
    verification judges a chain's tokens one by one ("token", `verify`) or as a block ("block",
    `verify_block`: the same output law, at least as many tokens kept on average); trees have their own rule.
    """
    drafter = as_drafter(draft)
    method = check_speculative_inputs(target, drafter, input_ids, max_new_tokens, gamma, tree, sampling,
                                      generator)
    if verification not in ("token", "block"):
        raise ValueError(f"verification must be 'token' or 'block', got {verification!r}")
    if verification == "block" and not isinstance(method, int):
        raise ValueError("verification='block' judges a chain; a tree is judged by its own rule "
                         "(verify_tree): give gamma for a chain, or leave verification='token'")
    # passed on only when asked for, so that a replaced step (lab.broken.using_step) keeps its six arguments
    rule = {} if verification == "token" else {"verification": verification}
    drafter.sync(0)  # a drafter object may be reused across calls: start from an empty cache
    t0 = start_timer(input_ids.device)
    rows = rows_per_pass(method) + 1  # every target pass after the prefill: this many rows (compiled: padded)
    target_lm = cached_model(target, keep_hidden=drafter.wants_target_hidden, cache=cache, name="target",
                             max_len=input_ids.shape[1] + max_new_tokens + rows, query_sizes=(rows,))
    tokens, n_prompt, stats = input_ids[0].long(), input_ids.shape[1], Stats(tree=not isinstance(method, int))
    new, done = trim_new_tokens(tokens, n_prompt, max_new_tokens, eos_token_id)
    while not done:
        room = max_new_tokens - new.shape[0] - 1  # never draft past max_new_tokens
        if isinstance(method, int):
            tokens, step = speculative_step(target_lm, drafter, tokens, min(method, room), sampling,
                                            generator, **rule)
        else:
            tokens, step = tree_step(target_lm, drafter, tokens, method, sampling, generator, max_depth=room)
        stats.accepted.append(step.n_accepted)
        stats.drafted.append(step.n_drafted)
        if on_step is not None:
            on_step(step)
        new, done = trim_new_tokens(tokens, n_prompt, max_new_tokens, eos_token_id)
    target_lm.check_finite()
    stats.seconds = seconds_since(t0, input_ids.device)
    stats.target_calls, stats.draft_calls = target_lm.calls, drafter.calls
    return Generation(new, stats)
