"""Plain autoregressive decoding and speculative decoding, with the same sampling and cache code."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from .cache import CachedModel, cached_model, vocab_size
from .device import seconds_since, start_timer
from .drafters import Drafter, ModelDrafter, TreeDrafter
from .sampling import SamplingConfig, logits_to_probs, sample
from .verify import verify


@dataclass
class Stats:
    accepted: list[int] = field(default_factory=list)  # draft tokens accepted, one entry per iteration
    drafted: list[int] = field(default_factory=list)  # draft tokens proposed, one entry per iteration
    target_calls: int = 0  # target forward passes (prefill included)
    draft_calls: int = 0  # draft forward passes (or lookups, for a drafter that is not a model)
    seconds: float = 0.0  # wall time of the whole generation, device synchronised
    tree: bool = False  # True for a tree loop: accepted counts path nodes, drafted counts tree nodes

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
    """Everything one draft/verify iteration saw and did (passed to `on_step`, for chapters and debugging)."""
    context_len: int  # tokens in the sequence before this iteration
    draft_tokens: torch.Tensor  # [γ] proposed tokens
    draft_probs: torch.Tensor  # [γ, V] distributions they were sampled from
    target_probs: torch.Tensor  # [γ+1, V] the target's distributions at the same positions
    n_accepted: int  # length of the accepted prefix
    next_token: int  # the replacement (if n_accepted < γ) or bonus token (if n_accepted == γ)
    target_cache_before: int  # tokens in the target's KV cache after scoring, before rollback
    target_cache_after: int  # ... after rollback
    draft_cache_before: int  # tokens in the draft's KV cache after drafting (0 for a drafter without one)
    draft_cache_after: int


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
        raise ValueError(f"input_ids must be a [1, T] LongTensor, got {getattr(input_ids, 'shape', type(input_ids))}")
    if input_ids.shape[0] != 1:
        raise ValueError(f"input_ids must hold exactly one sequence (batch size 1), got batch size {input_ids.shape[0]}")
    if input_ids.shape[1] == 0:
        raise ValueError("the prompt is empty: input_ids must contain at least one token")
    if input_ids.dtype not in (torch.long, torch.int32, torch.int64):
        raise ValueError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
    V = vocab_size(model)
    lo, hi = int(input_ids.min()), int(input_ids.max())
    if lo < 0 or hi >= V:
        raise ValueError(f"token ids must lie in [0, {V}) for the {name}'s vocabulary, got ids in [{lo}, {hi}]")
    n_ctx = context_length(model)
    if n_ctx is not None and input_ids.shape[1] + max_new_tokens > n_ctx:
        raise ValueError(f"prompt ({input_ids.shape[1]} tokens) + max_new_tokens ({max_new_tokens}) exceeds "
                         f"the {name}'s context of {n_ctx} tokens; shorten the prompt or ask for fewer tokens")


def check_generator(generator: torch.Generator | None, device: torch.device) -> None:
    """torch samples with a generator only on the generator's own device: say so up front, not deep inside torch."""
    if generator is not None and torch.device(generator.device).type != torch.device(device).type:
        raise ValueError(f"the generator is on {generator.device} but the models' inputs are on {device}; "
                         f"create it there: torch.Generator(device={str(device)!r}).manual_seed(seed)")


def trim_new_tokens(tokens: torch.Tensor, n_prompt: int, max_new_tokens: int, eos_token_id) -> tuple[torch.Tensor, bool]:
    """Cut the new tokens at max_new_tokens and right after the first EOS; say whether to stop."""
    new = tokens[n_prompt:n_prompt + max_new_tokens]
    if eos_token_id is not None:
        hits = (new == eos_token_id).nonzero()
        if hits.numel():
            return new[: int(hits[0]) + 1], True
    return new, new.shape[0] >= max_new_tokens


@torch.inference_mode()
def autoregressive_generate(model, input_ids: torch.Tensor, max_new_tokens: int, *,
                            sampling: SamplingConfig = SamplingConfig(), generator: torch.Generator | None = None,
                            eos_token_id: int | None = None, cache: str = "dynamic") -> Generation:  # [1, T] -> [n_new]
    """The baseline: one target forward pass per new token. cache: see `cache.cached_model`."""
    check_inputs(model, input_ids, max_new_tokens, sampling, "model")
    check_generator(generator, input_ids.device)
    t0 = start_timer(input_ids.device)
    lm = cached_model(model, cache=cache, max_len=input_ids.shape[1] + max_new_tokens)
    tokens, n_prompt = input_ids[0].long(), input_ids.shape[1]
    new, done = trim_new_tokens(tokens, n_prompt, max_new_tokens, eos_token_id)
    while not done:
        probs = logits_to_probs(lm.logits(tokens, keep=1)[0], sampling)  # [V]
        tokens = torch.cat([tokens, sample(probs, generator)])
        new, done = trim_new_tokens(tokens, n_prompt, max_new_tokens, eos_token_id)
    stats = Stats(target_calls=lm.calls, seconds=seconds_since(t0, input_ids.device))
    return Generation(new, stats)


def as_drafter(draft) -> Drafter:
    """A Hugging Face model becomes a ModelDrafter; anything that implements `Drafter` is used as it is."""
    return draft if isinstance(draft, Drafter) else ModelDrafter(draft)


