"""Tree speculative decoding: the tree pass computes the right logits, and the output is exact.

Exactness is tested at two levels, each with a power test against a broken rule at the same
significance level (SIGNIFICANCE = 0.001) and with fixed seeds, so nothing can flake:
  one node: many draws of k siblings from a draft row (i.i.d., without replacement, or the draft's top k),
  judged by `verify_tree` (fast);
  sequences: the first 5 tokens on the vocabulary-3 toy pair, whose 3^5 = 243 sequences are
  enumerated exactly (slow: thousands of generations).
"""
from collections import Counter

import pytest
import torch

import specdec_ref as sd
from specdec_ref import generate as generate_mod
from specdec_ref import tree as tree_mod
from specdec_ref.cache import CachedModel, cached_model
from specdec_ref.lab.stats import SIGNIFICANCE, chi_square_gof, probs_to_dict
from specdec_ref.models.toy import exact_sequence_distribution, tiny_llama, tiny_pair
from specdec_ref.sampling import sample
from specdec_ref.drafters import ModelDrafter
from specdec_ref.generate import tree_step
from specdec_ref.lab.trees import accepted_length_vs_chain
from specdec_ref.tree import Tree, tree_attention_mask, tree_position_ids, verify_tree
from specdec_ref.verify import residual

GREEDY, T1 = sd.SamplingConfig(0), sd.SamplingConfig(1.0)


def tree_generate(target, draft, ids, n, *, tree, **kw):
    return sd.speculative_generate(target, draft, ids, n, tree=tree, **kw)


def tree_pass(lm, context, tree, node_tokens):  # [T], [N+1] -> [N+1, V]: the target's pass of `tree_step`
    T, start = context.shape[0], lm.n_cached
    mask = tree_attention_mask(tree, T, start, T + tree.size, lm.dtype)
    positions = tree_position_ids(tree, T, start, T + tree.size)
    return lm.logits(torch.cat([context, node_tokens[1:]]), keep=tree.size + 1, position_ids=positions,
                     attention_mask=mask)


def verify_tree_siblings_against_original_target(tree, node_tokens, target_probs, draft_probs,
                                                  generator=None, replacement=True):
    """Bug: every sibling is judged against the original target_probs, never against the residual."""
    path, node = [], 0
    while True:
        p = target_probs[node]
        q = draft_probs[node] if draft_probs is not None else None  # None: a tree with nothing drafted
        for child in tree.children(node):
            u = torch.rand((), generator=generator, device=p.device, dtype=p.dtype)
            if u * q[node_tokens[child]] < p[node_tokens[child]]:
                break
        else:
            return path, sample(residual(p, q) if tree.children(node) else p, generator)
        node = child
        path.append(node)


# --- the tree pass: one forward, the same logits as each path run as a plain sequence -------------------

@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("branching", [(2, 2), (3, 1, 2), (1, 1, 1)])
def test_tree_logits_equal_each_path_run_as_a_sequence(attn, branching):
    model = tiny_llama(8, seed=1, n_layers=2, hidden=32)
    model.set_attn_implementation(attn)
    tree = Tree.from_branching(branching)
    context = torch.tensor([1, 2, 3, 4, 5, 6])
    node_tokens = torch.randint(0, 8, (tree.size + 1,), generator=torch.Generator().manual_seed(0))  # [N+1]
    node_tokens[0] = context[-1]
    # sdpa keeps float64 throughout; eager's softmax runs in float32 (transformers' Llama), so allow its
    # rounding
    tol = 1e-10 if attn == "sdpa" else 1e-5
    lm = CachedModel(model)
    with torch.inference_mode():
        lm.logits(context[:4])  # part of the context is cached already, as in a real step
        logits = tree_pass(lm, context, tree, node_tokens)
        ancestry = tree.ancestry()
        for i in range(tree.size + 1):
            path = [j for j in range(1, i + 1) if ancestry[i, j]]  # root-to-node, root excluded
            plain = model(input_ids=torch.cat([context, node_tokens[path]])[None]).logits[0, -1]  # [V]
            torch.testing.assert_close(logits[i], plain, rtol=0, atol=tol)
        # after rolling back, the cache is the plain context's: the next tokens continue it correctly
        lm.rollback(context.shape[0])
        longer = torch.cat([context, torch.tensor([7, 0])])
        torch.testing.assert_close(lm.logits(longer), model(input_ids=longer[None]).logits[0, -2:],
                                   rtol=0, atol=tol)


def mask_from_the_definition(tree, T, start, stop):  # [q, stop] bool: what tree_attention_mask must allow
    allowed = torch.zeros(stop - start, stop, dtype=torch.bool)
    ancestry = tree.ancestry()
    for r, i in enumerate(range(start, stop)):
        for k in range(stop):
            if i < T:  # a context token: the context before it
                allowed[r, k] = k <= i
            else:  # node i - T + 1: the whole context and its own ancestors
                allowed[r, k] = k < T or bool(ancestry[i - T + 1, k - T + 1])
    return allowed


