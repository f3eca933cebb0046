"""Adaptive draft length (confidence stop, Hugging Face's +2/-1 schedule) keeps speculative decoding exact.

Whether a drafter drafts position i may depend on anything fixed before its guess at i is drawn (the
draft's confidence so far, or, for the +2/-1 schedule, the target's verdicts on earlier iterations), but not
on that guess or on this pass's accept/reject draws (chapter 4: the length is a stopping time); the loop is
unchanged, so the output must still be greedy decoding's tokens
(greedy) and the target's distribution (sampling,
chi-square at level SIGNIFICANCE on the vocabulary-3 toy pair, seeds fixed, as in test_exactness.py).
"""
import pytest
import torch

import specdec_ref as sd
from specdec_ref.lab.broken import using_verify, verify_without_residual
from specdec_ref.lab.stats import SIGNIFICANCE, chi_square_gof, speculative_sequence_counts
from specdec_ref.models.toy import exact_sequence_distribution, tiny_pair

GREEDY, T1 = sd.SamplingConfig(temperature=0), sd.SamplingConfig(1.0)
VOCAB, PROMPT, N_TOKENS, N_SAMPLES = 3, [1, 2, 0], 5, 2000


def adaptive_drafters(draft):
    return {"confidence stop": sd.ModelDrafter(draft, confidence_stop=0.6),
            "+2/-1 schedule": sd.ScheduledDrafter(sd.ModelDrafter(draft), start=1),
            "both": sd.ScheduledDrafter(sd.ModelDrafter(draft, confidence_stop=0.6), start=2)}


@pytest.mark.parametrize("name", ["confidence stop", "+2/-1 schedule", "both"])
def test_greedy_adaptive_speculative_equals_greedy_target(name):
    for seed in range(3):
        target, draft = tiny_pair(vocab_size=8, seed=seed, noise=0.3, hidden=32, n_layers=2)
        ids = torch.tensor([[seed + 1, 2, 3, 4]])
        plain = sd.autoregressive_generate(target, ids, 40, sampling=GREEDY).tokens.tolist()
        drafter = adaptive_drafters(draft)[name]
        spec = sd.speculative_generate(target, drafter, ids, 40, gamma=6, sampling=GREEDY)
        assert spec.tokens.tolist() == plain
        assert len(set(spec.stats.drafted)) > 1, "the draft length never changed: nothing adaptive was tested"


def test_confidence_stop_proposes_fewer_tokens_when_unsure():
    _, draft = tiny_pair(vocab_size=8, seed=0, noise=0.3, hidden=32, n_layers=2)
    ids = torch.tensor([1, 2, 3, 4])
    # no distribution has top probability >= 1: stop at once
    always = sd.ModelDrafter(draft, confidence_stop=1.0)
    never = sd.ModelDrafter(draft, confidence_stop=0.0)
    assert always.propose(ids, 5, T1)[0].shape[0] == 1
    assert never.propose(ids, 5, T1)[0].shape[0] == 5


class Fixed:  # proposes exactly what it is asked for (or nothing, if empty)
    vocab_size, default_gamma, wants_target_hidden, n_cached = 3, 7, False, 0

    def __init__(self, empty: bool = False):
        self.empty, self.calls = empty, 0

    def propose(self, context_ids, gamma, sampling, generator=None):
        self.calls += 1
        n = 0 if self.empty else gamma
        return torch.zeros(n, dtype=torch.long), torch.full((n, 3), 1 / 3)

    def sync(self, n_kept, target_hidden=None):
        pass


def test_schedule_grows_by_two_after_full_acceptance_and_shrinks_by_one_otherwise():
    s = sd.ScheduledDrafter(Fixed(), start=4)
    ctx = torch.zeros(10, dtype=torch.long)
    s.propose(ctx, 16, T1); s.sync(10 + 4)  # all 4 accepted      # noqa: E702
    assert s.num_tokens == 6
    s.propose(ctx, 16, T1); s.sync(10 + 2)  # 2 of 6 accepted     # noqa: E702
    assert s.num_tokens == 5
    assert s.propose(ctx, 3, T1)[0].shape[0] == 3  # the loop's γ caps the schedule
    s.sync(0)
    assert s.num_tokens == 4 and s.history == []


def test_schedule_does_not_grow_when_nothing_was_proposed():
    s = sd.ScheduledDrafter(Fixed(empty=True), start=4)
    ctx = torch.zeros(10, dtype=torch.long)
    for _ in range(3):
        assert s.propose(ctx, 16, T1)[0].shape[0] == 0
        s.sync(10)  # nothing proposed, nothing accepted: no evidence that longer drafts would pay
    assert s.num_tokens == 4


def test_schedule_forwards_every_member_of_the_contract():
    inner = Fixed()
    s = sd.ScheduledDrafter(inner)
    assert isinstance(s, sd.Drafter)
    assert (s.vocab_size, s.default_gamma, s.wants_target_hidden, s.calls, s.n_cached) == (3, 7, False, 0, 0)
    s.propose(torch.zeros(5, dtype=torch.long), 2, T1)
    assert s.calls == inner.calls == 1


def test_adaptive_options_refuse_bad_values():
    _, draft = tiny_pair(vocab_size=3, seed=0)
    with pytest.raises(ValueError, match="confidence_stop"):
        sd.ModelDrafter(draft, confidence_stop=1.5)
    with pytest.raises(ValueError, match="start"):
        sd.ScheduledDrafter(sd.ModelDrafter(draft), start=0)


# --- sampling: whole sequences against the exact distribution ----------------------------------------------

@pytest.fixture(scope="module")
def pair3():
    return tiny_pair(vocab_size=VOCAB, seed=0, noise=0.3)


def _counts(target, drafter, gamma, seed=0):
    return speculative_sequence_counts(target, drafter, PROMPT, N_TOKENS, gamma, T1, N_SAMPLES,
                                       torch.Generator().manual_seed(seed))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["confidence stop", "+2/-1 schedule", "both"])
def test_adaptive_speculative_sequences_match_exact_target_distribution(pair3, name):
    target, draft = pair3
    drafter = adaptive_drafters(draft)[name]
    result = chi_square_gof(_counts(target, drafter, 4),
                            exact_sequence_distribution(target, PROMPT, N_TOKENS, T1))
    assert not result.rejects(SIGNIFICANCE), f"{name}: {result}"


@pytest.mark.slow
def test_chi_square_rejects_broken_verify_behind_adaptive_drafter(pair3):
    """Power: the same test, with the residual step broken, does reject."""
    target, draft = pair3
    with using_verify(verify_without_residual):
        c = _counts(target, adaptive_drafters(draft)["both"], 4)
    assert chi_square_gof(c, exact_sequence_distribution(target, PROMPT, N_TOKENS, T1)).rejects(SIGNIFICANCE)
