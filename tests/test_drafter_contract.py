"""The drafter contract: every drafter implements all of `Drafter` (and `TreeDrafter`) explicitly, wrappers
forward every member, and each drafter's proposals after many iterations equal a from-scratch computation."""
import pytest
import torch

import specdec_ref as sd
from specdec_ref.cache import CachedModel
from specdec_ref.models.feature_draft import FeatureHead
from specdec_ref.models.toy import tiny_pair

GREEDY = sd.SamplingConfig(temperature=0)
N_NEW = 150  # tokens per generation: enough for 20+ iterations even when most drafts are accepted
MEMBERS = ("vocab_size", "default_gamma", "wants_target_hidden", "calls", "n_cached", "propose", "sync",
           "propose_tree", "default_method")


def feature_head(target, seed=0):
    torch.manual_seed(seed)  # construction only
    return FeatureHead(target).eval()


def make_drafters(target, draft):
    """One of each kind, freshly built: name -> zero-argument factory."""
    V = sd.vocab_size(target)
    return {
        "model": lambda: sd.ModelDrafter(draft),
        "feature": lambda: sd.FeatureDrafter(feature_head(target)),
        "ngram": lambda: sd.NgramDrafter(V),
        "scheduled(model)": lambda: sd.ScheduledDrafter(sd.ModelDrafter(draft)),
        "fallback(ngram, feature)": lambda: sd.FallbackDrafter(sd.NgramDrafter(V),
                                                               sd.FeatureDrafter(feature_head(target))),
    }


@pytest.fixture(scope="module")
def pair8():
    return tiny_pair(vocab_size=8, seed=0, noise=0.6, hidden=32, n_layers=2, max_positions=256)


def test_every_drafter_implements_the_whole_contract(pair8):
    for name, make in make_drafters(*pair8).items():
        drafter = make()
        missing = [m for m in MEMBERS if not hasattr(type(drafter), m) and not hasattr(drafter, m)]
        assert not missing, f"{name} lacks {missing}"
        assert isinstance(drafter, sd.Drafter) and isinstance(drafter, sd.TreeDrafter), name


def test_wrappers_forward_what_the_loop_reads(pair8):
    target, draft = pair8
    feature = sd.FeatureDrafter(feature_head(target))
    for wrapper in (sd.ScheduledDrafter(feature), sd.FallbackDrafter(sd.NgramDrafter(8), feature)):
        assert wrapper.wants_target_hidden, type(wrapper).__name__
        assert wrapper.vocab_size == feature.vocab_size
    assert not sd.FallbackDrafter(sd.NgramDrafter(8), sd.ModelDrafter(draft)).wants_target_hidden


def test_fallback_over_a_feature_drafter_really_drafts(pair8):
    """Bug fixed: the loop sniffed a flag the wrapper did not have, so the target never kept its features and
    the feature drafter behind a FallbackDrafter never proposed a token."""
    target, _ = pair8
    drafter = sd.FallbackDrafter(sd.NgramDrafter(8, min_ngram=3), sd.FeatureDrafter(feature_head(target)))
    out = sd.speculative_generate(target, drafter, torch.tensor([[1, 2, 3, 4]]), 30, gamma=3, sampling=GREEDY)
    assert 1 in drafter.used, "the feature drafter never spoke"
    drafted_by_feature = [d for d, u in zip(out.stats.drafted, drafter.used) if u == 1]
    assert sum(drafted_by_feature) > 0, "the feature drafter was asked but proposed nothing"


def from_scratch(make, target, context: torch.Tensor, gamma: int):
    """A fresh drafter's proposal after `context`: caches built in one go, features from one target pass."""
    drafter = make()
    drafter.sync(0)
    hidden = None
    if drafter.wants_target_hidden:
        lm = CachedModel(target, keep_hidden=True)
        lm.logits(context)
        hidden = lm.hidden[:-1]  # [T-1, d]: every token but the newest, as the loop hands them over
    drafter.sync(context.shape[0] - 1, hidden)
    return drafter.propose(context, gamma, GREEDY)


@pytest.mark.parametrize("name", ["model", "feature", "ngram", "scheduled(model)",
                                  "fallback(ngram, feature)"])
def test_proposals_after_many_iterations_equal_a_from_scratch_computation(pair8, name):
    target, draft = pair8
    make = make_drafters(target, draft)[name]
    prompt = torch.tensor([[1, 2, 3, 4]])
    steps = []
    out = sd.speculative_generate(target, make(), prompt, N_NEW, gamma=3, sampling=GREEDY,
                                  on_step=steps.append)
    sequence = torch.cat([prompt[0], out.tokens])
    assert len(steps) >= 20, f"only {len(steps)} iterations"
    checked = 0
    for step in steps[20:]:
        if step.context_len + 3 >= prompt.shape[1] + N_NEW:  # near the end the loop asks for fewer tokens
            continue
        if name == "scheduled(model)":  # the schedule depends on history: compare at the length it chose
            gamma = step.draft_tokens.shape[0]
        else:
            gamma = 3
        if step.draft_tokens.shape[0] == 0 or gamma == 0:
            continue
        tokens, probs = from_scratch(make, target, sequence[:step.context_len], gamma)
        assert tokens.tolist() == step.draft_tokens.tolist(), f"{name} at context {step.context_len}"
        torch.testing.assert_close(probs.to(step.draft_probs.dtype), step.draft_probs, atol=1e-6, rtol=0)
        checked += 1
    assert checked >= 5, f"{name}: only {checked} iterations compared"


