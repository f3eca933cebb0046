"""Block verification against token-by-token verification on the offline pair, without sampling noise.

    PYTHONPATH=<checkout> python scripts/block_verification.py [--threads 2] [--prompts 8] [--tokens 64] \
        [--gammas 2,3,4,6] [--temperature 1]

For each chain length γ, the feature head drafts chains on the bench's held-out prompts inside the ordinary
loop, and each iteration's drafted chain is judged twice, exactly: the tokens token-by-token verification
(`verify`) and block verification (`verify_block`) keep on average for that very chain
(`verify.expected_accepted`, from the same rows; no random draw). Both rules keep the target's law, so the
difference is pure gain. Prints one JSON line: per γ, the iterations judged and τ = 1 + E[kept] under each
rule, and their ratio.
"""
import argparse
import json
import warnings

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--prompts", type=int, default=8)
p.add_argument("--tokens", type=int, default=64)
p.add_argument("--gammas", default="2,3,4,6")
p.add_argument("--temperature", type=float, default=1.0)
args = p.parse_args()
warnings.filterwarnings("ignore")
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref.lab.bench import BENCH_PROMPTS  # noqa: E402
from specdec_ref.verify import expected_accepted  # noqa: E402

if args.temperature <= 0:
    raise SystemExit("--temperature must be > 0: greedy, both rules keep the argmax's prefix")
target, drafter, tok = sd.load_offline_pair(draft="feature", choose_method=False)
encoded = [sd.encode_chat(tok, q) for q in BENCH_PROMPTS[:args.prompts]]
sampling = sd.SamplingConfig(args.temperature)
result = {"temperature": args.temperature, "threads": args.threads, "prompts": args.prompts}
for gamma in (int(g) for g in args.gammas.split(",")):
    kept = {"token": [], "block": []}

    def judge(step):
        if step.n_drafted == gamma:  # the last iterations of a generation may draft fewer
            for rule, values in kept.items():
                values.append(expected_accepted(step.draft_tokens, step.draft_probs, step.target_probs, rule))

    for i, ids in enumerate(encoded):
        sd.speculative_generate(target, drafter, ids, args.tokens, gamma=gamma, sampling=sampling,
                                generator=torch.Generator().manual_seed(i), on_step=judge)
    tau = {rule: 1 + sum(v) / len(v) for rule, v in kept.items()}
    result[f"chain γ={gamma}"] = {"iterations": len(kept["token"]), "tau token": round(tau["token"], 3),
                                  "tau block": round(tau["block"], 3),
                                  "ratio": round(tau["block"] / tau["token"], 3)}
print(json.dumps(result, ensure_ascii=False))
