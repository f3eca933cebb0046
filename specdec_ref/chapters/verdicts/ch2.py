"""The verdicts of chapter 2, "Draft and verify": did greedy speculative decoding write greedy decoding's
tokens, and did prompt lookup win on the rewrite task?

Each function returns the sentence the chapter prints; tests/test_verdicts_ch2.py flips each of them.
"""
from __future__ import annotations


def greedy_match_verdict(same: bool, spec_calls: int, plain_calls: int) -> str:
    """Chapter 2: did greedy speculative decoding write greedy decoding's tokens,
    and with how many target passes?"""
    if same:
        return (f"The speculative run wrote the same tokens as greedy decoding with the target alone, using "
                f"{spec_calls} target passes instead of {plain_calls}.")
    return ("The speculative run did not write the same tokens as greedy decoding with the target alone (it "
            f"used {spec_calls} target passes instead of {plain_calls}): a floating-point near-tie, the "
            "subject of chapter 3's last section, is the usual cause.")


def lookup_win_verdict(speedup: float, same: bool, tau: float, margin: float = 0.05) -> str:
    """Chapter 2: prompt lookup against plain greedy decoding on a rewrite prompt, timed side by side.

    speedup: the lookup run's tokens per second over plain decoding's; same: did both write the same
    tokens; tau: new tokens per target pass in the lookup run. Within `margin` of 1× counts as level.
    """
    from .margin import compare

    side = compare(speedup, 1.0, margin)
    pace = {"higher": f"ran {speedup:.2f}× as fast as plain decoding",
            "level": f"ran level with plain decoding ({speedup:.2f}×, within {margin:.0%})",
            "lower": f"ran slower than plain decoding ({speedup:.2f}×)"}[side]
    tokens = ("and wrote the same tokens" if same else
              "but did not write the same tokens (a floating-point near-tie, the subject of chapter 3's last "
              "section, is the usual cause)")
    why = {"higher": "where the answer copies the prompt, a draft that is only a search through the context "
                     "pays for itself",
           "level": "the target passes it saved paid for the extra rows each verification scored, "
                    "and no more",
           "lower": "every guess is a row the target must score, and here the guesses did not pay for their "
                    "rows"}[side]
    return (f"On the rewrite prompt, prompt lookup {pace} {tokens}, at {tau:.1f} tokens per target pass: "
            f"{why}.")
