"""Trees of guesses: their shapes and attention masks, how a draft fills them (the rule that verifies them,
`verify_tree`, is verify.py's, and read here too).

A chain drafts one guess per position; when the first guess is wrong, everything after it is lost.
A tree drafts several candidates per position (siblings), each with its own continuation, and the
target scores every node in ONE forward pass: the nodes are flattened into one sequence, and an
attention mask lets each node see the context and its own ancestors only, with position id
(context length - 1 + depth), so each row of logits is exactly what the target would compute for
that root-to-node path as a plain sequence. The loop that runs a tree step is `generate.tree_step`.

Notation (as in verify.py): target_probs is the big model's distribution, draft_probs the draft's.
Node 0 is the root, i.e. the last context token; nodes 1..|𝒯| are drafted tokens, listed breadth
first (|𝒯| = `Tree.size`, in the book's notation). Row i of target_probs / draft_probs is the
distribution of the token that follows node i. In shape comments, n_nodes is |𝒯| and T the length of a
token sequence (for a context, its length ℓ).

Two shapes, one per way of choosing the children, and one walk (`verify_tree`) for both:

* A static `Tree` with sampled children (`tree=(2, 2)`): the children of a node are i.i.d. draws from
  draft_probs[node], judged by SpecInfer's multi-step speculative sampling (Miao et al. 2024, Algorithm 2).
  SpecTr's k-sequential selection (Sun et al. 2023) is a different rule (an optimal-transport coupling with
  its own acceptance probabilities and residual) and is not implemented here.
* A `TreeBudget` (EAGLE-2's dynamic tree, `grow_tree`). Greedy, the children are the draft's top-k tokens,
  chosen deterministically, so they are not i.i.d. draws. The same walk with q = one_hot(child) for every
  child (a point-mass proposal) is exact for them: recursive rejection sampling. At T > 0 the children are a
  sample *without replacement* from the draft's q instead, judged by the same walk with q renormalised over
  the tokens not tried yet after every rejection (recursive rejection sampling without replacement, Jeon et
  al. 2024): a point mass keeps only the target's mass on the draft's top tokens, which is small wherever the
  target spreads its mass, while a draw from q keeps sum(min(p, q)).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from typing import Callable

import torch
import torch.nn.functional as F

from .sampling import Ranked, SamplingConfig, logits_to_probs, ranked
from .verify import verify_tree, verify_tree_greedy  # noqa: F401  (the walk that verifies a tree: tr.verify_tree)


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
        """(2, 2, 1): the root has 2 children, each of those 2, each of those 1 (4 leaves, 10 drafted
        nodes)."""
        if not all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in branching):
            raise ValueError(f"branching factors must be integers >= 1, one per depth, "
                             f"got {tuple(branching)!r}")
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

    def children(self, node: int) -> list[int]:  # computed once per tree, as ancestry: the loop asks often
        return list(self._children[node])

    def ancestry(self, device=None) -> torch.Tensor:  # -> [n_nodes+1, n_nodes+1] bool
        """ancestry[i, j]: node j is node i or one of its ancestors (the root is everyone's ancestor)."""
        return self._ancestry.to(device)

    @cached_property
    def _children(self) -> tuple[tuple[int, ...], ...]:
        children: list[list[int]] = [[] for _ in self.parents]
        for i, parent in enumerate(self.parents[1:], start=1):
            children[parent].append(i)
        return tuple(map(tuple, children))

    @cached_property
    def _seen(self) -> tuple[frozenset[int], ...]:  # node i and its ancestors, the root among them
        seen = [frozenset({0})]
        for i, parent in enumerate(self.parents[1:], start=1):
            seen.append(seen[parent] | {i})  # parents come first, so their sets are already complete
        return tuple(seen)

    @cached_property
    def _ancestry(self) -> torch.Tensor:  # -> [n_nodes+1, n_nodes+1] bool
        return torch.tensor([[j in s for j in range(len(self.parents))] for s in self._seen])

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
        raise ValueError(f"tree must be a Tree or a non-empty sequence of branching factors like (2, 2), "
                         f"got {tree!r}")
    return Tree.from_branching(tree)


@dataclass(frozen=True)
class TreeBudget:
    """EAGLE-2's three knobs: how deep the draft looks, how wide, and how many nodes the target verifies."""
    depth: int = 4  # draft passes per iteration, the deepest a node can be
    topk: int = 4  # children per expanded node, and nodes expanded per depth
    # |𝒯|, the drafted nodes the target scores in its one pass (the best by draft confidence)
    n_nodes: int = 12
    # skip the next draft pass when no node of the last depth has a path probability of at least this
    # (0: always draft `depth` deep); the pass's cost is saved where its nodes would rarely be kept
    stop: float = 0.0

    def __post_init__(self):
        for name in ("depth", "topk", "n_nodes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"TreeBudget.{name} must be an integer >= 1, got {value!r}")
        if not (isinstance(self.stop, (int, float)) and 0 <= self.stop < 1):
            raise ValueError(f"TreeBudget.stop must be a probability in [0, 1), got {self.stop!r}")


@dataclass
class GrowingTree:
    """The nodes drafted so far, in the order they were made; node 0 is the root (the last context token)."""
    parents: list[int]  # parent of every node (-1 for the root)
    tokens: list[int]  # token of every node
    depth: list[int]  # depth of every node
    score: list[float]  # cumulative draft log-probability of the path to every node (0 at the root)

    def ancestors(self, node: int) -> list[int]:  # node and its ancestors, root excluded
        out = []
        while node > 0:
            out.append(node)
            node = self.parents[node]
        return out


def tree_depth(shape: Tree | TreeBudget, max_depth: int | None = None) -> int:
    """How deep a tree of this shape reaches, at most max_depth (None: no limit)."""
    depth = shape.depth if isinstance(shape, TreeBudget) else max(shape.depths())
    return depth if max_depth is None else max(0, min(depth, max_depth))


# Draft logits [n, V], or, for growth, (logits [n, K], token ids [K]) over a draft's own reduced vocabulary:
# the tokens left out have probability 0, and ranking K columns instead of V saves the vocabulary-wide work.
# Greedy growth also takes the children ready-ranked (`Ranked`, at least budget.topk a node).
DraftLogits = torch.Tensor | tuple[torch.Tensor, torch.Tensor] | Ranked
# A draft pass over some nodes of a growing tree: -> their logits. Each drafter writes its own (it knows its
# cache); the tree rules below only decide which nodes to expand and which children to keep.
Expand = Callable[[GrowingTree, list[int]], DraftLogits]


# ----------------------------------------------------------------------------------------------
# Masks and positions: a tree in one forward pass
# ----------------------------------------------------------------------------------------------

def tree_attention_mask(tree: Tree, context_len: int, start: int, stop: int, dtype: torch.dtype,
                        device=None, among_rows: bool = False) -> torch.Tensor:  # -> [1, 1, q, stop or q]
    """Additive mask for rows start..stop-1 (q of them) of the flattened sequence (context, nodes 1..|𝒯|).

    A context token sees the context before it (causal); a node sees the whole context and its ancestors.
    among_rows: the last stop - start columns (kept per tree), as `CachedModel.logits` takes them too."""
    block = _tree_block(tree, fed_rows(tree, context_len, start, stop), dtype, torch.device(device or "cpu"))
    return block if among_rows else F.pad(block, (start, 0))  # every row sees the cached context (0s)


def tree_position_ids(tree: Tree, context_len: int, start: int, stop: int,
                      device=None) -> torch.Tensor:  # -> [stop - start]
    """Position of each flattened row: its index in the context, or context_len - 1 + depth for a node."""
    n_ctx = fed_rows(tree, context_len, start, stop)
    return _tree_positions(tree, n_ctx, torch.device(device or "cpu")) + start


def fed_rows(tree: Tree, context_len: int, start: int, stop: int) -> int:
    """The context rows a tree pass feeds before its nodes (context_len - start), the rows checked."""
    if not 0 <= start <= context_len or stop != context_len + tree.size:
        raise ValueError(f"a tree pass scores the context from `start` (0 <= start <= {context_len}) and "
                         f"then all {tree.size} nodes (stop = {context_len + tree.size}), "
                         f"got {start}..{stop}")
    return context_len - start


# kept per tree and rows fed (a tree 3 deep and 3 wide comes in a few hundred shapes): decided in Python, sent
# in one copy, once
@lru_cache(maxsize=4096)
def _tree_block(tree: Tree, n_ctx: int, dtype: torch.dtype,
                device: torch.device) -> torch.Tensor:  # -> [1, 1, n_ctx + n_nodes, n_ctx + n_nodes]
    """The mask among a tree pass's rows: n_ctx context rows (the root last), causal; nodes see all of them,
    and themselves and their ancestors."""
    never, seen = torch.finfo(dtype).min, tree._seen  # seen[i]: node i and its ancestors
    rows = [[0.0] * (r + 1) + [never] * (n_ctx + tree.size - r - 1) for r in range(n_ctx)]  # causal
    rows += [[0.0] * n_ctx + [0.0 if j in s else never for j in range(1, tree.size + 1)] for s in seen[1:]]
    return torch.tensor(rows, dtype=dtype, device=device)[None, None]


@lru_cache(maxsize=4096)
def _tree_positions(tree: Tree, n_ctx: int, device: torch.device) -> torch.Tensor:  # -> [n_ctx + n_nodes]
    """tree_position_ids less `start`: the n_ctx context rows 0.., then n_ctx - 1 + depth for a node."""
    return torch.tensor(list(range(n_ctx)) + [n_ctx - 1 + d for d in tree.depths()[1:]], device=device)


def tree_rows_mask(g: GrowingTree, fed: list[int], new: list[int], n_prefix: int, dtype: torch.dtype,
                   device=None) -> torch.Tensor:  # -> [1, 1, len(new), n_prefix + len(fed) + len(new)]
    """Additive mask for a draft pass over `new` nodes whose cache already holds n_prefix context rows and
    then the `fed` nodes: a node sees the context, and among the drafted nodes only itself and its ancestors
    (a few rows and columns, decided in Python and sent to the device in one copy)."""
    cols, never = fed + new, torch.finfo(dtype).min
    seen = [set(g.ancestors(v)) for v in new]
    nodes = torch.tensor([[0.0 if c in s else never for c in cols] for s in seen], dtype=dtype)  # [k, cols]
    return F.pad(nodes.to(device, non_blocking=True), (n_prefix, 0))[None, None]  # the context: seen (0s)


def tree_node_positions(g: GrowingTree, nodes: list[int], n_prefix: int,
                        device=None) -> torch.Tensor:  # -> [len(nodes)]
    """Position id of each node for a draft pass: a node at depth d follows the n_prefix context rows by
    d - 1."""
    return torch.tensor([n_prefix - 1 + g.depth[v] for v in nodes], device=device)


# ----------------------------------------------------------------------------------------------
# Drafting a tree: which nodes to expand, which children to keep
# ----------------------------------------------------------------------------------------------

# [V] -> (Tree, tokens [n_nodes+1], [n_nodes+1, V])
def draft_tree(shape: Tree | TreeBudget, root_token: int, root_logits: DraftLogits, expand: Expand,
               sampling: SamplingConfig, generator: torch.Generator | None, max_depth: int | None = None,
               vocab_size: int | None = None) -> tuple[Tree, list[int], torch.Tensor | None]:
    """A tree of guesses after the root, at most max_depth deep: grown (`TreeBudget`) or filled (a static
    `Tree`).

    Returns the tree, every node's token (node 0 is root_token), and the rows the children were drawn from:
    draft_probs for sampled children (i.i.d. for a static tree, without replacement for a dynamic one), or
    None when the children are chosen deterministically (the draft's top-k: greedy), which `verify_tree`
    judges as point masses. Growth may be given reduced logits (`DraftLogits`; vocab_size then says how long
    a row of draft_probs is); a static tree needs full [n, V] rows.
    """
    depth = tree_depth(shape, max_depth)
    if depth == 0:
        return Tree((-1,)), [root_token], None
    if isinstance(shape, TreeBudget):
        return grow_tree(root_token, root_logits, expand, replace(shape, depth=depth), sampling, generator,
                         vocab_size)
    return fill_tree(shape.pruned(depth), root_token, root_logits, expand, sampling, generator)


def draft_children(draft_probs: torch.Tensor, draft_logits: torch.Tensor, k: int, sampling: SamplingConfig,
                   generator: torch.Generator | None) -> torch.Tensor:  # [V], [V] -> [k]
    """k candidates for one node: the k most likely tokens when greedy, else k i.i.d. draws from draft_probs.

    I.i.d. (with replacement) is what SpecInfer's rule needs: every sibling must be a fresh draw from the
    same q. Duplicates are harmless: a token rejected once has residual mass 0 and is rejected again.
    """
    if sampling.greedy:
        return draft_logits.topk(k).indices  # [k] distinct tokens, best first
    return torch.multinomial(draft_probs, k, replacement=True, generator=generator)  # [k]


def fill_tree(tree: Tree, root_token: int, root_logits: torch.Tensor, expand: Expand,
              sampling: SamplingConfig,
              generator: torch.Generator | None) -> tuple[Tree, list[int], torch.Tensor | None]:  # [V] -> ...
    """Draft every node of a static tree, one draft pass per depth over the nodes that have children.

    Row i of draft_probs is the distribution node i's children were drawn from (zero for leaves); None when
    greedy, since the children are then the draft's distinct top-k tokens.
    """
    depth = tree.depths()
    g = GrowingTree(list(tree.parents), [root_token] + [-1] * tree.size, depth, [0.0] * (tree.size + 1))
    rows: dict[int, torch.Tensor] = {}  # node -> its draft_probs row [V]
    level, logits = [0], root_logits[None]  # nodes to give children, and their draft logits [n_d, V]
    for d in range(max(depth)):
        probs = logits_to_probs(logits, sampling)  # [n_d, V], the same helper the target uses
        for row, node in enumerate(level):
            children = tree.children(node)
            drawn = draft_children(probs[row], logits[row], len(children), sampling, generator).tolist()
            for child, token in zip(children, drawn):
                g.tokens[child] = token
            rows[node] = probs[row]
        level = [v for v in range(1, tree.size + 1) if depth[v] == d + 1 and tree.children(v)]
        if not level:
            break
        logits = expand(g, level)  # [n_{d+1}, V], one draft pass
    if sampling.greedy:
        return tree, g.tokens, None
    # [n_nodes+1, V]
    draft_probs = root_logits.new_zeros(tree.size + 1, root_logits.shape[-1], dtype=probs.dtype)
    for node, row in rows.items():
        draft_probs[node] = row
    return tree, g.tokens, draft_probs


def grow_tree(root_token: int, root_logits: DraftLogits, expand: Expand, budget: TreeBudget,
              sampling: SamplingConfig | None = None, generator: torch.Generator | None = None,
              vocab_size: int | None = None,
              ) -> tuple[Tree, list[int], torch.Tensor | None]:  # [V] -> (Tree, [n_nodes+1], q or None)
    """EAGLE-2 (Li et al. 2024): expand the most promising nodes depth by depth, then keep the best |𝒯|
    overall.

    A node's score is its path's cumulative draft log-probability. Depth 1 is the root's w best tokens (w =
    budget.topk, the tree's width). At each further depth the w best nodes of the last depth are expanded
    (`expand(tree, nodes)` -> their logits [w, V], one draft pass) into w children each, and the w best of
    those w^2 form the next depth. Finally the |𝒯| = budget.n_nodes best nodes of all depths are kept; a child
    never scores above its parent, so they form a tree. Greedy (or without `sampling`), a node's w children
    are the draft's top w tokens, scored by the softmax of the raw logits, and the tree comes back with None.

    At T > 0 the w children are drawn instead: a sample without replacement from q, the draft's distribution
    at the node (`logits_to_probs`, as for the target), in the order drawn (the Gumbel-top-k trick: the w
    largest q(x) / E_x, E_x ~ Exp(1)). The j-th child drawn is scored by its parent's score plus the log of
    the j-th largest probability of q, whatever token it drew (`sibling_scores`): whether a child is kept
    must not depend on the token it drew, or the kept children would no longer be draws from q (a child
    scored by its own q(x) is kept more often when q(x) is large, and the output is biased). So what is kept
    of a node's children is the first ones drawn, as many as their ranks earn, which
    `verify_tree(..., replacement=False)` judges exactly. The tree then comes back with q's rows
    [n_nodes+1, V] (zero for the nodes without children).
    """
    g = GrowingTree([-1], [root_token], [0], [0.0])
    w = budget.topk
    sampled = sampling is not None and not sampling.greedy
    rows: dict[int, tuple] = {}  # node -> the row its children were drawn from: (q [V], None) or (q [K], ids)

    def add_children(nodes: list[int], out: DraftLogits) -> list[int]:  # [len(nodes), V] -> new node ids
        if not isinstance(out, Ranked):
            logits, ids = out if isinstance(out, tuple) else (out, None)
            logits = logits.detach()
            if not sampled:  # greedy: the best w of each row, as a draft may bring them (`Ranked`)
                out = ranked(logits, ids, w)
        if isinstance(out, Ranked):
            if sampled or out.tokens.shape[-1] < w:
                raise ValueError(f"ranked children serve greedy growth, at least topk = {w} a node; got "
                                 f"{out.tokens.shape[-1]} at {'T > 0' if sampled else 'T = 0'}: give logits")
            # one copy from the device per depth: [n, w] each
            return keep_best(nodes, out.logp[:, :w].tolist(), out.tokens[:, :w].tolist())
        q = logits_to_probs(logits, sampling)  # [n, V] (or [n, K]: the others have probability 0)
        # the first w draws without replacement: the largest q / E, E ~ Exp(1) (the Gumbel-top-k trick), E
        # as -log(1 - U) (a fifth of the time of `exponential_` on a CPU); q = 0 has key 0, never kept
        u = torch.rand(q.shape, generator=generator, device=q.device, dtype=q.dtype)
        e = u.neg_().log1p_().neg_().clamp_(min=torch.finfo(q.dtype).tiny)
        top = (q / e).topk(min(w, q.shape[-1]), dim=-1)
        logp = sibling_scores(q, top.indices).tolist()  # [n, w] by rank (-inf: nothing left to draw)
        rows.update((v, (q[row], ids)) for row, v in enumerate(nodes))
        return keep_best(nodes, logp, (top.indices if ids is None else ids[top.indices]).tolist())

    def keep_best(nodes: list[int], logp: list[list[float]], tokens: list[list[int]]) -> list[int]:
        """Of the candidate children (row: the node, column: its child's rank), add the w best."""
        # path scores of the n * w candidates, best first (ties: the earlier row, then the earlier child)
        cand = sorted(((g.score[v] + lp, row, col) for row, v in enumerate(nodes)
                       for col, lp in enumerate(logp[row]) if lp > float("-inf")), key=lambda c: -c[0])
        new = []
        for score, row, col in sorted(cand[:w], key=lambda c: (c[1], c[2])):  # the w best children, in order
            g.parents.append(nodes[row])
            g.tokens.append(tokens[row][col])
            g.depth.append(g.depth[nodes[row]] + 1)
            g.score.append(score)
            new.append(len(g.parents) - 1)
        return new

    if isinstance(root_logits, Ranked):  # [w] -> [1, w]
        root_logits = Ranked(root_logits.logp[None], root_logits.tokens[None])
    elif isinstance(root_logits, tuple):  # ([K], [K]) -> ([1, K], [K])
        root_logits = root_logits[0][None], root_logits[1]
    else:
        root_logits = root_logits[None]
    level = add_children([0], root_logits)
    for _ in range(budget.depth - 1):
        if not level or budget.stop > 0 and max(g.score[v] for v in level) < math.log(budget.stop):
            break  # by rank at T > 0 (`sibling_scores`): blind to the tokens drawn, as keeping is
        level = add_children(level, expand(g, level))
    tree, keep = best_nodes(g, budget.n_nodes)
    return tree, [g.tokens[v] for v in keep], (draft_rows(keep, rows, vocab_size) if sampled else None)


def best_nodes(g: GrowingTree, n_nodes: int) -> tuple[Tree, list[int]]:
    """The tree of the n_nodes best nodes by score, and their ids in g (0 first, then breadth first): how a
    grown tree ends. Ties: the shallower node, then the one made first (kept children are a prefix); a node
    scored -inf (a compiled tree's depth past its stop, `models.aot_tree`) was never grown: never kept."""
    best = sorted((v for v in range(1, len(g.parents)) if g.score[v] > -math.inf),
                  key=lambda v: (-g.score[v], g.depth[v]))[:n_nodes]
    keep = [0] + sorted(best, key=lambda v: (g.depth[v], v))  # breadth first, as Tree wants
    new_id = {v: i for i, v in enumerate(keep)}
    return known_tree(tuple(-1 if v == 0 else new_id[g.parents[v]] for v in keep)), keep


# one Tree per shape: dynamic trees repeat their shapes, and each works out its children and ancestry once
known_tree = lru_cache(maxsize=4096)(Tree)


def sibling_scores(q: torch.Tensor, drawn: torch.Tensor) -> torch.Tensor:  # [n, K], [n, w] -> [n, w]
    """The score of the j-th child drawn at each node: log of the j-th largest probability of q there, not of
    the token drawn (`grow_tree`). Non-increasing in j, so the best-scored children are the first drawn; and
    blind to what was drawn, so that which of them are kept tells nothing about their tokens."""
    return q.topk(drawn.shape[-1], dim=-1).values.log()


def draft_rows(keep: list[int], rows: dict[int, tuple[torch.Tensor, torch.Tensor | None]],
               vocab_size: int | None) -> torch.Tensor:  # -> [len(keep), V]
    """The rows q of the kept nodes that were given children, in the kept order; zero for the others."""
    q, ids = next(iter(rows.values()))
    out = q.new_zeros(len(keep), q.shape[-1] if ids is None else vocab_size)
    for i, v in enumerate(keep):
        if v in rows:
            row, ids = rows[v]
            if ids is None:
                out[i] = row
            else:
                out[i].index_copy_(0, ids, row)
    return out
