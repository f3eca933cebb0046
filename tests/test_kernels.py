"""Prepacked CPU linears: the same model (same logits, same greedy text, tied weights stay tied), an opt-out,
and every drafter works on top of them. How much faster they are is measured by `lab.timing`, not here."""
import copy

import pytest
import torch
from torch import nn

import specdec_ref as sd
from specdec_ref.cache import additive_mask
from specdec_ref.models import kernels
from specdec_ref.models.kernels import (PrepackedLinear, kernel_path, prepack_available, prepack_for_cpu,
                                        unpack)
from specdec_ref.models.toy import tiny_llama

pytestmark = pytest.mark.skipif(not prepack_available("cpu"), reason="this torch has no oneDNN")
GREEDY = sd.SamplingConfig(temperature=0)


def test_prepacked_linear_computes_the_same_product():
    torch.manual_seed(0)
    lin = nn.Linear(96, 40)
    packed = PrepackedLinear(copy.deepcopy(lin))
    for rows in (1, 3, 8, 17):
        x = torch.randn(2, rows, 96)
        with torch.inference_mode():
            torch.testing.assert_close(packed(x), lin(x), atol=1e-5, rtol=1e-5)


def test_prepack_swaps_every_linear_and_keeps_state_dict_and_tied_weights():
    model = tiny_llama(32, seed=0, hidden=32, n_layers=2, dtype=torch.float32)
    model.lm_head.weight = model.model.embed_tokens.weight  # tie them, as SmolLM2 does
    keys = set(model.state_dict())
    prepack_for_cpu(model, True)
    assert not any(type(m) is nn.Linear for m in model.modules())
    assert set(model.state_dict()) == keys
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert "prepacked" in kernel_path(model)


def test_an_in_place_change_of_a_tied_weight_reaches_the_packed_copy():
    model = tiny_llama(32, seed=0, hidden=32, dtype=torch.float32)
    model.lm_head.weight = model.model.embed_tokens.weight
    plain = copy.deepcopy(model)
    prepack_for_cpu(model, True)
    ids = torch.tensor([[1, 2, 3]])
    with torch.inference_mode():
        model(ids)  # pack once
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(1.5)
        plain.model.embed_tokens.weight.mul_(1.5)
    with torch.inference_mode():
        torch.testing.assert_close(model(ids).logits, plain(ids).logits, atol=1e-5, rtol=1e-5)


def test_prepacked_model_gives_the_same_logits_and_greedy_text_as_plain():
    plain = tiny_llama(64, seed=1, hidden=64, n_layers=2, dtype=torch.float32)
    packed = prepack_for_cpu(copy.deepcopy(plain), True)
    ids = torch.tensor([[5, 9, 2, 7]])
    with torch.inference_mode():
        torch.testing.assert_close(packed(ids).logits, plain(ids).logits, atol=1e-5, rtol=1e-5)
    a = sd.autoregressive_generate(plain, ids, 40, sampling=GREEDY).tokens
    b = sd.autoregressive_generate(packed, ids, 40, sampling=GREEDY).tokens
    assert a.tolist() == b.tolist()


def test_opt_out_by_argument_and_by_environment(monkeypatch):
    model = tiny_llama(16, seed=0, hidden=32, dtype=torch.float32)
    assert prepack_for_cpu(copy.deepcopy(model), False).lm_head.__class__ is nn.Linear
    monkeypatch.setenv("SPECDEC_PREPACK", "0")
    assert prepack_for_cpu(copy.deepcopy(model)).lm_head.__class__ is nn.Linear
    monkeypatch.setenv("SPECDEC_PREPACK", "1")
    assert isinstance(prepack_for_cpu(copy.deepcopy(model)).lm_head, PrepackedLinear)


