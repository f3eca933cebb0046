"""Hugging Face assisted generation at the settings we ask for, and a count of what it really drafts.

In transformers 5, `AssistedCandidateGenerator` reads `num_assistant_tokens`,
`num_assistant_tokens_schedule` and `assistant_confidence_threshold` from the *draft's*
`generation_config` when a call starts; passed as `generate()` keywords they are silently ignored
(they land on the target's config, which the candidate generator never reads for them).
`assistant_settings` puts them on the draft for one call; `draft_lengths` counts, with forward hooks,
how many tokens the draft really proposed before each target pass.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

ASSISTANT_SETTINGS = (  # what transformers 5 reads from the draft's generation_config, never from generate()
    "num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
SCHEDULES = ("constant", "heuristic", "heuristic_transient")  # the schedules transformers knows


def constant_gamma(gamma: int) -> dict:
    """The settings that make Hugging Face draft exactly γ tokens every iteration, as our chain does."""
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma must be an int >= 1, got {gamma!r}")
    return {"num_assistant_tokens": gamma,  # the draft length...
            "num_assistant_tokens_schedule": "constant",  # ...never changed between iterations...
            "assistant_confidence_threshold": 0.0}  # ...and never cut short (no probability is below 0)


def _check(num_assistant_tokens, num_assistant_tokens_schedule, assistant_confidence_threshold) -> None:
    n = num_assistant_tokens
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"num_assistant_tokens must be an int >= 1 (the draft length), got {n!r}")
    if num_assistant_tokens_schedule is not None and num_assistant_tokens_schedule not in SCHEDULES:
        raise ValueError(f"num_assistant_tokens_schedule must be one of {SCHEDULES}, "
                         f"got {num_assistant_tokens_schedule!r}")
    t = assistant_confidence_threshold
    if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t <= 1):
        raise ValueError(f"assistant_confidence_threshold must be a probability in [0, 1], got {t!r}")


@contextlib.contextmanager
def assistant_settings(draft: torch.nn.Module, *, num_assistant_tokens: int | None = None,
                       num_assistant_tokens_schedule: str | None = None,
                       assistant_confidence_threshold: float | None = None) -> Iterator:
    """Inside the block, Hugging Face assisted generation with `draft` as assistant_model uses these settings.

    They go on `draft.generation_config`, where transformers 5 reads them; a setting left None keeps the
    draft's own (or Hugging Face's default). All three are put back when the block ends, even on an exception,
    and even after the "heuristic" schedule, which writes its learnt length back to the draft's config.
    Yields the draft's generation_config.

        with assistant_settings(draft, **constant_gamma(3)):
            target.generate(ids, assistant_model=draft, max_new_tokens=64)
    """
    config = getattr(draft, "generation_config", None)
    if config is None:
        raise ValueError("assistant_settings needs a Hugging Face causal LM with a generation_config as the "
                         f"draft (the model you pass as assistant_model), got {type(draft).__name__}")
    _check(num_assistant_tokens, num_assistant_tokens_schedule, assistant_confidence_threshold)
    new = dict(num_assistant_tokens=num_assistant_tokens,
               num_assistant_tokens_schedule=num_assistant_tokens_schedule,
               assistant_confidence_threshold=assistant_confidence_threshold)
    saved = {key: getattr(config, key, None) for key in ASSISTANT_SETTINGS}
    try:
        for key, value in new.items():
            if value is not None:
                setattr(config, key, value)
        yield config
    finally:
        for key, value in saved.items():
            setattr(config, key, value)


def draft_lengths(target: torch.nn.Module, draft: torch.nn.Module, run) -> list[int]:
    """Run `run()` -> the draft's forward passes before each of the target's, one entry per target pass.

    In Hugging Face assisted generation each drafted token costs the draft one forward pass and each
    iteration costs the target one, so this is the draft length of every iteration.
    """
    events: list[str] = []
    handles = [target.register_forward_hook(lambda *_: events.append("target")),
               draft.register_forward_hook(lambda *_: events.append("draft"))]
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    lengths, n = [], 0
    for event in events:
        if event == "draft":
            n += 1
        else:
            lengths, n = lengths + [n], 0
    return lengths
