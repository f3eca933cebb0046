"""A causal LM together with its KV cache: feed it only the tokens it has not seen, crop it on rejection."""
from __future__ import annotations

import functools
import inspect

import torch
from transformers import DynamicCache, StaticCache


@functools.cache
def _cache_keyword(model_class: type) -> str:
    """The keyword forward() takes the KV cache by: `cache` in newer transformers 5 releases (5.24 here),
    `past_key_values` in older ones (5.17 on one GPU image), which silently ignore a `cache=` keyword."""
    params = inspect.signature(model_class.forward).parameters
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    raise ValueError(f"{model_class.__name__}.forward takes neither `cache` nor `past_key_values`: "
                     "it cannot be given a KV cache")


@functools.cache
def _takes_logits_to_keep(model_class: type) -> bool:
    return "logits_to_keep" in inspect.signature(model_class.forward).parameters


def cache_kwargs(model, cache: DynamicCache | None) -> dict:
    """{keyword: cache} for model's forward, whichever transformers 5 release is installed."""
    return {_cache_keyword(type(model)): cache}


def check_cache_length(cache: DynamicCache, expected: int) -> None:
    """A forward pass must leave `expected` tokens in the cache; anything else means it never saw it."""
    if cache.get_seq_length() != expected:
        raise RuntimeError(f"the KV cache holds {cache.get_seq_length()} tokens after the forward pass, expected "
                           f"{expected}: the model did not use the cache it was given (a transformers release "
                           "that names the keyword differently?)")


