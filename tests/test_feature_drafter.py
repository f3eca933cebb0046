"""The feature drafter (EAGLE-style): it drafts from the target's hidden states, keeps its cache in step with
the loop, and speculative decoding with it stays exact."""
import pytest
import torch

import specdec_ref as sd
from specdec_ref.drafters import FeatureDrafter
from specdec_ref.lab.broken import using_verify, verify_without_residual
from specdec_ref.lab.stats import SIGNIFICANCE, chi_square_gof, speculative_sequence_counts
from specdec_ref.models.feature_draft import FeatureHead
from specdec_ref.models.toy import exact_sequence_distribution, tiny_llama

GREEDY = sd.SamplingConfig(temperature=0)


def toy_head(target, seed=0):
    torch.manual_seed(seed)  # construction only
    return FeatureHead(target).eval()


@pytest.mark.parametrize("gamma", [1, 2, 3, 5])
def test_greedy_with_feature_drafter_equals_greedy_target(gamma):
    for seed in range(2):
        target = tiny_llama(8, seed=seed, hidden=32, n_layers=2)
        ids = torch.tensor([[seed + 1, 2, 3, 4]])
        plain = sd.autoregressive_generate(target, ids, 30, sampling=GREEDY).tokens.tolist()
        out = sd.speculative_generate(target, FeatureDrafter(toy_head(target, seed)), ids, 30, gamma=gamma,
                                      sampling=GREEDY)
        assert out.tokens.tolist() == plain
        assert max(out.stats.drafted) == gamma  # it really drafted (after the prefill iteration)


def test_first_iteration_is_the_targets_prefill():
    target = tiny_llama(8, seed=0, hidden=32)
    steps = []
    sd.speculative_generate(target, FeatureDrafter(toy_head(target)), torch.tensor([[1, 2, 3]]), 6, gamma=3,
                            sampling=GREEDY, on_step=steps.append)
    assert steps[0].draft_tokens.shape[0] == 0 and steps[1].draft_tokens.shape[0] > 0


@torch.inference_mode()
@pytest.mark.parametrize("keep_ids,sampling", [
    (None, sd.SamplingConfig(1.0)), ([0, 2, 3, 5, 6], sd.SamplingConfig(1.0)),
    ([1, 2, 4, 7], sd.SamplingConfig(0.7, top_k=3)), ([0, 1, 3, 4, 6], sd.SamplingConfig(1.0, top_p=0.8))])
def test_drafts_match_a_from_scratch_computation_at_every_iteration(keep_ids, sampling):
    """The cached, incremental drafter proposes exactly what the head computes from the target's features
    of the whole context in one uncached pass: its cache holds only real features, aligned with the tokens.
    A head over part of the vocabulary (`keep_ids`) draws over its own tokens, and its rows are what
    `logits_to_probs` makes of the full row (-inf off `keep_ids`)."""
    target = tiny_llama(8, seed=1, hidden=32, n_layers=2)
    torch.manual_seed(1)  # construction only
    head = FeatureHead(target, keep_ids=None if keep_ids is None else torch.tensor(keep_ids)).eval()
    steps = []
    ids = torch.tensor([[1, 2, 3, 4]])
    out = sd.speculative_generate(target, FeatureDrafter(head), ids, 30, gamma=3,
                                  sampling=sampling, generator=torch.Generator().manual_seed(0),
                                  on_step=steps.append)
    seq = torch.cat([ids[0], out.tokens])
    hidden = target(input_ids=seq[None], output_hidden_states=True).hidden_states[-1]  # [1, T, d]
    checked = 0
    for s in steps[1:]:
        if s.draft_tokens.shape[0] == 0:  # the last iteration may have no room left to draft
            continue
        T = s.context_len
        f = head(hidden[:, :T - 1], seq[None, 1:T])[0, -1]  # [d] from scratch, no cache
        want = sd.logits_to_probs(head.logits(f), sampling)
        assert torch.allclose(s.draft_probs[0], want, atol=1e-6)
        if keep_ids is not None:
            assert set(s.draft_tokens.tolist()) <= set(keep_ids)
        checked += 1
    assert checked >= 5


