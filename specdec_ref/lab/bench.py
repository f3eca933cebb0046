"""Side-by-side benchmark: plain decoding, our speculative loop, Hugging Face assisted generation,
and the speedup the Leviathan et al. formula predicts from the measured α and cost ratio c.

Every method runs on the same prompts in the same process, interleaved prompt by prompt, so the
ratios printed compare like with like on whatever else the machine is doing.
"""
from __future__ import annotations

import contextlib
import statistics

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from ..cache import compiled_pass
from ..models import encode_chat
from ..device import seconds_since, start_timer
from ..drafters import TreeDrafter
from ..generate import Generation, Stats, as_drafter, autoregressive_generate, speculative_generate
from ..models.method import draft_pass_seconds, method_name, pass_seconds, target_rows
from ..tree import TreeBudget
from ..sampling import SamplingConfig
from .hf import ASSISTANT_SETTINGS, assistant_settings, constant_gamma
from .pass_clock import PassClock, labelled
from .speedup import predicted_speedup

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


@torch.inference_mode()
def decode_step_seconds(model, input_ids: torch.Tensor, repeats: int = 20) -> float:
    """Median time of one cached one-token decode step after a prompt of this length (device synchronised),
    through the cache the loops use (the compiled pass where the model has one: `models.aot`)."""
    return pass_seconds(model, [1], input_ids.shape[1], repeats)[1]


@dataclass
class Row:
    """One line of a side-by-side table: a method's tokens and time summed over prompts."""
    method: str  # what ran
    tokens: int = 0  # new tokens produced, summed over prompts
    seconds: float = 0.0  # wall time, summed over prompts
    stats: Stats | None = None  # the speculative rows' iterations, merged over prompts (None for the others)

    def add(self, out: Generation | tuple[int, float]) -> None:
        """Add one prompt's result: a Generation, or (tokens, seconds) from a method that has no Stats."""
        if isinstance(out, tuple):
            self.tokens, self.seconds = self.tokens + out[0], self.seconds + out[1]
            return
        self.tokens, self.seconds = self.tokens + out.tokens.shape[0], self.seconds + out.stats.seconds
        if out.stats.drafted:
            self.stats = self.stats or Stats()
            self.stats.accepted += out.stats.accepted
            self.stats.drafted += out.stats.drafted
            self.stats.target_calls += out.stats.target_calls
            self.tree = self.tree or out.stats.tree

    tree: bool = False  # a tree row: its α is not a chain's per-token acceptance, so the table shows τ only

    @property
    def tau(self) -> float | None:
        """τ: new tokens per target forward pass (prefill included), for the speculative rows."""
        return (None if self.stats is None or not self.stats.target_calls
                else self.tokens / self.stats.target_calls)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else float("nan")

    @property
    def alpha(self) -> float | None:
        return None if self.stats is None or self.tree else self.stats.alpha

    @property
    def acceptance_rate(self) -> float | None:
        return None if self.stats is None or self.tree else self.stats.acceptance_rate

    def as_dict(self, base_tokens_per_second: float) -> dict:
        return {"method": self.method, "tokens": self.tokens, "seconds": self.seconds,
                "tokens_per_second": self.tokens_per_second, "alpha": self.alpha,
                "acceptance_rate": self.acceptance_rate, "tau": self.tau,
                "speedup_vs_plain": self.tokens_per_second / base_tokens_per_second}


@torch.inference_mode()
def draft_step_seconds(target, draft, input_ids: torch.Tensor, repeats: int = 20,
                       after_target: bool = False) -> float:
    """Median time of one draft step (proposing one token after the prompt), for any drafter or draft
    model: `models.method.draft_pass_seconds`, which the default-method calibration uses too (after_target:
    each step right after a target pass, as an iteration's first draft step runs)."""
    return draft_pass_seconds(target, as_drafter(draft), input_ids, repeats, after_target=after_target)


