"""The compiled CPU pass (models.aot): the same logits as the eager model, in every way the loops use a cache,
and only ever for the weights it was built from."""
import collections
import os

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import specdec_ref as sd
from specdec_ref.cache import CachedModel, additive_mask, cached_model
from specdec_ref.lab import packages
from specdec_ref.models import aot, aot_head, aot_use
from specdec_ref.models import kv as kv_module
from specdec_ref.models.feature_draft import FeatureHead
from specdec_ref.models.toy import tiny_llama

# one worker builds the tiny package once (scripts/test.sh runs pytest-xdist with --dist loadgroup)
pytestmark = pytest.mark.xdist_group("aot")
FAST = dict(freezing=True)  # no autotuning: the package compiles in about a minute on 2 cores


def tiny(seed=0):
    # sharp distributions: a greedy argmax is never a near tie that float rounding could flip; two query heads
    # on one key head, so the package's attention groups heads as SmolLM2's does (`aot.compiled_attention`)
    return tiny_llama(40, seed=seed, n_layers=2, hidden=32, dtype=torch.float32, max_positions=2048,
                      logit_scale=8.0, kv_heads=1)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tiny Llama and its package, built once for the module in a cache of its own, and an Inductor cache of
    its own: once, with the machine's shared one, a CI run built a package whose metadata was empty (most
    likely a race in that cache, which the other pytest worker's compiles use too)."""
    cache = tmp_path_factory.mktemp("cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("SPECDEC_CACHE", str(cache))
    mp.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("inductor")))
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
def test_one_new_token_as_a_padded_pass_gives_the_eager_logits_hidden_states_and_argmax(attached):
    compiled = attached._specdec_compiled
    lm, ref = aot.CompiledCachedModel(attached, compiled.runner, True, pad_single=True), CachedModel(
        attached, keep_hidden=True)
    calls = []
    real = lm.runner
    lm.runner = lambda *a: calls.append(a[0].shape[1]) or real(*a)  # the rows of every pass
    ids = torch.randint(0, 40, (600,), generator=torch.Generator().manual_seed(2))
    # single steps (padded), one across a buffer's end (growth), after a rollback, and a pass of 3 (not)
    end_ = aot.MIN_BLOCKS * aot.BLOCK  # the first buffers' end
    for end, keep, rows in ((20, None, 20), (21, None, 2), (22, 1, 2), (end_, 1, (end_ - 22) % 64),
                            (end_ + 1, 1, 2), (end_ + 4, 3, 3), (end_ + 5, 1, 2)):
        a, b = lm.logits(ids[:end], keep=keep), ref.logits(ids[:end], keep=keep)
        assert calls[-1] == rows and a.shape == b.shape and torch.allclose(a, b, atol=1e-4)
        if rows == 2:  # the padded pass's argmax is the new row's
            assert torch.equal(lm.pass_argmax(a), sd.sampling.argmax(a))
        assert torch.allclose(lm.hidden, ref.hidden, atol=1e-4) and lm.n_cached == ref.n_cached == end
    lm.rollback(100)
    ref.rollback(100)
    assert torch.allclose(lm.logits(ids[:101], keep=1), ref.logits(ids[:101], keep=1), atol=1e-4)
    assert calls[-1] == 2 and lm.capacity == (aot.MIN_BLOCKS + 1) * aot.BLOCK
    tree = aot.causal_mask(101, 1, torch.float32)  # a masked pass of one row is never padded
    lm.logits(ids[:102], keep=1, position_ids=torch.arange(101, 102), attention_mask=tree)
    assert calls[-1] == 1


def test_padding_and_the_package_itself_are_chosen_from_measured_costs_once_and_kept_beside_it(
        built, tmp_path, monkeypatch):
    assert aot_use.pad_pays(1.0, 0.8) and aot_use.pad_pays(1.0, aot_use.PAD_MARGIN)
    assert not aot_use.pad_pays(1.0, 0.97) and not aot_use.pad_pays(0.8, 1.0)  # within the noise, or dearer
    assert aot_use.beats_eager(0.8, 1.0) and not aot_use.beats_eager(0.99, 1.0)  # within the noise: eager
    model, path = built
    runner = aot.load_package(path)
    compiled = aot.CompiledCachedModel(model, runner)
    t1, t2, eager = aot_use.measure_steps(model, compiled, context=30, rounds=3)
    assert 0 < t1 < 1 and 0 < t2 < 1 and 0 < eager < 1
    monkeypatch.delenv("SPECDEC_AOT_PAD", raising=False)
    here = tmp_path / "p.pt2"
    measured = []
    cases = (((1.0, 0.5, 2.0), (True, True)), ((0.5, 1.0, 2.0), (False, True)),
             ((1.0, 0.9, 0.8), (True, False)))  # the last: the eager model is faster
    for i, (costs, want) in enumerate(cases):
        monkeypatch.setattr(aot_use, "measure_steps", lambda *a, c=costs, **k: measured.append(c) or c)
        here.with_suffix(".json").unlink(missing_ok=True)
        assert aot_use.first_load(model, lambda: None, here) == want
        assert aot_use.first_load(model, lambda: None, here) == want  # read back, not measured again
        assert len(measured) == i + 1
    here.with_suffix(".json").write_text('{"pad_single_rows": true}')  # an older record: measured again
    assert aot_use.first_load(model, lambda: None, here) == (True, False) and len(measured) == 4
    for forced, want in (("1", True), ("0", False)):
        monkeypatch.setenv("SPECDEC_AOT_PAD", forced)
        assert aot_use.first_load(model, lambda: None, here).pad_single is want and len(measured) == 4


def test_a_package_slower_than_the_eager_model_is_not_attached_unless_forced(built, monkeypatch):
    model, path = built
    monkeypatch.setenv("SPECDEC_CACHE", str(path.parent.parent))
    monkeypatch.delenv("SPECDEC_AOT", raising=False)
    slower = aot_use.Use(pad_single=False, faster_than_eager=False)
    monkeypatch.setattr(aot_use, "first_load", lambda *a: slower)
    try:
        assert aot.attach(model) is None and "_specdec_compiled" not in model.__dict__
        assert "AOTInductor" not in sd.kernel_path(model)
        monkeypatch.setenv("SPECDEC_AOT", "1")  # forced: attached whatever it measured
        assert aot.attach(model) is not None
        monkeypatch.delenv("SPECDEC_AOT")
        assert aot.attach(model, enabled=True) is not None
        # power: the same call attaches it where it measured faster
        monkeypatch.setattr(aot_use, "first_load", lambda *a: slower._replace(faster_than_eager=True))
        assert aot.attach(model) is not None
    finally:
        model.__dict__.pop("_specdec_compiled", None)


