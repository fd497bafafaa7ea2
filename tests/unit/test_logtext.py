"""Failure messages people can read: a worker's terminal log without its escape sequences (ECMA-48 CSI, OSC,
two-byte escapes), trimmed to the lines that explain, the process's end (exit code or signal) first."""

from __future__ import annotations

import signal

import pytest

from benchctl import logtext

# what the Dynamo mocker's tracing subscriber writes to a terminal (dim timestamp, coloured level, bold target)
MOCKER_LINE = ("\x1b[2m2026-12-01T19:02:11.734Z\x1b[0m \x1b[31mERROR\x1b[0m \x1b[1mdynamo_llm::mocker\x1b[0m\x1b[2m:\x1b[0m "
               "engine exited")


def test_csi_osc_and_two_byte_escapes_are_removed_and_text_kept() -> None:
    text = (MOCKER_LINE + "\n\x1b]8;;https://example.com\x07link\x1b]8;;\x07 and \x1b]0;title\x1b\\"
            "\x1b(Bplain \x9b1mC1\x1b[38;2;255;0;0mrgb\x1b[?25h\x07\n")
    out = logtext.strip_escapes(text)
    assert "\x1b" not in out and "\x9b" not in out and "\x07" not in out
    assert out.splitlines() == ["2026-12-01T19:02:11.734Z ERROR dynamo_llm::mocker: engine exited",
                                "link and plain C1rgb"]


def test_a_carriage_return_redraw_keeps_what_the_terminal_showed_last() -> None:
    assert logtext.strip_escapes("loading  10%\rloading  55%\rloading 100%\ndone\r\n") == "loading 100%\ndone\n"


def test_the_tail_starts_at_the_last_traceback_and_is_bounded() -> None:
    noise = [f"\x1b[2minfo line {i}\x1b[0m" for i in range(50)]
    tb = ["Traceback (most recent call last):", '  File "x.py", line 1, in <module>', "ValueError: bad block size"]
    out = logtext.tail("\n".join([*noise, *tb, "", "  "]))
    assert out.splitlines() == tb
    long = logtext.tail("\n".join(f"line {i}" for i in range(100)), n=5)
    assert long.splitlines() == [f"line {i}" for i in range(95, 100)]
    assert logtext.tail("\x1b[0m\n\n") == ""


def test_a_process_end_is_said_by_its_exit_code_or_signal() -> None:
    assert logtext.exit_text(-signal.SIGKILL) == "killed by signal SIGKILL (9)"
    assert logtext.exit_text(3) == "exit code 3"
    assert logtext.exit_text(137) == "exit code 137 (signal SIGKILL)"
    assert logtext.exit_text(None).startswith("exited")


def test_a_dead_worker_is_described_end_first_without_escapes(tmp_path) -> None:
    from benchctl.local.serving_checks import _describe_dead

    log = tmp_path / "worker.log"
    log.write_text("\n".join([MOCKER_LINE] * 3) + "\n", encoding="utf-8")
    text = _describe_dead({"name": "worker-0", "pid": 4242, "start_time": 1, "log": str(log)})
    first, *rest = text.splitlines()
    assert first.startswith("worker-0 (pid 4242) exited") and "\x1b" not in text
    assert rest == ["2026-12-01T19:02:11.734Z ERROR dynamo_llm::mocker: engine exited"] * 3


@pytest.mark.parametrize("control", [*(chr(c) for c in range(0x20) if c not in (9, 10)), "\x7f",
                                     *(chr(c) for c in range(0x80, 0xA0))])
def test_every_c0_and_c1_control_but_tab_and_newline_prints_inert_as_its_visible_escape(control: str) -> None:
    out = logtext.inert(f"a{control}b\tc\nd")
    assert out == f"a\\x{ord(control):02x}b\tc\nd"
    assert not any((0x00 <= ord(ch) < 0x20 and ch not in "\t\n") or 0x7F <= ord(ch) < 0xA0 for ch in out)


def test_inert_keeps_printable_text_and_turns_an_osc_52_clipboard_write_into_plain_characters() -> None:
    hostile = "label \x1b]52;c;ZWNobyBwd25lZA==\x07 \x1b[2J \x9b31m caf\u00e9 \u2713"
    assert logtext.inert(hostile) == "label \\x1b]52;c;ZWNobyBwd25lZA==\\x07 \\x1b[2J \\x9b31m caf\u00e9 \u2713"
