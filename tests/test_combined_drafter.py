"""FallbackDrafter (prompt lookup first, a model draft when lookup finds nothing) is exact: greedy token for
token, and at T > 0 a sequence-level chi-square against the exact distribution, with a power check."""
from collections import Counter

import pytest
import torch

import specdec_ref as sd
from specdec_ref.lab.broken import using_verify, verify_without_residual
from specdec_ref.lab.stats import SIGNIFICANCE, chi_square_gof, speculative_sequence_counts
from specdec_ref.models.toy import exact_sequence_distribution, tiny_llama, tiny_pair

VOCAB, PROMPT, N_TOKENS, N_SAMPLES = 3, [1, 2, 0], 5, 2000
T1 = sd.SamplingConfig(1.0)


def combined(draft, vocab):
    """Bigram lookup (min_ngram=2, so it often finds nothing in short contexts), then the model draft."""
    return sd.FallbackDrafter(sd.NgramDrafter(vocab, max_ngram=2, min_ngram=2), sd.ModelDrafter(draft))


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_greedy_fallback_drafter_equals_greedy_target(gamma):
    greedy = sd.SamplingConfig(temperature=0)
    for seed in range(3):
        target, draft = tiny_pair(vocab_size=8, seed=seed, noise=0.3, hidden=32, n_layers=2)
        ids = torch.tensor([[seed + 1, 2, 3, 1, 2, 3, 4]])
        plain = sd.autoregressive_generate(target, ids, 40, sampling=greedy).tokens.tolist()
        drafter = combined(draft, 8)
        spec = sd.speculative_generate(target, drafter, ids, 40, gamma=gamma, sampling=greedy)
        assert spec.tokens.tolist() == plain
        assert set(drafter.used) == {0, 1}, "both the lookup and the model draft must have proposed"


def test_fallback_drafter_with_unrelated_model_equals_greedy_target():
    greedy = sd.SamplingConfig(temperature=0)
    target, other = tiny_llama(8, seed=0, hidden=32), tiny_llama(8, seed=99, hidden=32)
    ids = torch.tensor([[1, 2, 3, 1, 2]])
    plain = sd.autoregressive_generate(target, ids, 30, sampling=greedy).tokens.tolist()
    assert sd.speculative_generate(target, combined(other, 8), ids, 30, gamma=3,
                                   sampling=greedy).tokens.tolist() == plain


def test_fallback_drafter_refuses_an_empty_list():
    with pytest.raises(ValueError, match="at least one drafter"):
        sd.FallbackDrafter()


@pytest.fixture(scope="module")
def pair3():
    return tiny_pair(vocab_size=VOCAB, seed=0, noise=0.3)


def counts(target, drafter, gamma, sampling, seed=0) -> Counter:
    return speculative_sequence_counts(target, drafter, PROMPT, N_TOKENS, gamma, sampling, N_SAMPLES,
                                       torch.Generator().manual_seed(seed))


@pytest.mark.slow  # 2,000 generations each: a few seconds
@pytest.mark.parametrize("gamma,sampling", [(2, T1), (4, sd.SamplingConfig(0.7, top_k=2))])
def test_fallback_drafter_sequences_match_exact_target_distribution(pair3, gamma, sampling):
    target, draft = pair3
    drafter = combined(draft, VOCAB)
    result = chi_square_gof(counts(target, drafter, gamma, sampling), exact_sequence_distribution(
        target, PROMPT, N_TOKENS, sampling))
    assert not result.rejects(SIGNIFICANCE), f"gamma={gamma} {sampling}: {result}"
    share = sum(drafter.used) / len(drafter.used)  # fraction of iterations drafted by the model
    assert 0.1 < share < 0.9, f"both drafters must propose often; the model drafted {share:.0%} of iterations"


@pytest.mark.slow
def test_chi_square_rejects_fallback_drafter_with_verify_without_residual(pair3):
    """Power: with both drafters proposing, the same test rejects a loop that forgets the residual."""
    target, draft = pair3
    with using_verify(verify_without_residual):
        c = counts(target, combined(draft, VOCAB), 2, T1)
    assert chi_square_gof(c, exact_sequence_distribution(target, PROMPT, N_TOKENS, T1)).rejects(SIGNIFICANCE)