def test_copies_dtype_changes_and_unpack_stay_correct():
    plain = tiny_llama(16, seed=0, hidden=32, dtype=torch.float32)
    packed = prepack_for_cpu(copy.deepcopy(plain), True)
    ids = torch.tensor([[1, 2, 3]])
    with torch.inference_mode():
        packed(ids)
        twin = copy.deepcopy(packed)  # oneDNN's tensor is not copied: the copy packs afresh
        torch.testing.assert_close(twin(ids).logits, plain(ids).logits, atol=1e-5, rtol=1e-5)
        double = copy.deepcopy(packed).to(torch.float64)  # packed for float32: float64 takes the plain path
        torch.testing.assert_close(double(ids).logits.float(), plain(ids).logits, atol=1e-4, rtol=1e-4)
        back = unpack(copy.deepcopy(packed))
        assert back.lm_head.__class__ is nn.Linear
        torch.testing.assert_close(back(ids).logits, plain(ids).logits)


@pytest.mark.slow
def test_real_pair_prepacked_matches_plain_and_every_drafter_stays_greedy_exact():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain, tok = sd.load_offline_target(dtype=torch.float32, prepack=False)
        target, feature, _ = sd.load_offline_pair(dtype=torch.float32, draft="feature", prepack=True,
                                                  choose_method=False)  # the methods are named below
        _, lm_draft, _ = sd.load_offline_pair(dtype=torch.float32, draft="lm", prepack=True)
    ids = sd.encode_chat(tok, "Name three rivers in Europe.")
    with torch.inference_mode():
        a, b = plain(ids).logits, target(ids).logits
    assert (a - b).abs().max() < 5e-4
    assert torch.equal(a.argmax(-1), b.argmax(-1))
    want = sd.autoregressive_generate(plain, ids, 24, sampling=GREEDY).tokens.tolist()
    V = sd.vocab_size(target)
    for name, drafter in {"feature": feature, "lm": sd.ModelDrafter(lm_draft), "ngram": sd.NgramDrafter(V),
                          "fallback": sd.FallbackDrafter(sd.NgramDrafter(V), feature)}.items():
        got = sd.speculative_generate(target, drafter, ids, 24, gamma=2, sampling=GREEDY).tokens.tolist()
        assert got == want, name
        got = sd.speculative_generate(target, drafter, ids, 24, tree=sd.TreeBudget(3, 3, 8),
                                      sampling=GREEDY).tokens.tolist()
        assert got == want, f"{name} (dynamic tree)"


def _gqa_llama(n_layers: int = 2):  # 6 query heads on 2 key heads, as SmolLM2 groups 9 on 3
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=32, hidden_size=48, intermediate_size=64, num_hidden_layers=n_layers,
                         num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64,
                         bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def _tree_pass_logits(model, ids: list[int], new: list[int], allowed: torch.Tensor) -> torch.Tensor:
    """Prefill ids, then one pass of `new` with its own mask rows (allowed [q, q] among the new rows)."""
    lm = sd.CachedModel(model)
    context = torch.tensor(ids + new)
    with torch.inference_mode():
        lm.logits(torch.tensor(ids))
        rows = torch.cat([torch.ones(len(new), len(ids), dtype=torch.bool), allowed], 1)  # [q, n + q]
        mask = additive_mask(rows, torch.float32)[None, None]
        depth = allowed.sum(1) - 1  # a row's position: its prefix's length
        return lm.logits(context, position_ids=len(ids) + depth, attention_mask=mask)


def test_grouped_attention_is_chosen_on_a_cpu_for_grouped_heads_and_opted_out_with_the_prepack():
    assert prepack_for_cpu(_gqa_llama(), True).config._attn_implementation == kernels.GROUPED
    assert prepack_for_cpu(_gqa_llama(), False).config._attn_implementation == "sdpa"
    ungrouped = tiny_llama(16, seed=0, hidden=32, dtype=torch.float32)  # 2 query heads on 2 key heads
    assert prepack_for_cpu(ungrouped, True).config._attn_implementation == "sdpa"
    drafter = nn.Module()  # a drafter that holds a Hugging Face body (as FeatureHead does)
    drafter.body = _gqa_llama().model
    assert prepack_for_cpu(drafter, True).body.config._attn_implementation == kernels.GROUPED
    assert unpack(prepack_for_cpu(_gqa_llama(), True)).config._attn_implementation == "sdpa"


