"""One step of verify emits a token distributed exactly as target_probs[0]: by computation and by Monte
Carlo."""
from collections import Counter

import pytest
import torch

from specdec_ref import SamplingConfig, accepted_mass, logits_to_probs, residual, verify
from specdec_ref.lab.broken import verify_argmax, verify_target_off_by_one, verify_without_residual
from specdec_ref.lab.stats import SIGNIFICANCE, chi_square_gof, emitted_token_counts

V = 8


def _rows(name: str):
    """(target_row, draft_row) pairs covering the edge cases the rule must handle."""
    g = torch.Generator().manual_seed(7)
    t = torch.randn(V, generator=g, dtype=torch.float64).softmax(-1)
    d = torch.randn(V, generator=g, dtype=torch.float64).softmax(-1)
    if name == "random":
        return t, d
    if name == "zeros_in_draft":  # the draft never proposes tokens 0-2, the target likes them
        d[:3] = 0
        return t, d / d.sum()
    if name == "zeros_in_target":  # the draft proposes tokens the target forbids
        t[4:] = 0
        return t / t.sum(), d
    if name == "top_k_truncated":
        logits_t, logits_d = t.log(), d.log()
        return (logits_to_probs(logits_t, SamplingConfig(top_k=3)),
                logits_to_probs(logits_d, SamplingConfig(top_k=3)))
    if name == "top_p_truncated":
        return (logits_to_probs(t.log(), SamplingConfig(top_p=0.6)),
                logits_to_probs(d.log(), SamplingConfig(top_p=0.6)))
    if name == "identical":
        return t, t.clone()
    if name == "disjoint":  # no overlap at all: every draft token is rejected
        t[4:] = 0
        d[:4] = 0
        return t / t.sum(), d / d.sum()
    raise KeyError(name)


CASES = ["random", "zeros_in_draft", "zeros_in_target", "top_k_truncated", "top_p_truncated", "identical",
         "disjoint"]


@pytest.mark.parametrize("case", CASES)
def test_accepted_plus_rejected_mass_equals_target_exactly(case):
    """P(x) = min(p_target, p_draft)(x) + (1 - sum min) * residual(x) = p_target(x), with verify's own
    helpers."""
    target, draft = _rows(case)
    accepted = accepted_mass(target, draft)
    emitted = accepted + (1 - accepted.sum()) * residual(target, draft)
    torch.testing.assert_close(emitted, target, atol=1e-12, rtol=0)


def test_identity_fails_for_a_wrong_residual():
    """The identity check has power: resampling from p_target after a rejection breaks it."""
    target, draft = _rows("random")
    accepted = accepted_mass(target, draft)
    assert (accepted + (1 - accepted.sum()) * target - target).abs().max() > 1e-2


def _first_token_counts(verify_fn, target, draft, n: int, seed: int) -> Counter:
    return emitted_token_counts(verify_fn, target, draft, n, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("case", CASES)
def test_verify_monte_carlo_matches_target_by_chi_square(case):
    target, draft = _rows(case)
    result = chi_square_gof(_first_token_counts(verify, target, draft, 8000, seed=1),
                            {i: float(p) for i, p in enumerate(target)})
    assert not result.rejects(SIGNIFICANCE), f"{case}: {result}"


@pytest.mark.parametrize("broken", [verify_without_residual, verify_argmax])
def test_chi_square_rejects_broken_single_step_samplers(broken):
    target, draft = _rows("random")
    result = chi_square_gof(_first_token_counts(broken, target, draft, 8000, seed=1),
                            {i: float(p) for i, p in enumerate(target)})
    assert result.rejects(SIGNIFICANCE), f"{broken.__name__} was not caught: {result}"


def test_chi_square_rejects_target_row_off_by_one():
    g = torch.Generator().manual_seed(3)
    rows = torch.randn(2, V, generator=g, dtype=torch.float64).softmax(-1)  # two different target positions
    draft = torch.randn(V, generator=g, dtype=torch.float64).softmax(-1)
    counts = Counter()
    xs = torch.multinomial(draft, 8000, replacement=True, generator=g)  # [n] the draft's proposals
    for x in xs:  # two different target rows, so emitted_token_counts (one row, repeated) cannot show the bug
        n_acc, nxt = verify_target_off_by_one(x[None], draft[None], rows, g)
        counts[int(x) if n_acc == 1 else int(nxt)] += 1
    assert chi_square_gof(counts, {i: float(p) for i, p in enumerate(rows[0])}).rejects(SIGNIFICANCE)


def test_greedy_one_hot_reduces_to_accept_while_draft_equals_target_argmax():
    """With one-hot rows, verify accepts exactly the prefix where draft == target argmax, then emits the
    argmax."""
    eye = torch.eye(V, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        draft_tokens = torch.randint(0, V, (4,), generator=g)
        target_argmax = torch.where(torch.rand(5, generator=g) < 0.6,
                                    torch.cat([draft_tokens, draft_tokens[:1]]),
                                    torch.randint(0, V, (5,), generator=g))
        n, nxt = verify(draft_tokens, eye[draft_tokens], eye[target_argmax], g)
        expected_n = next((i for i in range(4) if draft_tokens[i] != target_argmax[i]), 4)
        assert n == expected_n and int(nxt) == int(target_argmax[expected_n])


def test_verify_accepts_everything_when_draft_equals_target_and_takes_a_bonus():
    target, _ = _rows("random")
    g = torch.Generator().manual_seed(0)
    draft_tokens = torch.multinomial(target, 3, replacement=True, generator=g)
    n, nxt = verify(draft_tokens, target.expand(3, V), target.expand(4, V), g)
    assert n == 3 and nxt.shape == (1,)


def test_verify_never_accepts_a_token_the_target_forbids():
    target, draft = _rows("zeros_in_target")
    g = torch.Generator().manual_seed(0)
    for x in range(4, V):  # target probability 0
        for _ in range(50):
            n, nxt = verify(torch.tensor([x]), draft[None], torch.stack([target, target]), g)
            assert n == 0 and target[nxt] > 0
