"""Tree speculative decoding: draft a static tree of candidates, verify all of it in one target pass.

A chain drafts one guess per position; when the first guess is wrong, everything after it is lost.
A tree drafts several candidates per position (siblings), each with its own continuation, and the
target scores every node in ONE forward pass: the nodes are flattened into one sequence, and an
attention mask lets each node see the context and its own ancestors only, with position id
(context length - 1 + depth), so each row of logits is exactly what the target would compute for
that root-to-node path as a plain sequence.

Notation (as in verify.py): target_probs is the big model's distribution, draft_probs the draft's.
Node 0 is the root, i.e. the last context token; nodes 1..|𝒯| are drafted tokens, listed breadth
first (|𝒯| = `Tree.size`, in the book's notation; N is kept for parameter counts). Row i of
target_probs / draft_probs is the distribution of the token that follows node i. In shape comments,
n_nodes is |𝒯| and T the length of a token sequence (for a context, its length ℓ).

Two exact rules for sampled verification, one per way of choosing the children:

* Static trees with sampled children (`tree=(2, 2)`): SpecInfer's multi-step speculative sampling (Miao et
  al. 2024, Algorithm 2). The children of a node are drafted i.i.d. from draft_probs[node] and tried one by
  one; child x is accepted with probability min(1, p(x) / q(x)), where p starts as target_probs[node] and
  becomes normalise(max(p - q, 0)) after every rejected sibling (`verify_tree`). SpecTr's k-sequential
  selection (Sun et al. 2023) is a different rule: an optimal-transport coupling with its own acceptance
  probabilities and residual, not implemented here.
* Dynamic trees (EAGLE-2, `TreeBudget`): the children are the draft's top-k tokens, chosen deterministically,
  so they are not i.i.d. draws and SpecInfer's rule does not apply. Recursive rejection sampling with
  point-mass proposals does (`verify_tree_deterministic`): try candidate x with probability p(x), on
  rejection set p(x) = 0 and renormalise, and if every candidate is rejected, sample from what is left.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

import torch

from .cache import CachedModel, cache_kwargs, cached_model, check_cache_length, vocab_size
from .device import seconds_since, start_timer
from .drafters import ModelDrafter, TreeDrafter
from .generate import (Generation, Stats, as_drafter, check_generator, check_inputs, check_speculative_inputs,
                       trim_new_tokens)
from .sampling import SamplingConfig, logits_to_probs, sample
from .verify import residual


@dataclass(frozen=True)
class Tree:
    """A static tree of draft candidates, given by parent indices, breadth first.

    Tree((-1, 0, 0, 1, 1, 2, 2)) is a root with 2 children, each with 2 children: Tree.from_branching((2, 2)).
    """
    parents: tuple[int, ...]  # parents[0] = -1 (the root); parents[i] < i for every drafted node i >= 1

    def __post_init__(self):
        p = tuple(self.parents)
        object.__setattr__(self, "parents", p)  # a list is accepted too
        if not p or p[0] != -1:
            raise ValueError(f"parents must start with -1 for the root (node 0), got {p!r}")
        for i, parent in enumerate(p[1:], start=1):
            if not isinstance(parent, int) or not 0 <= parent < i:
                raise ValueError(f"node {i} has parent {parent!r}; a parent must be an earlier node "
                                 f"(0 <= parent < {i})")
        depth = self.depths()
        if any(depth[i] < depth[i - 1] for i in range(1, len(p))):
            raise ValueError(f"list the nodes breadth first (depth never decreasing), got depths {depth}")

    @classmethod
    def from_branching(cls, branching: Sequence[int]) -> Tree:
        """(2, 2, 1): the root has 2 children, each of those 2, each of those 1 (4 leaves, 10 drafted nodes)."""
        if not all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in branching):
            raise ValueError(f"branching factors must be integers >= 1, one per depth, got {tuple(branching)!r}")
        parents, level = [-1], [0]
        for b in branching:
            new_level = []
            for node in level:
                for _ in range(b):
                    parents.append(node)
                    new_level.append(len(parents) - 1)
            level = new_level
        return cls(tuple(parents))

    @classmethod
    def chain(cls, n: int) -> Tree:
        """n drafted tokens in a line: ordinary speculative decoding with γ = n."""
        return cls.from_branching((1,) * n)

    @property
    def size(self) -> int:
        """|𝒯|, the number of drafted nodes (the root is not drafted)."""
        return len(self.parents) - 1

    def depths(self) -> list[int]:
        """Depth of every node: 0 for the root, 1 for its children, ..."""
        depth = [0]
        for parent in self.parents[1:]:
            depth.append(depth[parent] + 1)
        return depth

    def children(self, node: int) -> list[int]:
        return list(self._children[node])

    def ancestry(self, device=None) -> torch.Tensor:  # -> [n_nodes+1, n_nodes+1] bool
        """ancestry[i, j]: node j is node i or one of its ancestors (the root is everyone's ancestor)."""
        return self._ancestry.to(device)

    # computed once per tree (the loop asks for them at every node and every forward pass)
    @cached_property
    def _children(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(i for i, parent in enumerate(self.parents) if parent == node)
                     for node in range(len(self.parents)))

    @cached_property
    def _ancestry(self) -> torch.Tensor:  # -> [n_nodes+1, n_nodes+1] bool
        a = torch.eye(len(self.parents), dtype=torch.bool)
        for i, parent in enumerate(self.parents[1:], start=1):
            a[i] |= a[parent]  # parents come first, so their rows are already complete
        return a

    def pruned(self, max_depth: int) -> Tree:
        """The nodes at depth <= max_depth (a prefix, since nodes are breadth first)."""
        if max(self.depths()) <= max_depth:
            return self
        return Tree(tuple(p for p, d in zip(self.parents, self.depths()) if d <= max_depth))


def as_tree(tree: Tree | Sequence[int]) -> Tree:
    """A Tree, or branching factors per depth such as (2, 2), or (4,) for four single-token candidates."""
    if isinstance(tree, Tree):
        return tree
    if not isinstance(tree, Sequence) or len(tree) == 0:
        raise ValueError(f"tree must be a Tree or a non-empty sequence of branching factors like (2, 2), got {tree!r}")
    return Tree.from_branching(tree)


# ----------------------------------------------------------------------------------------------
# Scoring a tree in one forward pass
# ----------------------------------------------------------------------------------------------

def tree_attention_mask(tree: Tree, context_len: int, start: int, stop: int, dtype: torch.dtype,
                        device=None) -> torch.Tensor:  # -> [1, 1, stop - start, stop]
    """Additive mask for rows start..stop-1 of the flattened sequence (the context, then nodes 1..|𝒯|).

    A context token sees the context before it (causal); a node sees the whole context and its ancestors.
    """
    T = context_len  # ℓ, the context length (T as in the shape comments: a sequence length)
    query = torch.arange(start, stop, device=device)[:, None]  # [q, 1] flattened index of each row
    key = torch.arange(stop, device=device)[None]  # [1, k]

    def node(i):  # flattened index -> node id; every context token maps to 0, the root
        return (i - T + 1).clamp(min=0)

    allowed = ((key < T) & (key <= query)) | ((key >= T) & tree.ancestry(device)[node(query), node(key)])  # [q, k]
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)[None, None]  # [q, k] -> [1, 1, q, k]