@torch.inference_mode()
@pytest.mark.parametrize("pad", ["0", "1"])
def test_greedy_chains_and_trees_through_the_compiled_pass_equal_plain_decoding(built, monkeypatch, pad):
    model, path = built
    monkeypatch.setenv("SPECDEC_CACHE", str(path.parent.parent))
    monkeypatch.setenv("SPECDEC_AOT_PAD", pad)  # plain decoding in passes of 1 row, or of 2
    monkeypatch.setitem(model.__dict__, "_specdec_compiled", None)  # detached again when the test ends
    assert aot.attach(model, enabled=True).pad_single is (pad == "1")
    attached = model
    torch.manual_seed(0)
    drafter = sd.FeatureDrafter(FeatureHead(attached).eval())
    ids, greedy = torch.tensor([[1, 2, 3, 4, 5, 6, 7]]), sd.SamplingConfig(0.0)  # the default is T = 1
    plain = sd.autoregressive_generate(attached, ids, 40, sampling=greedy)
    eager = sd.autoregressive_generate(attached, ids, 40, sampling=greedy, cache="dynamic")
    assert torch.equal(plain.tokens, eager.tokens)  # the same greedy continuation either way
    for how in (dict(gamma=3), dict(tree=sd.TreeBudget(3, 2, 5))):  # a tree moves rows (keep_rows)
        spec = sd.speculative_generate(attached, drafter, ids, 40, sampling=greedy, **how)
        assert torch.equal(spec.tokens, plain.tokens), how


@torch.inference_mode()
def test_the_package_brings_each_rows_argmax_and_logit_sum_for_the_rows_it_returned(attached):
    lm = cached_model(attached, cache="auto")
    ids = torch.randint(0, 40, (60,), generator=torch.Generator().manual_seed(1))
    for end, keep in ((50, 1), (54, 4), (55, None)):
        logits = lm.logits(ids[:end], keep=keep)
        best = lm.pass_argmax(logits)
        assert torch.equal(best, sd.sampling.argmax(logits))  # the same tokens, row for row
        assert lm.pass_argmax(logits.clone()) is None  # only for the very logits the latest pass returned
    before = lm.logits(ids[:57], keep=2)
    lm.logits(ids[:58], keep=1)
    assert lm.pass_argmax(before) is None  # nor for an older pass's
    assert CachedModel(attached).pass_argmax(before) is None  # an eager pass brings none
    # the row sums guard against NaN: a NaN in a tree pass's mask reaches every logit and is refused
    mask = aot.causal_mask(58, 2, torch.float32).clone()
    mask[..., 3] = float("nan")
    with pytest.raises(ValueError, match="NaN or inf"):
        lm.logits(ids[:60], keep=2, position_ids=torch.arange(58, 60), attention_mask=mask)


def test_pass_masks_cover_the_positions_in_use_and_causal_ones_equal_masks_built_afresh():
    for start, q in ((0, 1), (5, 3), (250, 6), (4000, 4)):
        mask = aot.causal_mask(start, q, torch.bfloat16)
        rows, cols = torch.arange(start, start + q)[:, None], torch.arange(start + q)[None]
        assert torch.equal(mask[0, 0], additive_mask(cols <= rows, torch.bfloat16))
        assert mask.shape == (1, 1, q, start + q) and mask.is_contiguous()
        assert torch.equal(aot_head.pass_mask(start, q, torch.bfloat16), mask)
    tree = torch.zeros(1, 1, 3, 12)
    assert aot_head.pass_mask(9, 3, torch.bfloat16, attention_mask=tree).dtype == torch.bfloat16
    for wrong in (torch.zeros(1, 1, 3, 256), torch.zeros(3, 12), torch.zeros(2, 1, 3, 12)):  # as wide as the
        with pytest.raises(ValueError, match=r"takes a mask \[1, 1, 3, 12\]"):  # buffers, or another shape
            aot_head.pass_mask(9, 3, torch.float32, attention_mask=wrong)
    # the target's package takes a mask's last w columns, q <= w <= start + q, contiguous, in the pass's dtype
    for w in (3, 7, 12):
        block = aot.mask_block(torch.zeros(1, 1, 3, 20)[..., :w], 9, 3, torch.bfloat16)
        assert block.shape == (1, 1, 3, w) and block.dtype == torch.bfloat16 and block.is_contiguous()
    for wrong in (torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 13), torch.zeros(3, 12),
                  torch.zeros(1, 1, 2, 12)):
        with pytest.raises(ValueError, match=r"takes a mask \[1, 1, 3, w\], q <= w <= 12"):
            aot.mask_block(wrong, 9, 3, torch.float32)


@torch.inference_mode()
def test_a_tree_mask_among_the_passs_rows_or_any_wider_gives_what_the_whole_mask_gives(attached):
    """The package widens a mask's last w columns inside (`KVStep`), the eager pass outside (`CachedModel`):
    a tree's block among its rows, the same block with some cached columns before it, and the whole mask
    score alike, compiled and eager; a block that hides a cached column scores otherwise (the columns before
    a block are seen, not dropped)."""
    tree = sd.Tree((-1, 0, 0, 1))  # root, two children, a grandchild
    ids = torch.randint(0, 40, (53,), generator=torch.Generator().manual_seed(3))
    T, N = 50, tree.size
    flat = ids[:T + N]
    positions = sd.tree.tree_position_ids(tree, T, 45, T + N)
    whole = sd.tree.tree_attention_mask(tree, T, 45, T + N, torch.float32)  # [1, 1, 8, 53]
    block = sd.tree.tree_attention_mask(tree, T, 45, T + N, torch.float32, among_rows=True)  # [1, 1, 8, 8]
    assert block.shape == (1, 1, 8, 8) and torch.equal(whole[..., -8:], block)
    results = []
    for lm in (cached_model(attached, cache="auto"), CachedModel(attached)):
        for mask in (whole, block, whole[..., -20:], whole.clone().index_fill_(-1, torch.tensor([44]), -1e9)):
            lm.rollback(45)
            if lm.n_cached < 45:
                lm.logits(ids[:45])
            results.append(lm.logits(flat, keep=N + 1, position_ids=positions, attention_mask=mask))
    for i in (0, 4):  # compiled, then eager
        assert all(torch.allclose(results[i], results[i + j], atol=1e-4) for j in (1, 2))
        assert not torch.allclose(results[i], results[i + 3], atol=1e-3)  # power: a hidden column tells
    assert torch.allclose(results[0], results[4], atol=1e-4)


