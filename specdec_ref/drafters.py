"""Things that propose draft tokens: the `Drafter` contract the loop uses, and every drafter the book builds.

The loop uses exactly what the `Drafter` protocol below declares, and every drafter here implements all of it:

  propose(context_ids [T], gamma, sampling, generator) -> (draft_tokens [≤γ], draft_probs [≤γ, V])
  sync(n_kept, target_hidden=None)   # the first n_kept context tokens are settled: forget the rest
  vocab_size, default_gamma, wants_target_hidden, calls, n_cached

A `TreeDrafter` adds `propose_tree(context_ids, shape, sampling, generator, max_depth)` (a static `tree.Tree`
of sampled children, or an EAGLE-2 dynamic tree grown to a `tree.TreeBudget`) and `default_method(sampling)`,
what speculative_generate runs when given neither gamma nor tree. The drafter writes only its own draft pass
over some nodes (`expand`); which nodes and children to keep is `tree.draft_tree`.

The drafters: `ModelDrafter` (a small causal LM with its own KV cache), `NgramDrafter` (prompt lookup: copy
what followed the last occurrence of the current n-gram, one-hot draft_probs), `FeatureDrafter` (EAGLE's head
on the target's hidden states), `FallbackDrafter` (the first of several that proposes anything) and
`ScheduledDrafter` (Hugging Face's +2/-1 draft-length schedule around any drafter).

Adaptive draft length (chapter 4) lives here too, outside the loop: a drafter may propose fewer than
γ tokens. `ModelDrafter(model, confidence_stop=0.4)` stops when it is unsure, and `ScheduledDrafter`
adapts γ from past verdicts. The loop and its exactness are unchanged: whether a position is drafted may
depend on anything fixed before its guess is drawn (the draft's numbers so far, earlier iterations' verdicts),
never on the guess itself or on this verification's draws: a stopping time of the guesses (chapter 4).
"""
from __future__ import annotations

from functools import partial
from typing import Protocol, runtime_checkable

import torch
from transformers import DynamicCache

from .cache import cached_model, vocab_size
from .sampling import SamplingConfig, draw, point_masses, spread
from .tree import GrowingTree, Tree, TreeBudget, draft_tree, tree_depth, tree_node_positions, tree_rows_mask


@runtime_checkable
class Drafter(Protocol):
    """Everything `speculative_step` and `speculative_generate` use of a drafter; nothing else is looked
    up."""
    vocab_size: int  # logits per position: must equal the target's
    default_gamma: int  # draft length speculative_generate uses when gamma=None
    wants_target_hidden: bool | tuple[int, ...]  # True: the loop hands sync the target's final hidden states;
    # a tuple of layer indices: those layers' states side by side (cache.layer_features); False: nothing
    calls: int  # draft forward passes (or lookups) so far
    n_cached: int  # context tokens the drafter's own cache holds (0 for one without a cache)

    def propose(self, context_ids: torch.Tensor, gamma: int, sampling: SamplingConfig,
                generator: torch.Generator | None,
                ) -> tuple[torch.Tensor, torch.Tensor]:  # [T] -> ([≤γ], [≤γ, V])
        """Up to γ draft tokens after context_ids, and the distributions they were drawn from."""
        ...

    def sync(self, n_kept: int,
             target_hidden: torch.Tensor | None = None) -> None:  # target_hidden [n_kept, d]
        """The context's first n_kept tokens are settled (0: a new generation): forget anything after them.

        target_hidden, for a drafter that wants it, is the target's final hidden state of each kept token.
        """
        ...


