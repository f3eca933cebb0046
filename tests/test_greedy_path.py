"""The loop's greedy shortcut: verification from the target's argmax tokens alone (`verify_greedy`,
`verify_tree_greedy`) and drafting from the argmax (`sampling.draw`, the feature head's reduced argmax) must
give exactly what the general rule gives on one-hot rows. Each test also runs a broken shortcut, which must
differ."""
import pytest
import torch

import specdec_ref as sd
from specdec_ref.lab.broken import using_verify
from specdec_ref.models.offline_draft import ReducedHead
from specdec_ref.models.toy import tiny_pair
from specdec_ref.sampling import argmax, draw, logits_to_probs, point_masses, sample
from specdec_ref.tree import Tree, verify_tree, verify_tree_greedy
from specdec_ref.verify import verify, verify_greedy

GREEDY = sd.SamplingConfig(0)
V = 12


def tied_logits(rows: int, g: torch.Generator) -> torch.Tensor:  # [rows, V] in bfloat16, with ties
    return torch.randint(-3, 3, (rows, V), generator=g).to(torch.bfloat16)  # six values: ties everywhere


def draft_rows(rows: int, g: torch.Generator, soft: bool) -> torch.Tensor:  # [rows, V] draft distributions
    if soft:
        return torch.rand(rows, V, generator=g, dtype=torch.float64).softmax(-1).float()
    return point_masses(torch.randint(0, V, (rows,), generator=g), V, torch.float32)


def verify_greedy_off_by_one(draft_tokens, target_tokens):  # broken: the token after the one it should emit
    n, _ = verify_greedy(draft_tokens, target_tokens)
    return n, target_tokens[min(n + 1, target_tokens.shape[0] - 1)][None]


@pytest.mark.parametrize("soft", [False, True])
def test_verify_greedy_equals_verify_on_one_hot_target_rows(soft):
    g = torch.Generator().manual_seed(0)
    broken_differs = 0
    for trial in range(300):
        gamma = trial % 5 + 1
        logits = tied_logits(gamma + 1, g)
        best = logits.argmax(-1)
        # drafts that agree with the argmax for a while, then guess
        draft = torch.where(torch.rand(gamma, generator=g) < 0.6, best[:gamma], torch.randint(0, V, (gamma,),
                                                                                             generator=g))
        want = verify(draft, draft_rows(gamma, g, soft), logits_to_probs(logits, GREEDY), g)
        got = verify_greedy(draft, best)
        assert (got[0], got[1].tolist()) == (want[0], want[1].tolist())
        bad = verify_greedy_off_by_one(draft, best)
        broken_differs += (bad[0], bad[1].tolist()) != (want[0], want[1].tolist())
    assert broken_differs > 30  # power: the broken shortcut is caught on these same cases


def verify_tree_greedy_last_match(tree, node_tokens, target_tokens):  # broken: the last matching sibling
    tokens, best = node_tokens.tolist(), target_tokens.tolist()
    path, node = [], 0
    while True:
        match = [c for c in tree.children(node) if tokens[c] == best[node]]
        if not match:
            return path, target_tokens[node:node + 1]
        node = match[-1]
        path.append(node)


@pytest.mark.parametrize("soft", [False, True])
@pytest.mark.parametrize("branching", [(3, 2, 1), (2, 2, 2), (4, 1, 1, 1)])
def test_verify_tree_greedy_equals_the_one_walk_on_one_hot_rows(soft, branching):
    tree = Tree.from_branching(branching)
    g = torch.Generator().manual_seed(1)
    broken_differs = 0
    for _ in range(200):
        logits = tied_logits(tree.size + 1, g)
        best = logits.argmax(-1)
        # node tokens drawn from a few values, so siblings repeat tokens and match the argmax often
        node_tokens = torch.randint(0, 3, (tree.size + 1,), generator=g)
        draft = draft_rows(tree.size + 1, g, soft) if soft else None
        path, token = verify_tree(tree, node_tokens, logits_to_probs(logits, GREEDY), draft, g)
        got = verify_tree_greedy(tree, node_tokens, best)
        assert (got[0], got[1].tolist()) == (path, token.tolist())
        bad = verify_tree_greedy_last_match(tree, node_tokens, best)
        broken_differs += (bad[0], bad[1].tolist()) != (path, token.tolist())
    assert broken_differs > 0  # power: duplicated matching siblings change the path


