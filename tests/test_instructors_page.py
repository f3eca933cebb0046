"""The instructors' page is a record, not a computation: its timing verdict must match its own table,
and every number in "What a laptop will show" must be one the records hold (so they cannot drift). The
records are the README's summary and its measurement log, book/measurement_log.md, read as one text."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "book" / "instructors.md").read_text()
README = (ROOT / "README.md").read_text()
LOG = (ROOT / "book" / "measurement_log.md").read_text()  # the README's measurements, session by session
RECORD = README + "\n" + LOG
MARK = 3.0  # the book asks every cell for at least this headroom to the cell timeout

# a decimal ("1.40"), or a whole number or range with a unit ("270 MB", "10–13%", "36–44 tokens/s")
DECIMAL = re.compile(r"(?<![\d.])\d+\.\d+")
WITH_UNIT = re.compile(r"(?<![\d.–])\d+(?:–\d+)?\s?(?:ms|%|MB|tokens/s)(?!\w)")


def section(text: str, heading: str) -> str:
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 3)
    return text[start:end if end >= 0 else None]


def unrecorded_numbers(text: str, record: str) -> list[str]:
    """The numbers in `text` that `record` does not contain as whole numbers ("4.5" is not in "74.5")."""
    return [n for n in DECIMAL.findall(text) + WITH_UNIT.findall(text)
            if not re.search(rf"(?<![\d.]){re.escape(n)}(?!\d)", record)]


def headrooms(text: str) -> dict[str, float]:
    """Chapter -> its slowest cell's smallest headroom over the timing tables (one per recorded run)."""
    rows = re.findall(r"^\| (\d\. [^|]+?) \|[^|]*\|[^|]*\| ([\d.]+)× \|", text, flags=re.M)
    rooms: dict[str, float] = {}
    for name, h in rows:
        rooms[name] = min(float(h), rooms.get(name, float("inf")))
    return rooms


def headroom_verdict(rooms: dict[str, float], mark: float = MARK) -> str:
    short = [name for name, h in rooms.items() if h < mark]
    if not short:
        return "every chapter met that mark"
    return f"{', '.join(short)} fell short of it"


def test_every_number_on_the_laptop_sheet_is_one_the_records_hold():
    sheet = section(PAGE, "What a laptop will show")
    assert DECIMAL.findall(sheet), "the sheet quotes no numbers: the section was not found"
    assert unrecorded_numbers(sheet, RECORD) == []


def test_the_record_check_catches_a_number_typed_afresh():
    typed = "9.87"  # a number neither the README nor its measurement log holds
    assert typed not in RECORD
    sheet = section(PAGE, "What a laptop will show").replace("1.40×", f"{typed}×")
    assert set(unrecorded_numbers(sheet, RECORD)) == {typed}
    record = "a loop cost 5.6 ms, 13% of 200 MB"  # a fixed record: the real records' numbers change
    assert unrecorded_numbers("a loop cost 4.5 ms, 12% of 300 MB", record) == ["4.5", "12%", "300 MB"]
    assert unrecorded_numbers("4.5 ms", "74.5 tokens/s, 4.55 s") == ["4.5"]  # whole numbers only
    assert unrecorded_numbers("4.5 ms", "it took 4.5 ms") == []


def test_the_timing_verdict_is_the_one_its_table_gives():
    rooms = headrooms(section(PAGE, "How long each chapter takes"))
    assert len(rooms) == 6, rooms
    assert f"In both runs {headroom_verdict(rooms)}" in PAGE


def test_the_timing_tables_count_a_chapter_by_its_worst_run():
    two_runs = ("| 3. Exact, not approximate | 1.9 min | 28 s | 10.8× | none |\n"
                "| 3. Exact, not approximate | 4.5 min | 74 s | 2.5× | none |\n")
    assert headrooms(two_runs) == {"3. Exact, not approximate": 2.5}
    assert headroom_verdict(headrooms(two_runs)) == "3. Exact, not approximate fell short of it"


def test_the_timing_verdict_flips_when_a_chapter_falls_short():
    rooms = {"1. Why decoding is slow": 20.5, "3. Exact, not approximate": 4.1}
    assert headroom_verdict(rooms) == "every chapter met that mark"
    rooms["3. Exact, not approximate"] = 2.9
    assert headroom_verdict(rooms) == "3. Exact, not approximate fell short of it"
