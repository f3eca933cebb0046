"""The GPU plan: a launch-and-bytes cost model picks pair, dtype and cache mode for the cards readers have.

No GPU is needed: `torch.cuda.get_device_properties` is mocked with the names and memory that each card
reports (the A100-40GB on Colab reports 39.49 GiB, a T4 15.0 GiB).
"""
from types import SimpleNamespace

import pytest
import torch

from specdec_ref.lab import timing
from specdec_ref.models import gpu_plan as G
from specdec_ref.models import loading as M

CARDS = {  # name as torch reports it, GiB as torch reports it, compute capability
    "T4": ("Tesla T4", 15.0, (7, 5)),
    "L4": ("NVIDIA L4", 22.03, (8, 9)),
    "A100-40GB": ("NVIDIA A100-SXM4-40GB", 39.49, (8, 0)),
    "A100-80GB": ("NVIDIA A100-SXM4-80GB", 79.15, (8, 0)),
    "H100": ("NVIDIA H100 80GB HBM3", 79.11, (9, 0)),
}


def _mock_card(monkeypatch, card):
    name, gib, (major, minor) = CARDS[card]
    props = SimpleNamespace(name=name, total_memory=int(gib * 2**30), major=major, minor=minor)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    return G.gpu_from_device("cuda")


@pytest.mark.parametrize("card, sheet, dtype, pair", [
    ("T4", "T4", torch.float16, "qwen2.5"),  # the 7B pair does not fit 15 GiB
    ("L4", "L4", torch.bfloat16, "qwen2.5-7b"),
    ("A100-40GB", "A100 40GB", torch.bfloat16, "qwen2.5-7b"),  # 39.49 GiB: under the old 40 GiB line
    ("A100-80GB", "A100 80GB SXM", torch.bfloat16, "qwen2.5-7b"),
    ("H100", "H100 SXM", torch.bfloat16, "qwen2.5-7b"),
])
def test_plan_for_each_card_reader_have(monkeypatch, card, sheet, dtype, pair):
    gpu = _mock_card(monkeypatch, card)
    plan = G.plan("cuda")
    assert gpu.sheet_name == sheet and plan.dtype == dtype
    assert (plan.pair, plan.cache) == (pair, "compiled") and plan.speedup > 1
    assert M.auto_pair_name(torch.device("cuda")) == pair
    assert all(p.fits for p in plan.ranked) and plan.ranked[0].speedup == plan.speedup
    assert gpu.name in str(plan) and f"{pair} in" in str(plan)


def test_memory_alone_does_not_decide(monkeypatch):
    """Same memory, different bandwidth: a fast card gains less from speculation on the same pair, since
    the loop's fixed cost weighs more against a shorter target step."""
    gpu = _mock_card(monkeypatch, "A100-80GB")
    fast = G.GPU(gpu.name, gpu.memory_gib, gpu.capability, timing.SPEC_SHEETS["H200 SXM"], "H200 SXM")
    slow = G.predict_pair_speedup("qwen2.5", gpu, "compiled").speedup
    assert G.predict_pair_speedup("qwen2.5", fast, "compiled").speedup < slow


def test_t4_eager_numbers_match_the_issue_paper_estimate(monkeypatch):
    """Issue 28's count: 3B target 30–36 ms, 0.5B draft 20–23 ms (launch-bound), c ≈ 0.6–0.7, 0.65–1.1×."""
    gpu = _mock_card(monkeypatch, "T4")
    eager = G.predict_pair_speedup("qwen2.5", gpu, "dynamic")
    assert 30 <= eager.target_ms <= 36 and 0.6 <= eager.c <= 0.7
    assert 20 <= eager.target_ms * eager.c <= 23
    assert 0.65 <= eager.same_mode <= 1.1


def test_the_offline_feature_head_stays_cheap_when_launch_bound(monkeypatch):
    gpu = _mock_card(monkeypatch, "H100")
    head = G.predict_pair_speedup("offline", gpu, "dynamic")
    target = G.SHAPES["SmolLM2-135M"]
    launch, memory = target.ops("dynamic") * G.LAUNCH_S, target.bytes(2, G.CONTEXT) / gpu.sheet.bandwidth
    assert launch > 10 * memory  # launch-bound
    assert head.c < 1 / 15  # one layer against thirty
    assert G.predict_pair_speedup("offline/lm", gpu, "dynamic").c > head.c  # the 2-layer LM draft costs more