def cost_ratio(target, draft, input_ids: torch.Tensor, repeats: int = 20, rounds: int = 4,
               after_target: bool = False) -> float:
    """c = one draft step / one cached target decode step, after a prompt of this length: the one estimator.

    The median over `rounds` of one round's ratio; each round warms up and times the target and the draft
    back to back (`repeats // rounds` steps each), so a burst of background load lands on both alike.
    after_target prices the draft step that follows a target pass (the first of every iteration).
    """
    n = max(1, repeats // rounds)
    return statistics.median(draft_step_seconds(target, draft, input_ids, n, after_target)
                             / decode_step_seconds(target, input_ids, n)
                             for _ in range(rounds))


@contextlib.contextmanager
def forward_seconds(*modules: torch.nn.Module):
    """Inside the block, count the calls of each module and the seconds spent in them (device synchronised).

    Yields {"seconds": float, "calls": [int per module]}. Pass modules that never call each other (a model's
    body and its LM head, say): the loop's overhead is then the block's wall time minus "seconds".
    """
    record, starts, handles = {"seconds": 0.0, "calls": [0] * len(modules)}, {}, []
    device = next(modules[0].parameters()).device

    def pre(i):
        def hook(module, args, kwargs=None):
            starts[i] = start_timer(device)
        return hook

    def post(i):
        def hook(module, args, output):
            record["seconds"] += seconds_since(starts.pop(i), device)
            record["calls"][i] += 1
        return hook

    for i, m in enumerate(modules):
        handles += [m.register_forward_pre_hook(pre(i)), m.register_forward_hook(post(i))]
    try:
        yield record
    finally:
        for h in handles:
            h.remove()


def run_interleaved(methods: dict[str, Callable], encoded: list[torch.Tensor], progress=print,
                    warmup: bool = True) -> dict[str, Row]:
    """Run every method on every prompt, prompt by prompt, so that background load hits every method alike.
    Each prompt starts one method further down the list (prompt i runs methods i, i+1, ..., wrapping round):
    no method always follows the same one, so a slow row that sweeps the caches or a host that slows down
    between rows does not always land on the same method. (In a fixed order, the same chain run as two rows
    measured 1.24x and 1.38x in one bench on a 2-core AMD EPYC Zen 4.)

    A method returns a Generation, or (new tokens, seconds) if it is not ours (Hugging Face's).
    """
    for run in methods.values() if warmup else ():  # warm-up: first calls allocate and load kernels
        run(encoded[0][:, :8])
    rows, names = {name: Row(name) for name in methods}, list(methods)
    for i, ids in enumerate(encoded):
        first = i % len(names)
        for name in names[first:] + names[:first]:
            rows[name].add(methods[name](ids))
        progress(f"prompt {i + 1}/{len(encoded)} done")
    return rows


def run_both_ways(target, drafter, encoded: list[torch.Tensor], methods: dict[str, dict | None],
                  switched_off: Callable, *, max_new_tokens: int, sampling: SamplingConfig,
                  rounds: int = 2) -> tuple[dict[tuple[bool, str], Row], list[bool]]:
    """Plain decoding (a method given as None) and speculative methods ({name: `method_kwargs(...)`}) with a
    switch on and inside `switched_off()`, round after round and prompt by prompt, the seed varying by round
    and prompt -> (Rows by (on, name), for every run whether both ways gave the same tokens)."""
    def run(how: dict | None, ids: torch.Tensor, seed: int, on: bool) -> Generation:
        g = torch.Generator().manual_seed(seed)
        with contextlib.nullcontext() if on else switched_off():
            if how is None:
                return autoregressive_generate(target, ids, max_new_tokens, sampling=sampling, generator=g)
            return speculative_generate(target, drafter, ids, max_new_tokens, **how, sampling=sampling,
                                        generator=g)

    for on in (False, True):  # warm-up: packs every weight both ways
        for how in methods.values():
            run(how, encoded[0][:, :8], 0, on)
    rows = {(on, name): Row(name) for on in (False, True) for name in methods}
    same = []
    for r in range(rounds):
        for i, ids in enumerate(encoded):
            out = {}
            for on in (False, True):
                for name, how in methods.items():
                    gen = run(how, ids, 1000 * r + i, on)
                    out[on, name] = gen.tokens
                    rows[on, name].add(gen)
            same += [torch.equal(out[False, name], out[True, name]) for name in methods]
    return rows, same


def hf_generate(target, ids, max_new_tokens, sampling, generator, *, keep: list | None = None,
                **assist) -> tuple[int, float]:  # [1, T] ->
    """Hugging Face `generate` (plain, or assisted with `assistant_model=`), timed -> (new tokens, seconds).

    keep: a list to append the new tokens [n_new] to (chapter 6 compares them with ours token for token).
    The assistant's draft length, schedule and confidence stop are not keywords here: transformers 5 ignores
    them in `generate()` and reads them from the draft's config, so wrap the call in `hf.assistant_settings`.
    """
    ignored = sorted(set(assist) & set(ASSISTANT_SETTINGS))
    if ignored:
        raise ValueError(f"{', '.join(ignored)}: transformers 5 silently ignores these as generate() "
                         "keywords; put them on the draft's config: wrap the call in "
                         "`with specdec_ref.lab.hf.assistant_settings(draft, ...):`")
    kwargs = dict(max_new_tokens=max_new_tokens, min_new_tokens=0, do_sample=not sampling.greedy,
                  pad_token_id=target.config.eos_token_id, attention_mask=torch.ones_like(ids))
    if not sampling.greedy:
        kwargs.update(temperature=sampling.temperature, top_k=sampling.top_k or 0,
                      top_p=sampling.top_p or 1.0)
        # HF uses the global RNG
        torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=generator, device=generator.device)))
    t0 = start_timer(ids.device)
    out = target.generate(ids, **kwargs, **assist)
    seconds = seconds_since(t0, ids.device)
    if keep is not None:
        keep.append(out[0, ids.shape[1]:])  # [1, T + n_new] -> [n_new]
    return out.shape[1] - ids.shape[1], seconds


