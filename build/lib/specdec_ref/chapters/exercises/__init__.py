"""Automatic checkers for the chapters' exercises: `check_*` functions that run a reader's answer
against the package and print what is right or wrong (they raise AssertionError with a hint on failure)."""
