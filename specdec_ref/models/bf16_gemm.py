"""A micro-GEMM for Inductor that multiplies bfloat16 with AVX512-BF16's dot-product instruction.

The compiled packages (`models.aot`) get their matrix products from Inductor's C++ GEMM template, which cuts
a product into register blocks and hands each to a "micro-GEMM". For bfloat16 on a CPU without AMX, Inductor's
only one is `CppMicroGemmFP32Vec`: it converts every 16 weights it loads to float32, and for every row it
broadcasts one input converted to float32, then multiplies and adds. On an AMD EPYC Zen 4 that work, not the
weight stream, is what a pass of a few rows costs: a second block of 4 rows cost almost as much as the first.

`VDPBF16PS` (`_mm512_dpbf16_ps`) takes 32 bfloat16 weights and a pair of bfloat16 inputs and adds two
products into each of 16 float32 sums: no conversions, half the instructions. It wants the weights in "VNNI"
order, pairs of consecutive k for each column ([K / 2, N, 2]), which the template already packs that way
when the weights are frozen into the package. `dot_products()` swaps this micro-GEMM in for Inductor's own
while a package compiles, on CPUs and compilers that have the instruction; AMX kernels, where they exist,
still rank first. Measured on the whole target on that Zen 4 (`scripts/compare_packages.py`, the README): 5-6
rows cost about what 2-4 do, 8 rows 1.35 times a 2-row pass instead of 1.6, and up to 4 rows no more than
before. `small_register_blocks()` caps the register blocks of Inductor's own AVX-512 micro-GEMM the same way.
"""
from __future__ import annotations

import dataclasses
import functools
import os
from contextlib import contextmanager

import torch

BLOCK = (8, 48, 2)  # register block: rows, columns (3 vectors of 16 sums: 24 accumulators), k pairs
PREFETCH = 0  # k ahead at which each line of weights is asked for (0: by the hardware alone)
HINT = "T0"  # where those lines go: _MM_HINT_T0 (every cache level), NTA (non-temporal: least pollution)


def wanted() -> bool:
    """Whether packages compiled now use the dot-product micro-GEMM: a CPU with AVX512-BF16 whose compiler
    builds the instruction, unless SPECDEC_BF16_DOT=0."""
    if os.environ.get("SPECDEC_BF16_DOT", "1") == "0" or not torch.cpu._is_avx512_bf16_supported():
        return False
    from torch._inductor.cpu_vec_isa import VecAVX512, pick_vec_isa
    isa = pick_vec_isa()  # its check compiles a probe with -mavx512bf16
    return isinstance(isa, VecAVX512) and isa.is_avx512_bf16_supported()


def micro_gemms():
    """Inductor's micro-GEMM module (`cpp_micro_gemm`), with every micro-GEMM registered in its
    `micro_gemm_configs`; imported on first use, since Inductor's codegen is needed only to compile."""
    import torch._inductor.select_algorithm  # noqa: F401  (first: importing the micro-GEMMs alone is circular)
    from torch._inductor.codegen import cpp_gemm_template  # noqa: F401  (registers the micro-GEMMs)
    from torch._inductor.codegen import cpp_micro_gemm
    return cpp_micro_gemm


def micro_gemm_class(prefetch: int = 0, hint: str = HINT):
    """`CppMicroGemmBF16Dot`, made once per prefetch distance and hint, on first use. prefetch: how many
    values of k ahead (each step of 2 in k is 192 bytes further into a 48-column block) the kernel asks for
    each line of weights with `_mm_prefetch(..., _MM_HINT_<hint>)`, before it loads the current one; 0 leaves
    fetching ahead to the hardware."""
    if hint not in ("T0", "T1", "T2", "NTA"):
        raise ValueError(f"hint is one of T0, T1, T2, NTA (_MM_HINT_*), got {hint!r}")
    return _micro_gemm_class(int(prefetch), hint)


