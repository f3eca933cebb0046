"""The feature head's pass compiled ahead of time (AOTInductor), as `models.aot` compiles the target's.

Once the target's pass is compiled, an eager head pass costs a fifth of it or more, mostly in Python and
dispatch, and that cost is c in every speedup formula. So the head gets a package of its own: `HeadStep` is
its fc, decoder layers and reduced output layer over KV buffers given as inputs; `build_head` compiles it
(seconds to a minute); `attach_head` wraps a head in a `CompiledHead` where this machine has its package,
which `FeatureDrafter` then drafts with on buffers of its own (`HeadKV`). Every other drafter stays eager.
The package also returns each row's greedy token, so a greedy chain never leaves it for an argmax, and its
best tokens ranked, so a greedy tree's growth never leaves it to rank children.
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from transformers import StaticCache

from ..cache import cache_kwargs
from ..sampling import Ranked, ranked
from .aot import (BLOCK, COMPILED_ATTENTION, MAX_QUERY, MIN_BLOCKS, _compile, _dims, causal_mask,
                  load_package, package_path, room_for, switched_on)
from .kernels import attention_implementation
from .kv import Counter, kv_buffers, kv_shape

# the head packages' inputs, outputs and kernels (2: the greedy tokens; 3: `bf16_gemm`; 4: masks as wide as
# the positions in use, `aot.compiled_attention`; 5: each row's RANKED best tokens, and the tokens looked up
# inside); a change rebuilds
HEAD_FORMAT = "head-5"
# how many of each row's best tokens, with their log-probabilities, a head pass returns ready-ranked
# (`sampling.Ranked`): as many children as a greedy tree's growth gives a node, at most
RANKED = 8


def head_package_path(head) -> Path:
    """Where this machine's package for a feature head is, or would be, kept (`aot.package_path`, in the
    head's own format)."""
    return package_path(head, HEAD_FORMAT)


class HeadStep(nn.Module):
    """One cached pass of a `FeatureHead`'s fc and decoder layers, for torch.export:

        (tokens [1, q], table [V, d], features [1, q, d], positions [1, q], write [] long,
         mask [1, 1, q, write + q], k_0, v_0, ...)
        -> (the head's output features [q, d], their logits over its own vocabulary [q, K], each row's
            greedy token [q], a vocabulary id, and its RANKED best tokens [q, RANKED] with their
            log-probabilities [q, RANKED], best first: a `Ranked`)

    The embedding table comes in as an input (it is the target's: no second copy in the package), and the
    tokens are looked up inside (outside, the lookup cost 0.05 ms a pass right after the target's pass, on a
    2-core Intel Xeon); the reduced output layer (K = 8,192 rows) runs inside, and so does the greedy token:
    the first of the row's largest logits (as `sampling.argmax`), mapped to its id in the target's vocabulary
    (`keep_ids`). Outside, that is three more small operations per draft token (0.1 ms per token on a 2-core
    CPU, `scripts/loop_phases.py`); ranking a greedy tree's children outside takes five (`sampling.ranked`,
    as here). KV buffers as in `KVStep`.
    """

    def __init__(self, head):
        super().__init__()
        self.head = head
        config = head.body.config
        self.cache = StaticCache(config=config, max_cache_len=BLOCK)
        _, heads, _, head_dim = kv_shape(head.body, BLOCK)
        self.cache.early_initialization(1, heads, head_dim, head.fc.weight.dtype, head.fc.weight.device)

    def bind(self, kv, write) -> None:
        """The static cache's layers over the KV buffers given as inputs, writing from `write` on (each pass
        moves it on by its rows)."""
        for i, layer in enumerate(self.cache.layers):
            layer.keys, layer.values = kv[2 * i], kv[2 * i + 1]
            layer.max_cache_len = kv[2 * i].shape[2]
            layer.cumulative_length = write.clone()

    def run(self, tokens, table, features, positions, mask):  # [1, q] ... -> the head's output [1, q, d]
        """One pass over the bound buffers: fc over each token's embedding beside its feature, then the
        decoder layers (every program here is made of these: `HeadChain`, `aot_tree.HeadTree`)."""
        x = self.head.fc(torch.cat([F.embedding(tokens, table), features], dim=-1))  # [1, q, 2d] -> [1, q, d]
        return self.head.body(inputs_embeds=x, position_ids=positions, attention_mask=mask,
                              **cache_kwargs(self.head.body, self.cache), use_cache=True).last_hidden_state

    def forward(self, tokens, table, features, positions, write, mask, *kv):
        self.bind(kv, write)
        features = self.run(tokens, table, features, positions, mask)[0]  # [q, d]
        logits = self.head.head.reduced_logits(features)  # [q, K]
        keep = self.head.head.keep_ids
        best = ranked(logits, keep, min(RANKED, keep.shape[0]))  # [q, RANKED] twice
        return features, logits, keep[logits.argmax(-1)], best.tokens, best.logp


