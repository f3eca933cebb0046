"""cache="compiled" on the CPU: one graph per step shape, buffers that never move, the dynamic cache's output.

torch.compile runs here with a backend that counts the graphs Dynamo hands it and runs them eagerly, with
fullgraph=True, so that a graph break raises instead of splitting a step into pieces. Dynamo shares a graph
between models of one architecture and between caches of one size, so a count is compared with the distinct
step shapes (tree-masked or causal, query length) that the compiled passes ran.
"""
import gc
import weakref

import pytest
import torch

import specdec_ref as sd
from specdec_ref import cache as cache_module
from specdec_ref.cache import BUCKET, StaticCachedModel, cached_model, warm_up
from specdec_ref.drafters import ModelDrafter
from specdec_ref.models.toy import tiny_llama, tiny_pair

GREEDY, T1 = sd.SamplingConfig(0), sd.SamplingConfig(1.0)
PROMPTS = ([1, 2, 3], [4, 1, 0, 6, 2, 5, 3], [7, 3, 3, 1, 0, 2, 6, 4, 5, 1, 2, 7])  # 3, 7 and 12 tokens
LENGTHS = (9, 20)  # answer lengths: 9 ends mid-chain for γ = 3, 20 after a longer run


class CountingBackend:
    """A torch.compile backend that counts the graphs it compiles and runs each of them eagerly."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, graph_module, example_inputs):
        self.graphs += 1
        return graph_module.forward


@pytest.fixture
def counter(monkeypatch) -> CountingBackend:
    """Fresh Dynamo state, and cache="compiled" compiling with the counting backend, fullgraph=True."""
    torch._dynamo.reset()
    backend = CountingBackend()
    monkeypatch.setattr(cache_module, "COMPILE_OPTIONS", dict(backend=backend, fullgraph=True))
    return backend


def buffer_pointers(*lms: StaticCachedModel) -> list[int]:
    return [t.data_ptr() for lm in lms for layer in lm.cache.layers for t in (layer.keys, layer.values)]


def generations(target, draft, how: dict, sampling: sd.SamplingConfig, cache: str) -> list[list[int]]:
    """The new tokens for every prompt and answer length, each sampled run seeded the same."""
    out = []
    for prompt in PROMPTS:
        for n in LENGTHS:
            g = torch.Generator().manual_seed(len(prompt) + n)
            out.append(sd.speculative_generate(target, draft, torch.tensor([prompt]), n, **how,
                                               sampling=sampling, generator=g, cache=cache).tokens.tolist())
    return out


def test_a_chain_compiles_its_shapes_once_across_prompts_and_lengths(counter):
    """After a warm-up on the real shapes (the target's γ + 1 tokens, the draft's 1 and 2), six generations of
    varied prompt and answer lengths compile nothing more, keep every buffer in place, and equal the dynamic
    cache token for token; plain decoding adds one graph (1 token) and equals it too."""
    target, draft = tiny_llama(8, seed=0, n_layers=2, hidden=32), tiny_llama(8, seed=1, hidden=16)
    gamma = 3
    target_lm = cached_model(target, cache="compiled", max_len=BUCKET, name="target",
                             query_sizes=(gamma + 1,))
    drafter = ModelDrafter(draft, cache="compiled", max_len=BUCKET)
    assert warm_up(target_lm, causal=(gamma + 1,)) + warm_up(drafter.lm, causal=(1, 2)) == 3
    assert counter.graphs == 3  # two architectures, no graph shared
    pointers = buffer_pointers(target_lm, drafter.lm)
    compiled = generations(target, drafter, dict(gamma=gamma), GREEDY, "compiled")
    assert compiled == generations(target, ModelDrafter(draft), dict(gamma=gamma), GREEDY, "dynamic")
    assert counter.graphs == 3
    assert target_lm.graph_shapes == {(False, gamma + 1)}
    assert drafter.lm.graph_shapes == {(False, 1), (False, 2)}
    assert buffer_pointers(target_lm, drafter.lm) == pointers
    assert ModelDrafter(draft, cache="compiled", max_len=40).lm is drafter.lm  # same bucket, same buffers
    for prompt in PROMPTS:
        ids = torch.tensor([prompt])
        plain = sd.autoregressive_generate(target, ids, 12, sampling=GREEDY, cache="compiled").tokens.tolist()
        assert plain == sd.autoregressive_generate(target, ids, 12, sampling=GREEDY).tokens.tolist()
    assert counter.graphs == 4


def test_a_sampled_chain_equals_the_dynamic_cache_with_the_same_seed(counter):
    target, draft = tiny_pair(8, seed=0, noise=0.3, hidden=32, n_layers=2)
    drafter = ModelDrafter(draft, cache="compiled", max_len=BUCKET)
    compiled = generations(target, drafter, dict(gamma=3), T1, "compiled")
    assert compiled == generations(target, ModelDrafter(draft), dict(gamma=3), T1, "dynamic")
    target_lm = cached_model(target, cache="compiled", max_len=BUCKET, name="target", query_sizes=(4,))
    assert target_lm.graph_shapes == {(False, 4)}
    assert counter.graphs == len(target_lm.graph_shapes | drafter.lm.graph_shapes)  # one architecture: shared


@pytest.mark.parametrize("sampling", [GREEDY, T1], ids=["greedy", "sampled"])
@pytest.mark.parametrize("tree", [(2, 2), sd.TreeBudget(3, 2, 5)], ids=["static tree", "dynamic tree"])
def test_a_tree_compiles_one_target_graph_padded_to_its_budget(counter, tree, sampling):
    """Every target pass is padded to n_nodes + 1 rows (a dynamic tree can have fewer nodes, and any tree is
    cut short near the end of an answer), so the target has one graph; the draft has one per pass shape: its
    root pass (1 to depth + 1 new tokens) and its expansions (2 nodes here). Once they are warmed up, nothing
    more compiles."""
    target, draft = tiny_pair(8, seed=0, noise=0.3, hidden=32, n_layers=2)
    rows, depth = (7, 2) if isinstance(tree, tuple) else (tree.n_nodes + 1, tree.depth)
    target_lm = cached_model(target, cache="compiled", max_len=BUCKET, name="target", query_sizes=(rows,))
    drafter = ModelDrafter(draft, cache="compiled", max_len=BUCKET)
    warm_up(target_lm, masked=(rows,))
    warm_up(drafter.lm, causal=range(1, depth + 2), masked=(2,))
    assert counter.graphs == depth + 3  # one architecture: the draft's and the target's graphs are shared
    pointers = buffer_pointers(target_lm, drafter.lm)
    sizes = []
    record = dict(tree=tree, on_step=lambda step: sizes.append(step.tree.size))
    compiled = generations(target, drafter, record, sampling, "compiled")
    assert compiled == generations(target, ModelDrafter(draft), dict(tree=tree), sampling, "dynamic")
    assert min(sizes) < rows - 1  # some trees were smaller than the budget: they were padded
    assert target_lm.graph_shapes == {(True, rows)}
    assert drafter.lm.graph_shapes <= {(False, q) for q in range(1, depth + 2)} | {(True, 2)}
    assert counter.graphs == depth + 3
    assert buffer_pointers(target_lm, drafter.lm) == pointers


def test_buffers_are_kept_per_bucket_and_reset_on_reuse():
    model = tiny_llama(8, seed=0, hidden=16)
    small = cached_model(model, cache="static", max_len=10)
    with torch.inference_mode():
        small.logits(torch.tensor([1, 2, 3]))
    again = cached_model(model, cache="static", max_len=BUCKET)
    assert again is small and again.n_cached == 0 and again.calls == 0 and again.max_len == BUCKET
    assert cached_model(model, cache="static", max_len=BUCKET + 1).max_len == 2 * BUCKET
    assert cached_model(model, cache="static", max_len=10, name="draft") is not small  # a draft of itself
    assert cached_model(model, cache="static", max_len=10, keep_hidden=True) is not small


def test_kept_buffers_do_not_keep_a_model_alive():
    model = tiny_llama(8, seed=0, hidden=16)
    with torch.inference_mode():
        cached_model(model, cache="static", max_len=10).logits(torch.tensor([1, 2]))
    alive = weakref.ref(model)
    del model
    gc.collect()
    assert alive() is None


def test_compiled_off_a_gpu_needs_an_explicit_backend():
    model = tiny_llama(8, seed=0, hidden=16)
    with pytest.raises(ValueError, match="CUDA graphs .* compile_options"):
        cached_model(model, cache="compiled", max_len=8)
    lm = cached_model(model, cache="compiled", max_len=8,
                      compile_options=dict(backend="eager", fullgraph=True))
    with torch.inference_mode():
        assert lm.compile and lm.logits(torch.tensor([1, 2, 3]), keep=1).shape == (1, 8)