def speculative_step(target_lm: CachedModel, drafter: Drafter, tokens: torch.Tensor, gamma: int,
                     sampling: SamplingConfig, generator: torch.Generator | None,
                     ) -> tuple[torch.Tensor, Step]:  # [T] -> ([T + n_accepted + 1], Step)
    """One iteration: draft γ tokens, score them in one target pass, keep an exact prefix, roll back."""
    # 1. the draft proposes up to γ tokens, one at a time
    draft_tokens, draft_probs = drafter.propose(tokens, gamma, sampling, generator)  # [γ], [γ, V]
    g = draft_tokens.shape[0]  # a lookup drafter may find fewer than γ
    # 2. the target scores all γ+1 positions in one forward pass
    target_logits = target_lm.logits(torch.cat([tokens, draft_tokens]), keep=g + 1)  # [γ+1, V]
    target_probs = logits_to_probs(target_logits, sampling)  # [γ+1, V]
    # 3. keep an exact prefix of the draft, plus one replacement or bonus token
    n, next_token = verify(draft_tokens, draft_probs.to(target_probs.dtype), target_probs, generator)
    # 4. append, and roll both caches back to the tokens that survived (the newest token is not fed yet)
    cache_before = target_lm.n_cached, drafter.n_cached
    new_tokens = torch.cat([tokens, draft_tokens[:n], next_token])  # [T + n + 1]
    target_lm.rollback(new_tokens.shape[0] - 1)
    drafter.sync(new_tokens.shape[0] - 1, target_lm.hidden)  # hidden [T + n, d] if the drafter asked for it, else None
    step = Step(context_len=tokens.shape[0], draft_tokens=draft_tokens, draft_probs=draft_probs,
                target_probs=target_probs, n_accepted=n, next_token=int(next_token),
                target_cache_before=cache_before[0], target_cache_after=target_lm.n_cached,
                draft_cache_before=cache_before[1], draft_cache_after=drafter.n_cached)
    return new_tokens, step


def check_speculative_inputs(target, drafter: Drafter, input_ids: torch.Tensor, max_new_tokens: int, gamma: int,
                             sampling: SamplingConfig, generator: torch.Generator | None) -> None:  # [1, T]
    """Everything `speculative_generate` refuses, with a message that says what to fix."""
    check_inputs(target, input_ids, max_new_tokens, sampling, "target")
    check_generator(generator, input_ids.device)
    if not isinstance(gamma, int) or isinstance(gamma, bool) or gamma < 1:
        raise ValueError(f"gamma must be an integer >= 1, got {gamma!r}")
    if isinstance(drafter, ModelDrafter):
        check_inputs(drafter.lm.model, input_ids, max_new_tokens, sampling, "draft")
    if drafter.vocab_size != vocab_size(target):
        raise ValueError(f"draft and target vocabularies differ ({drafter.vocab_size} vs {vocab_size(target)}); "
                         "they must share a tokenizer (slice padded heads to the tokenizer's length)")


@torch.inference_mode()
def speculative_generate(target, draft, input_ids: torch.Tensor, max_new_tokens: int, *, gamma: int | None = None,
                         tree=None, sampling: SamplingConfig = SamplingConfig(), generator: torch.Generator | None = None,
                         eos_token_id: int | None = None, on_step: Callable[[Step], None] | None = None,
                         cache: str = "dynamic") -> Generation:  # [1, T] -> [n_new]
    """Draft cheaply, verify in one target pass, keep an exact prefix, repeat.

    `draft` is a Hugging Face causal LM or any `Drafter`. gamma drafts a chain of γ tokens per iteration;
    tree=TreeBudget(...) grows an EAGLE-2 dynamic tree instead (`tree.tree_speculative_generate`). With
    neither, the drafter's own default is used: its `default_tree` if it has one, else a chain of
    `default_gamma`. `on_step` sees every iteration's `Step` (a `TreeStep` for trees). cache chooses the
    target's KV cache: "dynamic", "static" (preallocated) or "compiled" (static + CUDA graphs), see
    `cache.cached_model`; the loop is the same for all three.
    """
    drafter = as_drafter(draft)
    if tree is None and gamma is None and isinstance(drafter, TreeDrafter):
        tree = drafter.default_tree
    if tree is not None:
        if gamma is not None:
            raise ValueError("give gamma (a chain) or tree (a dynamic tree), not both")
        from .tree import dynamic_tree_generate  # tree.py builds on this module
        return dynamic_tree_generate(target, drafter, input_ids, max_new_tokens, budget=tree, sampling=sampling,
                                     generator=generator, eos_token_id=eos_token_id, on_step=on_step, cache=cache)
    gamma = drafter.default_gamma if gamma is None else gamma
    check_speculative_inputs(target, drafter, input_ids, max_new_tokens, gamma, sampling, generator)
    drafter.sync(0)  # a drafter object may be reused across calls: start from an empty cache
    t0 = start_timer(input_ids.device)
    target_lm = cached_model(target, keep_hidden=drafter.wants_target_hidden, cache=cache,
                             max_len=input_ids.shape[1] + max_new_tokens + gamma + 1)
    tokens, n_prompt, stats = input_ids[0].long(), input_ids.shape[1], Stats()
    new, done = trim_new_tokens(tokens, n_prompt, max_new_tokens, eos_token_id)
    while not done:
        g = min(gamma, max_new_tokens - new.shape[0] - 1)  # never draft past max_new_tokens
        tokens, step = speculative_step(target_lm, drafter, tokens, g, sampling, generator)
        stats.accepted.append(step.n_accepted)
        stats.drafted.append(step.draft_tokens.shape[0])
        if on_step is not None:
            on_step(step)
        new, done = trim_new_tokens(tokens, n_prompt, max_new_tokens, eos_token_id)
    stats.seconds = seconds_since(t0, input_ids.device)
    stats.target_calls, stats.draft_calls = target_lm.calls, drafter.calls
    return Generation(new, stats)
