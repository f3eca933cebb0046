"""Distil a small draft from the offline target, on text the target itself writes (the DistillSpec recipe).

    python -m specdec_ref.distill.train --out runs/draft           # data (resumable shards), then training
    python -m specdec_ref.distill.train --out runs/quick --quick   # a few steps, for CI
    python -m specdec_ref.distill.train --out runs/draft --export specdec_ref/models/weights/offline_draft

Two stages, both resumable:
1. **Data.** The target answers template chat prompts (`distill.prompts.training_prompts`) in batches,
   sampling at a mix of temperatures. At every answer position we keep the target's top-k
   log-probabilities: the soft labels. Shards are written to <out>/data/ one by one.
2. **Training.** The draft is a small Llama: the target's (frozen) embedding, a few layers copied from
   the target, and a head restricted to the `n_vocab` tokens the target writes most often. The
   loss is the KL from the target's (top-k) distribution to the draft's, on answer positions only.
   Checkpoints go to <out>/ckpt.pt; a rerun continues from the last one.

Everything is seeded; progress is printed and appended to <out>/train.log.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..models import offline_draft
from ..models import default_dtype, encode_chat
from ..models.aot import copy_model
from .batch_sample import sample_batch
from .prompts import training_prompts


@dataclass
class TrainConfig:
    out: str = "runs/draft"  # run directory: data shards, checkpoint, log
    seed: int = 0  # seeds prompt order, sampling and training
    n_prompts: int = 3072  # distinct training prompts the target answers
    batch_prompts: int = 48  # prompts answered together (batched sampling)
    max_new_tokens: int = 160  # answer length cap per prompt
    temperatures: tuple = (0.0, 0.7, 1.0)  # sampling temperature cycles over these, one per batch
    top_k_labels: int = 32  # soft labels kept per position
    # target dtype for data generation: auto = `models.default_dtype` of the target's device
    gen_dtype: str = "auto"
    n_layers: int = 2  # draft transformer layers
    init_layers: tuple = (0, 29)  # target layers the draft's layers start from
    n_vocab: int = 8192  # draft head size: the most frequent tokens in the target's answers
    train_head: bool = False  # also train the head rows (else they stay the target's tied embedding rows)
    # "kl": KL(target || draft); "tv": total variation, a proxy for 1 - α at T=1 (DistillSpec)
    loss: str = "kl"
    steps: int = 1200  # optimiser steps
    batch_tokens: int = 4096  # tokens per optimiser step (approximately)
    lr: float = 3e-4  # peak learning rate (linear warm-up, cosine decay)
    warmup: int = 50  # warm-up steps
    eval_every: int = 100  # steps between held-out evaluations and checkpoints
    # autocast dtype for training: auto = bfloat16 where the device has it natively, else float32
    train_dtype: str = "auto"
    threads: int = 1  # torch threads (1 is much faster than 2 when other jobs share the 2 cores)
    # where the target loads when none is passed: auto = a CUDA GPU if there is one, else cpu
    device: str = "auto"
    notes: dict = field(default_factory=dict)  # free-form, copied into the exported config


def pick_dtype(name: str, model: torch.nn.Module, training: bool = False) -> torch.dtype:
    """The dtype a config names; "auto" picks the fastest the model's device really has
    (`models.default_dtype`).

    Emulated bfloat16 (an AVX2-only CPU) is several times slower than float32, so auto never picks it. For
    training, auto keeps to bfloat16 or float32: float16 autocast would need loss scaling.
    """
    if name != "auto":
        if not isinstance(getattr(torch, name, None), torch.dtype):
            raise ValueError(f"dtype must be 'auto' or a torch dtype name such as 'float32', got {name!r}")
        return getattr(torch, name)
    dtype = default_dtype(next(model.parameters()).device)
    return torch.float32 if training and dtype != torch.bfloat16 else dtype


def run_device(name: str) -> torch.device:
    """The device a run loads the target on: "auto" is the first CUDA GPU where there is one, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(name)
    except RuntimeError as err:
        raise ValueError(f"device must be 'auto' or a torch device such as 'cpu' or 'cuda', "
                         f"got {name!r}") from err