@functools.cache
def _micro_gemm_class(prefetch: int, hint: str):
    micro = micro_gemms()
    from torch._inductor.codegen.common import KernelTemplate

    class CppMicroGemmBF16Dot(micro.CppMicroGemm):
        """C (float32) = A (bfloat16, [M, K]) @ B (bfloat16, VNNI order), one register block of at most
        block_m x block_n at a time; M's tail gets a kernel with fewer rows. The template's call hands it one
        column block (N = block_n), B packed at freezing; a B it would have to pack itself is refused."""

        ENTRY = r"""
{{declare_kernel}} {
    {{kernel.assert_function}}(N % {{block_n}} == 0, "N must be a multiple of {{block_n}}");
    {{kernel.assert_function}}(K % 2 == 0, "K must be even (pairs of k)");
    const int64_t m_main = M - M % {{block_m}};
    for (int64_t m = 0; m < m_main; m += {{block_m}}) {
        for (int64_t n = 0; n < N; n += {{block_n}}) {
            {{kernel_name}}_kernel<{{block_m}}, {{block_n}}, accum>(
                A + m * lda, B + 2 * n, C + m * ldc + n, K, lda, ldb, ldc);
        }
    }
    switch (M - m_main) {  // the last rows, fewer than a block
{%- for rows in range(block_m - 1, 0, -1) %}
        case {{rows}}:
            for (int64_t n = 0; n < N; n += {{block_n}}) {
                {{kernel_name}}_kernel<{{rows}}, {{block_n}}, accum>(
                    A + m_main * lda, B + 2 * n, C + m_main * ldc + n, K, lda, ldb, ldc);
            }
            break;
{%- endfor %}
        default: break;
    }
}
"""

        KERNEL = r"""
template <int64_t ROWS, int64_t N, bool accum>
inline void {{kernel_name}}_kernel(
    const {{input_t}}* {{restrict_keyword}} A,
    const {{input2_t}}* {{restrict_keyword}} B,
    {{output_t}}* {{restrict_keyword}} C,
    int64_t K, int64_t lda, int64_t ldb, int64_t ldc
) {
    constexpr int COLS = N / 16;  // vectors of 16 float32 sums per row
    __m512i va;                   // a pair of inputs (k, k + 1) of one row, in all 16 lanes
    __m512i vb[COLS];             // 16 columns x the same pair of k: B[k / 2][n][k % 2]
    __m512 vc[ROWS * COLS];
    c10::ForcedUnroll<ROWS * COLS>{}([&](auto i) { vc[i] = _mm512_setzero_ps(); });
    auto step = [&](auto i, int64_t k) {
        constexpr int row = i / COLS;
        constexpr int col = i % COLS;
        if constexpr (col == 0) {
            va = _mm512_set1_epi32(*(const int32_t*)(A + row * lda + k));
        }
        if constexpr (row == 0) {
{%- if prefetch %}
            _mm_prefetch((const char*)(B + (k + {{prefetch}}) * ldb + col * 32), _MM_HINT_{{hint}});
{%- endif %}
            vb[col] = _mm512_loadu_si512((const __m512i*)(B + k * ldb + col * 32));
        }
        vc[i] = _mm512_dpbf16_ps(vc[i], (__m512bh)va, (__m512bh)vb[col]);  // 2 products per lane
    };
    int64_t k = 0;
    for (; k + 4 <= K; k += 4) {  // two pairs of k per turn
        c10::ForcedUnroll<ROWS * COLS>{}(step, k);
        c10::ForcedUnroll<ROWS * COLS>{}(step, k + 2);
    }
    for (; k < K; k += 2) {
        c10::ForcedUnroll<ROWS * COLS>{}(step, k);
    }
    c10::ForcedUnroll<ROWS * COLS>{}([&](auto i) {
        constexpr int row = i / COLS;
        constexpr int col = i % COLS;
        float* out = C + row * ldc + col * 16;
        _mm512_storeu_ps(out, accum ? _mm512_add_ps(vc[i], _mm512_loadu_ps(out)) : vc[i]);
    });
}
"""

        def codegen_define(self, kernel) -> str:
            if self.pack_vnni_B_locally:  # weights that are not frozen: the template would not pack them
                raise NotImplementedError("CppMicroGemmBF16Dot needs frozen weights (freezing=True)")
            block_m, block_n, _ = self.register_blocking
            options = dict(self.get_common_options(), declare_kernel=self.get_kernel_declaration(),
                           kernel=kernel, block_m=block_m, block_n=block_n, prefetch=prefetch, hint=hint)
            return "".join(KernelTemplate._template_from_string(t).render(options)
                           for t in (self.KERNEL, self.ENTRY))

        def get_b_layout(self):
            return micro.LayoutType.VNNI2

    return CppMicroGemmBF16Dot


