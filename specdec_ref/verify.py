"""The accept/reject rule that makes speculative decoding exact.

Notation, used the same way in the chapters:
  target_probs  p_target, the distribution the big model wants to sample from
  draft_probs   p_draft, the distribution the cheap draft actually sampled from

For one position, the token the rule emits is distributed as

  P(x) = min(p_target, p_draft)(x) + (1 - sum_y min(p_target, p_draft)(y)) * residual(x)
       = p_target(x),

where residual = normalise(max(p_target - p_draft, 0)). `accepted_mass` and
`residual` are the two terms; the tests add them up and check the identity.

`verify` judges a chain token by token, as Leviathan et al. (2023) and Chen et al. (2023) do. `verify_block`
judges the whole chain at once (Sun et al. 2025, block verification): the same output law, and never fewer
tokens kept on average. `verify_tree` walks a tree of guesses (tree.py), the same rule tried child by child.
"""
from __future__ import annotations

import torch

from .sampling import sample


def accepted_mass(target_probs: torch.Tensor,
                  draft_probs: torch.Tensor) -> torch.Tensor:  # [..., V] x2 -> [..., V]
    """P(draft proposes x and x is accepted) = p_draft(x) * min(1, p_target(x)/p_draft(x))
    = min(p_target, p_draft)(x)."""
    return torch.minimum(target_probs, draft_probs)


def residual(target_probs: torch.Tensor,
             draft_probs: torch.Tensor) -> torch.Tensor:  # [..., V] x2 -> [..., V]
    """The mass the target wanted but the draft under-weighted: normalise(max(p_target - p_draft, 0))."""
    r = (target_probs - draft_probs).clamp_(min=0)
    total = r.sum(-1, keepdim=True)  # [..., 1]
    # total == 0 only when p_target == p_draft, and then a rejection has probability zero;
    # fall back to p_target so that rounding can never produce NaNs.
    return torch.where(total > 0, r.div_(total.clamp(min=torch.finfo(r.dtype).tiny)), target_probs)


def verify(
    draft_tokens: torch.Tensor,  # [γ] tokens the draft proposed
    draft_probs: torch.Tensor,  # [γ, V] the distributions they were sampled from
    target_probs: torch.Tensor,  # [γ+1, V] the target's distributions at the same positions, plus one
    generator: torch.Generator | None = None,
) -> tuple[int, torch.Tensor]:  # -> (n_accepted, next_token [1])
    """Accept a prefix of the draft, then emit one more token (a replacement or a bonus)."""
    gamma = draft_tokens.shape[0]
    # γ uniforms for the tests and one for the token emitted after them, in one call
    u = torch.rand(gamma + 1, generator=generator, device=target_probs.device, dtype=torch.float64)  # [γ+1]
    picked = draft_tokens[:, None]  # [γ, 1]
    p_target, p_draft = target_probs[:gamma].gather(1, picked), draft_probs.gather(1, picked)  # [γ, 1] each
    # accept x_i with probability min(1, p_target(x_i) / p_draft(x_i)); written without the division,
    # so a token the target gives probability 0 is never accepted. All γ tests at once, as in gpt-fast, and
    # copied to Python once (after a target pass, each small tensor operation costs tens of microseconds)
    accepted = (u[:gamma, None] * p_draft < p_target).tolist()  # γ lists of one bool
    n = next((i for i, (ok,) in enumerate(accepted) if not ok), gamma)  # up to the first rejection
    if n < gamma:  # first rejection: replace x_n by a sample from the residual, discard the rest of the draft
        return n, sample(residual(target_probs[n], draft_probs[n]), generator, uniform=u[gamma:])
    # every draft token was accepted: the target's last row gives one bonus token for free
    return gamma, sample(target_probs[gamma], generator, uniform=u[gamma:])


