"""The loop's own overhead per target pass, from hooks on the models alone: any commit of the package can
measure it.

    PYTHONPATH=<checkout> python scripts/loop_overhead.py [--threads 1] [--tokens 64] [--prompts 4] \
        [--temperature 0]

For each method (the LM draft's chain γ = 3, the feature head's chain γ = 2 and its dynamic tree 3/3/8, and
Hugging Face's assisted generation with the same LM draft at γ = 3, set on the assistant's generation_config;
greedy unless --temperature says otherwise (each run seeded alike), on distill.prompts.HELD_OUT[12:]), the
overhead is the generation's wall time minus the time spent
inside the models' forward passes (target body and head, draft body and head; the feature head's reduced
output layer through `ReducedHead.reduced_logits`), per target pass. t(1) is the time of one target forward
in plain decoding, measured the same way, so h / t(1) is comparable with `python -m specdec_ref diagnose`'s h.
Prints one JSON line; run it on two checkouts, alternating, to compare them. Where this machine has compiled
passes (`python -m specdec_ref compile`), the packages' own calls are timed instead, since hooks on the eager
modules never fire (SPECDEC_AOT=0 measures the eager path). Hugging Face's generate always runs the eager
target.
"""
import argparse
import json
import statistics
import sys
import time
import warnings

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=1)
p.add_argument("--tokens", type=int, default=64)
p.add_argument("--prompts", type=int, default=4)
p.add_argument("--temperature", type=float, default=0.0, help="0: greedy; else sampled at this temperature")
args = p.parse_args()
warnings.filterwarnings("ignore")
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref.distill.prompts import HELD_OUT  # noqa: E402
from specdec_ref.lab.hf import assistant_settings, constant_gamma  # noqa: E402
from specdec_ref.lab.timing import InsideClock  # noqa: E402
from specdec_ref.models import offline_draft  # noqa: E402
from specdec_ref.models.offline_draft import ReducedHead  # noqa: E402

target, feature, tok = sd.load_offline_pair(draft="feature")
lm = sd.prepack_for_cpu(offline_draft.load(target))
inside = InsideClock()
starts = {}


def pre(key):
    def hook(module, a, k=None):
        starts[key] = time.perf_counter()
    return hook


def post(key, is_target=False):
    def hook(module, a, out):
        inside.add(time.perf_counter() - starts.pop(key), is_target)
    return hook


modules = {"target body": (target.base_model, True), "target head": (target.get_output_embeddings(), False),
           "lm body": (lm.base_model, False), "head body": (feature.head.body, False),
           "head fc": (feature.head.fc, False)}
for key, (module, is_target) in modules.items():
    module.register_forward_pre_hook(pre(key))
    module.register_forward_hook(post(key, is_target))
reduced = ReducedHead.reduced_logits


def timed_reduced(self, hidden):  # the feature head's and the LM draft's output layer, by either route
    t0 = time.perf_counter()
    out = reduced(self, hidden)
    inside.add(time.perf_counter() - t0)
    return out


ReducedHead.reduced_logits = timed_reduced


compiled = sd.models.aot.compiled_pass(target)
if compiled is not None:
    compiled.runner = inside.wrap(compiled.runner, is_target=True)  # a compiled pass: no hooks fire
if type(feature.head).__name__ == "CompiledHead":
    feature.head.__dict__["runner"] = inside.wrap(feature.head.runner)
    if feature.head.chains is not None:  # chains of γ in one call, draws inside (models.aot_chain)
        feature.head.chains.wrap(inside.wrap)
    if feature.head.trees is not None:  # greedy trees in one call (models.aot_tree)
        feature.head.trees.wrap(inside.wrap)
sampling = sd.SamplingConfig(args.temperature)


def seeded():
    return torch.Generator().manual_seed(0)


runs = {"plain": lambda ids: sd.autoregressive_generate(target, ids, args.tokens, sampling=sampling,
                                                        generator=seeded()),
        "chain γ=3, LM": lambda ids: sd.speculative_generate(target, sd.ModelDrafter(lm), ids, args.tokens,
                                                            gamma=3, sampling=sampling, generator=seeded()),
        "chain γ=2, head": lambda ids: sd.speculative_generate(target, feature, ids, args.tokens, gamma=2,
                                                              sampling=sampling, generator=seeded()),
        "tree 3/3/8, head": lambda ids: sd.speculative_generate(target, feature, ids, args.tokens,
                                                               tree=sd.TreeBudget(3, 3, 8), sampling=sampling,
                                                               generator=seeded()),
        "HF assisted γ=3, LM": lambda ids: hf_assisted(ids, 3)}


def hf_assisted(ids, gamma):  # the same LM draft through Hugging Face, γ on the assistant's config
    sampled = {"do_sample": True, "temperature": args.temperature, "top_k": None} if args.temperature else {
        "do_sample": False}
    torch.manual_seed(0)
    with assistant_settings(lm, **constant_gamma(gamma)):
        target.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=lm, **sampled,
                        max_new_tokens=args.tokens, min_new_tokens=args.tokens, pad_token_id=tok.eos_token_id)


enc = [sd.encode_chat(tok, q) for q in HELD_OUT[12:12 + args.prompts]]
per_pass = {name: [] for name in runs}
t1 = []
for i, ids in enumerate([enc[0]] + enc):  # the first prompt twice: a warm-up round, dropped
    for name, run in runs.items():
        inside.reset()
        t0 = time.perf_counter()
        run(ids)
        wall = time.perf_counter() - t0
        if i:
            per_pass[name].append((wall - inside.seconds) / inside.target_calls * 1e3)
            if name == "plain":
                t1.append(inside.seconds / inside.target_calls * 1e3)
step = statistics.median(t1)
print(json.dumps({"package": sd.__file__, "threads": args.threads, "dtype": str(target.dtype),
                  "temperature": args.temperature,
                  "compiled": compiled is not None, "t1_ms": step,
                  **{name: {"ms": statistics.median(v), "of_t1": statistics.median(v) / step}
                     for name, v in per_pass.items()}}), file=sys.stdout)