@pytest.mark.parametrize("branching", [(2, 2), (3, 1, 2), (1,), (4,)])
def test_the_tree_mask_is_its_definition_from_any_start_and_callers_may_change_it(branching):
    tree, T = Tree.from_branching(branching), 7
    for start in range(T + 1):  # start = T: the whole context is cached, only the nodes are scored
        mask = tree_attention_mask(tree, T, start, T + tree.size, torch.float32)[0, 0]
        assert torch.equal(mask == 0, mask_from_the_definition(tree, T, start, T + tree.size))
        assert torch.all((mask == 0) | (mask == torch.finfo(torch.float32).min))
        mask.fill_(1.0)  # a fresh tensor each time: the block kept per tree is not touched
    again = tree_attention_mask(tree, T, 3, T + tree.size, torch.float32)[0, 0]
    assert torch.equal(again == 0, mask_from_the_definition(tree, T, 3, T + tree.size))
    # power: the definition tells a node's sibling from its ancestor
    if tree.size > 1 and tree.parents[2] == 0:
        assert not mask_from_the_definition(tree, T, 0, T + tree.size)[T + 1, T]  # node 2 never sees node 1
    for start, stop in ((T + 1, T + tree.size), (0, T + tree.size + 1)):
        with pytest.raises(ValueError, match="all .* nodes"):
            tree_attention_mask(tree, T, start, stop, torch.float32)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("shape", [Tree.from_branching((2, 2)), sd.TreeBudget(depth=3, topk=2, n_nodes=5)])
def test_tree_step_keeps_the_accepted_path_and_nothing_else_in_the_target_cache(cache, shape):
    """After a step the target's cache holds the context plus the accepted path (kept rows, not re-fed): its
    next logits equal a plain model's on the same tokens; the draft's cache holds the context only."""
    target, draft = tiny_pair(8, seed=0, noise=0.3)
    target_lm, drafter = cached_model(target, cache=cache, max_len=64), ModelDrafter(draft)
    tokens, g, paths = torch.tensor([1, 2, 3]), torch.Generator().manual_seed(0), []
    with torch.inference_mode():
        for _ in range(6):
            T = tokens.shape[0]
            tokens, step = tree_step(target_lm, drafter, tokens, shape, T1, g)
            paths.append(len(step.path))
            assert target_lm.n_cached == T + len(step.path) == tokens.shape[0] - 1 == step.target_cache_after
            assert drafter.n_cached == T and step.n_accepted == len(step.path)
            nxt = target_lm.logits(tokens, keep=1)[0]  # feeds the newest token on top of the kept rows
            torch.testing.assert_close(nxt, target(input_ids=tokens[None]).logits[0, -1], rtol=0, atol=1e-9)
    assert max(paths) >= 1 and min(paths) < 2  # paths were kept, and rejections happened


# --- greedy: token for token ------------------------------------------------------------------------------

@pytest.mark.parametrize("branching", [(1,), (2,), (2, 2), (3, 1, 1), (2, 2, 2)])
def test_greedy_tree_equals_greedy_target(branching):
    accepted = []
    for seed in range(3):
        target, draft = tiny_pair(vocab_size=8, seed=seed, noise=0.3, hidden=32, n_layers=2)
        ids = torch.tensor([[seed + 1, 2, 3, 4]])
        plain = sd.autoregressive_generate(target, ids, 40, sampling=GREEDY).tokens.tolist()
        spec = tree_generate(target, draft, ids, 40, tree=branching, sampling=GREEDY)
        assert spec.tokens.tolist() == plain
        assert spec.stats.target_calls == len(spec.stats.accepted)  # one target pass per iteration
        accepted += spec.stats.accepted
    assert 0 < sum(accepted) and min(accepted) < len(branching)  # accepting and rejecting were both exercised


METHODS = [dict(gamma=3), dict(tree=(2, 2)), dict(tree=(3, 1)),
           dict(tree=sd.TreeBudget(depth=3, topk=2, n_nodes=5))]


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("method", METHODS, ids=str)
def test_every_method_in_every_cache_mode_equals_greedy_target(cache, method):
    """One loop: chain, static tree and dynamic tree, with either CPU cache (compiled needs CUDA:
    test_static_cache)."""
    target, draft = tiny_pair(vocab_size=8, seed=2, noise=0.3, hidden=32, n_layers=2)
    ids = torch.tensor([[1, 2, 3, 4]])
    plain = sd.autoregressive_generate(target, ids, 30, sampling=GREEDY).tokens.tolist()
    spec = sd.speculative_generate(target, draft, ids, 30, sampling=GREEDY, cache=cache, **method)
    assert spec.tokens.tolist() == plain
    assert spec.stats.target_calls == len(spec.stats.accepted) and sum(spec.stats.accepted) > 0


