"""Timing that tells the truth on any device, and the measurements of chapter 1.

Every measurement here synchronises the device before reading the clock, runs untimed
warm-up calls first, repeats, and reports the median and the spread (half the
interquartile range). The device always comes from the inputs (a model's parameters or
the `device` argument); nothing in this file names a particular accelerator.

Three groups of helpers:
  * the device: `measure_bandwidth` (GB/s from big copies), `measure_matmul` (FLOP/s);
  * the model, on paper: `weight_bytes`, `forward_flops`, `arithmetic_intensity`, `roofline_time`;
  * the model, measured: `forward_latency` (k new tokens appended to a KV cache) and
    `latency_curve` (many k at once, interleaved so that background load hits every k alike).
"""
from __future__ import annotations

import statistics
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM


from ..cache import cache_kwargs, compiled_pass
from ..device import default_device, seconds_since, start_timer
from ..models.gpus import SPEC_SHEETS, SpecSheet, spec_sheet_for  # noqa: F401 (chapters use timing.*)
from ..models.kernels import plain_path


# ---------------------------------------------------------------------------------------------
# Repeated measurements: the one timer, and medians with their spread
# ---------------------------------------------------------------------------------------------

def _half_iqr(values: Sequence[float]) -> float:
    """Half the interquartile range (0 with fewer than 2 values): a spread that ignores outliers."""
    if len(values) < 2:
        return 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    return (q[2] - q[0]) / 2


@dataclass
class Samples:
    """Repeated measurements, summarised by their median and spread (half the interquartile range)."""
    values: list[float]  # one per timed repeat

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def spread(self) -> float:
        """Half the interquartile range, in the values' unit (0 with fewer than 2 repeats)."""
        return _half_iqr(self.values)


@dataclass
class Timing(Samples):
    """Seconds, one per repeat."""

    @property
    def times(self) -> list[float]:
        return self.values


@dataclass
class Rate(Samples):
    """Work per second, one value per timed repeat (bytes/s for bandwidth, FLOP/s for matmuls)."""
    unit: str = "FLOP/s"  # "B/s" or "FLOP/s"

    def __str__(self) -> str:
        g = 1e9
        return f"{self.median / g:.1f} ± {self.spread / g:.1f} G{self.unit}"


def time_fn(fn: Callable[[], object], device: torch.device | str,
            warmup: int = 1, repeats: int = 5, setup: Callable[[], object] | None = None) -> Timing:
    """Run fn warmup times untimed, then time `repeats` calls, synchronising around each.

    `setup`, if given, runs untimed before every call (e.g. to reset a KV cache).
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    for _ in range(warmup):
        if setup is not None:
            setup()
        fn()
    times = []
    for _ in range(repeats):
        if setup is not None:
            setup()
        t0 = start_timer(device)
        fn()
        times.append(seconds_since(t0, device))
    return Timing(times)


class InsideClock:
    """Time spent inside chosen calls (a compiled package's runner, a model's forward), and how many were the
    target's: what the scripts that time the loop around the passes subtract. `wrap(fn)` returns fn timed
    (hooks on eager modules never fire inside a package); `add` books time measured elsewhere (a hook)."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.seconds, self.target_calls = 0.0, 0

    def add(self, seconds: float, is_target: bool = False) -> None:
        self.seconds += seconds
        self.target_calls += is_target

    def wrap(self, fn: Callable, is_target: bool = False) -> Callable:
        def timed(*inputs, **kwargs):
            device = next((x.device for x in inputs if isinstance(x, torch.Tensor)), "cpu")
            t0 = start_timer(device)
            out = fn(*inputs, **kwargs)
            self.add(seconds_since(t0, device), is_target)
            return out
        return timed


# ---------------------------------------------------------------------------------------------
# The device: how fast can it move bytes, and how fast can it multiply?
# ---------------------------------------------------------------------------------------------

