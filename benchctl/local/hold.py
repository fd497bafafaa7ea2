"""The twin's dispatch hold: a per-request latency before the first token that does not occupy the engine.

aiconfigurator (0.12, vLLM backend) rates an aggregated worker's first token as its prefill step PLUS a CPU
dispatch overhead of 0.8 ms per layer (``VLLMBackend._prefill_dispatch_overhead_ms``; 38.4 ms for
Qwen3-30B-A3B's 48 layers), and leaves that overhead out of the decode steps: time a request waits, not time
the GPU is busy. The 1.6.1 mocker can only add time as engine time (a pass is its prefills plus one decode
iteration), which would stall every running decode behind each new request.

So the twin delays what the worker answers, not what it computes. Dynamo 1.6.1 streams each request's answer
from the worker to the frontend over a TCP connection of its own (the worker connects to the frontend's
response-stream port, ``DYN_TCP_RESPONSE_STREAM_PORT``), as frames of its ``TwoPartCodec`` (ai-dynamo/dynamo
``lib/runtime/src/pipeline/network/codec/two_part.rs``: u64 header length, u64 body length, u64 checksum,
header, body): first control frames with a header only (the call-home handshake, the prologue, after which
the frontend sends the client its HTTP response headers), then the answers as frames with a body, then a
sentinel. An aggregated twin worker reaches that port through this process (the shim's
``BENCHCTL_REDIRECT_PORTS``, set in those workers only), which passes the control frames at once and every
byte from the first frame with a body on ``delay`` seconds after it arrived, in order; bytes from the
frontend pass at once. So the response headers leave when a real worker would send them, the first token
``delay`` later than the engine made it, the tokens after it at the engine's pace, and each connection is
held on its own: requests overlap, the hold adds latency and no capacity limit.

``python -m benchctl.local.hold --delay-ms D LISTEN:TARGET [LISTEN:TARGET ...]`` on 127.0.0.1 only; it runs
until SIGTERM/SIGINT (the local engine stops it with the deployment, by its process id). A frame it cannot
read (a length past :data:`MAX_FRAME`) ends that connection, logged: the request fails rather than being
timed wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import struct
import sys
from collections.abc import Callable
from typing import cast

_PREFIX = struct.Struct(">QQQ")  # header length, body length, checksum (TwoPartCodec)
MAX_FRAME = 64 << 20  # Dynamo's own default message limit is smaller; past this the stream is not what we read


class FrameError(ValueError):
    pass


def control_prefix(buf: bytes | bytearray) -> tuple[int, bool]:
    """How many leading bytes of ``buf`` are whole header-only frames, and whether a frame with a body starts
    right after them (False: more bytes are needed to tell). Pure; FrameError on an unreadable length."""
    at = 0
    while len(buf) - at >= _PREFIX.size:
        header_len, body_len, _ = _PREFIX.unpack_from(buf, at)
        if header_len > MAX_FRAME or body_len > MAX_FRAME:
            raise FrameError(f"frame at byte {at}: header {header_len} / body {body_len} bytes, over {MAX_FRAME}")
        if body_len:
            return at, True
        end = at + _PREFIX.size + header_len
        if end > len(buf):
            break
        at = end
    return at, False


class _Worker(asyncio.Protocol):
    """The worker's end of one held connection (callbacks, no coroutine per chunk: the hold forwards every
    token of every held request, on the same 2 cores as the load generator). Header-only frames go on at once
    until the first frame with a body; from there every chunk is written ``delay`` seconds after it arrived,
    in order (its due time strictly after the previous chunk's); end of stream and close after the last one."""

    def __init__(self, target: int, delay: float, name: str) -> None:
        self.target, self.delay, self.name = target, delay, name
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.frontend: asyncio.Transport | None = None
        self.pending = bytearray()
        self.early = bytearray()  # what was due before the frontend's end was connected
        self.answering = False
        self.last_due = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        _nodelay(transport)
        self.loop.create_task(self._connect())  # what arrives before it connects is kept (_write)

    async def _connect(self) -> None:
        assert self.transport is not None
        try:
            await self.loop.create_connection(lambda: _Frontend(self), "127.0.0.1", self.target)
        except OSError as err:
            print(f"{self.name}: {err}", file=sys.stderr, flush=True)
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.answering:
            self._later(self._write, data)
            return
        self.pending += data
        try:
            n, self.answering = control_prefix(self.pending)
        except FrameError as err:
            print(f"{self.name}: {err}; closing the connection", file=sys.stderr, flush=True)
            self.connection_lost(None)
            return
        if n:
            self._write(bytes(self.pending[:n]))
            del self.pending[:n]
        if self.answering and self.pending:
            self._later(self._write, bytes(self.pending))
            self.pending.clear()

    def _later(self, fn: Callable[..., object], *args: object) -> None:
        due = max(self.loop.time() + self.delay, self.last_due + 1e-6)
        self.last_due = due
        self.loop.call_at(due, fn, *args)

    def _write(self, data: bytes) -> None:
        if self.frontend is None:  # its end not connected yet: kept, written first when it is
            self.early += data
        elif not self.frontend.is_closing():
            self.frontend.write(data)

    def _eof(self) -> None:
        if self.pending:
            self._write(bytes(self.pending))
            self.pending.clear()
        if self.frontend is not None and not self.frontend.is_closing() and self.frontend.can_write_eof():
            self.frontend.write_eof()

    def _close(self) -> None:
        if self.frontend is not None:
            self.frontend.close()

    def eof_received(self) -> bool:
        self._later(self._eof)
        return True  # the frontend may still write to the worker

    def connection_lost(self, exc: Exception | None) -> None:
        self._later(self._close)
        if self.transport is not None:
            self.transport.close()


class _Frontend(asyncio.Protocol):
    """The frontend's end: what it sends goes to the worker at once."""

    def __init__(self, worker: _Worker) -> None:
        self.worker = worker

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        _nodelay(transport)
        self.worker.frontend = cast(asyncio.Transport, transport)
        if self.worker.early:
            self.worker.frontend.write(bytes(self.worker.early))
            self.worker.early.clear()

    def data_received(self, data: bytes) -> None:
        w = self.worker.transport
        if w is not None and not w.is_closing():
            w.write(data)

    def eof_received(self) -> bool:
        w = self.worker.transport
        if w is not None and not w.is_closing() and w.can_write_eof():
            w.write_eof()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        if self.worker.transport is not None:
            self.worker.transport.close()


def _nodelay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # Dynamo sets it on these sockets too


async def _serve(listen: int, target: int, delay: float) -> asyncio.Server:
    loop = asyncio.get_running_loop()
    name = f"127.0.0.1:{listen} -> {target}"
    return await loop.create_server(lambda: _Worker(target, delay, name), "127.0.0.1", listen)


def parse_pair(text: str) -> tuple[int, int]:
    """``LISTEN:TARGET`` as two TCP ports; ValueError naming the text otherwise."""
    try:
        a, b = (int(x) for x in text.split(":"))
    except ValueError:
        raise ValueError(f"{text!r}: expected LISTEN:TARGET, two TCP ports") from None
    if not (0 < a < 65536 and 0 < b < 65536) or a == b:
        raise ValueError(f"{text!r}: ports must be 1..65535 and differ")
    return a, b


async def main_async(pairs: list[tuple[int, int]], delay: float) -> None:
    servers = [await _serve(a, b, delay) for a, b in pairs]
    print(f"holding answers {delay * 1000:.2f} ms: " + ", ".join(f"127.0.0.1:{a} -> {b}" for a, b in pairs),
          flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for s in servers:
        s.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchctl.local.hold", description=__doc__.split("\n\n")[0])
    ap.add_argument("--delay-ms", type=float, required=True, help="the hold of each answer, in ms (0..10000)")
    ap.add_argument("pairs", nargs="+", help="LISTEN:TARGET port pairs on 127.0.0.1")
    args = ap.parse_args(argv)
    try:
        pairs = [parse_pair(p) for p in args.pairs]
    except ValueError as err:
        ap.error(str(err))
    if not 0 <= args.delay_ms <= 10_000:
        ap.error(f"--delay-ms {args.delay_ms}: expected 0..10000")
    try:
        import uvloop  # Dynamo's own event loop (a dependency of ai-dynamo): less CPU per forwarded token
    except ImportError:
        asyncio.run(main_async(pairs, args.delay_ms / 1000.0))
    else:
        uvloop.run(main_async(pairs, args.delay_ms / 1000.0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
