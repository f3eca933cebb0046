"""Could the corpus itself draft? An n-gram table of the target's 2.1M answer tokens against the feature head.

    PYTHONPATH=<checkout> python scripts/corpus_ngram.py [--threads 2] [--max-new-tokens 96]

Builds, from every answer shard of the head's training corpus (`specdec_ref/distill/corpus`), the most
frequent next tokens after each context of 1-4 tokens, and predicts the next token from the longest context
found (a REST-style datastore of the target's own answers, He et al. 2023). Along the target's greedy answers
to the tuning and the evaluation prompts, at every answer position, it compares the table's first guess with
the head's top 1 and top 4 at depth 1 (the head fed the true features, as `lab.coverage` does): how often
each holds the target's token, and how often either does. One JSON line per prompt set.
"""
import argparse
import collections
import glob
import json
import time
import warnings
from pathlib import Path

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=2)
p.add_argument("--max-new-tokens", type=int, default=96)
p.add_argument("--n", type=int, default=4, help="the longest context the table keys on")
args = p.parse_args()
warnings.filterwarnings("ignore")
torch.set_num_threads(args.threads)
import specdec_ref as sd  # noqa: E402
from specdec_ref.distill.prompts import EVALUATION, TUNING  # noqa: E402
from specdec_ref.lab.compare import target_answers  # noqa: E402
from specdec_ref.lab.coverage import first_guesses  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
start, n_answer = time.perf_counter(), 0
counts = [collections.defaultdict(collections.Counter) for _ in range(args.n + 1)]  # [n][context] -> next
SHARDS = str(ROOT / "specdec_ref/distill/corpus/**/answers/shard_*.pt")
for shard in sorted(glob.glob(SHARDS, recursive=True)):
    for seq in torch.load(shard, weights_only=True):
        ids, n_prompt = seq["ids"].tolist(), int(seq["n_prompt"])
        for t in range(n_prompt, len(ids)):
            n_answer += 1
            for n in range(1, min(args.n, t) + 1):
                counts[n][tuple(ids[t - n:t])][ids[t]] += 1
table = [{ctx: c.most_common(2) for ctx, c in by_ctx.items()} for by_ctx in counts]
built_s = time.perf_counter() - start


def guess(context: list[int]) -> list[int]:
    """The table's best next tokens after the longest context it has seen ([] if none)."""
    for n in range(args.n, 0, -1):
        if (row := table[n].get(tuple(context[-n:]))) is not None:
            return [token for token, _ in row]
    return []


target, drafter, tok = sd.load_offline_pair()
head = drafter.head
for name, prompts in (("tuning", TUNING), ("evaluation", EVALUATION)):
    seqs = target_answers(target, [sd.encode_chat(tok, q) for q in prompts], args.max_new_tokens,
                          tok.eos_token_id)
    hits = collections.Counter()
    with torch.inference_mode():
        last = None
        for seq, t, f, _, _ in first_guesses(target, head, seqs):  # token t from seq[:t]
            if seq is not last:  # a new answer
                ids, last = seq.tolist(), seq
            top = head.logits(f).topk(4).indices.tolist()
            table_guess = guess(ids[:t])
            head1, table1 = top[0] == ids[t], bool(table_guess) and table_guess[0] == ids[t]
            hits["positions"] += 1
            hits["head top-1"] += head1
            hits["head top-4"] += ids[t] in top
            hits["table top-1"] += table1
            hits["head top-1 or table top-1"] += head1 or table1
            hits["table top-1 where the head's top-1 missed"] += table1 and not head1
    n = hits.pop("positions")
    print(json.dumps({"prompts": name, "positions": n, "answer_tokens_in_table": n_answer,
                      "table_built_s": round(built_s, 1), **{k: round(v / n, 3) for k, v in hits.items()}}))
