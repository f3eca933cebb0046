"""Prepacked CPU linears: the same model (same logits, same greedy text, tied weights stay tied), an opt-out,
and every drafter works on top of them. How much faster they are is measured by `lab.timing`, not here."""
import copy

import pytest
import torch
from torch import nn

import specdec_ref as sd
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
        target, feature, _ = sd.load_offline_pair(dtype=torch.float32, draft="feature", prepack=True)
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