def tree_position_ids(tree: Tree, context_len: int, start: int, stop: int,
                      device=None) -> torch.Tensor:  # -> [stop - start]
    """Position of each flattened row: its index in the context, or context_len - 1 + depth for a node."""
    depth = torch.tensor(tree.depths(), device=device)  # [n_nodes+1]
    i = torch.arange(start, stop, device=device)  # [q]
    return torch.where(i < context_len, i, context_len - 1 + depth[(i - context_len + 1).clamp(min=0)])


def tree_forward(lm: CachedModel, context_ids: torch.Tensor, tree: Tree, node_tokens: torch.Tensor,
                 stop: int) -> torch.Tensor:  # [T], [n_nodes+1] -> [stop - n_cached, V]
    """Run lm on the flattened rows it has not cached yet, up to row `stop`, with the tree mask; extend its cache.

    The flattened sequence is context_ids followed by node_tokens[1:] (node_tokens[0] is the root, which
    is context_ids[-1]), so with ℓ = len(context_ids) node i sits at flattened index ℓ - 1 + i. While a tree is
    in the cache, lm.n_cached counts its nodes too; `lm.rollback(ℓ)` drops them.
    """
    T, start = context_ids.shape[0], lm.n_cached
    flat = torch.cat([context_ids, node_tokens[1:]])[start:stop]  # [T + n_nodes] -> [q]
    dtype = next(lm.model.parameters()).dtype
    mask = tree_attention_mask(tree, T, start, stop, dtype, context_ids.device)  # [1, 1, q, stop]
    positions = tree_position_ids(tree, T, start, stop, context_ids.device)  # [q]
    out = lm.model(input_ids=flat[None], position_ids=positions[None], attention_mask=mask,
                   **cache_kwargs(lm.model, lm.cache), use_cache=True)  # a 4D mask is used as given
    check_cache_length(lm.cache, stop)
    lm.n_cached, lm.calls = stop, lm.calls + 1
    return out.logits[0]  # [1, q, V] -> [q, V]


