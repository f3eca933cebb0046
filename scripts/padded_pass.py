"""Plain decoding through the compiled pass in 1-row passes against 2-row passes that score the token before
again (`aot_use.first_load`), side by side on this machine's package; optionally against a package
exported for exactly 1 row.

    python scripts/padded_pass.py [--threads 2] [--rounds 2] [--one-row-package]

Prints t(k) for k = 1, 2, 3, 4, 8 after 128 and 400 tokens (rounds interleaved), then greedy plain decoding
of 64 tokens on four held-out prompts both ways, alternating prompt by prompt: tokens/s, their ratio and how
many continuations came out identical (bfloat16 rounds a 2-row pass's rows differently from a 1-row pass's,
so a near tie can flip). --one-row-package also builds a package with q fixed at 1 (minutes) and times its
1-row pass against the dynamic package's, on the same context. Needs `python -m specdec_ref compile`.
"""
import argparse
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--rounds", type=int, default=2)
p.add_argument("--one-row-package", action="store_true")
args = p.parse_args()
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref.distill.prompts import HELD_OUT  # noqa: E402
from specdec_ref.lab.timing import latency_curve  # noqa: E402
from specdec_ref.models import aot  # noqa: E402
from specdec_ref.models.loading import encode_chat, load_offline_target, native_bf16_cpu  # noqa: E402

target, tok = load_offline_target("cpu", torch.bfloat16 if native_bf16_cpu() else
                                  torch.float32, prepack=False)
compiled = aot.attach(target, enabled=True)  # whatever the eager model measured
if compiled is None:
    raise SystemExit("no compiled pass on this machine: run python -m specdec_ref compile")
print(f"{target.dtype}, {args.threads} threads; this package's recorded choice: pad_single="
      f"{compiled.pad_single} ({compiled.path.with_suffix('.json').read_text().strip()})")

compiled.pad_single = False  # t(k) of the package itself
for ctx in (128, 400):
    c = latency_curve(target, [1, 2, 3, 4, 8], context_len=ctx, warmup=3, repeats=25)
    print(f"after {ctx} tokens: " + ", ".join(f"t({k}) = {c.median(k) * 1e3:.1f} ms" for k in c.ks))

greedy = sd.SamplingConfig(0.0)
prompts = [encode_chat(tok, text) for text in HELD_OUT[12:16]]
seconds, same = {False: 0.0, True: 0.0}, 0
sd.autoregressive_generate(target, prompts[0], 8, sampling=greedy)  # warm up
for _ in range(args.rounds):
    for ids in prompts:
        out = {}
        for pad in (False, True):
            compiled.pad_single = pad
            start = time.perf_counter()
            out[pad] = sd.autoregressive_generate(target, ids, 64, sampling=greedy).tokens
            seconds[pad] += time.perf_counter() - start
        same += int(torch.equal(out[False], out[True]))
n = args.rounds * len(prompts) * 64
print(f"plain decoding, 1-row passes: {n / seconds[False]:.1f} tokens/s; 2-row passes: "
      f"{n / seconds[True]:.1f} tokens/s; {seconds[False] / seconds[True]:.2f}x; identical continuations "
      f"{same}/{args.rounds * len(prompts)}")

if args.one_row_package:
    path = aot.package_path(target).with_name("one_row.pt2")
    inputs = aot.example_inputs(target, q=1)
    _, length, end = aot._dims()  # one row: the block's width and the columns' length still vary
    w = torch.export.Dim("w", min=1, max=aot.MAX_BLOCKS * aot.BLOCK)
    shapes = ({}, {}, {3: w}, {0: end}, {0: length}, tuple({2: length} for _ in inputs[5:]))
    aot._compile(aot.KVStep(target).eval(), inputs, shapes, path, None, "a pass of exactly 1 row")
    lms = {"dynamic, 1 row": aot.CompiledCachedModel(target, compiled.runner),
           "dynamic, 2 rows": aot.CompiledCachedModel(target, compiled.runner, pad_single=True),
           "one-row": aot.CompiledPass(target, aot.load_package(path), path).lm()}
    g = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for ctx in (128, 400):
            ids = torch.randint(0, target.config.vocab_size, (ctx + 1,), generator=g)
            times = {name: [] for name in lms}
            for lm in lms.values():  # the context through the dynamic package (the other takes 1 row only)
                run, lm.runner = lm.runner, compiled.runner
                lm.rollback(0)
                lm.logits(ids[:ctx], keep=1)
                lm.runner = run
            for _ in range(30):
                for name, lm in lms.items():
                    start = time.perf_counter()
                    lm.logits(ids, keep=1)
                    times[name].append(time.perf_counter() - start)
                    lm.rollback(ctx)
            print(f"after {ctx} tokens, a 1-row pass: " + ", ".join(
                f"{name} {sorted(t)[len(t) // 2] * 1e3:.1f} ms" for name, t in times.items()))
    path.unlink()
