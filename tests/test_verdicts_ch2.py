"""Chapter 2, "Draft and verify": the verdict sentence follows its measurements
(flip the numbers, the sentence flips)."""


def test_greedy_match_verdict_follows_the_comparison():
    from specdec_ref.chapters.verdicts.ch2 import greedy_match_verdict
    assert "wrote the same tokens" in greedy_match_verdict(True, 20, 32)
    assert "did not write the same tokens" in greedy_match_verdict(False, 20, 32)
