"""A feature-level draft head (EAGLE-1, Li et al. 2024): it drafts from the target's own hidden states.

A token-level draft sees only tokens. This head sees, at position t, the target's final hidden state
h_t (the vector the target's LM head turns into logits) together with the embedding of the next token
x_{t+1}, and predicts the target's next hidden state h_{t+1}:

    f_{t+1} = layers(fc([embed(x_{t+1}), h_t]))        # [d]: a guess of h_{t+1}
    p_draft(x_{t+2}) = softmax(head(f_{t+1}))           # the target's own output rows

The embedding is the target's (shared, frozen); the head scores only `keep_ids` (the tokens the target
writes most often), returning -inf, i.e. draft probability 0, for the rest; rejection sampling stays exact
for any draft distribution. When drafting further ahead, the head feeds its own guesses f back in.

With `fuse_layers` (EAGLE-3, Li et al. 2025) the head reads more than the final features at the positions
the target has scored: the target's hidden states after a low and a middle layer too, RMS-normalised and
mixed by a learnt linear map `fuse` ([3d] -> [d]) before `fc`. Its own guesses stay [d] vectors. Here the
last fused "layer" is always the final features (-1), the ones the head learns to predict, and `fuse` can
start as "take the final features alone", so a fused head starts out as the plain one (`grow`).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import DynamicCache, LlamaConfig, LlamaModel

from ..cache import cache_kwargs
from ..sampling import Ranked, argmax, ranked
from .offline_draft import ReducedHead

WEIGHTS_DIR = Path(__file__).parent / "weights" / "feature_draft"


class FeatureHead(nn.Module):
    """[fuse(3d -> d)], fc(2d -> d), a few Llama decoder layers, and the target's (reduced) output head."""

    def __init__(self, target, n_layers: int = 1, keep_ids: torch.Tensor | None = None,
                 fuse_layers: tuple[int, ...] = (), ffn_size: int | None = None):
        super().__init__()
        t = target.config
        d = t.hidden_size
        ffn_size = t.intermediate_size if ffn_size is None else int(ffn_size)  # the MLP's width
        if ffn_size < 1:
            raise ValueError(f"ffn_size is the MLP's width, a positive number of units, got {ffn_size}: "
                             f"leave it None for the target's ({t.intermediate_size})")
        keep_ids = (torch.arange(target.get_output_embeddings().weight.shape[0]) if keep_ids is None
                    else keep_ids)
        config = LlamaConfig(vocab_size=1, hidden_size=d, intermediate_size=ffn_size,
                             num_hidden_layers=n_layers, num_attention_heads=t.num_attention_heads,
                             num_key_value_heads=t.num_key_value_heads, head_dim=getattr(t, "head_dim", None),
                             max_position_embeddings=t.max_position_embeddings, rms_norm_eps=t.rms_norm_eps,
                             rope_parameters=getattr(t, "rope_parameters", None), hidden_act=t.hidden_act,
                             bos_token_id=None, eos_token_id=None, pad_token_id=None)
        self.embed = target.get_input_embeddings()  # shared with the target, never trained here
        self.fc = nn.Linear(2 * d, d)
        # indices into the target's hidden_states, or ()
        self.fuse_layers = tuple(int(i) for i in fuse_layers)
        if self.fuse_layers:
            if len(self.fuse_layers) < 2 or self.fuse_layers[-1] != -1:
                raise ValueError(f"fuse_layers lists target layers ending with -1 "
                                 f"(the final features the head predicts), e.g. (2, 15, -1); "
                                 f"got {fuse_layers}")
            self.fuse = nn.Linear(len(self.fuse_layers) * d, d, bias=False)
            with torch.no_grad():  # start as "the final features alone": the plain head's input
                self.fuse.weight.zero_()
                self.fuse.weight[:, -d:] = torch.eye(d)
        self.body = LlamaModel(config)  # its own 1-row embedding table is unused: we pass inputs_embeds
        with torch.no_grad():  # zeroed, not random: a loaded head is a function of its file (aot.fingerprint)
            self.body.embed_tokens.weight.zero_()
        self.head = ReducedHead(target.get_output_embeddings().weight, keep_ids.to(target.device))
        self.to(device=target.device, dtype=target.dtype)

    def forward(self, hidden: torch.Tensor, next_tokens: torch.Tensor, cache: DynamicCache | None = None, *,
                position_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:  # [B, k, d], [B, k] -> [B, k, d]
        """Predict the target's hidden state at the next token's position, for k positions at once.

        position_ids [B, k] and a 4D additive mask let a tree of guesses share one pass
        (FeatureDrafter.propose_tree).
        """
        if hidden.shape[-1] != self.fc.out_features:  # the target's fused layers, not a guess of the head's
            hidden = self.fused(hidden)
        x = self.fc(torch.cat([self.embed(next_tokens), hidden], dim=-1))  # [B, k, 2d] -> [B, k, d]
        out = self.body(inputs_embeds=x, **cache_kwargs(self.body, cache), use_cache=cache is not None,
                        position_ids=position_ids, attention_mask=attention_mask)
        return out.last_hidden_state

    def fused(self, layers: torch.Tensor) -> torch.Tensor:  # [..., n d] -> [..., d]
        """Mix the target's n layers into one input feature: each but the (normalised) final one
        RMS-normalised."""
        d, n = self.fc.out_features, len(self.fuse_layers)
        if not n or layers.shape[-1] != n * d:
            fused = f" or {n * d} (its {n} fused target layers)" if n else ""
            raise ValueError(f"this head reads features of size {d}{fused}, got {layers.shape[-1]}")
        blocks = layers.unflatten(-1, (-1, d))  # [..., n, d]
        blocks = torch.cat([F.rms_norm(blocks[..., :-1, :], (d,)), blocks[..., -1:, :]], dim=-2)
        return self.fuse(blocks.flatten(-2))

    def logits(self, features: torch.Tensor) -> torch.Tensor:  # [..., d] -> [..., V]
        return self.head(features)

    def reduced_logits(self, features: torch.Tensor,
                       ) -> tuple[torch.Tensor, torch.Tensor]:  # [..., d] -> ([.., K], [K])
        """The logits of the K tokens the head can propose, and their ids (every other token has probability
        0)."""
        return self.head.reduced_logits(features), self.head.keep_ids

    def greedy_tokens(self, features: torch.Tensor) -> torch.Tensor:  # [..., d] -> [...]
        """Each row's greedy token (a vocabulary id): `sampling.argmax` of its logits, the first on ties."""
        return self.head.keep_ids[argmax(self.head.reduced_logits(features))]

    def ranked(self, features: torch.Tensor, w: int) -> Ranked:  # [..., d] -> [..., w] twice
        """Each row's w most likely tokens, best first, with their log-probabilities (`sampling.ranked`):
        what a greedy tree's growth reads of a head pass."""
        return ranked(self.head.reduced_logits(features), self.head.keep_ids, w)

    @property
    def ffn_size(self) -> int:
        """The width of the decoder layers' MLP (the target's unless the head was built wider)."""
        return self.body.config.intermediate_size

    @property
    def vocab_size(self) -> int:
        return self.head.weight.shape[0]


def grow(head: FeatureHead, target, n_layers: int, fuse_layers: tuple[int, ...] = (),
         ffn_size: int | None = None) -> FeatureHead:
    """A deeper head, one with a wider MLP, or one that reads fused target layers, that starts out computing
    exactly what `head` computes.

    Its first layers are `head`'s; each new layer's two output projections (attention's o_proj, the MLP's
    down_proj) start at zero, so the layer adds nothing to the residual stream until training moves them.
    A wider MLP keeps the old units and adds new ones whose input rows (gate, up) start random and whose
    output columns (down) start at zero: they add nothing yet, but their gradients are not zero.
    A new `fuse` starts as "take the final features alone" (`FeatureHead`). Fine-tuning from here keeps what
    the smaller head learnt instead of starting over.
    """
    n_old, ffn_old = head.body.config.num_hidden_layers, head.ffn_size
    ffn_size = ffn_old if ffn_size is None else int(ffn_size)
    if n_layers < n_old or ffn_size < ffn_old:
        raise ValueError(f"grow makes a head deeper or wider: asked for {n_layers} layers with an MLP "
                         f"{ffn_size} wide, the head has {n_old} layers {ffn_old} wide")
    fuse_layers = tuple(fuse_layers) or head.fuse_layers  # a fused head stays fused
    if head.fuse_layers and fuse_layers != head.fuse_layers:
        raise ValueError(f"the head already fuses layers {head.fuse_layers}; "
                         f"cannot change them to {tuple(fuse_layers)}")
    bigger = FeatureHead(target, n_layers, head.head.keep_ids, fuse_layers, ffn_size)
    state = head.state_dict()
    mlp = {k for k in state if k.startswith("body.layers.") and ".mlp." in k}
    missing, unexpected = bigger.load_state_dict({k: v for k, v in state.items() if k not in mlp},
                                                 strict=False)
    new = tuple(f"body.layers.{i}." for i in range(n_old, n_layers)) + ("fuse.",)
    if unexpected or any(not k.startswith(new) and k not in mlp for k in missing):
        raise ValueError(f"cannot grow this head: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        for i, layer in enumerate(bigger.body.layers):
            if i >= n_old:
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
                continue
            for name in ("gate_proj", "up_proj"):  # [ffn, d]: the old units first
                getattr(layer.mlp, name).weight[:ffn_old] = state[f"body.layers.{i}.mlp.{name}.weight"]
            down = layer.mlp.down_proj.weight  # [d, ffn]
            down.zero_()
            down[:, :ffn_old] = state[f"body.layers.{i}.mlp.down_proj.weight"]
    return bigger.train(head.training)


def trained_state(head: FeatureHead) -> dict[str, torch.Tensor]:
    """The head's own tensors: everything but the shared embedding and output rows."""
    shared = {"embed.weight", "head.weight", "head.sub_weight", "body.embed_tokens.weight"}
    return {k: v for k, v in head.state_dict().items() if k not in shared}


def save(head: FeatureHead, directory: Path, meta: dict) -> None:
    """config.json (architecture and training notes) and model.safetensors (float16, to stay small)."""
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: (v.half() if v.is_floating_point() else v).contiguous()
             for k, v in trained_state(head).items()}
    save_file(state, directory / "model.safetensors")
    arch = {"n_layers": head.body.config.num_hidden_layers, "n_vocab": int(head.head.keep_ids.shape[0]),
            "fuse_layers": list(head.fuse_layers), "ffn_size": head.ffn_size}
    (directory / "config.json").write_text(json.dumps({**arch, "meta": meta}, indent=1) + "\n")


def available(directory: Path | str | None = None) -> bool:
    directory = Path(directory) if directory is not None else WEIGHTS_DIR
    return (directory / "config.json").exists() and (directory / "model.safetensors").exists()


def load(target, directory: Path | str | None = None) -> FeatureHead:
    """The shipped feature head for `target` (the offline SmolLM2-135M-Instruct), on its device and dtype."""
    directory = Path(directory) if directory is not None else WEIGHTS_DIR
    if not available(directory):
        raise ValueError(f"no feature-draft weights in {directory}; "
                         "train them with: python -m specdec_ref.distill.eagle")
    arch = json.loads((directory / "config.json").read_text())
    state = load_file(directory / "model.safetensors")
    if state["fc.weight"].shape[0] != target.config.hidden_size:
        raise ValueError(f"this feature head has hidden size {state['fc.weight'].shape[0]}, the target "
                         f"{target.config.hidden_size}: it was trained for another target")
    head = FeatureHead(target, arch["n_layers"], state["head.keep_ids"], tuple(arch.get("fuse_layers", ())),
                       arch.get("ffn_size"))
    missing, unexpected = head.load_state_dict({k: v.to(target.dtype) if v.is_floating_point() else v
                                                for k, v in state.items()}, strict=False)
    if unexpected or set(missing) - {"embed.weight", "head.weight", "head.sub_weight",
                                     "body.embed_tokens.weight"}:
        raise ValueError(f"{directory} does not match the feature head: "
                         f"missing {missing}, unexpected {unexpected}")
    head.head.sub_weight.data.copy_(target.get_output_embeddings().weight.detach()[head.head.keep_ids])
    return head.eval()


def recorded_sharpness(directory: Path | str | None = None) -> float:
    """The factor on the head's logits when it samples (`FeatureDrafter(sharpness=...)`), fitted on the tuning
    prompts and kept in its quality.json (`scripts/record_head_quality.py`); 1.0 where none is recorded."""
    path = Path(directory if directory is not None else WEIGHTS_DIR) / "quality.json"
    if not path.exists():
        return 1.0
    return float(json.loads(path.read_text()).get("draft_sharpness", {}).get("s", 1.0))
