"""logits_to_probs: temperature, then top-k, then top-p, with Hugging Face's semantics."""
import pytest
import torch
from transformers.generation.logits_process import (TemperatureLogitsWarper, TopKLogitsWarper,
                                                    TopPLogitsWarper)

from specdec_ref import SamplingConfig, logits_to_probs
from specdec_ref.sampling import draw, draw_among, sample


def hf_probs(logits, temperature, top_k, top_p):
    scores = logits[None].clone()
    for warper in [TemperatureLogitsWarper(temperature)] + \
            ([TopKLogitsWarper(top_k)] if top_k else []) + ([TopPLogitsWarper(top_p)] if top_p else []):
        scores = warper(None, scores)
    return scores.softmax(-1)[0]


@pytest.mark.parametrize("temperature,top_k,top_p", [
    (1.0, None, None), (0.7, None, None), (1.3, 5, None), (1.0, None, 0.9), (0.8, 10, 0.5), (1.0, 3, 0.99),
    (2.0, None, 0.3), (1.0, 1, None), (0.5, None, 1.0)])
def test_logits_to_probs_matches_hugging_face_warpers(temperature, top_k, top_p):
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        logits = torch.randn(50, generator=g) * 3
        ours = logits_to_probs(logits, SamplingConfig(temperature, top_k, top_p))
        torch.testing.assert_close(ours, hf_probs(logits, temperature, top_k, top_p), atol=1e-6, rtol=1e-5)


def test_top_p_keeps_smallest_set_reaching_the_mass():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    out = logits_to_probs(probs.log(), SamplingConfig(top_p=0.8))  # 0.5 + 0.3 reaches 0.8: keep two
    torch.testing.assert_close(out, torch.tensor([0.625, 0.375, 0.0, 0.0]))
    out = logits_to_probs(probs.log(), SamplingConfig(top_p=0.81))  # needs the third token too
    assert (out > 0).sum() == 3


def test_order_is_temperature_then_top_k_then_top_p():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    # at T=0.25 the top token alone has mass > 0.9, so top-p=0.9 keeps one token; at T=4 it would keep more
    assert (logits_to_probs(logits, SamplingConfig(0.25, top_p=0.9)) > 0).sum() == 1
    assert (logits_to_probs(logits, SamplingConfig(4.0, top_p=0.9)) > 0).sum() == 4


def test_greedy_is_one_hot_on_the_first_argmax():
    logits = torch.tensor([[0.1, 3.0, 3.0, -2.0], [5.0, 0.0, 0.0, 0.0]])
    out = logits_to_probs(logits, SamplingConfig(temperature=0))
    torch.testing.assert_close(out, torch.tensor([[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]))


def test_float64_logits_stay_float64_and_half_logits_become_float32():
    assert logits_to_probs(torch.zeros(4, dtype=torch.float64), SamplingConfig()).dtype == torch.float64
    assert logits_to_probs(torch.zeros(4, dtype=torch.float16), SamplingConfig()).dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_at_temperature_one_the_one_pass_softmax_gives_the_numbers_of_converting_first(dtype):
    logits = (torch.randn(3, 500, generator=torch.Generator().manual_seed(0)) * 4).to(dtype)
    want = logits.to(torch.promote_types(dtype, torch.float32)).softmax(-1)
    for sampling in (SamplingConfig(1.0), SamplingConfig(1.0, top_p=1.0)):
        got = logits_to_probs(logits, sampling)
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert not torch.equal(logits_to_probs(logits, SamplingConfig(1.0, top_k=5)), want)  # filters still apply


@pytest.mark.parametrize("kwargs,match", [
    ({"temperature": -0.1}, "temperature"), ({"top_k": 0}, "top_k"), ({"top_k": 2.5}, "top_k"),
    ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p"), ({"top_p": -1}, "top_p")])
def test_bad_sampling_config_raises_value_error_naming_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingConfig(**kwargs)


def draws_agree(draw_reduced, sampling, n_seeds=200):
    """Whether `draw_reduced(logits [K], ids [K], V, sampling, generator)` gives, seed for seed, the token and
    the [V] row that `draw` gives from the full row (-inf off `ids`)."""
    V, ids = 64, torch.tensor([1, 4, 5, 9, 17, 30, 31, 40, 52, 63])
    for seed in range(n_seeds):
        logits = torch.randn(ids.shape[0], generator=torch.Generator().manual_seed(10_000 + seed)) * 2
        full = torch.full((V,), float("-inf")).index_copy_(0, ids, logits)
        want_token, want_probs = draw(full, sampling, torch.Generator().manual_seed(seed))
        token, probs = draw_reduced(logits, ids, V, sampling, torch.Generator().manual_seed(seed))
        if int(token) != int(want_token) or probs.shape != (V,) or not torch.allclose(probs, want_probs,
                                                                                       atol=1e-6):
            return False
    return True


@pytest.mark.parametrize("sampling", [SamplingConfig(1.0), SamplingConfig(0.7), SamplingConfig(1.0, top_k=3),
                                      SamplingConfig(1.2, top_p=0.8), SamplingConfig(0)])
def test_drawing_among_a_reduced_vocabulary_is_drawing_from_the_full_row(sampling):
    """A draft with a reduced output layer draws over its K tokens (`draw_among`): the same token for the same
    uniform, and the same distribution over all V, as `draw` over the row with -inf elsewhere."""
    assert draws_agree(draw_among, sampling)

    def scattered_in_another_order(logits, ids, V, sampling, generator):  # the cdf runs in another order
        order = torch.arange(ids.shape[0] - 1, -1, -1)
        token, probs = draw_among(logits[order], ids[order], V, sampling, generator)
        return token, probs

    def rows_misplaced(logits, ids, V, sampling, generator):  # the right token, the row scattered off by one
        token, probs = draw_among(logits, ids, V, sampling, generator)
        return token, probs.roll(1)

    if not sampling.greedy:  # greedy draws no uniform: the order of the cdf cannot show
        assert not draws_agree(scattered_in_another_order, sampling)
    assert not draws_agree(rows_misplaced, sampling)


def test_a_draw_scales_its_uniform_by_the_total_and_a_row_without_mass_draws_from_otherwise():
    """`sample` needs no normalised row: scaled by a power of two (exact in floating point), a row draws the
    same token seed for seed. A row with no mass at all is refused, or drawn from `otherwise` where given."""
    p = torch.randn(50, generator=torch.Generator().manual_seed(0)).softmax(-1)
    for seed in range(200):
        assert int(sample(8 * p, torch.Generator().manual_seed(seed))) == int(
            sample(p, torch.Generator().manual_seed(seed)))
    # power: a row scaled unevenly is another distribution, and draws other tokens
    assert any(int(sample(p * torch.linspace(1, 3, 50), torch.Generator().manual_seed(s)))
               != int(sample(p, torch.Generator().manual_seed(s))) for s in range(200))
    with pytest.raises(ValueError, match="no positive mass"):
        sample(torch.zeros(5), torch.Generator().manual_seed(0))
    one_hot = torch.zeros(5).index_fill_(0, torch.tensor([3]), 1.0)
    assert {int(sample(torch.zeros(5), torch.Generator().manual_seed(s), otherwise=one_hot))
            for s in range(20)} == {3}
    with pytest.raises(ValueError, match="NaN or inf"):  # not finite: refused, `otherwise` or not
        sample(torch.full((5,), float("nan")), torch.Generator().manual_seed(0), otherwise=one_hot)
