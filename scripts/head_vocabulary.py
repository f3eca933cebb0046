"""How much the head's reduced vocabulary costs it: coverage at depth 1 over its 8,192 tokens, over those plus
every token already in the context, and over the whole vocabulary.

    PYTHONPATH=<checkout> python scripts/head_vocabulary.py [--threads 2] [--tokens 64]

The head scores only the 8,192 tokens the target wrote most in the corpus (`ReducedHead.keep_ids`): a
target token outside them can never be drafted. Along the target's greedy answers to the evaluation prompts
(`HELD_OUT[12:22]`) and to `HELD_OUT[:10]`, the script counts the answer tokens outside the head's vocabulary
(and how many of those were already in the context), then scores the eager head's depth-1 guess at every
position, fed the target's real features, three ways: its own logits, the same plus the logits of the
context's tokens (the target's tied embedding rows: no training needed), and all 49,152 tokens. Top-1 and
top-4 coverage per prompt set; one JSON line.
"""
import argparse
import json
import warnings

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--tokens", type=int, default=64)
args = p.parse_args()
warnings.filterwarnings("ignore")
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref.distill.prompts import HELD_OUT  # noqa: E402
from specdec_ref.lab.compare import target_answers  # noqa: E402
from specdec_ref.lab.coverage import first_guesses  # noqa: E402

target, drafter, tok = sd.load_offline_pair(choose_method=False)
head = getattr(drafter.head, "inner", drafter.head)  # the eager FeatureHead (a compiled one wraps it)
embedding = target.get_output_embeddings().weight  # [V, d], tied: the head's logits are f @ E^T
keep = head.head.keep_ids
allowed = torch.zeros(embedding.shape[0], dtype=torch.bool)  # [V] the head's own tokens
allowed[keep] = True
out = {}
with torch.inference_mode():
    for name, prompts in (("evaluation prompts", HELD_OUT[12:22]), ("HELD_OUT[:10]", HELD_OUT[:10])):
        hits = {way: [0, 0] for way in ("head's 8,192", "+ the context's tokens", "all 49,152")}
        positions = outside = outside_in_context = 0
        answers = target_answers(target, [sd.encode_chat(tok, text) for text in prompts], args.tokens)
        for seq, t, f, _, _ in first_guesses(target, head, answers):  # the head's guess of seq[t]
            full = (f @ embedding.T).float()  # [V]
            in_context = torch.zeros_like(allowed)
            in_context[seq[:t]] = True
            want = int(seq[t])
            positions += 1
            outside += not bool(allowed[want])
            outside_in_context += not bool(allowed[want]) and bool(in_context[want])
            for way, ok in (("head's 8,192", allowed), ("+ the context's tokens", allowed | in_context),
                            ("all 49,152", None)):
                top = (full if ok is None else full.masked_fill(~ok, float("-inf"))).topk(4).indices
                hits[way][0] += int(top[0] == want)
                hits[way][1] += int((top == want).any())
        out[name] = {"positions": positions, "outside_the_head's_vocabulary": outside,
                     "of_them_in_the_context": outside_in_context,
                     "coverage_top1_top4": {way: [round(h1 / positions, 3), round(h4 / positions, 3)]
                                            for way, (h1, h4) in hits.items()}}
print(json.dumps({"threads": args.threads, "tokens": args.tokens, **out}))
