"""A feature head's whole greedy dynamic tree grown in one compiled call (AOTInductor).

Grown pass by pass (`tree.grow_tree` with the compiled head of `models.aot_head`), an EAGLE-2 tree of depth D
left the head's package D times an iteration, and between calls the loop built each pass's mask from the
nodes' ancestors, their positions and features, and ranked the w x w candidate children in Python: 1.0 ms of
an iteration's 1.5 ms of bookkeeping for a tree of depth 4 and width 3 on a 2-core AMD EPYC Zen 4
(`scripts/loop_phases.py --tree 4/3/6`), a tenth of a target pass.

`HeadTree` is that growth, traced once for a depth D and a width w: the head's pass over the pairs not fed
yet, whose last row's w best tokens are depth 1; then D - 1 passes of w rows, each over the newest depth's
nodes (their tokens, and their parents' output features: the head's guesses of the target's features there),
at position n - 1 + depth, each row seeing the context and its own ancestors only; after each, the w best of
the w x w candidate children by path score (cumulative log-probability, in float64 as Python adds them) form
the next depth, ties to the earlier parent, then the earlier child. A tree's `stop` is a mask here: once no
node of the newest depth reaches a path probability of `stop`, the deeper nodes score -inf and are never
kept, so the tree is the one `grow_tree` grows, though every pass is computed. Out come every drafted node's
token, parent and score, in the order made; the caller keeps the n_nodes best (`tree.best_nodes`, the rule
`grow_tree` ends with). So one package serves every budget of its depth and width, whatever its n_nodes or
stop. Greedy growth only: a sampled tree draws its children and keeps the rows they were drawn from, and
stays pass by pass.

`build_tree` compiles it (a minute or two on 2 cores), `python -m specdec_ref compile` for `TREE_SHAPES`;
`CompiledTrees.grow` runs it where the package exists (`FeatureDrafter.propose_tree` asks a compiled head's
`trees` first).
"""
from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

from ..sampling import SamplingConfig, ranked
from ..tree import GrowingTree, Tree, TreeBudget, best_nodes
from .aot import (BLOCK, COMPILED_ATTENTION, MAX_BLOCKS, MAX_QUERY, MIN_BLOCKS, _compile, _dims, package_path)
from .aot_chain import causal_inside, shared_constants
from .aot_head import (RANKED, CompiledHead, HeadKV, HeadPackages, HeadStep, head_example_inputs,
                       head_supported)
from .kernels import attention_implementation

TREE_FORMAT = "tree-2"  # the tree packages' inputs and outputs; a change rebuilds (2: mask made inside)
# (depth, width) of the trees `python -m specdec_ref compile` builds a package for: trees 2/2/3-4 for machines
# where t(k) is flat only to 4-5 rows, 3/3/6-8 for those where it is flat further (`models.method.CANDIDATES`)
TREE_SHAPES = ((2, 2), (3, 3))


def tree_package_path(head, depth: int, width: int) -> Path:
    """Where this machine's package for greedy trees of this depth and width by this head is, or would be."""
    return package_path(head, f"{TREE_FORMAT}-d{int(depth)}w{int(width)}")