def pass_mask(start: int, q: int, dtype: torch.dtype, device=None,
              attention_mask: torch.Tensor | None = None) -> torch.Tensor:  # -> [1, 1, q, start + q]
    """The mask of a pass over q rows after `start` cached ones: causal, or a tree pass's own mask, which must
    be as wide (start + q positions: attention inside a package reads no further)."""
    if attention_mask is None:
        return causal_mask(start, q, dtype, device)
    if tuple(attention_mask.shape) != (1, 1, q, start + q):
        raise ValueError(f"a pass of {q} rows after {start} positions takes a mask [1, 1, {q}, {start + q}], "
                         f"got {tuple(attention_mask.shape)}")
    return attention_mask.to(dtype).contiguous()


def head_supported(head, *, for_build: bool = True) -> str | None:
    """Why this feature head cannot get a compiled pass here, in words; None when it can."""
    params = next(head.parameters(), None)
    if params is None or params.device.type != "cpu":
        return "compiled passes are built for CPU models"
    if not hasattr(head, "body") or not hasattr(head, "fc"):
        return f"{type(head).__name__} is not a FeatureHead (fc, then Llama decoder layers)"
    if getattr(head, "fuse_layers", ()):
        return ("a head that fuses several target layers reads wider features than its own guesses; "
                "it stays eager")
    if for_build and any(type(m).__name__ == "PrepackedLinear" for m in head.modules()):
        return "the head's linear layers are prepacked for oneDNN; build from the plain head (prepack=False)"
    return None


def head_example_inputs(head, q: int = 3, length: int = MIN_BLOCKS * BLOCK, start: int = 5,
                        rows: int | None = None, extra: tuple | None = None) -> tuple:
    """A head program's example inputs for export: tokens [1, q], table, features [1, q, d], positions
    [1, rows] (rows: q), write, then `extra` (a pass's causal mask unless given: a chain's or a tree's own
    inputs, `aot_chain`, `aot_tree`), then the KV buffers."""
    dtype, device = head.fc.weight.dtype, head.fc.weight.device
    rows = q if rows is None else rows
    extra = (causal_mask(start, q, dtype, device),) if extra is None else extra
    kv = kv_buffers(head.body, length, dtype, device, separate=True)
    return (torch.arange(q, device=device)[None], head.embed.weight,
            torch.randn(1, q, head.fc.out_features, dtype=dtype, device=device),
            torch.arange(start, start + rows, device=device)[None], torch.tensor(start, device=device),
            *extra, *kv)


def build_head(head, path: Path | None = None, *, options: dict | None = None, verbose: bool = True) -> Path:
    """`build` for a feature head's pass (`HeadStep`): seconds to a minute on a 2-core CPU."""
    problem = head_supported(head)
    if problem is not None:
        raise ValueError(f"cannot compile this head's pass: {problem}")
    inputs = head_example_inputs(head)
    q, length, end = _dims()
    shapes = ({1: q}, None, {1: q}, {1: q}, None, {2: q, 3: end},
              tuple({2: length} for _ in range(len(inputs) - 6)))
    with attention_implementation(head, COMPILED_ATTENTION):  # while exported and compiled
        return _compile(HeadStep(head).eval(), inputs, shapes, Path(path or head_package_path(head)), options,
                        "the feature head's pass" if verbose else "")


