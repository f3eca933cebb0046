"""Each verdict sentence follows its measurements: flip the numbers and the sentence flips."""
from specdec_ref.chapters.verdicts import kernel_verdict, overhead_verdict, tree_vs_chain_verdict


def test_kernel_verdict_says_within_goal_only_when_it_is():
    before = {1: 1.0, 2: 1.7, 4: 1.8, 8: 1.8}
    good = kernel_verdict(before, {1: 1.0, 2: 1.05, 4: 1.1, 8: 1.2})
    bad = kernel_verdict(before, {1: 1.0, 2: 1.1, 4: 1.2, 8: 1.45})
    assert "within 1.25×, as the memory-bound" in good and "cut the cost" in good
    assert "up to k = 4" in bad and "compute-bound" in bad


def test_kernel_verdict_says_when_prepacking_did_not_help():
    s = kernel_verdict({1: 1.0, 8: 1.3}, {1: 1.0, 8: 1.4})
    assert "did not help" in s and "no k > 1" in s


def test_tree_vs_chain_verdict_follows_the_numbers():
    assert tree_vs_chain_verdict(1.4, 1.1).startswith("the tree is ahead")
    assert tree_vs_chain_verdict(1.1, 1.4).startswith("the chain is ahead")
    assert "level" in tree_vs_chain_verdict(1.20, 1.21)


def test_overhead_verdict_follows_the_numbers():
    assert "at most" in overhead_verdict(5.0, 7.0)
    assert "more than" in overhead_verdict(9.0, 7.0)


def test_adaptive_verdict_follows_the_numbers():
    from specdec_ref.chapters.verdicts import adaptive_verdict
    assert "beat the best fixed" in adaptive_verdict(1.0, {"confidence stop": 1.2, "schedule": 0.9})
    assert "no adaptive rule beat" in adaptive_verdict(1.2, {"confidence stop": 1.0, "schedule": 0.9})
    assert "level" in adaptive_verdict(1.0, {"confidence stop": 1.01})
