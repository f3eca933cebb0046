"""Every value checker hints and never reveals: in reply to a wrong answer (the `answer = 0` oracle attempt,
a near miss, a classic mistake) it says "wrong" and its message holds the right value in none of its
plausible printed forms; a right answer is still accepted.

VALUE_CASES lists every checker whose answer is a value (or a function judged by the values it returns);
EXEMPT lists the checkers that judge code or behaviour, each with its reason. A test discovers every
`check_*` of the exercises modules, so a new checker must join one of the two lists.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Callable

import pytest
from transformers import LlamaConfig, LlamaForCausalLM

from specdec_ref.chapters.choosing import coverage_speedup
from specdec_ref.chapters.exercises import ch1, ch2, ch3, ch4, ch5, ch6
from specdec_ref.chapters.production import batch_speedup, breakeven_batch
from specdec_ref.lab import timing
from specdec_ref.lab.speedup import best_gamma, expected_tokens_per_iteration, generalized_speedup

MODULES = (ch1, ch2, ch3, ch4, ch5, ch6)


# --- the assertion helper: does a message hold a value? -------------------------------------------------

@dataclass(frozen=True)
class Literal:
    """A right value that is a word (a draft's name, a setting's value), matched as a whole word."""
    text: str


def printed_forms(value: float) -> set[str]:
    """The ways a checker could print `value`: 2 to 6 significant digits, 1 to 4 decimals, the integer."""
    forms = {f"{value:.{s}g}" for s in range(2, 7)}
    forms |= {f"{value:.{d}f}" for d in range(1, 5)}
    if float(value) == int(value):
        forms |= {str(int(value)), f"{int(value):,}"}
    # a form with one significant digit (0.1 for 0.13) is a different number, unless the value is that number
    return {f for f in forms
            if float(f.replace(",", "")) == value or len(re.sub(r"\D", "", f.split("e")[0]).lstrip("0")) >= 2}


def patterns(value) -> list[re.Pattern]:
    """Regexes that find value as a standalone number: "γ = 8" and "8×" hold 8; "0.8", "18", "8.5" do not."""
    if isinstance(value, Literal):
        return [re.compile(rf"(?<!\w){re.escape(value.text)}(?!\w)", re.IGNORECASE)]
    return [re.compile(rf"(?<![\d.]){re.escape(f)}(?!\d)(?!\.\d)") for f in sorted(printed_forms(value))]


def leaks(message: str, right_values, given: str = "") -> list[str]:
    """The printed forms of the right values found in message.

    A form that the reader's own input (`given`: the answer and the inputs the checker shows) already holds
    is not counted: the checker may repeat what the reader typed. The caller asserts that some form is left
    to check, so that this exemption cannot empty the test.
    """
    found = []
    for value in right_values:
        for pattern in patterns(value):
            if not pattern.search(given) and pattern.search(message):
                found.append(pattern.search(message).group(0))
    return found


def forms_left(right_values, given: str) -> int:
    """How many printed forms of the right values `given` does not already hold."""
    return sum(not p.search(given) for v in right_values for p in patterns(v))


def assert_hints_without_revealing(run: Callable[[], None], right_values, given: str, capsys) -> str:
    """run() must reject the answer (AssertionError) and the reply must hold no form of a right value."""
    capsys.readouterr()
    with pytest.raises(AssertionError) as failure:
        run()
    message = capsys.readouterr().out + str(failure.value)
    assert forms_left(right_values, given) > 0, f"the test's answer {given!r} holds every right value"
    found = leaks(message, right_values, given)
    assert not found, f"the reply gives the right value away ({found}): {message!r}"
    return message


def assert_accepts(run: Callable[[], None], capsys) -> None:
    """run() must pass and print that the answer is right."""
    capsys.readouterr()
    assert run() is None
    assert "Correct" in capsys.readouterr().out


# --- the table: every value checker, with wrong answers and its right values ---------------------------

@dataclass
class Case:
    checker: Callable  # the `check_*` function itself
    call: Callable  # answer -> checker(answer, with this case's fixed parameters)
    right: object  # an answer the checker must accept
    wrongs: list  # answers it must reject: the 0 / empty oracle attempt first, then near misses and mistakes
    right_values: Callable  # wrong answer -> (the right values, the text of what the reader already sees)
    shown: str = ""  # the fixed parameters' values, as the reader sees them (so never leaks)


def fixed(values, shown=""):
    """right_values for a value checker: the right values are the same whatever the wrong answer."""
    return lambda answer: (values, f"{answer!r} {shown}")


def gqa_llama() -> LlamaForCausalLM:
    """3 layers, 4 query heads sharing 2 kv heads of dim 16, float32: 2·3·2·16·4 = 768 bytes per token."""
    config = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, bos_token_id=None, eos_token_id=None,
                         pad_token_id=None)
    return LlamaForCausalLM(config).eval()


def first_failing(cases, reference, fn, rel):
    """(inputs, right value) of the first case where fn is off by more than rel, in the checker's order."""
    for args in cases:
        want, got = reference(*args), float(fn(*args))
        if abs(got - want) > rel * abs(want):
            return args, want
    raise AssertionError("this wrong answer is right on every case")