def vocab_size(model) -> int:
    """The number of logits a model emits per position (what draft and target must agree on)."""
    return model.get_output_embeddings().weight.shape[0] if hasattr(model, "get_output_embeddings") \
        and model.get_output_embeddings() is not None else model.config.vocab_size


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:  # [..., q, k] bool -> [..., q, k]
    """The attention mask a model adds to its scores: 0 where a query may look, the dtype's lowest value elsewhere."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, torch.finfo(dtype).min)


def layer_features(hidden_states: tuple[torch.Tensor, ...], layers: tuple[int, ...]) -> torch.Tensor:
    """The body's hidden_states at these indices, side by side: ([B, T, d], ...) -> [B, T, len(layers) d].

    Index 0 is the embedding output, i the output of layer i, and -1 the final, normalised features
    (what the LM head reads).
    """
    return torch.cat([hidden_states[i] for i in layers], dim=-1)


class CachedModel:
    """A causal LM plus its KV cache, fed only the tokens it has not seen yet.

    With keep_hidden=True it also keeps the final hidden state of every cached token (the vector the
    LM head turns into logits), for drafters that draft from the target's features (EAGLE). It then runs the
    model's body and its LM head as two calls, so that only the last layer's states are kept, in a buffer
    that grows by doubling (no copy of the whole history per step). keep_hidden=(2, 15, -1) keeps those
    entries of the body's hidden_states side by side instead (`layer_features`; EAGLE-3's fused layers).
    """

    def __init__(self, model, keep_hidden: bool | tuple[int, ...] = False, name: str = "model"):
        self.model, self.name = model, name  # name: how error messages call it ("target", "draft")
        self.cache = DynamicCache()
        self.n_cached = 0  # how many context tokens the cache holds
        self.calls = 0  # forward passes so far
        self.keep_hidden = keep_hidden
        self._hidden: torch.Tensor | None = None  # [capacity, d] buffer of final hidden states (keep_hidden)
        self.forward, self.body = model, model.base_model  # the whole model; its body without the LM head
        self.dtype = next(model.parameters()).dtype
        self._finite: torch.Tensor | None = None  # [] bool on the device: every logit so far was finite
        self._first_bad: int | None = None  # context length of the first check that failed

    def note_finite(self, logits: torch.Tensor) -> None:  # [k, V]
        """Remember whether these logits are all finite; check at once on a CPU, every 16 passes elsewhere.

        On a GPU a check is a host sync, which a per-token check would add to every step; checking every 16th
        pass, and at the loop's end (`check_finite`), bounds how far a NaN can run before it is refused.
        """
        ok = torch.isfinite(logits).all()
        self._finite = ok if self._finite is None else self._finite & ok
        if logits.device.type == "cpu" or self.calls % 16 == 0:
            self.check_finite()

    def check_finite(self) -> None:
        """Refuse NaN or inf logits with the likely cause and the fix, instead of sampling garbage from them."""
        if self._finite is not None and not bool(self._finite):
            raise ValueError(f"the {self.name}'s logits contain NaN or inf (by context length {self.n_cached}); "
                             f"a float16 overflow? the {self.name} runs in {self.dtype}: load it with "
                             "dtype=torch.bfloat16 (GPUs of compute capability 8.0 or later) or torch.float32")

    def prepare(self, new: torch.Tensor, kw: dict) -> dict:  # the forward's keyword arguments, as given
        return kw

    @property
    def hidden(self) -> torch.Tensor | None:  # -> [n_cached, d] final hidden states ([n_cached, n d] for n layers)
        return self._hidden[:self.n_cached] if self._hidden is not None else None

    def logits(self, context_ids: torch.Tensor, keep: int | None = None, *, position_ids: torch.Tensor | None = None,
               attention_mask: torch.Tensor | None = None) -> torch.Tensor:  # [T] -> [k, V]
        """Run the model on context_ids[n_cached:], extending the cache; return the logits of the last `keep`
        of them (all of them if None: k = T - n_cached). The LM head runs on those rows only.

        position_ids [k] and a 4D additive attention_mask [1, 1, k, T] are for tree passes (tree.py); by
        default the new tokens sit causally after the cached ones.
        """
        new = context_ids[self.n_cached:]
        kw = cache_kwargs(self.model, self.cache)
        if position_ids is not None:
            kw.update(position_ids=position_ids[None], attention_mask=attention_mask)
        kw = self.prepare(new, kw)
        if self.keep_hidden:
            layers = self.keep_hidden if isinstance(self.keep_hidden, tuple) else ()
            out = self.body(input_ids=new[None], **kw, use_cache=True, output_hidden_states=bool(layers))
            h = out.last_hidden_state[0]  # [k, d]
            self._store_hidden(layer_features(out.hidden_states, layers)[0] if layers else h)  # [k, d] or [k, n d]
            logits = self.model.get_output_embeddings()(h if keep is None else h[-keep:])  # [keep, V]
        elif keep is not None and _takes_logits_to_keep(type(self.model)):
            logits = self.forward(input_ids=new[None], **kw, use_cache=True, logits_to_keep=keep).logits[0]
        else:
            logits = self.forward(input_ids=new[None], **kw, use_cache=True).logits[0]  # [1, k, V] -> [k, V]
        check_cache_length(self.cache, context_ids.shape[0])
        self.n_cached = context_ids.shape[0]
        self.calls += 1
        logits = logits if keep is None else logits[-keep:]
        self.note_finite(logits)
        return logits

    def _store_hidden(self, h: torch.Tensor) -> None:  # [k, d] appended after the first n_cached rows
        end = self.n_cached + h.shape[0]
        if self._hidden is None or self._hidden.shape[0] < end:
            grown = h.new_empty(max(2 * end, 64), h.shape[1])  # [capacity, d]
            if self._hidden is not None:
                grown[:self.n_cached] = self._hidden[:self.n_cached]
            self._hidden = grown
        self._hidden[self.n_cached:end] = h

    def keep_rows(self, n_prefix: int, rows: list[int]) -> None:
        """Keep cache rows [0, n_prefix) and then `rows` (ascending, each >= n_prefix), drop the others: after a
        tree pass, the context plus the accepted path. Only the path's rows move; rows already in place stay."""
        n = n_prefix + len(rows)
        if rows != list(range(n_prefix, n)):
            src = torch.tensor(rows, dtype=torch.long, device=self.cache.layers[0].keys.device)  # [len(rows)]
            for layer in self.cache.layers:  # [B, heads, n_cached, d_head]: rows src -> n_prefix.., in place
                layer.keys[:, :, n_prefix:n] = layer.keys.index_select(-2, src)
                layer.values[:, :, n_prefix:n] = layer.values.index_select(-2, src)
            if self._hidden is not None:
                self._hidden[n_prefix:n] = self._hidden[src]
        self.rollback(n)

    def rollback(self, n_tokens: int) -> None:
        """Crop the cache to its first n_tokens (transformers 5: crop takes minus the number to drop)."""
        if n_tokens == 0:
            self.cache, self.n_cached, self._hidden, self._finite = DynamicCache(), 0, None, None
        elif n_tokens < self.n_cached:
            self.cache.crop(-(self.n_cached - n_tokens))
            self.n_cached = n_tokens


