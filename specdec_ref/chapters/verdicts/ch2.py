"""The verdict of chapter 2, "Draft and verify": did greedy speculative decoding write greedy decoding's
tokens?

The function returns the sentence the chapter prints; tests/test_verdicts_ch2.py checks both of its sentences.
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
