"""Kinds of draft for one target, each a few lines, so that chapter 5 can compare them on the (α, c) plane.

    early_exit_draft(target, 2)   the target's first layers with its head: no training, poorly aligned
    int8_copy(target)             the whole target with int8 matrices: well aligned, but not much cheaper
    self_draft(target)            the target itself: α = 1 and c = 1, so no gain (a sanity check)
    prompt_lookup(target)         copy from the context (`NgramDrafter`): no model at all, c ≈ 0
    distilled_draft(target)       the shipped 2-layer LM distilled from the target (None if not installed)
    feature_draft(target)         the EAGLE-style head on the target's features (None if no weights ship)
"""
from __future__ import annotations

import torch
from torch import nn

from ..cache import vocab_size
from ..drafters import FeatureDrafter, NgramDrafter
from .aot import copy_model
from .kernels import prepack_like, unpack
from . import feature_draft as _feature
from . import offline_draft
from .loading import placeholder_draft


def early_exit_draft(target, n_layers: int = 2):
    """The target's first n_layers, then its final norm and head: an untrained early exit."""
    return placeholder_draft(target, n_layers)


def self_draft(target):
    """The target drafting for itself: every token accepted, every draft step as dear as a target step."""
    return target


class Int8Linear(nn.Module):
    """A Linear layer whose weight is stored as int8 with one scale per output row (weight-only
    quantisation)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        w = linear.weight.detach().float()  # [out, in]
        scale = w.abs().amax(1).clamp(min=1e-8) / 127  # [out]
        self.register_buffer("weight_int8", (w / scale[:, None]).round().to(torch.int8))  # [out, in]
        self.register_buffer("scale", scale.to(linear.weight.dtype))  # [out]
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        flat = x.reshape(-1, x.shape[-1])  # [n, in]
        if x.device.type == "cpu" and hasattr(torch, "_weight_int8pack_mm"):  # int8 weights read directly
            y = torch._weight_int8pack_mm(flat, self.weight_int8, self.scale.to(x.dtype))  # [n, out]
        else:  # elsewhere: dequantise on the fly (correct, not fast)
            y = flat @ (self.weight_int8.to(x.dtype) * self.scale[:, None].to(x.dtype)).T  # [n, out]
        y = y if self.bias is None else y + self.bias
        return y.reshape(*x.shape[:-1], -1)


def int8_copy(target, *, activations: bool = True):
    """A copy of the target whose transformer matrices are int8 (the head stays as it is).

    activations=True: torch's dynamic quantisation (int8 weights *and* activations, int8 matrix kernels);
    activations=False: weight-only int8 (`Int8Linear`), which keeps the activations in the model's dtype.
    """
    draft = unpack(copy_model(target)).eval()  # quantisation looks for nn.Linear, not prepacked layers
    if activations:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao.quantization is deprecated in favour of torchao
            torch.ao.quantization.quantize_dynamic(
                draft.model, {nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig},
                dtype=torch.qint8, inplace=True)
        return draft
    for module in list(draft.model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, name, Int8Linear(child))
    return draft


def prompt_lookup(target, max_ngram: int = 3):
    """Prompt lookup: propose what followed the last occurrence of the current n-gram in the context."""
    return NgramDrafter(vocab_size(target), max_ngram=max_ngram)


def distilled_draft(target):
    """The 2-layer LM distilled from the target, as shipped (None where no weights are installed)."""
    return offline_draft.load(target) if offline_draft.available() else None


def feature_draft(target):
    """The EAGLE-style feature drafter, as shipped (None where no feature-draft weights are installed); its
    head prepacked for oneDNN where the target is, as `load_offline_pair` runs it (not compiled)."""
    if not _feature.available():
        return None
    head = prepack_like(_feature.load(target), target)
    return FeatureDrafter(head, sharpness=_feature.recorded_sharpness())