@pytest.mark.parametrize("name", ["model", "feature"])
def test_trees_after_many_iterations_equal_a_from_scratch_computation(pair8, name):
    target, draft = pair8
    make = make_drafters(target, draft)[name]
    budget = sd.TreeBudget(depth=3, topk=2, n_nodes=5)
    prompt = torch.tensor([[1, 2, 3, 4]])
    steps = []
    out = sd.speculative_generate(target, make(), prompt, N_NEW, tree=budget, sampling=GREEDY,
                                  on_step=steps.append)
    sequence = torch.cat([prompt[0], out.tokens])
    assert len(steps) >= 20
    for step in steps[20:-3]:  # the last steps are cut short by max_new_tokens
        drafter = make()
        drafter.sync(0)
        hidden = None
        context = sequence[:step.context_len]
        if drafter.wants_target_hidden:
            lm = CachedModel(target, keep_hidden=True)
            lm.logits(context)
            hidden = lm.hidden[:-1]
        drafter.sync(context.shape[0] - 1, hidden)
        tree, tokens, draft_probs = drafter.propose_tree(context, budget, GREEDY)
        assert draft_probs is None  # top-k children: judged as point masses
        assert tree == step.tree and tokens[1:].tolist() == step.draft_tokens.tolist(), \
            f"{name} at {step.context_len}"


def test_a_drafter_without_propose_tree_is_refused_by_the_tree_loop(pair8):
    target, _ = pair8

    class ChainOnly:
        vocab_size, default_gamma, wants_target_hidden, calls, n_cached = 8, 2, False, 0, 0

        def propose(self, context_ids, gamma, sampling, generator=None):
            return context_ids[:0], torch.zeros(0, 8)

        def sync(self, n_kept, target_hidden=None):
            pass

    with pytest.raises(ValueError, match="propose_tree"):
        sd.speculative_generate(target, ChainOnly(), torch.tensor([[1, 2]]), 5, tree=sd.TreeBudget())


class ProposeOnly:
    """A reader's first drafter, as chapter 5 might inspire: it proposes, and implements nothing else."""

    def propose(self, context_ids, gamma, sampling, generator=None):
        return context_ids[-1:].repeat(gamma), torch.full((gamma, 8), 1 / 8)


@pytest.mark.parametrize("method", [dict(gamma=2), dict(tree=(2, 1)), dict(tree=sd.TreeBudget(2, 2, 3)), {}],
                         ids=str)
def test_a_drafter_with_only_propose_is_refused_naming_what_it_lacks(pair8, method):
    target, _ = pair8
    with pytest.raises(ValueError, match="ProposeOnly lacks sync, vocab_size, default_gamma, "
                                         "wants_target_hidden, calls, n_cached: see specdec_ref.Drafter"):
        sd.speculative_generate(target, ProposeOnly(), torch.tensor([[1, 2]]), 5, **method)
    with pytest.raises(ValueError, match="ProposeOnly lacks sync"):
        sd.FallbackDrafter(sd.NgramDrafter(8), ProposeOnly())


@pytest.mark.parametrize("shape", [sd.Tree.from_branching((2, 2)), sd.TreeBudget(depth=2, topk=2, n_nodes=4)])
def test_every_tree_drafter_drafts_static_and_dynamic_shapes(pair8, shape):
    """propose_tree takes either shape; sampled children (i.i.d. in a static tree, without replacement in a
    dynamic one) come with their draft rows, greedy ones and lookups as point masses."""
    target, draft = pair8
    ids = torch.tensor([[1, 2, 3, 1, 2]])
    for name, make in make_drafters(target, draft).items():
        for sampling in (GREEDY, sd.SamplingConfig(1.0)):
            steps = []
            sd.speculative_generate(target, make(), ids, 12, tree=shape, sampling=sampling,
                                    generator=torch.Generator().manual_seed(0), on_step=steps.append)
            drafted = [s for s in steps if s.tree.size]
            assert drafted, f"{name} drafted nothing"
            sampled_rows = [s.draft_probs is not None for s in drafted]
            expect = not sampling.greedy and "ngram" not in name
            # a fallback mixes lookup and the head, iteration by iteration
            if not name.startswith("fallback"):
                assert all(r == expect for r in sampled_rows), f"{name} {sampling}"