class HeadKV:
    """The compiled head's KV cache: buffers of a multiple of BLOCK positions (MIN_BLOCKS or more) and how
    many are in use. It answers the two calls `FeatureDrafter` makes of a DynamicCache: `get_seq_length()`
    and `crop(-n)`."""

    def __init__(self, head):
        self.head, self.length = head, 0
        self.kv = self._buffers(MIN_BLOCKS * BLOCK)
        self.counter = Counter(head.fc.weight.device)  # positions and write positions, as views

    def _buffers(self, length: int) -> list[torch.Tensor]:
        w = self.head.fc.weight
        return kv_buffers(self.head.body, length, w.dtype, w.device)

    @property
    def capacity(self) -> int:
        return self.kv[0].shape[2]

    def make_room(self, end: int) -> None:
        self.kv = room_for(self.kv, self.length, end, self._buffers, "the compiled head")

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, max_length: int) -> None:
        """DynamicCache's rule: keep the first max_length positions; a negative one drops that many."""
        self.length = max(0, self.length + max_length if max_length < 0 else min(self.length, max_length))


class LastPass(NamedTuple):
    """What a compiled head pass returned: its rows' features [q, d], reduced logits [q, K], greedy tokens
    [q] (vocabulary ids) and best tokens ranked (`sampling.Ranked`, [q, RANKED] twice)."""
    features: torch.Tensor
    logits: torch.Tensor
    tokens: torch.Tensor
    best: Ranked


