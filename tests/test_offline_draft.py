"""The shipped offline draft: it loads offline, matches the target's vocabulary, can be retrained, and keeps
speculative decoding exact on the real model."""
import socket
import warnings
from collections import Counter

import pytest
import torch
from transformers import LlamaForCausalLM

import specdec_ref as sd
from specdec_ref.distill import train as train_draft
from specdec_ref.models import offline_draft
from specdec_ref.lab.broken import verify_without_residual
from specdec_ref.distill.prompts import HELD_OUT
from specdec_ref import vocab_size
from specdec_ref.lab.stats import SIGNIFICANCE, chi_square_gof, emitted_token_counts


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("the offline draft must not touch the network")
    monkeypatch.setattr(socket.socket, "connect", refuse)


def test_shipped_draft_loads_offline_with_the_targets_vocabulary(offline_pair, no_network):
    target, _, tok = offline_pair
    assert offline_draft.available()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the placeholder warning must not fire
        draft = offline_draft.load(target)
    assert isinstance(draft, LlamaForCausalLM)
    assert vocab_size(draft) == vocab_size(target) == len(tok) == draft.config.vocab_size
    assert draft.device == target.device and draft.dtype == target.dtype
    assert draft.get_input_embeddings() is target.get_input_embeddings()  # shared, not shipped
    ids = sd.encode_chat(tok, HELD_OUT[0])
    with torch.inference_mode():
        logits = draft(input_ids=ids).logits  # [1, T, V]
    assert logits.shape == (1, ids.shape[1], len(tok))
    kept = torch.zeros(len(tok), dtype=torch.bool)
    kept[draft.lm_head.keep_ids] = True
    assert torch.isfinite(logits[..., kept]).all() and torch.isneginf(logits[..., ~kept]).all()
    assert tok.eos_token == "<|im_end|>", \
        "a chat turn ends with <|im_end|> (whatever the GGUF converter said)"
    assert kept[tok.eos_token_id], "the draft must be able to propose EOS"


@pytest.mark.slow
def test_load_offline_pair_returns_the_distilled_draft_without_warning(no_network):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        target, draft, tok = sd.load_offline_pair(draft="lm")
    assert isinstance(draft.lm_head, offline_draft.ReducedHead)


def test_shipped_weights_fit_the_size_budget():
    total = sum(p.stat().st_size for p in offline_draft.WEIGHTS_DIR.iterdir())
    assert total <= 30 * 2**20, f"shipped draft is {total / 2**20:.1f} MiB, the budget is 30 MiB"


def test_quick_training_run_lowers_the_loss_and_resumes(offline_pair, tmp_path):
    target, _, tok = offline_pair
    cfg = train_draft.TrainConfig(out=str(tmp_path), **train_draft.QUICK)
    _, curve = train_draft.run(cfg, target, tok)
    assert curve[0]["step"] == 0 and curve[-1]["step"] == cfg.steps
    assert curve[-1]["val_kl"] < curve[0]["val_kl"], curve
    assert (tmp_path / "ckpt.pt").exists() and (tmp_path / "train.log").exists()
    _, again = train_draft.run(cfg, target, tok)  # a rerun resumes from the checkpoint: nothing left to do
    assert again == curve
    assert "resumed from step" in (tmp_path / "train.log").read_text()


def _hard_prefix(target, draft, tok):
    """A real chat prefix (prompt + part of the target's answer) where the draft disagrees most with the
    target."""
    ids = sd.encode_chat(tok, HELD_OUT[1])
    answer = sd.autoregressive_generate(target, ids, 24, sampling=sd.SamplingConfig(0),
                                        eos_token_id=tok.eos_token_id).tokens
    seq = torch.cat([ids[0], answer])
    with torch.inference_mode():
        t = sd.logits_to_probs(target(input_ids=seq[None]).logits[0, ids.shape[1] - 1:-1],
                               sd.SamplingConfig(1.0))
        d = sd.logits_to_probs(draft(input_ids=seq[None]).logits[0, ids.shape[1] - 1:-1],
                               sd.SamplingConfig(1.0))
    overlap = torch.minimum(t, d).sum(-1)  # [n] acceptance probability at each position
    i = int(overlap.argmin())
    return _coarsen(t[i]), _coarsen(d[i], t[i]), float(overlap[i])


# [V] -> [m+1]
def _coarsen(row: torch.Tensor, ref: torch.Tensor | None = None, m: int = 256) -> torch.Tensor:
    """Keep the m tokens the target ranks highest and pool the rest of the vocabulary into one last bin.

    The pooled rows are still the real model's distributions, only on a coarser alphabet, and each
    verify call then works on 257 entries instead of 49,152 (the Monte Carlo runs in seconds).
    """
    top = (row if ref is None else ref).topk(m).indices  # [m]
    head = row[top]
    return torch.cat([head, (1 - head.sum()).clamp(min=0)[None]])


def _first_token_counts(verify_fn, target_row, draft_row, n: int, seed: int) -> Counter:
    return emitted_token_counts(verify_fn, target_row, draft_row, n, torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def real_prefix(offline_pair):
    target, draft, tok = offline_pair
    return _hard_prefix(target, draft, tok)


def test_verify_with_shipped_draft_emits_target_distribution_by_chi_square(real_prefix):
    target_row, draft_row, overlap = real_prefix
    assert overlap < 0.9, "pick a prefix where the draft is wrong often enough for the test to have power"
    counts = _first_token_counts(sd.verify, target_row, draft_row, 12000, seed=0)
    result = chi_square_gof(counts, {i: float(p) for i, p in enumerate(target_row) if p > 0})
    assert not result.rejects(SIGNIFICANCE), str(result)  # SIGNIFICANCE = 0.001, fixed seed


def test_chi_square_at_real_prefix_rejects_sampler_without_residual(real_prefix):
    target_row, draft_row, _ = real_prefix
    counts = _first_token_counts(verify_without_residual, target_row, draft_row, 12000, seed=0)
    result = chi_square_gof(counts, {i: float(p) for i, p in enumerate(target_row) if p > 0})
    assert result.rejects(SIGNIFICANCE), f"verify_without_residual was not caught: {result}"


def test_shipped_feature_head_fits_the_size_budget_and_loads_offline(offline_pair, no_network):
    """The EAGLE-style head ships as float16 safetensors (fc + one layer; embedding and head rows are the
    target's own) and drafts through the same loop, token for token equal to plain greedy decoding."""
    from specdec_ref.drafters import FeatureDrafter
    from specdec_ref.models import feature_draft
    if not feature_draft.available():
        pytest.fail("the feature head's weights are missing from specdec_ref/models/weights/feature_draft")
    total = sum(p.stat().st_size for p in feature_draft.WEIGHTS_DIR.iterdir())
    assert total <= 30 * 2**20, f"shipped feature head is {total / 2**20:.1f} MiB, the budget is 30 MiB"
    target, _, tok = offline_pair
    head = feature_draft.load(target)
    assert head.vocab_size == vocab_size(target) == len(tok)
    ids = sd.encode_chat(tok, HELD_OUT[2])
    greedy = sd.SamplingConfig(0)
    plain = sd.autoregressive_generate(target, ids, 24, sampling=greedy).tokens
    out = sd.speculative_generate(target, FeatureDrafter(head), ids, 24, gamma=3, sampling=greedy)
    assert out.tokens.tolist() == plain.tolist()
    assert sum(out.stats.accepted) > 0  # a trained head: some of its guesses are right
