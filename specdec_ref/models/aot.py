"""The target's cached pass compiled ahead of time by Inductor (AOTInductor): built once per machine, loaded
in a second afterwards.

Eager PyTorch on a CPU hands each linear layer to oneDNN, whose kernel for a few rows streams the weights at
about half of what two cores can (`scripts/kernel_probe.py`). Inductor's C++ micro-GEMM, with the weights
frozen into the program and autotuned per layer, streams them faster and scores 2-4 rows for the price of one
(on CPUs with AVX512-BF16, up to 6 or so: its bfloat16 products then use the dot-product instruction,
`bf16_gemm`). But a `torch.compile` of that kind takes minutes every time a process starts (frozen weights
bypass Inductor's disk cache). So the pass is compiled once, ahead of time, into a package on disk:

* `KVStep` is one pass with everything explicit: token ids, positions, the additive attention mask among the
  new rows, the columns in use, and the KV buffers (and a buffer of final hidden states) as inputs that the
  pass writes in place. Rows (q) and buffer length
  (L, a multiple of `BLOCK`) are dynamic, so one package serves plain decoding, every chain, every tree and
  every context length. The mask covers the positions in use only (start + q of them), and attention reads
  no further (`compiled_attention`).
* `build` exports it (`torch.export`) and compiles the package (`aoti_compile_and_package`, a few minutes on
  2 cores); `python -m specdec_ref compile` runs it for the offline target. Inductor writes its GEMMs for the
  thread count it compiles at, so a package serves that thread count only (`package_key`).
* `attach` loads the package for a model, if this machine has one, onto the model; then the loops'
  default `cache="auto"` runs the target through it (`CompiledCachedModel`; one new token as a 2-row pass
  where that measured faster, `pads_single_rows`). SPECDEC_AOT=0 opts out; the chapters and CI never build
  one, so they never wait for a compile.

The feature head's pass gets a package of its own the same way (`models.aot_head`).
"""
from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface, StaticCache
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from ..cache import COMPILED_PASS, STATIC_CACHES, CachedModel, additive_mask, cache_kwargs
from ..cache import compiled_pass  # noqa: F401 (chapters and scripts read it as aot.compiled_pass)
from ..device import build_key, cache_dir
from . import aot_use, bf16_gemm
from .bf16_gemm import small_register_blocks
from .kv import Counter, copy_prefix, kv_buffers, kv_shape, move_rows
from .kernels import attention_implementation

BLOCK = 256  # KV buffers hold a multiple of this many positions
# and at least this many blocks: torch.export assumes a dynamic size is never 0 or 1, so a package is compiled
# for buffers of 2 to MAX_BLOCKS blocks, and buffers of one block would run it outside the shapes it was
# compiled for (with AOTI_RUNTIME_CHECK_INPUTS=1 it refuses them: tests/test_aot.py,
# lab.packages.checked_package)
MIN_BLOCKS = 2
MAX_QUERY = 64  # rows one compiled pass takes; a longer prefill runs in pieces
MAX_BLOCKS = 32  # the longest buffer a package takes: 32 x 256 = 8,192 positions (SmolLM2's context)
FORMAT = 7  # the packages' inputs, outputs and kernels; a change makes every machine build them again
# (5: bfloat16 products by AVX512-BF16's dot-product instruction where the CPU has it, `bf16_gemm`; 6: masks
# as wide as the positions in use, attention over those only, `compiled_attention`; 7: the mask widened and
# the hidden states stored inside, the write position read from the columns, `KVStep`)
INDUCTOR = dict(freezing=True, max_autotune=True, max_autotune_gemm_backends="CPP,ATEN")


