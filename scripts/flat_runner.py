"""The compiled packages called through `aot.FlatRunner` (boxed_run on the tensors) against torch's own
`AOTICompiledModel.__call__` (pytree work on every call), side by side on this machine's packages.

    python scripts/flat_runner.py [--threads 2] [--rounds 5]

Per call (the feature head's package, one row) and per generation (plain decoding and the head's chain
γ = 3, greedy, 64 tokens on three held-out prompts), the two ways alternate round by round; medians.
Needs the packages of `python -m specdec_ref compile`.
"""
import argparse
import statistics
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--rounds", type=int, default=5)
args = p.parse_args()
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref.distill.prompts import HELD_OUT  # noqa: E402
from specdec_ref.models.aot import FlatRunner  # noqa: E402
from specdec_ref.models.aot_head import pass_mask  # noqa: E402

target, drafter, tok = sd.load_offline_pair(draft="feature")
compiled, head = sd.models.aot.compiled_pass(target), drafter.head
if compiled is None or not isinstance(getattr(head, "runner", None), FlatRunner):
    raise SystemExit("no compiled target or head on this machine: run python -m specdec_ref compile")
flat = {"target": compiled.runner, "head": head.runner}


def use(way: str) -> None:
    compiled.runner = flat["target"] if way == "flat" else flat["target"].compiled
    head.__dict__["runner"] = flat["head"] if way == "flat" else flat["head"].compiled


cache = head.new_cache()
inputs = (torch.tensor([[5]]), head.inner.embed.weight, torch.randn(1, 1, head.inner.fc.weight.shape[1]).to(
    head.inner.fc.weight.dtype), torch.tensor([[10]]), torch.tensor(10),
    pass_mask(10, 1, head.inner.fc.weight.dtype), *cache.kv)
prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                   return_tensors="pt") for q in HELD_OUT[12:15]]
prompts = [x if isinstance(x, torch.Tensor) else x["input_ids"] for x in prompts]
greedy = sd.SamplingConfig(0)
jobs = {"head call": lambda: [head.runner(*inputs) for _ in range(100)],
        "plain": lambda: [sd.autoregressive_generate(target, x, 64, sampling=greedy) for x in prompts],
        "chain γ=3": lambda: [sd.speculative_generate(target, drafter, x, 64, gamma=3, sampling=greedy)
                              for x in prompts]}
times = {(job, way): [] for job in jobs for way in ("flat", "torch")}
with torch.inference_mode():
    for r in range(args.rounds + 1):  # the first round warms up
        for job, run in jobs.items():
            for way in ("flat", "torch") if r % 2 else ("torch", "flat"):
                use(way)
                t0 = time.perf_counter()
                run()
                if r:
                    times[job, way].append(time.perf_counter() - t0)
use("flat")
for job in jobs:
    f, t = (statistics.median(times[job, w]) for w in ("flat", "torch"))
    unit, scale = ("µs per call", 1e6 / 100) if job == "head call" else ("s", 1.0)
    print(f"{job:10s} FlatRunner {f * scale:8.2f} {unit}, torch's call {t * scale:8.2f} {unit}: "
          f"{t / f:.3f}x")
