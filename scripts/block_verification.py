"""Block verification against token-by-token verification on the offline pair, without sampling noise.

    PYTHONPATH=<checkout> python scripts/block_verification.py [--threads 2] [--prompts 8] [--tokens 64] \
        [--gammas 2,3,4,6] [--temperature 1]

For each chain length γ, the feature head drafts chains on the bench's held-out prompts inside the ordinary
loop, and each iteration's drafted chain is judged twice, exactly: the tokens token-by-token verification
(`verify`) and block verification (`verify_block`) keep on average for that very chain
(`lab.compare.block_and_token_taus`, from the same rows; no random draw). Both rules keep the target's law,
so the difference is pure gain. Prints one JSON line: per γ, the iterations judged and τ = 1 + E[kept]
under each rule, and their ratio.
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
from specdec_ref.lab.compare import block_and_token_taus  # noqa: E402

target, drafter, tok = sd.load_offline_pair(draft="feature", choose_method=False)
encoded = [sd.encode_chat(tok, q) for q in BENCH_PROMPTS[:args.prompts]]
taus = block_and_token_taus(target, drafter, encoded, [int(g) for g in args.gammas.split(",")],
                            sd.SamplingConfig(args.temperature), args.tokens)
print(json.dumps({"temperature": args.temperature, "threads": args.threads, "prompts": args.prompts,
                  **{f"chain γ={g}": {"iterations": t["iterations"], "tau token": round(t["token"], 3),
                                      "tau block": round(t["block"], 3),
                                      "ratio": round(t["block"] / t["token"], 3)}
                     for g, t in taus.items()}}, ensure_ascii=False))
