"""The twin's dispatch hold (benchctl.local.hold) on Dynamo's response stream: header-only frames (handshake,
prologue) pass at once; from the first frame with a body on, every byte arrives ``delay`` later, in order; each
connection is held on its own (requests overlap); bytes from the frontend pass at once. In-process, loopback."""

from __future__ import annotations

import asyncio
import struct

import pytest

from benchctl.local import hold


def frame(header: bytes = b"", body: bytes = b"") -> bytes:
    """A TwoPartCodec frame as Dynamo encodes it in release builds (checksum 0)."""
    return struct.pack(">QQQ", len(header), len(body), 0) + header + body


def test_the_control_prefix_is_the_header_only_frames_before_the_first_answer():
    control = frame(b'{"handshake":1}') + frame(b'{"prologue":null}')
    assert hold.control_prefix(control) == (len(control), False)  # more bytes needed to tell
    assert hold.control_prefix(control + frame(body=b"token")) == (len(control), True)
    assert hold.control_prefix(control + frame(b"h", b"b")) == (len(control), True)  # header and body: an answer
    assert hold.control_prefix(control[:30]) == (0, False)  # a frame cut short: wait for the rest
    assert hold.control_prefix(frame(body=b"x")[:24]) == (0, True)  # its prefix alone says it carries a body
    with pytest.raises(hold.FrameError, match="over"):
        hold.control_prefix(struct.pack(">QQQ", hold.MAX_FRAME + 1, 0, 0))


async def _stream(delay: float, clients: int = 2) -> tuple[list[list[tuple[float, bytes]]], list[float]]:
    """A 'frontend' recording when each worker's bytes arrive; ``clients`` 'workers' that each send a handshake
    and a prologue, wait for the frontend's go, then send two answers and a sentinel."""
    loop = asyncio.get_running_loop()
    received: list[list[tuple[float, bytes]]] = []
    go_seen: list[float] = []

    async def frontend(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got: list[tuple[float, bytes]] = []
        received.append(got)
        writer.write(b"go")
        await writer.drain()
        while data := await reader.read(1 << 16):
            got.append((loop.time(), data))
        writer.close()

    target = await asyncio.start_server(frontend, "127.0.0.1", 0)
    server = await hold._serve(0, target.sockets[0].getsockname()[1], delay)
    port = server.sockets[0].getsockname()[1]
    t0 = loop.time()

    async def worker(i: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(frame(b"handshake") + frame(b"prologue"))
        await reader.readexactly(2)
        go_seen.append(loop.time() - t0)
        writer.write(frame(body=f"token-a{i}".encode()))
        await writer.drain()
        await asyncio.sleep(0.01)
        writer.write(frame(body=f"token-b{i}".encode()) + frame(b"sentinel"))
        await writer.drain()
        writer.close()

    await asyncio.gather(*(worker(i) for i in range(clients)))
    await asyncio.sleep(delay + 0.1)
    server.close()
    target.close()
    return [[(t - t0, d) for t, d in got] for got in received], go_seen


def _run(coro):
    """On uvloop, the event loop the hold runs on (Dynamo's dependency; its transports are not asyncio's)."""
    import uvloop

    return uvloop.run(coro)


def test_control_frames_pass_at_once_answers_arrive_after_the_hold_in_order_and_connections_overlap():
    received, go_seen = _run(_stream(0.06))
    assert len(received) == 2 and max(go_seen) < 0.03  # the frontend's bytes came back at once
    for got in received:
        data = b"".join(d for _, d in got)
        i = data.split(b"token-a")[1][:1].decode()
        assert data == (frame(b"handshake") + frame(b"prologue") + frame(body=f"token-a{i}".encode())
                        + frame(body=f"token-b{i}".encode()) + frame(b"sentinel"))  # every byte, in order
        control_at = next(t for t, d in got if b"prologue" in d)
        first_answer_at = next(t for t, d in got if b"token-a" in d)
        assert control_at < 0.03, got  # the prologue (the HTTP headers' cue) is not held
        assert 0.055 <= first_answer_at < 0.06 + 0.05, got  # held 60 ms, once per connection: not 2 x 60
        assert next(t for t, d in got if b"token-b" in d) >= first_answer_at  # the answers keep their order


def test_a_zero_hold_passes_everything_at_once():
    received, _ = _run(_stream(0.0, clients=1))
    assert all(t < 0.05 for t, _ in received[0]), received


@pytest.mark.parametrize("bad", ["1", "a:b", "0:5", "5:5", "70000:1", "1:2:3"])
def test_a_bad_port_pair_exits_2_naming_it(bad, capsys):
    with pytest.raises(SystemExit) as ex:
        hold.main(["--delay-ms", "1", bad])
    assert ex.value.code == 2
    assert repr(bad) in capsys.readouterr().err


def test_a_hold_out_of_range_exits_2(capsys):
    for value in ("-1", "10001"):
        with pytest.raises(SystemExit) as ex:
            hold.main(["--delay-ms", value, "20001:20002"])
        assert ex.value.code == 2
        assert "--delay-ms" in capsys.readouterr().err