def expected_tokens_values(fn):
    (alpha, gamma), want = first_failing(ch4.CASES, expected_tokens_per_iteration, fn, 1e-6)
    return [want], f"α = {alpha}, γ = {gamma}"


def batch_speedup_values(fn, alpha=0.7):
    grid = [(B, g) for B in ch6.BATCH_SIZES for g in range(1, 8)]
    (B, gamma), want = first_failing(
        grid, lambda B, g: batch_speedup(ch6.TARGET_COSTS, ch6.DRAFT_COSTS, alpha, g, B),
        lambda B, g: fn(ch6.TARGET_COSTS, ch6.DRAFT_COSTS, alpha, g, B), 1e-6)
    return [want], f"S(B = {B}) at γ = {gamma}"


def expected_tokens_sum(alpha, gamma):
    return sum(alpha ** k for k in range(gamma + 1))


def batch_speedup_answer(costs, draft_costs, alpha, gamma, B):  # the exercise's solution
    c = draft_costs[(B, 1)] / costs[(B, 1)]
    return (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * c + costs[(B, gamma + 1)] / costs[(B, 1)]))


def batch_speedup_textbook(costs, draft_costs, alpha, gamma, B):  # forgets t(B, γ+1)/t(B, 1)
    c = draft_costs[(B, 1)] / costs[(B, 1)]
    return (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (gamma * c + 1))


KV_MODEL = gqa_llama()
KV_TRUTH = timing.kv_cache_bytes(KV_MODEL, 5000)  # 3.84 MB
KNEE = timing.ridge_point(989e12, 3.35e12)  # 295 FLOP/byte; the knee at 4 bytes per parameter is 590
BEST = best_gamma(0.75, 0.04)  # (7, 2.812): not the chapter's (0.8, 0.05)
WINNER = ("feature head", *best_gamma(*ch5.DRAFTS["feature head"]))  # γ = 5, 2.262×
HF_RIGHT = {"num_assistant_tokens": ch6.GAMMA, "num_assistant_tokens_schedule": "constant",
            "assistant_confidence_threshold": 0.0}
BETA_P, BETA_Q = [0.45, 0.35, 0.2, 0.0], [0.1, 0.3, 0.3, 0.3]  # β = 0.1 + 0.3 + 0.2 = 0.6, TV = 0.4

