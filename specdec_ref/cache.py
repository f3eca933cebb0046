"""A causal LM together with its KV cache: feed it only the tokens it has not seen, crop it on rejection."""
from __future__ import annotations

import functools
import inspect
import math
import os
from collections.abc import Sequence

import torch
import torch.nn.functional as F
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
        raise RuntimeError(f"the KV cache holds {cache.get_seq_length()} tokens after the forward pass, "
                           f"expected {expected}: the model did not use the cache it was given (a "
                           "transformers release that names the keyword differently?)")


def vocab_size(model) -> int:
    """The number of logits a model emits per position (what draft and target must agree on)."""
    return model.get_output_embeddings().weight.shape[0] if hasattr(model, "get_output_embeddings") \
        and model.get_output_embeddings() is not None else model.config.vocab_size


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:  # [..., q, k] bool -> same
    """The attention mask a model adds to its scores: 0 where a query may look, the dtype's lowest value
    elsewhere."""
    lowest = torch.finfo(dtype).min
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, lowest)


def layer_features(hidden_states: tuple[torch.Tensor, ...], layers: tuple[int, ...]) -> torch.Tensor:
    """The body's hidden_states at these indices, side by side: ([B, T, d], ...) -> [B, T, len(layers) d].

    Index 0 is the embedding output, i the output of layer i, and -1 the final, normalised features
    (what the LM head reads).
    """
    return torch.cat([hidden_states[i] for i in layers], dim=-1)


