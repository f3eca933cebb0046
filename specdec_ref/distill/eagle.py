"""Train the feature-level draft (EAGLE-1 style, `models.feature_draft.FeatureHead`) on text the target
writes.

    python -m specdec_ref.distill.eagle --out runs/eagle                 # every stage, resumable
    python -m specdec_ref.distill.eagle --out runs/eagle --quick         # a few steps, for tests
    python -m specdec_ref.distill.eagle --out runs/eagle --export specdec_ref/models/weights/feature_draft

Five stages, each writing shards under --out and skipping what is already there, so a run that is stopped
picks up where it stopped:
1. **prompts.** Varied prompts the target writes itself: questions, requests and tasks in many styles
   about random words from its vocabulary, plus input-grounded tasks (rewrite, summarise, extract) on
   paragraphs it wrote. The template prompts of `distill.prompts` are mixed in. No prompt of the
   hand-written held-out set (`distill.prompts.HELD_OUT`) can appear: they are filtered out.
2. **answers.** The target answers every prompt (batched, in bfloat16), at temperatures 0, 0.7 and 1;
   a share of them get a follow-up turn ("Can you give an example?") answered in a second pass.
3. **features.** One teacher-forced target pass per batch stores the target's final hidden states.
4. **train.** The head learns to predict the next hidden state: SmoothL1 on the feature plus 0.1 times
   the cross-entropy against the target's own next-token distribution, with uniform noise on its input
   features (Li et al. 2024). With `ttt_steps` > 1 (training-time test, as in EAGLE-3 and HASS) the head is
   also fed its own guesses for that many passes, with a loss at every depth (`eagle_loss`, `ttt_mask`).
   Checkpoints every `eval_every` steps; validation reports top-1 agreement at depths 1-3.
5. **eval.** α per draft position on the held-out prompts, greedy and at T = 1.

Everything is seeded; progress goes to stdout and <out>/train.log.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import DynamicCache

from ..cache import additive_mask, layer_features
from ..drafters import FeatureDrafter
from ..generate import speculative_generate
from ..models.kernels import prepack_for_cpu
from ..models.aot import copy_model
from ..models import encode_chat, feature_draft, offline_draft
from ..sampling import SamplingConfig
from .eagle_prompts import FOLLOWUPS, STYLES, TASKS, TEMPERATURES
from .prompts import HELD_OUT, training_prompts
from .batch_sample import sample_batch
from .train import log, optimiser_step, pick_dtype, resume, save_checkpoint, start_run


@dataclass
class EagleConfig:
    out: str = "runs/eagle"  # run directory: shards, checkpoint, log
    seed: int = 0  # seeds words, prompt order, sampling and training
    n_generated: int = 4000  # prompts the target writes itself (before filtering)
    n_grounded: int = 600  # paragraphs it writes for rewrite / summarise / extract tasks
    n_template: int = 800  # template prompts from distill.prompts mixed in
    followup_share: float = 0.2  # share of answers that get a second, follow-up turn
    max_prompts: int = 0  # answer only the first this many prompts (0: all of them)
    batch_prompts: int = 48  # prompts answered together
    max_new_tokens: int = 192  # answer length cap
    threads: int = 1  # torch threads (1 is faster than 2 when another job shares the 2 cores)
    n_layers: int = 1  # decoder layers in the head
    ffn_size: int = 0  # the head's MLP width (0: the target's; wider if coverage is capacity-bound)
    # e.g. "2,15,-1": target layers fused at the head's input (EAGLE-3); "": final features
    fuse_layers: str = ""
    # training-time test: passes that feed the head its own features (1: EAGLE-1's objective)
    ttt_steps: int = 3
    # an exported head to fine-tune instead of a fresh one ("": from scratch); deeper n_layers grows it
    init: str = ""
    steps: int = 3000  # optimiser steps
    batch_tokens: int = 4096  # tokens per step (approximately)
    lr: float = 1e-3  # peak learning rate (linear warm-up, cosine decay)
    warmup: int = 100
    noise: float = 0.1  # uniform noise on the input features, as a fraction of their RMS
    ce_weight: float = 0.1  # weight of the token loss next to the feature loss (EAGLE uses 0.1)
    tv_weight: float = 0.0  # weight of 1 - Σ min(p, q): the chance that a draw from q is rejected at T = 1
    eval_every: int = 250  # steps between validations and checkpoints
    eval_prompts: int = 12  # held-out prompts for the final α per position
    eval_tokens: int = 96  # tokens generated per held-out prompt
    stop_after: str = "eval"  # last stage to run: prompts, answers, features, train or eval
    # comma-separated run directories whose answer shards join this run's (merged corpora)
    extra_runs: str = ""
    # where the target loads: auto = a CUDA GPU if there is one (the corpus in minutes), else cpu
    device: str = "auto"
    # dtype of the stages 1-2 copy: auto (bfloat16 where the CPU multiplies it natively)
    gen_dtype: str = "auto"


QUICK = dict(n_generated=8, n_grounded=2, n_template=4, batch_prompts=8, max_new_tokens=16, steps=6,
             batch_tokens=512, warmup=1, eval_every=3, eval_prompts=1, eval_tokens=12)


def _save(obj, path: Path) -> None:  # write-then-rename, so a stopped run never leaves half a shard
    torch.save(obj, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").rename(path)


# ---------------------------------------------------------------- stage 1: prompts the target writes

def random_words(tokenizer, n: int, seed: int) -> list[str]:
    """n words drawn from the tokenizer's vocabulary (whole lowercase words of 5+ letters)."""
    words = sorted({t[1:] for t in tokenizer.get_vocab() if re.fullmatch(r"Ġ[a-z]{5,12}", t)})
    return random.Random(seed).choices(words, k=n)