@pytest.mark.parametrize("method", METHODS, ids=str)
def test_static_cache_samples_the_same_tokens_as_the_dynamic_cache(method):
    """Same seed, same float64 toy: the cache mode changes where keys live, never what is sampled."""
    target, draft = tiny_pair(vocab_size=8, seed=3, noise=0.5, hidden=32, n_layers=2)
    ids = torch.tensor([[1, 2, 3, 4]])
    outs = [sd.speculative_generate(target, draft, ids, 30, sampling=T1, cache=cache, **method,
                                    generator=torch.Generator().manual_seed(7)).tokens.tolist()
            for cache in ("dynamic", "static")]
    assert outs[0] == outs[1]


def test_greedy_tree_with_eos_stops_like_greedy_target():
    target, draft = tiny_pair(vocab_size=8, seed=0, noise=0.3, hidden=32, n_layers=2)
    ids = torch.tensor([[1, 2, 3, 4]])
    plain = sd.autoregressive_generate(target, ids, 40, sampling=GREEDY).tokens.tolist()
    eos = plain[7]
    spec = tree_generate(target, draft, ids, 40, tree=(2, 2), sampling=GREEDY, eos_token_id=eos)
    assert spec.tokens.tolist() == plain[:plain.index(eos) + 1]


# --- one node: k i.i.d. siblings, judged by SpecInfer's rule -----------------------------------------------

def _one_node_counts(verify_fn, k: int, n: int = 5000, seed: int = 0, replacement: bool = True):
    """Emitted first tokens of a depth-1 tree with k children, for a target and draft row that disagree a
    lot."""
    g = torch.Generator().manual_seed(seed)
    target_row = torch.tensor([0.05, 0.40, 0.30, 0.15, 0.10], dtype=torch.float64)
    draft_row = torch.tensor([0.50, 0.10, 0.05, 0.05, 0.30], dtype=torch.float64)
    tree = Tree.from_branching((k,))
    target_probs = torch.stack([target_row] + [target_row] * k)  # [k+1, V]; leaf rows give the bonus
    draft_probs = torch.stack([draft_row] + [torch.zeros(5, dtype=torch.float64)] * k)  # [k+1, V]
    counts = Counter()
    for _ in range(n):
        children = torch.multinomial(draft_row, k, replacement=replacement, generator=g)  # [k]
        node_tokens = torch.cat([torch.tensor([0]), children])  # [k+1]
        path, next_token = verify_fn(tree, node_tokens, target_probs, draft_probs, g)
        counts[int(node_tokens[path[0]]) if path else int(next_token)] += 1
    return counts, probs_to_dict(target_row)


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_verify_tree_emits_target_distribution_at_one_node(k):
    counts, target = _one_node_counts(verify_tree, k)
    result = chi_square_gof(counts, target)
    assert not result.rejects(SIGNIFICANCE), f"k={k}: {result}"


def verify_without_replacement(tree, node_tokens, target_probs, draft_probs, generator=None):
    return verify_tree(tree, node_tokens, target_probs, draft_probs, generator, replacement=False)


def verify_renormalised_against_original_target(tree, node_tokens, target_probs, draft_probs, generator=None):
    """Bug: q is renormalised after each rejected sibling, but p is never replaced by the residual."""
    p, q = target_probs[0], draft_probs[0]
    for child in tree.children(0):
        x = node_tokens[child]
        if torch.rand((), generator=generator, dtype=p.dtype) * q[x] < p[x]:
            return [child], sample(target_probs[child], generator)
        q = q.index_fill(0, x[None], 0.0)
        q = q / q.sum()
    return [], sample(p, generator)


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_siblings_drawn_without_replacement_emit_target_distribution_at_one_node(k):
    """A dynamic tree at T > 0: distinct siblings drawn in turn from q, judged with q renormalised."""
    counts, target = _one_node_counts(verify_without_replacement, k, replacement=False)
    result = chi_square_gof(counts, target)
    assert not result.rejects(SIGNIFICANCE), f"k={k}: {result}"


@pytest.mark.parametrize("k", [2, 3])
def test_chi_square_rejects_renormalised_siblings_judged_against_original_target(k):
    counts, target = _one_node_counts(verify_renormalised_against_original_target, k, replacement=False)
    assert chi_square_gof(counts, target).rejects(SIGNIFICANCE)


