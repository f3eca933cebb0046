"""The draft kinds of chapter 5 (models/drafts.py), lab.compare's α, and distill_loss's TV option."""
import pytest
import torch

import specdec_ref as sd
from specdec_ref.distill.train import distill_loss
from specdec_ref.lab.compare import alpha_along
from specdec_ref.models import drafts
from specdec_ref.models.toy import tiny_llama


def test_self_draft_is_accepted_everywhere():
    target = tiny_llama(8, seed=0, hidden=32, n_layers=2, dtype=torch.float32)
    seqs = [(torch.tensor([1, 2, 3, 4, 5, 6, 7, 1, 2]), 3)]
    a_greedy, a_t1, coverage = alpha_along(target, drafts.self_draft(target), seqs)
    assert a_greedy == 1.0 and a_t1 == pytest.approx(1.0, abs=1e-5) and coverage == 1.0


def test_early_exit_and_int8_copies_plug_into_the_loop_and_stay_exact():
    target = tiny_llama(8, seed=0, hidden=64, n_layers=3, dtype=torch.float32)
    ids, greedy = torch.tensor([[1, 2, 3, 4]]), sd.SamplingConfig(0)
    plain = sd.autoregressive_generate(target, ids, 12, sampling=greedy).tokens.tolist()
    for draft in (drafts.early_exit_draft(target, 1), drafts.int8_copy(target),
                  drafts.int8_copy(target, activations=False)):
        assert sd.speculative_generate(target, draft, ids, 12, gamma=3,
                                       sampling=greedy).tokens.tolist() == plain


def test_weight_only_int8_linear_is_close_to_the_float_layer():
    lin = torch.nn.Linear(64, 32)
    x = torch.randn(5, 64)
    assert torch.allclose(drafts.Int8Linear(lin)(x), lin(x), atol=0.05)


def test_prompt_lookup_alpha_counts_only_positions_where_it_proposes():
    target = tiny_llama(8, seed=0, hidden=32, dtype=torch.float32)
    seqs = [(torch.tensor([1, 2, 3, 1, 2, 3, 4, 5]), 3)]
    _, _, coverage = alpha_along(target, drafts.prompt_lookup(target), seqs)
    assert 0 < coverage < 1


def test_tv_loss_is_one_minus_overlap_and_kl_is_the_default():
    class Head(torch.nn.Module):
        def __init__(self, logits):
            super().__init__()
            self.out = logits

        def reduced_logits(self, h):
            return self.out

    class Model(torch.nn.Module):
        def forward(self, input_ids, use_cache=False):
            return type("O", (), {"last_hidden_state": torch.zeros(1, 2, 4)})()

    class Draft(torch.nn.Module):
        def __init__(self, logits):
            super().__init__()
            self.model, self.lm_head = Model(), Head(logits)

    q_logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    lab_ids, lab_p = torch.tensor([[0, 1]]), torch.tensor([[0.2, 0.8]])
    args = (torch.zeros(1, 2, dtype=torch.long), torch.tensor([0]), torch.tensor([0]), lab_ids, lab_p,
            torch.float32)
    tv, _ = distill_loss(Draft(q_logits), *args, loss="tv")
    assert float(tv) == pytest.approx(1 - (0.2 + 0.3))
    kl, _ = distill_loss(Draft(q_logits), *args)
    assert float(kl) == pytest.approx(float((lab_p * (lab_p / torch.tensor([[0.5, 0.3]])).log()).sum()))
    with pytest.raises(ValueError, match="'kl' or 'tv'"):
        distill_loss(Draft(q_logits), *args, loss="js")


def test_training_dtype_follows_the_device_unless_named(monkeypatch):
    """auto never trains in an emulated or float16 dtype; a named dtype is taken as given, a bad one
    refused."""
    from specdec_ref.distill import train
    model = torch.nn.Linear(2, 2)
    for device_best, gen, training in ((torch.bfloat16, torch.bfloat16, torch.bfloat16),
                                       (torch.float32, torch.float32, torch.float32),
                                       (torch.float16, torch.float16, torch.float32)):
        monkeypatch.setattr(train, "default_dtype", lambda device, best=device_best: best)
        assert train.pick_dtype("auto", model) == gen
        assert train.pick_dtype("auto", model, training=True) == training
    assert train.pick_dtype("bfloat16", model, training=True) == torch.bfloat16
    with pytest.raises(ValueError, match="torch dtype name"):
        train.pick_dtype("bf16", model)


def test_run_device_is_auto_or_a_torch_device():
    from specdec_ref.distill import train
    assert train.run_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert train.run_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="torch device"):
        train.run_device("gpu0")