PLAIN = "plain (target only)"  # our plain loop's row
EAGER_PLAIN = "plain, eager (oneDNN; without the compiled pass)"  # a row when the target has one (models.aot)


def run_bench(target, draft, tokenizer, prompts=BENCH_PROMPTS, max_new_tokens: int = 64, gamma: int = 4,
              sampling: SamplingConfig = SamplingConfig(temperature=0), seed: int = 0, hf: bool = True,
              progress=print, hf_draft=None, tree: TreeBudget | None = None) -> dict:
    """Run every method on every prompt (interleaved) and return the table as a dict (see `format_table`).

    A drafter that can grow trees also gets a dynamic-tree row: `tree`, else its `default_tree`, else
    TreeBudget().

    The speedup column divides by the fastest of our plain loop and Hugging Face's plain `generate`: a
    speedup over a slow baseline is not a speedup. A target with a compiled pass (`models.aot`) also gets
    the plain loop without it, the default before. `hf_draft` is the causal LM for Hugging Face's assisted
    rows (default: `draft` itself when it is a model). Our rows also give the target's median pass in the
    loop and its mean rows (`lab.pass_clock`; the prompt's prefill left out): what t(k) cost in this run.
    """
    hf_draft = hf_draft if hf_draft is not None else (draft if isinstance(draft, torch.nn.Module) else None)
    eos = tokenizer.eos_token_id
    device = next(target.parameters()).device
    encoded = [encode_chat(tokenizer, p, device) for p in prompts]
    g = torch.Generator(device=device).manual_seed(seed)
    opts = dict(sampling=sampling, generator=g, eos_token_id=eos)
    methods = {
        PLAIN: lambda ids: autoregressive_generate(target, ids, max_new_tokens, **opts),
        f"speculative, ours (γ={gamma})": lambda ids: speculative_generate(target, draft, ids, max_new_tokens,
                                                                            gamma=gamma, **opts),  # a chain
    }
    # the most rows a pass of each of our rows scores after the prefill (plain: one, or two where padded)
    widest = {PLAIN: 2, f"speculative, ours (γ={gamma})": target_rows(gamma)}
    if compiled_pass(target) is not None:  # models.aot: the eager path beside the compiled one
        methods[EAGER_PLAIN] = lambda ids: autoregressive_generate(target, ids, max_new_tokens,
                                                                   cache="dynamic", **opts)
    drafter, choice, chosen = as_drafter(draft), None, None
    if isinstance(drafter, TreeDrafter):
        budget = tree or drafter.default_tree or TreeBudget()
        methods[f"speculative, ours (dynamic {method_name(budget)})"] = (
            lambda ids: speculative_generate(target, drafter, ids, max_new_tokens, tree=budget, **opts))
        widest[f"speculative, ours (dynamic {method_name(budget)})"] = target_rows(budget)
        chosen = drafter.default_method(sampling)  # what the one-line call runs (models.method for the head)
        named = isinstance(chosen, (int, TreeBudget))
        label = method_name(chosen) if named else f"static tree of {chosen.size}"
        methods[f"speculative, ours (the chosen default: {label})"] = (
            lambda ids: speculative_generate(target, drafter, ids, max_new_tokens, **opts))
        widest[f"speculative, ours (the chosen default: {label})"] = (target_rows(chosen) if named
                                                                     else chosen.size + 1)
        if named:  # what the loader chose it from (models.choice), where it chose
            choice = (getattr(drafter, "defaults", None) or {}).get("choice")
    if hf:
        methods["HF generate, plain"] = lambda ids: hf_generate(target, ids, max_new_tokens, sampling, g)
    if hf and hf_draft is not None:  # Hugging Face assisted generation needs a causal LM as its draft
        methods["HF assisted, its defaults"] = lambda ids: hf_generate(target, ids, max_new_tokens, sampling,
                                                                       g, assistant_model=hf_draft)

        def hf_at_gamma(ids):  # transformers 5 reads these from the draft's config, not from generate()
            with assistant_settings(hf_draft, **constant_gamma(gamma)):
                return hf_generate(target, ids, max_new_tokens, sampling, g, assistant_model=hf_draft)

        methods[f"HF assisted, γ={gamma} constant"] = hf_at_gamma
    with PassClock(target) as clock:
        rows = run_interleaved({name: labelled(clock, name, run) for name, run in methods.items()}, encoded,
                               progress)
    chosen_row = next((name for name in rows if "the chosen default" in name), None)
    why = None if choice is None else chosen_prediction(choice, chosen, sampling, clock, chosen_row,
                                                        widest[chosen_row])
    spec = rows[f"speculative, ours (γ={gamma})"]
    alpha = spec.alpha if spec.alpha is not None else float("nan")
    c = cost_ratio(target, draft, encoded[0])
    plain_rows = (PLAIN, EAGER_PLAIN, "HF generate, plain")
    base = max(rows[name].tokens_per_second for name in plain_rows if name in rows)
    return {
        "settings": {"max_new_tokens": max_new_tokens, "gamma": gamma, "sampling": asdict(sampling),
                     "prompts": len(prompts), "seed": seed, "device": str(device),
                     "torch_threads": torch.get_num_threads(),
                     "dtype": str(target.dtype).removeprefix("torch."),
                     "draft": type(draft).__name__},
        "rows": [{**r.as_dict(base), **in_loop(clock, name, widest.get(name))} for name, r in rows.items()],
        "alpha": alpha, "cost_ratio_c": c,
        "predicted_speedup": predicted_speedup(alpha, gamma, c) if alpha == alpha else float("nan"),
        "chosen_default": why,
    }