# ----------------------------------------------------------------------------------------------
# Draft, verify, step
# ----------------------------------------------------------------------------------------------

def draft_children(draft_probs: torch.Tensor, draft_logits: torch.Tensor, k: int, sampling: SamplingConfig,
                   generator: torch.Generator | None) -> torch.Tensor:  # [V], [V] -> [k]
    """k candidates for one node: the k most likely tokens when greedy, else k i.i.d. draws from draft_probs.

    I.i.d. (with replacement) is what SpecInfer's rule needs: every sibling must be a fresh draw from the
    same q. Duplicates are harmless: a token rejected once has residual mass 0 and is rejected again.
    """
    if sampling.greedy:
        return draft_logits.topk(k).indices  # [k] distinct tokens, best first
    return torch.multinomial(draft_probs, k, replacement=True, generator=generator)  # [k]


def draft_tree(draft_lm: CachedModel, context_ids: torch.Tensor, tree: Tree, sampling: SamplingConfig,
               generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:  # [T] -> ([n_nodes+1], [n_nodes+1, V])
    """Draft every node, one draft forward pass per depth; return node tokens and each node's draft_probs.

    Row i of draft_probs is the distribution node i's children were drawn from (left zero for leaves).
    """
    T, depth = context_ids.shape[0], tree.depths()
    node_tokens = context_ids.new_zeros(tree.size + 1)  # [n_nodes+1]
    node_tokens[0] = context_ids[-1]  # the root is the last context token
    dtype = torch.promote_types(next(draft_lm.model.parameters()).dtype, torch.float32)  # as logits_to_probs
    V = vocab_size(draft_lm.model)
    draft_probs = torch.zeros(tree.size + 1, V, dtype=dtype, device=context_ids.device)  # [n_nodes+1, V]
    for d in range(max(depth)):  # the nodes at depth d get their children; leaves need no pass
        level = [i for i in range(tree.size + 1) if depth[i] == d]
        logits = tree_forward(draft_lm, context_ids, tree, node_tokens, T + level[-1])[-len(level):]  # [n_d, V]
        probs = logits_to_probs(logits, sampling)  # [n_d, V], the same helper the target uses
        for row, node in enumerate(level):
            draft_probs[node] = probs[row]
            children = tree.children(node)
            node_tokens[children] = draft_children(probs[row], logits[row], len(children), sampling, generator)
    draft_lm.rollback(T)  # forget the drafted nodes; the next step re-feeds whatever was accepted
    return node_tokens, draft_probs


def verify_tree_greedy(tree: Tree, node_tokens: torch.Tensor,
                       target_probs: torch.Tensor) -> tuple[list[int], torch.Tensor]:  # [n_nodes+1], [n_nodes+1, V] -> (path, [1])
    """Walk down from the root, always into the child that equals the target's argmax; then emit that argmax."""
    path, node = [], 0
    while True:
        best = target_probs[node].argmax()
        match = [c for c in tree.children(node) if node_tokens[c] == best]
        if not match:  # no child is the target's choice (or node is a leaf): the argmax is the next token
            return path, best[None]
        node = match[0]
        path.append(node)


def verify_tree(tree: Tree, node_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
                generator: torch.Generator | None = None,
                ) -> tuple[list[int], torch.Tensor]:  # [n_nodes+1], [n_nodes+1, V] x2 -> (path, [1])
    """SpecInfer's multi-step speculative sampling (Miao et al. 2024, Alg. 2).

    Not SpecTr's k-sequential selection (Sun et al. 2023), an optimal-transport rule with another residual.

    At a node, with p = target_probs[node] and q = draft_probs[node], try the children in order:
    accept child x with probability min(1, p(x)/q(x)); after a rejection set p = normalise(max(p - q, 0))
    and try the next sibling. Exact because each try emits min(p, q) + P(reject) * (the rest), and by
    induction the rest is distributed as normalise(max(p - q, 0)): the sum is p. This needs the siblings
    to be i.i.d. draws from q. If every child is rejected, emit a sample of the current p (at a leaf, p
    is still target_probs[leaf]: the bonus token). Returns the accepted path (node ids) and the next token.
    """
    path, node = [], 0
    while True:
        p, q = target_probs[node], draft_probs[node]  # [V], [V]
        for child in tree.children(node):
            x = node_tokens[child]
            u = torch.rand((), generator=generator, device=p.device, dtype=p.dtype)
            # accept x with probability min(1, p_target(x) / p_draft(x)), p_target the current residual
            if u * q[x] < p[x]:
                break
            p = residual(p, q)  # rejected: the next sibling is judged against what is left of the target
        else:
            return path, sample(p, generator)
        node = child
        path.append(node)


@dataclass
class TreeStep:
    """What one tree iteration drafted and kept (passed to `on_step`, for chapters and debugging)."""
    context_len: int  # tokens in the sequence before this iteration
    tree: Tree  # the tree drafted (pruned near max_new_tokens)
    node_tokens: torch.Tensor  # [n_nodes+1] node 0 is the root (last context token), 1..n_nodes were drafted
    draft_probs: torch.Tensor | None  # [n_nodes+1, V] row i: the distribution node i's children were drawn from
    # (None for a dynamic tree: its children are the draft's top-k, and the exact rule never reads q)
    target_probs: torch.Tensor  # [n_nodes+1, V] row i: the target's next-token distribution after node i's path
    path: list[int]  # accepted node ids, root excluded
    next_token: int  # the token emitted after the path (replacement, or bonus at a leaf)


def tree_speculative_step(target_lm: CachedModel, draft_lm: CachedModel, tokens: torch.Tensor, tree: Tree,
                          sampling: SamplingConfig, generator: torch.Generator | None,
                          ) -> tuple[torch.Tensor, TreeStep]:  # [T] -> ([T + len(path) + 1], TreeStep)
    """One iteration: draft a tree, score all its nodes in one target pass, keep an exact path, roll back."""
    T = tokens.shape[0]
    node_tokens, draft_probs = draft_tree(draft_lm, tokens, tree, sampling, generator)  # [n_nodes+1], [n_nodes+1, V]
    target_logits = tree_forward(target_lm, tokens, tree, node_tokens, T + tree.size)[-(tree.size + 1):]  # [n_nodes+1, V]
    target_probs = logits_to_probs(target_logits, sampling)  # [n_nodes+1, V]
    # Rollback: crop the cache back to the context, and let the next pass re-feed the accepted path.
    # Keeping the accepted nodes' entries instead would mean gathering scattered rows out of every layer's
    # keys and values; re-feeding costs a few more rows in a pass that runs anyway, and uses only `crop`.
    target_lm.rollback(T)
    if sampling.greedy:
        path, next_token = verify_tree_greedy(tree, node_tokens, target_probs)
    else:
        path, next_token = verify_tree(tree, node_tokens, draft_probs.to(target_probs.dtype), target_probs, generator)
    new_tokens = torch.cat([tokens, node_tokens[path], next_token])  # [T + len(path) + 1]
    return new_tokens, TreeStep(T, tree, node_tokens, draft_probs, target_probs, path, int(next_token))


def check_tree_inputs(target, draft, input_ids: torch.Tensor, max_new_tokens: int, tree: Tree,
                      sampling: SamplingConfig, generator: torch.Generator | None) -> None:
    """Everything `tree_speculative_generate` refuses, with a message that says what to fix."""
    check_inputs(target, input_ids, max_new_tokens, sampling, "target")
    check_generator(generator, input_ids.device)
    if not isinstance(draft, torch.nn.Module):
        raise ValueError(f"tree drafting needs a draft model (a Hugging Face causal LM or a ModelDrafter), "
                         f"got {type(draft).__name__}; a lookup drafter proposes one chain: use speculative_generate")
    check_inputs(draft, input_ids, max_new_tokens, sampling, "draft")
    if vocab_size(draft) != vocab_size(target):
        raise ValueError(f"draft and target vocabularies differ ({vocab_size(draft)} vs {vocab_size(target)}); "
                         "they must share a tokenizer (slice padded heads to the tokenizer's length)")
    widest = max(len(tree.children(i)) for i in range(tree.size + 1))
    if sampling.greedy and widest > vocab_size(target):
        raise ValueError(f"greedy drafting proposes distinct tokens, so a node can have at most {vocab_size(target)} "
                         f"children (the vocabulary), got {widest}")


@torch.inference_mode()
def tree_speculative_generate(target, draft, input_ids: torch.Tensor, max_new_tokens: int, *,
                              tree: Tree | Sequence[int] | TreeBudget = (2, 2),
                              sampling: SamplingConfig = SamplingConfig(), generator: torch.Generator | None = None,
                              eos_token_id: int | None = None,
                              on_step: Callable[[TreeStep], None] | None = None) -> Generation:  # [1, T] -> [n_new]
    """Draft a tree of candidates, verify it in one target pass, keep an exact path, repeat.

    `tree` is a TreeBudget (EAGLE-2's dynamic tree, grown by any `TreeDrafter`: the feature head, a model draft,
    prompt lookup), or a static Tree or branching factors per depth for a draft model: (2, 2) samples 2
    candidates, each with 2 continuations (SpecInfer).
    Stats.accepted holds the accepted path length per iteration (one target pass each); Stats.drafted counts
    every node of the tree. Stats.acceptance_rate and Stats.alpha are chain quantities (a tree can accept at
    most one node per depth): compare trees by mean accepted per pass, as `accepted_length_vs_chain` does.
    """
    if isinstance(tree, TreeBudget):
        return dynamic_tree_generate(target, draft, input_ids, max_new_tokens, budget=tree, sampling=sampling,
                                     generator=generator, eos_token_id=eos_token_id, on_step=on_step)
    tree = as_tree(tree)
    draft = draft.lm.model if isinstance(draft, ModelDrafter) else draft
    check_tree_inputs(target, draft, input_ids, max_new_tokens, tree, sampling, generator)
    t0 = start_timer(input_ids.device)
    target_lm, draft_lm = CachedModel(target), CachedModel(draft)
    tokens, n_prompt, stats = input_ids[0].long(), input_ids.shape[1], Stats(tree=True)
    new, done = trim_new_tokens(tokens, n_prompt, max_new_tokens, eos_token_id)
    while not done:
        step_tree = tree.pruned(max_new_tokens - new.shape[0] - 1)  # never draft past max_new_tokens
        tokens, step = tree_speculative_step(target_lm, draft_lm, tokens, step_tree, sampling, generator)
        stats.accepted.append(len(step.path))
        stats.drafted.append(step_tree.size)
        if on_step is not None:
            on_step(step)
        new, done = trim_new_tokens(tokens, n_prompt, max_new_tokens, eos_token_id)
    stats.seconds = seconds_since(t0, input_ids.device)
    stats.target_calls, stats.draft_calls = target_lm.calls, draft_lm.calls
    return Generation(new, stats)


# ----------------------------------------------------------------------------------------------
# Dynamic trees (EAGLE-2): grow the tree the draft is most confident in, verify it with an exact rule
# ----------------------------------------------------------------------------------------------

def verify_tree_deterministic(tree: Tree, node_tokens: torch.Tensor, target_probs: torch.Tensor,
                              generator: torch.Generator | None = None,
                              ) -> tuple[list[int], torch.Tensor]:  # [n_nodes+1], [n_nodes+1, V] -> (path, [1])
    """Recursive rejection sampling with point-mass proposals, for children chosen deterministically (top-k).

    At a node, with p = target_probs[node], try the children in order: accept child x with probability p(x);
    on rejection set p = residual(p, one_hot(x)), i.e. p(x) = 0 and renormalise, and try the next child. If
    every child is rejected, emit a sample of what is left of p. Exact: child i is emitted with probability
    prod_{j<i} (1 - p_j(x_j)) * p_i(x_i) = p(x_i), and any other token x with probability
    (1 - sum_i p(x_i)) * p(x) / (1 - sum_i p(x_i)) = p(x). This is SpecInfer's rule with q = one_hot(x) for
    each child, so the children must be distinct (a deterministic top-k is).
    """
    path, node = [], 0
    while True:
        p = target_probs[node]  # [V]
        for child in tree.children(node):
            x = node_tokens[child]
            u = torch.rand((), generator=generator, device=p.device, dtype=p.dtype)
            # accept x with probability min(1, p_target(x) / 1): the draft "proposed" x with certainty
            if u < p[x]:
                break
            p = residual(p, torch.zeros_like(p).index_fill_(0, x[None], 1.0))  # rejected: remove x, renormalise
        else:
            return path, sample(p, generator)
        node = child
        path.append(node)


@dataclass(frozen=True)
class TreeBudget:
    """EAGLE-2's three knobs: how deep the draft looks, how wide, and how many nodes the target verifies."""
    depth: int = 4  # draft passes per iteration, the deepest a node can be
    topk: int = 4  # children per expanded node, and nodes expanded per depth
    n_nodes: int = 12  # |𝒯|, the drafted nodes the target scores in its one pass (the best by draft confidence)

    def __post_init__(self):
        for name in ("depth", "topk", "n_nodes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"TreeBudget.{name} must be an integer >= 1, got {value!r}")


@dataclass
class GrowingTree:
    """The nodes drafted so far, in the order they were made; node 0 is the root (the last context token)."""
    parents: list[int]  # parent of every node (-1 for the root)
    tokens: list[int]  # token of every node
    depth: list[int]  # depth of every node
    score: list[float]  # cumulative draft log-probability of the path to every node (0 at the root)

    def ancestors(self, node: int) -> list[int]:
        """node and its ancestors, root excluded."""
        out = []
        while node > 0:
            out.append(node)
            node = self.parents[node]
        return out


def grow_tree(root_token: int, root_logits: torch.Tensor,
              expand: Callable[[GrowingTree, list[int]], torch.Tensor],
              budget: TreeBudget) -> tuple[Tree, list[int]]:  # [V] -> (Tree, node tokens [n_nodes+1])
    """EAGLE-2 (Li et al. 2024): expand the most promising nodes depth by depth, then keep the best |𝒯| overall.

    A node's score is its path's cumulative draft log-probability (softmax of the raw logits, whatever the
    sampling: it ranks guesses, it is never used to accept them). Depth 1 is the root's w best tokens (w =
    budget.topk, the tree's width). At each further depth the w best nodes of the last depth are expanded
    (`expand(tree, nodes)` -> their logits [w, V], one draft pass) into w children each, and the w best of
    those w^2 form the next depth. Finally the |𝒯| = budget.n_nodes best nodes of all depths are kept; a child
    never scores above its parent, so they form a tree.
    """
    g = GrowingTree([-1], [root_token], [0], [0.0])

    def add_children(nodes: list[int], logits: torch.Tensor) -> list[int]:  # [len(nodes), V] -> new node ids
        logp = logits.detach().float().log_softmax(-1)  # [n, V]
        top = logp.topk(budget.topk, dim=-1)  # [n, w], w = budget.topk
        cand = torch.tensor([g.score[v] for v in nodes])[:, None] + top.values.cpu()  # [n, w] path scores
        keep = cand.flatten().topk(min(budget.topk, cand.numel())).indices.tolist()  # the w best children
        new = []
        for i in sorted(keep):
            row, col = divmod(i, budget.topk)
            g.parents.append(nodes[row])
            g.tokens.append(int(top.indices[row, col]))
            g.depth.append(g.depth[nodes[row]] + 1)
            g.score.append(float(cand[row, col]))
            new.append(len(g.parents) - 1)
        return new

    level = add_children([0], root_logits[None])
    for _ in range(budget.depth - 1):
        level = add_children(level, expand(g, level))
    best = sorted(range(1, len(g.parents)), key=lambda v: (-g.score[v], g.depth[v]))[:budget.n_nodes]
    keep = [0] + sorted(best, key=lambda v: (g.depth[v], v))  # breadth first, as Tree wants
    new_id = {v: i for i, v in enumerate(keep)}
    parents = tuple(-1 if v == 0 else new_id[g.parents[v]] for v in keep)
    return Tree(parents), [g.tokens[v] for v in keep]


def tree_rows_mask(g: GrowingTree, fed: list[int], new: list[int], n_prefix: int, dtype: torch.dtype,
                   device=None) -> torch.Tensor:  # -> [1, 1, len(new), n_prefix + len(fed) + len(new)]
    """Additive mask for a draft pass over `new` nodes whose cache already holds n_prefix context rows and then
    the `fed` nodes: a node sees the context, and among the drafted nodes only itself and its ancestors."""
    cols = torch.tensor(fed + new)  # [m] node id of every drafted row
    allowed = torch.ones(len(new), n_prefix + cols.shape[0], dtype=torch.bool)
    for r, v in enumerate(new):
        allowed[r, n_prefix:] = torch.isin(cols, torch.tensor(g.ancestors(v)))
    mask = torch.zeros(allowed.shape, dtype=dtype)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)[None, None].to(device)


def dynamic_tree_step(target_lm: CachedModel, drafter: TreeDrafter, tokens: torch.Tensor, budget: TreeBudget,
                      sampling: SamplingConfig, generator: torch.Generator | None, max_depth: int | None = None,
                      ) -> tuple[torch.Tensor, TreeStep]:  # [T] -> ([T + len(path) + 1], TreeStep)
    """One iteration: the drafter grows a tree, the target scores every node in one pass, an exact path is kept.

    The accepted nodes' keys and values are kept (gathered out of the tree's rows), not re-fed.
    """
    T = tokens.shape[0]
    tree, node_tokens = drafter.propose_tree(tokens, budget, sampling, max_depth)  # Tree, [n_nodes+1]
    N = tree.size  # |𝒯|, n_nodes in the shape comments
    flat = torch.cat([tokens, node_tokens[1:]])  # [T + n_nodes]: the context, then the drafted nodes
    start, dtype = target_lm.n_cached, next(target_lm.model.parameters()).dtype
    mask = tree_attention_mask(tree, T, start, T + N, dtype, tokens.device)  # [1, 1, q, T + n_nodes]
    positions = tree_position_ids(tree, T, start, T + N, tokens.device)  # [q]
    target_logits = target_lm.logits(flat, keep=N + 1, position_ids=positions, attention_mask=mask)  # [n_nodes+1, V]
    target_probs = logits_to_probs(target_logits, sampling)  # [n_nodes+1, V]
    if sampling.greedy:
        path, next_token = verify_tree_greedy(tree, node_tokens, target_probs)
    else:
        path, next_token = verify_tree_deterministic(tree, node_tokens, target_probs, generator)
    target_lm.keep_rows(T, [T - 1 + i for i in path])  # node i sits at flattened row T - 1 + i
    new_tokens = torch.cat([tokens, node_tokens[path], next_token])  # [T + len(path) + 1]
    drafter.sync(new_tokens.shape[0] - 1, target_lm.hidden)
    return new_tokens, TreeStep(T, tree, node_tokens, None, target_probs, path, int(next_token))


def dynamic_tree_generate(target, draft, input_ids: torch.Tensor, max_new_tokens: int, *, budget: TreeBudget,
                          sampling: SamplingConfig, generator: torch.Generator | None, eos_token_id: int | None,
                          on_step: Callable[[TreeStep], None] | None,
                          cache: str = "dynamic") -> Generation:  # [1, T] -> [n_new]
    """The loop of `tree_speculative_generate` for a TreeBudget: validate, then repeat `dynamic_tree_step`."""
    if not isinstance(budget, TreeBudget):
        raise ValueError(f"tree must be a specdec_ref.TreeBudget(depth, topk, n_nodes), got {budget!r}")
    drafter = as_drafter(draft)
    if not isinstance(drafter, TreeDrafter):
        raise ValueError(f"{type(drafter).__name__} cannot grow a tree (it has no propose_tree); "
                         "use speculative_generate for a chain")
    check_speculative_inputs(target, drafter, input_ids, max_new_tokens, 1, sampling, generator)
    drafter.sync(0)
    t0 = start_timer(input_ids.device)
    target_lm = cached_model(target, keep_hidden=drafter.wants_target_hidden, cache=cache,
                             max_len=input_ids.shape[1] + max_new_tokens + budget.n_nodes + 1)
    tokens, n_prompt, stats = input_ids[0].long(), input_ids.shape[1], Stats(tree=True)
    new, done = trim_new_tokens(tokens, n_prompt, max_new_tokens, eos_token_id)
    while not done:
        room = max_new_tokens - new.shape[0] - 1  # never draft past max_new_tokens
        tokens, step = dynamic_tree_step(target_lm, drafter, tokens, budget, sampling, generator, max_depth=room)
        stats.accepted.append(len(step.path))
        stats.drafted.append(step.tree.size)
        if on_step is not None:
            on_step(step)
        new, done = trim_new_tokens(tokens, n_prompt, max_new_tokens, eos_token_id)
    stats.seconds = seconds_since(t0, input_ids.device)
    stats.target_calls, stats.draft_calls = target_lm.calls, drafter.calls
    return Generation(new, stats)


# ----------------------------------------------------------------------------------------------
# Measurement for the chapter: does a tree keep more tokens per target pass than a chain?
# ----------------------------------------------------------------------------------------------

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
                             max_new_tokens: int = 32, runs: int = 10, sampling: SamplingConfig = SamplingConfig(),
                             seed: int = 0) -> TreeVsChain:
    """Mean accepted tokens per target pass for `tree` and for a chain with as many drafted nodes.

    Each target pass emits accepted + 1 tokens. Counts only, no timing: the tree's pass scores its |𝒯|
    nodes, so whether it is faster too depends on how the hardware prices |𝒯| rows (measure that separately).
    """
    tree = as_tree(tree)
    chain = Tree.chain(tree.size)
    results = []
    for shape in (tree, chain):
        generator = torch.Generator(device=input_ids.device).manual_seed(seed)
        full = Stats()
        for _ in range(runs):
            s = tree_speculative_generate(target, draft, input_ids, max_new_tokens, tree=shape, sampling=sampling,
                                          generator=generator).stats
            full.accepted += s.accepted
            full.draft_calls += s.draft_calls
        n = len(full.accepted)
        results.append((sum(full.accepted) / n, full.draft_calls / n, n))
    (ta, td, tn), (ca, cd, cn) = results
    return TreeVsChain(tree.size, ta, ca, td, cd, tn, cn)
