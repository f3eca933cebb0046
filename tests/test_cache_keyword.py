"""The KV cache reaches the model whatever transformers 5 release is installed, or we fail loudly.

transformers 5.24 takes the cache as `cache=` (`past_key_values=` is a deprecated alias); 5.17, the
release on one GPU image, takes `past_key_values=` and silently ignores `cache=`. There every forward
pass saw only the new tokens, with no context: plain and speculative decoding both wrote garbage, and
the feature head's acceptance rate fell to 0. These tests pin the keyword choice and the loud failure.
"""
import pytest
import torch
from transformers import DynamicCache, LlamaForCausalLM

import specdec_ref as sd
from specdec_ref.cache import _cache_keyword, cache_kwargs, check_cache_length
from specdec_ref.models.toy import tiny_llama

GREEDY = sd.SamplingConfig(temperature=0)


class OldKeyword(LlamaForCausalLM):
    """A Llama whose forward names the cache `past_key_values`, as transformers 5.17 does."""

    def forward(self, input_ids=None, past_key_values=None, **kwargs):
        return super().forward(input_ids=input_ids, **{_cache_keyword(LlamaForCausalLM): past_key_values},
                               **kwargs)


class IgnoresCache(LlamaForCausalLM):
    """Accepts `cache=` and drops it: what a `cache=` keyword meets in transformers 5.17 (via **kwargs)."""

    def forward(self, input_ids=None, cache=None, **kwargs):
        return super().forward(input_ids=input_ids, **kwargs)


def as_class(model, cls):
    model.__class__ = cls
    return model


def test_the_installed_llama_takes_the_cache_by_a_keyword_we_know():
    assert _cache_keyword(LlamaForCausalLM) in ("cache", "past_key_values")


def test_an_older_forward_gets_past_key_values():
    assert _cache_keyword(OldKeyword) == "past_key_values"
    assert list(cache_kwargs(as_class(tiny_llama(), OldKeyword), None)) == ["past_key_values"]


def test_a_forward_without_a_cache_keyword_is_refused():
    class NoCache(torch.nn.Module):
        def forward(self, input_ids):
            return input_ids

    with pytest.raises(ValueError, match="neither `cache` nor `past_key_values`"):
        cache_kwargs(NoCache(), None)


def test_speculative_decoding_is_right_with_the_older_keyword():
    target = tiny_llama(seed=0)
    ids = torch.tensor([[1, 2, 3]])
    plain = sd.autoregressive_generate(target, ids, 20, sampling=GREEDY).tokens
    old_t, old_d = as_class(tiny_llama(seed=0), OldKeyword), as_class(tiny_llama(seed=1), OldKeyword)
    spec = sd.speculative_generate(old_t, old_d, ids, 20, gamma=3, sampling=GREEDY).tokens
    assert spec.tolist() == plain.tolist()
    assert sd.autoregressive_generate(old_t, ids, 20, sampling=GREEDY).tokens.tolist() == plain.tolist()


def test_a_model_that_ignores_its_cache_fails_loudly():
    lm = sd.CachedModel(as_class(tiny_llama(), IgnoresCache))
    with pytest.raises(RuntimeError, match="did not use the cache"):
        lm.logits(torch.tensor([1, 2, 3]))


def test_check_cache_length_can_fail():
    cache = DynamicCache()
    tiny_llama()(input_ids=torch.tensor([[1, 2]]), **cache_kwargs(tiny_llama(), cache), use_cache=True)
    check_cache_length(cache, 2)
    with pytest.raises(RuntimeError, match="holds 2 tokens"):
        check_cache_length(cache, 3)
