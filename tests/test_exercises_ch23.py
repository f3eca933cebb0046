"""Exercise checkers of chapters 2 and 3: they pass correct answers and reject the classic wrong ones."""
import pytest
import torch

import specdec_ref as sd
from specdec_ref.lab import broken
from specdec_ref.lab.broken import verify_argmax, verify_without_residual
from specdec_ref.chapters.exercises import ch2, ch3


def not_done(*args):
    raise NotImplementedError


def greedy_verify(draft_tokens, target_logits):
    best = target_logits.argmax(-1)
    for i in range(draft_tokens.shape[0]):
        if draft_tokens[i] != best[i]:
            return i, best[i]
    return draft_tokens.shape[0], best[-1]


def test_checkers_report_unattempted_exercises_without_failing(capsys):
    ch2.check_greedy_verify(not_done)
    ch2.check_fixed_verify(not_done)
    ch2.check_cache_lengths(100, 5, 2, None)
    ch3.check_residual(not_done)
    ch3.check_beta([0.5, 0.5], [0.5, 0.5], None)
    ch3.check_no_residual_distribution(not_done)
    ch2.check_perfect_draft_passes(64, 4, None)
    ch3.check_samples_needed(0.01, None)
    ch3.check_capstone_step(not_done)
    assert capsys.readouterr().out.count("Not attempted yet") == 9


def test_check_greedy_verify_accepts_correct_and_rejects_off_by_one_answers():
    ch2.check_greedy_verify(greedy_verify)
    with pytest.raises(AssertionError, match="too many"):
        ch2.check_greedy_verify(lambda d, lg: (d.shape[0], lg[-1].argmax()))  # accepts everything
    with pytest.raises(AssertionError, match="too few"):
        ch2.check_greedy_verify(lambda d, lg: (0, lg[0].argmax()))  # accepts nothing
    with pytest.raises(AssertionError):
        ch2.check_greedy_verify(lambda d, lg: greedy_verify(d, lg[1:].repeat(2, 1)))  # rows shifted by one
    with pytest.raises(AssertionError, match="right number of tokens"):  # the argmax one row too late
        ch2.check_greedy_verify(lambda d, lg: (greedy_verify(d, lg)[0], lg[-1].argmax() + 1))


def test_check_fixed_verify_passes_the_package_verify():
    ch2.check_fixed_verify(sd.verify, n_single=3000, n_sequences=600)


@pytest.mark.parametrize("broken", [verify_argmax, verify_without_residual])
def test_check_fixed_verify_rejects_broken_verifies(broken):
    with pytest.raises(AssertionError):
        ch2.check_fixed_verify(broken, n_single=3000, n_sequences=600)


def test_cache_lengths_formula_matches_the_real_loop(toy_pair):
    target, draft = toy_pair
    steps = []
    sd.speculative_generate(target, draft, torch.tensor([[1, 2, 3]]), 30, gamma=3,
                            sampling=sd.SamplingConfig(1.0), generator=torch.Generator().manual_seed(0),
                            on_step=steps.append)
    checked = 0
    for s in steps:
        if s.draft_tokens.shape[0] == 0:
            continue
        want = ch2.cache_lengths(s.context_len, s.draft_tokens.shape[0], s.n_accepted)
        assert want == (s.target_cache_before, s.target_cache_after,
                        s.draft_cache_before, s.draft_cache_after)
        checked += 1
    assert checked >= 5 and any(s.n_accepted == s.draft_tokens.shape[0] for s in steps)


def test_check_cache_lengths():
    ch2.check_cache_lengths(100, 5, 2, (105, 102, 104, 102))
    with pytest.raises(AssertionError, match="draft before rollback: you said 105, too high") as failure:
        ch2.check_cache_lengths(100, 5, 2, (105, 102, 105, 102))
    assert "104" not in str(failure.value)  # which way, never the right length


def test_check_residual_passes_the_package_residual_and_restores_verify():
    ch3.check_residual(sd.residual, n_samples=600)
    import importlib
    assert importlib.import_module("specdec_ref.verify").residual is sd.residual


def test_check_residual_rejects_resampling_from_the_target():
    with pytest.raises(AssertionError, match="p_target"):
        ch3.check_residual(lambda p, q: p, n_samples=600)


def test_check_residual_rejects_nan_when_distributions_are_equal():
    naive = lambda p, q: (p - q).clamp(min=0) / (p - q).clamp(min=0).sum()  # noqa: E731
    with pytest.raises(AssertionError, match="NaN"):
        ch3.check_residual(naive, n_samples=600)


def test_sequence_test_used_by_check_residual_rejects_a_half_wrong_residual():
    """The checker's statistical stage has power: half residual, half p_target, swapped into verify, is
    rejected."""
    wrong = lambda p, q: (0.5 * (p - q).clamp(min=0) / (p - q).clamp(min=0).sum().clamp(min=1e-300) + 0.5 * p)  # noqa: E731
    with ch3.using_residual(wrong):
        assert ch3.toy_exactness_test(1500).rejects()
    with pytest.raises(AssertionError):
        ch3.check_residual(wrong, n_samples=600)