def log(cfg, msg: str) -> None:
    """Print a timestamped line and append it to <out>/train.log."""
    line = f"{time.strftime('%H:%M:%S')} {msg}"
    print(line, flush=True)
    with open(Path(cfg.out) / "train.log", "a") as f:
        f.write(line + "\n")


# ---------------------------------------------------------------- stage 1: data from the target itself

def make_data(cfg: TrainConfig, target, tokenizer) -> list[dict]:
    """Stage 1: write (or reuse) one shard per batch of prompts under <out>/data/; return all rows."""
    data_dir = Path(cfg.out) / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    prompts = training_prompts(cfg.n_prompts, cfg.seed)
    n_batches = math.ceil(len(prompts) / cfg.batch_prompts)
    gen_model = None  # a low-precision copy of the target, made only if a shard is missing
    rows, n_tok, t0 = [], 0, time.time()
    for i in range(n_batches):
        shard = data_dir / f"shard_{i:04d}.pt"
        if not shard.exists():
            g = torch.Generator().manual_seed(cfg.seed * 100_003 + i)
            temp = cfg.temperatures[i % len(cfg.temperatures)]
            batch = [encode_chat(tokenizer, p)[0]
                     for p in prompts[i * cfg.batch_prompts:(i + 1) * cfg.batch_prompts]]
            tb = time.time()
            gen_model = gen_model or copy_model(target).to(pick_dtype(cfg.gen_dtype, target))
            new = sample_batch(gen_model, batch, cfg.max_new_tokens, temp, cfg.top_k_labels,
                               tokenizer.eos_token_id, g)
            torch.save(new, shard.with_suffix(".tmp"))
            shard.with_suffix(".tmp").rename(shard)
            k = sum(r["answer"].shape[0] for r in new)
            log(cfg, f"data shard {i + 1}/{n_batches} T={temp}: {k} tokens in {time.time() - tb:.0f} s "
                     f"({k / (time.time() - tb):.0f} tok/s)")
        new = torch.load(shard, weights_only=True)
        rows += new
        n_tok += sum(r["answer"].shape[0] for r in new)
    log(cfg, f"data: {len(rows)} answers, {n_tok} answer tokens ({time.time() - t0:.0f} s this run)")
    return rows



# ---------------------------------------------------------------- stage 2: distillation

def choose_vocab(rows: list[dict], n_vocab: int, eos_token_id: int, vocab_size: int = 49152) -> torch.Tensor:
    """The n_vocab tokens with the most target probability mass over all answer positions (soft labels);
    EOS always.

    Ranking by the target's soft labels, not by the sampled tokens alone, also counts the tokens the target
    often considers but rarely writes: on held-out chat answers 8,192 tokens then cover 93% of greedy tokens
    (91.7% when ranked by how often tokens were written).
    """
    mass = torch.zeros(vocab_size)
    for r in rows:
        mass.index_add_(0, r["label_ids"].long().flatten(), r["label_logp"].float().exp().flatten())
    mass[eos_token_id] = float("inf")
    return mass.topk(min(n_vocab, vocab_size)).indices.sort().values


def make_batches(rows: list[dict], batch_tokens: int) -> list[list[int]]:
    """Group rows of similar length so that padding wastes little; each group holds ~batch_tokens."""
    order = sorted(range(len(rows)), key=lambda i: rows[i]["prompt"].shape[0] + rows[i]["answer"].shape[0])
    batches, cur = [], []
    for i in order:
        length = rows[i]["prompt"].shape[0] + rows[i]["answer"].shape[0]
        if cur and (len(cur) + 1) * length > batch_tokens:
            batches.append(cur)
            cur = []
        cur.append(i)
    return batches + [cur] if cur else batches


