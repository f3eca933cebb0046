"""The loop's contract: limits, EOS, reproducibility, cache rollback, statistics and clear errors."""
import pytest
import torch

import specdec_ref as sd
from specdec_ref.models.toy import tiny_llama, tiny_pair

GREEDY = sd.SamplingConfig(temperature=0)


def both(target, draft, ids, n, **kw):
    """Run plain and speculative decoding with the same arguments."""
    return (sd.autoregressive_generate(target, ids, n, **kw),
            sd.speculative_generate(target, draft, ids, n, gamma=3, **kw))


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 7, 13])
def test_max_new_tokens_is_respected_exactly(toy_pair, n):
    target, draft = toy_pair
    for out in both(target, draft, torch.tensor([[1, 2]]), n, generator=torch.Generator().manual_seed(n)):
        assert out.tokens.shape == (n,) and out.tokens.dtype == torch.long


def test_output_stops_right_after_eos_like_plain_decoding(toy_pair):
    target, draft = toy_pair
    ids = torch.tensor([[1, 2, 3]])
    plain = sd.autoregressive_generate(target, ids, 30, sampling=GREEDY).tokens.tolist()
    eos = plain[5]  # pretend the 6th greedy token is EOS
    first = plain.index(eos)
    for out in both(target, draft, ids, 30, sampling=GREEDY, eos_token_id=eos):
        assert out.tokens.tolist() == plain[: first + 1]
    for seed in range(20):  # and when sampling: exactly one EOS, at the end, if any
        out = sd.speculative_generate(target, draft, ids, 30, gamma=4, eos_token_id=2,
                                      generator=torch.Generator().manual_seed(seed))
        toks = out.tokens.tolist()
        assert 2 not in toks[:-1] and (toks[-1] == 2 or len(toks) == 30)


def test_same_seed_gives_same_tokens(toy_pair):
    target, draft = toy_pair
    ids = torch.tensor([[3, 1]])
    runs = [sd.speculative_generate(target, draft, ids, 25, gamma=3,
                                    generator=torch.Generator().manual_seed(5))
            for _ in range(2)]
    assert runs[0].tokens.tolist() == runs[1].tokens.tolist()
    other = sd.speculative_generate(target, draft, ids, 25, gamma=3,
                                    generator=torch.Generator().manual_seed(6))
    assert other.tokens.tolist() != runs[0].tokens.tolist()


def test_stats_are_consistent(toy_pair):
    target, draft = toy_pair
    out = sd.speculative_generate(target, draft, torch.tensor([[1, 2]]), 40, gamma=4,
                                  generator=torch.Generator().manual_seed(0))
    s = out.stats
    assert len(s.accepted) == len(s.drafted) == s.target_calls  # one target pass per iteration
    assert sum(s.accepted) + len(s.accepted) == 40  # each iteration emits accepted + 1 tokens
    assert all(0 <= a <= d <= 4 for a, d in zip(s.accepted, s.drafted))
    assert s.acceptance_rate == pytest.approx(sum(s.accepted) / sum(s.drafted))
    examined = sum(a + (a < d) for a, d in zip(s.accepted, s.drafted))
    assert s.alpha == pytest.approx(sum(s.accepted) / examined) and s.alpha >= s.acceptance_rate


def test_alpha_counts_only_examined_draft_tokens():
    """α = accepted / examined: tokens discarded after a rejection were never judged, so they don't count."""
    stats = sd.Stats(accepted=[4, 0, 1, 2], drafted=[4, 4, 4, 4])
    assert stats.alpha == pytest.approx(7 / 10)  # examined: 4 (all accepted) + 1 + 2 + 3
    assert stats.acceptance_rate == pytest.approx(7 / 16)


def test_caches_are_rolled_back_to_the_accepted_prefix(toy_pair):
    target, draft = toy_pair
    steps = []
    sd.speculative_generate(target, draft, torch.tensor([[1, 2]]), 30, gamma=4,
                            generator=torch.Generator().manual_seed(1), on_step=steps.append)
    assert any(s.n_accepted < s.draft_tokens.shape[0] for s in steps)  # some rejections happened
    for s in steps:
        new_len = s.context_len + s.n_accepted + 1
        assert s.target_cache_before == s.context_len + s.draft_tokens.shape[0]
        assert s.target_cache_after == new_len - 1  # everything but the newest token
        assert s.draft_cache_after == min(s.draft_cache_before, new_len - 1)