class HeadTree(nn.Module):
    """A greedy dynamic tree of depth D and width w grown by a `FeatureHead`, for torch.export:

        (tokens [1, q], table [V, d], features [1, q, d], positions [1, q], write [] long,
         columns [write + q + (D - 1)·w] (0, 1, ...), log_stop [] float64, k_0, v_0, ...)
        -> (tokens and parents of the D·w drafted nodes [2, D·w] long, their path scores [D·w] float64)

    Node i (1-based, in the order made: depth 1's w nodes, then depth 2's, ...) has parent parents[i - 1]
    (0: the root, the context's last token). Pass 0 feeds the q pairs not fed yet at `positions`, under a
    causal mask over the first write + q columns, made inside (`aot_chain.causal_inside`); pass j > 0 feeds
    depth j's nodes, writing their keys and values after the context's (the caller keeps the first write + q
    positions, `HeadKV.length`).
    """

    def __init__(self, head, depth: int, width: int):
        super().__init__()
        if not (isinstance(depth, int) and isinstance(width, int) and depth >= 2 and 1 <= width <= RANKED):
            raise ValueError(f"a tree package grows depth >= 2 (depth 1 is one plain pass) and width 1 to "
                             f"{RANKED} (a head pass ranks that many), got depth {depth!r}, width {width!r}")
        self.step, self.depth, self.width = HeadStep(head), depth, width

    def _pass(self, tokens, table, features, positions, mask):  # [1, n] ... -> ([n, d], Ranked [n, w])
        head = self.step.head
        f = self.step.run(tokens, table, features, positions, mask)[0]  # [n, d]
        keep = head.head.keep_ids
        best = ranked(head.head.reduced_logits(f), keep, min(RANKED, keep.shape[0]))  # as `HeadStep` ranks
        return f, best.logp[:, :self.width].double(), best.tokens[:, :self.width]

    def forward(self, tokens, table, features, positions, write, columns, log_stop, *kv):
        D, w = self.depth, self.width
        self.step.bind(kv, write)
        width = columns.shape[0] - (D - 1) * w  # pass 0 sees write + q positions
        mask = causal_inside(columns[:width], positions, table.dtype)  # [1, 1, q, write + q]
        f, logp, tok = self._pass(tokens, table, features, positions, mask)
        f, score, level = f[-1:].expand(w, -1), logp[-1], tok[-1]  # depth 1: the last row's w best, by rank
        device = tokens.device
        slots = torch.arange(D * w, device=device)
        seen = slots[None, :] == slots[:w, None]  # [w, D·w] each node's ancestors and itself, among the nodes
        context = mask.new_zeros(w, width)  # every node sees the whole context
        lowest = torch.finfo(mask.dtype).min
        tokens_out, parents, scores = [level], [torch.zeros(w, dtype=torch.long, device=device)], [score]
        alive = torch.ones((), dtype=torch.bool, device=device)
        for j in range(1, D):  # pass j: depth j's nodes, their children are depth j + 1
            alive = alive & (score.max() >= log_stop)  # `TreeBudget.stop`: no deeper once none is likely
            nodes = torch.where(seen[:, :j * w], 0.0, lowest).to(mask.dtype)  # [w, j·w]
            f, logp, tok = self._pass(level[None], table, f[None], (positions[:, -1:] + j).expand(1, w),
                                      torch.cat([context, nodes], -1)[None, None])
            candidates = (score[:, None] + logp).flatten()  # [w·w] row: the parent, column: its child's rank
            # the w best, ties to the earlier (a stable sort), then in the order of their parents and ranks
            pick = candidates.sort(descending=True, stable=True).indices[:w].sort().values  # [w]
            row = pick // w
            score = torch.where(alive, candidates[pick], -math.inf)
            level = tok.flatten()[pick]
            f = f[row]  # the parents' features, for the next pass
            seen = seen[row] | (slots[None, :] == slots[j * w:(j + 1) * w, None])
            tokens_out.append(level)
            parents.append(row + 1 + (j - 1) * w)
            scores.append(score)
        return torch.stack([torch.cat(tokens_out), torch.cat(parents)]), torch.cat(scores)


def tree_example_inputs(head, depth: int, width: int, q: int = 3, length: int = MIN_BLOCKS * BLOCK,
                        start: int = 5) -> tuple:
    device = head.fc.weight.device
    return head_example_inputs(head, q, length, start, extra=(
        torch.arange(start + q + (depth - 1) * width, device=device),
        torch.tensor(-math.inf, dtype=torch.float64, device=device)))