def collate(rows: list[dict], full2sub: torch.Tensor, pad_id: int):
    """Right-pad prompt+answer; return ids [B, L], loss positions (b, t) [N], teacher ids [N, k] and
    probs [N, k].

    Position t predicts token t+1, so the answer token j of row b is predicted at t = len(prompt) + j - 1.
    Teacher ids outside the draft's head map to -1; their probability is dropped and the rest renormalised.
    """
    L = max(r["prompt"].shape[0] + r["answer"].shape[0] for r in rows)
    ids = torch.full((len(rows), L), pad_id, dtype=torch.long)
    bs, ts, lab_ids, lab_p = [], [], [], []
    for b, r in enumerate(rows):
        seq = torch.cat([r["prompt"], r["answer"]])
        ids[b, :seq.shape[0]] = seq
        n_p, n_a = r["prompt"].shape[0], r["answer"].shape[0]
        bs.append(torch.full((n_a,), b))
        ts.append(torch.arange(n_p - 1, n_p - 1 + n_a))
        lab_ids.append(full2sub[r["label_ids"].long()])  # [n_a, k]
        lab_p.append(r["label_logp"].float().exp())  # [n_a, k]
    lab_ids, lab_p = torch.cat(lab_ids), torch.cat(lab_p)  # [N, k]
    lab_p = lab_p * (lab_ids >= 0)
    lab_p = lab_p / lab_p.sum(-1, keepdim=True).clamp(min=1e-9)
    return ids, torch.cat(bs), torch.cat(ts), lab_ids.clamp(min=0), lab_p


def distill_loss(draft, ids, bs, ts, lab_ids, lab_p, dtype: torch.dtype, loss: str = "kl"):
    """KL(teacher || draft) (or, with loss="tv", the total variation 1 - Σ min(p, q)) on answer positions,
    and the draft's top-1 agreement with the teacher's top-1.

    On full distributions at T=1, teacher-forced, at one position, 1 - TV is exactly the acceptance β there.
    Here it is computed on the teacher's top-k labels, renormalised, against the draft's reduced head (the
    tokens it can propose): a proxy for 1 - α, not α itself (elsewhere min(p, q) = 0 drops out).
    """
    if loss not in ("kl", "tv"):
        raise ValueError(f"loss must be 'kl' or 'tv', got {loss!r}")
    with torch.autocast(ids.device.type, dtype=dtype, enabled=dtype != torch.float32):
        hidden = draft.model(input_ids=ids, use_cache=False).last_hidden_state  # [B, L, d]
        logits = draft.lm_head.reduced_logits(hidden[bs, ts])  # [N, n_vocab]
    logq = logits.float().log_softmax(-1)  # [N, n_vocab]
    logq_lab = logq.gather(1, lab_ids)  # [N, k]
    if loss == "tv":  # 1 - Σ_x min(p_target(x), p_draft(x)), over the teacher's top-k
        kl = 1 - torch.minimum(lab_p, logq_lab.exp()).sum(-1).mean()
    else:
        kl = (lab_p * (lab_p.clamp(min=1e-9).log() - logq_lab)).sum(-1).mean()
    agree = (logq.argmax(-1) == lab_ids[:, 0]).float().mean()
    return kl, agree


def optimiser_step(opt: torch.optim.Optimizer, params: list[torch.Tensor], loss: torch.Tensor,
                   lr: float) -> None:
    """One update at learning rate lr, with the gradient norm clipped to 1."""
    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()


def resume(path: Path, model: torch.nn.Module, opt: torch.optim.Optimizer) -> tuple[int, list[dict]]:
    """Load the model's and optimiser's state from a checkpoint, if there is one -> (step, curve so far)."""
    if not path.exists():
        return 0, []
    state = torch.load(path, weights_only=True, map_location=next(model.parameters()).device)
    model.load_state_dict(state["model"], strict=False)
    opt.load_state_dict(state["opt"])
    return state["step"], state["curve"]


def save_checkpoint(path: Path, model_state: dict, opt: torch.optim.Optimizer, step: int,
                    curve: list[dict]) -> None:
    """Write-then-rename, so that a run stopped mid-write keeps its previous checkpoint."""
    torch.save({"model": model_state, "opt": opt.state_dict(), "step": step, "curve": curve},
               path.with_suffix(".tmp"))
    path.with_suffix(".tmp").rename(path)


