"""Hugging Face assisted generation drafts the γ we ask for, through `lab.hf.assistant_settings`.

transformers 5 reads the assistant's settings from the draft's generation_config and ignores them as
`generate()` keywords. We count forward passes with hooks: each drafted token costs the draft one pass,
each iteration costs the target one.
"""
import copy

import pytest
import torch

from specdec_ref.lab import bench
from specdec_ref.lab.hf import ASSISTANT_SETTINGS, assistant_settings, constant_gamma
from specdec_ref.models.toy import tiny_llama
from specdec_ref.sampling import SamplingConfig

PROMPT = torch.tensor([[1, 2, 3, 4]])  # [1, T]
NEW_TOKENS = 30  # every draft is rejected on this pair, so 30 iterations: one target pass per new token


@pytest.fixture(scope="module")
def never_right_pair():
    """A tiny random Llama, and a copy whose LM head is shifted by one token and flattened (× 0.01).

    The draft's greedy token is never the target's, so every draft is rejected and each iteration emits one
    token: the counts have no luck in them. Its top probability is about 1/8, under Hugging Face's default
    confidence stop (0.4), so with the defaults every draft stops after one token. And since nothing is ever
    accepted, scikit-learn (if installed) has no positive example to move that threshold with.
    """
    target = tiny_llama(8, seed=0, hidden=16, dtype=torch.float32)
    draft = copy.deepcopy(target)
    with torch.no_grad():  # [V, d]: the draft's row i is the target's row i - 1
        draft.lm_head.weight.copy_(0.01 * target.lm_head.weight.roll(1, dims=0))
    return target, draft


def passes(target, draft, **keywords) -> list[int]:
    """Greedy assisted generation -> the draft's forward passes before each target forward pass."""
    events = []
    handles = [target.register_forward_hook(lambda *_: events.append("target")),
               draft.register_forward_hook(lambda *_: events.append("draft"))]
    try:
        target.generate(PROMPT, attention_mask=torch.ones_like(PROMPT), max_new_tokens=NEW_TOKENS,
                        min_new_tokens=0, do_sample=False, assistant_model=draft, **keywords)
    finally:
        for h in handles:
            h.remove()
    lengths, n = [], 0
    for event in events:
        n, lengths = (n + 1, lengths) if event == "draft" else (0, lengths + [n])
    return lengths


@pytest.mark.parametrize("gamma", [3, 5])
def test_assistant_settings_make_hf_draft_gamma_tokens_per_target_pass(never_right_pair, gamma):
    target, draft = never_right_pair
    with assistant_settings(draft, **constant_gamma(gamma)):
        lengths = passes(target, draft)
    assert len(lengths) == NEW_TOKENS  # one target pass per new token: every draft was rejected
    assert lengths[:NEW_TOKENS - gamma] == [gamma] * (NEW_TOKENS - gamma)
    assert lengths[NEW_TOKENS - gamma:] == list(range(gamma - 1, -1, -1))  # room: NEW_TOKENS - 1 - iteration
    assert gamma - 1 < sum(lengths) / len(lengths) <= gamma


@pytest.mark.parametrize("gamma", [3, 5])
def test_generate_keywords_alone_leave_hf_at_its_defaults(never_right_pair, gamma):
    """Power: the keyword route, which transformers 5 ignores, stays near 1 draft pass per target pass."""
    target, draft = never_right_pair
    as_keywords = passes(target, draft, **constant_gamma(gamma))
    assert as_keywords == passes(target, draft)  # exactly what no settings at all do
    assert sum(as_keywords) / len(as_keywords) < 1.5  # the default confidence stop ends every draft at one


def test_assistant_settings_restore_the_drafts_config_even_after_an_exception(never_right_pair):
    target, draft = never_right_pair
    config = draft.generation_config
    config.num_assistant_tokens_schedule = "heuristic"  # the draft's own setting, as some checkpoints carry
    before = {key: getattr(config, key) for key in ASSISTANT_SETTINGS}
    try:
        with assistant_settings(draft, num_assistant_tokens=4) as inside:
            assert inside is config and config.num_assistant_tokens == 4
            assert config.num_assistant_tokens_schedule == "heuristic"  # left None: the draft's own is kept
            passes(target, draft)  # the heuristic schedule writes its learnt length back to the config
            assert config.num_assistant_tokens != 4
        assert {key: getattr(config, key) for key in ASSISTANT_SETTINGS} == before
        with pytest.raises(RuntimeError, match="inside"):
            with assistant_settings(draft, **constant_gamma(3)):
                raise RuntimeError("inside")
        assert {key: getattr(config, key) for key in ASSISTANT_SETTINGS} == before
    finally:
        config.num_assistant_tokens_schedule = None


def test_assistant_settings_reject_bad_values_by_name(never_right_pair):
    _, draft = never_right_pair
    for bad, name in ((dict(num_assistant_tokens=0), "num_assistant_tokens"),
                      (dict(num_assistant_tokens_schedule="fixed"), "num_assistant_tokens_schedule"),
                      (dict(assistant_confidence_threshold=1.5), "assistant_confidence_threshold")):
        with pytest.raises(ValueError, match=name):
            with assistant_settings(draft, **bad):
                pass
    with pytest.raises(ValueError, match="generation_config"):
        with assistant_settings(torch.nn.Linear(2, 2), num_assistant_tokens=3):
            pass
    with pytest.raises(ValueError, match="gamma"):
        constant_gamma(0)


def test_hf_generate_refuses_the_keywords_transformers_ignores(never_right_pair):
    target, draft = never_right_pair
    with pytest.raises(ValueError, match="assistant_settings"):
        bench.hf_generate(target, PROMPT, 4, SamplingConfig(temperature=0), None, assistant_model=draft,
                          num_assistant_tokens=3)
