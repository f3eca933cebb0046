"""Chapter 6's exercise checkers: they pass right answers, reject wrong ones, and wait politely for untouched
ones."""
import pytest
import torch

from specdec_ref.chapters import production
from specdec_ref.chapters.exercises import ch6
from specdec_ref.lab import timing


def not_written(*args):
    raise NotImplementedError


def test_checkers_report_unattempted_exercises_without_failing(capsys):
    ch6.check_breakeven_batch(None)
    ch6.check_tree_by_hand(None)
    ch6.check_hf_settings(None)
    ch6.check_point_mass_verify(not_written)
    ch6.check_batch_speedup(not_written)
    assert capsys.readouterr().out.count("Not attempted yet") == 5


def test_breakeven_checker_accepts_64_and_rejects_its_neighbours():
    ch6.check_breakeven_batch(64)  # 2.53 / (0.6 + 2.56) = 0.80 at B = 64; 1.35 at B = 32
    for wrong, side in ((32, "too small"), (128, "too large"), (1, "too small")):
        with pytest.raises(AssertionError, match=f"{side}. Hint") as failure:
            ch6.check_breakeven_batch(wrong)
        assert "64" not in str(failure.value)  # a hint, not the answer
    with pytest.raises(AssertionError, match="one of BATCH_SIZES"):
        ch6.check_breakeven_batch(3)


def test_tree_checker_accepts_the_greedy_walk_and_rejects_the_chain_answer():
    # root -> node 2 (token 5) -> node 4 (token 1) -> target's 6 at the leaf
    ch6.check_tree_by_hand([5, 1, 6])
    with pytest.raises(AssertionError, match="too short. Hint"):
        ch6.check_tree_by_hand([5])  # what a chain through the first candidate would emit
    with pytest.raises(AssertionError, match="too short"):
        ch6.check_tree_by_hand([5, 1])  # forgot the target's own token after the path
    with pytest.raises(AssertionError, match="its second token is wrong"):
        ch6.check_tree_by_hand([5, 2, 6])


HF_RIGHT = {"num_assistant_tokens": 3, "num_assistant_tokens_schedule": "constant",
            "assistant_confidence_threshold": 0.0}


def test_hf_settings_checker_passes_settings_that_make_hf_draft_three_tokens(capsys):
    ch6.check_hf_settings(dict(HF_RIGHT))
    out = capsys.readouterr().out
    assert "Correct" in out and "keywords" in out  # it also shows what the keyword route does


def test_hf_checker_counts_three_draft_passes_per_target_pass_only_through_the_drafts_config():
    from specdec_ref.lab import hf
    target, draft = ch6.hf_checker_pair()
    with hf.assistant_settings(draft, **HF_RIGHT):
        lengths = ch6.hf_draft_lengths(target, draft)
    assert lengths[:ch6.HF_NEW_TOKENS - 3] == [3] * (ch6.HF_NEW_TOKENS - 3)
    as_keywords = ch6.hf_draft_lengths(target, draft, **HF_RIGHT)  # the route transformers 5 ignores
    assert sum(as_keywords) / len(as_keywords) < 1.5


@pytest.mark.parametrize("wrong, hint", [
    ({}, "stopped after one token"),  # does nothing: the draft's own settings
    ({"num_assistant_tokens": 3, "num_assistant_tokens_schedule": "constant"}, "stopped after one token"),
    ({"num_assistant_tokens": 3, "num_assistant_tokens_schedule": "heuristic",
      "assistant_confidence_threshold": 0.0}, "moved between iterations"),
    ({"num_assistant_tokens": 3, "assistant_confidence_threshold": 0.0}, "moved between iterations"),
    ({"num_assistant_tokens_schedule": "constant", "assistant_confidence_threshold": 0.0}, "caps"),
    ({"num_assistant_tokens": 4, "num_assistant_tokens_schedule": "constant",
      "assistant_confidence_threshold": 0.0}, "caps"),
    ({"num_assistant_tokens": 2, "num_assistant_tokens_schedule": "constant",
      "assistant_confidence_threshold": 0.0}, "not γ"),
    ({"num_assistant_tokens": 3, "num_assistant_tokens_schedule": "constant",
      "assistant_confidence_threshold": 0.1}, "never undercut"),
    ({"num_assistant_tokens": 3, "num_assistant_tokens_schedule": "fixed"}, "cannot use"),
    ({"gamma": 3}, "not assistant settings"),
])
def test_hf_settings_checker_rejects_wrong_settings_with_a_hint_not_the_answer(wrong, hint):
    with pytest.raises(AssertionError, match="Hint|not γ") as failure:
        ch6.check_hf_settings(wrong)
    message = str(failure.value)
    assert hint in message
    for key, value in HF_RIGHT.items():  # the hint never gives the right setting away
        assert f"{key}={value!r}" not in message and f"{key} = {value!r}" not in message
    assert "constant" not in message and "0.0" not in message


