"""Side-by-side benchmark: plain decoding, our speculative loop, Hugging Face assisted generation,
and the speedup the Leviathan et al. formula predicts from the measured α and cost ratio c.

Every method runs on the same prompts in the same process, interleaved prompt by prompt, so the
ratios printed compare like with like on whatever else the machine is doing.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

import torch

from .models import encode_chat
from .generate import autoregressive_generate, speculative_generate
from .sampling import SamplingConfig
from .timing import forward_latency, synchronize

BENCH_PROMPTS = [  # chat prompts for benchmarks; none of them is in the draft's training prompts
    "Explain why the sky is blue to a ten-year-old.",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "What are three tips for staying focused while studying?",
    "Describe how a bicycle works.",
    "Give me a simple recipe for tomato soup.",
    "Why do cats purr?",
    "Summarise the water cycle in a few sentences.",
    "Write a friendly email inviting a colleague to lunch.",
]


def expected_tokens_per_iteration(alpha: float, gamma: int) -> float:
    """E[tokens per draft/verify iteration] = (1 - α^(γ+1)) / (1 - α) (Leviathan et al. 2023, eq. 1)."""
    return gamma + 1.0 if alpha >= 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)


def predicted_speedup(alpha: float, gamma: int, c: float) -> float:
    """Walltime improvement (1 - α^(γ+1)) / ((1 - α)(γc + 1)) (Leviathan et al. 2023, Theorem 3.8).

    It assumes a target pass over γ+1 tokens costs the same as over 1 token; chapter 4 measures that assumption.
    """
    return expected_tokens_per_iteration(alpha, gamma) / (gamma * c + 1)


@torch.inference_mode()
def decode_step_seconds(model, input_ids: torch.Tensor, repeats: int = 20) -> float:
    """Median time of one cached one-token decode step after a prompt of this length (device synchronised)."""
    return forward_latency(model, 1, context_len=input_ids.shape[1], warmup=2, repeats=repeats).median


@dataclass
class Row:
    method: str  # what ran
    tokens: int  # new tokens produced, summed over prompts
    seconds: float  # wall time, summed over prompts
    acceptance_rate: float | None = None  # fraction of drafted tokens accepted (speculative rows)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else float("nan")


def _hf_generate(target, ids, max_new_tokens, sampling, generator, **assist) -> tuple[int, float]:
    kwargs = dict(max_new_tokens=max_new_tokens, min_new_tokens=0, do_sample=not sampling.greedy,
                  pad_token_id=target.config.eos_token_id, attention_mask=torch.ones_like(ids))
    if not sampling.greedy:
        kwargs.update(temperature=sampling.temperature, top_k=sampling.top_k or 0, top_p=sampling.top_p or 1.0)
        torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=generator, device=generator.device)))  # HF uses the global RNG
    synchronize(ids.device)
    t0 = time.perf_counter()
    out = target.generate(ids, **kwargs, **assist)
    synchronize(ids.device)
    return out.shape[1] - ids.shape[1], time.perf_counter() - t0


def run_bench(target, draft, tokenizer, prompts=BENCH_PROMPTS, max_new_tokens: int = 64, gamma: int = 4,
              sampling: SamplingConfig = SamplingConfig(temperature=0), seed: int = 0, hf: bool = True,
              progress=print) -> dict:
    """Run every method on every prompt (interleaved) and return the table as a dict (see `format_table`)."""
    eos = tokenizer.eos_token_id
    device = next(target.parameters()).device
    encoded = [encode_chat(tokenizer, p, device) for p in prompts]
    g = torch.Generator(device=device).manual_seed(seed)
    methods = {
        "plain (target only)": lambda ids: autoregressive_generate(target, ids, max_new_tokens, sampling, g, eos),
        f"speculative, ours (γ={gamma})": lambda ids: speculative_generate(target, draft, ids, max_new_tokens, gamma,
                                                                            sampling, g, eos),
    }
    if hf:
        methods["HF generate, plain"] = lambda ids: _hf_generate(target, ids, max_new_tokens, sampling, g)
        methods["HF assisted, its defaults"] = lambda ids: _hf_generate(target, ids, max_new_tokens, sampling, g,
                                                                        assistant_model=draft)
        methods[f"HF assisted, γ={gamma} constant"] = lambda ids: _hf_generate(
            target, ids, max_new_tokens, sampling, g, assistant_model=draft, num_assistant_tokens=gamma,
            num_assistant_tokens_schedule="constant", assistant_confidence_threshold=0.0)
    for run in methods.values():  # warm-up: first calls allocate and load kernels
        run(encoded[0][:, :8])
    rows = {name: Row(name, 0, 0.0) for name in methods}
    accepted = examined = drafted = 0
    for i, ids in enumerate(encoded):
        for name, run in methods.items():
            out = run(ids)
            if isinstance(out, tuple):
                rows[name].tokens += out[0]
                rows[name].seconds += out[1]
            else:
                rows[name].tokens += out.tokens.shape[0]
                rows[name].seconds += out.stats.seconds
                for a, d in zip(out.stats.accepted, out.stats.drafted):
                    accepted, examined, drafted = accepted + a, examined + a + (a < d), drafted + d
        progress(f"prompt {i + 1}/{len(encoded)} done")
    alpha = accepted / examined if examined else float("nan")  # per-token acceptance α, as in the formula
    rows[f"speculative, ours (γ={gamma})"].acceptance_rate = accepted / drafted if drafted else float("nan")
    c = decode_step_seconds(draft, encoded[0]) / decode_step_seconds(target, encoded[0])
    base = rows["plain (target only)"].tokens_per_second
    return {
        "settings": {"max_new_tokens": max_new_tokens, "gamma": gamma, "sampling": asdict(sampling),
                     "prompts": len(prompts), "seed": seed, "device": str(device),
                     "torch_threads": torch.get_num_threads()},
        "rows": [{**asdict(r), "tokens_per_second": r.tokens_per_second,
                  "speedup_vs_plain": r.tokens_per_second / base} for r in rows.values()],
        "alpha": alpha, "cost_ratio_c": c,
        "predicted_speedup": predicted_speedup(alpha, gamma, c),
    }


def format_table(result: dict) -> str:
    """A Markdown table of the benchmark, ending with the formula's prediction."""
    lines = ["| method | tokens | seconds | tokens/s | speedup vs plain | accepted / drafted |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        a = "" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.2f}"
        lines.append(f"| {r['method']} | {r['tokens']} | {r['seconds']:.2f} | {r['tokens_per_second']:.1f} | "
                     f"{r['speedup_vs_plain']:.2f}× | {a} |")
    s = result["settings"]
    lines.append(f"| predicted by (1-α^(γ+1))/((1-α)(γc+1)), α={result['alpha']:.2f}, c={result['cost_ratio_c']:.3f}, "
                 f"γ={s['gamma']} | | | | {result['predicted_speedup']:.2f}× | |")
    return "\n".join(lines)


def save_json(result: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
