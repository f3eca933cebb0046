"""`distill.train.sample_batch`: the batched generator writes what the target writes on each prompt alone."""
from collections import Counter

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specdec_ref import SamplingConfig, autoregressive_generate
from specdec_ref.distill.batch_sample import sample_batch, sample_batch_plain
from specdec_ref.lab.stats import SIGNIFICANCE, chi_square_gof

MAX_NEW = 12


def tiny_gqa_llama(vocab_size: int, seed: int = 0, logit_scale: float = 3.0) -> LlamaForCausalLM:
    """A float32 Llama with grouped-query attention (4 query heads share 2 key heads), as SmolLM2 has."""
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)  # model construction only
    model = LlamaForCausalLM(config).float().eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale / model.lm_head.weight.std())
    return model


@pytest.fixture(scope="module")
def model():
    return tiny_gqa_llama(40)


@pytest.fixture(scope="module")
def prompts():
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, 40, (n,), generator=g) for n in (3, 11, 5, 1, 16, 7, 9, 2)]


def greedy(model, prompt: torch.Tensor, eos: int | None) -> list[int]:
    return autoregressive_generate(model, prompt[None], MAX_NEW, sampling=SamplingConfig(0),
                                   eos_token_id=eos).tokens.tolist()


@pytest.fixture(scope="module")
def eos(model, prompts):
    """The third token prompt 0 writes greedily: so row 0 stops early, whatever the other rows do."""
    return greedy(model, prompts[0], None)[2]


@pytest.mark.parametrize("generate", [sample_batch, sample_batch_plain])
def test_greedy_sample_batch_equals_greedy_target_on_each_prompt_alone(model, prompts, eos, generate):
    rows = generate(model, prompts, MAX_NEW, 0.0, 4, eos, torch.Generator().manual_seed(0))
    refs = [greedy(model, p, eos) for p in prompts]
    lengths = [len(r) for r in refs]
    assert min(lengths) < MAX_NEW and max(lengths) == MAX_NEW, f"both kinds of row must occur: {lengths}"
    for b, (row, ref) in enumerate(zip(rows, refs)):
        assert row["answer"].tolist() == ref, f"row {b} (prompt of {prompts[b].shape[0]} tokens)"
        assert torch.equal(row["prompt"], prompts[b])


@torch.no_grad()
def test_rows_stop_at_eos_and_labels_are_the_targets_top_k(model, prompts, eos):
    rows = sample_batch(model, prompts, MAX_NEW, 0.0, 4, eos, torch.Generator().manual_seed(0))
    for row in rows:
        answer = row["answer"]
        assert answer.dtype == torch.long and row["label_ids"].dtype == torch.int32
        assert row["label_ids"].shape == row["label_logp"].shape == (answer.shape[0], 4)
        hits = (answer == eos).nonzero()[:, 0].tolist()
        assert hits == ([] if answer.shape[0] == MAX_NEW else [answer.shape[0] - 1]), "EOS ends a row, once"
        seq = torch.cat([row["prompt"], answer])
        n = row["prompt"].shape[0]
        logp = model(seq[None]).logits[0, n - 1:n - 1 + answer.shape[0]].log_softmax(-1)  # [n_a, V]
        top = logp.topk(4, dim=-1)
        assert torch.equal(row["label_ids"].long(), top.indices)
        torch.testing.assert_close(row["label_logp"].float(), top.values, atol=2e-3, rtol=2e-3)  # float16


@torch.no_grad()
def exact_two_token_probs(model, prompt: torch.Tensor, temperature: float, eos: int) -> dict[tuple, float]:
    """P(answer) for every answer of up to two tokens (one if the first is EOS), at this temperature."""
    first = torch.softmax(model(prompt[None]).logits[0, -1] / temperature, -1)  # [V]
    probs = {}
    for t1, p1 in enumerate(first.tolist()):
        if t1 == eos:
            probs[(t1,)] = p1
            continue
        seq = torch.cat([prompt, torch.tensor([t1])])
        second = torch.softmax(model(seq[None]).logits[0, -1] / temperature, -1)  # [V]
        probs.update({(t1, t2): p1 * p2 for t2, p2 in enumerate(second.tolist())})
    return probs


@pytest.fixture(scope="module")
def sampled():
    """1,500 two-token answers to a short prompt, each beside (padded next to) a longer one, at T = 0.7."""
    model, g = tiny_gqa_llama(8, seed=2, logit_scale=0.25), torch.Generator().manual_seed(5)
    short, long = torch.randint(0, 8, (3,), generator=g), torch.randint(0, 8, (9,), generator=g)
    rows = sample_batch(model, [short, long] * 1500, 2, 0.7, 1, 0, torch.Generator().manual_seed(0))
    return model, short, Counter(tuple(r["answer"].tolist()) for r in rows[::2])


def test_sampled_answers_follow_the_target_at_their_temperature_by_chi_square(sampled):
    model, short, counts = sampled
    result = chi_square_gof(counts, exact_two_token_probs(model, short, 0.7, eos=0))
    assert not result.rejects(SIGNIFICANCE), str(result)


def test_chi_square_rejects_answers_judged_at_the_wrong_temperature(sampled):
    model, short, counts = sampled  # the power check: the same counts against the distribution at T = 1
    assert chi_square_gof(counts, exact_two_token_probs(model, short, 1.0, eos=0)).rejects(SIGNIFICANCE)
