"""The GPU check's Python half: its timing sanity check, the tiny Hub pairs, and the side-by-side table.

    python -m specdec_ref.lab.gpu_check timing              # time_fn against CUDA events; exit 0 without CUDA
    python -m specdec_ref.lab.gpu_check make-tiny DIR       # tiny Qwen2 and Llama pairs, random weights
    python -m specdec_ref.lab.gpu_check tiny DIR            # load them as Hub pairs (made if missing)
    python -m specdec_ref.lab.gpu_check side-by-side OUT.json [DIR]   # every method, eager and compiled

`scripts/gpu_check.sh` runs the parts, each under its own timeout, and writes a summary line after each.
Each part prints its verdict as its last line. `--dry-run` (or GPU_CHECK_DRY_RUN=1) runs a part on the CPU
with the tiny models, static buffers standing in for CUDA graphs: the tests use it, since CI has no GPU.

Timing: `time_fn` brackets each call with `synchronize` and reads the host clock; CUDA events are stamped
by the GPU itself. For a kernel that runs for milliseconds the two must agree: a large gap means the
timer measures launch overhead or unfinished work, and every number in chapter 1 would be off.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .timing import time_fn

TOLERANCE = 0.10  # the two medians may differ by at most 10% of the events' median


@dataclass
class TimingAgreement:
    synced_s: float  # median seconds per call, time_fn (host clock, synchronised)
    events_s: float  # median seconds per call, CUDA events
    tolerance: float  # allowed relative difference

    @property
    def relative_gap(self) -> float:
        """|synced - events| / events."""
        return abs(self.synced_s - self.events_s) / self.events_s

    @property
    def agree(self) -> bool:
        return self.relative_gap <= self.tolerance

    def __str__(self) -> str:
        verdict = "PASS" if self.agree else "FAIL"
        return (f"{verdict}: time_fn {self.synced_s * 1e3:.3f} ms "
                f"vs CUDA events {self.events_s * 1e3:.3f} ms "
                f"per call ({self.relative_gap:.1%} apart, tolerance {self.tolerance:.0%})")


def compare_timings(synced: list[float], events: list[float],
                    tolerance: float = TOLERANCE) -> TimingAgreement:
    """Compare the medians of two lists of per-call seconds (no GPU needed: the logic alone)."""
    if not synced or not events:
        raise ValueError("need at least one timing from each clock")
    if min(events) <= 0 or min(synced) <= 0:
        raise ValueError(f"timings must be positive seconds, got synced={synced}, events={events}")
    return TimingAgreement(statistics.median(synced), statistics.median(events), tolerance)


def event_times(fn, repeats: int = 10, warmup: int = 2) -> list[float]:
    """Seconds per call of fn as the GPU's own CUDA events measure it."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)  # elapsed_time is in milliseconds
    return times


@torch.inference_mode()
def matmul_timing_check(n: int = 8192, repeats: int = 10, device: torch.device | str = "cuda",
                        tolerance: float = TOLERANCE) -> TimingAgreement:
    """Time an n x n float32 matmul (milliseconds long on any GPU) with both clocks, interleaved."""
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, generator=g)  # [n, n]
    b = torch.randn(n, n, device=device, generator=g)  # [n, n]
    fn = lambda: a @ b  # noqa: E731  [n, n] x [n, n] -> [n, n]
    synced, events = [], []
    for _ in range(repeats):  # interleaved, so that clock boosts and throttling hit both alike
        synced += time_fn(fn, device, warmup=1, repeats=1).times
        events += event_times(fn, repeats=1, warmup=1)
    return compare_timings(synced, events, tolerance)


# ---------------------------------------------------------------------------------------------
# Tiny Hub pairs: the Colab path (Hub loading, float16, vocabulary slicing, the probe) without the Hub
# ---------------------------------------------------------------------------------------------

TINY_TEXT = ("Explain, step by step, why the sky is blue. Sunlight scatters off the air; blue light scatters "
             "most. The cat sat on the mat and the dog ran to the sea. ")  # the tiny tokenizer's corpus
TINY_ARCHS = ("qwen2", "llama")


