"""Coverage@k per depth: monotone in k, a path rate never above its depth's rate, and an exact head covers
all."""
import pytest
import torch

from specdec_ref.lab.compare import target_answers
from specdec_ref.lab.coverage import coverage_by_depth
from specdec_ref.models.feature_draft import FeatureHead
from specdec_ref.models.toy import tiny_llama


@pytest.fixture(scope="module")
def target():
    return tiny_llama(8, seed=0, hidden=32, n_layers=2, max_positions=128)


def test_coverage_is_monotone_in_k_and_paths_never_exceed_depths(target):
    torch.manual_seed(0)
    head = FeatureHead(target).eval()
    seqs = target_answers(target, [torch.tensor([[1, 2, 3]]), torch.tensor([[4, 5]])], 20)
    cov = coverage_by_depth(target, head, seqs, depth=3, ks=(1, 2, 4, 8))
    assert cov.positions == sum(s.shape[0] - max(n, 2) for s, n in seqs)
    for d in range(3):
        values = [cov.by_depth[d][k] for k in cov.ks]
        assert values == sorted(values) and values[-1] == 1.0  # top-8 of 8 tokens covers everything
        assert all(cov.path[d][k] <= cov.by_depth[d][k] + 1e-12 for k in cov.ks)
        if d:
            assert all(cov.path[d][k] <= cov.path[d - 1][k] + 1e-12 for k in cov.ks)
    assert "depth" in cov.table()


def test_bad_arguments_are_refused(target):
    with pytest.raises(ValueError, match="depth"):
        coverage_by_depth(target, FeatureHead(target), [], depth=0)


def test_acceptance_by_sharpness_is_the_overlap_of_p_and_the_sharpened_q(target):
    """β(s) = Σ min(p, softmax(s · logits)) at every answer position, averaged: checked against a direct,
    uncached computation of the head's guess at each position."""
    from specdec_ref.lab.coverage import acceptance_by_sharpness
    torch.manual_seed(0)
    head = FeatureHead(target).eval()
    seqs = target_answers(target, [torch.tensor([[1, 2, 3]])], 12)
    beta = acceptance_by_sharpness(target, head, seqs, scales=(0.5, 1.0, 2.0))
    seq, n_prompt = seqs[0]
    with torch.inference_mode():
        out = target(input_ids=seq[None], output_hidden_states=True)
        hidden, p = out.hidden_states[-1][0], out.logits[0].float().softmax(-1)  # [L, d], [L, V]
        for s in (0.5, 1.0, 2.0):
            want = []
            for t in range(max(n_prompt, 2), seq.shape[0]):
                f = head(hidden[None, :t - 1], seq[None, 1:t])[0, -1]
                want.append(float(torch.minimum(p[t - 1], (s * head.logits(f).float()).softmax(-1)).sum()))
            assert abs(beta[s] - sum(want) / len(want)) < 1e-5
    assert all(0 <= b <= 1 for b in beta.values())

    assert len({round(b, 6) for b in beta.values()}) == 3  # the factor changes q, and so β
    with pytest.raises(ValueError, match="no answer positions"):
        acceptance_by_sharpness(target, head, [(torch.tensor([1, 2]), 2)])