def test_paper_model_prices_a_pass_like_the_timing_module():
    # untied: the input embedding is gathered, not read
    model = timing.synthetic_llama(2, 128, vocab_size=256)
    cfg = model.config
    paper = production.PaperModel(timing.matmul_params(model), timing.weight_bytes(model) / 4,
                                  cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads,
                                  cfg.hidden_size // cfg.num_attention_heads)
    for k, ctx, B in ((1, 0, 1), (4, 16, 3)):
        assert paper.flops(k, ctx, B) == timing.forward_flops(model, k, ctx, B)
        assert paper.bytes(k, ctx, B, bytes_per_param=4) == timing.bytes_moved(model, k, ctx, B)


def test_llama_8b_on_paper_has_about_8_billion_parameters():
    target = production.PaperModel.llama(4096, 32, 32, 8, 14336, 128256)  # Llama-3-8B's config
    # 8.03e9 minus the 0.53e9 input embedding, which is only gathered
    assert 7.4e9 < target.matmul_params < 7.6e9


def test_interpolated_costs_hit_the_grid_and_lie_between_points():
    costs = {(B, k): B * 10 + k for B in (1, 4) for k in (1, 2, 4)}
    assert production.interp_cost(costs, 4, 2) == 42
    assert production.interp_cost(costs, 2, 3) == pytest.approx((1 * 10 + 3) + (40 + 3 - 13) / 3)


def _try_candidates(target_probs, candidates, generator):  # -> (accepted token or None, what is left)
    p = target_probs
    for x in candidates:
        if torch.rand((), generator=generator, dtype=p.dtype) < p[x]:
            return int(x), p
        p = p.clone()
        p[x] = 0
        p = p / p.sum()
    return None, p


def point_mass_verify(target_probs, candidates, generator):  # [V], [k] -> int: the exercise's solution
    x, rest = _try_candidates(target_probs, candidates, generator)
    return x if x is not None else int(torch.multinomial(rest, 1, generator=generator))


# wrong: later candidates judged on raw mass
def verify_without_renormalising(target_probs, candidates, generator):
    p = target_probs.clone()
    for x in candidates:
        if torch.rand((), generator=generator, dtype=p.dtype) < p[x]:
            return int(x)
        p[x] = 0
    return int(torch.multinomial(p / p.sum(), 1, generator=generator))


# wrong: rejected tokens come back
def verify_final_sample_from_full_target(target_probs, candidates, generator):
    x, _ = _try_candidates(target_probs, candidates, generator)
    return x if x is not None else int(torch.multinomial(target_probs, 1, generator=generator))


def test_point_mass_checker_passes_the_exact_rule_and_the_package_rule(capsys):
    ch6.check_point_mass_verify(point_mass_verify)
    assert "Correct" in capsys.readouterr().out
    from specdec_ref.tree import Tree, verify_tree

    def package_rule(target_probs, candidates, generator):  # one node of verify_tree, point-mass proposals
        tree = Tree(tuple([-1] + [0] * len(candidates)))
        node_tokens = torch.cat([torch.tensor([0]), candidates])  # [k+1], the root's token is never read
        # [k+1, V]: every node sees the same p_target
        rows = torch.stack([target_probs] * (len(candidates) + 1))
        path, next_token = verify_tree(tree, node_tokens, rows, None, generator)
        return int(node_tokens[path[0]]) if path else int(next_token)

    ch6.check_point_mass_verify(package_rule)


@pytest.mark.parametrize("wrong", [ch6.point_mass_verify_without_removal, verify_without_renormalising,
                                   verify_final_sample_from_full_target])
def test_chi_square_checker_rejects_broken_point_mass_rules(wrong):
    with pytest.raises(AssertionError, match="Hint"):
        ch6.check_point_mass_verify(wrong)


def test_point_mass_checker_rejects_a_token_outside_the_vocabulary():
    with pytest.raises(AssertionError, match="token id"):
        ch6.check_point_mass_verify(lambda p, c, g: 99)


def batch_speedup_answer(costs, draft_costs, alpha, gamma, B):  # the exercise's solution
    c = draft_costs[(B, 1)] / costs[(B, 1)]
    verify = costs[(B, gamma + 1)] / costs[(B, 1)]
    return (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * c + verify))