def block_weights(draft_tokens: torch.Tensor, draft_probs: torch.Tensor,
                  target_probs: torch.Tensor) -> tuple[list[float], list[float]]:  # -> γ+1 floats, twice
    """Block verification's two sequences for one drafted chain x_1..x_γ (Sun et al. 2025).

    w_i = min(w_{i-1} p_target(x_i) / p_draft(x_i), 1), w_0 = 1: how far the target's law of the first i
    tokens still covers the draft's, capped at 1. h_i is the probability of keeping exactly x_1..x_i once
    every longer prefix was turned down: h_γ = w_γ, and for i < γ, with m_i = Σ_y max(w_i p_target_{i+1}(y) -
    p_draft_{i+1}(y), 0), h_i = m_i / (m_i + 1 - w_i) (1 where w_i = 1, so h_0 = 1).
    """
    gamma = draft_tokens.shape[0]
    rows = torch.arange(gamma, device=target_probs.device)
    ratio = (target_probs[rows, draft_tokens].double()
             / draft_probs[rows, draft_tokens].double().clamp(min=torch.finfo(torch.float64).tiny)).tolist()
    w = [1.0]
    for r in ratio:  # γ scalars
        w.append(min(w[-1] * r, 1.0))
    # m_i over the vocabulary, in the rows' own dtype and in place: one [γ, V] buffer (on a CPU, fresh buffers
    # of a few MB each cost more than the arithmetic)
    excess = target_probs[:gamma] * torch.tensor(w[:gamma], dtype=target_probs.dtype,
                                                 device=target_probs.device)[:, None]  # [γ, V]
    m = excess.sub_(draft_probs).clamp_(min=0).sum(-1).tolist()  # γ floats
    # m_i + 1 - w_i > 0 wherever w_i < 1; where w_i = 1 the prefix is kept outright
    h = [1.0 if w[i] >= 1 else m[i] / (m[i] + 1 - w[i]) for i in range(gamma)] + [w[gamma]]
    return w, h


def verify_block(
    draft_tokens: torch.Tensor,  # [γ] tokens the draft proposed
    draft_probs: torch.Tensor,  # [γ, V] the distributions they were sampled from
    target_probs: torch.Tensor,  # [γ+1, V] the target's distributions at the same positions, plus one
    generator: torch.Generator | None = None,
) -> tuple[int, torch.Tensor]:  # -> (n_accepted, next_token [1])
    """`verify`'s contract, judged as a block: keep the longest prefix x_1..x_n whose own test passes, testing
    from the whole chain down (`block_weights`), then emit one more token: a bonus from the target's last row
    if n = γ, else a sample of normalise(max(w_n p_target_{n+1} - p_draft_{n+1}, 0)).

    Token by token, a draft token the target under-weights ends the chain even when the tokens before it were
    under-drafted by as much: the target had mass to spare there. Block verification carries that spare mass
    (w) down the chain, so it keeps at least as many tokens on average, with the same output law.
    """
    gamma = draft_tokens.shape[0]
    w, h = block_weights(draft_tokens, draft_probs, target_probs)
    u = torch.rand(gamma, generator=generator, device=target_probs.device, dtype=torch.float64).tolist()
    # the tests of prefixes γ, γ-1, ..., 1 (u[i - 1] for prefix i); prefix 0 always passes
    n = max((i for i in range(1, gamma + 1) if u[i - 1] < h[i]), default=0)
    if n == gamma:
        return gamma, sample(target_probs[gamma], generator)
    r = (w[n] * target_probs[n] - draft_probs[n]).clamp(min=0)  # [V], unnormalised (`sample` scales by it)
    # a zero total has probability 0 (h_n = 0 then, or w_n = 1 and a longer prefix passed): fall back, as
    # `residual` does
    return n, sample(r, generator, otherwise=target_probs[n])


def expected_accepted(draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
                      rule: str = "token") -> float:  # [γ], [γ, V], [γ+1, V] -> E[n_accepted]
    """The draft tokens a rule keeps on average for this drafted chain, exactly (no random draw): token by
    token, Σ_i Π_{j≤i} min(1, p_target(x_j) / p_draft(x_j)); as a block, Σ_i i h_i Π_{j>i} (1 - h_j)
    (`block_weights`). Judging both rules on the same drafts compares them without sampling noise."""
    if rule == "token":
        rows = torch.arange(draft_tokens.shape[0], device=target_probs.device)
        ratio = target_probs.double()[rows, draft_tokens] / draft_probs.double()[rows, draft_tokens]
        return float(ratio.clamp(max=1).cumprod(0).sum())
    if rule != "block":
        raise ValueError(f"rule must be 'token' or 'block', got {rule!r}")
    h = block_weights(draft_tokens, draft_probs, target_probs)[1]  # γ+1 floats
    kept, untested = 0.0, 1.0  # untested: the chance that every longer prefix was turned down
    for i in range(len(h) - 1, 0, -1):
        kept += i * untested * h[i]
        untested *= 1 - h[i]
    return kept


def verify_greedy(draft_tokens: torch.Tensor,
                  target_tokens: torch.Tensor) -> tuple[int, torch.Tensor]:  # [γ], [γ+1] -> (n, [1])
    """`verify` at temperature 0, from the target's argmax tokens alone (`target_logits.argmax(-1)`).

    With one-hot target rows the rule above accepts x_i exactly when it is the target's argmax (p_target(x_i)
    is 1 or 0, and u * p_draft < 1), whatever the draft's rows are, and a rejection's residual is the one-hot
    row again. So the accepted prefix is the draft's agreement with the argmax, and the next token is the
    argmax after it: the same tokens, with no row of probabilities built and no random draw.
    """
    # γ + 1 integers copied once, compared in Python (four tensor operations cost more after a target pass)
    drafted, best = draft_tokens.tolist(), target_tokens.tolist()
    n = next((i for i, (x, y) in enumerate(zip(drafted, best)) if x != y), len(drafted))  # the first miss
    return n, target_tokens[n:n + 1]