class StaticCachedModel(CachedModel):
    """A CachedModel whose keys and values live in buffers allocated once (transformers' StaticCache), gpt-fast style.

    Rolling back only moves the write position: entries past it stay in memory but are masked out, and the next
    forward pass overwrites them. Every pass has explicit positions, and a pass of q new tokens always has the
    same shapes, so with compile=True (CUDA only) each step kind (1 token, γ + 1 tokens, |𝒯| + 1 tree rows) is
    compiled once into a CUDA graph by `torch.compile(mode="reduce-overhead")`. The prefill runs eagerly.
    """

    def __init__(self, model, max_len: int, keep_hidden: bool | tuple[int, ...] = False, compile: bool = False,
                 name: str = "model"):
        super().__init__(model, keep_hidden, name)
        if compile and next(model.parameters()).device.type != "cuda":
            raise ValueError("cache='compiled' captures CUDA graphs and needs a CUDA model; use cache='static' here")
        self.max_len = max_len
        self.cache = StaticCache(config=model.config, max_cache_len=max_len)
        if compile:
            self.compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)
            self.compiled_body = torch.compile(model.base_model, mode="reduce-overhead", dynamic=False)
        self.compile = compile

    def prepare(self, new: torch.Tensor, kw: dict) -> dict:
        """Explicit positions, the write position at n_cached, and a mask as wide as the buffers."""
        if self.n_cached + new.shape[0] > self.max_len:
            raise ValueError(f"the static KV cache holds {self.max_len} tokens; this pass needs "
                             f"{self.n_cached + new.shape[0]}: allocate a longer one")
        for layer in self.cache.layers:
            if layer.is_initialized:
                layer.cumulative_length.fill_(self.n_cached)  # where this pass writes its keys and values
        if "position_ids" not in kw:
            kw["position_ids"] = torch.arange(self.n_cached, self.n_cached + new.shape[0], device=new.device)[None]
        mask = kw.get("attention_mask")
        if mask is not None and mask.shape[-1] < self.max_len:  # a tree mask over the filled part: pad with "never"
            never = torch.zeros(*mask.shape[:-1], self.max_len - mask.shape[-1], dtype=torch.bool, device=mask.device)
            kw["attention_mask"] = torch.cat([mask, additive_mask(never, mask.dtype)], dim=-1)
        first = self.n_cached == 0  # the prefill's length varies from prompt to prompt: keep it eager
        self.forward = self.compiled if self.compile and not first else self.model
        self.body = self.compiled_body if self.compile and not first else self.model.base_model
        return kw

    def rollback(self, n_tokens: int) -> None:
        """Forget everything after the first n_tokens: move the write position back (nothing is freed)."""
        self.n_cached = min(self.n_cached, n_tokens)
        if n_tokens == 0:
            self._finite = None


def cached_model(model, *, keep_hidden: bool | tuple[int, ...] = False, cache: str = "dynamic",
                 max_len: int | None = None, name: str = "model") -> CachedModel:
    """The one switch: cache="dynamic" (grows as needed, cropped on rollback), "static" (preallocated for max_len
    tokens, rollback moves the write position) or "compiled" (static, plus CUDA graphs on a GPU)."""
    if cache == "dynamic":
        return CachedModel(model, keep_hidden, name)
    if cache in ("static", "compiled"):
        if max_len is None:
            raise ValueError("a static KV cache needs max_len, the most tokens it will ever hold")
        return StaticCachedModel(model, max_len, keep_hidden, compile=cache == "compiled", name=name)
    raise ValueError(f"cache must be 'dynamic', 'static' or 'compiled', got {cache!r}")