def test_batch_speedup_checker_accepts_the_formula_on_made_up_and_measured_looking_costs(capsys):
    ch6.check_batch_speedup(batch_speedup_answer)
    measured = {(B, k): 0.01 * (1 + 0.05 * B * k) for B in (1, 4, 16) for k in (1, 2, 4, 8)}
    draft = {(B, 1): 0.002 * (1 + 0.01 * B) for B in (1, 4, 16)}
    ch6.check_batch_speedup(batch_speedup_answer, measured, draft, alpha=0.55)
    assert capsys.readouterr().out.count("Correct") == 2


def test_batch_speedup_checker_names_the_missing_verify_cost_and_the_wrong_batch():
    def textbook(costs, draft_costs, alpha, gamma, B):  # forgets t(B, γ+1)/t(B, 1)
        c = draft_costs[(B, 1)] / costs[(B, 1)]
        return (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * c + 1))

    def costs_at_one(costs, draft_costs, alpha, gamma, B):  # prices every B at B = 1
        return batch_speedup_answer(costs, draft_costs, alpha, gamma, 1)

    with pytest.raises(AssertionError, match="too high. Hint: you used the textbook formula"):
        ch6.check_batch_speedup(textbook)
    measured = {(B, k): 0.01 * (1 + 0.05 * B * k) for B in (1, 4, 16) for k in (1, 2, 4, 8)}
    draft = {(B, 1): 0.002 * (1 + 0.01 * B) for B in (1, 4, 16)}  # c(B) changes with B here
    with pytest.raises(AssertionError, match="same B"):
        ch6.check_batch_speedup(costs_at_one, measured, draft)


def test_context_speedups_pay_at_long_context_where_short_context_breaks_even():
    target = production.PaperModel.llama(4096, 32, 32, 8, 14336, 128256)
    draft = production.PaperModel.llama(2048, 16, 32, 8, 8192, 128256, head_dim=64)
    curves = production.context_speedups(target, draft, timing.SPEC_SHEETS["H100 SXM"], 0.75, 3,
                                         [1, 64, 768, 1024], [512, 4096, 32768])
    # the KV cache dominates at 4096 tokens: verify rows stay free
    assert curves[512][768] < 1.0 < curves[4096][768]
    assert 768 not in curves[32768]  # 768 sequences of 32k tokens do not fit in eight 80 GB GPUs


def test_tree_cost_prices_multi_row_draft_passes_and_refed_rows():
    tree = production.Tree.from_branching((2, 2))  # depth 1: 2 nodes with children; depth 2: 4 leaves
    assert production.draft_rows_per_pass(tree, refed=1.5) == [2.5, 2.0]
    assert production.draft_rows_per_pass(production.Tree.chain(3), refed=0) == [1.0, 1.0, 1.0]
    rows = lambda m: m  # noqa: E731  a draft pass costs its rows, in target steps
    assert (production.tree_iteration_cost(tree, 1.0, rows, lambda k: k, refed_target=1.0)
            == 2.0 + 2.0 + (6 + 1 + 1))
    assert production.tree_iteration_cost(tree, 1.0, rows, lambda k: k, refed_target=0) == 2.0 + 2.0 + 7
    curve = production.cost_curve({1: 2.0, 3: 4.0}, unit=2.0)
    assert curve(1) == 1.0 and curve(2) == 1.5