@runtime_checkable
class TreeDrafter(Drafter, Protocol):
    """A drafter that can also draft a tree of guesses for one target pass (`generate.tree_step`)."""

    def default_method(self, sampling: SamplingConfig) -> int | Tree | TreeBudget:
        """What speculative_generate runs with neither gamma nor tree: a chain of γ (an int) or a tree
        shape."""
        ...

    # [T] -> (Tree, [n_nodes+1], [n_nodes+1, V])
    def propose_tree(self, context_ids: torch.Tensor, shape: Tree | TreeBudget, sampling: SamplingConfig,
                     generator: torch.Generator | None = None, max_depth: int | None = None,
                     ) -> tuple[Tree, torch.Tensor, torch.Tensor | None]:
        """A tree of guesses after context_ids (node 0 is context_ids[-1]), at most max_depth deep.

        Returns the tree, its node tokens and the rows its children were drawn from (for a static `Tree`,
        i.i.d.; for a `TreeBudget`, without replacement, in the order drawn), or None when they were chosen
        deterministically (top-k, or a lookup): `tree.verify_tree` then judges them as point masses.
        """
        ...


DRAFTER_MEMBERS = ("propose", "sync", "vocab_size", "default_gamma", "wants_target_hidden", "calls",
                   "n_cached")
TREE_MEMBERS = ("propose_tree", "default_method")


def missing_members(drafter, members: tuple[str, ...] = DRAFTER_MEMBERS) -> list[str]:
    return [m for m in members if not hasattr(drafter, m)]


def as_drafter(draft) -> Drafter:
    """A Hugging Face model becomes a ModelDrafter; anything else must implement the whole `Drafter`
    contract."""
    if isinstance(draft, torch.nn.Module):
        return ModelDrafter(draft)
    missing = missing_members(draft)
    if missing:
        raise ValueError(f"{type(draft).__name__} lacks {', '.join(missing)}: "
                         "see specdec_ref.Drafter for the members the loop uses "
                         "(or pass a Hugging Face causal LM as the draft)")
    return draft


def root_only(context_ids: torch.Tensor,
              ) -> tuple[Tree, torch.Tensor, None]:  # [T] -> (no drafted node, [1], None)
    return Tree((-1,)), context_ids[-1:], None


def check_confidence_stop(confidence_stop: float | None) -> None:
    if confidence_stop is not None and not 0 <= confidence_stop <= 1:
        raise ValueError(f"confidence_stop must be a probability in [0, 1] (or None), got {confidence_stop}")