class KVStep(nn.Module):
    """One cached pass of a Hugging Face decoder-only LM with nothing hidden, for torch.export:

        (ids [1, q], positions [1, q], block [1, 1, q, w], columns [end] (0, 1, ..., end - 1), hidden [L, d],
         k_0, v_0, ..., k_n-1, v_n-1) -> (logits [q, V], argmax [q], row sums [q] float32)

    The pass's rows are the positions end - q .. end - 1 of the buffers: it writes their keys and values into
    the KV buffers ([1, heads, L, d] each) and their final hidden states into `hidden`, in place. `block` is
    the additive mask's last w columns (0 or the dtype's lowest value): the pass's own triangle (w = q), a
    tree's mask among its rows, or the whole mask (w = end); every column before them is seen. Each row
    attends among the first end positions only (`compiled_attention`); the rest of the buffers is never read.
    Widening the mask, the write position and the hidden states' copy were small operations outside the
    package, 0.1-0.15 ms a pass right after one (`scripts/loop_phases.py`).
    It also returns each row's argmax (the greedy token, first index on ties, as `sampling.argmax`) and the
    float32 sum of its logits (NaN or +inf as soon as one logit is: `CachedModel.note_finite`). Both read
    the logits once, in a reduction Inductor vectorises; ATen's max over bfloat16 rows of 49,152 logits is not
    (0.06-0.35 ms for 1-8 rows on 2 cores, several times the sum's cost; `scripts/greedy_walk.py`).
    """

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.cache = StaticCache(config=model.config, max_cache_len=BLOCK)
        _, heads, _, head_dim = kv_shape(model, BLOCK)
        self.cache.early_initialization(1, heads, head_dim, next(model.parameters()).dtype,
                                        next(model.parameters()).device)

    def forward(self, ids, positions, block, columns, hidden, *kv):
        q, end = ids.shape[1], columns.shape[0]
        write = columns[end - q]  # [] where the pass writes: the columns count 0, 1, ...
        for i, layer in enumerate(self.cache.layers):  # the buffers given: the pass writes into them
            layer.keys, layer.values = kv[2 * i], kv[2 * i + 1]
            layer.max_cache_len = kv[2 * i].shape[2]
            layer.cumulative_length = write.clone()
        at = columns - (end - block.shape[3])  # [end] each column's place in the block; < 0: before it, seen
        mask = torch.where(at >= 0, block[..., at.clamp(min=0)], 0.0).to(block.dtype)  # [1, 1, q, end]
        out = self.model.base_model(input_ids=ids, position_ids=positions, attention_mask=mask,
                                    **cache_kwargs(self.model.base_model, self.cache), use_cache=True)
        h = out.last_hidden_state[0]  # [q, d]
        hidden[end - q:end].copy_(h)
        logits = self.model.get_output_embeddings()(h)  # [q, V]
        return logits, logits.argmax(-1), logits.sum(-1, dtype=torch.float32)


def example_inputs(model, q: int = 3, length: int = MIN_BLOCKS * BLOCK, start: int = 5) -> tuple:
    """Inputs of one pass: q random tokens after `start` cached ones, in buffers of `length` positions, under
    a mask block of start positions' width (no size equal to another's, so export keeps them apart)."""
    device, dtype = next(model.parameters()).device, next(model.parameters()).dtype
    ids = torch.randint(0, model.config.vocab_size, (1, q), device=device)
    positions = torch.arange(start, start + q, device=device)[None]
    block = causal_mask(start, q, dtype, device)[..., -start:].contiguous()  # [1, 1, q, start]
    hidden = torch.zeros(length, model.config.hidden_size, dtype=dtype, device=device)
    kv = kv_buffers(model, length, dtype, device, separate=True)
    return (ids, positions, block, torch.arange(start + q, device=device), hidden, *kv)


def mask_block(attention_mask: torch.Tensor, start: int, q: int,
               dtype: torch.dtype) -> torch.Tensor:  # -> [1, 1, q, w]
    """A pass's additive mask as a compiled target pass takes it (`KVStep`), q <= w <= start + q wide: its
    last w columns, the ones before seen. A tree's mask among its rows (w = q: `CachedModel.logits` widens it
    for eager passes) or a whole mask."""
    if (attention_mask.dim() != 4 or tuple(attention_mask.shape[:3]) != (1, 1, q)
            or not q <= attention_mask.shape[3] <= start + q):
        raise ValueError(f"a pass of {q} rows after {start} positions takes a mask [1, 1, {q}, w], q <= w <= "
                         f"{start + q} (the last w columns; the ones before are seen), "
                         f"got {tuple(attention_mask.shape)}")
    return attention_mask.to(dtype).contiguous()