@torch.inference_mode()
def test_keep_rows_moves_only_the_rows_not_in_place_and_matches_the_eager_cache(attached):
    """After a tree pass the compiled cache keeps the path's rows: those already in place stay, the rest
    move (keys, values and hidden states); the next pass then scores as the eager cache's does. Power: a
    cache that only rolled back, moving nothing, scores otherwise."""
    tree = sd.Tree((-1, 0, 0, 1, 2))  # root, two children, a grandchild under each
    ids = torch.randint(0, 40, (60,), generator=torch.Generator().manual_seed(5))
    T, N = 50, tree.size
    flat, after = ids[:T + N], ids[57:59]  # two rows after the path: no pass recomputes a kept row
    positions = sd.tree.tree_position_ids(tree, T, T, T + N)
    mask = sd.tree.tree_attention_mask(tree, T, T, T + N, torch.float32)

    def kept(lm, path, move=True):  # the tree pass, the path kept, then the token after it
        lm.rollback(T)
        if lm.n_cached < T:
            lm.logits(ids[:T])
        lm.logits(flat, keep=N + 1, position_ids=positions, attention_mask=mask)
        if move:
            lm.keep_rows(T, [T - 1 + i for i in path])
        else:
            lm.rollback(T + len(path))
        nxt = torch.cat([ids[:T], flat[[T - 1 + i for i in path]], after])
        return lm.logits(nxt, keep=2), lm.hidden.clone()

    compiled = cached_model(attached, keep_hidden=True, cache="auto")
    eager = CachedModel(attached, keep_hidden=True)
    assert isinstance(compiled, aot.CompiledCachedModel)
    for path in ([1, 3], [2, 4], [1], [2]):  # in place, then moved; all moved; in place; moved
        want = kept(eager, path)
        assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(kept(compiled, path), want)), path
        if path[-1] != len(path):  # power: rows left where the pass wrote them
            assert not torch.allclose(kept(compiled, path, move=False)[0], want[0], atol=1e-3), path


class CountOps(TorchDispatchMode):
    """How many times each ATen operation ran inside the block."""

    def __init__(self):
        super().__init__()
        self.counts = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("inference", [False, True])
def test_kv_rows_move_in_every_layer_at_once_as_they_would_buffer_by_buffer(inference):
    """`kv_buffers` makes every layer's keys and values views of one tensor (`KVBuffers`, which keeps it:
    under inference mode, where the loops run, a view does not know its base), so a tree's kept path
    (`move_rows`, source and destination overlapping) and a grown buffer (`copy_prefix`, through `room_for`)
    take one gather and one copy for all of them, counted; the result is what moving each buffer on its own
    gives. Power: buffers in a plain list take one operation per buffer, and are paired in their list's order
    (a reversed list gets each layer's own rows back)."""
    model = tiny(seed=1)
    g = torch.Generator().manual_seed(6)
    with torch.inference_mode(inference):
        kv = kv_module.kv_buffers(model, 2 * aot.BLOCK, torch.float32)
        assert isinstance(kv, kv_module.KVBuffers) and len(kv) == 4
        assert kv[0].shape == (1, 1, 2 * aot.BLOCK, 16)
        assert all(buf.data_ptr() == kv.whole[i].data_ptr() for i, buf in enumerate(kv))
        for buf in kv:
            buf.copy_(torch.randn(buf.shape, generator=g))
        want = [buf.clone() for buf in kv]
        src, dst = torch.tensor([7, 9, 12]), slice(5, 8)
        for buf in want:
            buf[:, :, dst] = buf[:, :, [7, 9, 12]].clone()
        with CountOps() as ops:
            kv_module.move_rows(kv, src, dst)
        assert ops.counts["index_select"] == 1 and ops.counts["copy_"] == 1
        assert all(torch.equal(a, b) for a, b in zip(kv, want))
        def make(length):
            return kv_module.kv_buffers(model, length, torch.float32)
        with CountOps() as ops:
            grown = aot.room_for(kv, 20, 2 * aot.BLOCK + 1, make, "the test's buffers")
        assert isinstance(grown, kv_module.KVBuffers) and grown[0].shape[2] == 3 * aot.BLOCK
        assert ops.counts["copy_"] == 1
        assert all(torch.equal(n[:, :, :20], o[:, :, :20]) for n, o in zip(grown, kv))
        assert not any(n[:, :, 20:].any() for n in grown)
        # power: a plain list, here the new buffers in reverse, is copied pair by pair, in its own order
        backwards = list(kv_module.kv_buffers(model, 3 * aot.BLOCK, torch.float32))[::-1]
        with CountOps() as ops:
            kv_module.copy_prefix(kv, backwards, 20)
        assert ops.counts["copy_"] == len(kv)
        assert all(torch.equal(n[:, :, :20], o[:, :, :20]) for n, o in zip(backwards, kv))
        separate = [buf.clone() for buf in want]
        with CountOps() as ops:
            kv_module.move_rows(separate, torch.tensor([1, 2]), slice(0, 2))
        assert ops.counts["index_select"] == len(kv)
        assert all(torch.equal(s[:, :, :2], w[:, :, 1:3]) for s, w in zip(separate, want))


@pytest.mark.parametrize("heads, kv_heads", [(9, 3), (8, 2), (4, 4)])
def test_compiled_attention_equals_hugging_faces_over_the_whole_buffers(heads, kv_heads):
    """Cut to the positions in use, with the query heads of a key head stacked as its rows: the same output
    as Hugging Face's SDPA over the whole buffers (rows past the mask's end masked), grouped heads or not."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    class Layer:
        num_key_value_groups, is_causal, training = heads // kv_heads, False, False

    g = torch.Generator().manual_seed(heads)
    start, q, L, d = 37, 4, 256, 16
    query = torch.randn(1, q, heads, d, generator=g).transpose(1, 2)  # [1, H, q, d], as the layer makes it
    key, value = (torch.randn(1, kv_heads, L, d, generator=g) for _ in range(2))
    mask = aot.causal_mask(start, q, torch.float32)
    mask[..., 5] = torch.finfo(torch.float32).min  # a tree pass's mask hides some cached positions
    wide = torch.nn.functional.pad(mask, (0, L - start - q), value=torch.finfo(torch.float32).min)
    want, _ = sdpa_attention_forward(Layer(), query, key, value, wide, scaling=0.3)  # not SDPA's default
    got, _ = aot.compiled_attention(Layer(), query, key, value, mask, scaling=0.3)
    assert got.shape == want.shape == (1, q, heads, d) and torch.allclose(got, want, atol=1e-5)
    # power: these inputs tell the right pairing of heads (h -> h // g) from a wrong one (h -> h % H_kv, key
    # heads tiled instead of repeated), the mask's width from the buffers' (stale rows past it: not masked),
    # and the scale from SDPA's default
    g_ = heads // kv_heads
    others = {"h % H_kv": (key.repeat(1, g_, 1, 1), value.repeat(1, g_, 1, 1), wide, 0.3),
              "rows past the mask seen": (key.repeat_interleave(g_, 1), value.repeat_interleave(g_, 1),
                                          torch.nn.functional.pad(mask, (0, L - start - q)), 0.3),
              "default scale": (key.repeat_interleave(g_, 1), value.repeat_interleave(g_, 1), wide, None)}
    for name, (k, v, m, scale) in others.items():
        if name == "h % H_kv" and g_ in (1, heads):
            continue  # one key head per query head, or one for all: both pairings are the same
        other = torch.nn.functional.scaled_dot_product_attention(query, k, v, attn_mask=m, scale=scale)
        assert not torch.allclose(other.transpose(1, 2), want, atol=1e-3), name


@torch.inference_mode()
def test_a_compiled_pass_never_reads_the_buffers_past_its_positions(attached):
    """Rows past the write position (after a rollback, or never written) are left in the buffers: filled with
    NaN, they change nothing, because a pass's attention ends at its last row."""
    lm, ref = cached_model(attached, cache="auto"), CachedModel(attached)
    ids = torch.randint(0, 40, (200,), generator=torch.Generator().manual_seed(3))
    for model in (lm, ref):
        model.logits(ids[:150])
        model.rollback(100)
    for buf in lm.kv:
        buf[:, :, 100:] = float("nan")
    assert torch.allclose(lm.logits(ids[:104], keep=4), ref.logits(ids[:104], keep=4), atol=1e-4)


