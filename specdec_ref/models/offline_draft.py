"""The distilled draft for the offline target (trained by `python -m specdec_ref.distill.train`).

The draft is an ordinary `LlamaForCausalLM` with a few layers, built at load time from
  * the target's own token embedding (shared, frozen, so it is not shipped), and
  * the shipped weights in specdec_ref/models/weights/offline_draft/ (layers, final norm, head bias, the ids
    of the tokens its head can propose, and the head rows themselves if training changed them).

Its head scores only the `n_vocab` tokens the target writes most often, which makes a draft step
several times cheaper than a full 49,152-way head. It still emits full-vocabulary logits: every
other token gets -inf, i.e. draft probability 0. Rejection sampling stays exact for any draft
distribution, so this only costs acceptance on rare tokens; and both our loop and Hugging Face's
`generate(assistant_model=draft)` see a normal causal LM with the target's vocabulary.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from .kernels import PackedWeight, linear

WEIGHTS_DIR = Path(__file__).parent / "weights" / "offline_draft"


class ReducedHead(nn.Module):
    """An output head over a subset of the vocabulary that still returns logits for every token.

    `weight` is the full [V, d] tied embedding of the target (so `get_output_embeddings().weight`
    reports the real vocabulary size); only its `keep_ids` rows are ever multiplied.
    """

    def __init__(self, embedding: nn.Parameter, keep_ids: torch.Tensor):  # [V, d], [n]
        super().__init__()
        if keep_ids.numel() > 1 and not bool((keep_ids[1:] > keep_ids[:-1]).all()):
            raise ValueError("a reduced head's keep_ids must be distinct token ids in ascending order (so "
                             "that its argmax breaks ties as one over the whole vocabulary does): pass "
                             "torch.unique(keep_ids)")
        self.weight = embedding  # shared with the target; never trained here
        self.register_buffer("keep_ids", keep_ids.long())  # [n] token ids the draft can propose
        # [n, d] the rows it multiplies: a copy of the embedding's keep_ids rows (shipped only if it was
        # trained)
        self.sub_weight = nn.Parameter(embedding.detach()[keep_ids].clone(), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(keep_ids.shape[0], dtype=embedding.dtype,
                                             device=embedding.device))

    packed: PackedWeight | None = None  # oneDNN's copy of sub_weight, after `prepack_weights` (kernels.py)

    def prepack_weights(self) -> None:
        self.packed = PackedWeight()

    def reduced_logits(self, hidden: torch.Tensor) -> torch.Tensor:  # [..., d] -> [..., n]
        return linear(hidden, self.sub_weight, self.bias, self.packed)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # [..., d] -> [..., V]
        out = hidden.new_full((*hidden.shape[:-1], self.weight.shape[0]), float("-inf"))  # [..., V]
        return out.index_copy_(-1, self.keep_ids, self.reduced_logits(hidden).to(out.dtype))


def build(target, n_layers: int, keep_ids: torch.Tensor, init_layers: tuple[int, ...] | None = None):
    """A draft Llama sharing the target's embedding, with a reduced head; layers copied from `init_layers`."""
    t = target.config
    config = LlamaConfig(vocab_size=keep_ids.shape[0], hidden_size=t.hidden_size,
                         intermediate_size=t.intermediate_size, num_hidden_layers=n_layers,
                         num_attention_heads=t.num_attention_heads, num_key_value_heads=t.num_key_value_heads,
                         head_dim=getattr(t, "head_dim", None),
                         max_position_embeddings=t.max_position_embeddings,
                         rms_norm_eps=t.rms_norm_eps, rope_parameters=t.rope_parameters,
                         hidden_act=t.hidden_act,
                         tie_word_embeddings=False, bos_token_id=t.bos_token_id, eos_token_id=t.eos_token_id,
                         pad_token_id=t.pad_token_id)
    draft = LlamaForCausalLM(config)  # built with a tiny vocabulary: the real embedding comes from the target
    draft.model.embed_tokens = target.get_input_embeddings()
    draft.lm_head = ReducedHead(target.get_input_embeddings().weight, keep_ids.to(target.device))
    draft.config.vocab_size = t.vocab_size
    if init_layers is not None:
        for layer, src in zip(draft.model.layers, init_layers):
            layer.load_state_dict(target.model.layers[src].state_dict())
        draft.model.norm.load_state_dict(target.model.norm.state_dict())
    draft.generation_config = copy.deepcopy(target.generation_config)  # HF assisted generation edits it
    return draft.to(device=target.device, dtype=target.dtype).eval()


def trained_state(draft) -> dict[str, torch.Tensor]:
    """The tensors that are the draft's own: everything but the shared embedding (and the head rows, if
    frozen)."""
    frozen = {"model.embed_tokens.weight", "lm_head.weight"}
    if not draft.lm_head.sub_weight.requires_grad:
        frozen.add("lm_head.sub_weight")
    return {k: v for k, v in draft.state_dict().items() if k not in frozen}


def save(draft, directory: Path, meta: dict) -> None:
    """Write config.json (architecture + training notes) and model.safetensors (float16, to stay small)."""
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: (v.half() if v.is_floating_point() else v).contiguous()
             for k, v in trained_state(draft).items()}
    save_file(state, directory / "model.safetensors")
    arch = {"n_layers": draft.config.num_hidden_layers, "n_vocab": int(draft.lm_head.keep_ids.shape[0])}
    (directory / "config.json").write_text(json.dumps({**arch, "meta": meta}, indent=1) + "\n")


def available() -> bool:
    return (WEIGHTS_DIR / "config.json").exists() and (WEIGHTS_DIR / "model.safetensors").exists()


def load(target, directory: Path | str | None = None):
    """The shipped draft for `target` (the offline SmolLM2-135M-Instruct), on its device and dtype."""
    directory = Path(directory) if directory is not None else WEIGHTS_DIR
    if not (directory / "config.json").exists():
        raise ValueError(f"no draft weights in {directory}; "
                         "train them with: python -m specdec_ref.distill.train")
    arch = json.loads((directory / "config.json").read_text())
    state = load_file(directory / "model.safetensors")
    if target.config.vocab_size != target.get_input_embeddings().weight.shape[0] or \
            target.config.hidden_size != state["model.norm.weight"].shape[0]:
        raise ValueError("this draft was distilled from SmolLM2-135M-Instruct; load that target with "
                         "specdec_ref.load_offline_target()")
    draft = build(target, arch["n_layers"], state["lm_head.keep_ids"])
    missing, unexpected = draft.load_state_dict(
        {k: v.to(target.dtype) if v.is_floating_point() else v for k, v in state.items()}, strict=False)
    if unexpected or set(missing) - {"model.embed_tokens.weight", "lm_head.weight", "lm_head.sub_weight"}:
        raise ValueError(f"{directory} does not match the draft architecture: missing {missing}, "
                         f"unexpected {unexpected}")
    return draft.eval()
