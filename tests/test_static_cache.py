"""The static KV cache (gpt-fast style): rollback moves the write position, and the loop stays exact with it.

Runs eagerly on the CPU; `cache="compiled"` with its default CUDA graphs is refused off a GPU with a clear
error (with an explicit compile backend it runs on the CPU: test_compiled.py).
"""
from collections import Counter

import pytest
import torch

import specdec_ref as sd
from specdec_ref.cache import CachedModel, StaticCachedModel, cached_model
from specdec_ref.lab.stats import SIGNIFICANCE, chi_square_gof
from specdec_ref.models.feature_draft import FeatureHead
from specdec_ref.models.toy import exact_sequence_distribution, tiny_llama, tiny_pair

GREEDY, T1 = sd.SamplingConfig(0), sd.SamplingConfig(1.0)


def test_rollback_to_every_position_gives_the_logits_of_a_fresh_pass():
    model = tiny_llama(8, seed=0, hidden=32, n_layers=2)
    seq = torch.tensor([1, 2, 3, 4, 5, 6, 7, 0, 1, 2])
    lm = StaticCachedModel(model, max_len=16)
    lm.logits(seq)
    for r in range(1, seq.shape[0]):
        lm.rollback(r)
        other = torch.cat([seq[:r], torch.tensor([(int(seq[r]) + 3) % 8, 5])])  # a different continuation
        got = lm.logits(other)  # [2, V]
        want = model(input_ids=other[None]).logits[0, r:]
        torch.testing.assert_close(got, want, atol=1e-10, rtol=0)
        lm.rollback(r)
        lm.logits(seq)  # back to the full sequence, for the next position


def test_keep_rows_matches_the_dynamic_cache():
    model = tiny_llama(8, seed=1, hidden=32, n_layers=2)
    seq = torch.tensor([1, 2, 3, 4, 5, 6, 7])
    static = StaticCachedModel(model, max_len=12, keep_hidden=True)
    dynamic = CachedModel(model, keep_hidden=True)
    for lm in (static, dynamic):
        lm.logits(seq)
        lm.keep_rows(3, [4, 6])  # the context's first 3 rows, then two scattered ones
    nxt = torch.cat([seq[:3], seq[[4, 6]], torch.tensor([2])])
    torch.testing.assert_close(static.logits(nxt), dynamic.logits(nxt), atol=1e-12, rtol=0)
    torch.testing.assert_close(static.hidden, dynamic.hidden, atol=1e-12, rtol=0)


@pytest.mark.parametrize("kind", ["model chain", "feature chain", "model tree", "feature tree"])
def test_greedy_with_a_static_cache_equals_greedy_target(kind):
    target, draft = tiny_pair(vocab_size=8, seed=0, noise=0.3, hidden=32, n_layers=2, max_positions=128)
    if kind.startswith("feature"):
        torch.manual_seed(0)
        draft = sd.FeatureDrafter(FeatureHead(target).eval())
    ids = torch.tensor([[1, 2, 3]])
    plain = sd.autoregressive_generate(target, ids, 40, sampling=GREEDY, cache="static").tokens.tolist()
    assert plain == sd.autoregressive_generate(target, ids, 40, sampling=GREEDY).tokens.tolist()
    how = dict(tree=sd.TreeBudget(3, 2, 5)) if kind.endswith("tree") else dict(gamma=3)
    out = sd.speculative_generate(target, draft, ids, 40, **how, sampling=GREEDY, cache="static")
    assert out.tokens.tolist() == plain


VOCAB, PROMPT, N_TOKENS, N_SAMPLES = 3, [1, 2, 0], 5, 1000


@pytest.mark.slow
@pytest.mark.parametrize("how", [dict(gamma=4), dict(tree=sd.TreeBudget(3, 2, 5))])
def test_static_cache_sequences_match_exact_target_distribution(how):
    """Chi-square at SIGNIFICANCE on the vocabulary-3 toy's 3^5 sequences; the power of this test against
    broken samplers is shown with the dynamic cache (test_exactness.py, test_tree.py): only the cache differs
    here."""
    target, draft = tiny_pair(vocab_size=VOCAB, seed=0, noise=0.3)
    g, ids = torch.Generator().manual_seed(0), torch.tensor([PROMPT])
    counts = Counter(tuple(sd.speculative_generate(target, draft, ids, N_TOKENS, **how, sampling=T1,
                                                   generator=g, cache="static").tokens.tolist())
                     for _ in range(N_SAMPLES))
    result = chi_square_gof(counts, exact_sequence_distribution(target, PROMPT, N_TOKENS))
    assert not result.rejects(SIGNIFICANCE), str(result)


@pytest.mark.slow
def test_chi_square_rejects_a_static_cache_that_never_moves_its_write_position(monkeypatch):
    """Power: after a rollback the next keys are written past the rejected draft's, which stay visible."""
    target, draft = tiny_pair(vocab_size=VOCAB, seed=0, noise=0.3)
    prepare = StaticCachedModel.prepare

    def prepare_without_moving(self, new, kw):
        before = [layer.cumulative_length.clone() if layer.is_initialized else None
                  for layer in self.cache.layers]
        new, kw = prepare(self, new, kw)
        for layer, position in zip(self.cache.layers, before):
            if position is not None and self.n_cached > 0:  # the bug: keep writing where the last pass
                layer.cumulative_length.copy_(position)  # stopped (a new generation still starts at 0)
        return new, kw

    init = StaticCachedModel.__init__
    monkeypatch.setattr(StaticCachedModel, "prepare", prepare_without_moving)
    monkeypatch.setattr(StaticCachedModel, "__init__",  # room for the keys the bug writes past the end
                        lambda self, model, max_len, *a, **k: init(self, model, 8 * max_len, *a, **k))
    monkeypatch.setattr("specdec_ref.cache.check_cache_length", lambda cache, expected: None)  # let it run
    g, ids = torch.Generator().manual_seed(0), torch.tensor([PROMPT])
    counts = Counter(tuple(sd.speculative_generate(target, draft, ids, N_TOKENS, gamma=4, sampling=T1,
                                                   generator=g, cache="static").tokens.tolist())
                     for _ in range(N_SAMPLES))
    assert chi_square_gof(counts, exact_sequence_distribution(target, PROMPT, N_TOKENS)).rejects(SIGNIFICANCE)


def test_bad_cache_choices_are_refused():
    model = tiny_llama(8, seed=0, hidden=32)
    with pytest.raises(ValueError, match="cache must be"):
        cached_model(model, cache="paged")
    with pytest.raises(ValueError, match="max_len"):
        cached_model(model, cache="static")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            cached_model(model, cache="compiled", max_len=8)
    lm = StaticCachedModel(model, max_len=4)
    with pytest.raises(ValueError, match="static KV cache holds 4"):
        lm.logits(torch.tensor([1, 2, 3, 4, 5]))
