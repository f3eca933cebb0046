"""How often one node of a tree keeps a child at T = 1, for three ways of choosing its k children.

    PYTHONPATH=<checkout> python scripts/sampled_children.py [--prompts 8] [--positions 60] [--draws 200]

Along the feature head's chain γ = 1 at T = 1 on the evaluation prompts (`distill.prompts.EVALUATION`), every
drafted position gives the target's row p and the head's row q. On `--positions` of them, evenly spaced, and
for k = 1..4 it reports the mean probability that the node keeps one of its k children when they are

* the head's top k, judged as point masses (the greedy tree's rule): the target's mass p(x_1) + ... + p(x_k);
* k i.i.d. draws from q, SpecInfer's rule (a static tree's sampled children);
* k draws without replacement from q, recursive rejection sampling (the dynamic tree at T > 0,
  `chapters.production.sampled_children_kept`, through the loop's own `verify_tree`).

k = 1 sampled is a chain's token: β = Σ min(p, q). Prints one JSON line.
"""
import argparse
import json
import statistics
import warnings

import torch

p = argparse.ArgumentParser()
p.add_argument("--prompts", type=int, default=8)
p.add_argument("--positions", type=int, default=60)
p.add_argument("--draws", type=int, default=200)
p.add_argument("--threads", type=int, default=2)
args = p.parse_args()
warnings.filterwarnings("ignore")
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref.chapters.production import sampled_children_kept  # noqa: E402
from specdec_ref.distill.prompts import EVALUATION  # noqa: E402

target, draft, tok = sd.load_offline_pair(draft="feature")
rows = []


def keep(step):
    if step.n_drafted:
        rows.append((step.target_probs[0].double(), step.draft_probs[0].double()))


for i, prompt in enumerate(EVALUATION[:args.prompts]):
    sd.speculative_generate(target, draft, sd.encode_chat(tok, prompt), 64, gamma=1,
                            sampling=sd.SamplingConfig(1.0), generator=torch.Generator().manual_seed(i),
                            on_step=keep)
chosen = rows[::max(1, len(rows) // args.positions)][:args.positions]


result = {"positions": len(chosen), "of": len(rows), "draws": args.draws, "by_k": {}}
for k in (1, 2, 3, 4):
    result["by_k"][k] = {
        "top-k point masses": statistics.mean(float(p[q.topk(k).indices].sum()) for p, q in chosen),
        "i.i.d. (SpecInfer)": statistics.mean(sampled_children_kept(p, q, k, args.draws, replacement=True)
                                              for p, q in chosen),
        "without replacement": statistics.mean(sampled_children_kept(p, q, k, args.draws) for p, q in chosen)}
    print(k, {name: round(v, 3) for name, v in result["by_k"][k].items()}, flush=True)
print(json.dumps(result))