def empty_proposal(context_ids: torch.Tensor,
                   vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:  # -> ([0], [0, V])
    return context_ids[:0], torch.zeros(0, vocab_size, device=context_ids.device)


class ModelDrafter:
    """A small causal LM that drafts γ tokens one at a time, the ordinary (slow, but cheap) way.

    confidence_stop: stop early, after proposing a token at a position where the draft's top
    probability (softmax of its raw logits, whatever the sampling) is below this (Hugging Face's
    `assistant_confidence_threshold` rule); None drafts all γ.
    """

    def __init__(self, model, *, confidence_stop: float | None = None, cache: str = "dynamic",
                 max_len: int | None = None, compile_options: dict | None = None):
        check_confidence_stop(confidence_stop)  # cache, max_len, compile_options: see cache.cached_model
        self.lm = cached_model(model, cache=cache, max_len=max_len, compile_options=compile_options,
                               name="draft")
        self.vocab_size = vocab_size(model)
        self.confidence_stop = confidence_stop
        self.default_gamma, self.default_tree = 4, None  # a chain of 4 unless asked for a tree
        self.wants_target_hidden = False

    @property
    def calls(self) -> int:
        return self.lm.calls

    @property
    def n_cached(self) -> int:
        return self.lm.n_cached

    def default_method(self, sampling: SamplingConfig) -> int | Tree | TreeBudget:
        return self.default_tree if self.default_tree is not None else self.default_gamma

    def propose(self, context_ids, gamma, sampling, generator=None):  # [T] -> ([≤γ], [≤γ, V])
        if gamma == 0:
            return empty_proposal(context_ids, self.vocab_size)
        T = context_ids.shape[0]
        seq = torch.cat([context_ids, context_ids.new_zeros(gamma)])  # [T + γ], filled in as we draft
        probs = []
        for i in range(gamma):
            # [V]: the cache has seq[:T+i-1], so one new token
            logits = self.lm.logits(seq[:T + i], keep=1)[0]
            token, p = draw(logits, sampling, generator)  # [1], [V]: logits_to_probs, as for the target
            seq[T + i] = token[0]
            probs.append(p)
            if self.confidence_stop is not None and logits.softmax(-1).max() < self.confidence_stop:
                break  # the draft's own (T=1) confidence is low here, even when greedy: stop drafting
        return seq[T:T + len(probs)], torch.stack(probs)  # [≤γ], [≤γ, V]

    def propose_tree(self, context_ids, shape, sampling, generator=None,
                     max_depth=None):  # [T] -> (Tree, [n_nodes+1], q)
        """A tree from this LM, one draft pass per depth over the nodes being expanded
        (`tree.draft_tree`)."""
        T = context_ids.shape[0]
        if tree_depth(shape, max_depth) == 0:
            return root_only(context_ids)
        root_logits = self.lm.logits(context_ids, keep=1)[0]  # [V]; the cache now holds the whole context
        fed, dtype = [], next(self.lm.model.parameters()).dtype

        def expand(g: GrowingTree, nodes: list[int]) -> torch.Tensor:  # -> [len(nodes), V]
            flat = torch.cat([context_ids, context_ids.new_tensor([g.tokens[v] for v in fed + nodes])])
            mask = tree_rows_mask(g, fed, nodes, T, dtype, context_ids.device)
            fed.extend(nodes)
            return self.lm.logits(flat, position_ids=tree_node_positions(g, nodes, T, context_ids.device),
                                  attention_mask=mask)

        tree, tokens, draft_probs = draft_tree(shape, int(context_ids[-1]), root_logits, expand, sampling,
                                               generator, max_depth)
        self.lm.rollback(T)  # forget the guesses; the accepted ones are fed as context next time
        return tree, context_ids.new_tensor(tokens), draft_probs

    def sync(self, n_kept: int, target_hidden: torch.Tensor | None = None) -> None:
        self.lm.rollback(n_kept)


class NgramDrafter:
    """Prompt lookup: find the latest earlier occurrence of the last n tokens and propose what followed.

    Its draft "distribution" is one-hot on the proposed token, so the target accepts a token with probability
    p_target(x) and otherwise resamples from p_target minus that token: still exact. With nothing to copy, it
    proposes nothing and the step reduces to one plain target step.
    """

    def __init__(self, vocab_size: int, max_ngram: int = 3, min_ngram: int = 1):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.vocab_size, self.max_ngram, self.min_ngram = vocab_size, max_ngram, min_ngram
        self.calls, self.n_cached = 0, 0
        self.default_gamma, self.default_tree = 4, None  # a lookup has one guess per position: a chain
        self.wants_target_hidden = False

    def default_method(self, sampling: SamplingConfig) -> int:
        return self.default_gamma

    def lookup(self, context_ids: torch.Tensor, gamma: int) -> torch.Tensor:  # [T] -> [≤γ]
        ids = context_ids.tolist()
        for n in range(min(self.max_ngram, len(ids) - 1), self.min_ngram - 1, -1):
            tail, best = ids[-n:], context_ids[:0]
            for start in range(len(ids) - n - 1, -1, -1):  # latest match first, excluding the tail itself
                if ids[start:start + n] == tail:
                    follow = context_ids[start + n:start + n + gamma]
                    if follow.shape[0] == gamma:  # the latest match with a full continuation wins
                        return follow
                    best = follow if follow.shape[0] > best.shape[0] else best
            if best.shape[0]:
                return best
        return context_ids[:0]

    def propose(self, context_ids, gamma, sampling, generator=None):  # [T] -> ([≤γ], [≤γ, V])
        self.calls += 1
        tokens = self.lookup(context_ids, gamma)
        probs = torch.zeros(tokens.shape[0], self.vocab_size, device=context_ids.device)
        return tokens, probs.scatter_(1, tokens[:, None], 1.0)  # one-hot rows

    def propose_tree(self, context_ids, shape, sampling, generator=None,
                     max_depth=None):  # [T] -> (Tree, [n+1], None)
        """A lookup has one guess per position: a chain as deep as the shape allows, judged as point
        masses."""
        self.calls += 1
        tokens = self.lookup(context_ids, tree_depth(shape, max_depth))
        return Tree.chain(tokens.shape[0]), torch.cat([context_ids[-1:], tokens]), None

    def sync(self, n_kept: int, target_hidden: torch.Tensor | None = None) -> None:
        pass  # stateless: it rereads the context every time


class ScheduledDrafter:
    """Any drafter, with Hugging Face's "heuristic" schedule for the number of draft tokens.

    Start at `start` tokens; after an iteration that accepted every proposed token, propose
    `grow` more next time, otherwise `shrink` fewer (never fewer than 1); an iteration where the drafter
    proposed nothing leaves it as it is. The loop's γ caps it. It learns how many were accepted from `sync`,
    which the loop calls with the surviving length. Every other member forwards to the wrapped drafter.
    """

    def __init__(self, drafter: Drafter, *, start: int = 4, grow: int = 2, shrink: int = 1):
        if start < 1 or grow < 0 or shrink < 0:
            raise ValueError(f"need start >= 1, grow >= 0, shrink >= 0, got {start}, {grow}, {shrink}")
        self.drafter, self.start, self.grow, self.shrink = drafter, start, grow, shrink
        self.num_tokens = start  # draft tokens to propose next iteration
        self.history: list[int] = []  # num_tokens used by each iteration, for plots
        self._proposed = (0, 0)  # (context length, tokens proposed) of the last proposal

    def __getattr__(self, name):  # the rest of the contract is the wrapped drafter's
        if name in ("vocab_size", "default_gamma", "wants_target_hidden", "calls", "n_cached") \
                and "drafter" in self.__dict__:
            return getattr(self.__dict__["drafter"], name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def default_tree(self) -> None:
        return None  # the schedule adapts a chain's length

    def default_method(self, sampling: SamplingConfig) -> int:
        return self.default_gamma  # the schedule adapts a chain's length: with gamma=None, a chain

    def propose(self, context_ids, gamma, sampling, generator=None):  # [T] -> ([≤γ], [≤γ, V])
        n = min(self.num_tokens, gamma)
        self.history.append(n)
        tokens, probs = self.drafter.propose(context_ids, n, sampling, generator)
        self._proposed = (context_ids.shape[0], tokens.shape[0])
        return tokens, probs

    def propose_tree(self, context_ids, shape, sampling, generator=None,
                     max_depth=None):  # [T] -> (Tree, [n+1], q)
        # the schedule: chains
        return self.drafter.propose_tree(context_ids, shape, sampling, generator, max_depth)

    def sync(self, n_kept: int, target_hidden: torch.Tensor | None = None) -> None:
        context_len, proposed = self._proposed
        if n_kept == 0:  # a new generation: start the schedule afresh
            self.num_tokens, self.history = self.start, []
        elif proposed > 0:  # nothing proposed is no evidence either way
            all_accepted = n_kept - context_len == proposed  # the loop keeps context + accepted
            self.num_tokens = (self.num_tokens + self.grow if all_accepted
                               else max(1, self.num_tokens - self.shrink))
        self._proposed = (0, 0)
        self.drafter.sync(n_kept, target_hidden)


class FeatureDrafter:
    """EAGLE-style drafting from the target's own hidden states (a `models.feature_draft.FeatureHead`).

    The loop hands it, after every verification, the target's final hidden states of all kept tokens
    (`sync(n_kept, target_hidden)`). Position j of its small cache pairs the target's feature h_j with token
    x_{j+1}; only pairs built from real target features stay cached, the guesses made while drafting are
    cropped at once (EAGLE's "stable" cache). Before the target has run at all there are no features, so
    the first iteration proposes nothing: it is the target's prefill.
    """
    def __init__(self, head, default_gamma: int = 3, *, default_tree=None, defaults: dict | None = None,
                 confidence_stop: float | None = None, sharpness: float = 1.0):
        check_confidence_stop(confidence_stop)
        if not (isinstance(sharpness, (int, float)) and 0 < sharpness < float("inf")):
            raise ValueError(f"sharpness multiplies the head's logits before sampling: a positive finite "
                             f"number (1: the head's own q; see quality.json), got {sharpness!r}")
        self.head, self.default_gamma, self.confidence_stop = head, default_gamma, confidence_stop
        # q ∝ exp(sharpness · logits / T) when sampling, fitted so the head's q is as sharp as the target's p
        self.sharpness = float(sharpness)  # (scripts/draft_sharpness.py); greedy drafting ignores it
        self.default_tree = default_tree  # a TreeBudget: what speculative_generate runs when gamma is None
        # {"greedy": method, "sampled": method, "choice": what they were chosen from} (models.choice)
        self.defaults = defaults
        self.vocab_size = head.vocab_size
        # the target's final features, or the layers the head fuses
        self.wants_target_hidden = getattr(head, "fuse_layers", ()) or True
        self.cache, self.n_fed, self.features, self.calls = None, 0, None, 0

    @property
    def n_cached(self) -> int:
        return self.n_fed

    def default_method(self, sampling: SamplingConfig) -> int | Tree | TreeBudget:
        if self.defaults is not None:
            return self.defaults["greedy" if sampling.greedy else "sampled"]
        return self.default_tree if self.default_tree is not None else self.default_gamma

    def propose(self, context_ids, gamma, sampling, generator=None):  # [T] -> ([≤γ], [≤γ, V])
        if self.features is None or gamma == 0:
            return empty_proposal(context_ids, self.vocab_size)
        h, x = self.pending(context_ids)  # the pairs not fed yet
        chains = getattr(self.head, "chains", None) if self.confidence_stop is None else None
        chain = chains and chains.draft(h, x, self.cache, gamma, sampling, generator, self.sharpness)
        if chain:  # a compiled head fed them and drafted the whole chain in one call (models.aot_chain)
            self.calls += gamma - 1
            return chain
        f = self.head(h[None], x[None], self.cache)[0, -1:]  # [1, d] a guess of the newest token's feature
        tokens, probs = [], []
        greedy = sampling.greedy and self.confidence_stop is None
        while True:
            if greedy:  # the argmax (a compiled head's package brings it); the one-hot rows come at the end
                token = self.head.greedy_tokens(f)  # [1]
                unsure = False
            else:  # drawn over the head's own K tokens (ids ascending), as over all V (`draw_among`)
                rows, ids = self.head.reduced_logits(f)  # [1, K], [K]; every other token's logit is -inf
                k, p = draw(self.sharpness * rows[0], sampling, generator)  # [1], [K]
                token = ids[k]
                probs.append(p)  # spread to [V] at the end
                unsure = self.confidence_stop is not None and rows[0].softmax(-1).max() < self.confidence_stop
            tokens.append(token)
            if len(tokens) == gamma or unsure:
                break
            f = self.head(f[None], tokens[-1][None], self.cache)[0]  # feed the guess back in: [1, d]
        if len(tokens) > 1:
            self.cache.crop(-(len(tokens) - 1))  # drop the guessed positions: only real target features stay
        self.calls += len(tokens) - 1
        tokens = torch.cat(tokens)  # [≤γ]
        return tokens, (point_masses(tokens, self.vocab_size, self.head.fc.weight.dtype) if greedy
                        else spread(torch.stack(probs), ids, self.vocab_size))  # [≤γ, K] -> [≤γ, V]

    def feed_context(self, context_ids: torch.Tensor) -> torch.Tensor:  # [T] -> [d]
        """Cache the pairs (h_j, x_{j+1}) not fed yet, j < T - 1; return the last one's output: a guess of
        h_{T-1}."""
        h, x = self.pending(context_ids)
        return self.head(h[None], x[None], self.cache)[0, -1]  # [1, m, d] -> [d]

    def pending(self, context_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # [T] -> [m, d], [m]
        """The pairs (h_j, x_{j+1}) not fed yet, counted as fed by the one head pass the caller makes."""
        T = context_ids.shape[0]
        if self.cache is None:  # a compiled head (models.aot_head.CompiledHead) brings KV buffers of its own
            self.cache = self.head.new_cache() if hasattr(self.head, "new_cache") else DynamicCache()
        h, x = self.features[self.n_fed:T - 1], context_ids[self.n_fed + 1:T]  # [m, d], [m]
        if x.shape[0] == 0 or h.shape[0] != x.shape[0]:  # a compiled head would die of 0 rows (SIGFPE)
            raise ValueError(f"the head has fed {self.n_fed} of this context's {T - 1} pairs and has "
                             f"{self.features.shape[0]} target features: nothing new to feed, or too few "
                             "features; after each proposal call sync(n_kept, target_hidden) with the "
                             "target's features of the kept tokens, then propose on a longer context")
        self.n_fed = T - 1
        self.calls += 1
        return h, x

    def propose_tree(self, context_ids, shape, sampling, generator=None,
                     max_depth=None):  # [T] -> (Tree, [n+1], q)
        """A tree from the head, a pass per depth, its guessed features fed back (`tree.draft_tree`)."""
        if self.features is None or tree_depth(shape, max_depth) == 0:  # no target features yet: the prefill
            return root_only(context_ids)
        trees, q = getattr(self.head, "trees", None), context_ids.shape[0] - 1 - self.n_fed  # q: not fed yet
        if trees and trees.serves(shape, tree_depth(shape, max_depth), sampling, q):  # in one call (aot_tree)
            tree, tokens = trees.grow(*self.pending(context_ids), self.cache, int(context_ids[-1]), shape)
            self.calls += shape.depth - 1
            return tree, context_ids.new_tensor(tokens), None
        feature = {0: self.feed_context(context_ids)}  # node -> the head's output there ([d], a guess of h)
        fed, dtype = [], self.head.fc.weight.dtype
        # growth ranks children: the head's own K tokens will do, and greedy growth reads each node's best
        # only (`sampling.Ranked`: a compiled head brings them); a static tree needs [k, V] rows
        scores = (partial(self.head.ranked, w=shape.topk) if isinstance(shape, TreeBudget) and sampling.greedy
                  else self.head.reduced_logits if isinstance(shape, TreeBudget) else self.head.logits)
        if not sampling.greedy and self.sharpness != 1.0:
            scores = sharpened(scores, self.sharpness)

        def expand(g: GrowingTree, nodes: list[int]) -> torch.Tensor:  # -> [len(nodes), V]
            h = torch.stack([feature[g.parents[v]] for v in nodes])[None]  # [1, k, d] the parents' features
            x = context_ids.new_tensor([g.tokens[v] for v in nodes])[None]  # [1, k]
            mask = tree_rows_mask(g, fed, nodes, self.n_fed, dtype, context_ids.device)
            positions = tree_node_positions(g, nodes, self.n_fed, context_ids.device)[None]  # [1, k]
            f = self.head(h, x, self.cache, position_ids=positions, attention_mask=mask)[0]  # [k, d]
            feature.update(zip(nodes, f))
            fed.extend(nodes)
            self.calls += 1
            return scores(f)  # [k, V], or ([k, K], [K]), or Ranked [k, topk] (greedy growth)

        tree, tokens, draft_probs = draft_tree(shape, int(context_ids[-1]), scores(feature[0]), expand,
                                               sampling, generator, max_depth, self.vocab_size)
        if fed:
            self.cache.crop(-len(fed))  # only pairs built from real target features stay cached
        return tree, context_ids.new_tensor(tokens), draft_probs

    def sync(self, n_kept: int, target_hidden: torch.Tensor | None = None) -> None:  # [n_kept, d]
        if n_kept == 0:
            self.cache, self.n_fed, self.features = None, 0, None
            return
        # the cache pairs (h_j, x_{j+1}) for j < n_fed: drop those past the kept tokens
        if n_kept - 1 < self.n_fed:
            self.cache.crop(-(self.n_fed - (n_kept - 1)))
            self.n_fed = n_kept - 1
        self.features = target_hidden


def sharpened(scores, sharpness: float):
    """A head's scores (logits [k, V], or reduced ([k, K], ids)) times `sharpness`."""
    def scaled(f: torch.Tensor):
        out = scores(f)
        return (sharpness * out[0], out[1]) if isinstance(out, tuple) else sharpness * out
    return scaled


class FallbackDrafter:
    """Several drafters in order of preference: the first that proposes anything drafts this iteration.

    `FallbackDrafter(NgramDrafter(V), ModelDrafter(draft))` copies from the context when it can (free) and
    asks the model draft only when lookup finds nothing. Which drafter speaks depends on the context alone,
    never on the target's random draws, so verification stays exact. Every drafter is rolled back each
    iteration, so a model draft that sat idle catches up on the tokens it missed the next time it is asked.
    """

    def __init__(self, *drafters: Drafter, default_tree=None):
        if not drafters:
            raise ValueError("FallbackDrafter needs at least one drafter, "
                             "e.g. FallbackDrafter(NgramDrafter(V), model)")
        self.drafters = [as_drafter(d) for d in drafters]  # a bare HF model works
        sizes = {d.vocab_size for d in self.drafters}
        if len(sizes) > 1:
            raise ValueError(f"the drafters' vocabularies differ ({sorted(sizes)}); "
                             "they must share the target's")
        self.vocab_size = self.drafters[0].vocab_size
        self.default_gamma = self.drafters[0].default_gamma
        self.default_tree = default_tree  # a TreeBudget, or None: a chain of default_gamma
        # True, or layer indices
        wanted = {d.wants_target_hidden for d in self.drafters if d.wants_target_hidden}
        if len(wanted) > 1:
            raise ValueError(f"the feature drafters read different target layers ({wanted}); use one kind")
        self.wants_target_hidden = wanted.pop() if wanted else False
        self.used: list[int] = []  # index of the drafter that proposed, per iteration, over all runs

    def default_method(self, sampling: SamplingConfig) -> int | Tree | TreeBudget:
        return self.default_tree if self.default_tree is not None else self.default_gamma

    @property
    def calls(self) -> int:
        return sum(d.calls for d in self.drafters)

    @property
    def n_cached(self) -> int:
        return max(d.n_cached for d in self.drafters)

    def propose(self, context_ids, gamma, sampling, generator=None):  # [T] -> ([≤γ], [≤γ, V])
        for i, drafter in enumerate(self.drafters):
            tokens, probs = drafter.propose(context_ids, gamma, sampling, generator)
            if tokens.shape[0] or i == len(self.drafters) - 1:
                self.used.append(i)
                return tokens, probs

    def propose_tree(self, context_ids, shape, sampling, generator=None,
                     max_depth=None):  # [T] -> (Tree, [n+1], q)
        for i, drafter in enumerate(self.drafters):
            tree, tokens, draft_probs = drafter.propose_tree(context_ids, shape, sampling, generator,
                                                             max_depth)
            if tree.size or i == len(self.drafters) - 1:
                self.used.append(i)
                return tree, tokens, draft_probs

    def sync(self, n_kept: int, target_hidden: torch.Tensor | None = None) -> None:
        for drafter in self.drafters:
            drafter.sync(n_kept, target_hidden if drafter.wants_target_hidden else None)