def causal_mask(start: int, q: int, dtype: torch.dtype,
                device=None) -> torch.Tensor:  # -> [1, 1, q, start + q]
    """Row i (position start + i) sees positions 0..start+i: every cached one, then a triangle among the new
    rows. One operation on a kept triangle (built afresh: 4-5 small ones, every pass of target and head)."""
    return F.pad(_triangle(q, dtype, torch.device(device or "cpu")), (start, 0))  # zeros: seen


@functools.lru_cache(maxsize=64)
def _triangle(q: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:  # [1, 1, q, q]
    rows = torch.arange(q, device=device)
    return additive_mask(rows[None] <= rows[:, None], dtype)[None, None]


def compiled_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                       is_causal=None, **kwargs):  # query [b, H, q, d], key and value [b, H_kv, L, d]
    """Attention inside a compiled pass: over the positions the mask covers only, each key head read once.

    Hugging Face's attention takes the whole KV buffers, L positions however few are in use, and in a package
    it copied each of the H_kv key and value heads H / H_kv times (`repeat_kv`) on every pass: every layer
    wrote nine heads' worth of the whole buffers. Here the keys and values are cut to the mask's width (the
    positions in use), and the g = H / H_kv query heads that share a key head are stacked as the rows of one
    (g * q rows, the mask repeated for each; Hugging Face does the same for one row without a mask), so
    attention reads each key head once and copies no key or value head (query head h uses key head h // g, as
    `repeat_kv` has it). After 240 tokens in buffers of 512, one new row of the offline target took 17.7 ms
    before and 8.5 now on 2 cores of an AMD EPYC Zen 4 (`scripts/compare_packages.py --wide`; the log's 11th
    session, which also times SDPA's own grouping, `enable_gqa`)."""
    unsupported = [k for k in ("softcap", "sliding_window", "s_aux", "position_bias")
                   if kwargs.get(k) is not None]
    if dropout or attention_mask is None or unsupported:
        raise ValueError(f"a compiled pass attends without dropout, over an explicit mask, and without "
                         f"{unsupported or 'softcap, sliding windows, sinks or position biases'}")
    n = attention_mask.shape[-1]
    key, value = key[:, :, :n], value[:, :, :n]  # [b, H_kv, n, d]
    b, H, q, d = query.shape
    kv_heads = key.shape[1]
    g = H // kv_heads
    # [b, H, q, d] -> [b, H_kv, g * q, d]: row j * q + i is query head kv * g + j, row i
    stacked = query.transpose(1, 2).unflatten(2, (kv_heads, g)).permute(0, 2, 3, 1, 4)  # [b, H_kv, g, q, d]
    stacked = stacked.contiguous().flatten(2, 3)
    mask = attention_mask[:, :, None].expand(-1, -1, g, -1, -1).flatten(2, 3)  # [b, 1, g * q, n]
    out = F.scaled_dot_product_attention(stacked, key, value, attn_mask=mask, scale=scaling)
    return out.unflatten(2, (g, q)).flatten(1, 2).transpose(1, 2).contiguous(), None  # [b, q, H, d], as HF's


COMPILED_ATTENTION = "specdec_compiled_attention"
AttentionInterface.register(COMPILED_ATTENTION, compiled_attention)
AttentionMaskInterface.register(COMPILED_ATTENTION, sdpa_mask)  # masks come ready-made; never built here