def test_a_draft_deeper_than_its_target_costs_more_than_it_when_launch_bound(monkeypatch):
    gpu = _mock_card(monkeypatch, "T4")
    assert G.predict_pair_speedup("smollm2", gpu, "dynamic").c > 1  # 30 layers against 24


def test_h200_calibration_reproduces_the_recorded_run():
    """README: plain 23–28 ms per step of the 135M target, ours 0.90× our plain loop (α = 0.30, γ = 2)."""
    gpu = G.spec_gpu("H200 SXM", 139.8, (9, 0))
    p = G.predict_pair_speedup("offline", gpu, "dynamic", 2, alpha=0.30)
    assert 23 <= p.target_ms <= 28
    assert 0.8 <= p.same_mode <= 1.0


def test_speedup_grows_with_alpha_and_is_below_one_without_acceptance(monkeypatch):
    gpu = _mock_card(monkeypatch, "L4")
    s = [G.predict_pair_speedup("qwen2.5-7b", gpu, "compiled", 4, alpha=a).speedup for a in (0.0, 0.4, 0.8)]
    assert s[0] < 1 < s[2] and s == sorted(s)


def test_bad_arguments_are_refused(monkeypatch):
    gpu = _mock_card(monkeypatch, "T4")
    with pytest.raises(ValueError, match="unknown pair"):
        G.predict_pair_speedup("llama-70b", gpu, "dynamic")
    with pytest.raises(ValueError, match="mode must be"):
        G.predict_pair_speedup("qwen2.5", gpu, "graphs")
    with pytest.raises(ValueError, match="alpha"):
        G.predict_pair_speedup("qwen2.5", gpu, "dynamic", alpha=1.0)
    tiny = G.GPU("tiny", 0.5, (7, 5), timing.SPEC_SHEETS["T4"], "T4")
    with pytest.raises(ValueError, match="no pair fits"):
        G.plan(gpu=tiny)


def test_every_candidate_is_a_pair_the_loader_knows():
    for name, pair in G.PAIR_MODELS.items():
        assert name.split("/")[0] in set(M.PAIRS) | {"offline"}
        assert pair.target in G.SHAPES and pair.draft in G.SHAPES and pair.alpha_source.split(":")[0] in (
            "measured", "assumed")


def test_lm_draft_request_plans_the_offline_pair_with_the_lm_draft(monkeypatch):
    gpu = _mock_card(monkeypatch, "T4")
    assert {p.pair for p in G.rank_pairs(gpu, draft="lm")} >= {"offline/lm"}
    assert "offline/lm" not in {p.pair for p in G.rank_pairs(gpu)}


@pytest.mark.parametrize("name, sheet", [
    ("Tesla T4", "T4"), ("NVIDIA L4", "L4"), ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB"), ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H200", "H200 SXM"),
    ("nvidia a100 sxm4 40gb", "A100 40GB"),
])
def test_spec_sheets_match_by_full_name(name, sheet):
    assert timing.spec_sheet_for(name)[0] == sheet


@pytest.mark.parametrize("name", ["NVIDIA A100 80GB PCIe", "NVIDIA H100 PCIe", "NVIDIA L40S",
                                  "Tesla V100-SXM2-16GB", "NVIDIA"])
def test_a_card_without_its_own_sheet_gets_none_not_a_neighbours(name):
    assert timing.spec_sheet_for(name) is None


def test_a_card_without_a_sheet_is_planned_with_a_slow_assumption(monkeypatch):
    props = SimpleNamespace(name="NVIDIA L40S", total_memory=44 * 2**30, major=8, minor=9)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    gpu = G.gpu_from_device("cuda")
    assert gpu.sheet is G.UNKNOWN_CARD and "none" in gpu.sheet_name
    assert G.plan(gpu=gpu).dtype == torch.bfloat16


def test_l4_and_a100_40gb_sheets_are_quoted_numbers():
    assert timing.SPEC_SHEETS["L4"].bandwidth == 300e9 and timing.SPEC_SHEETS["L4"].memory_gib == 24
    assert timing.SPEC_SHEETS["A100 40GB"].bandwidth == 1.555e12