@pytest.mark.slow
@pytest.mark.parametrize("keep_ids,sharpness", [(None, 1.0), ([0, 2], 1.0), (None, 2.5)])
def test_feature_drafter_sequences_match_exact_target_distribution(keep_ids, sharpness):
    """Also with a head that can propose only tokens 0 and 2 (token 1 then comes only from the residual), and
    with its q sharpened (another q: the output must not change)."""
    target = tiny_llama(3, seed=0)
    prompt, n_tokens, sampling = [1, 2, 0], 5, sd.SamplingConfig(1.0)
    exact = exact_sequence_distribution(target, prompt, n_tokens, sampling)

    def drafter():
        torch.manual_seed(0)  # construction only
        return FeatureDrafter(FeatureHead(target, keep_ids=None if keep_ids is None
                                          else torch.tensor(keep_ids)).eval(), sharpness=sharpness)
    counts = speculative_sequence_counts(target, drafter(), prompt, n_tokens, 3,
                                         sampling, 2000, torch.Generator().manual_seed(0))
    assert not chi_square_gof(counts, exact).rejects(SIGNIFICANCE)  # fixed seed, level 0.001
    # power: the same test catches a broken verify with this drafter
    with using_verify(verify_without_residual):
        bad = speculative_sequence_counts(target, drafter(), prompt, n_tokens, 3,
                                          sampling, 2000, torch.Generator().manual_seed(0))
    assert chi_square_gof(bad, exact).rejects(SIGNIFICANCE)


@torch.inference_mode()
def test_sharpness_draws_from_the_heads_logits_times_it_in_chains_and_trees_and_greedy_ignores_it():
    target = tiny_llama(8, seed=1, hidden=32, n_layers=2)
    head = toy_head(target, seed=1)
    ids, sampling = torch.tensor([[1, 2, 3, 4]]), sd.SamplingConfig(1.0)
    for sharpness in (0.5, 3.0):
        steps = []
        out = sd.speculative_generate(target, FeatureDrafter(head, sharpness=sharpness), ids, 20, gamma=2,
                                      sampling=sampling, generator=torch.Generator().manual_seed(0),
                                      on_step=steps.append)
        seq = torch.cat([ids[0], out.tokens])
        hidden = target(input_ids=seq[None], output_hidden_states=True).hidden_states[-1]  # [1, T, d]
        s = next(s for s in steps[1:] if s.draft_tokens.shape[0])
        f = head(hidden[:, :s.context_len - 1], seq[None, 1:s.context_len])[0, -1]  # [d]
        want = (sharpness * head.logits(f)).softmax(-1)
        assert torch.allclose(s.draft_probs[0], want, atol=1e-6)
        assert not torch.allclose(s.draft_probs[0], head.logits(f).softmax(-1), atol=1e-3)  # power
        # a tree's children are drawn from the same sharpened q: the root's row
        drafter = FeatureDrafter(head, sharpness=sharpness)
        drafter.sync(0)
        drafter.sync(s.context_len - 1, hidden[0, :s.context_len - 1])
        _, _, q = drafter.propose_tree(seq[:s.context_len], sd.TreeBudget(2, 2, 3), sampling,
                                       torch.Generator().manual_seed(0))
        assert torch.allclose(q[0], want, atol=1e-6)
    plain = sd.autoregressive_generate(target, ids, 20, sampling=GREEDY).tokens
    for method in (dict(gamma=3), dict(tree=sd.TreeBudget(2, 2, 3))):
        out = sd.speculative_generate(target, FeatureDrafter(head, sharpness=3.0), ids, 20, sampling=GREEDY,
                                      **method)
        assert torch.equal(out.tokens, plain)
    for bad in (0, -1.0, float("nan"), float("inf"), "2"):
        with pytest.raises(ValueError, match="sharpness"):
            FeatureDrafter(head, sharpness=bad)


def test_confidence_stop_drafts_fewer_tokens_and_stays_exact_for_greedy():
    target = tiny_llama(8, seed=0, hidden=32, n_layers=2)
    ids = torch.tensor([[1, 2, 3, 4]])
    plain = sd.autoregressive_generate(target, ids, 30, sampling=GREEDY).tokens.tolist()
    full = sd.speculative_generate(target, FeatureDrafter(toy_head(target)), ids, 30, gamma=4,
                                   sampling=GREEDY)
    short = sd.speculative_generate(target, FeatureDrafter(toy_head(target), confidence_stop=0.99), ids, 30,
                                    gamma=4, sampling=GREEDY)
    assert short.tokens.tolist() == full.tokens.tolist() == plain
    assert sum(short.stats.drafted) < sum(full.stats.drafted)  # a random head is never 99% sure: one per step
    with pytest.raises(ValueError, match="confidence_stop"):
        FeatureDrafter(toy_head(target), confidence_stop=1.5)


def test_recorded_sharpness_reads_quality_json_and_defaults_to_one(tmp_path):
    import json

    from specdec_ref.models.feature_draft import recorded_sharpness
    assert recorded_sharpness(tmp_path) == 1.0  # no quality.json
    (tmp_path / "quality.json").write_text(json.dumps({"tau": {}}))
    assert recorded_sharpness(tmp_path) == 1.0  # recorded before sharpness was fitted
    (tmp_path / "quality.json").write_text(json.dumps({"draft_sharpness": {"s": 1.3}}))
    assert recorded_sharpness(tmp_path) == 1.3