@pytest.mark.parametrize("k", [2, 3])
def test_chi_square_rejects_siblings_judged_against_original_target_at_one_node(k):
    counts, target = _one_node_counts(verify_tree_siblings_against_original_target, k)
    assert chi_square_gof(counts, target).rejects(SIGNIFICANCE)


def test_chi_square_rejects_siblings_drafted_without_replacement_at_one_node():
    """The rule needs i.i.d. siblings: distinct siblings (sampling without replacement) bias the output."""
    counts, target = _one_node_counts(verify_tree, 3, replacement=False)
    assert chi_square_gof(counts, target).rejects(SIGNIFICANCE)


# --- sequences: the vocabulary-3 toy, 5 tokens, exact distribution -----------------------------------------

VOCAB, PROMPT, N_TOKENS, N_SAMPLES = 3, [1, 2, 0], 5, 1000


@pytest.fixture(scope="module")
def pair3():
    """Target and a noisy copy as draft, vocabulary 3 (as in test_exactness.py)."""
    return tiny_pair(vocab_size=VOCAB, seed=0, noise=0.3)


def tree_counts(target, draft, branching, sampling, seed=0) -> Counter:
    g, ids = torch.Generator().manual_seed(seed), torch.tensor([PROMPT])
    return Counter(tuple(tree_generate(target, draft, ids, N_TOKENS, tree=branching, sampling=sampling,
                                       generator=g).tokens.tolist()) for _ in range(N_SAMPLES))


@pytest.mark.slow
@pytest.mark.parametrize("branching,sampling", [((2, 2), T1), ((3, 1, 1, 1), sd.SamplingConfig(0.7)),
                                               ((2, 2, 1, 1), sd.SamplingConfig(1.2, top_k=2, top_p=0.9))])
def test_tree_sequences_match_exact_target_distribution(pair3, branching, sampling):
    """Depth 4 + 1 bonus = 5 tokens: the depth-4 trees can accept a whole path of the 5-token window."""
    target, draft = pair3
    result = chi_square_gof(tree_counts(target, draft, branching, sampling),
                            exact_sequence_distribution(target, PROMPT, N_TOKENS, sampling))
    assert not result.rejects(SIGNIFICANCE), f"{branching} {sampling}: {result}"


@pytest.mark.slow
def test_chi_square_rejects_tree_with_siblings_judged_against_original_target(pair3, monkeypatch):
    target, draft = pair3
    monkeypatch.setattr(generate_mod, "verify_tree", verify_tree_siblings_against_original_target)
    result = chi_square_gof(tree_counts(target, draft, (3,), T1),
                            exact_sequence_distribution(target, PROMPT, N_TOKENS))
    assert result.rejects(SIGNIFICANCE), str(result)


# --- the measurement a chapter calls -----------------------------------------------------------------------

def test_accepted_length_vs_chain_reports_both_shapes():
    target, draft = tiny_pair(vocab_size=8, seed=0, noise=0.3, hidden=32, n_layers=2)
    r = accepted_length_vs_chain(target, draft, torch.tensor([[1, 2, 3, 4]]), tree=(2, 2), max_new_tokens=12,
                                 runs=3)
    assert r.nodes == 6 and r.tree_iterations > 0 and r.chain_iterations > 0
    assert 0 <= r.tree_accepted <= 2 and 0 <= r.chain_accepted <= 6
    assert r.tree_draft_passes <= 2 < r.chain_draft_passes  # one draft pass per depth


# --- refusals -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("parents", [(), (0,), (-1, 1), (-1, 0, -1), (-1, 0, 1, 0), (-1, 0.0)])
def test_bad_parent_lists_are_refused(parents):
    with pytest.raises(ValueError):
        Tree(parents)


@pytest.mark.parametrize("tree", [(), (2, 0), (2, -1), (1.5,), "ab", 3, (True,)])
def test_bad_tree_specs_are_refused(toy_pair, tree):
    target, draft = toy_pair
    with pytest.raises(ValueError):
        tree_generate(target, draft, torch.tensor([[1, 2]]), 4, tree=tree)


def test_bad_inputs_are_refused(toy_pair):
    target, draft = toy_pair
    ids = torch.tensor([[1, 2]])
    with pytest.raises(ValueError, match="not both"):
        tree_generate(target, draft, ids, 4, tree=(2,), gamma=2)
    with pytest.raises(ValueError, match="vocabularies differ"):
        tree_generate(target, tiny_llama(7), ids, 4, tree=(2,))
    with pytest.raises(ValueError, match="at most 6 children"):
        tree_generate(target, draft, ids, 4, tree=(7,), sampling=GREEDY)
    with pytest.raises(ValueError, match="max_new_tokens"):
        tree_generate(target, draft, ids, -1, tree=(2,))
    with pytest.raises(ValueError, match="SamplingConfig"):
        tree_generate(target, draft, ids, 4, tree=(2,), sampling=1.0)