def test_rolled_back_cache_gives_the_same_logits_as_a_fresh_pass(toy_pair):
    target, _ = toy_pair
    lm = sd.CachedModel(target)
    seq = torch.tensor([1, 2, 3, 4, 5, 0, 1])
    lm.logits(seq)
    lm.rollback(4)
    cached = lm.logits(torch.tensor([1, 2, 3, 4, 2, 2]))  # a different continuation after the rollback
    fresh = target(torch.tensor([[1, 2, 3, 4, 2, 2]])).logits[0, 4:]
    torch.testing.assert_close(cached, fresh)


def test_generation_works_with_fp32_models_and_a_drafter_reused_across_calls():
    target, draft = tiny_pair(6, seed=1, dtype=torch.float32)
    drafter = sd.ModelDrafter(draft)
    a = sd.speculative_generate(target, drafter, torch.tensor([[1, 2]]), 10, sampling=GREEDY).tokens.tolist()
    b = sd.speculative_generate(target, drafter, torch.tensor([[4, 4, 4]]), 10,
                                sampling=GREEDY).tokens.tolist()
    assert a == sd.autoregressive_generate(target, torch.tensor([[1, 2]]), 10,
                                           sampling=GREEDY).tokens.tolist()
    assert b == sd.autoregressive_generate(target, torch.tensor([[4, 4, 4]]), 10,
                                           sampling=GREEDY).tokens.tolist()


# --- bad input: a clear ValueError that names the problem ---------------------------------------------------

@pytest.mark.parametrize("kwargs,match", [
    ({"gamma": 0}, "gamma"), ({"gamma": -2}, "gamma"), ({"max_new_tokens": -1}, "max_new_tokens"),
    ({"input_ids": torch.zeros(1, 0, dtype=torch.long)}, "empty"),
    ({"input_ids": torch.tensor([[1, 2], [3, 4]])}, "batch size"),
    ({"input_ids": torch.tensor([1, 2])}, r"\[1, T\]"),
    ({"input_ids": torch.tensor([[1, 6]])}, "vocabulary"),
    ({"input_ids": torch.tensor([[-1, 2]])}, "vocabulary"),
    ({"input_ids": torch.tensor([[1.0, 2.0]])}, "integer"),
    ({"max_new_tokens": 63}, "context"),
    ({"sampling": {"temperature": 0}}, "SamplingConfig"),
])
def test_bad_input_raises_value_error_naming_the_problem(toy_pair, kwargs, match):
    target, draft = toy_pair
    args = {"input_ids": torch.tensor([[1, 2]]), "max_new_tokens": 5, **kwargs}
    with pytest.raises(ValueError, match=match):
        sd.speculative_generate(target, draft, **args)
    if "gamma" not in kwargs:
        with pytest.raises(ValueError, match=match):
            sd.autoregressive_generate(target, **args)


def test_draft_and_target_with_different_vocabularies_are_refused():
    target, other = tiny_llama(6), tiny_llama(7)
    with pytest.raises(ValueError, match="vocabularies differ"):
        sd.speculative_generate(target, other, torch.tensor([[1, 2]]), 5)
    with pytest.raises(ValueError, match="vocabularies differ"):
        sd.speculative_generate(target, sd.NgramDrafter(7), torch.tensor([[1, 2]]), 5)


def test_draft_with_a_shorter_context_is_checked_too():
    target, draft = tiny_llama(6, max_positions=64), tiny_llama(6, max_positions=8)
    with pytest.raises(ValueError, match="draft's context"):
        sd.speculative_generate(target, draft, torch.tensor([[1, 2]]), 10)


def test_ngram_drafter_copies_the_continuation_of_the_latest_match():
    ng = sd.NgramDrafter(10, max_ngram=2)
    ctx = torch.tensor([5, 6, 7, 8, 9, 1, 5, 6, 3, 4, 0, 5, 6])
    toks, probs = ng.propose(ctx, 2, sd.SamplingConfig(), None)
    assert toks.tolist() == [3, 4]  # "5 6" last appeared before "3 4"
    assert probs.shape == (2, 10) and probs.sum(-1).tolist() == [1.0, 1.0] and probs[0, 3] == 1
    toks, _ = ng.propose(torch.tensor([1, 2, 3]), 3, sd.SamplingConfig(), None)
    assert toks.numel() == 0  # nothing to copy: propose nothing
    with pytest.raises(ValueError, match="ngram"):
        sd.NgramDrafter(10, max_ngram=0)