def chosen_prediction(choice, method, sampling: SamplingConfig, clock: PassClock, row: str,
                      rows: int) -> dict:
    """The chosen default's predicted speedup (`models.choice.Choice`), the calibration's price for its target
    pass of `rows` rows, and what that pass cost in this run over plain decoding's (`lab.pass_clock`)."""
    name = method_name(method)
    return {"method": name, "predicted": choice.predicted["greedy" if sampling.greedy else "T=1"][name],
            "rows": rows, "calibrated_ratio": choice.costs.verify_cost(rows),
            "in_loop_ratio": clock.over_plain(row, rows, PLAIN)}


def in_loop(clock: PassClock, name: str, rows: int | None) -> dict:
    """A row's target passes in the run, the prefill left out: median ms and mean rows (None if not timed)."""
    ms = clock.median(name, rows) * 1e3 if rows else float("nan")
    return ({"target_pass_ms": ms, "target_pass_rows": clock.mean_rows(name, rows)} if ms == ms
            else {"target_pass_ms": None, "target_pass_rows": None})


def format_table(result: dict) -> str:
    """A Markdown table of the benchmark, ending with the formula's prediction and, where the loader chose the
    default by measurement, its own prediction for that choice."""
    # speedup: over the faster plain row
    lines = ["| method | tokens | seconds | tokens/s | speedup vs plain | τ per target pass "
             "| accepted / drafted | α per token | target pass in the loop (ms, rows) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        a = "" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.2f}"
        al = "" if r["alpha"] is None else f"{r['alpha']:.2f}"
        tau = "" if r.get("tau") is None else f"{r['tau']:.2f}"
        ms = r.get("target_pass_ms")
        passes = "" if ms is None else f"{ms:.2f} ms, {r['target_pass_rows']:.1f} rows"
        lines.append(f"| {r['method']} | {r['tokens']} | {r['seconds']:.2f} | {r['tokens_per_second']:.1f} | "
                     f"{r['speedup_vs_plain']:.2f}× | {tau} | {a} | {al} | {passes} |")
    s = result["settings"]
    lines.append(f"| predicted by (1-α^(γ+1))/((1-α)(γc+1)), α={result['alpha']:.2f}, "
                 f"c={result['cost_ratio_c']:.3f}, "
                 f"γ={s['gamma']} (chain) | | | | {result['predicted_speedup']:.2f}× | | | | |")
    why = result.get("chosen_default")
    if why:  # the loader's prediction for its choice, and the one price in it that moves most
        lines.append(f"| predicted for the chosen default ({why['method']}) by this machine's calibration, "
                     f"which priced its {why['rows']}-row target pass at {why['calibrated_ratio']:.2f} "
                     f"one-row passes (in this run: {why['in_loop_ratio']:.2f}) | | | | "
                     f"{why['predicted']:.2f}× | | | | |")
    return "\n".join(lines)


def save_json(result: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(result, f, indent=2)


def plot_bench(result: dict, path: str | None = None):
    """The side-by-side figure: each method's speedup over the faster plain row, and the formula's prediction.

    Bars are measured (from `run_bench` or its JSON); the hatched bar is the Leviathan et al. prediction from
    the run's α and c. Written to `path` (PNG, SVG, ... by its suffix) when given. -> the matplotlib Figure.
    """
    from matplotlib.figure import Figure  # no pyplot: works without a display, in the CLI and in notebooks
    rows = result["rows"]
    labels = [r["method"] for r in rows] + ["predicted (textbook formula)"]
    values = [r["speedup_vs_plain"] for r in rows] + [result["predicted_speedup"]]
    colors = ["grey" if r["method"].startswith(("plain", "HF generate, plain")) else
              ("C1" if r["method"].startswith("HF") else "C0") for r in rows] + ["white"]
    fig = Figure(figsize=(7.5, 0.5 * len(labels) + 1.4))
    ax = fig.subplots()
    bars = ax.barh(range(len(labels)), values, color=colors, edgecolor="black")
    bars[-1].set_hatch("//")
    for i, v in enumerate(values):
        ax.text(v, i, f" {v:.2f}×", va="center", fontsize=10)
    ax.axvline(1, color="black", lw=1, ls="--")
    ax.set_yticks(range(len(labels)), labels, fontsize=10)
    ax.invert_yaxis()
    ax.set_xlim(0, max(values + [1.0]) * 1.25)
    s = result["settings"]
    ax.set_xlabel(f"speedup over the faster plain row (×), {s.get('prompts', '?')} prompts × "
                  f"{s.get('max_new_tokens', '?')} tokens, {s.get('device', '?')}")
    best = max(rows, key=lambda r: r["speedup_vs_plain"])
    ax.set_title(f"Fastest: {best['method']} at {best['speedup_vs_plain']:.2f}× plain decoding", fontsize=11)
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=120)
    return fig