def test_tree_helpers_describe_the_tree():
    tree = Tree.from_branching((2, 2))
    assert tree.parents == (-1, 0, 0, 1, 1, 2, 2) and tree.size == 6
    assert tree.depths() == [0, 1, 1, 2, 2, 2, 2] and tree.children(2) == [5, 6]
    assert tree.pruned(1) == Tree((-1, 0, 0)) and Tree.chain(3) == Tree((-1, 0, 1, 2))
    assert tree.ancestry()[5].tolist() == [True, False, True, False, False, True, False]


def test_positions_are_their_definition_from_any_start_and_a_grown_shape_is_one_tree():
    tree, T = Tree.from_branching((2, 1)), 6
    for start in range(T + 1):
        depth = tree.depths()
        want = [i if i < T else T - 1 + depth[i - T + 1] for i in range(start, T + tree.size)]
        assert tree_position_ids(tree, T, start, T + tree.size).tolist() == want
    with pytest.raises(ValueError, match="all .* nodes"):  # rows that do not end at the tree's last node
        tree_position_ids(tree, T, 2, T + tree.size - 1)
    # best_nodes hands out one Tree per shape, so what a tree works out once (children, ancestry, masks and
    # positions kept per tree) serves every iteration that grows the same shape
    g = tree_mod.GrowingTree([-1, 0, 0, 1], [5, 6, 7, 8], [0, 1, 1, 2], [0.0, -0.1, -0.2, -0.3])
    first, keep = tree_mod.best_nodes(g, 3)
    again, _ = tree_mod.best_nodes(tree_mod.GrowingTree(g.parents, [1, 2, 3, 4], g.depth, g.score), 3)
    assert first is again and first == Tree((-1, 0, 0, 1)) and keep == [0, 1, 2, 3]
    assert tree_mod.best_nodes(g, 2)[0] is not first  # power: another shape is another tree


# --- dynamic trees (EAGLE-2): deterministic top-k children, recursive rejection with point-mass proposals

def verify_deterministic_without_removal(tree, node_tokens, target_probs, draft_probs=None, generator=None,
                                         replacement=True):
    """Bug: a rejected candidate keeps its mass, so the fallback sample can emit it again (too often)."""
    path, node = [], 0
    while True:
        p = target_probs[node]
        for child in tree.children(node):
            u = torch.rand((), generator=generator, device=p.device, dtype=p.dtype)
            if u < p[node_tokens[child]]:
                break
        else:
            return path, sample(p, generator)
        node = child
        path.append(node)


def verify_deterministic_with_draft_ratio(draft_row):
    """Bug: SpecInfer's min(1, p/q) with the draft's q, as if the top-k children had been sampled from q."""
    def verify_fn(tree, node_tokens, target_probs, draft_probs=None, generator=None):
        draft_probs = torch.stack([draft_row] * target_probs.shape[0])  # [N+1, V]
        return verify_tree(tree, node_tokens, target_probs, draft_probs, generator)
    return verify_fn


def _top_k_node_counts(verify_fn, k: int, n: int = 5000, seed: int = 0):
    """Emitted first tokens of a depth-1 tree whose k children are the draft row's top k (deterministic)."""
    g = torch.Generator().manual_seed(seed)
    target_row = torch.tensor([0.05, 0.40, 0.30, 0.15, 0.10], dtype=torch.float64)
    draft_row = torch.tensor([0.50, 0.10, 0.05, 0.05, 0.30], dtype=torch.float64)
    tree = Tree.from_branching((k,))
    target_probs = torch.stack([target_row] * (k + 1))  # [k+1, V]
    node_tokens = torch.cat([torch.tensor([0]), draft_row.topk(k).indices])  # [k+1], the same every time
    counts = Counter()
    for _ in range(n):
        path, next_token = verify_fn(tree, node_tokens, target_probs, None, g)
        counts[int(node_tokens[path[0]]) if path else int(next_token)] += 1
    return counts, probs_to_dict(target_row), draft_row


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_point_mass_rule_emits_target_distribution_at_one_node(k):
    counts, target, _ = _top_k_node_counts(verify_tree, k)
    result = chi_square_gof(counts, target)
    assert not result.rejects(SIGNIFICANCE), f"k={k}: {result}"


@pytest.mark.parametrize("k", [2, 3])
def test_chi_square_rejects_point_mass_rule_that_keeps_rejected_candidates(k):
    counts, target, _ = _top_k_node_counts(verify_deterministic_without_removal, k)
    assert chi_square_gof(counts, target).rejects(SIGNIFICANCE)