def _clean(text: str) -> str | None:
    """The first line of a generated prompt, or None if it does not look like one."""
    line = text.strip().split("\n")[0].strip().strip('"').strip()
    line = re.sub(r"^(question|request|prompt)\s*:\s*", "", line, flags=re.I)
    held = {h.lower() for h in HELD_OUT}
    if not 15 <= len(line) <= 300 or line.lower() in held or line.lower().startswith(("sure", "here", "i ")):
        return None
    return line


@torch.inference_mode()
def _generate(gen_model, tokenizer, chats: list[str] | list[list[dict]], max_new_tokens: int,
              temperature: float, seed: int) -> list[str]:
    """Answer a batch of one-turn prompts (str) or conversations (list of messages); return the texts."""
    ids = [(encode_chat(tokenizer, c) if isinstance(c, str) else
            tokenizer.apply_chat_template(c, add_generation_prompt=True, return_tensors="pt")["input_ids"])[0]
           for c in chats]
    rows = sample_batch(gen_model, ids, max_new_tokens, temperature, 1, tokenizer.eos_token_id,
                        torch.Generator().manual_seed(seed))
    return [tokenizer.decode(r["answer"], skip_special_tokens=True) for r in rows]


def make_prompts(cfg: EagleConfig, gen_model, tokenizer) -> list[str]:
    """Stage 1 -> the training prompts; one small JSON shard per batch under <out>/prompts/, then
    prompts.json."""
    path, shard_dir = Path(cfg.out) / "prompts.json", Path(cfg.out) / "prompts"
    if path.exists():
        return json.loads(path.read_text())
    shard_dir.mkdir(parents=True, exist_ok=True)
    words = random_words(tokenizer, cfg.n_generated + cfg.n_grounded, cfg.seed)
    rng = random.Random(cfg.seed)
    metas = [rng.choice(STYLES).format(w=w) for w in words[:cfg.n_generated]]
    paras = [f"Write a short paragraph of three or four sentences about {w}."
             for w in words[cfg.n_generated:]]
    tasks = [rng.choice(TASKS) for _ in paras]
    out, B = [], cfg.batch_prompts
    for kind, requests in (("questions", metas), ("grounded", paras)):
        for i in range(0, len(requests), B):
            shard = shard_dir / f"{kind}_{i // B:04d}.json"
            if not shard.exists():
                texts = _generate(gen_model, tokenizer, requests[i:i + B], 60 if kind == "questions" else 120,
                                  0.8 if kind == "questions" else 0.7,
                                  cfg.seed + i + (10**6 if kind == "grounded" else 0))
                if kind == "questions":
                    new = [p for p in map(_clean, texts) if p]
                else:
                    new = [task.format(p=t.strip()) for task, t in zip(tasks[i:i + B], texts) if len(t) > 80]
                shard.write_text(json.dumps(new))
            out += json.loads(shard.read_text())
            log(cfg, f"prompts: {len(out)} usable after {i + B} {kind} requests")
    out += training_prompts(cfg.n_template, cfg.seed)
    out = list(dict.fromkeys(out))  # drop exact duplicates, keep order
    rng.shuffle(out)
    path.write_text(json.dumps(out, indent=0))
    return out


