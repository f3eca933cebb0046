"""Command line: `python -m specdec_ref` generates and compares; `python -m specdec_ref bench` prints the
table.

    python -m specdec_ref --prompt "Why is the sea salty?"          # offline pair, greedy
    python -m specdec_ref --pair qwen2.5 --temperature 0.7  # a Hub pair (needs network, ideally a GPU)
    python -m specdec_ref bench --max-new-tokens 64 --json bench.json --plot bench.png
    python -m specdec_ref diagnose --prompts 4 --json diagnose.json  # will it pay off here? which γ?
    python -m specdec_ref compile   # CPU: compile the offline target's pass once (minutes), used from then on
"""
from __future__ import annotations

import argparse
import sys
import warnings

import torch

from .lab import bench
from .lab.diagnose import greedy_divergence
from .generate import as_drafter, as_method, autoregressive_generate, speculative_generate
from .models.kernels import kernel_path
from .models import PAIRS, encode_chat, load_pair
from .sampling import SamplingConfig


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pair", default="offline",
                   help=f"'offline' (default, no network), 'auto' (by device), or one of {sorted(PAIRS)}")
    p.add_argument("--device", default=None, help="cuda, mps or cpu (default: the pair's choice)")
    p.add_argument("--gamma", type=int, default=None,
                   help="draft tokens per iteration (γ; default: the draft's own)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="model dtype (auto: the fastest the device supports natively)")
    p.add_argument("--draft", default="auto", choices=["auto", "feature", "lm"],
                   help="offline pair only: the feature-level draft, the small causal LM, "
                        "or the fastest shipped")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.set_defaults(tree=None)  # _load sets the draft's default method, unless --gamma asks for a chain


def _load(args, choose_method: bool = True):
    """The pair, with the draft's method: --gamma's chain, else the default the loader chose on this machine
    (its calibration is skipped where --gamma names the method, or where the caller calibrates itself)."""
    print(f"loading the '{args.pair}' pair ...", file=sys.stderr, flush=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        target, draft, tokenizer = load_pair(args.pair, args.device if args.device else
                                             ("cpu" if args.pair == "offline" else None),
                                             None if args.dtype == "auto" else getattr(torch, args.dtype),
                                             args.draft, choose_method=choose_method and not args.gamma)
    for w in caught:
        if "PLACEHOLDER" in str(w.message):
            print(f"WARNING: {w.message}", file=sys.stderr)
    drafter = as_drafter(draft)
    if not args.gamma:  # the drafter's default for this sampling (chosen by measurement for the feature head)
        default = as_method(drafter, None, None, SamplingConfig(args.temperature, args.top_k, args.top_p))
        args.gamma, args.tree = ((default, None) if isinstance(default, int)
                                 else (drafter.default_gamma, default))
    print(f"target {str(target.dtype).removeprefix('torch.')} on {next(target.parameters()).device}, "
          f"draft: {type(drafter).__name__}, {method_name(args)}", file=sys.stderr, flush=True)
    return target, draft, tokenizer


def method_name(args) -> str:
    """The speculative method the run uses, in words."""
    if args.tree is not None:
        b = args.tree
        stop = f", no deeper where its paths are below {b.stop:g}" if b.stop > 0 else ""
        return f"dynamic tree (EAGLE-2: depth {b.depth}, top-{b.topk}, {b.n_nodes} nodes{stop})"
    return f"chain of γ = {args.gamma}"



def generate_main(args) -> None:
    target, draft, tokenizer = _load(args)
    device = next(target.parameters()).device
    sampling = SamplingConfig(args.temperature, args.top_k, args.top_p)
    ids = encode_chat(tokenizer, args.prompt, device)
    eos = tokenizer.eos_token_id

    def progress(step):
        kept = len(step.path) if args.tree is not None else step.n_accepted
        print(f"\r  speculative: {step.context_len + kept + 1 - ids.shape[1]} tokens "
              f"({kept} accepted this step)   ", end="", file=sys.stderr, flush=True)

    print("speculative decoding ...", file=sys.stderr, flush=True)
    method = dict(tree=args.tree) if args.tree is not None else dict(gamma=args.gamma)
    spec = speculative_generate(target, draft, ids, args.max_new_tokens, **method, sampling=sampling,
                                generator=torch.Generator(device).manual_seed(args.seed), eos_token_id=eos,
                                on_step=progress)
    print("\nplain decoding (for comparison) ...", file=sys.stderr, flush=True)
    plain = autoregressive_generate(target, ids, args.max_new_tokens, sampling=sampling,
                                    generator=torch.Generator(device).manual_seed(args.seed),
                                    eos_token_id=eos)
    print(tokenizer.decode(spec.tokens, skip_special_tokens=True))
    print("-" * 60)
    s = spec.stats
    compiled_head = type(getattr(draft, "head", None)).__name__ == "CompiledHead"
    compiled_head = "; the feature head's pass is compiled too" if compiled_head else ""
    print(f"method: {method_name(args)}; kernel path: {kernel_path(target)}{compiled_head}")
    print(f"τ = {spec.tokens.shape[0] / s.target_calls:.2f} tokens per target pass "
          f"({s.target_calls} target passes speculative vs {plain.stats.target_calls} plain)")
    if args.tree is None:
        print(f"acceptance rate {s.acceptance_rate:.2f} "
              f"({sum(s.accepted)}/{sum(s.drafted)} drafted tokens accepted); "
              f"per-token α = {s.alpha:.2f} (discarded tokens not counted)")
    print(f"speculative: {spec.tokens_per_second:.1f} tokens/s   "
          f"plain: {plain.tokens_per_second:.1f} tokens/s   "
          f"speedup: {spec.tokens_per_second / plain.tokens_per_second:.2f}×")
    if sampling.greedy:
        split = greedy_divergence(target, ids, plain.tokens, spec.tokens)
        if split is None:
            print("greedy outputs identical: yes")
        else:
            print(f"greedy outputs identical: no: {split} "
                  f"[{tokenizer.decode([split.plain_token])!r} vs {tokenizer.decode([split.spec_token])!r}]")
    if args.compare_prompts > 0:
        encoded = [encode_chat(tokenizer, q, device) for q in bench.BENCH_PROMPTS[:args.compare_prompts]]
        n = min(args.max_new_tokens, COMPARE_TOKENS)
        print(f"... and on {len(encoded)} held-out prompts", file=sys.stderr, flush=True)
        plain_tps, spec_tps = held_out_speeds(target, draft, encoded, n, method, sampling, args.seed)
        print(f"over {len(encoded)} held-out prompts ({n} new tokens each, interleaved): speculative "
              f"{spec_tps:.1f} tokens/s, plain {plain_tps:.1f} tokens/s, speedup {spec_tps / plain_tps:.2f}× "
              "(one prompt's speedup is one sample of how often the draft is right; "
              "`python -m specdec_ref bench` compares every method)")


COMPARE_TOKENS = 64  # new tokens per held-out prompt in generate's comparison


def held_out_speeds(target, draft, encoded: list[torch.Tensor], max_new_tokens: int, method: dict,
                    sampling: SamplingConfig, seed: int) -> tuple[float, float]:  # [1, T] each
    """Plain and speculative decoding (`method`: gamma= or tree=) on these prompts, prompt by prompt, each
    seeded alike -> (plain tokens/s, speculative tokens/s), tokens and seconds summed over the prompts."""
    def generator() -> torch.Generator:
        return torch.Generator(encoded[0].device).manual_seed(seed)

    rows = bench.run_interleaved({
        "plain": lambda ids: autoregressive_generate(target, ids, max_new_tokens, sampling=sampling,
                                                     generator=generator()),
        "speculative": lambda ids: speculative_generate(target, draft, ids, max_new_tokens, **method,
                                                        sampling=sampling, generator=generator())},
        encoded, progress=lambda message: None, warmup=False)
    return rows["plain"].tokens_per_second, rows["speculative"].tokens_per_second


def bench_main(args) -> None:
    target, draft, tokenizer = _load(args)
    sampling = SamplingConfig(args.temperature, args.top_k, args.top_p)
    prompts = bench.BENCH_PROMPTS[: args.prompts]
    hf_draft = None
    if args.pair == "offline" and not isinstance(draft, torch.nn.Module):  # HF assisted rows need a causal LM
        from .models import offline_draft
        hf_draft = offline_draft.load(target) if offline_draft.available() else None
    result = bench.run_bench(target, draft, tokenizer, prompts, args.max_new_tokens, args.gamma, sampling,
                             args.seed, hf=not args.no_hf, hf_draft=hf_draft, tree=args.tree,
                             progress=lambda m: print(m, file=sys.stderr, flush=True))
    result["command"] = "python -m specdec_ref " + " ".join(sys.argv[1:])
    result["settings"]["pair"] = args.pair
    print(bench.format_table(result))
    if args.json:
        bench.save_json(result, args.json)
        print(f"written to {args.json}", file=sys.stderr)
    if args.plot:
        bench.plot_bench(result, args.plot)
        print(f"figure written to {args.plot}", file=sys.stderr)


def diagnose_main(args) -> None:
    from .lab.diagnose import diagnose, format_report
    target, draft, tokenizer = _load(args, choose_method=False)  # diagnose calibrates, and chooses, itself
    device = next(target.parameters()).device
    encoded = [encode_chat(tokenizer, p, device) for p in bench.BENCH_PROMPTS[: args.prompts]]
    result = diagnose(target, draft, encoded, gamma_max=args.gamma_max, max_new_tokens=args.max_new_tokens,
                      sampling=SamplingConfig(args.temperature, args.top_k, args.top_p), seed=args.seed,
                      eos_token_id=tokenizer.eos_token_id,
                      progress=lambda m: print(m, file=sys.stderr, flush=True))
    result["settings"]["pair"] = args.pair
    print(format_report(result))
    if args.json:
        bench.save_json(result, args.json)
        print(f"written to {args.json}", file=sys.stderr)


def compile_main(args) -> None:
    """Build this machine's compiled passes for the offline target and the feature head (models.aot), then
    check the target's against eager."""
    from .cache import vocab_size
    from .models import aot, aot_chain, aot_head, aot_tree, aot_verdict, feature_draft
    from .models.loading import default_dtype, load_offline_target
    dtype = default_dtype(torch.device("cpu")) if args.dtype == "auto" else getattr(torch, args.dtype)
    model, _ = load_offline_target("cpu", dtype, prepack=False, compiled=False)  # no old package loaded
    path = aot.package_path(model)
    head = feature_draft.load(model) if feature_draft.available() else None
    builds = [] if head is None else (  # the head's pass, its chains and its greedy trees in one call
        [(aot_head.head_package_path(head), lambda p: aot_head.build_head(head, p))]
        + [(aot_chain.chain_package_path(head, g), lambda p, g=g: aot_chain.build_chain(head, g, p))
           for g in aot_chain.CHAIN_GAMMAS]
        + [(aot_tree.tree_package_path(head, *s), lambda p, s=s: aot_tree.build_tree(head, *s, p))
           for s in aot_tree.TREE_SHAPES])
    head_paths = [p for p, _ in builds]
    builds += [(aot_verdict.verdict_path(k, vocab_size(model), dtype),  # the sampled draw and chain verdict
                lambda p, k=k: aot_verdict.build_verdict(k, vocab_size(model), dtype, p))
               for k in ("draw", "verdict")]
    paths = [path] + [p for p, _ in builds]
    if all(p.exists() for p in paths) and not args.force:
        print(f"this machine's compiled passes exist: {', '.join(map(str, paths))}"
              " (--force builds them again)")
        return
    print(f"compiling the offline target's pass ({str(dtype).removeprefix('torch.')}, "
          f"{torch.get_num_threads()} threads): a few minutes, once per machine ...", file=sys.stderr,
          flush=True)
    if args.force or not path.exists():
        aot.build(model, path)
    worst = aot.check_against_eager(model, path)
    for head_path, build in builds:
        if args.force or not head_path.exists():
            build(head_path)
    shapes = ", ".join(f"{d}/{w}" for d, w in aot_tree.TREE_SHAPES)
    print(f"compiled pass: {path}\n  its logits differ from the eager model's by at most {worst:.2g}; "
          "the loops run the offline target through it where it beats the eager model (timed once, on its "
          "first load)"
          + (f"\ncompiled feature head: {', '.join(map(str, head_paths))} (its pass; its chains of "
             f"{', '.join(map(str, aot_chain.CHAIN_GAMMAS))} drafts and its greedy trees {shapes} "
             "(depth/width) in one call)" if head is not None else "")
          + f"\nthe sampled draw and chain verdict: {', '.join(map(str, paths[1 + len(head_paths):]))}"
          + "\n(SPECDEC_AOT=0 opts out)")


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m specdec_ref", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    gen = sub.add_parser("generate", help="generate from a prompt and compare with plain decoding (default)")
    _common(gen)
    gen.add_argument("--prompt", default="Explain in a few sentences why the sky is blue.")
    gen.add_argument("--compare-prompts", type=int, default=4,
                     help="then time plain and speculative decoding on this many held-out benchmark prompts, "
                          "interleaved (0: skip)")
    b = sub.add_parser("bench", help="side-by-side benchmark table (plain, ours, HF assisted, formula)")
    _common(b)
    b.add_argument("--prompts", type=int, default=len(bench.BENCH_PROMPTS), help="how many benchmark prompts")
    b.add_argument("--json", default="bench_results.json",
                   help="where to write the table as JSON ('' for none)")
    b.add_argument("--no-hf", action="store_true", help="skip the Hugging Face assisted-generation rows")
    b.add_argument("--plot", default="",
                   help="also draw the side-by-side figure (chapter 6) to this path, e.g. bench.png")
    d = sub.add_parser("diagnose",
                       help="measure α, c, t(k), overhead; recommend a γ or say why it won't pay off")
    _common(d)
    d.add_argument("--prompts", type=int, default=4, help="how many benchmark prompts")
    d.add_argument("--gamma-max", type=int, default=8, help="largest γ to consider")
    d.add_argument("--json", default="", help="also write the measurements and verdict as JSON to this path")
    c = sub.add_parser("compile", help="CPU: compile the offline target's pass once for this machine "
                                       "(minutes); later runs load it in seconds")
    c.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    c.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads the package is built for, and used with (default: torch's choice)")
    c.add_argument("--force", action="store_true", help="build it again even if one exists")
    c.set_defaults(temperature=0.0, top_k=None, top_p=None, gamma=None)
    if not argv or argv[0] not in ("generate", "bench", "diagnose", "compile", "-h", "--help"):
        argv = ["generate", *argv]
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        SamplingConfig(args.temperature, args.top_k, args.top_p)
        if args.gamma is not None and args.gamma < 1:
            raise ValueError(f"--gamma must be >= 1, got {args.gamma}")
        if getattr(args, "gamma_max", 1) < 1:
            raise ValueError(f"--gamma-max must be >= 1, got {args.gamma_max}")
        if getattr(args, "compare_prompts", 0) < 0:
            raise ValueError(f"--compare-prompts must be >= 0 (0 skips the comparison), "
                             f"got {args.compare_prompts}")
    except ValueError as e:
        parser.error(str(e))
    {"bench": bench_main, "diagnose": diagnose_main, "compile": compile_main}.get(args.command,
                                                                                generate_main)(args)


if __name__ == "__main__":
    main()