# CachedModel.prepare: does one new row on a CPU get a mask? "auto": in bfloat16 only; "1": always; "0": never
ROW_MASK = os.environ.get("SPECDEC_ROW_MASK", "auto")


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
        self.dtype, self.device = next(model.parameters()).dtype, next(model.parameters()).device
        self.head_on_kept_rows = True  # the LM head runs on the `keep` rows only (logits_to_keep)
        # [] float32 sum of every logit so far (on a CPU, of the latest pass, a float): NaN or +inf if one was
        self._finite: torch.Tensor | float | None = None

    def note_finite(self, logits: torch.Tensor, sums: torch.Tensor | None = None) -> None:  # [k, V], [k]
        """Remember whether these logits are all finite; check at once on a CPU, every 16 passes elsewhere.

        -inf is a legitimate logit (probability 0: a reduced draft head gives it to the tokens it never
        proposes); NaN and +inf are not. A float32 sum is NaN or +inf as soon as one term is (sums of logits
        cannot overflow), and costs one vectorised pass: ~20 times less than `isfinite(logits).all()` on a
        CPU. On a GPU a check is a host sync, which a per-token check would add to every step; checking every
        16th pass, and at the loop's end (`check_finite`), bounds how far a NaN can run before it is refused.
        A pass may bring its rows' sums (a compiled pass computes them inside).
        """
        if logits.device.type == "cpu":  # checked now, so only this pass's total is kept (a Python float)
            self._finite = (float(logits.detach().sum(dtype=torch.float32)) if sums is None
                            else sum(sums.tolist()))  # NaN and inf carry through a sum of floats too
            self.check_finite()
            return
        total = logits.detach().sum(dtype=torch.float32) if sums is None else sums.sum()
        self._finite = total if self._finite is None else self._finite + total
        if self.calls % 16 == 0:
            self.check_finite()

    def pass_argmax(self, logits: torch.Tensor) -> torch.Tensor | None:  # [k, V] -> [k] or None
        """Each row's argmax if the pass that returned these logits computed it already (a compiled pass does,
        `models.aot`), else None: the caller takes `sampling.argmax`."""
        return None

    def packaged_sampling(self):
        """The compiled draw and chain verdict for this model's logits (`models.aot_verdict.SampledPackages`:
        `draw`, `judge`) where this machine built them, else None: the loops then run the Python rules."""
        return self.model.__dict__.get(SAMPLED_PACKAGES)

    def check_finite(self) -> None:
        """Refuse NaN or inf logits with the likely cause and the fix, instead of sampling garbage from
        them."""
        total = float(self._finite) if self._finite is not None else 0.0
        if math.isnan(total) or total == math.inf:
            raise ValueError(f"the {self.name}'s logits contain NaN or inf "
                             f"(by context length {self.n_cached}); "
                             f"a float16 overflow? the {self.name} runs in {self.dtype}: load it with "
                             "dtype=torch.bfloat16 (GPUs of compute capability 8.0 or later) "
                             "or torch.float32")

    def prepare(self, new: torch.Tensor, kw: dict) -> tuple[torch.Tensor, dict]:  # [q] -> [q]
        """The pass's input ids and keyword arguments (a static cache adds positions, may pad the query).

        One new bfloat16 token on a CPU gets its position and an explicit mask (it sees the whole cache):
        PyTorch's CPU flash-attention kernel takes more than twice as long for one bfloat16 query row without
        a mask as with one (54 against 20 µs per layer, SmolLM2-135M after 100 tokens, 2 cores of an AMD
        EPYC Zen 5, `scripts/row_mask.py`), which made plain decoding 4-6% slower there; in float32 the mask
        made attention slower (17 against 23 µs) and decoding no faster. SPECDEC_ROW_MASK=1 or 0 decides.
        """
        wanted = ROW_MASK == "1" or (ROW_MASK == "auto" and self.dtype == torch.bfloat16)
        if new.shape[0] == 1 and "attention_mask" not in kw and self.device.type == "cpu" and wanted:
            n = self.n_cached
            kw.update(position_ids=torch.tensor([[n]], device=new.device),
                      attention_mask=torch.zeros(1, 1, 1, n + 1, dtype=self.dtype, device=new.device))
        return new, kw

    @property
    def hidden(self) -> torch.Tensor | None:  # -> [n_cached, d] final hidden states (of n layers: [.., n d])
        return self._hidden[:self.n_cached] if self._hidden is not None else None

    def logits(self, context_ids: torch.Tensor, keep: int | None = None, *,
               position_ids: torch.Tensor | None = None,
               attention_mask: torch.Tensor | None = None) -> torch.Tensor:  # [T] -> [k, V]
        """Run the model on context_ids[n_cached:], extending the cache; return the logits of the last `keep`
        of them (all of them if None: k = T - n_cached). The LM head runs on those rows only (in a compiled
        pass, on every row: `head_on_kept_rows`).

        position_ids [k] and a 4D additive attention_mask [1, 1, k, T] are for tree passes (tree.py); by
        default the new tokens sit causally after the cached ones. A mask narrower than T is its last
        columns, every position before them seen (a tree's mask among its rows, `tree_attention_mask`).
        """
        new = context_ids[self.n_cached:]
        if attention_mask is not None and attention_mask.shape[-1] < context_ids.shape[0]:
            attention_mask = F.pad(attention_mask, (context_ids.shape[0] - attention_mask.shape[-1], 0))
        kw = cache_kwargs(self.model, self.cache)
        if position_ids is not None:
            kw.update(position_ids=position_ids[None], attention_mask=attention_mask)
        ids, kw = self.prepare(new, kw)  # [q] -> [q'], the real rows first (padded: q' > q, compiled only)
        q = new.shape[0]
        if self.keep_hidden:
            layers = self.keep_hidden if isinstance(self.keep_hidden, tuple) else ()
            out = self.body(input_ids=ids[None], **kw, use_cache=True, output_hidden_states=bool(layers))
            h = out.last_hidden_state[0, :q]  # [q, d]
            self._store_hidden(layer_features(out.hidden_states, layers)[0, :q] if layers else h)  # [q, n d]
            logits = self.model.get_output_embeddings()(h if keep is None else h[-keep:])  # [keep, V]
        elif keep is not None and self.head_on_kept_rows and _takes_logits_to_keep(type(self.model)):
            logits = self.forward(input_ids=ids[None], **kw, use_cache=True, logits_to_keep=keep).logits[0]
        else:  # [1, q', V] -> [q, V], copied: a CUDA graph's next replay reuses its output's memory
            logits = self.forward(input_ids=ids[None], **kw, use_cache=True).logits[0, :q].clone()
        check_cache_length(self.cache, context_ids.shape[0] + ids.shape[0] - q)  # padding rows written too
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
        """Keep cache rows [0, n_prefix) and then `rows` (ascending, each >= n_prefix), drop the others:
        after a tree pass, the context plus the accepted path. Only the path's rows move; the others stay."""
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