@pytest.mark.parametrize("k", [1, 2])
def test_chi_square_rejects_specinfer_ratio_on_deterministic_candidates(k):
    draft_row = _top_k_node_counts(verify_tree, 1, n=1)[2]
    counts, target, _ = _top_k_node_counts(verify_deterministic_with_draft_ratio(draft_row), k)
    assert chi_square_gof(counts, target).rejects(SIGNIFICANCE)


def dynamic_counts(target, draft, budget, sampling, seed=0) -> Counter:
    g, ids = torch.Generator().manual_seed(seed), torch.tensor([PROMPT])
    return Counter(tuple(tree_generate(target, draft, ids, N_TOKENS, tree=budget, sampling=sampling,
                                       generator=g).tokens.tolist()) for _ in range(N_SAMPLES))


@pytest.mark.slow
@pytest.mark.parametrize("budget,sampling", [
    (sd.TreeBudget(depth=3, topk=2, n_nodes=5), T1),
    (sd.TreeBudget(depth=4, topk=2, n_nodes=6), sd.SamplingConfig(0.7)),
    (sd.TreeBudget(depth=2, topk=3, n_nodes=4), sd.SamplingConfig(1.2, top_k=2, top_p=0.9)),
    (sd.TreeBudget(depth=3, topk=2, n_nodes=5, stop=0.3), T1)])  # stops by rank, blind to the tokens drawn
def test_dynamic_tree_sequences_match_exact_target_distribution(pair3, budget, sampling):
    """Depth >= 2, so whole accepted paths (and the rejection at depth 2) are exercised."""
    target, draft = pair3
    result = chi_square_gof(dynamic_counts(target, draft, budget, sampling),
                            exact_sequence_distribution(target, PROMPT, N_TOKENS, sampling))
    assert not result.rejects(SIGNIFICANCE), f"{budget} {sampling}: {result}"


@pytest.mark.slow
@pytest.mark.parametrize("broken", ["keeps rejected candidates", "uniform q", "i.i.d. rule"])
def test_chi_square_rejects_dynamic_tree_with_a_broken_rule(pair3, monkeypatch, broken):
    """At T = 1 a dynamic tree's children are drawn from q without replacement: judging them as point masses
    that keep their mass, against a q they were not drawn from, or by SpecInfer's i.i.d. rule (q never
    renormalised) all bias the output."""
    target, draft = pair3
    if broken == "keeps rejected candidates":
        fn = verify_deterministic_without_removal
    elif broken == "uniform q":
        def fn(tree, node_tokens, target_probs, draft_probs=None, generator=None, replacement=True):
            uniform = torch.full_like(target_probs, 1 / target_probs.shape[-1])
            return verify_tree(tree, node_tokens, target_probs, uniform, generator, replacement)
    else:
        def fn(tree, node_tokens, target_probs, draft_probs=None, generator=None, replacement=True):
            return verify_tree(tree, node_tokens, target_probs, draft_probs, generator, replacement=True)
    monkeypatch.setattr(generate_mod, "verify_tree", fn)
    budget = sd.TreeBudget(depth=3, topk=2, n_nodes=5)
    result = chi_square_gof(dynamic_counts(target, draft, budget, T1),
                            exact_sequence_distribution(target, PROMPT, N_TOKENS))
    assert result.rejects(SIGNIFICANCE), f"{broken}: {result}"


@pytest.mark.parametrize("budget", [sd.TreeBudget(1, 1, 1), sd.TreeBudget(3, 2, 5), sd.TreeBudget(4, 3, 9),
                                    sd.TreeBudget(4, 2, 5, stop=0.3)])
def test_greedy_dynamic_tree_equals_greedy_target(budget):
    target, draft = tiny_pair(vocab_size=8, seed=1, noise=0.3, hidden=32, n_layers=2)
    ids = torch.tensor([[1, 2, 3]])
    plain = sd.autoregressive_generate(target, ids, 30, sampling=GREEDY).tokens.tolist()
    out = tree_generate(target, draft, ids, 30, tree=budget, sampling=GREEDY)
    assert out.tokens.tolist() == plain
    assert max(out.stats.accepted) >= 1


def test_grow_tree_keeps_the_n_most_likely_paths():
    """A root with logits favouring tokens 0 > 1 > 2; each expansion prefers its own token again."""
    V = 4

    def expand(g, nodes):
        logits = torch.full((len(nodes), V), -4.0)
        for r, v in enumerate(nodes):
            logits[r, g.tokens[v]] = 2.0  # a node's best child repeats its token
        return logits

    root = torch.tensor([3.0, 2.0, 1.0, -5.0])
    tree, tokens, rows = tree_mod.grow_tree(3, root, expand, sd.TreeBudget(depth=3, topk=2, n_nodes=4))
    assert rows is None  # greedy growth: point masses
    assert tree.size == 4 and tokens[0] == 3
    assert tree.depths() == sorted(tree.depths())  # breadth first
    assert tokens[1:3] == [0, 1]  # the root's two best children
    assert 3 in tree.depths()  # the confident 0 -> 0 -> 0 path reaches the full depth


