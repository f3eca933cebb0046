"""The feature-head training pipeline runs end to end in quick mode, resumes, and exports loadable weights."""
import json

import pytest
import torch

import specdec_ref as sd
from specdec_ref.distill import eagle
from specdec_ref.drafters import FeatureDrafter
from specdec_ref.models import feature_draft


@pytest.mark.slow
def test_quick_eagle_run_trains_resumes_and_exports(offline_pair, tmp_path):
    target, _, tok = offline_pair
    features_only = eagle.EagleConfig(out=str(tmp_path / "run"), **{**eagle.QUICK, "stop_after": "features"})
    assert eagle.run(features_only, target, tok) == (None, [], {})  # stops where it is told to
    assert list((tmp_path / "run" / "features").glob("*.pt")) and not (tmp_path / "run" / "ckpt.pt").exists()
    cfg = eagle.EagleConfig(out=str(tmp_path / "run"), **eagle.QUICK)
    head, curve, report = eagle.run(cfg, target, tok)
    assert [c["step"] for c in curve] == [3, 6]
    assert (tmp_path / "run" / "ckpt.pt").exists() and (tmp_path / "run" / "prompts.json").exists()
    prompts = json.loads((tmp_path / "run" / "prompts.json").read_text())
    # held out stays held out
    assert not set(p.lower() for p in prompts) & set(p.lower() for p in eagle.HELD_OUT)
    assert set(report) == {"greedy", "T=1"} and len(report["greedy"]) == 4
    _, again, _ = eagle.run(cfg, target, tok)  # every stage resumes: nothing left to do
    assert again == curve
    assert "resumed from step 6" in (tmp_path / "run" / "train.log").read_text()
    feature_draft.save(head, tmp_path / "export", {"note": "test"})
    loaded = feature_draft.load(target, tmp_path / "export")
    ids = sd.encode_chat(tok, "Name a colour.")
    greedy = sd.SamplingConfig(0)
    plain = sd.autoregressive_generate(target, ids, 8, sampling=greedy).tokens
    spec = sd.speculative_generate(target, FeatureDrafter(loaded), ids, 8, gamma=2, sampling=greedy).tokens
    assert spec.tolist() == plain.tolist()  # fp32: the offline target has no near-tie in these 8 tokens
    with torch.no_grad():
        assert torch.equal(loaded.fc.weight, head.fc.weight.half().float())  # shipped in float16, loaded back


def test_an_unknown_last_stage_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="one of prompts, answers, features, train, eval"):
        eagle.run(eagle.EagleConfig(out=str(tmp_path / "run"), stop_after="feature"))
    assert not (tmp_path / "run").exists()


def test_corpus_merges_other_runs_and_refuses_a_folder_without_answers(tmp_path):
    from specdec_ref.distill.eagle import EagleConfig, corpus
    for run in ("a", "b"):
        (tmp_path / run / "answers").mkdir(parents=True)
        for i in range(2):
            (tmp_path / run / "answers" / f"shard_{i:05d}.pt").write_bytes(b"")
    own = sorted((tmp_path / "a" / "answers").glob("*.pt"))
    cfg = EagleConfig(out=str(tmp_path / "a"), extra_runs=str(tmp_path / "b"))
    merged = corpus(cfg, own)
    assert merged[:2] == own and [p.parent.parent.name for p in merged[2:]] == ["b", "b"]
    assert corpus(EagleConfig(out=str(tmp_path / "a")), own) == own
    with pytest.raises(ValueError, match="no answers"):
        corpus(EagleConfig(out=str(tmp_path / "a"), extra_runs=str(tmp_path / "missing")), own)


def _toy_head():
    return _toy_pair()[1]


def _toy_pair():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    target = LlamaForCausalLM(config).float().eval()
    return target, feature_draft.FeatureHead(target, 1).eval()


@torch.no_grad()
def test_training_time_test_passes_equal_drafting_from_own_features():
    """Pass s at position i must be what the head computes when it drafts s + 1 tokens ahead of i - s."""
    from transformers import DynamicCache
    head, L, steps = _toy_head(), 14, 4
    g = torch.Generator().manual_seed(1)
    ids, hid = torch.randint(0, 40, (L,), generator=g), torch.randn(L, 32, generator=g)
    passes = eagle.ttt_features(head, hid[None, :-1], ids[None, 1:], steps)
    for s in range(steps):
        for i in range(s, L - 1):
            cache = DynamicCache()
            f = head(hid[None, :i - s + 1], ids[None, 1:i - s + 2], cache)[0, -1]  # true features up to i - s
            for r in range(1, s + 1):  # then its own guesses, with the true tokens
                f = head(f[None, None], ids[None, i - s + r + 1, None], cache)[0, 0]
            torch.testing.assert_close(passes[s][0, i], f, atol=1e-5, rtol=1e-4)
    # power: a second pass that sees its own guesses at every earlier position drafts something else
    wrong_mask = torch.zeros(1, 1, L - 1, 2 * (L - 1))
    wrong_mask[..., :L - 1] = torch.finfo(torch.float32).min
    wrong_mask[..., L - 1:] = eagle.ttt_mask(L - 1, 0, torch.float32)
    cache = DynamicCache()
    first = head(hid[None, :-1], ids[None, 1:], cache)
    feats = torch.cat([first[:, :1], first[:, :-1]], dim=1)
    wrong = head(feats, ids[None, 1:], cache, position_ids=torch.arange(L - 1)[None],
                 attention_mask=wrong_mask)
    assert not torch.allclose(wrong[0, 5:], passes[1][0, 5:], atol=1e-3)