@torch.inference_mode()
def test_the_buffers_a_compiled_pass_gets_are_within_the_shapes_it_was_compiled_for(built, monkeypatch):
    """torch.export assumes a dynamic size is never 0 or 1, so a package takes buffers of MIN_BLOCKS blocks
    or more; with input checks on (each loaded copy reads AOTI_RUNTIME_CHECK_INPUTS on its first pass) it
    refuses one block, which the buffers once began with. (Rows are the other such size: a one-row pass runs
    the program traced for more rows, which export cannot make general (it leaves a guard q != 1); the tests
    above check such passes against the eager model's logits.)"""
    model, path = built
    monkeypatch.setenv("AOTI_RUNTIME_CHECK_INPUTS", "1")
    checked = aot.load_package(path)
    lm = aot.CompiledCachedModel(model, checked)
    assert lm.capacity == aot.MIN_BLOCKS * aot.BLOCK
    ids = torch.randint(0, 40, (3 * aot.BLOCK,), generator=torch.Generator().manual_seed(4))
    end = aot.MIN_BLOCKS * aot.BLOCK  # the first buffers' end
    lm.logits(ids[:100])
    lm.logits(ids[:end + 10])  # grows by one block
    assert lm.capacity == end + aot.BLOCK
    ref = CachedModel(model).logits(ids[:end + 13], keep=3)
    assert torch.allclose(lm.logits(ids[:end + 13], keep=3), ref, atol=1e-4)
    one_block = aot.CompiledCachedModel(model, checked)
    one_block.kv = one_block._buffers(aot.BLOCK)  # power: what the buffers began with before MIN_BLOCKS
    with pytest.raises(RuntimeError, match="too small"):
        one_block.logits(ids[:100])


@torch.inference_mode()
def test_a_package_given_to_a_timing_script_is_checked_once_then_runs_one_row_passes(built, monkeypatch):
    """`lab.packages.checked_package`: one pass with the package's input checks on, then a copy without them,
    which one-row passes need (the checks refuse them: rows are compiled for 2 and up)."""
    model, path = built
    monkeypatch.setenv("AOTI_RUNTIME_CHECK_INPUTS", "1")  # set already: the timing copy still runs unchecked
    lm, ref = aot.CompiledCachedModel(model, packages.checked_package(model, path)), CachedModel(model)
    assert os.environ["AOTI_RUNTIME_CHECK_INPUTS"] == "1"  # and the caller's setting is back
    ids = torch.randint(0, 40, (30,), generator=torch.Generator().manual_seed(5))
    for end, keep in ((20, 1), (21, 1), (24, 3)):
        assert torch.allclose(lm.logits(ids[:end], keep=keep), ref.logits(ids[:end], keep=keep), atol=1e-4)
    # power: buffers of another shape (two key heads, not one), which the unchecked package would misread
    other = tiny_llama(40, seed=0, n_layers=2, hidden=32, dtype=torch.float32, max_positions=2048, kv_heads=2)
    with pytest.raises(RuntimeError, match="dim value"):
        packages.checked_package(other, path)


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
    monkeypatch.setenv("SPECDEC_AOT", "1")  # whatever the eager model measured on this machine
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
    # the prefill, then warm-up and repeats: each round a pass for k = 1, one for k = 3, two for sequential 2
    assert passes == [20] + [21, 23, 21, 22] * 3
    assert all(t.median > 0 for t in curve.one_pass.values()) and curve.sequential[2].median > 0
    passes.clear()
    attached.__dict__.pop("_specdec_compiled")  # power: without the package, the eager model is timed
    timing.latency_curve(attached, [1, 3], context_len=20, repeats=2)
    assert passes == []


