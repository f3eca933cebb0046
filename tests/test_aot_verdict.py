"""The compiled sampled draw and chain verdict (`models.aot_verdict`): the same tokens as the Python rules at
the same uniforms, served only where the rules are the package's own.

Agreement is checked on fixed seeds against `sampling.sample` and `verify.verify`, which the exactness tests
prove; a deliberately broken verdict (a rejection drawn from the target's row instead of the residual) fails
the same check, so it has power. Floating-point rounding differs between the compiled and eager arithmetic,
so a uniform within about 1e-7 of a boundary could go either way: the checks allow 1% disagreement, far
below the broken variant's.
"""
import pytest
import torch

import specdec_ref as sd
from specdec_ref.cache import SAMPLED_PACKAGES
from specdec_ref.lab import broken
from specdec_ref.models import aot_verdict
from specdec_ref.models.aot import _compile, load_package
from specdec_ref.models.toy import tiny_pair
from specdec_ref.sampling import SamplingConfig, logits_to_probs, sample
from specdec_ref.verify import verify

V = 300  # not a multiple of aot_verdict.BLOCK: the padded last block is exercised
SEEDS = range(400)


class TargetRowVerdict(aot_verdict.ChainVerdict):
    """Broken on purpose: a rejected token is replaced by a draw from the target's row, not the residual."""

    def forward(self, logits, uniforms, temperature, drafted, rows):
        g = drafted.shape[0]
        n, _ = super().forward(logits, uniforms, temperature, drafted, rows)[0]
        target_n = logits.float().index_select(0, n[None])[0].div(temperature).softmax(-1)  # [V]
        return (torch.cat([n[None], aot_verdict.inverse_cdf(target_n, uniforms[g:])]),)


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """Draw and verdict programs for float32 logits of V tokens, in a cache of their own (SPECDEC_CACHE)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("SPECDEC_CACHE", str(tmp_path_factory.mktemp("cache")))
    mp.setenv("SPECDEC_AOT", "1")
    torch.set_num_threads(1)  # the suite's thread count (a package is keyed by it)
    for kind in ("draw", "verdict"):
        aot_verdict.build_verdict(kind, V, torch.float32, verbose=False)
    yield aot_verdict.SampledPackages(V, torch.float32)
    mp.undo()


def case(seed: int, gamma: int, temperature: float):
    """Target logits [γ+1, V], a draft's rows [γ, V] near the target's, and tokens drawn from them."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(gamma + 1, V, generator=g) * 2
    rows = (logits[:gamma] / temperature + torch.randn(gamma, V, generator=g)).softmax(-1)
    if seed % 7 == 0:  # the draft's row equals the target's: a rejection's residual has no mass
        rows[0] = logits_to_probs(logits[:1], SamplingConfig(temperature))[0]
    if seed % 11 == 0:  # tokens the draft never proposes
        rows[:, : V // 2] = 0
        rows /= rows.sum(-1, keepdim=True)
    drafted = torch.stack([torch.multinomial(rows[i], 1, generator=g)[0] for i in range(gamma)])
    return logits, rows, drafted


def agreement(runner, gamma: int, temperature: float) -> float:
    """The fraction of cases where the program's (n, token) equals `verify`'s at the same uniforms."""
    sampling, same = SamplingConfig(temperature), 0
    for seed in SEEDS:
        logits, rows, drafted = case(seed, gamma, temperature)
        probs = logits_to_probs(logits, sampling)
        expected = verify(drafted, rows, probs, torch.Generator().manual_seed(seed))
        u = torch.rand(gamma + 1, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        n, token = runner(logits, u, torch.tensor(float(temperature)), drafted, rows)[0].tolist()
        same += (n, token) == (expected[0], int(expected[1]))
    return same / len(SEEDS)


@pytest.mark.parametrize("gamma,temperature", [(1, 1.0), (2, 1.0), (3, 0.7), (5, 1.3)])
def test_verdict_equals_verify(packages, gamma, temperature):
    assert agreement(packages.runner("verdict"), gamma, temperature) >= 0.99


def test_a_broken_verdict_is_caught(packages, tmp_path):
    """Power: the same check rejects a verdict that replaces a rejected token from the target's own row."""
    path = _compile(TargetRowVerdict().eval(), aot_verdict.example_inputs("verdict", V, torch.float32),
                    aot_verdict.verdict_shapes(), tmp_path / "broken.pt2", {}, "")
    assert agreement(load_package(path), 2, 1.0) < 0.9


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_draw_equals_sample(packages, temperature):
    sampling, same = SamplingConfig(temperature), 0
    for seed in SEEDS:
        logits = torch.randn(1, V, generator=torch.Generator().manual_seed(seed)) * 3
        expected = sample(logits_to_probs(logits[0], sampling), torch.Generator().manual_seed(seed))
        got = packages.draw(logits, sampling, torch.Generator().manual_seed(seed))
        same += int(got) == int(expected)
    assert same / len(SEEDS) >= 0.99


def test_inverse_cdf_matches_sample_at_the_edges():
    """Zero mass at both ends and inside a block, u at 0 and just below 1: the token `sample` draws, always
    one with mass."""
    probs = torch.zeros(1000)
    probs[3], probs[255], probs[256], probs[700] = 0.1, 0.2, 0.3, 0.4
    for u in [0.0, 0.05, 0.1, 0.2999, 0.3, 0.6, 0.9999, 1 - 1e-17, 1 - 1e-12]:
        uniform = torch.tensor([u], dtype=torch.float64)
        token = int(aot_verdict.inverse_cdf(probs, uniform))
        assert token == int(sample(probs, uniform=uniform)) and probs[token] > 0


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(vocab_size=V, seed=0, noise=0.3, dtype=torch.float32, n_layers=1, hidden=16)


def generate(target, draft, **kw):
    ids = torch.tensor([[1, 2, 3, 4]])
    return sd.speculative_generate(target, draft, ids, 40, generator=torch.Generator().manual_seed(5), **kw)


def counting(packages, monkeypatch):
    calls = {"judge": 0, "draw": 0}
    for name in calls:
        method = getattr(packages, name)

        def counted(*a, _name=name, _method=method, **k):
            calls[_name] += 1
            return _method(*a, **k)
        monkeypatch.setattr(packages, name, counted)
    return calls


def test_the_loops_use_them_and_give_the_same_tokens(packages, pair, monkeypatch):
    target, draft = pair
    sampling = SamplingConfig(1.0)
    without = generate(target, draft, gamma=3, sampling=sampling, cache="dynamic")
    plain_without = sd.autoregressive_generate(target, torch.tensor([[1, 2, 3, 4]]), 40, sampling=sampling,
                                               generator=torch.Generator().manual_seed(5))
    monkeypatch.setitem(target.__dict__, SAMPLED_PACKAGES, packages)
    calls = counting(packages, monkeypatch)
    with_ = generate(target, draft, gamma=3, sampling=sampling, cache="dynamic")
    assert calls["judge"] == len(with_.stats.accepted)  # every iteration judged by the package
    assert torch.equal(with_.tokens, without.tokens)
    plain = sd.autoregressive_generate(target, torch.tensor([[1, 2, 3, 4]]), 40, sampling=sampling,
                                       generator=torch.Generator().manual_seed(5))
    assert calls["draw"] >= 40 and torch.equal(plain.tokens, plain_without.tokens)


@pytest.mark.parametrize("setting", ["greedy", "top_k", "block", "swapped verify", "swapped probs"])
def test_they_stand_aside(packages, pair, monkeypatch, setting):
    """Greedy, top-k, block verification, and a loop whose rules a chapter swapped run the Python rules."""
    target, draft = pair
    monkeypatch.setitem(target.__dict__, SAMPLED_PACKAGES, packages)
    calls = counting(packages, monkeypatch)
    kw = dict(gamma=2, sampling=SamplingConfig(1.0), cache="dynamic")
    if setting == "greedy":
        kw["sampling"] = SamplingConfig(0)
    elif setting == "top_k":
        kw["sampling"] = SamplingConfig(1.0, top_k=5)
    elif setting == "block":
        kw["verification"] = "block"
    if setting == "swapped verify":
        with broken.using_verify(broken.verify_without_residual):
            generate(target, draft, **kw)
    elif setting == "swapped probs":
        with broken.swapped("logits_to_probs", lambda logits, s: logits.softmax(-1)):
            generate(target, draft, **kw)
    else:
        generate(target, draft, **kw)
    judged = calls["judge"]
    if setting == "top_k":  # asked, and it declines; as it does rows it was not built for
        rows, logits, plain = torch.rand(1, V).softmax(-1), torch.randn(2, V), SamplingConfig(1.0)
        assert packages.judge(torch.tensor([1]), rows, logits, kw["sampling"], None) is None
        assert packages.judge(torch.tensor([1]), rows, logits, plain, None) is not None  # power
        assert packages.judge(torch.tensor([1]), rows.double(), logits, plain, None) is None
        assert packages.judge(torch.tensor([1]), rows[:, :-1], logits[:, :-1], plain, None) is None
        assert packages.judge(torch.tensor([1], dtype=torch.int32), rows, logits, plain, None) is None
    else:
        assert judged == 0


def test_attach_and_opt_out(packages, pair, monkeypatch):
    target, _ = pair
    assert isinstance(aot_verdict.attach(target), aot_verdict.SampledPackages)
    assert aot_verdict.attach(target, enabled=False) is None and SAMPLED_PACKAGES not in target.__dict__
    monkeypatch.setenv("SPECDEC_AOT", "0")
    assert aot_verdict.attach(target) is None
    other, _ = tiny_pair(vocab_size=V + 1, seed=0, dtype=torch.float32)  # no program for its vocabulary
    monkeypatch.setenv("SPECDEC_AOT", "1")
    assert aot_verdict.attach(other) is None


def test_bad_builds_are_refused():
    with pytest.raises(ValueError, match="kind must be"):
        aot_verdict.build_verdict("tree", V, torch.float32)
    with pytest.raises(ValueError, match="vocabulary must hold"):
        aot_verdict.build_verdict("draw", 1, torch.float32)