class CompiledHead(nn.Module):
    """A FeatureHead whose decoder pass runs through its compiled package when given a `HeadKV` cache
    (`new_cache()`, which `FeatureDrafter` asks for); with any other cache, or none, the eager head runs.
    The package also returns the logits of the features it just made, and their greedy tokens: `logits`,
    `reduced_logits` and `greedy_tokens` of those rows (or of some of them, as views) come from there
    instead of another matrix product. Everything else (`fc`, `vocab_size`, ...) is the head's own, and any
    other features go through the head's own output layer."""

    def __init__(self, head, runner, path: Path):
        super().__init__()
        self.inner, self.path = head, path
        self.__dict__["runner"] = runner  # not a submodule
        self.__dict__["_last"] = None  # the latest pass's outputs (LastPass)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["_modules"]["inner"], name)

    def new_cache(self) -> HeadKV:
        return HeadKV(self.inner)

    def _span(self, f: torch.Tensor) -> slice | None:  # [..., d]
        """The rows of the latest pass that f is made of, if f is a view of whole rows of its features; else
        None."""
        if self._last is None:
            return None
        out = self._last.features
        d = out.shape[-1]
        if (f.shape[-1] != d or f.dtype != out.dtype or f.stride(-1) != 1 or f.numel() == 0
                or f.untyped_storage().data_ptr() != out.untyped_storage().data_ptr()):
            return None
        n, offset = f.numel() // d, f.storage_offset() - out.storage_offset()
        if offset % d or (f.dim() > 1 and f.stride(-2) != d) or not 0 <= offset // d <= out.shape[0] - n:
            return None
        return slice(offset // d, offset // d + n)

    def _rows(self, t: torch.Tensor, span: slice, features: torch.Tensor) -> torch.Tensor:  # [q, ...]
        """The span's rows of t (an output of the latest pass), shaped as features' leading dimensions: t
        itself in the usual case, every row of the pass asked for as [q, d] (each view costs microseconds)."""
        if span.start == 0 and span.stop == t.shape[0] and features.dim() == 2:
            return t
        return t[span].reshape(features.shape[:-1] + t.shape[1:])

    def logits(self, features: torch.Tensor) -> torch.Tensor:  # [..., d] -> [..., V]
        span = self._span(features)
        if span is None:
            return self.inner.logits(features)
        rows = self._rows(self._last.logits, span, features)
        full = features.new_full((*features.shape[:-1], self.inner.head.weight.shape[0]), float("-inf"))
        return full.index_copy_(-1, self.inner.head.keep_ids, rows.to(full.dtype))

    def reduced_logits(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        span = self._span(features)
        if span is None:
            return self.inner.reduced_logits(features)
        return self._rows(self._last.logits, span, features), self.inner.head.keep_ids

    def greedy_tokens(self, features: torch.Tensor) -> torch.Tensor:  # [..., d] -> [...]
        span = self._span(features)
        if span is None:
            return self.inner.greedy_tokens(features)
        return self._rows(self._last.tokens, span, features)

    def ranked(self, features: torch.Tensor, w: int) -> Ranked:  # [..., d] -> [..., w] twice
        span = self._span(features)
        if span is None or w > self._last.best.tokens.shape[-1]:
            return self.inner.ranked(features, w)
        best = self._last.best
        logp, tokens = self._rows(best.logp, span, features), self._rows(best.tokens, span, features)
        return Ranked(logp, tokens) if w == logp.shape[-1] else Ranked(logp[..., :w], tokens[..., :w])

    def forward(self, hidden: torch.Tensor, next_tokens: torch.Tensor, cache=None, *,
                position_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:  # [1, k, d], [1, k] -> [1, k, d]
        if not isinstance(cache, HeadKV):
            return self.inner(hidden, next_tokens, cache, position_ids=position_ids,
                              attention_mask=attention_mask)
        q = next_tokens.shape[1]
        if q == 0 or hidden.shape[:2] != next_tokens.shape:  # 0 rows: the package divides by zero (SIGFPE)
            raise ValueError(f"a compiled head's pass takes as many features as tokens, at least one row; "
                             f"got features {tuple(hidden.shape)} and tokens {tuple(next_tokens.shape)}")
        if hidden.shape[0] != 1 or (q > MAX_QUERY and position_ids is not None):
            raise ValueError(f"a compiled head's pass takes one sequence, and at most {MAX_QUERY} rows in a "
                             "tree pass; SPECDEC_AOT=0 runs the eager head")
        if q > MAX_QUERY:  # a long prompt: causal pieces
            return torch.cat([self(hidden[:, i:i + MAX_QUERY], next_tokens[:, i:i + MAX_QUERY], cache)
                              for i in range(0, q, MAX_QUERY)], dim=1)
        start, dtype = cache.length, self.inner.fc.weight.dtype
        cache.make_room(start + q)
        positions = cache.counter.positions(start, q) if position_ids is None else position_ids
        mask = pass_mask(start, q, dtype, hidden.device, None if position_ids is None else attention_mask)
        out, logits, tokens, best, logp = self.runner(next_tokens, self.inner.embed.weight, hidden.to(dtype),
                                                      positions, cache.counter.scalar(start), mask, *cache.kv)
        self.__dict__["_last"] = LastPass(out, logits, tokens, Ranked(logp, best))
        cache.length = start + q
        return out[None]  # [1, q, d]


class HeadPackages:
    """This machine's packages of one kind for a feature head, by key (`KEYS`: those `python -m specdec_ref
    compile` builds), each loaded on first use: `CompiledChains` (by γ), `aot_tree.CompiledTrees` (by depth
    and width)."""
    KEYS: tuple = ()

    def __init__(self, head):
        self.head, self.runners = head, {}

    def path(self, key) -> Path:  # where the package for key is, or would be
        raise NotImplementedError

    def runner(self, key):
        if key not in self.runners:
            path = self.path(key)
            self.runners[key] = load_package(path) if path.exists() else None
        return self.runners[key]

    def built(self) -> list:
        """The keys this machine has a package for."""
        return [k for k in self.KEYS if self.runners.get(k) or self.path(k).exists()]

    def wrap(self, wrapper) -> None:
        """Every built package's runner replaced by wrapper(runner): the scripts that time the packages' calls
        (`lab.timing.InsideClock.wrap`)."""
        for k in self.built():
            self.runners[k] = wrapper(self.runner(k))


def attach_head(head, *, enabled: bool | None = None):
    """This machine's package for a feature head, if it has one: a `CompiledHead` to draft with; else the head
    itself (no package, SPECDEC_AOT=0, or a head it cannot serve)."""
    enabled = switched_on() if enabled is None else enabled
    if not enabled or head_supported(head, for_build=False) is not None:
        return head
    path = head_package_path(head)
    if not path.exists():
        return head
    return CompiledHead(head, load_package(path), path)