BUCKET = 256  # static buffers hold a multiple of this many tokens: many lengths share one set of them
COMPILE_OPTIONS = dict(mode="reduce-overhead")  # torch.compile's options for cache="compiled": CUDA graphs
STATIC_CACHES = "_specdec_static_caches"  # the model attribute that keeps its static caches (`_static_model`)
COMPILED_PASS = "_specdec_compiled"  # the model attribute that holds its compiled pass (`models.aot.attach`)
# ... and its compiled sampled draw and chain verdict (`models.aot_verdict.attach`)
SAMPLED_PACKAGES = "_specdec_sampled"
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # torch.compile modes that capture CUDA graphs


def compiled_pass(model):
    """The compiled pass `models.aot.attach` gave this model (the loops run it through that), or None."""
    return model.__dict__.get(COMPILED_PASS)


def bucket(n_tokens: int) -> int:
    """n_tokens rounded up to a multiple of BUCKET: the length of the static buffers that hold them."""
    return max(1, -(-n_tokens // BUCKET)) * BUCKET


class StaticCachedModel(CachedModel):
    """A CachedModel whose keys and values live in buffers allocated once (transformers' StaticCache),
    gpt-fast style.

    Rolling back only moves the write position: entries past it stay in memory but are masked out, and the
    next forward pass overwrites them. Every pass has explicit positions, a mask as wide as the buffers, and
    the write position in a tensor, so a pass of q new tokens always has the same shapes. With compile=True,
    every pass after the prefill runs `torch.compile(model, dynamic=False, **compile_options)` (by default
    COMPILE_OPTIONS: CUDA graphs, CUDA only): one graph per step kind (causal or tree-masked) and query
    length. A pass shorter than one of `query_sizes` is padded up to the smallest such size (`pad_query`), so
    a chain near the end of an answer, or a dynamic tree with fewer nodes than its budget, reuses the full
    step's graph. The prefill runs eagerly (its length varies from prompt to prompt). `cached_model` keeps
    one per model and bucket, so that buffers and graphs survive from one generation to the next.
    """

    def __init__(self, model, max_len: int, keep_hidden: bool | tuple[int, ...] = False,
                 compile: bool = False, name: str = "model", compile_options: dict | None = None,
                 query_sizes: Sequence[int] = ()):
        super().__init__(model, keep_hidden, name)
        options = dict(COMPILE_OPTIONS if compile_options is None else compile_options)
        if compile and options.get("mode") in CUDA_GRAPH_MODES and self.device.type != "cuda":
            raise ValueError(f"cache='compiled' captures CUDA graphs (mode={options['mode']!r}) and needs a "
                             "CUDA model; use cache='static' here, or give compile_options with a backend "
                             "that runs on this device: dict(backend='eager', fullgraph=True) for a test")
        self.max_len, self.compile = max_len, compile
        self.query_sizes = tuple(sorted(query_sizes))  # fixed query lengths a compiled pass is padded up to
        self.cache = StaticCache(config=model.config, max_cache_len=max_len)
        self.graph_shapes: set[tuple[bool, int]] = set()  # (tree-masked?, query length) of compiled passes
        if compile:  # past recompile_limit graphs per function, Dynamo silently runs the function eagerly
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
            self.compiled = torch.compile(model, **{"dynamic": False, **options})
            self.compiled_body = torch.compile(model.base_model, **{"dynamic": False, **options})

    def reset(self, name: str, query_sizes: Sequence[int]) -> StaticCachedModel:
        """Start a new generation on the same buffers: write position back to 0, counters cleared."""
        self.rollback(0)
        self.name, self.calls, self.query_sizes = name, 0, tuple(sorted(query_sizes))
        return self

    def prepare(self, new: torch.Tensor, kw: dict) -> tuple[torch.Tensor, dict]:  # [q] -> [q'], q' >= q
        """Explicit positions, the write position at n_cached, a mask as wide as the buffers; in a compiled
        pass, the query padded to a fixed size."""
        compiled = self.compile and self.n_cached > 0  # the prefill's length varies: it stays eager
        if "position_ids" not in kw:
            kw["position_ids"] = torch.arange(self.n_cached, self.n_cached + new.shape[0],
                                              device=new.device)[None]  # [1, q]
        if compiled:
            new, kw = self.pad_query(new, kw)
        if self.n_cached + new.shape[0] > self.max_len:
            raise ValueError(f"the static KV cache holds {self.max_len} tokens; this pass needs "
                             f"{self.n_cached + new.shape[0]}: allocate a longer one")
        for layer in self.cache.layers:
            if layer.is_initialized:
                layer.cumulative_length.fill_(self.n_cached)  # where this pass writes its keys and values
        mask = kw.get("attention_mask")  # [1, 1, q', k]
        if mask is not None and mask.shape[-1] < self.max_len:  # a tree mask over the filled part:
            never = torch.zeros(*mask.shape[:-1], self.max_len - mask.shape[-1], dtype=torch.bool,
                                device=mask.device)  # pad it with "never" to [1, 1, q', max_len]
            kw["attention_mask"] = torch.cat([mask, additive_mask(never, mask.dtype)], dim=-1)
        if compiled:
            self.graph_shapes.add((mask is not None, new.shape[0]))
        self.forward = self.compiled if compiled else self.model
        self.body = self.compiled_body if compiled else self.model.base_model
        self.head_on_kept_rows = not compiled  # a graph would bake in how many rows the head runs on
        return new, kw

    def pad_query(self, new: torch.Tensor, kw: dict) -> tuple[torch.Tensor, dict]:  # [q] -> [q']
        """Pad q new tokens with copies of the last to the smallest of query_sizes >= q (if none: leave them).

        The padding rows come after the real ones and are written after them in the cache, past the write
        position once the pass is over: a real row never sees them (causal, or "never" in a tree mask), and
        the next pass overwrites them. In a tree pass a padding row sees the first token only.
        """
        q = new.shape[0]
        pad = min((s for s in self.query_sizes if s >= q), default=q) - q
        if pad == 0:
            return new, kw
        position = kw["position_ids"]  # [1, q]
        mask = kw.get("attention_mask")  # [1, 1, q, k] or None (causal)
        if mask is None:  # causal: the padding continues the sequence
            more = torch.arange(1, pad + 1, device=new.device)[None] + position[:, -1:]  # [1, pad]
        else:
            more = position[:, -1:].expand(1, pad)  # [1, pad]
            allowed = torch.zeros(pad, mask.shape[-1], dtype=torch.bool, device=mask.device)  # [pad, k]
            allowed[:, 0] = True
            rows = additive_mask(allowed, mask.dtype)[None, None]  # [1, 1, pad, k]
            kw["attention_mask"] = torch.cat([mask, rows], dim=-2)  # [1, 1, q + pad, k]
        kw["position_ids"] = torch.cat([position, more], dim=-1)  # [1, q + pad]
        return torch.cat([new, new[-1:].expand(pad)]), kw  # [q + pad]

    def rollback(self, n_tokens: int) -> None:
        """Forget everything after the first n_tokens: move the write position back (nothing is freed)."""
        self.n_cached = min(self.n_cached, n_tokens)
        if n_tokens == 0:
            self._finite = None


def _static_model(model, max_len: int, keep_hidden: bool | tuple[int, ...], compile: bool, name: str,
                  compile_options: dict | None, query_sizes: Sequence[int]) -> StaticCachedModel:
    """The StaticCachedModel for this model, bucket(max_len), keep_hidden, name and compile options,
    made on first use and reset on every later one.

    They are kept on the model itself (an attribute), so they live as long as the model does. The name is
    part of the key, so that a model used as both target and draft gets two sets of buffers.
    """
    options = dict(COMPILE_OPTIONS if compile_options is None else compile_options) if compile else {}
    key = (bucket(max_len), keep_hidden, compile, name, repr(sorted(options.items())),
           next(model.parameters()).dtype, next(model.parameters()).device)
    kept = model.__dict__.setdefault(STATIC_CACHES, {})
    if key not in kept:
        kept[key] = StaticCachedModel(model, key[0], keep_hidden, compile, name, options, query_sizes)
    return kept[key].reset(name, query_sizes)


def cached_model(model, *, keep_hidden: bool | tuple[int, ...] = False, cache: str = "dynamic",
                 max_len: int | None = None, name: str = "model", compile_options: dict | None = None,
                 query_sizes: Sequence[int] = ()) -> CachedModel:
    """The one switch: cache="auto" (the model's AOTInductor-compiled pass where this machine has built one,
    `models.aot`; else dynamic), "dynamic" (grows as needed, cropped on rollback), "static" (preallocated for
    max_len tokens, rounded up to a multiple of BUCKET; rollback moves the write position) or "compiled"
    (static, plus `torch.compile` with compile_options; by default COMPILE_OPTIONS, CUDA graphs on a GPU).

    A static cache comes from a registry: the same model, bucket, keep_hidden, name and compile options get
    the same buffers (their data_ptr never changes) and the same compiled functions, write position reset.
    query_sizes: the fixed query lengths of the compiled steps (γ + 1 for a chain's target, n_nodes + 1 for
    a tree's), to which shorter passes are padded (`StaticCachedModel.pad_query`).
    """
    if cache == "auto":  # the model's compiled pass if it has one (models.aot.attach), else a dynamic cache
        compiled = compiled_pass(model)
        if compiled is not None and not isinstance(keep_hidden, tuple):
            return compiled.lm(keep_hidden, name)
        cache = "dynamic"
    if cache == "dynamic":
        return CachedModel(model, keep_hidden, name)
    if cache in ("static", "compiled"):
        if max_len is None:
            raise ValueError("a static KV cache needs max_len, the most tokens it will ever hold")
        return _static_model(model, max_len, keep_hidden, cache == "compiled", name, compile_options,
                             query_sizes)
    raise ValueError(f"cache must be 'auto', 'dynamic', 'static' or 'compiled', got {cache!r}")


@torch.inference_mode()
def warm_up(lm: CachedModel, causal: Sequence[int] = (), masked: Sequence[int] = ()) -> int:
    """Run one pass of every step shape on dummy tokens, so that its graph compiles here, outside the timing.

    causal: query lengths of causal passes (1 for plain decoding; γ + 1 for a chain's target; 1 and 2 for a
    ModelDrafter's chain, 1 to depth + 1 for its tree's root); masked: those of tree passes (n_nodes + 1 for
    the target; topk, or the nodes with children at each depth of a static tree, for a ModelDrafter). Give
    it the lm that `cached_model` returns for the generation's arguments (same bucket, keep_hidden and name):
    the registry hands the generation the same buffers and graphs. Does nothing to an eager cache. Leaves
    the cache empty; returns the number of passes run.
    """
    shapes = [(q, False) for q in causal] + [(q, True) for q in masked]
    if not (isinstance(lm, StaticCachedModel) and lm.compile and shapes):
        return 0
    ids = torch.zeros(1 + max(q for q, _ in shapes), dtype=torch.long, device=lm.device)  # token 0 only
    for q, tree in shapes:
        lm.rollback(0)
        lm.logits(ids[:1])  # the prefill (eager): one token
        kw = {}
        if tree:  # a causal tree mask, as a tree pass gives one: [1, 1, q, 1 + q]
            allowed = torch.ones(q, 1 + q, dtype=torch.bool, device=lm.device).tril(1)
            kw = dict(position_ids=torch.arange(1, 1 + q, device=lm.device),
                      attention_mask=additive_mask(allowed, lm.dtype)[None, None])
        lm.logits(ids[:1 + q], **kw)
    lm.rollback(0)
    lm.calls = 0
    return len(shapes)
