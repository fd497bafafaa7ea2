"""What the lake commands print reaches a terminal: a lake string holding terminal control sequences (an OSC 52
clipboard write, a screen clear, a one-byte C1 CSI) is printed as visible escapes, never as the raw bytes
(benchctl.logtext.inert at every print of lake text: ``benchctl query`` in each format, ``benchctl compare``).
ECMA-48 (5th edition) section 5: ESC ] starts an OSC string, ESC [ a CSI sequence, 0x9B is CSI as one C1 byte."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchctl.cli.main import main
from benchctl.local.lake import LocalLake
from tests.unit.test_report import campaign

OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"  # writes "rm -rf ~" to the clipboard of a terminal that obeys it
CLEAR = "\x1b[2J"
C1_CSI = "\x9b31m"
HOSTILE = f"name{OSC52}{CLEAR}{C1_CSI}end"
# every C0 control but tab and newline, DEL and every C1 control
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _lake(root: Path) -> LocalLake:
    """Two campaigns of one spec, the later one's spec name and versions holding the control sequences."""
    lake = LocalLake(root)
    campaign(lake, "camp-a", versions={"aiperf": "0.13.0", "ai-dynamo": "1.6.1"})
    campaign(lake, "camp-b", started=3600, versions={"aiperf": "0.13.0", "ai-dynamo": HOSTILE})
    row = lake.read_table("campaigns", "camp-b")[0]
    row.update(spec_name=HOSTILE)
    lake.write("campaigns", [row], part_name="campaign")
    return lake


def _shown(text: str) -> None:
    """No raw control byte, and each sequence written out as its escapes."""
    assert RAW_CONTROL.findall(text) == [], RAW_CONTROL.findall(text)
    for seen in (r"\x1b]52;c;cm0gLXJmIH4=\x07", r"\x1b[2J", r"\x9b31m"):
        assert seen in text, (seen, text)


@pytest.mark.parametrize("fmt", ["table", "csv"])
def test_query_prints_a_lake_strings_control_sequences_as_visible_escapes(tmp_path: Path, fmt: str,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    lake = _lake(tmp_path / "lake")
    assert main(["query", "SELECT spec_name FROM campaigns WHERE campaign_id = 'camp-b'", "--lake", str(lake.root),
                 "--format", fmt]) == 0
    out = capsys.readouterr().out
    _shown(out)
    assert "name" in out and "end" in out  # the rest of the string as it was


def test_query_json_carries_the_control_characters_as_json_escapes(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """JSON keeps the value itself (a reader gets the string back) and prints no raw control byte."""
    import json

    lake = _lake(tmp_path / "lake")
    assert main(["query", "SELECT spec_name FROM campaigns WHERE campaign_id = 'camp-b'", "--lake", str(lake.root),
                 "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert RAW_CONTROL.findall(out) == []
    assert json.loads(out)[0]["spec_name"] == HOSTILE


def test_compare_prints_a_lake_strings_control_sequences_as_visible_escapes(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    lake = _lake(tmp_path / "lake")
    assert main(["compare", "camp-b", "--against", "camp-a", "--lake", str(lake.root)]) == 0
    out = capsys.readouterr().out
    assert "ai-dynamo" in out  # the versions differ: the provenance table shows the hostile one
    _shown(out)


def test_an_error_naming_a_lake_string_prints_it_inert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A failed query's error line (DuckDB quoting the SQL it was given) is inert too, exit 2."""
    lake = _lake(tmp_path / "lake")
    assert main(["query", f"SELECT * FROM {CLEAR}x", "--lake", str(lake.root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("benchctl: ") and RAW_CONTROL.findall(err) == [], err