def test_grouped_attention_gives_hugging_faces_logits_for_chains_and_trees_and_a_wrong_grouping_is_caught(
        monkeypatch):
    plain = _gqa_llama()
    grouped = prepack_for_cpu(copy.deepcopy(plain), True)
    ids, new = [3, 1, 4, 1, 5, 9, 2], [6, 5, 3, 5]
    causal = torch.tril(torch.ones(4, 4, dtype=torch.bool))
    tree = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    with torch.inference_mode():  # a chain pass: Hugging Face's own causal mask over the cache
        lm_a, lm_b = sd.CachedModel(plain), sd.CachedModel(grouped)
        lm_a.logits(torch.tensor(ids)), lm_b.logits(torch.tensor(ids))
        want = lm_a.logits(torch.tensor(ids + new))
        torch.testing.assert_close(lm_b.logits(torch.tensor(ids + new)), want, atol=1e-5, rtol=1e-5)
    for allowed in (causal, tree):
        want = _tree_pass_logits(plain, ids, new, allowed)
        torch.testing.assert_close(_tree_pass_logits(grouped, ids, new, allowed), want, atol=1e-5, rtol=1e-5)

    def tiled(module, query, key, value, attention_mask, scaling=None, **kwargs):  # head h on h % 2: wrong
        key, value = key.repeat(1, 3, 1, 1), value.repeat(1, 3, 1, 1)
        out = nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                         scale=scaling)
        return out.transpose(1, 2).contiguous(), None
    monkeypatch.setitem(kernels.AttentionInterface._global_mapping, kernels.GROUPED, tiled)
    got = _tree_pass_logits(grouped, ids, new, tree)
    assert (got - _tree_pass_logits(plain, ids, new, tree)).abs().max() > 1e-3  # the comparison has power


def _qwen2(n_layers: int = 2):  # q, k and v with biases, grouped heads: what fusion must also get right
    from transformers import Qwen2Config, Qwen2ForCausalLM
    config = Qwen2Config(vocab_size=32, hidden_size=48, intermediate_size=64, num_hidden_layers=n_layers,
                         num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64,
                         bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():  # random biases: zeros would hide a bias put in the wrong columns
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_()
    return model


def _counted_products(monkeypatch, model, ids) -> tuple[torch.Tensor, int]:  # -> (logits, oneDNN products)
    calls = []
    real = kernels.packed_linear
    monkeypatch.setattr(kernels, "packed_linear", lambda *a: calls.append(1) or real(*a))
    with torch.inference_mode():
        logits = model(ids).logits
    monkeypatch.setattr(kernels, "packed_linear", real)
    return logits, len(calls)


@pytest.mark.parametrize("make", [_gqa_llama, _qwen2])
def test_fused_projections_give_the_same_logits_from_four_products_a_layer_and_keep_state_dict(monkeypatch,
                                                                                               make):
    plain = make()
    separate = prepack_for_cpu(copy.deepcopy(plain), True, fuse=False)
    fused = prepack_for_cpu(copy.deepcopy(plain), True, fuse=True)
    assert set(fused.state_dict()) == set(plain.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(fused.state_dict().values(), plain.state_dict().values()))
    assert "fused" not in kernel_path(separate) and "4 groups of projections fused" in kernel_path(fused)
    ids = torch.tensor([[5, 9, 2, 7, 1]])
    want, n_separate = _counted_products(monkeypatch, separate, ids)
    got, n_fused = _counted_products(monkeypatch, fused, ids)
    assert (n_separate, n_fused) == (2 * 7 + 1, 2 * 4 + 1)  # q, k, v, o, gate, up, down per layer; lm_head
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got, plain(ids).logits, atol=1e-5, rtol=1e-5)
    twin = copy.deepcopy(fused)  # the copy packs afresh, its groups pointing at its own layers
    assert twin.model.layers[0].self_attn.k_proj.fused[0].layers[1] is twin.model.layers[0].self_attn.k_proj
    with torch.inference_mode():
        torch.testing.assert_close(twin(ids).logits, want, atol=1e-5, rtol=1e-5)
    # power: k's and v's columns swapped in the shared product change the logits
    shared = fused.model.layers[0].self_attn.k_proj.fused[0]
    shared.spans[1], shared.spans[2] = shared.spans[2], shared.spans[1]
    with torch.inference_mode():
        assert (fused(ids).logits - want).abs().max() > 1e-3