def _tiny_tokenizer():
    """A byte-level BPE of 300 tokens (as Qwen2's and SmolLM2's tokenizers are), trained on TINY_TEXT."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([TINY_TEXT] * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", unk_token="<|endoftext|>")


def make_tiny_pairs(out: Path | str, seed: int = 0) -> list[Path]:
    """Save, per architecture, a target, a draft and an overflowing target (random weights, about 1 MB each).

    The embedding tables (384 and 320 rows) are padded past the tokenizer's 300, to different sizes (as
    Qwen2.5's are). The overflowing target's first MLP is scaled so that its output passes float16's 65504
    while every weight stays inside float16's range: in float32 it is an ordinary model.
    """
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    out, tokenizer, saved = Path(out), _tiny_tokenizer(), []
    for arch in TINY_ARCHS:
        config_cls, model_cls = ((Qwen2Config, Qwen2ForCausalLM) if arch == "qwen2"
                                 else (LlamaConfig, LlamaForCausalLM))
        for role, vocab, layers in (("target", 384, 4), ("draft", 320, 1), ("overflow", 384, 4)):
            torch.manual_seed(seed + len(saved))
            model = model_cls(config_cls(vocab_size=vocab, hidden_size=64, intermediate_size=128,
                                         num_hidden_layers=layers, num_attention_heads=4,
                                         num_key_value_heads=2,
                                         max_position_embeddings=512, tie_word_embeddings=False))
            if role == "overflow":
                mlp = model.model.layers[0].mlp
                with torch.no_grad():
                    mlp.gate_proj.weight.mul_(1e3), mlp.up_proj.weight.mul_(1e3)
                    mlp.down_proj.weight.mul_(1e5)
            path = out / f"{arch}-{role}"
            model.save_pretrained(path, safe_serialization=True)
            tokenizer.save_pretrained(path)
            saved.append(path)
    return saved


def tiny_check(models: Path | str, device: torch.device | str) -> str:
    """Load each tiny pair as a Hub pair in float16; decode with it; load the overflowing one and see the
    loader fall back. -> one line; raises AssertionError or ValueError on the first failure."""
    from .. import generate
    from ..models import loading
    models, device, lines = Path(models), torch.device(device), []
    for arch in TINY_ARCHS:
        target, draft, tok = loading.load_hf_pair(str(models / f"{arch}-target"),
                                                  str(models / f"{arch}-draft"), device, torch.float16)
        ids = tok(TINY_TEXT, return_tensors="pt").input_ids.to(device)  # [1, T]
        assert target.dtype == draft.dtype == torch.float16, f"{arch}: loaded in {target.dtype}"
        assert target(ids).logits.shape[-1] == draft(ids).logits.shape[-1] == len(tok), f"{arch}: not sliced"
        g = torch.Generator(device=device).manual_seed(0)
        out = generate.speculative_generate(target, draft, ids, 16, gamma=3, generator=g)
        assert out.tokens.shape == (16,)
        wide, _, _ = loading.load_hf_pair(str(models / f"{arch}-overflow"), str(models / f"{arch}-draft"),
                                          device, torch.float16)
        assert wide.dtype != torch.float16, f"{arch}: an overflowing float16 target was kept"
        wider = str(wide.dtype).removeprefix("torch.")
        lines.append(f"{arch}: float16, sliced to {len(tok)}, overflow -> {wider}")
    return "; ".join(lines)


# ---------------------------------------------------------------------------------------------
# Side by side: plain, Hugging Face and ours, eager against static+compiled, in one run
# ---------------------------------------------------------------------------------------------

@dataclass
class Method:
    name: str  # the row's label
    run: object  # ids [1, T] -> Generation or (new tokens, seconds)
    tokens: int = 0  # summed over prompts
    seconds: float = 0.0  # summed over prompts
    error: str | None = None  # why the row stopped, if it did
    extra: dict = field(default_factory=dict)  # α / τ for the speculative rows

    target_calls: int = 0  # the speculative rows' target passes, summed over prompts

    def add(self, out) -> None:
        n, sec = out if isinstance(out, tuple) else (out.tokens.shape[0], out.stats.seconds)
        self.tokens, self.seconds = self.tokens + n, self.seconds + sec
        if not isinstance(out, tuple) and out.stats.drafted:
            self.target_calls += out.stats.target_calls
            self.extra["tau"] = self.tokens / self.target_calls  # new tokens per target pass

    def as_dict(self) -> dict:
        tps = self.tokens / self.seconds if self.seconds else None
        return {"method": self.name, "tokens": self.tokens, "seconds": round(self.seconds, 4),
                "tokens_per_second": tps, "error": self.error, **self.extra}


def side_by_side_methods(target, draft, hf_draft, max_new_tokens: int, gamma: int,
                         compiled: str) -> list[Method]:
    """The rows: plain eager / compiled, HF plain / assisted (its config set), ours chain and tree in both."""
    from ..drafters import TreeDrafter
    from ..generate import as_drafter, autoregressive_generate, speculative_generate
    from ..sampling import SamplingConfig
    from ..tree import TreeBudget
    from .bench import hf_generate
    from .hf import assistant_settings, constant_gamma
    greedy, n = SamplingConfig(temperature=0), max_new_tokens
    g = torch.Generator(device=next(target.parameters()).device).manual_seed(0)
    label = {"dynamic": "eager",
             compiled: "static+compiled" if compiled == "compiled" else "static (dry run)"}
    rows = []
    for mode in ("dynamic", compiled):
        rows.append(Method(f"plain, {label[mode]}", lambda ids, m=mode: autoregressive_generate(
            target, ids, n, sampling=greedy, cache=m)))
    rows.append(Method("HF generate, plain", lambda ids: hf_generate(target, ids, n, greedy, g)))

    def assisted(ids):  # transformers 5 reads the draft length from the assistant's generation_config
        with assistant_settings(hf_draft, **constant_gamma(gamma)):
            return hf_generate(target, ids, n, greedy, g, assistant_model=hf_draft)
    rows.append(Method(f"HF assisted, γ={gamma} constant", assisted))
    drafter = as_drafter(draft)
    budget = getattr(drafter, "default_tree", None) or TreeBudget()
    for mode in ("dynamic", compiled):
        rows.append(Method(f"ours, chain γ={gamma}, {label[mode]}", lambda ids, m=mode: speculative_generate(
            target, drafter, ids, n, gamma=gamma, sampling=greedy, cache=m)))
    for mode in ("dynamic", compiled) if isinstance(drafter, TreeDrafter) else ():
        rows.append(Method(f"ours, dynamic tree {budget.depth}/{budget.topk}/{budget.n_nodes}, {label[mode]}",
                           lambda ids, m=mode: speculative_generate(target, drafter, ids, n, tree=budget,
                                                                    sampling=greedy, cache=m)))
    return rows


@torch.inference_mode()
def side_by_side(methods: list[Method], encoded: list[torch.Tensor]) -> list[dict]:
    """Warm every method up on the first prompt (real shapes, untimed), then time them prompt by prompt,
    interleaved. A method that fails keeps its error and drops out; the others go on."""
    for m in methods:
        try:
            m.run(encoded[0])
        except Exception as err:  # noqa: BLE001  a row's failure is a result, not the end of the check
            m.error = f"{type(err).__name__}: {err}"[:300]
    for ids in encoded:
        for m in methods:
            if m.error is None:
                try:
                    m.add(m.run(ids))
                except Exception as err:  # noqa: BLE001
                    m.error = f"{type(err).__name__}: {err}"[:300]
    return [m.as_dict() for m in methods]


def plot_side_by_side(rows: list[dict], title: str, path: Path | str) -> None:
    """One horizontal bar per method, tokens per second, failed rows marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.2), dpi=110)
    values = [r["tokens_per_second"] or 0 for r in rows]
    ax.barh(range(len(rows)), values, color=["tab:gray" if r["error"] else "tab:blue" for r in rows])
    ax.set_yticks(range(len(rows)), [r["method"] + (" (failed)" if r["error"] else "") for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("tokens per second (greedy)")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def run_side_by_side(out_json: Path | str, *, dry_run: bool, tiny: Path | str | None = None,
                     prompts: int = 3, max_new_tokens: int = 64, gamma: int = 3) -> str:
    """The offline pair on the GPU (feature head for ours, the LM draft for Hugging Face's assisted rows), or
    in a dry run the tiny Llama pair on the CPU -> one line; writes out_json and a figure beside it."""
    from ..lab.bench import BENCH_PROMPTS
    from ..models import loading, offline_draft
    if dry_run:
        target, draft, tok = loading.load_hf_pair(str(Path(tiny) / "llama-target"),
                                                  str(Path(tiny) / "llama-draft"), "cpu", torch.float32,
                                                  prepack=False)
        hf_draft, device, compiled = draft, torch.device("cpu"), "static"
        encoded = [tok(TINY_TEXT[: 40 + 30 * i], return_tensors="pt").input_ids for i in range(prompts)]
    else:
        device, compiled = torch.device("cuda"), "compiled"
        target, draft, tok = loading.load_offline_pair(device, draft="auto")
        hf_draft = offline_draft.load(target).to(device)
        encoded = [loading.encode_chat(tok, p, device) for p in BENCH_PROMPTS[:prompts]]
    methods = side_by_side_methods(target, draft, hf_draft, max_new_tokens, gamma, compiled)
    rows = side_by_side(methods, encoded)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (dry run)"
    result = {"device": name, "dtype": str(target.dtype).removeprefix("torch."), "prompts": prompts,
              "max_new_tokens": max_new_tokens, "gamma": gamma, "torch": torch.__version__,
              "transformers": _version("transformers"), "rows": rows}
    Path(out_json).write_text(json.dumps(result, indent=1))
    best_plain = max(r["tokens_per_second"] or 0 for r in rows
                     if r["method"].startswith(("plain", "HF generate")))
    best_spec = max((r for r in rows if r["method"].startswith(("ours", "HF assisted"))),
                    key=lambda r: r["tokens_per_second"] or 0)
    plot_side_by_side(rows, f"{name}, {result['dtype']}: best speculative row "
                      f"{(best_spec['tokens_per_second'] or 0) / best_plain:.2f}× the fastest plain row",
                      Path(out_json).with_suffix(".png"))
    failed = [r["method"] for r in rows if r["error"]]
    return (f"{len(rows)} rows; fastest plain {best_plain:.1f} tok/s; best speculative {best_spec['method']} "
            f"{(best_spec['tokens_per_second'] or 0) / best_plain:.2f}×"
            + (f"; FAILED: {failed}" if failed else ""))


def _version(package: str) -> str:
    import importlib.metadata
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    dry_run = "--dry-run" in argv or os.environ.get("GPU_CHECK_DRY_RUN", "0") not in ("", "0")
    argv = [a for a in argv if a != "--dry-run"]
    part = argv[0] if argv else "timing"
    if part == "make-tiny":
        print(f"make-tiny: {len(make_tiny_pairs(argv[1]))} models in {argv[1]}")
        return 0
    if not torch.cuda.is_available() and not dry_run:
        print(f"{part}: SKIP (no CUDA device: nothing to check)")
        return 0
    if part == "timing":
        if dry_run:
            print("timing: SKIP (dry run: CUDA events need a GPU)")
            return 0
        result = matmul_timing_check()
        print(f"timing: {result}")
        return 0 if result.agree else 1
    if part == "tiny":
        if not Path(argv[1]).exists():
            make_tiny_pairs(argv[1])
        print(f"tiny: PASS: {tiny_check(argv[1], 'cpu' if dry_run else 'cuda')}")
        return 0
    if part == "side-by-side":
        tiny = argv[2] if len(argv) > 2 else None
        sizes = dict(prompts=2, max_new_tokens=8) if dry_run else {}
        print(f"side-by-side: PASS: {run_side_by_side(argv[1], dry_run=dry_run, tiny=tiny, **sizes)}")
        return 0
    raise SystemExit(f"unknown part {part!r}: timing, make-tiny, tiny or side-by-side")


if __name__ == "__main__":
    sys.exit(main())
