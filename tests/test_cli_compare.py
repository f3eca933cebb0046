"""`python -m specdec_ref` (generate) ends with plain and speculative decoding on a few held-out prompts,
interleaved: the speeds it prints are tokens over seconds summed over those prompts, both methods seeded
alike (no model needed: the two decoders are stand-ins that report fixed tokens and times)."""
import pytest
import torch

from specdec_ref import cli
from specdec_ref.generate import Generation, Stats
from specdec_ref.sampling import SamplingConfig


def fake_decoder(name: str, calls: list, seconds: dict):
    def run(*a, max_new_tokens=None, **k):
        ids, n = (a[1], a[2]) if name == "plain" else (a[2], a[3])
        calls.append((name, int(ids[0, 0]), k["generator"].initial_seed(), k.get("gamma")))
        return Generation(torch.zeros(n, dtype=torch.long), Stats(seconds=seconds[name][int(ids[0, 0])]))
    return run


def test_held_out_speeds_sums_tokens_and_seconds_over_prompts_interleaved(monkeypatch):
    calls = []
    seconds = {"plain": {0: 1.0, 1: 3.0}, "speculative": {0: 0.5, 1: 1.5}}  # 10 tokens a prompt
    monkeypatch.setattr(cli, "autoregressive_generate", fake_decoder("plain", calls, seconds))
    monkeypatch.setattr(cli, "speculative_generate", fake_decoder("speculative", calls, seconds))
    encoded = [torch.tensor([[0, 5, 6]]), torch.tensor([[1, 7]])]
    plain, spec = cli.held_out_speeds(None, None, encoded, 10, dict(gamma=2), SamplingConfig(0), seed=7)
    assert (plain, spec) == pytest.approx((20 / 4.0, 20 / 2.0))  # summed, not averaged per prompt
    # prompt by prompt, each prompt starting one method later, every run seeded alike, the method passed on
    assert calls == [("plain", 0, 7, None), ("speculative", 0, 7, 2), ("speculative", 1, 7, 2),
                     ("plain", 1, 7, None)]


def test_a_negative_prompt_count_is_refused_before_anything_loads(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_load", lambda args: pytest.fail("loaded a model for a bad argument"))
    with pytest.raises(SystemExit):
        cli.main(["--compare-prompts", "-1"])
    assert "--compare-prompts must be >= 0" in capsys.readouterr().err