def fingerprint(model) -> str:
    """What a package's frozen weights depend on: the model's config (a feature head's: its body's) but for
    where it was loaded from, its dtype and a sample of every weight (first and last 64 values of each tensor,
    and its sum), hashed. A copy of the same weights in another folder finds the same packages."""
    config = model.config if hasattr(model, "config") else model.body.config
    settings = {k: v for k, v in config.to_dict().items() if k != "_name_or_path"}
    h = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()
                       + type(model).__name__.encode())
    with torch.no_grad():
        for name, p in model.state_dict().items():
            flat = p.detach().reshape(-1)
            h.update(name.encode() + str(p.dtype).encode() + str(tuple(p.shape)).encode())
            h.update(torch.cat([flat[:64], flat[-64:], flat.double().sum()[None].to(flat.dtype)])
                     .float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def package_key(model, fmt: str = str(FORMAT)) -> str:
    """The package's name: the processor, torch's threads, torch, the package's own version, its format
    (`fmt`: FORMAT for a target's, `aot_head.HEAD_FORMAT` for a head's) and the weights' fingerprint. Threads
    belong to it because Inductor writes its GEMMs for the thread count it compiles at (a package built at 1
    thread multiplies on one core whatever torch is told later)."""
    device = next(model.parameters()).device
    return build_key(device, fmt, device.type, fingerprint(model))


def package_path(model, fmt: str = str(FORMAT)) -> Path:
    """Where this machine's package for `model` (a target, or a feature head: `aot_head.head_package_path`)
    is, or would be, kept."""
    return cache_dir() / "aot" / f"{package_key(model, fmt)}.pt2"


def switched_on() -> bool:
    """False where SPECDEC_AOT=0 asks for the eager passes everywhere."""
    return os.environ.get("SPECDEC_AOT", "1") != "0"


def supported(model, *, for_build: bool = True) -> str | None:
    """Why this model cannot get a compiled pass here, in words; None when it can.

    Building needs the plain model (the export traces its nn.Linear layers); loading a package does not care
    whether the model's own layers were prepacked since, because the package holds its own copy of the
    weights (`for_build=False`)."""
    params = next(model.parameters(), None)
    if params is None or params.device.type != "cpu":
        return "compiled passes are built for CPU models (on a GPU, cache='compiled' captures CUDA graphs)"
    if not hasattr(model, "base_model") or not hasattr(model.config, "num_key_value_heads"):
        return f"{type(model).__name__} is not a Hugging Face decoder-only LM with grouped KV heads"
    if for_build and any(type(m).__name__ == "PrepackedLinear" for m in model.modules()):
        return ("the model's linear layers are prepacked for oneDNN; build from the plain model "
                "(prepack=False)")
    return None


def build(model, path: Path | None = None, *, options: dict | None = None, verbose: bool = True) -> Path:
    """Export `KVStep(model)` with dynamic rows and buffer length, compile it into an AOTInductor package and
    write it to `path` (default: `package_path(model)`, where `attach` looks). Minutes on a 2-core CPU.

    options: Inductor's settings while compiling (default INDUCTOR: frozen weights, GEMMs autotuned between
    its C++ micro-GEMM and ATen's); the tests take dict(freezing=True), which compiles in a fraction of the
    time."""
    problem = supported(model)
    if problem is not None:
        raise ValueError(f"cannot compile this model's pass: {problem}")
    inputs = example_inputs(model)
    q, length, end = _dims()
    w = torch.export.Dim("w", min=1, max=MAX_BLOCKS * BLOCK)
    shapes = ({1: q}, {1: q}, {2: q, 3: w}, {0: end}, {0: length}, tuple({2: length} for _ in inputs[5:]))
    with attention_implementation(model, COMPILED_ATTENTION):  # while exported and compiled
        return _compile(KVStep(model).eval(), inputs, shapes, Path(path or package_path(model)), options,
                        "the target's pass" if verbose else "")


def _dims():
    """The dynamic dimensions of every package: rows q (up to MAX_QUERY), buffer length (MIN_BLOCKS to
    MAX_BLOCKS blocks) and the mask's width (the positions in use after the pass). The package is compiled for
    each from 2 up. A one-row pass runs the program traced for more rows (the traced code branches on q == 1,
    so export cannot make it general: it leaves a guard q != 1), and the tests compare such passes with the
    eager model."""
    return (torch.export.Dim("q", min=1, max=MAX_QUERY),
            BLOCK * torch.export.Dim("blocks", min=MIN_BLOCKS, max=MAX_BLOCKS),
            torch.export.Dim("end", min=1, max=MAX_BLOCKS * BLOCK))


def _compile(step: nn.Module, inputs: tuple, shapes: tuple, path: Path, options: dict | None,
             what: str) -> Path:
    """torch.export `step` on `inputs` with dynamic `shapes`, compile it with Inductor's `options` into an
    AOTInductor package at `path` (written whole or not at all); say how long it took unless `what` is ""."""
    import torch._inductor.config as inductor_config

    path.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with torch.inference_mode():
        exported = torch.export.export(step, inputs, dynamic_shapes=shapes)
    exported_s = time.perf_counter() - start
    options = INDUCTOR if options is None else options
    saved = {k: getattr(inductor_config, k) for k in options}
    try:
        for k, v in options.items():
            setattr(inductor_config, k, v)
        tmp = path.with_suffix(".partial.pt2")
        with small_register_blocks(), bf16_gemm.dot_products():
            torch._inductor.aoti_compile_and_package(exported, package_path=str(tmp))
        tmp.replace(path)  # a package appears whole or not at all
    finally:
        for k, v in saved.items():
            setattr(inductor_config, k, v)
    if what:
        print(f"compiled {what}: exported in {exported_s:.0f} s, compiled in "
              f"{time.perf_counter() - start - exported_s:.0f} s -> {path}", file=sys.stderr)
    return path


class FlatRunner:
    """A loaded package called with its tensors as they are: `boxed_run` on the list of them, the outputs as
    a tuple. `AOTICompiledModel.__call__` parses the package's call spec and flattens the arguments with
    pytree on every call: 0.01-0.07 ms for the head's 7 inputs on a 2-core AMD EPYC (the target's has 66;
    `scripts/flat_runner.py`), several times per iteration. Our packages take positional tensors only and
    return a flat tuple, so that work changes nothing (a package whose outputs are not a flat tuple is
    called the usual way)."""

    def __init__(self, compiled):
        from torch.utils import _pytree as pytree
        self.compiled = compiled
        out_spec = pytree.treespec_loads(compiled.loader.get_call_spec()[1])
        self.flat = out_spec.type is tuple and all(c.is_leaf() for c in out_spec.children())

    def __call__(self, *tensors: torch.Tensor) -> tuple:
        if not self.flat:
            return self.compiled(*tensors)
        return tuple(self.compiled.loader.boxed_run(list(tensors)))


def load_package(path: Path) -> FlatRunner:
    """The package at path, loaded (a second or two), ready to call."""
    return FlatRunner(torch._inductor.aoti_load_package(str(path)))


class CompiledPass:
    """A loaded package for one model: `lm(keep_hidden, name)` gives a CachedModel that runs through it.
    pad_single: its 1-row passes score the token before again (`pads_single_rows`)."""

    def __init__(self, model, runner, path: Path, pad_single: bool = False):
        self.model, self.runner, self.path, self.pad_single = model, runner, path, pad_single

    def lm(self, keep_hidden: bool | tuple[int, ...] = False, name: str = "model") -> CompiledCachedModel:
        return CompiledCachedModel(self.model, self.runner, keep_hidden, name, pad_single=self.pad_single)


def attach(model, *, enabled: bool | None = None) -> CompiledPass | None:
    """Load this model's package, if this machine has built one, and attach it (`compiled_pass(model)`)
    where it decodes faster than the eager model (`aot_use.first_load`); return it, or None (no package,
    SPECDEC_AOT=0, a model it cannot serve, or slower than eager here). enabled=True, or SPECDEC_AOT=1,
    attaches it whatever it measured."""
    forced = enabled is True or (enabled is None and os.environ.get("SPECDEC_AOT") == "1")
    enabled = switched_on() if enabled is None else enabled
    model.__dict__.pop(COMPILED_PASS, None)
    if not enabled or supported(model, for_build=False) is not None:
        return None
    path = package_path(model)
    if not path.exists():
        return None
    runner = load_package(path)
    use = aot_use.first_load(model, lambda: CompiledCachedModel(model, runner), path)
    if not (forced or use.faster_than_eager):
        return None
    compiled = CompiledPass(model, runner, path, use.pad_single)
    model.__dict__[COMPILED_PASS] = compiled
    return compiled


@contextmanager
def set_aside(model, *attributes: str):
    """The model without these attributes (default: its compiled pass) inside the block, as they were after:
    `with aot.set_aside(target):` times or changes the eager model where the loops would run the package."""
    kept = {k: model.__dict__.pop(k) for k in attributes or (COMPILED_PASS,) if k in model.__dict__}
    try:
        yield model
    finally:
        model.__dict__.update(kept)


def copy_model(model):
    """A deep copy of model without its compiled pass or kept static caches: the package holds the original's
    weights, so a copy that kept it (and was then cast, quantised or trained) would still run the original's
    pass; the caches are the original's buffers (`cache.cached_model`)."""
    with set_aside(model, COMPILED_PASS, STATIC_CACHES):
        return copy.deepcopy(model)


def room_for(kv: list[torch.Tensor], used: int, end: int, make, what: str) -> list[torch.Tensor]:
    """KV buffers [1, heads, L, d] that hold `end` positions: `kv` itself if they do, else new ones from
    `make(length)` (the next multiple of BLOCK; buffers start at MIN_BLOCKS, so this is always more) with the
    first `used` positions copied over."""
    if end <= kv[0].shape[2]:
        return kv
    blocks = -(-end // BLOCK)
    if blocks > MAX_BLOCKS:
        raise ValueError(f"{what} holds at most {MAX_BLOCKS * BLOCK} positions, this pass needs {end}: "
                         "shorten the prompt or max_new_tokens")
    grown = make(blocks * BLOCK)
    copy_prefix(kv, grown, used)
    return grown


class CompiledCachedModel(CachedModel):
    """A CachedModel whose passes run through the compiled package, on KV buffers it owns.

    The buffers (KV, and the final hidden states: `hidden` reads them with keep_hidden) hold a multiple of
    BLOCK positions (MIN_BLOCKS or more) and grow by copying when a pass would run past them (once per 256
    tokens). Rolling back moves the write position only: rows past it are never read (a pass's mask, and so
    its attention, ends at the pass's last row) and are overwritten by the next pass. Every pass gets an
    explicit mask among its rows: causal by default (a kept triangle), or a tree pass's own. A pass of more
    than MAX_QUERY rows (a long prompt) runs in pieces.
    """

    def __init__(self, model, runner, keep_hidden: bool | tuple[int, ...] = False, name: str = "model", *,
                 pad_single: bool = False):
        if isinstance(keep_hidden, tuple):
            raise ValueError("a compiled pass keeps the final hidden states only; a drafter that reads fused "
                             "layers (keep_hidden=(...)) needs cache='dynamic' or SPECDEC_AOT=0")
        super().__init__(model, keep_hidden, name)
        self.runner, self.pad_single = runner, pad_single
        self.kv, self.counter = self._buffers(MIN_BLOCKS * BLOCK), Counter(self.device)
        self.states = self.kv[0].new_zeros(self.capacity, model.config.hidden_size)  # [L, d] hidden states
        self._latest: tuple[torch.Tensor, torch.Tensor] | None = None  # the latest pass's (logits, argmax)

    def _buffers(self, length: int) -> list[torch.Tensor]:
        return kv_buffers(self.model, length, self.dtype, self.device)

    @property
    def capacity(self) -> int:
        return self.kv[0].shape[2]

    def _make_room(self, end: int) -> None:
        if end > self.capacity:
            self.kv = room_for(self.kv, self.n_cached, end, self._buffers, "the compiled pass")
            grown = self.states.new_zeros(self.capacity, self.states.shape[1])
            grown[:self.n_cached] = self.states[:self.n_cached]
            self.states = grown

    @property
    def hidden(self) -> torch.Tensor | None:  # -> [n_cached, d]: the rows the package wrote (keep_hidden)
        return self.states[:self.n_cached] if self.keep_hidden else None

    def logits(self, context_ids: torch.Tensor, keep: int | None = None, *,
               position_ids: torch.Tensor | None = None,
               attention_mask: torch.Tensor | None = None) -> torch.Tensor:  # [T] -> [k, V]
        new = context_ids[self.n_cached:]
        if new.shape[0] > MAX_QUERY and position_ids is None:  # a long prompt: causal pieces, one pass
            T = context_ids.shape[0]
            ends = list(range(self.n_cached + MAX_QUERY, T, MAX_QUERY)) + [T]
            pieces = [self.logits(context_ids[:end]) for end in ends]  # [<= MAX_QUERY, V] each
            self.calls -= len(ends) - 1  # as far as the loop is concerned, one pass
            logits = pieces[-1] if keep is not None and keep <= pieces[-1].shape[0] else torch.cat(pieces)
            return logits if keep is None else logits[-keep:]
        q, start = new.shape[0], self.n_cached
        causal = position_ids is None
        padded = self.pad_single and q == 1 and causal and start > 0
        if padded:  # the token before again, with it: 2 rows cost less than 1 here (pads_single_rows)
            new, start, q = context_ids[start - 1:start + 1], start - 1, 2
        self._make_room(start + q)
        positions = self.counter.positions(start, q) if causal else position_ids[None]  # views: `Counter`
        block = _triangle(q, self.dtype, self.device) if causal else mask_block(attention_mask, start, q,
                                                                                 self.dtype)
        logits, best, sums = self.runner(new[None], positions, block,
                                         self.counter.columns(start + q), self.states, *self.kv)
        if padded:  # the new token's row only (the one before it was written again, as it was)
            logits, best, sums = logits[1:], best[1:], sums[1:]
        self.n_cached = context_ids.shape[0]
        self.calls += 1
        if keep is not None:
            logits, best, sums = logits[-keep:], best[-keep:], sums[-keep:]
        self._latest = logits, best
        self.note_finite(logits, sums)
        return logits

    def pass_argmax(self, logits: torch.Tensor) -> torch.Tensor | None:  # [k, V] -> [k]
        """The package's own argmax of these logits if they are what the latest pass returned, else None."""
        latest = self._latest
        return latest[1] if latest is not None and logits is latest[0] else None

    def keep_rows(self, n_prefix: int, rows: list[int]) -> None:
        n = n_prefix + len(rows)
        # the rows already in place before the first that is not stay where they are
        first = next((i for i, r in enumerate(rows) if r != n_prefix + i), len(rows))
        if first < len(rows):
            src = torch.tensor(rows[first:], dtype=torch.long, device=self.device)
            move_rows(self.kv, src, slice(n_prefix + first, n))  # [1, heads, L, d] each: src -> its places
            if self.keep_hidden:
                self.states[n_prefix + first:n] = self.states[src]
        self.rollback(n)

    def rollback(self, n_tokens: int) -> None:
        self.n_cached = min(self.n_cached, n_tokens)
        if n_tokens == 0:
            self._finite = None


@torch.inference_mode()
def check_against_eager(model, path: Path, n_context: int = 40, k: int = 4) -> float:
    """The largest |logit| difference between the package and the eager model over a prompt and a k-token
    pass after it (a package built from other weights differs by whole units)."""
    lm = CompiledPass(model, load_package(path), path).lm()
    ref = CachedModel(model)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (n_context + k,), generator=g)
    ids = ids.to(next(model.parameters()).device)
    worst = (lm.logits(ids[:n_context], keep=1) - ref.logits(ids[:n_context], keep=1)).abs().max()
    worst = max(worst, (lm.logits(ids, keep=k) - ref.logits(ids, keep=k)).abs().max())
    return float(worst)