def test_greedy_growth_from_ranked_children_grows_the_tree_logits_grow():
    """A draft that brings each node's best children ready-ranked (`sampling.Ranked`, as a compiled head does)
    grows the same tree, the same tokens, as one that brings its logits, over all V or over K of its own."""
    V, g = 12, torch.Generator().manual_seed(0)
    table = torch.randn(V, V, generator=g) * 2  # a node's children's logits depend on its token
    ids = torch.tensor([0, 2, 3, 5, 7, 8, 10, 11])  # a reduced vocabulary of K = 8 tokens
    off = torch.ones(V, dtype=torch.bool).index_fill_(0, ids, False)  # the tokens outside it
    budget = sd.TreeBudget(depth=3, topk=3, n_nodes=6)

    def grow(scores):  # scores(tokens [n]) -> DraftLogits
        expand = lambda tr, nodes: scores(torch.tensor([tr.tokens[v] for v in nodes]))  # noqa: E731
        tree, tokens, rows = tree_mod.grow_tree(4, scores(torch.tensor(4)), expand, budget)
        assert rows is None  # greedy: point masses
        return tree.parents, tokens

    full = grow(lambda x: table[x].masked_fill(off, float("-inf")))  # [.., V], -inf outside the K
    reduced = grow(lambda x: (table[x][..., ids], ids))  # [.., K] and their ids
    best = grow(lambda x: sd.sampling.ranked(table[x][..., ids], ids, 5))  # the best 5 of each node, ranked
    assert best == reduced == full and len(best[1]) == 7
    # power: children ranked in another order grow another tree
    assert grow(lambda x: sd.sampling.ranked(-table[x][..., ids], ids, 5)) != best
    # ranked children serve greedy growth only, and at least topk of them a node
    with pytest.raises(ValueError, match="ranked children serve greedy growth"):
        tree_mod.grow_tree(4, sd.sampling.ranked(table[4][ids], ids, 5), None, budget, T1, g)
    with pytest.raises(ValueError, match="at least topk = 3"):
        tree_mod.grow_tree(4, sd.sampling.ranked(table[4], None, 2), None, budget)


def test_a_tree_with_stop_skips_the_draft_passes_its_draft_is_unsure_of():
    """The root's best child has draft probability 0.67 (softmax of 3, 2, 1, -5); each expansion makes its
    node's best child 0.99 likely. stop above 0.67 drafts depth 1 only; below it, the full depth."""
    calls = []

    def expand(g, nodes):
        calls.append(len(nodes))
        logits = torch.full((len(nodes), 4), -4.0)
        for r, v in enumerate(nodes):
            logits[r, g.tokens[v]] = 2.0
        return logits

    root = torch.tensor([3.0, 2.0, 1.0, -5.0])
    tree, _, _ = tree_mod.grow_tree(3, root, expand, sd.TreeBudget(depth=3, topk=2, n_nodes=4, stop=0.7))
    assert calls == [] and tree.size == 2 and max(tree.depths()) == 1
    tree, _, _ = tree_mod.grow_tree(3, root, expand, sd.TreeBudget(depth=3, topk=2, n_nodes=4, stop=0.6))
    assert calls == [2, 2] and max(tree.depths()) == 3
    calls.clear()  # stop = 0 is the plain budget
    tree_mod.grow_tree(3, root, expand, sd.TreeBudget(depth=3, topk=2, n_nodes=4))
    assert calls == [2, 2]


@pytest.mark.parametrize("bad", [dict(depth=0), dict(topk=0), dict(n_nodes=-1), dict(depth=1.5),
                                 dict(stop=1.0), dict(stop=-0.1), dict(stop="0.2")])
def test_bad_tree_budgets_are_refused(bad):
    with pytest.raises(ValueError, match="TreeBudget"):
        sd.TreeBudget(**bad)


def _kept_first_child_counts(n: int = 4000, seed: int = 0):
    """Grow a depth-1 tree at T = 1 with 3 children drawn and 1 kept, many times: the kept child must be the
    first one drawn, hence distributed as q itself."""
    logits = torch.tensor([1.5, 1.0, 0.5, 0.0, -1.0], dtype=torch.float64)
    g, budget = torch.Generator().manual_seed(seed), sd.TreeBudget(depth=1, topk=3, n_nodes=1)
    counts = Counter()
    for _ in range(n):
        tree, tokens, rows = tree_mod.grow_tree(9, logits, None, budget, T1, g)
        assert tree.size == 1 and torch.allclose(rows[0], logits.softmax(-1))
        counts[tokens[1]] += 1
    return counts, probs_to_dict(logits.softmax(-1))


