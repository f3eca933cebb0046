"""How this machine uses a compiled package, decided by timing it once, on its first load, and kept beside it.

Two questions, one measurement (`measure_steps`: one new token scored after a short context, through the
package as a 1-row pass, as a 2-row pass, and through the eager model, round by round):

* **Does one new token run as a 2-row pass?** A package can cost more for one row than for two: on a 2-core
  AMD EPYC Zen 4 (AVX512-BF16) a pass of the offline target cost 16.9 ms for 1 row and 13.4 ms for 2 after
  128 tokens (23.2 and 16.6 after 400; book/measurement_log.md). Those packages attended over the whole KV
  buffers; since `aot.FORMAT` 6 they attend over the positions in use (`aot.compiled_attention`), and on that
  machine one row and two cost the same (9.22 and 9.24 ms on the first load), so one row runs as one. Where
  one row costs more, plain decoding scores the token before again with the new one (its keys and values are
  written again, the same up to rounding). SPECDEC_AOT_PAD=0 or 1 decides instead.
* **Is the package faster than the eager model at all?** On that Zen 4 it decoded 2.3 times as fast as the
  eager model with oneDNN's prepacked weights. On a 2-core AMD EPYC of family 26 (Zen 5, whose AVX-512 units
  are twice as wide) the eager model was the faster, 68.0 against 55.4 tokens/s
  (`scripts/eager_or_compiled.py`), and scored up to 8 rows for little more than one, where the package's cost
  rose by a third: there every method, plain and speculative, ran faster without it
  (book/measurement_log.md). So the package is used only where it scores one new token for less than
  EAGER_MARGIN of the eager model's step; SPECDEC_AOT=1 uses it regardless.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Callable, NamedTuple

import torch

from ..cache import CachedModel

PAD_MARGIN = 0.95  # one new token gets a 2-row pass only if that costs at most this share of a 1-row pass
EAGER_MARGIN = 0.97  # the package is used only if its step costs at most this share of the eager model's


class Use(NamedTuple):
    pad_single: bool  # one new token runs as a 2-row pass
    faster_than_eager: bool  # the package decodes faster than the eager model here


def pad_pays(t1: float, t2: float) -> bool:
    """Whether scoring one new token in a pass of 2 rows (the token before it again) beats a pass of 1 row,
    from their measured seconds: by more than the noise of a short measurement (PAD_MARGIN)."""
    return t2 <= PAD_MARGIN * t1


def beats_eager(compiled: float, eager: float) -> bool:
    """Whether the package's step for one new token (its better of 1 and 2 rows) beats the eager model's, by
    more than the noise of a short measurement (EAGER_MARGIN)."""
    return compiled <= EAGER_MARGIN * eager


def measure_steps(model, compiled: CachedModel, context: int = 64,
                  rounds: int = 12) -> tuple[float, float, float]:
    """Median seconds of one new token after `context` random tokens: through the package (`compiled`, an
    `aot.CompiledCachedModel` of it, unpadded) as a 1-row and as a 2-row pass, and through the eager model (a
    dynamic cache), in turn, round after round."""
    eager = CachedModel(model)
    g, device = torch.Generator().manual_seed(0), next(model.parameters()).device
    ids = torch.randint(0, model.config.vocab_size, (context + 1,), generator=g).to(device)
    passes = ((compiled, 1), (compiled, 2), (eager, 1))  # (model, rows)
    times: tuple[list[float], ...] = ([], [], [])
    with torch.inference_mode():
        compiled.logits(ids[:context], keep=1)
        eager.logits(ids[:context], keep=1)
        for r in range(rounds + 2):  # the first two rounds warm up
            for (lm, rows), t in zip(passes, times):
                lm.rollback(context + 1 - rows)
                start = time.perf_counter()
                lm.logits(ids, keep=1)
                if r >= 2:
                    t.append(time.perf_counter() - start)
    return tuple(sorted(t)[len(t) // 2] for t in times)


def first_load(model, compiled: Callable[[], CachedModel], path: Path) -> Use:
    """How the package at `path` is used here: measured once (`measure_steps` on `compiled()`, a fresh
    `aot.CompiledCachedModel` of it), on its first load, and kept beside it (`<package>.json`); a record
    without both answers is measured again."""
    sidecar = path.with_suffix(".json")
    try:
        saved = json.loads(sidecar.read_text())
        use = Use(bool(saved["pad_single_rows"]), bool(saved["faster_than_eager"]))
    except (OSError, ValueError, KeyError, TypeError):
        t1, t2, eager = measure_steps(model, compiled())
        use = Use(pad_pays(t1, t2), beats_eager(min(t1, t2), eager))
        tmp = sidecar.with_suffix(".partial.json")
        tmp.write_text(json.dumps({"t1_ms": round(t1 * 1e3, 3), "t2_ms": round(t2 * 1e3, 3),
                                   "eager_ms": round(eager * 1e3, 3), "pad_single_rows": use.pad_single,
                                   "faster_than_eager": use.faster_than_eager, "margin": PAD_MARGIN,
                                   "eager_margin": EAGER_MARGIN}))
        tmp.replace(sidecar)
        if not use.faster_than_eager:
            print(f"the compiled pass ({path.name}) scores a token in {min(t1, t2) * 1e3:.1f} ms here, "
                  f"the eager model in {eager * 1e3:.1f} ms: the loops run the eager model (SPECDEC_AOT=1 "
                  "uses the compiled pass anyway)", file=sys.stderr)
    forced = os.environ.get("SPECDEC_AOT_PAD")
    return use._replace(pad_single=forced == "1") if forced in ("0", "1") else use