# ----------------------------------------------------------------------------------------------
# Verifying a tree: one walk, q chosen per child. `tree` is a `tree.Tree`; the walk asks only for each
# node's children (`tree.children(node)`, breadth first), so this floor needs nothing from the one above it.
# ----------------------------------------------------------------------------------------------

def verify_tree(tree, node_tokens: torch.Tensor, target_probs: torch.Tensor,
                draft_probs: torch.Tensor | None = None, generator: torch.Generator | None = None,
                replacement: bool = True,
                ) -> tuple[list[int], torch.Tensor]:  # [n_nodes+1], [n_nodes+1, V] x2 -> (path, [1])
    """Walk down from the root, keeping an exact path; then emit one more token. Returns (path node ids, [1]).

    At a node, with p = target_probs[node], try the children in order. Child x has proposal q:
    draft_probs[node] for i.i.d. sampled children (SpecInfer, Miao et al. 2024, Alg. 2), or one_hot(x) when
    draft_probs is None (children chosen deterministically, distinct). Accept x with probability
    min(1, p(x)/q(x)); on rejection set p = residual(p, q) = normalise(max(p - q, 0)) and try the next
    sibling. If every child is rejected, emit a sample of the current p (at a leaf, p is still
    target_probs[leaf]: the bonus token). replacement=False: the children were drawn from draft_probs[node]
    without replacement (a dynamic tree at T > 0, `grow_tree`), so the next sibling's proposal is q with the
    rejected x removed and renormalised, and that q is the one the next residual is taken against (Jeon et
    al. 2024, recursive rejection sampling).

    Exact, because each try emits min(p, q) and passes on the rest, which by induction is distributed as
    residual(p, q): the sum is p. This holds for any q the next sibling is truly drawn from given the
    siblings before it: the same q for i.i.d. children, q without the tried tokens for distinct ones. With
    point masses, child i is emitted with probability p(x_i), and any other token x with probability
    (1 - sum_i p(x_i)) * p(x) / (1 - sum_i p(x_i)) = p(x).
    Greedy is this walk on one-hot rows: x is accepted exactly when it is the target's argmax, and a
    rejection leaves the one-hot row as it was. The loop's greedy path walks on the argmax tokens instead
    (`verify_tree_greedy`), which skips building the rows at all; the tests check that both walks agree.
    """
    path, node = [], 0
    while True:
        p = target_probs[node]  # [V]
        q = None if draft_probs is None else draft_probs[node]  # [V]
        for child in tree.children(node):
            x = node_tokens[child]
            p_x, q_x = float(p[x]), 1.0 if q is None else float(q[x])
            u = float(torch.rand((), generator=generator, device=p.device, dtype=p.dtype))
            # accept x with probability min(1, p_target(x) / p_draft(x)), p_target the current residual
            if u * q_x < p_x:
                break
            # rejected: the next sibling is judged against what is left of the target
            if q is not None:
                p = residual(p, q)
                if not replacement:  # the next sibling was drawn from q without x
                    q = q.index_fill(0, x[None], 0.0)
                    q = q / q.sum().clamp(min=torch.finfo(q.dtype).tiny)
            elif p_x > 0:  # removing a point mass on a token p gives 0 would leave p as it is
                p = residual(p, torch.zeros_like(p).index_fill_(0, x[None], 1.0))
        else:
            return path, sample(p, generator)
        node = child
        path.append(node)


def verify_tree_greedy(tree, node_tokens: torch.Tensor,  # [n+1] x2 -> (path, [1])
                       target_tokens: torch.Tensor) -> tuple[list[int], torch.Tensor]:
    """`verify_tree` at temperature 0, from the target's argmax token at every node (`logits.argmax(-1)`).

    On one-hot rows the walk above accepts a child exactly when its token is the argmax at its parent, and
    a rejected child leaves the row as it was (whatever the draft's rows are). So the path follows the
    children that match the argmax, and the next token is the argmax where it stops: the same path and
    token, from one copy of n_nodes + 1 integers instead of vocabulary-wide rows.
    """
    tokens, best = node_tokens.tolist(), target_tokens.tolist()
    path, node = [], 0
    while (child := next((c for c in tree.children(node) if tokens[c] == best[node]), None)) is not None:
        node = child
        path.append(node)
    return path, target_tokens[node:node + 1]