def test_sampled_growth_keeps_the_first_children_drawn():
    counts, q = _kept_first_child_counts()
    result = chi_square_gof(counts, q)
    assert not result.rejects(SIGNIFICANCE), str(result)


def test_chi_square_rejects_sampled_growth_that_keeps_the_likeliest_children_drawn(monkeypatch):
    """Bug: siblings scored by their own log q, so pruning keeps the likeliest of those drawn, not the first:
    the kept children are no longer a sample without replacement from q."""
    monkeypatch.setattr(tree_mod, "sibling_scores", lambda q, drawn: q.gather(-1, drawn).log())
    counts, q = _kept_first_child_counts()
    assert chi_square_gof(counts, q).rejects(SIGNIFICANCE)


def _pruned_root_counts(n: int = 10000, seed: int = 0):
    """A depth-3 tree of width 2 cut to 3 nodes at T = 1, grown and walked n times against one target row at
    every node: the first emitted token must follow that row. The root's second child competes for the cut
    with its first child's children, so a score that looks at the token drawn biases which survive."""
    root = torch.tensor([1.0, 0.8, 0.2, -0.5, -1.0], dtype=torch.float64)  # the draft's q at the root
    child = torch.tensor([1.6, 0.2, 0.0, -1.0, -1.0], dtype=torch.float64)  # and at every other node
    p = torch.tensor([0.05, 0.15, 0.45, 0.2, 0.15], dtype=torch.float64)  # the target's row at every node
    g, counts = torch.Generator().manual_seed(seed), Counter()
    for _ in range(n):
        tree, tokens, rows = tree_mod.grow_tree(9, root, lambda t, nodes: torch.stack([child] * len(nodes)),
                                                sd.TreeBudget(depth=3, topk=2, n_nodes=3), T1, g)
        path, nxt = verify_tree(tree, torch.tensor(tokens), torch.stack([p] * (tree.size + 1)), rows, g,
                                replacement=False)
        counts[tokens[path[0]] if path else int(nxt)] += 1
    return counts, probs_to_dict(p)


def test_a_pruned_sampled_tree_emits_the_target_distribution():
    counts, p = _pruned_root_counts()
    result = chi_square_gof(counts, p)
    assert not result.rejects(SIGNIFICANCE), str(result)


def test_chi_square_rejects_pruning_that_scores_a_child_by_the_token_it_drew(monkeypatch):
    """Bug (shipped for an hour): children scored by their own log q, kept in draw order (a running minimum).
    A child with a likely token then survives the cut more often, and the walk, which takes it for a plain
    draw from q, emits too much of the likely tokens."""
    monkeypatch.setattr(tree_mod, "sibling_scores",
                        lambda q, drawn: q.gather(-1, drawn).log().cummin(-1).values)
    counts, p = _pruned_root_counts()
    assert chi_square_gof(counts, p).rejects(SIGNIFICANCE)


def test_sampled_growth_draws_distinct_children_from_the_support_only():
    """top_k=2 sampling leaves 2 tokens of positive q: a width-3 tree can give the root only those 2."""
    logits = torch.tensor([1.5, 1.0, 0.5, 0.0, -1.0])
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        tree, tokens, rows = tree_mod.grow_tree(9, logits, None, sd.TreeBudget(1, 3, 3),
                                                sd.SamplingConfig(1.0, top_k=2), g)
        assert sorted(tokens[1:]) == [0, 1] and float(rows[0, 2:].sum()) == 0.0


def test_chapter_measure_of_sampled_children_matches_the_exact_probability():
    """`chapters.production.sampled_children_kept` (chapter 6): k = 1 keeps a child with probability
    β = Σ min(p, q); k = 2 adds, for every first draw x that is rejected, q(y | not x) times the chance that y
    survives the residual, enumerated exactly here."""
    from specdec_ref.chapters.production import sampled_children_kept
    p = torch.tensor([0.05, 0.40, 0.30, 0.15, 0.10], dtype=torch.float64)
    q = torch.tensor([0.50, 0.10, 0.05, 0.05, 0.30], dtype=torch.float64)
    beta = float(torch.minimum(p, q).sum())
    two = 0.0
    for x in range(5):
        a = min(1.0, float(p[x] / q[x]))
        r, q2 = residual(p, q), q.clone()
        q2[x] = 0
        q2 = q2 / q2.sum()
        two += float(q[x]) * (a + (1 - a) * float(torch.minimum(r, q2).sum()))
    assert abs(sampled_children_kept(p, q, 1, n=4000) - beta) < 0.03
    assert abs(sampled_children_kept(p, q, 2, n=4000) - two) < 0.03
    assert two > beta + 0.05  # the second child adds enough for the two checks to tell them apart