@pytest.fixture(scope="module")
def built_head(built, tmp_path_factory):
    """A random feature head on the tiny target, and its compiled pass (built at one thread, as above)."""
    model, _ = built
    torch.manual_seed(0)
    V = model.config.vocab_size  # a reduced vocabulary, so that greedy tokens must be mapped to their ids
    keep = torch.sort(torch.randperm(V, generator=torch.Generator().manual_seed(0))[:V * 3 // 4]).values
    head = FeatureHead(model, keep_ids=keep).eval()
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        path = aot_head.build_head(head, tmp_path_factory.mktemp("head") / "head.pt2", options=FAST,
                                   verbose=False)
        compiled = aot_head.CompiledHead(head, aot.load_package(path), path)
    finally:
        torch.set_num_threads(before)
    return model, head, compiled


@torch.inference_mode()
def test_the_compiled_head_gives_the_eager_features_across_pieces_trees_and_crops(built_head):
    from transformers import DynamicCache
    _, head, compiled = built_head
    d, g = head.fc.out_features, torch.Generator().manual_seed(0)
    ref, kv = DynamicCache(), compiled.new_cache()
    assert isinstance(kv, aot_head.HeadKV)

    def both(h, x, **kw):
        a, b = compiled(h, x, kv, **kw), head(h, x, ref, **kw)
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-4), kw
        assert kv.get_seq_length() == ref.get_seq_length()

    both(torch.randn(1, 150, d, generator=g), torch.randint(0, 40, (1, 150), generator=g))  # pieces of 64
    both(torch.randn(1, 1, d, generator=g), torch.randint(0, 40, (1, 1), generator=g))
    kv.crop(-1)
    ref.crop(-1)
    # a tree pass of three nodes: node 0 and its two children, each seeing the context and its ancestors
    allowed = torch.ones(3, 150 + 3, dtype=torch.bool)
    allowed[:, 150:] = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
    mask = sd.cache.additive_mask(allowed, torch.float32)[None, None]
    both(torch.randn(1, 3, d, generator=g), torch.randint(0, 40, (1, 3), generator=g),
         position_ids=torch.tensor([[150, 151, 151]]), attention_mask=mask)
    kv.crop(-3)
    ref.crop(-3)
    grow = aot.MIN_BLOCKS * aot.BLOCK - 150 + 8  # past the first buffers' end
    both(torch.randn(1, grow, d, generator=g), torch.randint(0, 40, (1, grow), generator=g))
    assert kv.capacity == (aot.MIN_BLOCKS + 1) * aot.BLOCK
    # the package's own logits for rows of its latest pass; any other features through the head's layer
    f = compiled(torch.randn(1, 3, d, generator=g), torch.randint(0, 40, (1, 3), generator=g), kv)[0]
    for rows in (f, f[-1:], f[1], f[-1]):
        assert compiled._span(rows) is not None
        assert torch.allclose(compiled.logits(rows), head.logits(rows), atol=1e-4)
        assert torch.allclose(compiled.reduced_logits(rows)[0], head.reduced_logits(rows)[0], atol=1e-4)
        # the package's greedy tokens: vocabulary ids, each row's argmax over all V
        assert torch.equal(compiled.greedy_tokens(rows), head.logits(rows).argmax(-1))
        from_package = compiled._last.tokens[compiled._span(rows)].reshape(rows.shape[:-1])
        assert torch.equal(compiled.greedy_tokens(rows), from_package)  # the package's, not the fallback
        # each row's best tokens, ranked in the package as the head ranks them (`sampling.ranked`)
        for w in (1, 3, aot_head.RANKED, aot_head.RANKED + 1):  # more than the package ranks: the head's own
            got, want = compiled.ranked(rows, w), head.ranked(rows, w)
            assert got.tokens.shape == want.tokens.shape == (*rows.shape[:-1], w)
            assert torch.equal(got.tokens, want.tokens) and torch.allclose(got.logp, want.logp, atol=1e-4)
        best = compiled._last.best.tokens[compiled._span(rows), :3].reshape(*rows.shape[:-1], 3)
        assert torch.equal(compiled.ranked(rows, 3).tokens, best)  # the package's
        assert torch.equal(best[..., 0], compiled.greedy_tokens(rows))  # best first
    assert compiled._span(f.clone()) is None and compiled._span(f[:, :4]) is None
    assert torch.equal(compiled.greedy_tokens(f.clone()), head.greedy_tokens(f))  # not a view: the head's own
    assert torch.equal(head.greedy_tokens(f), head.logits(f).argmax(-1))
    # power: an index among the head's K tokens, not mapped to its vocabulary id, is another token
    assert not torch.equal(compiled.greedy_tokens(f), head.head.reduced_logits(f).argmax(-1))
    kv.crop(-3)
    ref.crop(-3)
    assert not torch.allclose(compiled(torch.randn(1, 1, d, generator=g), torch.tensor([[3]]), kv),
                              head(torch.randn(1, 1, d, generator=g), torch.tensor([[3]]), ref))  # power


@torch.inference_mode()
def test_a_drafter_with_the_compiled_head_drafts_what_the_eager_one_drafts(built_head):
    model, head, compiled = built_head
    ids = torch.randint(0, 40, (120,), generator=torch.Generator().manual_seed(1))
    feats = model(input_ids=ids[None], output_hidden_states=True).hidden_states[-1][0]  # [120, d]
    drafters = sd.FeatureDrafter(head), sd.FeatureDrafter(compiled)
    for n in (9, 10, 14, 40, 41, 100, 110):  # one drafter each, its cache carried on and cropped back (sync)
        out = []
        for drafter in drafters:
            drafter.sync(n, feats[:n])
            chain = drafter.propose(ids[:n], 3, sd.SamplingConfig(1.0), torch.Generator().manual_seed(n))
            drafter.sync(n - 1, feats[:n - 1])  # back one token: the tree re-feeds the last pair
            drafter.sync(n, feats[:n])
            tree = drafter.propose_tree(ids[:n], sd.TreeBudget(3, 2, 5), sd.SamplingConfig(0.0))
            drafter.sync(n - 1, feats[:n - 1])
            drafter.sync(n, feats[:n])
            greedy = drafter.propose(ids[:n], 3, sd.SamplingConfig(0.0))
            out.append((chain, tree, greedy))
        (c0, t0, g0), (c1, t1, g1) = out
        assert torch.equal(c0[0], c1[0]) and torch.allclose(c0[1], c1[1], atol=1e-5), n  # sampled chain, q
        assert torch.equal(g0[0], g1[0]) and torch.equal(g0[1], g1[1]), n  # greedy chain, one-hot rows
        assert t0[0].parents == t1[0].parents and torch.equal(t0[1], t1[1]), n  # the same tree, same tokens
    assert isinstance(drafters[1].cache, aot_head.HeadKV)
    assert not isinstance(drafters[0].cache, aot_head.HeadKV)


def test_what_a_compiled_head_cannot_serve_is_refused_or_left_eager(built_head):
    model, head, compiled = built_head
    assert "fuses" in aot_head.head_supported(FeatureHead(model, fuse_layers=(0, -1)))
    fused = FeatureHead(model, fuse_layers=(0, -1))
    assert aot_head.attach_head(fused, enabled=True).__class__ is FeatureHead
    assert aot_head.attach_head(head, enabled=False) is head
    with pytest.raises(ValueError, match="prepack=False"):
        aot_head.build_head(sd.prepack_for_cpu(FeatureHead(model)), options=FAST)
    with pytest.raises(ValueError, match="one sequence"):
        compiled(torch.randn(2, 1, head.fc.out_features), torch.tensor([[1], [2]]), compiled.new_cache())
    d = head.fc.out_features  # no rows: the package would divide by zero and kill the process (SIGFPE)
    with pytest.raises(ValueError, match="at least one row"):
        compiled(torch.randn(1, 0, d), torch.zeros(1, 0, dtype=torch.long), compiled.new_cache())


def test_proposing_again_with_nothing_new_to_feed_is_refused_with_the_fix(built_head):
    model, head, compiled = built_head
    ids = torch.randint(0, 40, (30,), generator=torch.Generator().manual_seed(2))
    feats = model(input_ids=ids[None], output_hidden_states=True).hidden_states[-1][0]  # [30, d]
    for drafter in (sd.FeatureDrafter(head), sd.FeatureDrafter(compiled)):
        drafter.sync(30, feats)
        drafter.propose(ids, 2, sd.SamplingConfig(0.0))
        with pytest.raises(ValueError, match="sync"):  # no sync since: the compiled head got 0 rows (SIGFPE)
            drafter.propose(ids, 2, sd.SamplingConfig(0.0))
        drafter.sync(29, feats[:29])
        drafter.sync(30, feats)  # back one token and forward again: one pair to feed, fine
        drafter.propose(ids, 2, sd.SamplingConfig(0.0))


def test_a_head_loaded_twice_finds_the_same_package(built, tmp_path):
    from specdec_ref.models import feature_draft
    model, _ = built
    torch.manual_seed(1)
    feature_draft.save(FeatureHead(model), tmp_path, {})
    torch.manual_seed(2)  # construction draws random numbers; the file must decide everything the key reads
    a = feature_draft.load(model, tmp_path)
    torch.manual_seed(3)
    b = feature_draft.load(model, tmp_path)
    assert aot.package_path(a) == aot.package_path(b)
    with torch.no_grad():
        b.fc.weight[0, 0] += 1.0
    assert aot.package_path(a) != aot.package_path(b)  # power: other weights, another package


def test_compiles_give_the_avx512_micro_gemm_register_blocks_of_at_most_twelve_accumulators():
    with aot.small_register_blocks():  # imports the micro-GEMMs the way the compile does
        pass
    from torch._inductor.codegen import cpp_micro_gemm as micro
    configs = micro.micro_gemm_configs[micro.CppMicroGemmFP32Vec]

    def accumulators(config):
        return config.register_blocking.block_m * max(config.register_blocking.block_n // 16, 1)

    avx512 = [c for c in configs if c.vec_isa_cls is micro.VecAVX512]
    before = [tuple(c.register_blocking) for c in configs]
    with aot.small_register_blocks():
        inside = micro.micro_gemm_configs[micro.CppMicroGemmFP32Vec]
        assert len(inside) == len(configs)
        assert max(accumulators(c) for c in inside if c.vec_isa_cls is micro.VecAVX512) <= 12
        # the columns stay, the rows shrink to fit; every other ISA's blocks are untouched
        assert [c.register_blocking.block_n for c in inside] == [c.register_blocking.block_n for c in configs]
        assert [c for c in inside if c.vec_isa_cls is not micro.VecAVX512] == \
            [c for c in configs if c.vec_isa_cls is not micro.VecAVX512]
        with aot.small_register_blocks(max_accumulators=24):  # a looser cap changes nothing it allows
            assert [accumulators(c) for c in micro.micro_gemm_configs[micro.CppMicroGemmFP32Vec]] == \
                [min(accumulators(c), 24) for c in inside]
    assert [tuple(c.register_blocking) for c in micro.micro_gemm_configs[micro.CppMicroGemmFP32Vec]] == before
    assert avx512 and max(accumulators(c) for c in avx512) > 12, "torch's own blocks: the cap had work to do"


def test_a_package_name_does_not_depend_on_the_folder_the_weights_came_from():
    model = tiny()
    key = aot.package_key(model)
    model.config._name_or_path = "/another/copy/of/the/same/weights"
    assert aot.package_key(model) == key
    model.config.rms_norm_eps = 1e-3  # a setting the pass depends on: another package
    assert aot.package_key(model) != key


@torch.inference_mode()
@pytest.mark.parametrize("fmt", [5, 6])
def test_an_older_package_is_called_as_todays_and_gives_what_it_gave(built, fmt):
    """`packages.older_runner` for the scripts that time an older package beside today's: a stand-in for a
    package of format 6 (the write position and the whole mask in, the hidden states out) or 5 (masks as wide
    as the buffers), made from today's package, gives the same logits and hidden states through it."""
    model, path = built
    runner = aot.load_package(path)

    def old(ids, positions, write, mask, *kv):  # what a format-6 (or 5) package took and returned
        q, end = ids.shape[1], int(write) + ids.shape[1]
        if fmt <= 5:  # as wide as the buffers, "never" past the positions in use
            assert mask.shape[-1] == kv[0].shape[2] and bool((mask[..., end:] < -1e30).all())
            mask = mask[..., :end].contiguous()
        states = torch.zeros(kv[0].shape[2], model.config.hidden_size)
        logits, best, sums = runner(ids, positions, mask, torch.arange(end), states, *kv)
        return logits, states[end - q:end].clone(), best, sums

    ids = torch.randint(0, 40, (80,), generator=torch.Generator().manual_seed(4))
    today = aot.CompiledCachedModel(model, runner, True)
    older = aot.CompiledCachedModel(model, packages.older_runner(old, fmt), True)
    for end, keep in ((60, 1), (63, 3), (64, 1)):
        assert torch.equal(today.logits(ids[:end], keep=keep), older.logits(ids[:end], keep=keep))
        assert torch.equal(today.hidden, older.hidden)
    if fmt == 5:  # power: called as a format-6 package, with masks only as wide as the positions, it refuses
        wrong = aot.CompiledCachedModel(model, packages.older_runner(old, 6), True)
        with pytest.raises(AssertionError):
            wrong.logits(ids[:60], keep=1)


@torch.inference_mode()
def test_the_flat_runner_returns_what_the_packages_own_call_returns(built):
    model, path = built
    runner = aot.load_package(path)
    assert runner.flat  # our packages return (logits, argmax, row sums): a flat tuple
    inputs = aot.example_inputs(model)
    # the same pass twice writes the same keys and values at the same positions: both calls see equal inputs
    ours, theirs = runner(*inputs), runner.compiled(*inputs)
    assert isinstance(ours, tuple) and len(ours) == len(theirs) == 3
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and torch.equal(a, b)
    assert ours[0].shape[-1] == model.config.vocab_size  # logits first, as CompiledCachedModel unpacks them


def test_a_package_whose_outputs_are_not_a_flat_tuple_is_called_the_usual_way():
    from torch.utils import _pytree as pytree

    class Package:  # a stand-in: outputs {"logits": ...}, so boxed_run's flat list would lose the keys
        class loader:
            @staticmethod
            def get_call_spec():
                return ["", pytree.treespec_dumps(pytree.tree_structure({"logits": 0}))]

            @staticmethod
            def boxed_run(tensors):
                raise AssertionError("boxed_run must not be called for a nested output")

        def __call__(self, *tensors):
            return {"logits": tensors[0]}

    runner = aot.FlatRunner(Package())
    assert not runner.flat
    x = torch.ones(2)
    assert runner(x)["logits"] is x


def test_set_aside_takes_the_compiled_pass_off_inside_the_block_and_puts_it_back_even_on_an_error():
    model, package = tiny_llama(8, seed=0), object()
    model.__dict__[aot.COMPILED_PASS] = package
    try:
        assert aot.compiled_pass(model) is package
        with aot.set_aside(model):
            assert aot.compiled_pass(model) is None  # the loops would run the eager model here
        assert aot.compiled_pass(model) is package
        with pytest.raises(RuntimeError), aot.set_aside(model):
            raise RuntimeError("a failed measurement")
        assert aot.compiled_pass(model) is package
    finally:
        model.__dict__.pop(aot.COMPILED_PASS, None)
    with aot.set_aside(model):  # nothing attached: nothing to set aside, nothing put back
        pass
    assert aot.compiled_pass(model) is None


@pytest.fixture(scope="module")
def built_chain(built_head, tmp_path_factory):
    """The tiny head's chain of 2 drafts in one call (models.aot_chain), built at one thread, on a compiled
    head of its own (the per-pass package for what the chain does not serve)."""
    from specdec_ref.models import aot_chain
    model, head, compiled = built_head
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        path = aot_chain.build_chain(head, 2, tmp_path_factory.mktemp("chain") / "chain.pt2", options=FAST,
                                     verbose=False)
    finally:
        torch.set_num_threads(before)
    chained = aot_head.CompiledHead(head, compiled.runner, compiled.path)
    chains = aot_chain.CompiledChains(head)
    chains.runners[2] = aot.load_package(path)
    chained.__dict__["chains"] = chains
    return model, head, chained


def _counted(chains, calls: list) -> None:  # the chain package's calls, appended to calls
    run = chains.runners[2]
    chains.runners[2] = lambda *a: calls.append(1) or run(*a)


def _inverse_cdf(row: torch.Tensor, u: float) -> int:  # [V] -> the token `sampling.sample` draws at u
    cdf = row.double().cumsum(0)
    return int(torch.searchsorted(cdf, torch.tensor([u], dtype=torch.float64) * cdf[-1], right=True))


@torch.inference_mode()
@pytest.mark.parametrize("temperature,sharpness", [(0.0, 1.0), (1.0, 1.0), (0.7, 1.3)])
def test_a_chain_in_one_call_drafts_from_the_rows_the_head_gives_pass_by_pass(built_chain, temperature,
                                                                             sharpness):
    """Greedy: the same tokens and one-hot rows as the eager head's chain. Sampled: each row is the eager
    head's distribution after the tokens drafted before it (sharpness over the temperature applied), and each
    token is the one `sampling.sample` draws from that row at the uniform the call drew: every token is a draw
    from the row the loop verifies it against. The cache carries on across proposals and buffer growth."""
    from transformers import DynamicCache
    model, head, chained = built_chain
    ids = torch.randint(0, 40, (600,), generator=torch.Generator().manual_seed(4))
    feats = model(input_ids=ids[None], output_hidden_states=True).hidden_states[-1][0]  # [600, d]
    sampling = sd.SamplingConfig(temperature)
    drafter, calls = sd.FeatureDrafter(chained, sharpness=sharpness), []
    _counted(chained.chains, calls)
    drafter.sync(1, feats[:1])
    # the first feed (119 pairs, more than a pass takes) goes pass by pass; then up to 60 pairs a proposal,
    # past the first buffers' 512 positions
    for n in (120, 121, 124, 125, 180, 240, 300, 360, 420, 480, 520, 523):
        drafter.sync(n, feats[:n])
        g = torch.Generator().manual_seed(n)
        state, before = g.get_state(), len(calls)
        tokens, rows = drafter.propose(ids[:n], 2, sampling, g)
        assert len(calls) == before + (n != 120), n  # in one call
        assert tokens.shape == (2,) and rows.shape == (2, head.vocab_size) and drafter.n_cached == n - 1
        # the eager head, fed the same pairs and then the chain's own first token
        cache = DynamicCache()
        f = head(feats[None, :n - 1], ids[None, 1:n], cache)[:, -1:]  # [1, 1, d]
        want = []
        for i in range(2):
            logits = head.logits(f[0])[0]  # [V], -inf off the head's tokens
            want.append(sd.sampling.logits_to_probs(sharpness * logits, sampling) if temperature else
                        sd.sampling.point_masses(logits.argmax(), head.vocab_size, logits.dtype))
            f = head(f, tokens[i].view(1, 1), cache)
        assert torch.allclose(rows, torch.stack(want), atol=1e-4), n
        if temperature == 0:
            assert torch.equal(tokens, torch.stack(want).argmax(-1)), n
        elif n != 120:
            g.set_state(state)
            u = torch.rand(2, generator=g, dtype=torch.float64).tolist()  # the uniforms the call drew
            assert [_inverse_cdf(rows[i], u[i]) for i in range(2)] == tokens.tolist(), n
    if temperature:  # power: another sharpness gives other rows, so the comparison above can fail
        rows = []
        for s in (sharpness, sharpness + 0.5):
            other = sd.FeatureDrafter(chained, sharpness=s)
            other.sync(100, feats[:100])
            other.propose(ids[:100], 2, sampling, torch.Generator().manual_seed(0))
            other.sync(101, feats[:101])
            rows.append(other.propose(ids[:101], 2, sampling, torch.Generator().manual_seed(0))[1][0])
        assert not torch.allclose(rows[0], rows[1], atol=1e-3)


@torch.inference_mode()
def test_what_a_chain_in_one_call_does_not_serve_goes_pass_by_pass(built_chain):
    """No package for γ, top-k or top-p sampling, more pairs than a pass takes, a confidence stop: the chain's
    package is never called, and the drafter drafts pass by pass as before."""
    from specdec_ref.models import aot_chain
    model, head, chained = built_chain
    ids = torch.randint(0, 40, (300,), generator=torch.Generator().manual_seed(5))
    feats = model(input_ids=ids[None], output_hidden_states=True).hidden_states[-1][0]
    calls = []
    _counted(chained.chains, calls)
    cases = [(sd.FeatureDrafter(chained), 3, sd.SamplingConfig(1.0), 150),  # no package for 3
             (sd.FeatureDrafter(chained), 2, sd.SamplingConfig(1.0, top_k=5), 150),
             (sd.FeatureDrafter(chained), 2, sd.SamplingConfig(1.0, top_p=0.9), 150),
             (sd.FeatureDrafter(chained, confidence_stop=0.1), 2, sd.SamplingConfig(0.0), 150),
             (sd.FeatureDrafter(chained), 2, sd.SamplingConfig(0.0), 100 + aot.MAX_QUERY + 1)]
    for drafter, gamma, sampling, n in cases:
        drafter.sync(100, feats[:100])
        drafter.propose(ids[:100], gamma, sampling, torch.Generator().manual_seed(0))  # the first feed
        drafter.sync(n, feats[:n])
        tokens, rows = drafter.propose(ids[:n], gamma, sampling, torch.Generator().manual_seed(0))
        assert tokens.shape[0] >= 1 and rows.shape == (tokens.shape[0], head.vocab_size)
    assert calls == []
    drafter = sd.FeatureDrafter(chained)  # power: a plain chain of 2 does call it
    drafter.sync(100, feats[:100])
    drafter.propose(ids[:100], 2, sd.SamplingConfig(0.0))
    drafter.sync(101, feats[:101])
    drafter.propose(ids[:101], 2, sd.SamplingConfig(0.0))
    assert calls == [1]
    assert chained.chains.built() == [2]
    # this machine's cache has no chain package for the head: nothing built, and nothing to draft with
    fresh = aot_chain.CompiledChains(head)
    assert fresh.built() == [] and fresh.runner(2) is None
    assert fresh.draft(feats[:1], ids[1:2], chained.new_cache(), 2, sd.SamplingConfig(0.0), None) is None


@torch.inference_mode()
def test_greedy_chains_drafted_in_one_call_give_plain_decodings_tokens(built_chain):
    model, _, chained = built_chain
    ids = torch.randint(0, 40, (1, 30), generator=torch.Generator().manual_seed(6))
    plain = sd.autoregressive_generate(model, ids, 40, sampling=sd.SamplingConfig(0.0), cache="dynamic")
    calls = []
    _counted(chained.chains, calls)
    out = sd.speculative_generate(model, sd.FeatureDrafter(chained), ids, 40, gamma=2,
                                  sampling=sd.SamplingConfig(0.0), cache="dynamic")
    assert torch.equal(out.tokens, plain.tokens)
    drafted = [d for d in out.stats.drafted if d]  # the last iterations may draft fewer: the tokens left
    assert len(calls) == drafted.count(2) > 10 and out.stats.draft_calls == sum(drafted)  # γ passes, one call


@pytest.fixture(scope="module")
def built_tree(built_head, tmp_path_factory):
    """The tiny head's greedy trees 2 deep and 2 wide grown in one call (models.aot_tree), built at one
    thread, on a compiled head of its own (the per-pass package for what the tree does not serve)."""
    from specdec_ref.models import aot_tree
    model, head, compiled = built_head
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        path = aot_tree.build_tree(head, 2, 2, tmp_path_factory.mktemp("tree") / "tree.pt2", options=FAST,
                                   verbose=False)
    finally:
        torch.set_num_threads(before)
    grown = aot_head.CompiledHead(head, compiled.runner, compiled.path)
    trees = aot_tree.CompiledTrees(head)
    trees.runners[2, 2] = aot.load_package(path)
    grown.__dict__["trees"] = trees
    return model, head, grown, compiled


def _counted_trees(trees, calls: list) -> None:  # the tree package's calls, appended to calls
    run = trees.runners[2, 2]
    trees.runners[2, 2] = lambda *a: calls.append(1) or run(*a)


@torch.inference_mode()
@pytest.mark.parametrize("budget", [sd.TreeBudget(2, 2, 4), sd.TreeBudget(2, 2, 3), sd.TreeBudget(2, 2, 2),
                                    sd.TreeBudget(2, 2, 4, stop=0.95)])
def test_a_tree_grown_in_one_call_is_the_tree_grown_pass_by_pass(built_tree, budget):
    """The same tree (parents) and tokens as the per-pass head's greedy growth (`tree.grow_tree`), proposal
    after proposal, the caches carrying on across buffer growth; every budget of the package's depth and width
    (its nodes, its stop) from the one package. With stop 0.95 some trees stop at depth 1 (power: the stop
    rule is exercised, and the package keeps no node of a depth it did not grow)."""
    model, head, grown, compiled = built_tree
    ids = torch.randint(0, 40, (600,), generator=torch.Generator().manual_seed(7))
    feats = model(input_ids=ids[None], output_hidden_states=True).hidden_states[-1][0]  # [600, d]
    ours, theirs, calls, sizes = sd.FeatureDrafter(grown), sd.FeatureDrafter(compiled), [], []
    _counted_trees(grown.trees, calls)
    greedy = sd.SamplingConfig(0.0)
    for drafter in (ours, theirs):
        drafter.sync(1, feats[:1])
    for n in (40, 41, 44, 45, 100, 150, 200, 260, 320, 380, 440, 500, 520, 523):
        got = []
        for drafter in (ours, theirs):
            drafter.sync(n, feats[:n])
            tree, tokens, q = drafter.propose_tree(ids[:n], budget, greedy)
            got.append((tree.parents, tokens.tolist(), q, drafter.n_cached))
        assert got[0] == got[1], n
        sizes.append(len(got[0][0]) - 1)
    assert len(calls) == 14  # every proposal in one call (the first feeds 39 pairs, a package takes 64)
    if budget.stop:
        assert min(sizes) == 2 < max(sizes)  # some trees stopped at the root's two children, some did not
    else:
        assert set(sizes) == {budget.n_nodes}


@torch.inference_mode()
def test_what_a_tree_in_one_call_does_not_serve_grows_pass_by_pass(built_tree):
    """Sampled growth, a static tree, a budget of another depth or width, a tree cut shorter near the end of a
    generation (max_depth), more pairs than a pass takes: the tree's package is never called, and the drafter
    grows the tree pass by pass as before (power: a greedy 2/2/3 calls it). Bad shapes are refused."""
    from specdec_ref.models import aot_tree
    model, head, grown, _ = built_tree
    ids = torch.randint(0, 40, (300,), generator=torch.Generator().manual_seed(8))
    feats = model(input_ids=ids[None], output_hidden_states=True).hidden_states[-1][0]
    calls, greedy = [], sd.SamplingConfig(0.0)
    _counted_trees(grown.trees, calls)
    cases = [(sd.TreeBudget(2, 2, 4), sd.SamplingConfig(1.0), None, 150),
             (sd.Tree.from_branching((2, 2)), greedy, None, 150),
             (sd.TreeBudget(3, 2, 4), greedy, None, 150), (sd.TreeBudget(2, 3, 4), greedy, None, 150),
             (sd.TreeBudget(2, 2, 4), greedy, 1, 150),
             (sd.TreeBudget(2, 2, 4), greedy, None, 100 + aot.MAX_QUERY + 1)]
    for shape, sampling, max_depth, n in cases:
        drafter = sd.FeatureDrafter(grown)
        drafter.sync(100, feats[:100])
        drafter.propose(ids[:100], 1, greedy)  # the first feed
        drafter.sync(n, feats[:n])
        tree, tokens, _ = drafter.propose_tree(ids[:n], shape, sampling, torch.Generator().manual_seed(0),
                                               max_depth)
        assert tree.size >= 1 and tokens.shape == (tree.size + 1,) and drafter.n_cached == n - 1
    assert calls == []
    drafter = sd.FeatureDrafter(grown)  # power
    drafter.sync(100, feats[:100])
    drafter.propose(ids[:100], 1, greedy)
    drafter.sync(101, feats[:101])
    assert drafter.propose_tree(ids[:101], sd.TreeBudget(2, 2, 3), greedy)[0].size == 3 and calls == [1]
    assert grown.trees.built() == [(2, 2)]
    fresh = aot_tree.CompiledTrees(head)  # this machine's cache has no tree package for the head
    assert fresh.built() == [] and fresh.runner((2, 2)) is None
    assert not fresh.serves(sd.TreeBudget(2, 2, 4), 2, greedy, 1)
    for depth, width in ((1, 2), (2, 0), (2, aot_head.RANKED + 1)):
        with pytest.raises(ValueError, match="depth >= 2"):
            aot_tree.HeadTree(head, depth, width)


@torch.inference_mode()
def test_greedy_trees_grown_in_one_call_give_plain_decodings_tokens(built_tree):
    model, _, grown, _ = built_tree
    ids = torch.randint(0, 40, (1, 30), generator=torch.Generator().manual_seed(9))
    plain = sd.autoregressive_generate(model, ids, 40, sampling=sd.SamplingConfig(0.0), cache="dynamic")
    calls = []
    _counted_trees(grown.trees, calls)
    drafter = sd.FeatureDrafter(grown)
    out = sd.speculative_generate(model, drafter, ids, 40, tree=sd.TreeBudget(2, 2, 3),
                                  sampling=sd.SamplingConfig(0.0), cache="dynamic")
    assert torch.equal(out.tokens, plain.tokens)
    assert len(calls) > 5 and drafter.calls >= 2 * len(calls)  # two draft passes counted for each call