def test_training_time_test_loss_trains_every_depth():
    head = _toy_head().train()
    g = torch.Generator().manual_seed(2)
    rows = [{"ids": torch.randint(0, 40, (n,), generator=g), "hidden": torch.randn(n, 32, generator=g),
             "n_prompt": torch.tensor(3)} for n in (9, 12)]
    loss, agree = eagle.eagle_loss(head, rows, 0.1, 0.1, g, steps=3)
    assert agree.shape == (3,) and torch.isfinite(loss)
    loss.backward()
    assert head.fc.weight.grad is not None and head.fc.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="no feature-draft weights"):  # --init names a folder without a head
        eagle.train(eagle.EagleConfig(init="/nonexistent"), None, [])


def test_total_variation_term_is_added_and_trains_acceptance():
    """tv_weight adds the mean 1 - Σ min(p, q) over depths (a number in (0, 1]), and descending on it alone
    raises Σ min(p, q), the acceptance probability at T = 1."""
    head = _toy_head().train()
    g = torch.Generator().manual_seed(4)
    rows = [{"ids": torch.randint(0, 40, (n,), generator=g), "hidden": torch.randn(n, 32, generator=g),
             "n_prompt": torch.tensor(3)} for n in (9, 12)]
    base, _ = eagle.eagle_loss(head, rows, 0.0, 0.0, None, steps=2)
    with_tv, _ = eagle.eagle_loss(head, rows, 0.0, 0.0, None, steps=2, tv_weight=1.0)
    tv = float(with_tv - base)
    assert 0 < tv <= 1
    opt = torch.optim.SGD([p for p in head.parameters() if p.requires_grad], lr=0.5)
    for _ in range(30):
        opt.zero_grad()
        loss = (eagle.eagle_loss(head, rows, 0.0, 0.0, None, steps=2, tv_weight=1.0)[0]
                - eagle.eagle_loss(head, rows, 0.0, 0.0, None, steps=2)[0])  # the total variation term alone
        loss.backward()
        opt.step()
    after = float(eagle.eagle_loss(head, rows, 0.0, 0.0, None, steps=2, tv_weight=1.0)[0]
                  - eagle.eagle_loss(head, rows, 0.0, 0.0, None, steps=2)[0])
    assert after < tv - 0.01, (tv, after)


@torch.no_grad()
def test_grown_head_starts_as_the_shallow_head_and_can_learn():
    """feature_draft.grow adds layers that begin as the identity: same features, then trainable."""
    target, head = _toy_pair()
    g = torch.Generator().manual_seed(3)
    hid, ids = torch.randn(1, 7, 32, generator=g), torch.randint(0, 40, (1, 7), generator=g)
    deeper = feature_draft.grow(head, target, 3).eval()
    assert deeper.body.config.num_hidden_layers == 3
    torch.testing.assert_close(deeper(hid, ids), head(hid, ids))
    # power: the same layers without the zeroed projections compute something else
    for layer in deeper.body.layers[1:]:
        layer.mlp.down_proj.weight.normal_(0, 0.1, generator=g)
    assert not torch.allclose(deeper(hid, ids), head(hid, ids), atol=1e-3)
    with pytest.raises(ValueError, match="grow makes a head deeper or wider"):
        feature_draft.grow(deeper, target, 1)


@torch.no_grad()
def test_fused_head_starts_as_the_plain_head_and_reads_the_layers_it_names():
    """A head grown with fuse_layers (EAGLE-3) computes what the plain head does until `fuse` is trained."""
    from specdec_ref.cache import CachedModel, layer_features
    target, head = _toy_pair()
    fused = feature_draft.grow(head, target, 1, (0, 1, -1)).eval()
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(0, 40, (9,), generator=g)
    out = target.model(input_ids=ids[None], output_hidden_states=True)
    layers = layer_features(out.hidden_states, (0, 1, -1))  # [1, 9, 96]
    torch.testing.assert_close(layers[..., -32:], out.last_hidden_state)
    torch.testing.assert_close(fused(layers[:, :-1], ids[None, 1:]),
                               head(out.last_hidden_state[:, :-1], ids[None, 1:]))
    # the loop's cache keeps exactly those layers for a fused drafter, and the same logits as without them
    lm, plain = CachedModel(target, keep_hidden=(0, 1, -1)), CachedModel(target, keep_hidden=True)
    torch.testing.assert_close(lm.logits(ids), plain.logits(ids))
    torch.testing.assert_close(lm.hidden, layers[0])
    assert FeatureDrafter(fused).wants_target_hidden == (0, 1, -1)
    # power: once `fuse` mixes in the other layers, the output moves
    fused.fuse.weight[:, :32].normal_(0, 0.1, generator=g)
    assert not torch.allclose(fused(layers[:, :-1], ids[None, 1:]),
                              head(out.last_hidden_state[:, :-1], ids[None, 1:]), atol=1e-3)
    with pytest.raises(ValueError, match="fused target layers"):
        fused(layers[..., :64], ids[None])
    with pytest.raises(ValueError, match="ending with -1"):
        feature_draft.FeatureHead(target, 1, fuse_layers=(0, 1))


