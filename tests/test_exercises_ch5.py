"""Chapter 5's checkers: untouched answers say "Not attempted yet", wrong ones fail with a hint, right ones pass."""
import pytest
import torch

from specdec_ref.chapters.exercises import ch5
from specdec_ref.chapters.exercises.common import NOT_ATTEMPTED
from specdec_ref.drafters import NgramDrafter


def test_check_winner_not_attempted(capsys):
    ch5.check_winner(None)
    assert NOT_ATTEMPTED in capsys.readouterr().out


def test_check_winner_accepts_the_best_draft_and_gamma(capsys):
    ch5.check_winner(("feature head", 5))
    assert "Correct" in capsys.readouterr().out


@pytest.mark.parametrize("answer", [("big LM draft", 3), ("feature head", 4), ("tiny LM draft", 4)])
def test_check_winner_rejects_wrong_answers(answer):
    with pytest.raises(AssertionError):
        ch5.check_winner(answer)


def test_check_drafter_not_attempted(capsys):
    def make(vocab_size):
        raise NotImplementedError
    ch5.check_drafter(make)
    assert NOT_ATTEMPTED in capsys.readouterr().out


def test_check_drafter_accepts_prompt_lookup(capsys):
    ch5.check_drafter(lambda v: NgramDrafter(v, max_ngram=1), n=600)
    assert "Correct" in capsys.readouterr().out


class LyingDrafter(NgramDrafter):
    """Power: proposes lookup tokens but reports a uniform draft distribution (not the one it drew from)."""

    def propose(self, context_ids, gamma, sampling, generator=None):
        tokens, probs = super().propose(context_ids, gamma, sampling, generator)
        return tokens, torch.full_like(probs, 1.0 / self.vocab_size)


def test_check_drafter_rejects_a_drafter_that_misreports_its_probabilities():
    with pytest.raises(AssertionError):
        ch5.check_drafter(lambda v: LyingDrafter(v, max_ngram=1), n=1500)
