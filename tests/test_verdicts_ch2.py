"""Chapter 2, "Draft and verify": the verdict sentence follows its measurements
(flip the numbers, the sentence flips)."""


def test_greedy_match_verdict_follows_the_comparison():
    from specdec_ref.chapters.verdicts.ch2 import greedy_match_verdict
    assert "wrote the same tokens" in greedy_match_verdict(True, 20, 32)
    assert "did not write the same tokens" in greedy_match_verdict(False, 20, 32)


def test_lookup_win_verdict_flips_with_the_speedup_and_the_match():
    from specdec_ref.chapters.verdicts.ch2 import lookup_win_verdict
    win = lookup_win_verdict(2.1, True, 4.2)
    assert "ran 2.10× as fast as plain decoding and wrote the same tokens" in win
    assert "4.2 tokens per target pass" in win and "pays for itself" in win
    assert "level with plain decoding (1.02×, within 5%)" in lookup_win_verdict(1.02, True, 1.3)
    loss = lookup_win_verdict(0.8, True, 1.1)
    assert "slower than plain decoding (0.80×)" in loss and "pays for itself" not in loss
    assert "did not write the same tokens" in lookup_win_verdict(2.1, False, 4.2)
    assert "did not write" not in win