def build_tree(head, depth: int, width: int, path: Path | None = None, *, options: dict | None = None,
               verbose: bool = True) -> Path:
    """`build` for greedy trees of one depth and width by a feature head (`HeadTree`)."""
    problem = head_supported(head)
    if problem is not None:
        raise ValueError(f"cannot compile this head's trees: {problem}")
    inputs = tree_example_inputs(head, depth, width)
    q, length, _ = _dims()
    # the mask reaches the deepest pass's last position: at least one cached, one fed, then the nodes
    end = torch.export.Dim("end", min=(depth - 1) * width + 2, max=MAX_BLOCKS * BLOCK)
    shapes = ({1: q}, None, {1: q}, {1: q}, None, {0: end}, None,
              tuple({2: length} for _ in range(len(inputs) - 7)))
    # while exported and compiled
    with attention_implementation(head, COMPILED_ATTENTION), shared_constants():
        return _compile(HeadTree(head, depth, width).eval(), inputs, shapes,
                        Path(path or tree_package_path(head, depth, width)), options,
                        f"the feature head's trees {depth} deep, {width} wide" if verbose else "")


class CompiledTrees(HeadPackages):
    """This machine's tree packages for one feature head, by (depth, width), loaded on first use; `grow` runs
    one. `loading` gives a `CompiledHead` one as its `trees`, which `FeatureDrafter.propose_tree` asks
    first."""
    KEYS = TREE_SHAPES

    def __init__(self, head):
        super().__init__(head)
        self.stops = {}  # 0-d log(stop) tensors, kept

    def path(self, shape: tuple[int, int]) -> Path:
        return tree_package_path(self.head, *shape)

    def serves(self, budget, depth: int, sampling: SamplingConfig, q: int) -> bool:
        """Whether `grow` grows this tree (`depth` deep: a budget's own depth, or less near the end of a
        generation) after q pairs not fed yet: a greedy `TreeBudget` whose depth and width this machine has a
        package for, and at most MAX_QUERY pairs (else the caller grows it pass by pass)."""
        return (isinstance(budget, TreeBudget) and sampling.greedy and depth == budget.depth
                and 1 <= q <= MAX_QUERY and (depth, budget.topk) in TREE_SHAPES
                and self.runner((depth, budget.topk)) is not None)

    def grow(self, hidden: torch.Tensor, tokens: torch.Tensor, cache: HeadKV, root: int,
             budget: TreeBudget) -> tuple[Tree, list[int]]:  # [q, d], [q] -> (Tree, tokens)
        """Feed the pairs (hidden, tokens) into a `HeadKV` cache and grow a greedy tree after them in one call
        (where it `serves`): the tree and its tokens (node 0: root), as `tree.grow_tree` grows it."""
        q, D, w = tokens.shape[0], budget.depth, budget.topk
        weight = self.head.fc.weight
        start, device = cache.length, weight.device
        n = q + (D - 1) * w  # the rows its passes write
        cache.make_room(start + n)
        if budget.stop not in self.stops:
            log_stop = math.log(budget.stop) if budget.stop > 0 else -math.inf
            self.stops[budget.stop] = torch.tensor(log_stop, dtype=torch.float64, device=device)
        nodes, scores = self.runner((D, w))(
            tokens[None], self.head.embed.weight, hidden[None].to(weight.dtype),
            cache.counter.positions(start, q), cache.counter.scalar(start),
            cache.counter.columns(start + n), self.stops[budget.stop], *cache.kv)
        cache.length = start + q  # the pairs fed stay; the nodes' positions are left to be overwritten
        drafted, parents = nodes.tolist()
        g = GrowingTree([-1] + parents, [root] + drafted, [0] + [1 + i // w for i in range(D * w)],
                        [0.0] + scores.tolist())
        tree, keep = best_nodes(g, budget.n_nodes)
        return tree, [g.tokens[v] for v in keep]


def attach_trees(head) -> None:
    """Give a `CompiledHead` this machine's tree packages (`CompiledTrees`, loaded when first asked)."""
    if isinstance(head, CompiledHead):
        head.__dict__["trees"] = CompiledTrees(head.inner)
