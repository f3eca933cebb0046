"""Tiny float64 Llamas whose output distributions can be enumerated exactly.

Used by the tests and the chapters: with a vocabulary of 5-8 tokens, every 3-token
continuation can be listed with its exact probability, so a chi-square test can
compare samples against the truth rather than against another sampler.
"""
from __future__ import annotations

import itertools

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from ..sampling import SamplingConfig, logits_to_probs


def tiny_llama(vocab_size: int = 6, seed: int = 0, n_layers: int = 1, hidden: int = 16,
               dtype: torch.dtype = torch.float64, max_positions: int = 64, logit_scale: float = 1.0,
               kv_heads: int = 2):
    """A random Llama small enough to enumerate, with 2 query heads on kv_heads key heads (1: both query heads
    share one, as SmolLM2's nine share three); logit_scale sharpens its distributions."""
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=n_layers, num_attention_heads=2, num_key_value_heads=kv_heads,
                         max_position_embeddings=max_positions, tie_word_embeddings=False,
                         bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)  # model construction only; sampling always takes an explicit generator
    model = LlamaForCausalLM(config).to(dtype)
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale / model.lm_head.weight.std())
    return model.eval()


@torch.inference_mode()
def exact_sequence_distribution(model, prompt: list[int], n_tokens: int,
                                sampling: SamplingConfig = SamplingConfig()) -> dict[tuple[int, ...], float]:
    """P(next n_tokens = s | prompt) for every s in V^n_tokens, by the chain rule (V^n forward passes)."""
    V = model.config.vocab_size
    probs: dict[tuple[int, ...], float] = {}
    for seq in itertools.product(range(V), repeat=n_tokens):
        ids = torch.tensor([prompt + list(seq)])
        step = logits_to_probs(model(ids).logits[0, len(prompt) - 1:-1], sampling)  # [n, V]
        probs[seq] = float(step.gather(1, torch.tensor(seq)[:, None]).prod())
    return probs


def tiny_pair(vocab_size: int = 6, seed: int = 0, noise: float = 0.15, **kwargs):
    """(target, draft): a tiny Llama and a perturbed copy, so drafts are accepted sometimes, not always."""
    target = tiny_llama(vocab_size, seed=seed, **kwargs)
    draft = tiny_llama(vocab_size, seed=seed, **kwargs)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(noise * p.std() * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return target, draft
