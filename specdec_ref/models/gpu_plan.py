"""Which pair, dtype and cache mode to run on a GPU: a launch-and-bytes cost model of one decoding step.

A forward pass on a GPU is bound by one of two things. The host launches its kernels one by one, each
costing about `LAUNCH_S` of Python and driver time; the GPU streams the weights and the KV cache from
memory. The slower of the two sets the step's time:

    t(step) = max(ops × launch, bytes / (bandwidth × BANDWIDTH_FRACTION), FLOPs / peak)      (1)

`ops` counts kernel-level operations: `OPS_PER_LAYER` per decoder layer with the eager (dynamic) cache, plus
`STEP_OPS` for embedding, final norm, head and sampling. With cache="compiled" (static buffers, one CUDA
graph per shape) a whole pass is one graph replay: a few launches, whatever the depth. A speculative
iteration of γ draft steps, one verification pass of γ + 1 tokens and the loop's own work (`LOOP_OPS`:
sampling, verification, rollback) yields E[tokens] = (1 - α^(γ+1)) / (1 - α) on average, so

    S = [t_plain] / [(γ t_draft + t_verify + t_loop) / E[tokens]]                              (2)

where t_plain is the best plain decoding of the same target (eager or compiled, whichever is faster):
the speedup a reader would see against the fastest plain row. `predict_pair_speedup` evaluates (2) for one
pair, mode and γ; `plan` ranks every pair that fits the card and picks the best.

Calibration: the recorded H200 run (README) took 23–28 ms per plain step of the 30-layer 135M target in
bfloat16, whose weights stream in 0.06 ms: launch-bound, 30 × 36 + 12 ops, hence LAUNCH_S. The same run's
speculative loop (α = 0.30, c = 0.071, γ = 2) ran at 0.90× our plain loop, which puts about 11 ms of loop
work in each iteration: hence LOOP_OPS. Every other number is quoted from a spec sheet or a published
config, or assumed, and says so.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .gpus import SPEC_SHEETS, SpecSheet, spec_sheet_for

LAUNCH_S = 23e-6  # s per kernel-level op on the host (calibrated: H200 run, 25.5 ms / (30 × 36 + 12) ops)
OPS_PER_LAYER = {"dynamic": 36, "compiled": 0}  # counted per Llama/Qwen2 layer; compiled: inside one graph
STEP_OPS = {"dynamic": 12, "compiled": 4}  # per pass: embedding, final norm, head, sampling; compiled: replay
LOOP_OPS = {"dynamic": 400, "compiled": 100}  # per speculative iteration (calibrated: ≈ 11 ms on the H200)
PLAIN_LOOP_OPS = 10  # per plain decoding step: pick the token, append it, check for the end (assumed)
BANDWIDTH_FRACTION = 0.7  # of the sheet's bandwidth that decoding reaches (assumed; copies reach ~0.9)
CONTEXT = 512  # tokens in the KV cache while decoding (a chat prompt and its answer)
RESERVE_GIB = 1.0  # CUDA context, activations and allocator slack (assumed)
GAMMAS = range(1, 9)  # the draft lengths the plan considers
UNKNOWN_CARD = SpecSheet(bandwidth=300e9, flops_16bit=65e12, memory_gib=0)  # no sheet: assume a slow card


@dataclass(frozen=True)
class ModelShape:
    """What the cost model needs of a model: its depth, parameters and KV cache per token."""
    layers: int  # decoder layers, each OPS_PER_LAYER kernels in eager mode
    params: float  # parameters read per pass (a shared head counted once)
    kv_per_token: int  # key and value numbers cached per token: 2 × layers × kv_heads × head_dim
    extra_ops: int = 0  # kernels beyond the layers and STEP_OPS (a feature head's fc, say)

    def bytes(self, bytes_per_param: int, context: int) -> float:
        return self.params * bytes_per_param + self.kv_per_token * bytes_per_param * context

    def ops(self, mode: str) -> int:
        extra = self.extra_ops if mode == "dynamic" else 0  # compiled: inside the graph
        return self.layers * OPS_PER_LAYER[mode] + STEP_OPS[mode] + extra


def _shape(layers: int, params: float, kv_heads: int, head_dim: int, extra_ops: int = 0) -> ModelShape:
    return ModelShape(layers, params, 2 * layers * kv_heads * head_dim, extra_ops)


SHAPES = {  # from each model's published config.json and model card (quoted)
    "SmolLM2-135M": _shape(30, 0.135e9, 3, 64),
    "SmolLM2-1.7B": _shape(24, 1.71e9, 32, 64),
    "Qwen2.5-0.5B": _shape(24, 0.49e9, 2, 64),
    "Qwen2.5-3B": _shape(36, 3.09e9, 2, 128),
    "Qwen2.5-7B": _shape(28, 7.62e9, 4, 128),
    # the shipped drafts of the offline pair, counted from their code: the feature head is fc + 1 Llama layer
    # (SmolLM2-135M's) + a reduced head over the target's embedding rows; the LM draft is 2 layers
    "feature head": _shape(1, 0.035e9, 3, 64, extra_ops=4),
    "LM draft (2 layers)": _shape(2, 0.037e9, 3, 64),
}


@dataclass(frozen=True)
class PairModel:
    target: str  # key of SHAPES
    draft: str  # key of SHAPES
    alpha: float  # expected per-token acceptance α, greedy
    alpha_source: str  # where α comes from: "measured ..." or "assumed ..."
    fp16_risk: bool = False  # the family is known to overflow float16 (the loader probes and falls back)


PAIR_MODELS = {  # candidates for PAIR = "auto"; keys are those of loading.PAIRS, plus the offline pair
    # the offline pair's α: book/measurement_log.md, "The previous defaults, on another machine"
    "offline": PairModel("SmolLM2-135M", "feature head", 0.29, "measured: shipped head, greedy γ=2"),
    "offline/lm": PairModel("SmolLM2-135M", "LM draft (2 layers)", 0.24, "measured: greedy γ=2"),
    "smollm2": PairModel("SmolLM2-1.7B", "SmolLM2-135M", 0.6, "assumed: same family, 13× smaller draft"),
    "qwen2.5": PairModel("Qwen2.5-3B", "Qwen2.5-0.5B", 0.7, "assumed: same family, 6× smaller draft", True),
    "qwen2.5-7b": PairModel("Qwen2.5-7B", "Qwen2.5-0.5B", 0.65, "assumed: same family, 15× smaller draft",
                            True),
}


@dataclass(frozen=True)
class GPU:
    """A card as the cost model sees it."""
    name: str  # torch.cuda.get_device_name
    memory_gib: float  # total memory as torch reports it (a little under the label)
    capability: tuple[int, int]  # compute capability: bfloat16 from (8, 0) on
    sheet: SpecSheet  # its spec sheet, or UNKNOWN_CARD
    sheet_name: str  # key of SPEC_SHEETS, or "none (assumed 300 GB/s)"

    @property
    def dtype(self) -> torch.dtype:
        """bfloat16 from compute capability 8.0 (Ampere) on, else float16 (a T4 has no bfloat16 units)."""
        return torch.bfloat16 if self.capability >= (8, 0) else torch.float16


def gpu_from_device(device: torch.device | str = "cuda") -> GPU:
    """Read the card's name, memory and compute capability (`torch.cuda.get_device_properties`)."""
    props = torch.cuda.get_device_properties(torch.device(device))
    found = spec_sheet_for(props.name)
    key, sheet = found if found else ("none (assumed 300 GB/s)", UNKNOWN_CARD)
    return GPU(props.name, props.total_memory / 2**30, (props.major, props.minor), sheet, key)


