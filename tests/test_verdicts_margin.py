"""The one comparison behind the verdicts: higher, lower or level within a margin, relative or absolute."""
import pytest

from specdec_ref.chapters.verdicts.margin import compare


def test_compare_relative_margin_is_a_fraction_of_b():
    assert compare(1.06, 1.0, 0.05) == "higher" and compare(0.94, 1.0, 0.05) == "lower"
    assert compare(1.04, 1.0, 0.05) == "level" and compare(0.96, 1.0, 0.05) == "level"
    assert compare(10.4, 10.0, 0.05) == "level" and compare(10.6, 10.0, 0.05) == "higher"  # 5% of 10 is 0.5


def test_compare_absolute_margin_does_not_scale_with_b():
    assert compare(10.4, 10.0, 0.05, relative=False) == "higher"
    assert compare(9.6, 10.0, 0.05, relative=False) == "lower"
    assert compare(10.04, 10.0, 0.05, relative=False) == "level"
    assert compare(-0.02, 0.0, 0.03, relative=False) == "level"


def test_compare_counts_the_bounds_as_level_and_a_zero_margin_as_exact():
    assert compare(1.5, 1.0, 0.5) == "level" and compare(0.5, 1.0, 0.5) == "level"
    assert compare(1.5, 1.0, 0.5, relative=False) == "level"
    assert [compare(g, 4, 0, relative=False) for g in (3, 4, 5)] == ["lower", "level", "higher"]


def test_compare_rejects_a_negative_margin_and_a_relative_margin_around_a_negative_b():
    with pytest.raises(ValueError, match="margin must be >= 0"):
        compare(1.0, 1.0, -0.1)
    with pytest.raises(ValueError, match="relative=False"):
        compare(1.0, -2.0, 0.1)
    assert compare(1.0, -2.0, 0.1, relative=False) == "higher"
