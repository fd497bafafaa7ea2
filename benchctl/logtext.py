"""Failure messages a person can read: log tails without terminal escapes, trimmed to the lines that explain.

A worker's log is written for a terminal: colour and cursor sequences (ANSI/ECMA-48 CSI ``ESC [ ... final``,
OSC ``ESC ] ... BEL|ESC \\``, other ``ESC [intermediates] final`` sequences such as ``ESC ( B``) and carriage-return progress redraws. :func:`strip_escapes`
removes them (ECMA-48, 5th edition, sections 5.3-5.6: a CSI sequence is ESC [, parameter bytes 0x30-0x3F,
intermediate bytes 0x20-0x2F, one final byte 0x40-0x7E; an OSC string runs to BEL or ST = ESC \\).
:func:`readable` applies it to a whole message and :func:`tail` keeps the last lines that say something,
starting, when there is one, at the last error or traceback line. The same function makes the text of
``failure.json``, the campaign row's cause, the CLI's error line, the report and the SNS message.
May import only the standard library.
"""

from __future__ import annotations

import re
import signal

# OSC (to BEL or ST), CSI (params, intermediates, final; C1 CSI 0x9B too), then any other escape sequence
# (ECMA-35: ESC, intermediate bytes 0x20-0x2F, one final byte 0x30-0x7E, e.g. ESC ( B)
_ESCAPES = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|\x1b[ -/]*[0-~]"
)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]")  # keeps \t and \n
# every C0 control but tab and newline, DEL, and every C1 control (ECMA-48 section 5.2: 0x80-0x9F; U+009B is a
# one-character CSI, U+009D an OSC)
_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_ERRORISH = re.compile(r"Traceback|\b(?:ERROR|Error|error|FATAL|fatal|panic|Killed|exception|Exception)\b")
MAX_LINES = 12
MAX_LINE_CHARS = 400


def strip_escapes(text: str) -> str:
    """``text`` without terminal escape sequences and other control characters; a carriage-return redraw
    keeps what the terminal showed last on that line."""
    out = _ESCAPES.sub("", text)
    out = "\n".join(line.rsplit("\r", 1)[-1] if "\r" in line.rstrip("\r") else line.rstrip("\r")
                    for line in out.split("\n"))
    return _CONTROL.sub("", out)


def inert(text: str) -> str:
    """``text`` safe to print to a terminal as it is: every C0 control but tab and newline, DEL and every C1
    control written as its visible escape (``\\x1b``), so a lake string or a remote body cannot clear the
    screen, draw a fake link or write the clipboard (OSC 52); everything else is left as it was."""
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def tail(text: str, n: int = MAX_LINES) -> str:
    """The last ``n`` non-blank lines of a log, escapes stripped; when an error or traceback line is among the
    last ``4 n``, from the start of the last such block (the last traceback's first line), still at most ``n``
    lines."""
    lines = [ln.rstrip()[:MAX_LINE_CHARS] for ln in strip_escapes(text).splitlines() if ln.strip()]
    window = lines[-4 * n:]
    starts = [i for i, ln in enumerate(window) if _ERRORISH.search(ln)]
    if starts:
        tb = [i for i in starts if "Traceback" in window[i]]
        first = tb[-1] if tb else starts[-1]
        while not tb and first - 1 in starts:  # the whole last block of error lines
            first -= 1
        window = window[first:]
    return "\n".join(window[:n] if len(window) > n and starts else window[-n:])


def exit_text(code: int | None) -> str:
    """A process's end as a person says it: ``exit code 3``, ``killed by signal SIGKILL (9)``, ``exited``."""
    if code is None:
        return "exited (exit code unknown)"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "signal"
        return f"killed by signal {name} ({-code})"
    if code > 128 and code - 128 in {s.value for s in signal.Signals}:
        return f"exit code {code} (signal {signal.Signals(code - 128).name})"
    return f"exit code {code}"


def readable(message: str) -> str:
    """A failure message for people: escapes and control characters gone, trailing blanks trimmed."""
    return "\n".join(ln.rstrip() for ln in strip_escapes(message).splitlines()).strip()