def test_fused_projections_follow_weight_changes_and_step_aside_for_training_plain_path_and_opt_out(
        monkeypatch):
    plain = _gqa_llama()
    fused = prepack_for_cpu(copy.deepcopy(plain), True, fuse=True)
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    with torch.inference_mode():
        fused(ids)  # packs the stacked weights
    with torch.no_grad():
        for model in (plain, fused):
            model.model.layers[1].mlp.up_proj.weight.mul_(-2.0)  # the next pass sees it
    with torch.inference_mode():
        torch.testing.assert_close(fused(ids).logits, plain(ids).logits, atol=1e-5, rtol=1e-5)
        with kernels.plain_path():
            _, n = _counted_products(monkeypatch, fused, ids)
            assert n == 0
    q_proj = fused.model.layers[0].self_attn.q_proj
    assert "prepacked for oneDNN" in repr(q_proj)
    x = torch.randn(1, 3, q_proj.in_features)
    with torch.inference_mode():
        first = q_proj(x).clone()
        x.mul_(2.0)  # the same tensor, changed: a layer that asks again gets a fresh product
        torch.testing.assert_close(q_proj(x), 2 * first, atol=1e-4, rtol=1e-4)
        for m in (q_proj, fused.model.layers[0].self_attn.k_proj, fused.model.layers[0].self_attn.v_proj):
            m(x)
        assert q_proj.fused[0].last[0] is None  # every layer served: nothing held
    fused.train()
    loss = fused(ids).logits.sum()  # autograd on: every layer its own F.linear, gradients reach q_proj
    loss.backward()
    assert fused.model.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0
    assert kernels.fuse_projections(copy.deepcopy(plain), False) == 0
    monkeypatch.setenv("SPECDEC_FUSE", "0")
    assert "fused" not in kernel_path(prepack_for_cpu(copy.deepcopy(plain), True))
    monkeypatch.setenv("SPECDEC_FUSE", "1")
    assert "fused" in kernel_path(prepack_for_cpu(copy.deepcopy(plain), True))


def test_separate_products_switches_a_fused_model_back_for_the_block_only(monkeypatch):
    plain = _gqa_llama()
    fused = prepack_for_cpu(copy.deepcopy(plain), True, fuse=True)
    ids = torch.tensor([[2, 7, 1, 8, 2]])
    assert kernels.n_fused_groups(fused) == 4
    with kernels.separate_products(fused):
        assert kernels.n_fused_groups(fused) == 0
        inside, n_inside = _counted_products(monkeypatch, fused, ids)
    after, n_after = _counted_products(monkeypatch, fused, ids)
    assert (n_inside, n_after) == (2 * 7 + 1, 2 * 4 + 1) and kernels.n_fused_groups(fused) == 4
    torch.testing.assert_close(inside, after, atol=1e-5, rtol=1e-5)
    with pytest.raises(RuntimeError), kernels.separate_products(fused):  # restored even when the block fails
        raise RuntimeError("inside")
    assert kernels.n_fused_groups(fused) == 4
