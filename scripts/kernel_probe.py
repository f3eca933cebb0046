"""The small-M CPU kernel, measured on the whole target: t(k) for k = 1..16 on each kernel path, side by side.

    OMP_NUM_THREADS=1 python scripts/kernel_probe.py --threads 1 [--ks 1-16] [--rounds 5]
                      [--paths prepacked,unfused,hint1,hint16,plain,inductor,zentorch,int4]
                      [--json runs/kernel_probe.json]

Paths (the offline target, in the project's dtype for this CPU, a 200-token context in its KV cache):
  prepacked  today's default: oneDNN-packed linear layers (kernels.prepack_for_cpu, batch-size hint 8), eager,
             q, k and v in one product and gate and up in another (4 GEMMs a layer instead of 7)
  unfused    the same, each projection its own product (SPECDEC_FUSE=0; the default before 2026-12-05, sixth
             session)
  hint1      the default with `_reorder_linear_weight`'s batch-size hint at 1 (hint16: at 16)
  plain      F.linear on the unpacked weights (SPECDEC_PREPACK=0), eager
  eagerattn  prepacked, with transformers' "eager" attention (matmul, softmax, matmul) instead of SDPA
  zentorch   AMD's ZenDNN plugin (`pip install zentorch==<torch's version>`, where the CPU is AMD):
             torch.compile(backend="zentorch") over the static KV cache, one graph per k, as inductor
  int4       the default with the GGUF's own 4-bit weights for every projection (models.int4, the opt-in
             SPECDEC_INT4=1): torch's CPU int4 kernel, half a byte per weight; the output layer stays oneDNN's
  aot        the shipped compiled pass (models.aot): the AOTInductor package `python -m specdec_ref compile`
             built on this machine, dynamic rows and buffer length, loaded in seconds
  inductor   torch.compile with freezing, mode max-autotune-no-cudagraphs and the GEMM backends CPP and ATen
             (Inductor's C++ micro-GEMM where it wins its autotuning), static shapes: one graph per k, over
             the static KV cache (cache.StaticCachedModel); the compile time of every k is printed
Rounds interleave paths and ks, so a burst of load lands on all alike; medians are reported. Besides each
path's ratio t(k)/t(1), every t(k) is given against the best t(1) of any path: a kernel that lowers t(1) more
than t(8) can win with a worse ratio. The logits of every path are compared with the plain path's at k = 4.
`ONEDNN_VERBOSE=1` in the environment shows which oneDNN implementation runs (use --rounds 1 --ks 1,8).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from specdec_ref.cache import cached_model  # noqa: E402
from specdec_ref.models import aot, kernels  # noqa: E402
from specdec_ref.models.loading import default_dtype, load_offline_target  # noqa: E402

CONTEXT = 200  # tokens in the KV cache before every timed pass
INDUCTOR_OPTIONS = dict(mode="max-autotune-no-cudagraphs")


def parse_ks(text: str) -> list[int]:
    """ "1-4,8,16" -> [1, 2, 3, 4, 8, 16]"""
    ks = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        ks += list(range(int(lo), int(hi or lo) + 1))
    if not ks or min(ks) < 1:
        raise ValueError(f"--ks needs positive token counts, got {text!r}")
    return sorted(set(ks))


def prepacked(model, hint: int, fuse: bool = True):
    """A copy of the model with every linear layer oneDNN-packed for batch-size hint `hint`, its projections
    that read one input fused (`kernels.fuse_projections`) or not."""
    packed = kernels.prepack_for_cpu(aot.copy_model(model), True, fuse=fuse)
    for m in packed.modules():
        if isinstance(m, kernels.PrepackedLinear):
            m.packed = kernels.PackedWeight(batch_hint=hint)
            if m.fused:
                m.fused[0].batch_hint = hint
    return packed


def zentorch_lm(model):
    """The static-cache model compiled by AMD's zentorch backend (one graph per k)."""
    try:
        import zentorch  # noqa: F401  (registers the backend)
    except ImportError as err:
        version = torch.__version__.split("+")[0]
        raise SystemExit(f"zentorch: {err}; pip install 'zentorch=={version}.*'") from err
    return cached_model(model, cache="compiled", max_len=CONTEXT + 64, name="zentorch",
                        compile_options=dict(backend="zentorch"))


def with_eager_attention(model):
    """The model with transformers' matmul-softmax-matmul attention instead of SDPA's kernel."""
    model.set_attn_implementation("eager")
    return model


def inductor_lm(model):
    """The static-cache model compiled by Inductor with frozen weights and GEMM autotuning (CPP, ATen)."""
    import torch._inductor.config as inductor

    inductor.freezing = True
    inductor.max_autotune_gemm_backends = "CPP,ATEN"
    return cached_model(model, cache="compiled", max_len=CONTEXT + 64, name="probe",
                        compile_options=INDUCTOR_OPTIONS)