def test_check_beta_and_no_residual_distribution():
    ch3.check_beta([0.5, 0.3, 0.2, 0.0], [0.25] * 4, 0.7)
    with pytest.raises(AssertionError, match="too low"):
        ch3.check_beta([0.5, 0.3, 0.2, 0.0], [0.25] * 4, 0.3)  # that is the TV, not beta
    ch3.check_no_residual_distribution(lambda p, q: torch.minimum(p, q) + (1 - torch.minimum(p, q).sum()) * p)
    with pytest.raises(AssertionError, match="too much on tokens") as failure:
        ch3.check_no_residual_distribution(lambda p, q: p)  # the distribution the bug was supposed to give
    assert "the buggy sampler emits" not in str(failure.value)  # which tokens are off, not the answer


@pytest.mark.parametrize("max_new_tokens,gamma", [(64, 4), (10, 4), (7, 3), (2, 4), (1, 1), (30, 1)])
def test_perfect_draft_passes_matches_the_real_loop_with_a_draft_equal_to_the_target(max_new_tokens, gamma):
    from specdec_ref.models.toy import tiny_llama
    perfect = tiny_llama(8, seed=0, max_positions=128)
    out = sd.speculative_generate(perfect, perfect, torch.tensor([[1, 2, 3]]), max_new_tokens, gamma=gamma,
                                  sampling=sd.SamplingConfig(0))
    assert out.stats.target_calls == ch2.perfect_draft_passes(max_new_tokens, gamma)


def test_check_perfect_draft_passes_accepts_13_and_rejects_the_naive_answers():
    ch2.check_perfect_draft_passes(64, 4, 13)
    for wrong in (16, 12, 64, 14):  # 64/γ, floor(64/(γ+1)), plain decoding, one pass too many
        with pytest.raises(AssertionError, match=f"too {'low' if wrong < 13 else 'high'}. Hint"):
            ch2.check_perfect_draft_passes(64, 4, wrong)


def test_samples_needed_is_where_the_tv_bound_width_falls_to_the_shift():
    from specdec_ref.lab import stats
    tv = 0.02
    n = ch3.samples_needed(tv)
    probs = {i: 1 / 16 for i in range(16)}  # 15 outcomes get a bin each, the 16th is "the rest": K = 16 bins
    exact_counts = lambda n: {i: n // 16 for i in range(16)}  # noqa: E731  observed TV = 0
    assert stats.tv_upper_bound(exact_counts(16 * (n // 16 + 1)), probs, max_bins=16) <= tv
    assert stats.tv_upper_bound(exact_counts(16 * (n // 32)), probs, max_bins=16) > tv


def test_check_samples_needed_accepts_a_rough_estimate_and_rejects_a_factor_of_4():
    truth = ch3.samples_needed(0.01)
    ch3.check_samples_needed(0.01, truth)
    ch3.check_samples_needed(0.01, 1.5 * truth)  # rough is fine
    with pytest.raises(AssertionError, match="ε/2"):
        ch3.check_samples_needed(0.01, 4 * truth)  # forgot the /2
    with pytest.raises(AssertionError, match="too low"):
        ch3.check_samples_needed(0.01, truth / 10)


def test_check_capstone_step_passes_the_package_step_and_restores_the_loop():
    ch3.check_capstone_step(sd.speculative_step, n_sequences=1000)
    import importlib
    assert importlib.import_module("specdec_ref.generate").speculative_step is sd.speculative_step


def reader_step(target_lm, drafter, tokens, gamma, sampling, generator):
    """A reader's answer: returns only the new sequence, as the capstone allows."""
    draft_tokens, draft_probs = drafter.propose(tokens, gamma, sampling, generator)
    g = draft_tokens.shape[0]
    target_probs = sd.logits_to_probs(target_lm.logits(torch.cat([tokens, draft_tokens]))[-(g + 1):],
                                      sampling)
    n, next_token = sd.verify(draft_tokens, draft_probs.to(target_probs.dtype), target_probs, generator)
    new_tokens = torch.cat([tokens, draft_tokens[:n], next_token])
    target_lm.rollback(new_tokens.shape[0] - 1)
    drafter.sync(new_tokens.shape[0] - 1, target_lm.hidden)
    return new_tokens


def test_check_capstone_step_passes_a_reader_step_that_returns_only_the_tokens():
    ch3.check_capstone_step(reader_step, n_sequences=600)


def test_check_capstone_step_names_a_cache_that_was_not_rolled_back():
    def no_rollback(target_lm, drafter, tokens, gamma, sampling, generator):
        draft_tokens, draft_probs = drafter.propose(tokens, gamma, sampling, generator)
        target_probs = sd.logits_to_probs(target_lm.logits(torch.cat([tokens, draft_tokens]))[-(gamma + 1):],
                                          sampling)
        n, next_token = sd.verify(draft_tokens, draft_probs, target_probs, generator)
        return torch.cat([tokens, draft_tokens[:n], next_token])
    with pytest.raises(AssertionError, match="rollback"):
        ch3.check_capstone_step(no_rollback, n_sequences=600)


@pytest.mark.parametrize("broken_step", [
    broken.step_with_verify(broken.verify_without_residual),
    broken.step_with_verify(broken.verify_argmax),
    broken.step_with_verify(broken.verify_late_without_residual),
    broken.step_with_verify(broken.verify_target_off_by_one),
    broken.step_target_unprocessed,
], ids=lambda f: f.__name__)
def test_check_capstone_step_rejects_the_broken_steps(broken_step):
    """Power: at the sample size the tests use (1000; the chapter's quick mode uses the same), every bug is
    caught."""
    with pytest.raises(AssertionError):
        ch3.check_capstone_step(broken_step, n_sequences=1000)
