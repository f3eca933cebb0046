"""The GGUF's own 4-bit weights on a CPU (`models.int4`): recovered exactly or not at all, the same model as
the float32 weights they came from, and out of the way as soon as a weight changes or autograd runs."""
import pytest
import torch

import specdec_ref as sd
from specdec_ref.models import int4, kernels
from specdec_ref.models.toy import tiny_llama

pytestmark = pytest.mark.skipif(not (int4.available() and kernels.prepack_available("cpu")),
                                reason="this torch has no CPU int4 kernel or no oneDNN")
GREEDY = sd.SamplingConfig(temperature=0)


def q4_1(n: int, k: int, seed: int) -> torch.Tensor:  # -> [n, k] float32, as a Q4_1 GGUF dequantises
    """A weight as Q4_1 stores one: per block of 32, codes 0..15 (0 and 15 both used), float16 d and m."""
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (n, k // 32, 32), generator=g)
    codes[..., 0], codes[..., 1] = 0, 15
    d = (torch.rand(n, k // 32, 1, generator=g) * 0.02 + 1e-3).half().float()
    m = (-8 * d - torch.rand(n, k // 32, 1, generator=g) * 0.01).half().float()
    return (d * codes + m).reshape(n, k)


def q4_llama():  # a tiny Llama whose every decoder projection is Q4_1; embedding and head are not
    model = tiny_llama(64, seed=0, hidden=64, n_layers=2, dtype=torch.float32)
    for i, (name, lin) in enumerate(m for m in model.named_modules() if type(m[1]) is torch.nn.Linear):
        if name != "lm_head":
            lin.weight.data = q4_1(*lin.weight.shape, seed=i)
    return model


def test_codes_rebuild_a_q4_1_weight_exactly_and_refuse_one_that_is_not():
    w = q4_1(16, 96, seed=1)
    c = int4.codes_of(w)
    assert c is not None and c.codes.shape == (16, 96) and c.step.shape == (16, 3)
    assert int(c.codes.min()) == 0 and int(c.codes.max()) == 15
    rebuilt = c.step[..., None] * c.codes.reshape(16, 3, 32).float() + c.low[..., None]  # [16, 3, 32]
    assert torch.equal(rebuilt.reshape(16, 96), w)
    assert int4.codes_of(torch.randn(16, 96)) is None  # not Q4_1
    w2 = w.clone()
    w2[3, 5] += 1e-4  # one weight off its block's levels
    assert int4.codes_of(w2) is None
    assert int4.codes_of(w.bfloat16()) is None and int4.codes_of(torch.randn(16, 40)) is None


def loaded(model_fn, dtype):  # the loader's order: codes from float32, cast, prepack, attach
    model = model_fn()
    codes = int4.codes_by_layer(model)
    model = kernels.prepack_for_cpu(model.to(dtype), True)
    return model, int4.attach(model, codes)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int4_gives_the_float32_models_logits_for_one_row_and_several(dtype):
    reference = q4_llama()
    model, n = loaded(q4_llama, dtype)
    assert n == 2 * 7 and kernels.n_int4(model) == 14  # every projection; not the output layer
    assert "4-bit" in kernels.kernel_path(model)
    with kernels.plain_path():  # no layer packed (bfloat16 where oneDNN cannot pack it): still named
        assert "plain F.linear" in kernels.kernel_path(model) and "4-bit" in kernels.kernel_path(model)
    ids = torch.tensor([[3, 14, 15, 9, 2, 6, 5, 35]])
    with torch.inference_mode():
        want = reference(ids).logits
        got = model(ids).logits.float()
        with int4.without_int4():
            loaded_weights = model(ids).logits.float()
    err, err_loaded = (got - want).abs().max(), (loaded_weights - want).abs().max()
    if dtype == torch.float32:
        assert err < 2e-5 and err_loaded < 2e-5
    else:  # bfloat16 rounds scale and zero about as much as casting rounds the weights
        assert err < 0.03 * want.abs().max() and err < 2 * err_loaded
        assert not torch.equal(got, loaded_weights)  # the 4-bit path ran


def test_int4_steps_aside_for_a_changed_weight_autograd_and_plain_path():
    model, _ = loaded(q4_llama, torch.float32)
    ids = torch.tensor([[1, 2, 3, 4]])
    layer = model.model.layers[0]
    with torch.no_grad():
        layer.mlp.down_proj.weight.mul_(2)  # no longer the codes' weight
        layer.self_attn.k_proj.weight.add_(0.01)  # nor the fused q, k, v group's
    assert kernels.n_int4(model) == 14 - 1 - 3
    with torch.inference_mode():
        got = model(ids).logits
    with kernels.plain_path(), torch.inference_mode():
        want = model(ids).logits  # F.linear on the weights as they are now
    assert (got - want).abs().max() < 1e-4
    fresh, _ = loaded(q4_llama, torch.float32)
    for p in fresh.parameters():
        p.requires_grad_(True)
    fresh(ids).logits.sum().backward()  # training falls back to products autograd can follow
    assert fresh.model.layers[0].self_attn.q_proj.weight.grad is not None


def test_greedy_speculative_decoding_on_an_int4_target_equals_its_greedy_decoding():
    target, _ = loaded(q4_llama, torch.float32)
    draft = kernels.prepack_for_cpu(tiny_llama(64, seed=5, hidden=32, n_layers=1, dtype=torch.float32), True)
    ids = torch.tensor([[5, 7, 11, 13]])
    want = sd.autoregressive_generate(target, ids, 20, sampling=GREEDY).tokens
    for kw in (dict(gamma=3), dict(tree=sd.TreeBudget(2, 2, 4))):
        got = sd.speculative_generate(target, sd.ModelDrafter(draft), ids, 20, sampling=GREEDY, **kw).tokens
        assert torch.equal(got, want), kw


def test_int4_is_off_unless_asked(monkeypatch):
    monkeypatch.delenv("SPECDEC_INT4", raising=False)
    assert not int4.wanted()
    monkeypatch.setenv("SPECDEC_INT4", "1")
    assert int4.wanted() and not int4.wanted(False)


def test_the_loader_refuses_int4_where_the_kernel_is_slow_and_the_environment_skips_it(monkeypatch):
    with pytest.raises(ValueError, match="bfloat16"):
        sd.load_offline_target(dtype=torch.float32, int4=True)
    monkeypatch.setenv("SPECDEC_INT4", "1")
    model, _ = sd.load_offline_target(dtype=torch.float32)  # the environment's wish, where it cannot pay
    assert kernels.n_int4(model) == 0 and "4-bit" not in kernels.kernel_path(model)
