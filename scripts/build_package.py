"""Build the offline target's compiled package with another kernel, to time it against this machine's with
scripts/compare_packages.py.

    PYTHONPATH=<checkout> python scripts/build_package.py OUT.pt2 --kernel dot --block 8x48
    PYTHONPATH=<checkout> python scripts/build_package.py OUT.pt2 --kernel dot --prefetch 128
    PYTHONPATH=<checkout> python scripts/build_package.py OUT.pt2 --kernel dot --prefetch 64 --hint NTA
    PYTHONPATH=<checkout> python scripts/build_package.py OUT.pt2 --kernel fp32vec --block 12x16
    PYTHONPATH=<checkout> python scripts/build_package.py OUT.pt2 --kernel onednn
    PYTHONPATH=<checkout> python scripts/build_package.py OUT.pt2 --inductor cpp.enable_concat_linear=True

--kernel dot: bfloat16 products by AVX512-BF16's dot-product instruction (`models.bf16_gemm`, the default
where the CPU has it) in register blocks of --block rows x columns, each line of weights asked for --prefetch
k ahead (`bf16_gemm.micro_gemm_class`; 0: by the hardware alone); fp32vec: Inductor's own micro-GEMM, every
bfloat16 AVX-512 block set to --block; onednn: oneDNN's kernels throughout (frozen weights, no autotuning).
--inductor NAME=VALUE (repeatable) sets one more of Inductor's settings while compiling (a Python literal;
e.g. cpp.enable_concat_linear=True: q, k and v in one product, gate and up in another). Prints the package's
largest logit difference from the eager model. A few minutes on 2 cores.
"""
import argparse
import ast
import contextlib
import dataclasses
import functools
from pathlib import Path

import torch

from specdec_ref.models import aot, bf16_gemm
from specdec_ref.models.loading import default_dtype, load_offline_target

p = argparse.ArgumentParser()
p.add_argument("out", type=Path)
p.add_argument("--kernel", choices=("dot", "fp32vec", "onednn"), default="dot")
p.add_argument("--block", default="8x48", help="register block, rows x columns (a multiple of 16)")
p.add_argument("--prefetch", type=int, default=bf16_gemm.PREFETCH, help="--kernel dot: k ahead, 0 for none")
p.add_argument("--hint", default=bf16_gemm.HINT, help="--kernel dot: the prefetch's _MM_HINT_ (T0, NTA, ...)")
p.add_argument("--threads", type=int, default=2)
p.add_argument("--inductor", action="append", default=[], metavar="NAME=VALUE",
               help="one more Inductor setting while compiling, e.g. cpp.enable_concat_linear=True")
args = p.parse_args()
torch.set_num_threads(args.threads)
rows, cols = map(int, args.block.split("x"))


@contextlib.contextmanager
def fp32vec_blocks(*_, **__):
    """Inductor's own micro-GEMM, with every bfloat16 AVX-512 block set to rows x cols."""
    micro = bf16_gemm.micro_gemms()
    saved = micro.micro_gemm_configs[micro.CppMicroGemmFP32Vec]
    micro.micro_gemm_configs[micro.CppMicroGemmFP32Vec] = [
        dataclasses.replace(c, register_blocking=micro.GemmBlocking(rows, cols, 1))
        if c.vec_isa_cls is micro.VecAVX512 and c.input_dtype == c.input2_dtype == torch.bfloat16 else c
        for c in saved]
    try:
        yield
    finally:
        micro.micro_gemm_configs[micro.CppMicroGemmFP32Vec] = saved


options = None  # aot.build's default: frozen weights, GEMMs autotuned between the C++ template and oneDNN
if args.kernel == "dot":  # aot._compile calls bf16_gemm.dot_products(): this block, on whatever `wanted` says
    bf16_gemm.dot_products = functools.partial(bf16_gemm.dot_products, enabled=True, block=(rows, cols, 2),
                                               prefetch=args.prefetch, hint=args.hint)
elif args.kernel == "fp32vec":
    bf16_gemm.wanted = lambda: False
    aot.small_register_blocks = fp32vec_blocks
else:
    options = dict(freezing=True)
extra = {}
for item in args.inductor:
    name, sep, value = item.partition("=")
    if not sep:
        raise SystemExit(f"--inductor takes NAME=VALUE, got {item!r}")
    extra[name] = ast.literal_eval(value)
if extra:
    options = {**(aot.INDUCTOR if options is None else options), **extra}
model, _ = load_offline_target("cpu", default_dtype(torch.device("cpu")), prepack=False, compiled=False)
aot.build(model, args.out, options=options)
worst = aot.check_against_eager(model, args.out)
print(f"{args.out}: logits differ from the eager model's by at most {worst:.3g}")