VALUE_CASES = {
    "check_step_time": Case(  # 2.6 GB at 20 GB/s: 0.13 s = 130 ms
        ch1.check_step_time, lambda a: ch1.check_step_time(a, n_bytes=2.6e9, bandwidth=20e9),
        0.13, [0, 0.12, 1.3, 0.013], fixed([0.13, 130])),
    "check_intensity": Case(  # 2·6 / 4 = 3 FLOP/byte
        ch1.check_intensity, lambda a: ch1.check_intensity(a, k=6, bytes_per_param=4),
        3.0, [0, 1.5, 2.9, 12], fixed([3], "6 4")),
    "check_knee": Case(  # the ridge itself would give the answer away too
        ch1.check_knee, lambda a: ch1.check_knee(a, 989e12, 3.35e12, bytes_per_param=4),
        KNEE * 2, [0, 295, 450, 2000], fixed([KNEE * 2, round(KNEE * 2), KNEE, round(KNEE)], "4")),
    "check_kv_cache_bytes": Case(  # 0, one of K and V, all query heads, a near miss
        ch1.check_kv_cache_bytes, lambda a: ch1.check_kv_cache_bytes(a, KV_MODEL, context_len=5000),
        KV_TRUTH, [0, KV_TRUTH / 2, KV_TRUTH * 2, 3.5e6],
        fixed([KV_TRUTH, KV_TRUTH / 1e6, KV_TRUTH / 2 ** 20, KV_TRUTH / 1e9], "5000 1")),
    "check_cache_lengths": Case(  # context 50, γ = 4, one accepted: (54, 51, 53, 51)
        ch2.check_cache_lengths, lambda a: ch2.check_cache_lengths(50, 4, 1, a),
        (54, 51, 53, 51), [(0, 0, 0, 0), (54, 51, 54, 51), (54, 55, 53, 51)], fixed([54, 51, 53], "50 4 1")),
    "check_perfect_draft_passes": Case(  # 64 tokens, γ = 4: 12 full iterations and one short one
        ch2.check_perfect_draft_passes, lambda a: ch2.check_perfect_draft_passes(64, 4, a),
        13, [0, 12, 14, 16], fixed([13], "64 4")),
    "check_beta": Case(
        ch3.check_beta, lambda a: ch3.check_beta(BETA_P, BETA_Q, a),
        0.6, [0, 0.4, 0.65], fixed([0.6], f"{BETA_P} {BETA_Q}")),
    "check_samples_needed": Case(  # TV = 0.1: 705 draws; 2800 is the ε-instead-of-ε/2 mistake
        ch3.check_samples_needed, lambda a: ch3.check_samples_needed(0.1, a),
        705, [0, 100, 300, 2800], fixed([705], "0.1 16 0.05")),
    "check_best_gamma": Case(
        ch4.check_best_gamma, lambda a: ch4.check_best_gamma(a, alpha=0.75, c=0.04),
        BEST[0], [0, 1, 6, 8, 16], fixed(list(BEST), "0.75 0.04")),
    "check_best_gamma, no γ pays off": Case(  # α = 0.2 < c = 0.3: the right answer is 0
        ch4.check_best_gamma, lambda a: ch4.check_best_gamma(a, alpha=0.2, c=0.3),
        0, [1, 3], fixed([0, Literal("do not speculate")], "0.2 0.3")),
    "check_prediction": Case(  # 1.799 is the textbook answer
        ch4.check_prediction, lambda a: ch4.check_prediction(a, 0.6, 3, 0.07, 1.3, 0.04, measured=1.5),
        generalized_speedup(0.6, 3, 0.07, 1.3, 0.04), [0, 1.37, 1.7983, 2.0],
        fixed([generalized_speedup(0.6, 3, 0.07, 1.3, 0.04)], "0.6 3 0.07 1.30 0.040 1.5")),
    "check_winner": Case(
        ch5.check_winner, ch5.check_winner, WINNER[:2],
        [("tiny LM draft", 0), ("big LM draft", 3), ("tiny LM draft", 4), ("feature head", 4)],
        fixed([Literal(WINNER[0]), WINNER[1], WINNER[2]])),
    "check_lookup_prediction": Case(  # 2.568 is the textbook answer, blind to coverage
        ch5.check_lookup_prediction, lambda a: ch5.check_lookup_prediction(a, 0.7, 0.4, 0.02, 4),
        coverage_speedup(0.7, 4, 0.02, 0.4), [0, 1.6, 2.5677, 3.0],
        fixed([coverage_speedup(0.7, 4, 0.02, 0.4)], "0.7 0.40 0.02 4")),
    "check_breakeven_batch": Case(  # α = 0.6, γ = 4: not the chapter's (0.7, 3)
        ch6.check_breakeven_batch, lambda a: ch6.check_breakeven_batch(a, alpha=0.6, gamma=4),
        breakeven_batch(ch6.TARGET_COSTS, ch6.DRAFT_COSTS, 0.6, 4), [0, 1, 16, 64, 128],
        fixed([breakeven_batch(ch6.TARGET_COSTS, ch6.DRAFT_COSTS, 0.6, 4)], "0.6 4")),
    "check_tree_by_hand": Case(  # [5, 1, 6]; [5] is the chain's answer, [5, 1] forgets the target's token
        ch6.check_tree_by_hand, ch6.check_tree_by_hand, [5, 1, 6], [[0], [7, 3, 4], [5], [5, 1], [5, 2, 6]],
        fixed([Literal("[5, 1, 6]"), 5, 1, 6])),
    "check_hf_settings": Case(
        ch6.check_hf_settings, ch6.check_hf_settings, HF_RIGHT,
        [{}, {"num_assistant_tokens": 3}, {"num_assistant_tokens": 3, "num_assistant_tokens_schedule":
                                           "heuristic", "assistant_confidence_threshold": 0.4}],
        fixed([Literal("constant"), 0])),
    # functions judged by the numbers they return: the right number at the case they fail on must not show
    "check_expected_tokens": Case(
        ch4.check_expected_tokens, ch4.check_expected_tokens, expected_tokens_sum,
        [lambda a, g: 0, lambda a, g: sum(a ** k for k in range(g)),
         lambda a, g: (1 - a ** (g + 1)) / (1 - a) if a < 1 else 1.0],
        expected_tokens_values),
    "check_batch_speedup": Case(
        ch6.check_batch_speedup, ch6.check_batch_speedup, batch_speedup_answer,
        [lambda *args: 0, batch_speedup_textbook,
         lambda costs, dc, alpha, gamma, B: 1.01 * batch_speedup_answer(costs, dc, alpha, gamma, B)],
        batch_speedup_values),
}