# ---------------------------------------------------------------- stages 2 and 3: answers, then features

def make_answers(cfg: EagleConfig, gen_model, tokenizer, prompts: list[str]) -> list[Path]:
    """Stage 2: shards of {"ids": [L] prompt+answer, "n_prompt": int}; some with a follow-up turn."""
    shard_dir = Path(cfg.out) / "answers"
    shard_dir.mkdir(parents=True, exist_ok=True)
    B, rng = cfg.batch_prompts, random.Random(cfg.seed + 7)
    temps = TEMPERATURES[:3] if cfg.seed == 0 else TEMPERATURES  # seed 0: as the shipped corpus was written
    paths = []
    for i in range(0, len(prompts), B):
        path = shard_dir / f"shard_{i // B:05d}.pt"
        paths.append(path)
        if path.exists():
            continue
        t0, temp = time.time(), temps[(i // B) % len(temps)]
        chats = [[{"role": "user", "content": p}] for p in prompts[i:i + B]]
        answers = _generate(gen_model, tokenizer, chats, cfg.max_new_tokens, temp, cfg.seed + i)
        for chat, a in zip(chats, answers):
            chat.append({"role": "assistant", "content": a})
        more = [c for c in chats if rng.random() < cfg.followup_share]
        for c in more:
            c.append({"role": "user", "content": rng.choice(FOLLOWUPS)})
        if more:
            for c, a in zip(more, _generate(gen_model, tokenizer, more, cfg.max_new_tokens, temp,
                                            cfg.seed + i + 1)):
                c.append({"role": "assistant", "content": a})
        rows = []
        for c in chats:
            ids = tokenizer.apply_chat_template(c, return_tensors="pt")["input_ids"][0]
            n_prompt = tokenizer.apply_chat_template(c[:-1], add_generation_prompt=True,
                                                     return_tensors="pt")["input_ids"].shape[1]
            rows.append({"ids": ids.to(torch.int32), "n_prompt": torch.tensor(n_prompt), "temperature": temp})
        _save(rows, path)
        n_new = sum(int(r["ids"].shape[0] - r["n_prompt"]) for r in rows)
        log(cfg, f"answers: shard {i // B + 1}/{math.ceil(len(prompts) / B)} T={temp}: {n_new} answer tokens "
                 f"({n_new / (time.time() - t0):.0f} tok/s)")
    return paths


def corpus(cfg: EagleConfig, own: list[Path]) -> list[Path]:
    """This run's answer shards, then those of every run in cfg.extra_runs (each run's own prompts and
    seed)."""
    extra = [Path(d) for d in cfg.extra_runs.split(",") if d.strip()]
    for d in extra:
        if not (d / "answers").is_dir():
            raise ValueError(f"extra run {d} has no answers/ folder: "
                             "give run directories made by this script")
    return own + [p for d in extra for p in sorted((d / "answers").glob("shard_*.pt"))]


@torch.inference_mode()
def make_features(cfg: EagleConfig, target, answer_paths: list[Path]) -> list[Path]:
    """Stage 3: for each answer shard, the target's final hidden states [L, d] (float16) of every sequence
    (with fuse_layers, those layers' states side by side: [L, n d])."""
    feat_dir, layers = Path(cfg.out) / "features", fuse_layers(cfg) or (-1,)
    feat_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for src in answer_paths:
        # another run's shards keep their run's name: shard numbers repeat across runs
        run = src.parent.parent
        path = feat_dir / (src.name if run.resolve() == Path(cfg.out).resolve() else f"{run.name}-{src.name}")
        paths.append(path)
        if path.exists():
            continue
        t0, rows = time.time(), torch.load(src, weights_only=True)
        for r in rows:  # one sequence at a time: no padding to get wrong, and ~800 tokens/s on 2 cores anyway
            out = target(input_ids=r["ids"].long()[None].to(target.device), output_hidden_states=True)
            # [L, d] or [L, n d]
            r["hidden"] = layer_features(out.hidden_states, layers)[0].to(torch.float16).cpu()
        _save(rows, path)
        n = sum(r["ids"].shape[0] for r in rows)
        log(cfg, f"features: {path.name}, {n} tokens ({n / (time.time() - t0):.0f} tok/s)")
    return paths


# ---------------------------------------------------------------- stage 4: training

def fuse_layers(cfg: EagleConfig) -> tuple[int, ...]:
    """cfg.fuse_layers "2,15,-1" -> (2, 15, -1); "" -> ()."""
    try:
        return tuple(int(i) for i in cfg.fuse_layers.split(",") if i.strip())
    except ValueError as err:
        raise ValueError(f"fuse_layers is a comma-separated list of layer indices such as '2,15,-1', "
                         f"got {cfg.fuse_layers!r}") from err


def head_vocab() -> torch.Tensor:
    """The tokens the head can propose: the same 8,192 the distilled LM draft uses (chosen by target mass)."""
    return load_file(offline_draft.WEIGHTS_DIR / "model.safetensors")["lm_head.keep_ids"].long()


def batches_of(rows: list[dict], batch_tokens: int, seed: int) -> list[list[int]]:
    """Indices grouped by length (little padding), ~batch_tokens each, in a seeded random order."""
    order = sorted(range(len(rows)), key=lambda i: rows[i]["ids"].shape[0])
    out, cur = [], []
    for i in order:
        if cur and (len(cur) + 1) * rows[i]["ids"].shape[0] > batch_tokens:
            out.append(cur)
            cur = []
        cur.append(i)
    out += [cur] if cur else []
    random.Random(seed).shuffle(out)
    return out


def pad_rows(rows: list[dict], dtype: torch.dtype):
    """-> ids [B, L], hidden [B, L, d], answer [B, L-1]: right-padded; answer marks positions j whose
    h_{j+1} is answer."""
    L = max(r["ids"].shape[0] for r in rows)
    d = rows[0]["hidden"].shape[1]
    ids = torch.zeros(len(rows), L, dtype=torch.long)
    hid = torch.zeros(len(rows), L, d, dtype=dtype)
    answer = torch.zeros(len(rows), L - 1, dtype=torch.bool)
    for b, r in enumerate(rows):
        n = r["ids"].shape[0]
        ids[b, :n], hid[b, :n] = r["ids"], r["hidden"].to(dtype)
        answer[b, max(int(r["n_prompt"]) - 2, 0):n - 1] = True
    return ids, hid, answer


def ttt_mask(n: int, step: int, dtype: torch.dtype) -> torch.Tensor:  # -> [1, 1, n, (step + 1) n]
    """Additive mask for pass `step` (0 = true features) of training-time test over n positions.

    At depth step + 1 the head drafting from position i - step has seen the target's true features up to
    there, then its own guesses at i - step + 1, ..., i. So query i sees block 0 (the true-feature pass)
    at positions <= i - step and, in each later pass r = 1..step, only position i - step + r: its own chain.
    """
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    blocks = [j <= i - step] + [j == i - step + r for r in range(1, step + 1)]
    allowed = torch.cat(blocks, dim=1)  # [n, (step + 1) n]
    return additive_mask(allowed, dtype)[None, None]


def ttt_features(head, h_in: torch.Tensor, x_next: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """The head's guesses at depths 1..steps, teacher-forced tokens: [B, n, d], [B, n] -> steps x [B, n, d].

    Depth 1 (EAGLE-1): position i reads (h_i, x_{i+1}) and guesses h_{i+1}. Pass s > 0 (training-time test,
    EAGLE-3 and HASS) reads at position i its own guess of h_i from pass s - 1 in place of the target's, and
    attends as it would when drafting s + 1 tokens ahead of position i - s (`ttt_mask`).
    """
    B, n = x_next.shape
    positions = torch.arange(n, device=x_next.device).expand(B, n)
    cache, feats, out = DynamicCache(), h_in, []
    for s in range(steps):
        mask = ttt_mask(n, s, h_in.dtype).to(h_in.device) if steps > 1 else None
        f = head(feats, x_next, cache if steps > 1 else None, position_ids=positions,
                 attention_mask=mask)  # [B, n, d]
        out.append(f)
        feats = torch.cat([f[:, :1], f[:, :-1]], dim=1)  # the input at i is the guess of h_i made at i - 1
    return out


def eagle_loss(head, rows: list[dict], noise: float, ce_weight: float, generator=None, steps: int = 1,
               tv_weight: float = 0.0):
    """-> (loss, top-1 agreement with the target at each depth [steps]). At every depth: SmoothL1 between the
    guessed and the true next feature, plus ce_weight times the cross-entropy against the target's next-token
    distribution p, plus tv_weight times the total variation 1 - Σ min(p, q) (DistillSpec's objective for
    acceptance at T = 1); the depths' losses are averaged."""
    dtype, device, d = head.fc.weight.dtype, head.fc.weight.device, head.fc.out_features
    ids, hid, answer = (t.to(device) for t in pad_rows(rows, dtype))  # built on the CPU
    h_in, h_next, x_next = hid[:, :-1], hid[:, 1:, -d:], ids[:, 1:]  # [B, n, (n_fused) d], [B, n, d], [B, n]
    if noise > 0:  # EAGLE's input noise: the head must cope with its own imperfect features when drafting
        # [B, n, 1 or n_fused, d]: each layer's noise follows its own scale
        blocks = h_in.unflatten(-1, (-1, d))
        rms = blocks.pow(2).mean(-1, keepdim=True).sqrt()
        # seeded on the CPU, any device
        u = torch.rand(blocks.shape, generator=generator, dtype=dtype).to(device)
        h_in = (blocks + noise * rms * (2 * u - 1)).flatten(-2)
    p_answer = head.head.reduced_logits(h_next[answer]).float().softmax(-1)  # [N, n_vocab] the target's, once
    position = torch.arange(answer.shape[1], device=device).expand_as(answer)  # [B, n]
    total, agree = 0.0, []
    for s, f_all in enumerate(ttt_features(head, h_in, x_next, steps)):
        keep = answer & (position >= s)  # depth s + 1 at position i starts from a true feature at i - s >= 0
        f, want = f_all[keep], h_next[keep]  # [N_s, d]
        logq = head.head.reduced_logits(f).float().log_softmax(-1)  # [N_s, n_vocab]
        p_target = p_answer[keep[answer]]  # [N_s, n_vocab]
        tv = tv_weight * (1 - torch.minimum(p_target, logq.exp()).sum(-1)) if tv_weight else 0  # [N_s] TV
        total = (total + F.smooth_l1_loss(f.float(), want.float())
                 + (ce_weight * -(p_target * logq).sum(-1) + tv).mean())
        agree.append((logq.argmax(-1) == p_target.argmax(-1)).float().mean())
    return total / steps, torch.stack(agree)


def train(cfg: EagleConfig, target, feature_paths: list[Path]):
    """Stage 4 -> (head, curve); checkpoints to <out>/ckpt.pt and resumes from it.

    `target` gives the head its shared embedding and output rows, and its dtype: train in float32.
    """
    torch.manual_seed(cfg.seed)
    rows = [r for p in feature_paths for r in torch.load(p, weights_only=True)]
    n_val = max(1, len(rows) // 32)
    train_rows, val_rows = rows[:-n_val], rows[-n_val:]
    n_tok = sum(int(r["ids"].shape[0] - r["n_prompt"]) for r in train_rows)
    width = len(fuse_layers(cfg) or (-1,))  # features per position, in units of d
    if rows and rows[0]["hidden"].shape[-1] != width * target.config.hidden_size:
        raise ValueError(f"the features in {feature_paths[0].parent} are {rows[0]['hidden'].shape[-1]} wide, "
                         f"fuse_layers {cfg.fuse_layers!r} needs {width} x {target.config.hidden_size}: "
                         "made for another head; use a new --out")
    if cfg.init:  # fine-tune an exported head (e.g. the shipped one) instead of starting from scratch
        head = feature_draft.load(target, cfg.init)
        if cfg.ffn_size and cfg.ffn_size < head.ffn_size:
            raise ValueError(f"--init {cfg.init} has an MLP {head.ffn_size} wide, wider than --ffn-size "
                             f"{cfg.ffn_size}: a narrower head trains from scratch (drop --init)")
        if head.body.config.num_hidden_layers > cfg.n_layers:
            raise ValueError(f"--init {cfg.init} has {head.body.config.num_hidden_layers} layers, "
                             f"more than --n-layers {cfg.n_layers}")
        # starts as the old head
        head = feature_draft.grow(head, target, cfg.n_layers, fuse_layers(cfg), cfg.ffn_size or None).train()
    else:
        head = feature_draft.FeatureHead(target, cfg.n_layers, head_vocab(), fuse_layers(cfg),
                                         cfg.ffn_size or None).train()
    params = [p for n, p in head.named_parameters()
              if n.startswith(("fc.", "fuse.", "body.")) and "embed_tokens" not in n]
    for p in head.parameters():
        p.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)
    log(cfg, f"train: {len(train_rows)} sequences, {n_tok} answer tokens; "
             f"head {sum(p.numel() for p in params) / 1e6:.2f} M")
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0, betas=(0.9, 0.95))
    ckpt = Path(cfg.out) / "ckpt.pt"
    step, curve = resume(ckpt, head, opt)
    if step:
        log(cfg, f"resumed from step {step}")
    g, t0 = torch.Generator().manual_seed(cfg.seed), time.time()
    n_batches, batches, batches_epoch = len(batches_of(train_rows, cfg.batch_tokens, 0)), None, -1
    while step < cfg.steps:
        epoch, i = divmod(step, n_batches)
        if epoch != batches_epoch:  # a fresh seeded order every epoch
            batches, batches_epoch = batches_of(train_rows, cfg.batch_tokens, cfg.seed * 1000 + epoch), epoch
        batch = batches[i]
        lr = cfg.lr * min(1.0, (step + 1) / cfg.warmup) * 0.5 * (1 + math.cos(math.pi * step / cfg.steps))
        loss, agree = eagle_loss(head, [train_rows[j] for j in batch], cfg.noise, cfg.ce_weight, g,
                                 cfg.ttt_steps, cfg.tv_weight)
        optimiser_step(opt, params, loss, lr)
        step += 1
        if step % 25 == 0:
            log(cfg, f"step {step}/{cfg.steps} epoch {epoch}: loss {float(loss.detach()):.3f}, "
                     "top-1 by depth "
                     f"{', '.join(f'{float(a):.1%}' for a in agree)}, "
                     f"lr {lr:.1e}, {(time.time() - t0) / 60:.1f} min")
        if step % cfg.eval_every == 0 or step == cfg.steps:
            with torch.no_grad():
                vals = [eagle_loss(head, [val_rows[j] for j in b], 0.0, cfg.ce_weight, None,
                                   max(cfg.ttt_steps, 3), cfg.tv_weight)
                        for b in batches_of(val_rows, cfg.batch_tokens, 0)]
            vloss = sum(float(v[0]) for v in vals) / len(vals)
            vdepth = (sum(v[1] for v in vals) / len(vals)).tolist()  # top-1 agreement at depth 1, 2, 3, ...
            curve.append({"step": step, "val_loss": vloss, "val_top1": vdepth[0], "val_top1_by_depth": vdepth,
                          "train_loss": float(loss.detach())})
            log(cfg, f"step {step}: val loss {vloss:.3f}, val top-1 agreement by depth "
                     + ", ".join(f"{a:.1%}" for a in vdepth))
            save_checkpoint(ckpt, feature_draft.trained_state(head), opt, step, curve)
    return head.eval(), curve


# ---------------------------------------------------------------- stage 5: α per position, held out

@torch.inference_mode()
def alpha_per_position(target, drafter, tokenizer, prompts: list[str], gamma: int, max_new_tokens: int,
                       sampling: SamplingConfig, seed: int = 0) -> list[float]:
    """P(draft position i is accepted | positions before it were), i = 1..γ, from real speculative runs."""
    reached, accepted = [0] * gamma, [0] * gamma
    g = torch.Generator(target.device).manual_seed(seed)
    for prompt in prompts:
        steps = []
        speculative_generate(target, drafter, encode_chat(tokenizer, prompt, target.device), max_new_tokens,
                             gamma=gamma, sampling=sampling, generator=g, eos_token_id=tokenizer.eos_token_id,
                             on_step=steps.append)
        for s in steps:
            for i in range(min(s.n_accepted + 1, s.draft_tokens.shape[0])):
                reached[i] += 1
                accepted[i] += i < s.n_accepted
    return [a / r if r else float("nan") for a, r in zip(accepted, reached)]


STAGES = ("prompts", "answers", "features", "train", "eval")


def run(cfg: EagleConfig, target=None, tokenizer=None):
    """All five stages -> (head, curve, report)."""
    if cfg.stop_after not in STAGES:
        raise ValueError(f"stop_after names the last stage to run, one of {', '.join(STAGES)}; "
                         f"got {cfg.stop_after!r}")
    target, tokenizer = start_run(cfg, target, tokenizer)
    dtype = pick_dtype(cfg.gen_dtype, target)
    gen_model = prepack_for_cpu(copy_model(target).to(dtype))  # bfloat16 only where the CPU multiplies it
    prompts = make_prompts(cfg, gen_model, tokenizer)
    prompts = prompts[:cfg.max_prompts] if cfg.max_prompts else prompts
    log(cfg, f"{len(prompts)} training prompts")
    if cfg.stop_after == "prompts":
        return None, [], {}
    answers = corpus(cfg, make_answers(cfg, gen_model, tokenizer, prompts))
    if cfg.stop_after == "answers":
        return None, [], {}
    feats = make_features(cfg, gen_model, answers)
    del gen_model
    if cfg.stop_after == "features":
        return None, [], {}
    head, curve = train(cfg, target, feats)
    if cfg.stop_after == "train":
        return head, curve, {}
    drafter = FeatureDrafter(head)
    report = {}
    for name, sampling in (("greedy", SamplingConfig(0)), ("T=1", SamplingConfig(1.0))):
        report[name] = alpha_per_position(target, drafter, tokenizer, HELD_OUT[:cfg.eval_prompts], 4,
                                          cfg.eval_tokens, sampling, cfg.seed)
        log(cfg, f"held-out α per draft position, {name}: " + ", ".join(f"{a:.2f}" for a in report[name]))
    (Path(cfg.out) / "report.json").write_text(json.dumps({"curve": curve, "alpha": report}, indent=1))
    return head, curve, report


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=EagleConfig.out)
    p.add_argument("--quick", action="store_true", help="a few prompts and steps (for tests)")
    p.add_argument("--export", default=None, help="after training, write the head's weights to this folder")
    for name, value in asdict(EagleConfig()).items():
        if name != "out":
            p.add_argument("--" + name.replace("_", "-"), type=type(value), default=None)
    args = p.parse_args(argv)
    overrides = {k: v for k, v in vars(args).items()
                 if k in EagleConfig.__dataclass_fields__ and v is not None}
    cfg = EagleConfig(**{**(QUICK if args.quick else {}), **overrides})
    head, curve, report = run(cfg)
    if args.export and head is not None:
        feature_draft.save(head, Path(args.export), {"config": asdict(cfg), "curve": curve, "alpha": report})
        log(cfg, f"exported to {args.export}")


if __name__ == "__main__":
    main()
