"""Automatic checkers for the chapters' exercises: `check_*` functions that run a reader's answer
against the package and print what is right or wrong (they raise AssertionError with a hint on failure:
which way the answer is off and what to revisit, never the right value; tests/test_checkers_hint.py)."""