EXEMPT = {  # checkers that judge code or behaviour, not a value: no single right value to give away
    "check_greedy_verify": "judges a function on 300 random cases; a failing case shows its inputs, and the "
                           "reply says which way the reader's count is off",
    "check_fixed_verify": "a chi-square test of the reader's sampler; it prints the reader's statistic",
    "check_residual": "judges a function exactly on random pairs, then by chi-square",
    "check_no_residual_distribution": "judges a function that returns a distribution; the reply names the "
                                      "tokens where the reader's is too high or too low",
    "check_capstone_step": "runs the reader's loop step: greedy equality and chi-square",
    "check_drafter": "runs the reader's drafter: protocol, greedy equality and chi-square",
    "check_point_mass_verify": "a chi-square test of the reader's sampler; it prints the reader's "
                               "frequencies",
}


def all_checkers() -> dict[str, Callable]:
    """Every `check_*` function defined (not imported) in the exercises modules."""
    return {name: fn for module in MODULES for name, fn in inspect.getmembers(module, inspect.isfunction)
            if name.startswith("check_") and fn.__module__ == module.__name__}


def takes_a_value(fn: Callable) -> bool:
    """A checker whose answer is a value has a parameter named answer... (answer, answer_s, answer_k)."""
    return any(p.startswith("answer") for p in inspect.signature(fn).parameters)


# --- the tests -------------------------------------------------------------------------------------------

def test_every_checker_is_in_the_value_table_or_exempt_with_a_reason():
    checkers = all_checkers()
    tabled = {case.checker.__name__ for case in VALUE_CASES.values()}
    assert len(checkers) == 24, sorted(checkers)
    assert not tabled & set(EXEMPT), tabled & set(EXEMPT)
    assert tabled | set(EXEMPT) == set(checkers), (
        f"not listed: {sorted(set(checkers) - tabled - set(EXEMPT))}; listed but gone: "
        f"{sorted((tabled | set(EXEMPT)) - set(checkers))}")
    value_checkers = {name for name, fn in checkers.items() if takes_a_value(fn)}
    assert value_checkers <= tabled, f"value checkers marked exempt: {sorted(value_checkers - tabled)}"
    assert all(len(reason) > 20 for reason in EXEMPT.values())