@torch.inference_mode()
def measure_bandwidth(n_bytes: int = 2**28, device: torch.device | str | None = None,
                      warmup: int = 2, repeats: int = 10) -> Rate:
    """Memory bandwidth in bytes/s from copying one n_bytes tensor into another.

    A copy reads n_bytes and writes n_bytes, so each copy counts 2 * n_bytes (the STREAM
    "copy" convention). Pick n_bytes well above the last-level cache, or you time the cache.
    """
    if n_bytes < 2**20:
        raise ValueError(f"n_bytes must be at least 1 MiB to measure memory rather than overhead, "
                         f"got {n_bytes}")
    device = torch.device(device) if device is not None else default_device()
    src = torch.ones(n_bytes // 4, dtype=torch.float32, device=device)  # [n]
    dst = torch.empty_like(src)  # [n]
    timing = time_fn(lambda: dst.copy_(src), device, warmup, repeats)
    return Rate([2 * src.numel() * 4 / t for t in timing.times], "B/s")


@torch.inference_mode()
def measure_matmul(n: int = 1024, dtype: torch.dtype = torch.float32,
                   device: torch.device | str | None = None, warmup: int = 2, repeats: int = 10,
                   rows: int | None = None, cols: int | None = None) -> Rate:
    """Achieved FLOP/s of x [rows, n] times a weight [cols, n], as nn.Linear computes it (2 rows n cols
    FLOPs).

    rows and cols default to n: a square product, the best case and the roofline's flat ceiling.
    A pass over k tokens multiplies k rows by each weight matrix: rows=k, n and cols from the model.
    """
    rows, cols = (n if rows is None else rows), (n if cols is None else cols)
    if min(rows, n, cols) < 1:
        raise ValueError(f"need rows, n, cols >= 1, got rows={rows}, n={n}, cols={cols}")
    device = torch.device(device) if device is not None else default_device()
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(rows, n, generator=g).to(device=device, dtype=dtype)  # [rows, n]
    w = torch.randn(cols, n, generator=g).to(device=device, dtype=dtype)  # [cols, n]
    timing = time_fn(lambda: nn.functional.linear(x, w), device, warmup, repeats)  # [rows, n] -> [rows, cols]
    return Rate([2 * rows * n * cols / t for t in timing.times], "FLOP/s")


# ---------------------------------------------------------------------------------------------
# The model on paper: parameters, bytes a forward pass must read, FLOPs it must do.
# ---------------------------------------------------------------------------------------------

def _unique(tensors) -> list[torch.Tensor]:
    """Drop repeats of the same storage (tied weights are one tensor used twice)."""
    seen, out = set(), []
    for t in tensors:
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            out.append(t)
    return out


def param_count(model: nn.Module) -> int:
    """Number of distinct parameters (tied embedding and head counted once)."""
    return sum(p.numel() for p in _unique(model.parameters()))


_MATMULS = {nn.functional.linear, torch.matmul, torch.mm, torch.bmm, torch.addmm, torch.einsum,
            torch.Tensor.__matmul__, torch.Tensor.matmul, torch.Tensor.mm}
_GATHERS = {nn.functional.embedding, torch.embedding, torch.index_select, torch.Tensor.index_select,
            torch.Tensor.__getitem__}  # read only the rows they pick
_watched: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> (signature, (read, multiplied))


def _named_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    return {**dict(model.named_parameters()), **dict(model.named_buffers())}


def weights_used(model: nn.Module) -> tuple[set[str], set[str]]:
    """-> (names of the weights a forward pass reads in full, names of those it multiplies as matrices).

    Found by watching one real one-token pass, so any architecture counts right: an embedding
    lookup (a gather) reads only the rows it needs and does not count, a tied head does, and a
    head that multiplies only part of a table counts only that part. Cached until the model's
    tensors change.
    """
    named = _named_tensors(model)
    signature = tuple((name, t.data_ptr()) for name, t in named.items())
    if model not in _watched or _watched[model][0] != signature:
        from torch.overrides import TorchFunctionMode
        by_ptr = {t.data_ptr(): name for name, t in named.items() if t.numel()}
        read, multiplied = set(), set()

        class Watch(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                if func not in _GATHERS and getattr(func, "__name__", "") != "__get__":  # skip .shape etc.
                    flat = [*args, *(kwargs or {}).values()]
                    flat += [x for a in flat if isinstance(a, (list, tuple)) for x in a]
                    tensors = [a for a in flat if isinstance(a, torch.Tensor)]
                    names = {by_ptr[a.data_ptr()] for a in tensors if a.data_ptr() in by_ptr}
                    read.update(names)
                    if func in _MATMULS:
                        multiplied.update(names)
                return func(*args, **(kwargs or {}))

        ids = _new_tokens(model, 1, 1, 0)  # [1, 1]
        with torch.inference_mode(), plain_path(), Watch():  # prepacked layers would hide their weights
            model(input_ids=ids, use_cache=False)
        _watched[model] = (signature, (read, multiplied))
    return _watched[model][1]


def matmul_params(model: nn.Module) -> int:
    """Parameters that take part in a matrix multiply for every token (the head included).

    Only matrices count: some transformers releases compute rotary angles as a matmul with the 1-D
    inv_freq buffer, a few numbers per position, not weights.
    """
    named = _named_tensors(model)
    return sum(named[n].numel() for n in weights_used(model)[1] if named[n].dim() >= 2)


def weight_bytes(model: nn.Module) -> int:
    """Bytes of weights one forward pass must read from memory, whatever k is.

    Every distinct weight the pass touches, except tables it only gathers rows from: looking up
    k tokens in an untied input embedding reads k rows, not the table. (A table tied to the head
    is read in full by the head, so it counts.)
    """
    named = _named_tensors(model)
    return sum(named[n].numel() * named[n].element_size() for n in weights_used(model)[0])


def _attention_shape(model) -> tuple[int, int, int, int]:
    """-> (layers, query heads, key/value heads, head dim), read from the model's config."""
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    n_kv = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    return c.num_hidden_layers, c.num_attention_heads, n_kv, head_dim


def kv_cache_bytes(model, context_len: int, batch_size: int = 1) -> int:
    """Bytes of the KV cache for context_len tokens: 2 (K and V) x layers x kv heads x head dim x tokens."""
    layers, _, n_kv, head_dim = _attention_shape(model)
    elem = next(model.parameters()).element_size()
    return 2 * layers * n_kv * head_dim * context_len * batch_size * elem


def forward_flops(model, k: int, context_len: int = 0, batch_size: int = 1) -> float:
    """FLOPs of one pass over k new tokens after context_len cached ones.

    2 per matmul parameter per token (a multiply and an add), plus attention: each new token
    i scores and mixes context_len + i + 1 keys, 4 FLOPs per head dim per key (QK^T and AV).
    """
    layers, n_heads, _, head_dim = _attention_shape(model)
    keys = k * context_len + k * (k + 1) // 2  # causal: sum over the k new tokens
    return batch_size * (2 * matmul_params(model) * k + 4 * layers * n_heads * head_dim * keys)


def bytes_moved(model, k: int, context_len: int = 0, batch_size: int = 1) -> int:
    """Bytes one pass must move at least: the weights once, the cached keys/values, and the new ones.

    Activations are left out; they are small next to the weights while k is small.
    """
    return weight_bytes(model) + kv_cache_bytes(model, context_len + k, batch_size)


def arithmetic_intensity(model, k: int, context_len: int = 0, batch_size: int = 1) -> float:
    """FLOPs per byte moved for one pass of k new tokens: roughly 2k / (bytes per parameter)."""
    return forward_flops(model, k, context_len, batch_size) / bytes_moved(model, k, context_len, batch_size)


def roofline(intensity, peak_flops: float, bandwidth: float):
    """Attainable FLOP/s at a given arithmetic intensity: min(peak, intensity x bandwidth)."""
    if isinstance(intensity, torch.Tensor):
        return torch.clamp(intensity * bandwidth, max=peak_flops)
    try:
        return [min(peak_flops, i * bandwidth) for i in intensity]
    except TypeError:
        return min(peak_flops, intensity * bandwidth)


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """The intensity (FLOP/byte) where the roofline bends: below it, memory bandwidth is the limit."""
    return peak_flops / bandwidth


def roofline_time(flops: float, n_bytes: float, peak_flops: float, bandwidth: float) -> float:
    """The fastest a pass can possibly run, in seconds: it must both move its bytes and do its FLOPs."""
    return max(flops / peak_flops, n_bytes / bandwidth)


# ---------------------------------------------------------------------------------------------
# The model, measured: forward passes that append k tokens to a KV cache.
# ---------------------------------------------------------------------------------------------

def _model_device(model) -> torch.device:
    return next(model.parameters()).device


@torch.inference_mode()
def prefilled_cache(model, context_len: int, batch_size: int = 1, seed: int = 0) -> DynamicCache:
    """A KV cache holding context_len random tokens per sequence (what a decoder has after reading a
    prompt)."""
    cache = DynamicCache()
    if context_len > 0:
        g = torch.Generator(device="cpu").manual_seed(seed)
        ids = torch.randint(0, model.config.vocab_size, (batch_size, context_len), generator=g)  # [B, T]
        model(input_ids=ids.to(_model_device(model)), **cache_kwargs(model, cache), use_cache=True)
    return cache


def _new_tokens(model, k: int, batch_size: int, seed: int) -> torch.Tensor:  # -> [B, k]
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randint(0, model.config.vocab_size, (batch_size, k), generator=g).to(_model_device(model))


def _one_pass(model, cache: DynamicCache, new: torch.Tensor) -> Callable[[], None]:
    """A timed call: score the k tokens of new [B, k] in one pass, then crop them off the cache again."""
    def step():
        model(input_ids=new, **cache_kwargs(model, cache), use_cache=True)  # [B, k] -> logits [B, k, V]
        cache.crop(-new.shape[1])  # transformers 5: crop(-n) drops the last n tokens
    return step


def _sequential(model, cache: DynamicCache, new: torch.Tensor) -> Callable[[], None]:
    """A timed call: score the tokens of new [B, k] one pass each, as plain decoding would, then crop."""
    def step():
        for i in range(new.shape[1]):
            # [B, 1] -> [B, 1, V]
            model(input_ids=new[:, i:i + 1], **cache_kwargs(model, cache), use_cache=True)
        cache.crop(-new.shape[1])
    return step


def _compiled_passes(lm, model, context_len: int, seed: int):
    """(k, sequential) -> a timed call through a compiled pass's cache `lm`, prefilled here with context_len
    random tokens: score k new tokens in one pass (or one pass each), then roll back to the context."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    context = torch.randint(0, model.config.vocab_size, (context_len,), generator=g).to(_model_device(model))
    if context_len:
        lm.logits(context, keep=1)

    def for_k(k: int, sequential: bool) -> Callable[[], None]:
        ids = torch.cat([context, _new_tokens(model, k, 1, seed + k)[0]])  # [context_len + k]

        def step():
            if sequential:
                for i in range(1, k + 1):
                    lm.logits(ids[:context_len + i], keep=1)
            else:
                lm.logits(ids, keep=k)
            lm.rollback(context_len)
        return step
    return for_k


@torch.inference_mode()
def forward_latency(model, k: int, context_len: int = 128, batch_size: int = 1, warmup: int = 1,
                    repeats: int = 5, sequential: bool = False, seed: int = 0) -> Timing:
    """Seconds for one forward pass that appends k new tokens to a cache of context_len tokens.

    With sequential=True: k one-token passes instead (what plain decoding pays for k tokens).
    The new tokens are cropped off after every call, so every repeat measures the same thing.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1 new token, got {k}")
    cache = prefilled_cache(model, context_len, batch_size, seed)
    new = _new_tokens(model, k, batch_size, seed + 1)  # [B, k]
    fn = (_sequential if sequential else _one_pass)(model, cache, new)
    return time_fn(fn, _model_device(model), warmup, repeats)


@dataclass
class LatencyCurve:
    """Latency of one k-token pass for each k (and of k one-token passes for some k)."""
    ks: list[int]  # numbers of new tokens per pass
    one_pass: dict[int, Timing]  # k -> timing of a single pass over k tokens
    sequential: dict[int, Timing] = field(default_factory=dict)  # k -> timing of k one-token passes
    context_len: int = 0  # tokens already in the KV cache
    batch_size: int = 1  # sequences per pass

    def median(self, k: int) -> float:
        return self.one_pass[k].median

    def cost_ratio(self, k: int) -> float:
        """How many one-token passes a k-token pass costs: t(k) / t(1)."""
        return self.one_pass[k].median / self.one_pass[self.ks[0]].median if self.ks[0] == 1 else float("nan")


def log_grid(k_max: int, k_min: int = 1) -> list[int]:
    """Powers of two from k_min up to k_max: 1, 2, 4, ..., k_max."""
    if k_min < 1 or k_max < k_min:
        raise ValueError(f"need 1 <= k_min <= k_max, got k_min={k_min}, k_max={k_max}")
    ks, k = [], k_min
    while k <= k_max:
        ks.append(k)
        k *= 2
    return ks


@torch.inference_mode()
def latency_curve(model, ks: Sequence[int], context_len: int = 128, batch_size: int = 1, warmup: int = 1,
                  repeats: int = 5, sequential_ks: Sequence[int] = (), seed: int = 0) -> LatencyCurve:
    """forward_latency for every k in ks, interleaved: each round times every k once.

    Interleaving means a burst of background load lands on all k alike instead of on one,
    so the ratios t(k) / t(1) stay trustworthy on a busy machine. A model with a compiled pass attached
    (`python -m specdec_ref compile`, `models.aot`) is timed through it at batch size 1, as the loops run it.
    """
    device = _model_device(model)
    if batch_size == 1 and compiled_pass(model) is not None:
        call = _compiled_passes(compiled_pass(model).lm(), model, context_len, seed)
        calls = [(k, False, call(k, False)) for k in ks] + [(k, True, call(k, True)) for k in sequential_ks]
    else:
        cache = prefilled_cache(model, context_len, batch_size, seed)
        calls = [(k, False, _one_pass(model, cache, _new_tokens(model, k, batch_size, seed + k))) for k in ks]
        calls += [(k, True, _sequential(model, cache, _new_tokens(model, k, batch_size, seed + k)))
                  for k in sequential_ks]
    times: dict[tuple[int, bool], list[float]] = {(k, s): [] for k, s, _ in calls}
    for _ in range(warmup):
        for _, _, fn in calls:
            fn()
    for _ in range(repeats):
        for k, s, fn in calls:
            times[(k, s)] += time_fn(fn, device, warmup=0, repeats=1).times
    return LatencyCurve(list(ks), {k: Timing(times[(k, False)]) for k in ks},
                        {k: Timing(times[(k, True)]) for k in sequential_ks}, context_len, batch_size)


def count_ops(model, k: int = 1, context_len: int = 16) -> int:
    """Number of torch operations one k-token forward pass issues (on a GPU, most are one kernel launch
    each)."""
    from torch.overrides import TorchFunctionMode

    class Counter(TorchFunctionMode):
        n = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Counter.n += 1
            return func(*args, **(kwargs or {}))

    cache = prefilled_cache(model, context_len)
    new = _new_tokens(model, k, 1, 1)  # [1, k]
    with torch.inference_mode(), Counter():
        model(input_ids=new, **cache_kwargs(model, cache), use_cache=True)
    return Counter.n


# ---------------------------------------------------------------------------------------------
# Synthetic Llamas of chosen sizes: random weights, real shapes (timing does not care about values).
# ---------------------------------------------------------------------------------------------

SYNTHETIC_SIZES = {  # name -> (layers, hidden size); the two 25M ones differ only in shape
    "synthetic 2x256 (tiny)": (2, 256),
    "synthetic 8x512": (8, 512),
    "synthetic 32x256 (deep, narrow)": (32, 256),
    "synthetic 2x1024 (shallow, wide)": (2, 1024),
}


def synthetic_llama(n_layers: int, hidden: int, vocab_size: int = 8192, dtype: torch.dtype = torch.float32,
                    device: torch.device | str | None = None, seed: int = 0) -> LlamaForCausalLM:
    """A randomly initialised Llama with n_layers of width `hidden` (64-dim heads, plain multi-head attn).

    Each layer holds about 12 * hidden^2 parameters (4 h^2 in attention, 8 h^2 in the MLP), so 32 layers of
    256 and 2 layers of 1024 carry about the same layer weights (24 and 25 M) in different shapes; their
    untied output layers (vocab_size x hidden: 2 and 8 M) do not.
    """
    if hidden % 64:
        raise ValueError(f"hidden must be a multiple of 64 (the head size), got {hidden}")
    n_heads = hidden // 64
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden,
                         intermediate_size=8 * hidden // 3 // 64 * 64,
                         num_hidden_layers=n_layers, num_attention_heads=n_heads,
                         num_key_value_heads=n_heads, max_position_embeddings=4096,
                         tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # weight initialisation only
        model = LlamaForCausalLM(config)
    return model.to(device=device or "cpu", dtype=dtype).eval()
