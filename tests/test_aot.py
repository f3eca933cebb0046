"""The compiled CPU pass (models.aot): the same logits as the eager model, in every way the loops use a cache,
and only ever for the weights it was built from."""
import pytest
import torch

import specdec_ref as sd
from specdec_ref.cache import CachedModel, cached_model
from specdec_ref.models import aot
from specdec_ref.models.feature_draft import FeatureHead
from specdec_ref.models.toy import tiny_llama

# one worker builds the tiny package once (scripts/test.sh runs pytest-xdist with --dist loadgroup)
pytestmark = pytest.mark.xdist_group("aot")
FAST = dict(freezing=True)  # no autotuning: the package compiles in about a minute on 2 cores


def tiny(seed=0):
    # sharp distributions: a greedy argmax is never a near tie that float rounding could flip
    return tiny_llama(40, seed=seed, n_layers=2, hidden=32, dtype=torch.float32, max_positions=2048,
                      logit_scale=8.0)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tiny Llama and its package, built once for the module in a cache of its own."""
    cache = tmp_path_factory.mktemp("cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("SPECDEC_CACHE", str(cache))
    model = tiny()
    # a package serves the thread count it was built at, and every test runs at one (conftest.py), but a
    # module fixture is set up before that function fixture: build at one thread explicitly
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        path = aot.build(model, options=FAST, verbose=False)
    finally:
        torch.set_num_threads(before)
    yield model, path
    mp.undo()


@pytest.fixture
def attached(built, monkeypatch):
    model, path = built
    monkeypatch.setenv("SPECDEC_CACHE", str(path.parent.parent))
    assert aot.attach(model, enabled=True) is not None  # whatever SPECDEC_AOT says (scripts/test.sh: 0)
    yield model
    model.__dict__.pop("_specdec_compiled", None)


@torch.inference_mode()
def test_the_compiled_pass_gives_the_eager_logits_across_pieces_growth_and_rollback(attached):
    lm, ref = cached_model(attached, cache="auto", keep_hidden=True), CachedModel(attached, keep_hidden=True)
    assert isinstance(lm, aot.CompiledCachedModel)
    ids = torch.randint(0, 40, (600,), generator=torch.Generator().manual_seed(0))
    # a prompt longer than MAX_QUERY (pieces), single steps, a pass across a buffer's end (growth)
    for end, keep in ((150, None), (151, 1), (155, 4), (300, None), (520, 3)):
        a, b = lm.logits(ids[:end], keep=keep), ref.logits(ids[:end], keep=keep)
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-4)
        assert torch.allclose(lm.hidden, ref.hidden, atol=1e-4)
    assert lm.capacity == 3 * aot.BLOCK and lm.calls == ref.calls == 5
    lm.rollback(200)
    ref.rollback(200)
    assert torch.allclose(lm.logits(ids[:203], keep=3), ref.logits(ids[:203], keep=3), atol=1e-4)


@torch.inference_mode()
def test_greedy_chains_and_trees_through_the_compiled_pass_equal_plain_decoding(attached):
    torch.manual_seed(0)
    drafter = sd.FeatureDrafter(FeatureHead(attached).eval())
    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7]])
    plain = sd.autoregressive_generate(attached, ids, 40)
    eager = sd.autoregressive_generate(attached, ids, 40, cache="dynamic")
    assert torch.equal(plain.tokens, eager.tokens)  # the same greedy continuation either way
    for how in (dict(gamma=3), dict(tree=sd.TreeBudget(3, 2, 5))):  # a tree moves rows (keep_rows)
        spec = sd.speculative_generate(attached, drafter, ids, 40, **how)
        assert torch.equal(spec.tokens, plain.tokens), how


def test_attach_only_with_a_package_for_these_weights_and_never_when_switched_off(built, monkeypatch):
    model, path = built
    monkeypatch.setenv("SPECDEC_CACHE", str(path.parent.parent))
    monkeypatch.delenv("SPECDEC_AOT", raising=False)
    other = tiny(seed=1)  # the same architecture, other weights: no package of its own
    assert aot.package_path(other) != path and aot.attach(other) is None
    assert isinstance(cached_model(other, cache="auto"), CachedModel)
    assert not isinstance(cached_model(other, cache="auto"), aot.CompiledCachedModel)
    monkeypatch.setenv("SPECDEC_AOT", "0")
    assert aot.attach(model) is None and "_specdec_compiled" not in model.__dict__
    monkeypatch.delenv("SPECDEC_AOT")
    try:
        assert aot.attach(model) is not None  # power: the same call attaches it when allowed
        assert "AOTInductor" in sd.kernel_path(model)
        assert not isinstance(cached_model(model, cache="dynamic"), aot.CompiledCachedModel)
    finally:
        model.__dict__.pop("_specdec_compiled", None)


def test_a_package_run_on_other_weights_is_caught_by_the_check(built):
    model, path = built
    assert aot.check_against_eager(model, path) < 1e-4
    assert aot.check_against_eager(tiny(seed=1), path) > 1e-2  # frozen weights: the other model's differ


def test_what_a_compiled_pass_cannot_do_is_refused_with_the_fix(attached):
    with pytest.raises(ValueError, match="fused layers"):
        attached._specdec_compiled.lm((0, -1))
    # the loops' default then falls back to the eager cache, which keeps any layers
    assert not isinstance(cached_model(attached, cache="auto", keep_hidden=(0, -1)), aot.CompiledCachedModel)
    lm = cached_model(attached, cache="auto")
    with pytest.raises(ValueError, match="shorten the prompt"):
        lm._make_room(aot.MAX_BLOCKS * aot.BLOCK + 1)
    with pytest.raises(ValueError, match="prepack=False"):
        aot.build(sd.prepack_for_cpu(tiny(seed=2)), options=FAST)


def test_a_package_serves_the_thread_count_it_was_compiled_for(built, monkeypatch):
    model, path = built
    monkeypatch.setenv("SPECDEC_CACHE", str(path.parent.parent))
    monkeypatch.delenv("SPECDEC_AOT", raising=False)
    threads = torch.get_num_threads()
    assert aot.package_path(model) == path  # built at this thread count
    torch.set_num_threads(threads + 1)
    try:  # Inductor wrote its GEMMs for `threads`: at another count the package is not used
        assert aot.package_path(model) != path and aot.attach(model) is None
    finally:
        torch.set_num_threads(threads)
        model.__dict__.pop("_specdec_compiled", None)


def test_latency_curves_time_the_compiled_pass_when_one_is_attached(attached, monkeypatch):
    from specdec_ref.lab import timing
    passes = []
    real = aot.CompiledCachedModel.logits

    def counted(self, context_ids, keep=None, **kw):
        passes.append(context_ids.shape[0])
        return real(self, context_ids, keep=keep, **kw)
    monkeypatch.setattr(aot.CompiledCachedModel, "logits", counted)
    curve = timing.latency_curve(attached, [1, 3], context_len=20, repeats=2, sequential_ks=[2])
    # the prefill, then warm-up and repeats: each round one pass for k = 1, one for k = 3, two for sequential 2
    assert passes == [20] + [21, 23, 21, 22] * 3
    assert all(t.median > 0 for t in curve.one_pass.values()) and curve.sequential[2].median > 0
    passes.clear()
    attached.__dict__.pop("_specdec_compiled")  # power: without the package, the eager model is timed
    timing.latency_curve(attached, [1, 3], context_len=20, repeats=2)
    assert passes == []
