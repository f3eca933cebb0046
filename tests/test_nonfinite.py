"""NaN or inf logits are refused with a ValueError that names the model and the fix, never sampled from.

A float16 overflow (the Qwen2 family on a T4's math attention path) turns logits into NaN. Unchecked, greedy
decoding would emit token 0 for ever and sampling would die deep inside `sample`; the models here are tiny
Llama and Qwen2 models whose final norm is scaled past float16's range, run in float16 on the CPU.
"""
import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

import specdec_ref as sd
from specdec_ref import cache as cache_mod
from specdec_ref.models.toy import tiny_llama

GREEDY, T1 = sd.SamplingConfig(0), sd.SamplingConfig(1.0)


def tiny_qwen2(vocab_size: int = 16, seed: int = 0) -> Qwen2ForCausalLM:
    config = Qwen2Config(vocab_size=vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config).eval()


def overflowing(model):
    """The same model in float16, its final norm scaled so that the logits overflow to inf (then NaN)."""
    model = model.to(torch.float16)
    with torch.no_grad():
        model.model.norm.weight.mul_(6e4)
    return model


@pytest.fixture(params=["llama", "qwen2"])
def broken_and_fine(request):
    if request.param == "llama":
        return (overflowing(tiny_llama(16, seed=0, dtype=torch.float32)),
                tiny_llama(16, seed=0, dtype=torch.float16))
    return overflowing(tiny_qwen2(16)), tiny_qwen2(16).to(torch.float16)


def test_the_scaled_models_really_overflow_in_float16(broken_and_fine):
    broken, fine = broken_and_fine
    ids = torch.tensor([[1, 2, 3]])
    with torch.inference_mode():
        assert not torch.isfinite(broken(input_ids=ids).logits).all()
        assert torch.isfinite(fine(input_ids=ids).logits).all()


@pytest.mark.parametrize("sampling", [GREEDY, T1], ids=["greedy", "T=1"])
def test_plain_decoding_refuses_non_finite_target_logits(broken_and_fine, sampling):
    broken, fine = broken_and_fine
    ids, g = torch.tensor([[1, 2, 3]]), torch.Generator().manual_seed(0)
    with pytest.raises(ValueError,
                       match=r"the model's logits contain NaN or inf.*float16 overflow.*bfloat16"):
        sd.autoregressive_generate(broken, ids, 8, sampling=sampling, generator=g)
    assert sd.autoregressive_generate(fine, ids, 8, sampling=sampling, generator=g).tokens.shape[0] == 8


@pytest.mark.parametrize("method", [dict(gamma=3), dict(tree=(2, 2)), dict(tree=sd.TreeBudget(2, 2, 3))],
                         ids=str)
@pytest.mark.parametrize("sampling", [GREEDY, T1], ids=["greedy", "T=1"])
def test_speculative_decoding_refuses_non_finite_logits_of_target_and_draft(broken_and_fine, method,
                                                                             sampling):
    broken, fine = broken_and_fine
    ids, g = torch.tensor([[1, 2, 3]]), torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="the target's logits contain NaN or inf"):
        sd.speculative_generate(broken, fine, ids, 8, sampling=sampling, generator=g, **method)
    with pytest.raises(ValueError, match="the draft's logits contain NaN or inf"):
        sd.speculative_generate(fine, broken, ids, 8, sampling=sampling, generator=g, **method)
    assert sd.speculative_generate(fine, fine, ids, 8, sampling=sampling, generator=g,
                                   **method).tokens.shape[0] == 8


def test_without_the_check_greedy_would_emit_garbage_silently(broken_and_fine, monkeypatch):
    """Power: with the check switched off, greedy decoding on NaN logits returns a token sequence, no
    error."""
    broken, _ = broken_and_fine
    monkeypatch.setattr(cache_mod.CachedModel, "check_finite", lambda self: None)
    out = sd.autoregressive_generate(broken, torch.tensor([[1, 2, 3]]), 8, sampling=GREEDY)
    assert out.tokens.shape[0] == 8  # garbage, silently: exactly what the check is there to refuse


def test_sampling_from_nan_probabilities_is_a_clear_error():
    with pytest.raises(ValueError, match="NaN or inf"):
        sd.sample(torch.full((5,), float("nan")), torch.Generator().manual_seed(0))
