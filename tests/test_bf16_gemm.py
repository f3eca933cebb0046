"""The dot-product micro-GEMM (models.bf16_gemm): it swaps in and out cleanly, and where the CPU has
AVX512-BF16 a compiled product through it equals the eager one for every row count, while a variant that
reads the weights in the wrong order is caught."""
import pytest
import torch
from torch import nn

from specdec_ref.models import bf16_gemm

HAS_BF16 = torch.cpu._is_avx512_bf16_supported()


def test_dot_products_swaps_only_the_bfloat16_avx512_micro_gemm_in_and_restores_the_rest():
    micro = bf16_gemm.micro_gemms()
    before = {cls: list(configs) for cls, configs in micro.micro_gemm_configs.items()}
    ours = bf16_gemm.micro_gemm_class()
    with bf16_gemm.dot_products(enabled=True, cls=ours):
        inside = micro.micro_gemm_configs
        assert [c.register_blocking for c in inside[ours]] == [bf16_gemm.BLOCK]
        fp32vec = inside[micro.CppMicroGemmFP32Vec]
        assert not any(c.vec_isa_cls.__name__ == "VecAVX512" and c.input_dtype == torch.bfloat16
                       and c.input2_dtype == torch.bfloat16 for c in fp32vec)
        # float32, AVX2 and the rest are all still there
        assert [c for c in before[micro.CppMicroGemmFP32Vec]
                if not (c.vec_isa_cls.__name__ == "VecAVX512" and c.input_dtype == c.input2_dtype
                        == torch.bfloat16)] == fp32vec
        assert {cls for cls in inside if cls is not ours} == set(before)
    assert {cls: list(configs) for cls, configs in micro.micro_gemm_configs.items()} == before
    with bf16_gemm.dot_products(enabled=False):  # off: nothing changes
        assert {cls: list(configs) for cls, configs in micro.micro_gemm_configs.items()} == before


def test_the_kernel_asks_for_its_weights_ahead_only_when_given_a_distance():
    from torch._inductor.codegen.common import KernelTemplate

    def rendered(prefetch: int, hint: str = bf16_gemm.HINT) -> str:
        cls = bf16_gemm.micro_gemm_class(prefetch, hint)
        names = dict(kernel_name="k", input_t="bf16", input2_t="bf16", output_t="float", restrict_keyword="")
        options = dict(names, prefetch=prefetch, hint=hint)
        return KernelTemplate._template_from_string(cls.KERNEL).render(options)

    assert bf16_gemm.micro_gemm_class() is bf16_gemm.micro_gemm_class(0)  # one class per distance and hint
    assert bf16_gemm.micro_gemm_class(64, "NTA") is not bf16_gemm.micro_gemm_class(64, "T0")
    off, on, nta = rendered(bf16_gemm.PREFETCH), rendered(64), rendered(64, "NTA")
    assert bf16_gemm.PREFETCH == 0 and "_mm_prefetch" not in off  # the default kernel fetches nothing ahead
    assert "_mm_prefetch((const char*)(B + (k + 64) * ldb + col * 32), _MM_HINT_T0);" in on
    assert "_mm_prefetch((const char*)(B + (k + 64) * ldb + col * 32), _MM_HINT_NTA);" in nta
    # the load right after it, in the same place as without: only the one line differs
    assert [line for line in on.splitlines() if "_mm_prefetch" not in line] == off.splitlines()
    with pytest.raises(ValueError, match="hint is one of T0, T1, T2, NTA"):
        bf16_gemm.micro_gemm_class(64, "L3")


def test_the_opt_out_and_a_cpu_without_the_instruction_turn_it_off(monkeypatch):
    monkeypatch.setenv("SPECDEC_BF16_DOT", "0")
    assert not bf16_gemm.wanted()
    monkeypatch.delenv("SPECDEC_BF16_DOT")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    assert not bf16_gemm.wanted()


def _compiled_products(cls, rows: list[int]) -> tuple[float, str]:
    """A bfloat16 MLP (shapes like the target's: 576 -> 1536 -> 576, and a 100-wide output) compiled the way
    the packages are (frozen weights, the C++ GEMM template), with `cls` as the bfloat16 micro-GEMM; the worst
    difference from eager over every row count (relative to the output's scale), and the generated code."""
    import torch._inductor.config as inductor_config
    from torch._inductor.utils import run_and_get_code
    torch.manual_seed(0)
    # the last output width, 100, is no multiple of a block's 48 columns: the template pads the packed weights
    model = nn.Sequential(nn.Linear(576, 1536, bias=False), nn.SiLU(), nn.Linear(1536, 576, bias=False),
                          nn.Linear(576, 100, bias=False)).to(torch.bfloat16).eval()
    torch._dynamo.reset()
    keys = ("freezing", "max_autotune", "max_autotune_gemm_backends")
    saved = {k: getattr(inductor_config, k) for k in keys}
    worst, code = 0.0, ""
    try:
        inductor_config.freezing, inductor_config.max_autotune = True, True
        inductor_config.max_autotune_gemm_backends = "CPP"
        with torch.no_grad(), bf16_gemm.dot_products(enabled=True, cls=cls):
            # where the CPU has AMX, Inductor's AMX kernel ranks first and the packages use it; this test is
            # about the dot-product kernel (what a CPU with AVX512-BF16 and no AMX runs), so AMX sits out
            # (`dot_products` puts every micro-GEMM back on leaving)
            micro = bf16_gemm.micro_gemms()
            micro.micro_gemm_configs.pop(micro.CppMicroGemmAMX, None)
            micro.micro_gemm_configs.pop(micro.CppMicroBrgemm, None)
            compiled = torch.compile(model, dynamic=True)
            for m in rows:
                x = torch.randn(m, 576, dtype=torch.bfloat16)
                out, codes = run_and_get_code(compiled, x)
                code += "".join(codes)
                want = model(x).float()
                worst = max(worst, float((out.float() - want).abs().max() / want.abs().max()))
    finally:
        for k, v in saved.items():
            setattr(inductor_config, k, v)
        torch._dynamo.reset()
    return worst, code


@pytest.mark.slow
@pytest.mark.skipif(not HAS_BF16, reason="needs a CPU with AVX512-BF16")
def test_compiled_products_through_the_dot_micro_gemm_equal_eager_and_a_misordered_one_is_caught():
    ours = bf16_gemm.micro_gemm_class()
    rows = [1, 2, 3, 5, 8, 9, 13]  # tails of every kind around blocks of 8
    worst, code = _compiled_products(ours, rows)
    assert "_mm512_dpbf16_ps" in code  # it really ran
    # bfloat16 outputs of float32 sums: a few units in the last place of bfloat16 (2^-8 relative)
    assert worst < 0.02, worst

    class Misordered(ours):  # reads the weights as they are, not in pairs of k: wrong products
        def get_b_layout(self):
            from torch._inductor.codegen.cpp_micro_gemm import LayoutType
            return LayoutType.NORMAL

    broken, code = _compiled_products(Misordered, [3])
    assert "_mm512_dpbf16_ps" in code
    assert broken > 0.2, broken  # power: the same check rejects it
