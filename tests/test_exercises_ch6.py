"""Chapter 6's exercise checkers: they pass right answers, reject wrong ones, and wait politely for untouched ones."""
import pytest

from specdec_ref.chapters import production
from specdec_ref.chapters.exercises import ch6
from specdec_ref.lab import timing


def test_checkers_report_unattempted_exercises_without_failing(capsys):
    ch6.check_breakeven_batch(None)
    ch6.check_tree_by_hand(None)
    ch6.check_hf_settings(None)
    assert capsys.readouterr().out.count("Not attempted yet") == 3


def test_breakeven_checker_accepts_64_and_rejects_its_neighbours():
    ch6.check_breakeven_batch(64)  # 2.53 / (0.6 + 2.56) = 0.80 at B = 64; 1.35 at B = 32
    for wrong in (32, 128, 1):
        with pytest.raises(AssertionError, match="Hint"):
            ch6.check_breakeven_batch(wrong)


def test_tree_checker_accepts_the_greedy_walk_and_rejects_the_chain_answer():
    ch6.check_tree_by_hand([5, 1, 6])  # root -> node 2 (token 5) -> node 4 (token 1) -> target's 6 at the leaf
    with pytest.raises(AssertionError, match="Hint"):
        ch6.check_tree_by_hand([5])  # what a chain through the first candidate would emit
    with pytest.raises(AssertionError):
        ch6.check_tree_by_hand([5, 1])  # forgot the target's own token after the path


def test_hf_settings_checker_names_the_missing_or_wrong_key():
    ch6.check_hf_settings({"num_assistant_tokens": 3, "num_assistant_tokens_schedule": "constant",
                           "assistant_confidence_threshold": 0.0})
    with pytest.raises(AssertionError, match="assistant_confidence_threshold"):
        ch6.check_hf_settings({"num_assistant_tokens": 3, "num_assistant_tokens_schedule": "constant"})
    with pytest.raises(AssertionError, match="heuristic"):
        ch6.check_hf_settings({"num_assistant_tokens": 3, "num_assistant_tokens_schedule": "heuristic",
                               "assistant_confidence_threshold": 0.0})


def test_paper_model_prices_a_pass_like_the_timing_module():
    model = timing.synthetic_llama(2, 128, vocab_size=256)  # untied: the input embedding is gathered, not read
    cfg = model.config
    paper = production.PaperModel(timing.matmul_params(model), timing.weight_bytes(model) / 4, cfg.num_hidden_layers,
                                  cfg.num_attention_heads, cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads)
    for k, ctx, B in ((1, 0, 1), (4, 16, 3)):
        assert paper.flops(k, ctx, B) == timing.forward_flops(model, k, ctx, B)
        assert paper.bytes(k, ctx, B, bytes_per_param=4) == timing.bytes_moved(model, k, ctx, B)


def test_llama_8b_on_paper_has_about_8_billion_parameters():
    target = production.PaperModel.llama(4096, 32, 32, 8, 14336, 128256)  # Llama-3-8B's config
    assert 7.4e9 < target.matmul_params < 7.6e9  # 8.03e9 minus the 0.53e9 input embedding, which is only gathered


def test_interpolated_costs_hit_the_grid_and_lie_between_points():
    costs = {(B, k): B * 10 + k for B in (1, 4) for k in (1, 2, 4)}
    assert production.interp_cost(costs, 4, 2) == 42
    assert production.interp_cost(costs, 2, 3) == pytest.approx((1 * 10 + 3) + (40 + 3 - 13) / 3)
