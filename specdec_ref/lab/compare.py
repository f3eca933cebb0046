"""Comparing drafts of one target (chapter 5): α along the target's own answers for any drafter, then one row
per draft with its cost ratio c, its best γ and the speedup it really gives. And two verification rules on
the very same drafted chains (chapter 3, `block_and_token_taus`)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..cache import CachedModel
from ..generate import as_drafter, autoregressive_generate, speculative_generate
from ..sampling import SamplingConfig, logits_to_probs
from ..verify import expected_accepted
from .bench import cost_ratio
from .speedup import best_gamma

T1 = SamplingConfig(temperature=1.0)


@torch.inference_mode()
def target_answers(target, encoded: list[torch.Tensor], max_new_tokens: int, eos_token_id=None,
                   sampling: SamplingConfig = SamplingConfig(0), seed: int = 0,
                   ) -> list[tuple[torch.Tensor, int]]:  # [1, T] each -> [(prompt + answer [T + n], T)]
    """The target's answers, with their prompts: the text every draft is scored along. Greedy by default;
    sampled, prompt i draws with a CPU generator seeded seed + i."""
    out = []
    for i, ids in enumerate(encoded):
        generator = None if sampling.greedy else torch.Generator().manual_seed(seed + i)
        new = autoregressive_generate(target, ids, max_new_tokens, sampling=sampling, generator=generator,
                                      eos_token_id=eos_token_id).tokens
        out.append((torch.cat([ids[0], new]), ids.shape[1]))
    return out


@torch.inference_mode()
def alpha_along(target, draft, sequences: list[tuple[torch.Tensor, int]]) -> tuple[float, float, float]:
    """Teacher-forced α of any drafter along the target's answers -> (α greedy, α at T=1, fraction proposed).

    At every answer position the drafter proposes one token from the true context. Greedy: accepted iff it is
    the target's argmax. T=1: accepted with probability Σ_x min(target_probs, draft_probs) (chapter 3).
    Positions where the drafter proposes nothing (prompt lookup with no match) cost nothing and are not
    counted.
    """
    drafter = as_drafter(draft)
    hits = overlap = n = positions = 0.0
    for seq, n_prompt in sequences:  # seq [T]
        logits = target(input_ids=seq[None]).logits[0].float()  # [T, V]
        feats = None
        if drafter.wants_target_hidden:  # an EAGLE-style drafter reads the target's features
            lm = CachedModel(target, keep_hidden=drafter.wants_target_hidden)
            lm.logits(seq)
            feats = lm.hidden  # [T, d]
        drafter.sync(0)
        for t in range(n_prompt, seq.shape[0]):  # propose token t from seq[:t]
            drafter.sync(t - 1, feats[:t - 1] if feats is not None else None)
            tokens, draft_probs = drafter.propose(seq[:t], 1, T1)  # [≤1], [≤1, V]
            positions += 1
            if tokens.shape[0] == 0:
                continue
            target_probs = logits_to_probs(logits[t - 1], T1)  # [V]
            hits += float(draft_probs[0].argmax() == target_probs.argmax())  # greedy: the draft's argmax
            overlap += float(torch.minimum(target_probs, draft_probs[0].to(target_probs.dtype)).sum())
            n += 1
        drafter.sync(0)
    return (hits / n, overlap / n, n / positions) if n else (float("nan"), float("nan"), 0.0)


@dataclass
class DraftRow:
    """One draft on the (α, c) plane, with the γ the textbook formula picks and the speedup measured there."""
    name: str  # which draft
    alpha_greedy: float  # teacher-forced α at draft position 1, greedy
    alpha_t1: float  # teacher-forced α at draft position 1, T=1 (1 - total variation on full distributions)
    coverage: float  # fraction of positions where it proposed anything (1 for model drafts)
    c: float  # one draft step / one target step
    gamma: int = 1  # best γ by the textbook formula (greedy α); 1 where none pays off
    predicted: float = 1.0  # the textbook speedup at that γ
    measured: float | None = None  # measured speedup over plain greedy decoding at that γ


def draft_row(name: str, target, draft, sequences, calibration: torch.Tensor, repeats: int = 10,
              gamma_max: int = 8) -> DraftRow:
    """α (greedy and T=1), c and the best γ of one draft; `measured` is filled in by the caller's timed
    run."""
    a_greedy, a_t1, coverage = alpha_along(target, draft, sequences)
    c = cost_ratio(target, draft, calibration, repeats)
    gamma, s = best_gamma(min(a_greedy, 1.0), c, gamma_max=gamma_max)
    return DraftRow(name, a_greedy, a_t1, coverage, c, gamma if s > 1 else 1, s if s > 1 else
                    best_gamma(min(a_greedy, 1.0), c, gamma_max=1)[1])


def launch_bound_step(n_ops: int, weight_bytes: int, bandwidth: float, launch_seconds: float = 5e-6) -> float:
    """A decode step on a GPU, on paper: one kernel launch per torch operation, plus the weights at full
    bandwidth.

    A rough model for small models (each kernel costs at least a launch, whatever data it touches): use it
    where no GPU is present, with the operation count measured here and a spec-sheet bandwidth.
    """
    return n_ops * launch_seconds + weight_bytes / bandwidth


def block_and_token_taus(target, draft, encoded: list[torch.Tensor], gammas: list[int],
                         sampling: SamplingConfig, max_new_tokens: int,
                         seed: int = 0) -> dict[int, dict[str, float]]:
    """γ -> {"iterations", "token", "block"}: τ (1 + the draft tokens kept per iteration) under token-by-token
    and block verification, judged exactly on the same chains (`verify.expected_accepted`), no random draw
    between the rules. The chains are drafted inside the ordinary loop at `sampling` (T > 0), prompt i seeded
    seed + i on the models' device; an iteration that drafted fewer than γ (at the end of a generation) is
    left out."""
    if sampling.greedy:
        raise ValueError("block and token verification keep the same tokens at temperature 0: give T > 0")
    out = {}
    for gamma in gammas:
        kept: dict[str, list[float]] = {"token": [], "block": []}

        def judge(step):
            if step.n_drafted == gamma:
                rows = step.draft_tokens, step.draft_probs, step.target_probs
                for rule, values in kept.items():
                    values.append(expected_accepted(*rows, rule))

        for i, ids in enumerate(encoded):
            g = torch.Generator(device=ids.device).manual_seed(seed + i)
            speculative_generate(target, draft, ids, max_new_tokens, gamma=gamma, sampling=sampling,
                                 generator=g, on_step=judge)
        n = len(kept["token"])
        out[gamma] = {"iterations": n, **{rule: 1 + sum(v) / max(n, 1) for rule, v in kept.items()}}
    return out