def lr_at(cfg: TrainConfig, step: int) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)))


@torch.no_grad()
def to_device(tensors, model: torch.nn.Module) -> list[torch.Tensor]:
    """Batches are built on the CPU; the model may live elsewhere."""
    device = next(model.parameters()).device
    return [t.to(device) for t in tensors]


def evaluate(draft, rows, batches, full2sub, pad_id, dtype) -> tuple[float, float]:
    draft.eval()
    kls, agrees, ns = [], [], []
    for batch in batches:
        parts = collate([rows[i] for i in batch], full2sub, pad_id)
        kl, agree = distill_loss(draft, *to_device(parts, draft), dtype)
        kls.append(float(kl) * parts[1].shape[0])
        agrees.append(float(agree) * parts[1].shape[0])
        ns.append(parts[1].shape[0])
    draft.train()
    return sum(kls) / sum(ns), sum(agrees) / sum(ns)


def train(cfg: TrainConfig, target, rows: list[dict], eos_token_id: int):
    """Stage 2: distil; checkpoint every eval_every steps to <out>/ckpt.pt and resume from it."""
    torch.manual_seed(cfg.seed)
    # the last prompts are a validation split (unseen prompts, same templates)
    n_val = max(1, len(rows) // 32)
    train_rows, val_rows = rows[:-n_val], rows[-n_val:]
    keep_ids = choose_vocab(train_rows, cfg.n_vocab, eos_token_id, target.config.vocab_size)
    full2sub = torch.full((target.config.vocab_size,), -1, dtype=torch.long)
    full2sub[keep_ids] = torch.arange(keep_ids.shape[0])
    covered = (sum(int((full2sub[r["answer"]] >= 0).sum()) for r in val_rows)
               / sum(r["answer"].shape[0] for r in val_rows))
    log(cfg, f"vocab: {keep_ids.shape[0]} tokens cover {covered:.1%} of validation answer tokens")
    draft = offline_draft.build(target, cfg.n_layers, keep_ids, cfg.init_layers).train()
    draft.model.embed_tokens.weight.requires_grad_(False)
    draft.lm_head.sub_weight.requires_grad_(cfg.train_head)
    params = [p for n, p in draft.named_parameters() if p.requires_grad]
    log(cfg, f"draft: {cfg.n_layers} layers from target layers {cfg.init_layers}, "
             f"{sum(p.numel() for p in params) / 1e6:.2f} M trainable parameters")
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0, betas=(0.9, 0.98))
    ckpt = Path(cfg.out) / "ckpt.pt"
    step, curve = resume(ckpt, draft, opt)
    if step:
        log(cfg, f"resumed from step {step}")
    batches, val_batches = (make_batches(train_rows, cfg.batch_tokens),
                            make_batches(val_rows, cfg.batch_tokens))
    dtype, pad_id, t0 = pick_dtype(cfg.train_dtype, target, training=True), eos_token_id, time.time()
    if step == 0:
        kl, agree = evaluate(draft, val_rows, val_batches, full2sub, pad_id, dtype)
        curve.append({"step": 0, "val_kl": kl, "val_top1": agree})
        log(cfg, f"step 0: val KL {kl:.3f}, val top-1 agreement {agree:.1%}")
    while step < cfg.steps:
        epoch, i = divmod(step, len(batches))
        order = list(range(len(batches)))
        random.Random(cfg.seed * 1000 + epoch).shuffle(order)
        parts = collate([train_rows[j] for j in batches[order[i]]], full2sub, pad_id)
        kl, agree = distill_loss(draft, *to_device(parts, draft), dtype, cfg.loss)
        optimiser_step(opt, params, kl, lr_at(cfg, step))
        step += 1
        if step % 10 == 0:
            log(cfg, f"step {step}/{cfg.steps} epoch {epoch}: train KL {float(kl.detach()):.3f}, "
                     f"top-1 {float(agree):.1%}, "
                     f"lr {lr_at(cfg, step - 1):.1e}, {(time.time() - t0) / 60:.1f} min")
        if step % cfg.eval_every == 0 or step == cfg.steps:
            vkl, vagree = evaluate(draft, val_rows, val_batches, full2sub, pad_id, dtype)
            curve.append({"step": step, "val_kl": vkl, "val_top1": vagree, "train_kl": float(kl.detach())})
            log(cfg, f"step {step}: val KL {vkl:.3f}, val top-1 agreement {vagree:.1%}")
            save_checkpoint(ckpt, offline_draft.trained_state(draft), opt, step, curve)
    return draft.eval(), curve