def test_generator_on_another_device_is_refused_up_front():
    """torch.multinomial fails deep inside torch when the generator is on another device: we say so first."""
    from specdec_ref.generate import check_generator
    check_generator(None, torch.device("cpu"))
    check_generator(torch.Generator(), torch.device("cpu"))
    with pytest.raises(ValueError, match="generator is on cpu.*torch.Generator\\(device='cuda'\\)"):
        check_generator(torch.Generator(), torch.device("cuda"))
    with pytest.raises(ValueError, match="generator is on cpu"):
        check_generator(torch.Generator(), torch.device("cuda", 1))


def test_speculative_step_is_one_iteration_of_the_loop(toy_pair):
    """The loop is speculative_step repeated: one step by hand gives the loop's first Step."""
    target, draft = toy_pair
    steps = []
    ids = torch.tensor([[1, 2, 3]])
    sd.speculative_generate(target, draft, ids, 10, gamma=3, sampling=GREEDY, on_step=steps.append)
    tokens, step = sd.speculative_step(sd.CachedModel(target), sd.ModelDrafter(draft), ids[0], 3, GREEDY,
                                       None)
    assert tokens.tolist()[:3] == [1, 2, 3] and tokens.shape[0] == 3 + step.n_accepted + 1
    assert (step.draft_tokens.tolist(), step.n_accepted, step.next_token) == \
        (steps[0].draft_tokens.tolist(), steps[0].n_accepted, steps[0].next_token)


def test_options_after_max_new_tokens_are_keyword_only(toy_pair):
    target, draft = toy_pair
    with pytest.raises(TypeError):
        sd.speculative_generate(target, draft, torch.tensor([[1, 2]]), 5, 2)
    with pytest.raises(TypeError):
        sd.autoregressive_generate(target, torch.tensor([[1, 2]]), 5, GREEDY)


@pytest.mark.parametrize("keep_hidden", [False, True])
def test_one_new_row_gets_an_explicit_mask_and_the_same_logits(monkeypatch, keep_hidden):
    """`CachedModel.prepare`: on a CPU a one-row pass carries its position and an all-visible mask (the flash
    kernel is slower without one); the logits are those of the maskless pass, through rollbacks too."""
    from specdec_ref import cache as cache_mod
    model = tiny_llama(16, hidden=32, n_layers=2).float()
    ids = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6])
    seen = []
    forward = model.forward
    monkeypatch.setattr(model, "forward",
                        lambda *a, **kw: seen.append(kw.get("attention_mask")) or forward(*a, **kw))

    def decode(row_mask: bool) -> list[torch.Tensor]:
        monkeypatch.setattr(cache_mod, "ROW_MASK", "1" if row_mask else "0")
        lm, out = cache_mod.CachedModel(model, keep_hidden=keep_hidden), []
        lm.logits(ids[:4], keep=1)
        for n in (5, 6, 7, 5, 6):  # one row at a time, with a rollback in between
            lm.rollback(n - 1)
            out.append(lm.logits(ids[:n], keep=1))
        return out

    plain = decode(False)
    seen.clear()
    masked = decode(True)
    for a, b in zip(plain, masked):
        torch.testing.assert_close(a, b)
    if not keep_hidden:  # the body is called directly then; the mask reaches it the same way
        assert [m is not None for m in seen] == [False] + [True] * 5


@pytest.mark.parametrize("dtype,expect", [(torch.bfloat16, True), (torch.float32, False)])
def test_by_default_only_bfloat16_one_row_passes_get_the_mask(monkeypatch, dtype, expect):
    """SPECDEC_ROW_MASK unset ("auto"): the mask where it was measured to help, bfloat16 on a CPU."""
    from specdec_ref import cache as cache_mod
    monkeypatch.setattr(cache_mod, "ROW_MASK", "auto")
    lm = cache_mod.CachedModel(tiny_llama(16, hidden=32, n_layers=2).to(dtype))
    lm.n_cached = 4
    _, kw = lm.prepare(torch.tensor([3]), {})
    assert ("attention_mask" in kw) == expect