def test_draw_greedy_gives_the_token_and_row_that_logits_to_probs_and_sample_give():
    g = torch.Generator().manual_seed(2)
    for _ in range(200):
        logits = tied_logits(1, g)[0]
        probs = logits_to_probs(logits, GREEDY)
        token, row = draw(logits, GREEDY)
        assert token.tolist() == sample(probs, g).tolist() and torch.equal(row, probs)
        assert row.dtype == probs.dtype
    # power: a tie goes to the first index; taking the last one (a broken argmax) would be caught above
    logits = torch.tensor([1.0, 3.0, 3.0, 0.0])
    last_of_ties = logits.shape[0] - 1 - int(torch.flip(logits, [0]).argmax())
    assert int(draw(logits, GREEDY)[0]) == int(sample(logits_to_probs(logits, GREEDY))) == 1 != last_of_ties


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
def test_argmax_takes_the_first_index_on_ties_as_torch_argmax_does(dtype):
    g = torch.Generator().manual_seed(3)
    for rows, vocab in ((1, 8), (5, 49152), (3, 8192)):
        x = torch.randint(-2, 3, (rows, vocab), generator=g).to(dtype)  # five values: many ties per row
        assert torch.equal(argmax(x), x.argmax(-1))
        last = vocab - 1 - torch.flip(x, [-1]).argmax(-1)  # the last index of each row's maximum
        assert vocab < 100 or not torch.equal(argmax(x), last)  # power: wide rows have ties at the maximum


def test_a_reduced_head_refuses_keep_ids_out_of_order():
    embedding = torch.nn.Parameter(torch.randn(10, 4))
    ReducedHead(embedding, torch.tensor([1, 4, 7]))  # ascending: fine
    with pytest.raises(ValueError, match="ascending"):
        ReducedHead(embedding, torch.tensor([4, 1, 7]))


def test_using_verify_judges_greedy_chains_too():
    """A swapped verify must run under greedy as well (the shortcut is off inside the block): accepting
    every draft token changes the greedy output, and with the package's own verify it does not."""
    target, draft = tiny_pair(vocab_size=8, seed=0, noise=0.3, hidden=32, n_layers=2)
    ids = torch.tensor([[1, 2, 3, 4]])
    plain = sd.autoregressive_generate(target, ids, 40, sampling=GREEDY).tokens.tolist()
    with using_verify(verify):
        same = sd.speculative_generate(target, draft, ids, 40, gamma=4, sampling=GREEDY).tokens.tolist()
    accept_all = lambda toks, dp, tp, g=None: (toks.shape[0], tp[-1].argmax()[None])  # noqa: E731
    with using_verify(accept_all):
        wrong = sd.speculative_generate(target, draft, ids, 40, gamma=4, sampling=GREEDY).tokens.tolist()
    assert same == plain and wrong != plain


@pytest.mark.parametrize("how", [dict(gamma=3), dict(tree=(2, 2))])
def test_greedy_steps_build_the_targets_one_hot_rows_only_when_read(how, monkeypatch):
    """Greedy verification never reads the target's rows: a Step builds them on first read, once, and they are
    the one-hot rows on the target's argmax that the eager rule would have made."""
    from specdec_ref import generate
    target, draft = tiny_pair(vocab_size=8, seed=0, noise=0.3, hidden=32, n_layers=2)
    ids = torch.tensor([[1, 2, 3, 4]])
    built = []
    real = generate.point_masses
    monkeypatch.setattr(generate, "point_masses", lambda *a: built.append(1) or real(*a))
    sd.speculative_generate(target, draft, ids, 20, sampling=GREEDY, **how)
    assert built == []  # nobody looked: nothing built
    steps = []
    out = sd.speculative_generate(target, draft, ids, 20, sampling=GREEDY, on_step=steps.append, **how)
    assert built == [] and steps
    for step in steps:
        rows = step.target_probs
        assert rows is step.target_probs and rows.shape == (step.n_drafted + 1, 8)  # built once
        assert torch.equal(rows.sum(-1), torch.ones(rows.shape[0])) and set(rows.unique().tolist()) == {0, 1}
    assert len(built) == len(steps)
    tokens, path = out.tokens.tolist(), steps[0]
    # power: the rows are the target's own argmax, so the first step's next token is where its row is 1
    row = path.n_accepted if path.path is None else (path.path[-1] if path.path else 0)
    assert tokens[path.n_accepted] == int(path.target_probs[row].argmax())