@pytest.mark.parametrize("name", list(VALUE_CASES))
def test_value_checker_hints_without_revealing_the_right_value(name, capsys):
    case = VALUE_CASES[name]
    for wrong in case.wrongs:
        right_values, given = case.right_values(wrong)
        message = assert_hints_without_revealing(lambda: case.call(wrong), right_values, given, capsys)
        assert len(message) > 40, message  # a reply that says what to revisit, not a bare "no"


@pytest.mark.parametrize("name", list(VALUE_CASES))
def test_value_checker_accepts_the_right_answer(name, capsys):
    assert_accepts(lambda: VALUE_CASES[name].call(VALUE_CASES[name].right), capsys)


def test_value_checkers_still_say_which_way_a_number_is_off():
    with pytest.raises(AssertionError, match="too low"):
        ch1.check_step_time(0.12, n_bytes=2.6e9, bandwidth=20e9)
    with pytest.raises(AssertionError, match="too high"):
        ch3.check_beta(BETA_P, BETA_Q, 0.65)
    with pytest.raises(AssertionError, match="a longer draft"):
        ch4.check_best_gamma(BEST[0] - 1, alpha=0.75, c=0.04)
    with pytest.raises(AssertionError, match="a shorter draft"):
        ch4.check_best_gamma(BEST[0] + 1, alpha=0.75, c=0.04)
    with pytest.raises(AssertionError, match="too small"):
        ch6.check_breakeven_batch(16, alpha=0.6, gamma=4)


# --- power: the same helper catches checkers that do give the answer away ------------------------------

def leaky_best_gamma(answer, alpha=0.75, c=0.04):
    """The old reply: it names the best γ and its speedup."""
    gamma, s = best_gamma(alpha, c)
    assert answer == gamma, f"γ = {answer} is not it, but γ = {gamma} gives {s:.3f}×"


def leaky_table(answer, alpha=0.6, gamma=4):
    """A reply with a table from which the right batch size can be read."""
    truth = breakeven_batch(ch6.TARGET_COSTS, ch6.DRAFT_COSTS, alpha, gamma)
    table = ", ".join(f"B={B}: {batch_speedup(ch6.TARGET_COSTS, ch6.DRAFT_COSTS, alpha, gamma, B):.2f}×"
                      for B in ch6.BATCH_SIZES)
    assert answer == truth, f"not {answer}: {table}"


def leaky_rounded(answer):
    """A reply that prints the right speedup, rounded to one decimal."""
    truth = generalized_speedup(0.6, 3, 0.07, 1.3, 0.04)
    assert abs(answer - truth) < 0.01, f"{answer:.2f}× is not it; the answer is about {truth:.1f}×"


@pytest.mark.parametrize("leaky, wrong, right_values", [
    (leaky_best_gamma, 0, list(BEST)),
    (leaky_best_gamma, 8, [BEST[0]]),  # the integer alone, as a token: "γ = 7"
    (leaky_table, 0, [breakeven_batch(ch6.TARGET_COSTS, ch6.DRAFT_COSTS, 0.6, 4)]),
    (leaky_rounded, 0, [generalized_speedup(0.6, 3, 0.07, 1.3, 0.04)]),
])
def test_the_helper_catches_a_checker_that_prints_the_answer(leaky, wrong, right_values, capsys):
    with pytest.raises(AssertionError, match="gives the right value away"):
        assert_hints_without_revealing(lambda: leaky(wrong), right_values, repr(wrong), capsys)


def test_the_helper_reads_numbers_as_numbers():
    assert leaks("γ = 8 gives 3.092×", [8]) == ["8"]
    assert leaks("γ = 8 gives 3.092×", [3.0917]) == ["3.092"]
    assert leaks("about 3.1× here", [3.0917]) == ["3.1"]
    assert not leaks("α = 0.8, γ = 18, 8.5 ms, 80 tokens", [8])  # 8 is not in 0.8, 18, 8.5 or 80
    assert not leaks("your 3.05× is too low", [3.0917])
    assert not leaks("you said 8, too high", [8], given="8")  # the reader's own number may come back
    assert leaks("Correct: feature head", [Literal("feature head")]) == ["feature head"]