QUICK = dict(n_prompts=4, batch_prompts=4, max_new_tokens=12, top_k_labels=8, n_vocab=512, steps=6,
             batch_tokens=512, lr=1e-3, warmup=1, eval_every=3)  # a few steps, for CI


def start_run(cfg, target=None, tokenizer=None):
    """Make the run directory, set the threads, log the config; load the offline target unless one is
    passed."""
    Path(cfg.out).mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(cfg.threads)
    if target is None:
        from ..models import load_offline_target
        target, tokenizer = load_offline_target(run_device(getattr(cfg, "device", "auto")))
    log(cfg, f"config: {json.dumps(asdict(cfg))}")
    return target, tokenizer


def run(cfg: TrainConfig, target=None, tokenizer=None):
    """Both stages; returns (draft, curve). Loads the offline target unless one is passed."""
    target, tokenizer = start_run(cfg, target, tokenizer)
    rows = make_data(cfg, target, tokenizer)
    return train(cfg, target, rows, tokenizer.eos_token_id)


def plot_curve(curves: dict[str, list[dict]], path: str) -> None:
    """Held-out top-1 agreement and KL against optimiser steps, one line per design."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.4))
    for name, curve in curves.items():
        steps = [c["step"] for c in curve if c["step"] > 0]
        ax1.plot(steps, [100 * c["val_top1"] for c in curve if c["step"] > 0], marker="o", label=name)
        ax2.plot(steps, [c["val_kl"] for c in curve if c["step"] > 0], marker="o", label=name)
    ax1.set(xlabel="optimiser step", ylabel="top-1 agreement with target (%)")
    ax2.set(xlabel="optimiser step", ylabel="KL(target || draft) (nats/token)")
    ax1.legend(fontsize=8)
    fig.suptitle("Distilling the draft: agreement on unseen prompts (validation split) rises with training")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=TrainConfig.out)
    p.add_argument("--quick", action="store_true", help="a few prompts and steps, for CI")
    p.add_argument("--export", default=None,
                   help="after training, write the shipped weights to this directory")
    for f in ("seed", "n_prompts", "batch_prompts", "max_new_tokens", "n_layers", "n_vocab", "steps",
              "batch_tokens", "eval_every", "threads", "warmup"):
        p.add_argument("--" + f.replace("_", "-"), type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--init-layers", type=lambda s: tuple(int(x) for x in s.split(",")), default=None)
    p.add_argument("--train-dtype", default=None, help="auto (default), float32 or bfloat16")
    p.add_argument("--gen-dtype", default=None, help="auto (default), float32, bfloat16 or float16")
    p.add_argument("--device", default=None,
                   help="auto (default: a CUDA GPU if there is one), cpu, cuda, ...")
    p.add_argument("--train-head", action="store_true", default=None,
                   help="train the head rows too (shipped)")
    p.add_argument("--plot", default=None, help="also save the training curve as a PNG here")
    args = vars(p.parse_args(argv))
    overrides = {k: v for k, v in args.items() if v is not None and k not in ("quick", "export", "plot")}
    cfg = TrainConfig(**{**(QUICK if args["quick"] else {}), **overrides})
    draft, curve = run(cfg)
    if args["export"]:
        offline_draft.save(draft, Path(args["export"]), {"train_config": asdict(cfg), "curve": curve})
        log(cfg, f"exported to {args['export']}")
    if args["plot"]:
        plot_curve({f"{cfg.n_layers} layers, {cfg.n_vocab} tokens": curve}, args["plot"])


if __name__ == "__main__":
    main()