def test_fused_head_drafts_exactly_and_survives_save_and_load(tmp_path):
    """Greedy speculative decoding with a fused feature head (chain and tree) equals plain greedy decoding."""
    target, head = _toy_pair()
    fused = feature_draft.grow(head, target, 2, (1, -1)).eval()
    with torch.no_grad():
        fused.fuse.weight.normal_(0, 0.05)  # a fusion that really mixes both layers
    feature_draft.save(fused, tmp_path, {})
    loaded = feature_draft.load(target, tmp_path)
    assert loaded.fuse_layers == (1, -1) and loaded.body.config.num_hidden_layers == 2
    ids = torch.randint(0, 40, (1, 6), generator=torch.Generator().manual_seed(5))
    want = sd.autoregressive_generate(target, ids, 20, sampling=sd.SamplingConfig(0)).tokens
    for how in (dict(gamma=3), dict(gamma=None)):
        drafter = FeatureDrafter(loaded, default_tree=sd.TreeBudget(depth=3, topk=2, n_nodes=6))
        got = sd.speculative_generate(target, drafter, ids, 20, sampling=sd.SamplingConfig(0), **how)
        assert torch.equal(got.tokens, want), how
        assert sum(got.stats.drafted) > 0  # it really drafted


def test_wider_head_drafts_exactly_survives_save_and_load_and_refuses_a_bad_width(tmp_path):
    """A head with a wider MLP (ffn_size) keeps its width through save/load and grow, and drafts exactly."""
    target, _ = _toy_pair()
    narrow = target.config.intermediate_size
    wide = feature_draft.FeatureHead(target, 1, ffn_size=2 * narrow).eval()
    assert wide.ffn_size == 2 * narrow and wide.body.layers[0].mlp.up_proj.out_features == 2 * narrow
    assert feature_draft.FeatureHead(target, 1).ffn_size == narrow  # power: the default is the target's
    feature_draft.save(wide, tmp_path, {})
    loaded = feature_draft.load(target, tmp_path)
    assert loaded.ffn_size == 2 * narrow
    assert feature_draft.grow(loaded, target, 2).ffn_size == 2 * narrow
    ids = torch.randint(0, 40, (1, 6), generator=torch.Generator().manual_seed(6))
    want = sd.autoregressive_generate(target, ids, 16, sampling=sd.SamplingConfig(0)).tokens
    got = sd.speculative_generate(target, FeatureDrafter(loaded), ids, 16, sampling=sd.SamplingConfig(0),
                                  gamma=2)
    assert torch.equal(got.tokens, want)
    with pytest.raises(ValueError, match="ffn_size is the MLP's width"):
        feature_draft.FeatureHead(target, 1, ffn_size=0)
    with pytest.raises(ValueError, match="a narrower head trains from scratch"):
        eagle.train(eagle.EagleConfig(init=str(tmp_path), ffn_size=narrow), target, [])


@torch.no_grad()
def test_widened_head_starts_as_the_narrow_head_and_its_new_units_can_learn():
    """grow(..., ffn_size=wider) keeps the old MLP units and adds units that output nothing until trained."""
    target, head = _toy_pair()
    narrow = head.ffn_size
    g = torch.Generator().manual_seed(7)
    hid, ids = torch.randn(1, 7, 32, generator=g), torch.randint(0, 40, (1, 7), generator=g)
    wide = feature_draft.grow(head, target, 2, ffn_size=3 * narrow).eval()
    assert wide.ffn_size == 3 * narrow and wide.body.config.num_hidden_layers == 2
    torch.testing.assert_close(wide(hid, ids), head(hid, ids))
    mlp = wide.body.layers[0].mlp
    assert mlp.up_proj.weight[narrow:].abs().sum() > 0  # the new units' inputs are random, not zero
    with torch.enable_grad():  # so their output columns get a gradient
        wide.zero_grad()
        wide.train()(hid, ids).square().sum().backward()
    assert mlp.down_proj.weight.grad[:, narrow:].abs().sum() > 0
    # power: new output columns that are not zero change what the head computes
    mlp.down_proj.weight[:, narrow:].normal_(0, 0.1, generator=g)
    assert not torch.allclose(wide.eval()(hid, ids), head(hid, ids), atol=1e-3)
    with pytest.raises(ValueError, match="grow makes a head deeper or wider"):
        feature_draft.grow(wide, target, 2, ffn_size=narrow)
