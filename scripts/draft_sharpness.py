"""Is the head's q as sharp as the target's p? The expected acceptance of its depth-1 draw, q sharpened or
flattened by a factor s on its logits.

    PYTHONPATH=<checkout> python scripts/draft_sharpness.py [--threads 2] [--tokens 64] [--head DIR] \
        [--loop 2]

At temperature 1 a drafted token is kept with probability β = Σ_x min(p(x), q(x)) (Leviathan et al. 2023),
so a head whose q is flatter or sharper than the target's p loses acceptance it could keep. Along the
target's own sampled answers (T = 1, seeded) to the tuning prompts and to the evaluation prompts, the head's
depth-1 guess at each position (the target's real features fed) gives logits over its 8,192 tokens; for each
s the script averages β with q = softmax(s · logits). s is chosen on the tuning prompts and read on the
evaluation prompts. With --loop R, the shipped head then drafts in the loop at T = 1 on the evaluation prompts
with q as it is and sharpened by that s, R rounds alternating prompt by prompt, for the chain of γ = 3 and the
tree 2/2/4: tokens per second against the plain loop's, and τ. One JSON line.
"""
import argparse
import json
import time
import warnings

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--tokens", type=int, default=64)
p.add_argument("--head", default=None, help="an exported head's folder (default: the shipped head)")
p.add_argument("--loop", type=int, default=0, help="rounds of the loop comparison (0: none)")
args = p.parse_args()
warnings.filterwarnings("ignore")
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref.distill.prompts import HELD_OUT, TUNING  # noqa: E402
from specdec_ref.lab.compare import target_answers  # noqa: E402
from specdec_ref.lab.coverage import acceptance_by_sharpness  # noqa: E402
from specdec_ref.models import feature_draft  # noqa: E402

target, drafter, tok = sd.load_offline_pair(choose_method=False)
head = feature_draft.load(target, args.head) if args.head else getattr(drafter.head, "inner", drafter.head)


def beta_by_scale(prompts: list[str], seed: int) -> dict[float, float]:
    """β by s along the target's sampled answers (T = 1, one seed per prompt)."""
    answers = target_answers(target, [sd.encode_chat(tok, text) for text in prompts], args.tokens,
                             sampling=sd.SamplingConfig(1.0), seed=seed)
    return {s: round(b, 4) for s, b in acceptance_by_sharpness(target, head, answers).items()}


def loop(best: float) -> dict:
    """Tokens/s over the plain loop's, and τ, at T = 1: q as it is against q sharpened by `best`."""
    encoded = [sd.encode_chat(tok, text) for text in HELD_OUT[12:22]]
    runs = {f"{m}, s = {s}": (m, s) for m in ("chain γ=3", "tree 2/2/4") for s in (1.0, best)}
    seconds, tokens, passes = {k: 0.0 for k in [*runs, "plain"]}, {k: 0 for k in runs}, {k: 0 for k in runs}
    plain_tokens = 0
    for r in range(args.loop):
        for i, ids in enumerate(encoded):
            order = list(runs) if (i + r) % 2 == 0 else list(runs)[::-1]
            for name in order:
                method, drafter.sharpness = runs[name]
                how = dict(gamma=3) if method.startswith("chain") else dict(tree=sd.TreeBudget(2, 2, 4))
                g = torch.Generator().manual_seed(1000 * r + i)
                t0 = time.perf_counter()
                out = sd.speculative_generate(target, drafter, ids, args.tokens, **how,
                                              sampling=sd.SamplingConfig(1.0), generator=g)
                seconds[name] += time.perf_counter() - t0
                tokens[name] += out.tokens.shape[0]
                passes[name] += out.stats.target_calls - 1  # after the prefill, which wrote one token
            t0 = time.perf_counter()
            out = sd.autoregressive_generate(target, ids, args.tokens, sampling=sd.SamplingConfig(1.0),
                                             generator=torch.Generator().manual_seed(1000 * r + i))
            seconds["plain"] += time.perf_counter() - t0
            plain_tokens += out.tokens.shape[0]
    drafter.sharpness = 1.0
    plain = plain_tokens / seconds["plain"]
    return {"plain_tokens_per_s": round(plain, 1),
            "speedup": {k: round(tokens[k] / seconds[k] / plain, 3) for k in runs},
            "tau": {k: round((tokens[k] - len(encoded) * args.loop) / passes[k], 3) for k in runs}}


tuning = beta_by_scale(TUNING, seed=0)
best = max(tuning, key=tuning.get)
evaluation = beta_by_scale(HELD_OUT[12:22], seed=100)
print(json.dumps({"threads": args.threads, "head": args.head or "shipped", "beta_tuning": tuning,
                  "chosen_on_tuning": best, "beta_evaluation": evaluation,
                  "evaluation_gain": round(evaluation[best] - evaluation[1.0], 4),
                  **({"loop_T=1": loop(best)} if args.loop else {})}))
