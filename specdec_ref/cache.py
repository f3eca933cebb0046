"""A causal LM together with its KV cache: feed it only the tokens it has not seen, crop it on rejection."""
from __future__ import annotations

import functools
import inspect

import torch
from transformers import DynamicCache


@functools.cache
def _cache_keyword(model_class: type) -> str:
    """The keyword forward() takes the KV cache by: `cache` in newer transformers 5 releases (5.24 here),
    `past_key_values` in older ones (5.17 on one GPU image), which silently ignore a `cache=` keyword."""
    params = inspect.signature(model_class.forward).parameters
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    raise ValueError(f"{model_class.__name__}.forward takes neither `cache` nor `past_key_values`: "
                     "it cannot be given a KV cache")


def cache_kwargs(model, cache: DynamicCache | None) -> dict:
    """{keyword: cache} for model's forward, whichever transformers 5 release is installed."""
    return {_cache_keyword(type(model)): cache}


def check_cache_length(cache: DynamicCache, expected: int) -> None:
    """A forward pass must leave `expected` tokens in the cache; anything else means it never saw it."""
    if cache.get_seq_length() != expected:
        raise RuntimeError(f"the KV cache holds {cache.get_seq_length()} tokens after the forward pass, expected "
                           f"{expected}: the model did not use the cache it was given (a transformers release "
                           "that names the keyword differently?)")


def vocab_size(model) -> int:
    """The number of logits a model emits per position (what draft and target must agree on)."""
    return model.get_output_embeddings().weight.shape[0] if hasattr(model, "get_output_embeddings") \
        and model.get_output_embeddings() is not None else model.config.vocab_size


class CachedModel:
    """A causal LM plus its KV cache, fed only the tokens it has not seen yet.

    With keep_hidden=True it also keeps the final hidden state of every cached token (the vector the
    LM head turns into logits), for drafters that draft from the target's features (EAGLE).
    """

    def __init__(self, model, keep_hidden: bool = False):
        self.model = model
        self.cache = DynamicCache()
        self.n_cached = 0  # how many context tokens the cache holds
        self.calls = 0  # forward passes so far
        self.keep_hidden = keep_hidden
        self.hidden: torch.Tensor | None = None  # [n_cached, d] final hidden states (only with keep_hidden)

    def logits(self, context_ids: torch.Tensor) -> torch.Tensor:  # [T] -> [k, V], k = T - n_cached
        """Run the model on context_ids[n_cached:], extending the cache; return their logits."""
        new = context_ids[self.n_cached:]
        out = self.model(input_ids=new[None], **cache_kwargs(self.model, self.cache), use_cache=True,
                         output_hidden_states=self.keep_hidden)
        check_cache_length(self.cache, context_ids.shape[0])
        if self.keep_hidden:
            h = out.hidden_states[-1][0]  # [k, d] the LM head's input at each new position
            self.hidden = h if self.hidden is None else torch.cat([self.hidden, h])
        self.n_cached = context_ids.shape[0]
        self.calls += 1
        return out.logits[0]  # [1, k, V] -> [k, V]

    def rollback(self, n_tokens: int) -> None:
        """Crop the cache to its first n_tokens (transformers 5: crop takes minus the number to drop)."""
        if n_tokens == 0:
            self.cache, self.n_cached, self.hidden = DynamicCache(), 0, None
        elif n_tokens < self.n_cached:
            self.cache.crop(-(self.n_cached - n_tokens))
            self.n_cached = n_tokens
            self.hidden = self.hidden[:n_tokens] if self.hidden is not None else None