def aot_lm(model):
    """The shipped compiled pass: this machine's AOTInductor package (`python -m specdec_ref compile`)."""
    path = aot.package_path(model)
    if not path.exists():
        raise SystemExit(f"no compiled pass for this machine at {path}: run python -m specdec_ref compile")
    return aot.CompiledPass(model, aot.load_package(path), path).lm(name="aot")


class Path_:
    """One kernel path: a cached model holding the 200-token context, and one timed pass of k tokens."""

    def __init__(self, name: str, lm, ids: torch.Tensor):
        self.name, self.lm, self.ids = name, lm, ids
        lm.rollback(0)
        lm.logits(ids[:CONTEXT])  # the context, once

    def pass_seconds(self, k: int) -> float:
        context = self.ids[:CONTEXT + k]  # the model runs on what its cache lacks: the last k tokens
        start = time.perf_counter()
        self.lm.logits(context)
        seconds = time.perf_counter() - start
        self.lm.rollback(CONTEXT)
        return seconds

    def logits(self, k: int) -> torch.Tensor:  # -> [k, V]
        out = self.lm.logits(self.ids[:CONTEXT + k]).float()
        self.lm.rollback(CONTEXT)
        return out


@torch.inference_mode()
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", default="1-16")
    parser.add_argument("--paths", default="prepacked,unfused,hint1,hint16,plain,eagerattn,inductor")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    ks, names = parse_ks(args.ks), args.paths.split(",")
    torch.set_num_threads(args.threads)
    dtype = default_dtype(torch.device("cpu"))
    model, _ = load_offline_target("cpu", dtype, prepack=False)
    ids = torch.randint(0, model.config.vocab_size, (CONTEXT + max(ks),),
                        generator=torch.Generator().manual_seed(0))
    print(f"offline target, {dtype}, cpu, {args.threads} thread(s), torch {torch.__version__}, "
          f"context {CONTEXT}, ks {ks}, {args.rounds} rounds")
    builders = {"prepacked": lambda: cached_model(prepacked(model, 8), name="prepacked"),
                "hint1": lambda: cached_model(prepacked(model, 1), name="hint1"),
                "hint16": lambda: cached_model(prepacked(model, 16), name="hint16"),
                "plain": lambda: cached_model(model, name="plain"),
                "eagerattn": lambda: cached_model(with_eager_attention(prepacked(model, 8)), name="eager"),
                "unfused": lambda: cached_model(prepacked(model, 8, fuse=False), name="unfused"),
                "inductor": lambda: inductor_lm(model),
                "zentorch": lambda: zentorch_lm(model),
                "aot": lambda: aot_lm(model),
                "int4": lambda: cached_model(load_offline_target("cpu", dtype, int4=True)[0], name="int4")}
    unknown = set(names) - set(builders)
    if unknown:
        parser.error(f"unknown paths {sorted(unknown)}; choose from {sorted(builders)}")
    paths, compile_s = [], {}
    for name in names:
        path = Path_(name, builders[name](), ids)
        for k in ks:  # the first pass of each k: compiles a graph (inductor), packs weights (prepacked)
            start = time.perf_counter()
            path.pass_seconds(k)
            compile_s.setdefault(name, {})[k] = time.perf_counter() - start
        print(f"  {name}: first passes {sum(compile_s[name].values()):.1f} s in all "
              f"(max {max(compile_s[name].values()):.1f} s at one k)", flush=True)
        paths.append(path)
    base, k_check = next((p for p in paths if p.name == "plain"), paths[0]), min(4, max(ks))
    reference = base.logits(k_check)
    for p in paths:
        print(f"  {p.name}: max |logit - {base.name}'s| at k = {k_check}: "
              f"{(p.logits(k_check) - reference).abs().max():.3g}")
    times = {p.name: {k: [] for k in ks} for p in paths}
    for _ in range(args.rounds):
        for k in ks:
            for p in paths:
                times[p.name][k].append(p.pass_seconds(k))
    med = {name: {k: statistics.median(v) for k, v in per_k.items()} for name, per_k in times.items()}
    best1 = min(m[ks[0]] for m in med.values())
    print(f"\nt(k) in ms (median of {args.rounds}); in brackets t(k) / best t({ks[0]}) of any path "
          f"= {best1 * 1e3:.1f} ms")
    print("k".rjust(4) + "".join(f"{name:>22}" for name in med))
    for k in ks:
        print(f"{k:4d}" + "".join(f"{m[k] * 1e3:12.1f} [{m[k] / best1:5.2f}]   " for m in med.values()))
    print("\nt(k) / t(1) per path:")
    for name, m in med.items():
        print(f"  {name:>10}: " + " ".join(f"{m[k] / m[ks[0]]:.2f}" for k in ks))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(dict(dtype=str(dtype), threads=args.threads, ks=ks, context=CONTEXT,
                                             rounds=args.rounds, median_s=med, first_pass_s=compile_s,
                                             torch=torch.__version__), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