def _pairs_of_k(config, m, n, k, alpha, num_threads, **kwargs) -> bool:
    return k % 2 == 0 and alpha == 1


@contextmanager
def dot_products(enabled: bool | None = None, block: tuple[int, int, int] = BLOCK, cls=None,
                 prefetch: int = PREFETCH, hint: str = HINT):
    """While compiling, Inductor's bfloat16 GEMMs on AVX-512 use `CppMicroGemmBF16Dot` (register blocks of
    `block`, weights fetched `prefetch` ahead) instead of `CppMicroGemmFP32Vec`; every other micro-GEMM
    (float32, AVX2, AMX) stays. Does nothing unless enabled (default: `wanted()`). cls: a micro-GEMM class in
    its place (the tests' broken one)."""
    if not (wanted() if enabled is None else enabled):
        yield
        return
    cls, micro = cls or micro_gemm_class(prefetch, hint), micro_gemms()
    from torch._inductor.cpu_vec_isa import VecAVX512
    saved = dict(micro.micro_gemm_configs)
    micro.micro_gemm_configs[micro.CppMicroGemmFP32Vec] = [
        c for c in saved[micro.CppMicroGemmFP32Vec]
        if not (c.vec_isa_cls is VecAVX512 and c.input_dtype == c.input2_dtype == torch.bfloat16)]
    micro.micro_gemm_configs[cls] = micro.generate_gemm_config(
        VecAVX512, [block], input_dtype=torch.bfloat16, output_dtype=torch.float, extra_check=_pairs_of_k)
    try:
        yield
    finally:
        micro.micro_gemm_configs.clear()
        micro.micro_gemm_configs.update(saved)


MAX_BLOCK_ACCUMULATORS = 12  # vector accumulators per register block of the AVX-512 micro-GEMM


@contextmanager
def small_register_blocks(max_accumulators: int = MAX_BLOCK_ACCUMULATORS):
    """While compiling, give Inductor's AVX-512 micro-GEMM (`CppMicroGemmFP32Vec`) register blocks of at most
    `max_accumulators` vectors: 4 rows x 48 columns instead of 8 x 48.

    Its kernel keeps a block's rows x columns/16 accumulators in a lambda-unrolled array. On an AMD EPYC Zen 4
    (AVX512-BF16, no AMX) a layer of 576 -> 1536 in bfloat16 cost 2-4 times as much for 5-8 rows as for 4
    whenever a block held 15 or more (8 x 48: 24; 8 x 32 at 8 rows: 16; 4 x 64 at 4 rows: 16), and stayed
    near the price of 4 rows with blocks of 12 or fewer; on the whole target t(8)/t(1) went from 3.74 to 1.43
    (`scripts/compare_packages.py`, book/measurement_log.md). A block of 4 rows reads its weights once per 4
    rows instead of once per 8, from cache. AVX2 blocks (4 x 24: 12 accumulators, untested) and the AMX
    kernel are left as they are."""
    micro = micro_gemms()
    saved = micro.micro_gemm_configs.get(micro.CppMicroGemmFP32Vec)
    def capped(config):  # the same block with as many rows as max_accumulators allows
        m, n, k = config.register_blocking
        cols = max(n // 16, 1)  # 16 floats per AVX-512 vector
        if config.vec_isa_cls is not micro.VecAVX512 or m * cols <= max_accumulators:
            return config
        return dataclasses.replace(config, register_blocking=micro.GemmBlocking(
            max(1, max_accumulators // cols), n, k))

    if saved is not None:
        micro.micro_gemm_configs[micro.CppMicroGemmFP32Vec] = [capped(c) for c in saved]
    try:
        yield
    finally:
        if saved is not None:
            micro.micro_gemm_configs[micro.CppMicroGemmFP32Vec] = saved