def step_seconds(shape: ModelShape, gpu: GPU, mode: str, tokens: int = 1, context: int = CONTEXT) -> float:
    """Eq. (1): one pass that scores `tokens` positions with `context` tokens cached, in 16-bit weights."""
    launch = shape.ops(mode) * LAUNCH_S
    memory = shape.bytes(2, context) / (gpu.sheet.bandwidth * BANDWIDTH_FRACTION)
    compute = 2 * shape.params * tokens / gpu.sheet.flops_16bit
    return max(launch, memory, compute)


@dataclass(frozen=True)
class Prediction:
    pair: str  # key of PAIR_MODELS
    mode: str  # cache mode: "dynamic" (eager) or "compiled"
    gamma: int  # draft tokens per iteration
    alpha: float  # α assumed
    c: float  # draft step / target step
    target_ms: float  # one target step, eq. (1)
    plain_ms: float  # per token of the best plain decoding of this target
    speedup: float  # eq. (2): against the fastest plain decoding of this target, in any mode
    same_mode: float  # against plain decoding in this same mode (what a chapter's eager-only run shows)
    fits: bool  # weights, KV cache and RESERVE_GIB fit the card's memory in gpu.dtype

    def __str__(self) -> str:
        return (f"{self.pair:11s} {self.mode:9s} γ={self.gamma}  α={self.alpha:.2f}  c={self.c:.3f}  "
                f"target {self.target_ms:6.2f} ms  plain {self.plain_ms:6.2f} ms/token  {self.speedup:.2f}× "
                f"({self.same_mode:.2f}× against plain {self.mode})"
                + ("" if self.fits else "  (does not fit)"))


def fits(pair: PairModel, gpu: GPU, bytes_per_param: int, context: int = 4096) -> bool:
    """Do both models' weights, their KV caches at `context` tokens and RESERVE_GIB fit the card?"""
    need = sum(SHAPES[m].bytes(bytes_per_param, context) for m in (pair.target, pair.draft))
    return need / 2**30 + RESERVE_GIB <= gpu.memory_gib


def _plain_ms(target: ModelShape, gpu: GPU, modes: tuple[str, ...]) -> float:
    return 1e3 * min(step_seconds(target, gpu, m) + PLAIN_LOOP_OPS * LAUNCH_S for m in modes)


def predict_pair_speedup(pair: str, gpu: GPU, mode: str, gamma: int | None = None, *,
                         alpha: float | None = None,
                         modes: tuple[str, ...] = ("dynamic", "compiled")) -> Prediction:
    """Eq. (2) for one pair (a key of PAIR_MODELS) in one cache mode: γ given, or the best of GAMMAS.

    The baseline is the fastest plain decoding of the same target over `modes`. α defaults to the pair's
    expected α (PAIR_MODELS; measured for the offline pair, assumed for Hub pairs).
    """
    if pair not in PAIR_MODELS:
        raise ValueError(f"unknown pair {pair!r}; the cost model knows {sorted(PAIR_MODELS)}")
    if mode not in OPS_PER_LAYER:
        raise ValueError(f"mode must be one of {sorted(OPS_PER_LAYER)}, got {mode!r}")
    p = PAIR_MODELS[pair]
    a = p.alpha if alpha is None else alpha
    if not 0 <= a < 1:
        raise ValueError(f"alpha must lie in [0, 1), got {a}")
    target, draft = SHAPES[p.target], SHAPES[p.draft]
    t1, td = step_seconds(target, gpu, mode), step_seconds(draft, gpu, mode)
    plain = _plain_ms(target, gpu, modes)

    def speedup(g: int) -> float:
        tokens = (1 - a ** (g + 1)) / (1 - a)  # E[tokens per iteration], Leviathan et al. 2023, eq. 1
        iteration = g * td + step_seconds(target, gpu, mode, tokens=g + 1) + LOOP_OPS[mode] * LAUNCH_S
        return plain / (1e3 * iteration / tokens)

    g = gamma if gamma is not None else max(GAMMAS, key=speedup)
    if g < 1:
        raise ValueError(f"gamma must be >= 1, got {g}")
    same = _plain_ms(target, gpu, (mode,)) / plain
    return Prediction(pair, mode, g, a, td / t1, 1e3 * t1, plain, speedup(g), speedup(g) * same,
                      fits(p, gpu, 2))


@dataclass
class Plan:
    """The choice for one card, with every candidate's prediction (best first)."""
    gpu: GPU
    pair: str  # key of loading.PAIRS, or "offline"
    dtype: torch.dtype  # float16 below compute capability 8.0, else bfloat16
    cache: str  # "dynamic" or "compiled"
    gamma: int  # the best draft length for that pair and mode
    speedup: float  # predicted, against the fastest plain decoding of the same target
    ranked: list[Prediction] = field(default_factory=list)  # every fitting candidate, best first

    def __str__(self) -> str:
        head = (f"{self.gpu.name} ({self.gpu.memory_gib:.2f} GiB, compute capability "
                f"{self.gpu.capability[0]}.{self.gpu.capability[1]}, sheet: {self.gpu.sheet_name}): "
                f"{self.pair} in {str(self.dtype).removeprefix('torch.')}, cache={self.cache!r}, "
                f"γ={self.gamma}, "
                f"predicted {self.speedup:.2f}×")
        return "\n".join([head] + [f"  {p}" for p in self.ranked])


def rank_pairs(gpu: GPU, draft: str = "auto") -> list[Prediction]:
    """Every candidate pair that fits, in each mode, best predicted speedup first.

    draft: as in `load_pair`: "auto"/"feature" offers the offline pair with its feature head, "lm" with
    the distilled LM draft.
    """
    offline = "offline/lm" if draft == "lm" else "offline"
    names = [offline] + [n for n in PAIR_MODELS if not n.startswith("offline")]
    preds = [predict_pair_speedup(n, gpu, m) for n in names for m in OPS_PER_LAYER]
    return sorted((p for p in preds if p.fits), key=lambda p: -p.speedup)


def plan(device: torch.device | str = "cuda", *, draft: str = "auto", gpu: GPU | None = None) -> Plan:
    """Pick the pair, dtype and cache mode with the highest predicted speedup on this card."""
    gpu = gpu or gpu_from_device(device)
    ranked = rank_pairs(gpu, draft)
    if not ranked:
        raise ValueError(f"no pair fits {gpu.name} ({gpu.memory_gib:.1f} GiB); "
                         "use PAIR = 'offline' on the CPU")
    best = ranked[0]
    return Plan(gpu, best.pair.split("/")[0], gpu.dtype, best.mode, best.gamma, best.speedup, ranked)


def spec_gpu(sheet_name: str, memory_gib: float, capability: tuple[int, int]) -> GPU:
    """A GPU from a SPEC_SHEETS entry, for tables of cards that are not here (chapter 4, the tests)."""
    sheet = SPEC_SHEETS[sheet_name]
    return GPU(sheet.device_names[0] if sheet.device_names else sheet_name, memory_gib, capability, sheet,
               sheet_name)
