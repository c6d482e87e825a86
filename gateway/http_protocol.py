"""uvicorn's httptools protocol with the bounds it lacks, which a port open to the world needs
before any key is checked.

- Headers: the request line and headers of one request are capped (`max_header_bytes`); beyond
  it the answer is 431 and the connection closes. httptools keeps whatever arrives: four endless
  header lines of 25 MB each took 120 MB of the gateway's memory and never got an answer.
- Time: a connection must finish each request it starts within `read_timeout_s`, and one that
  sends nothing is closed after uvicorn's keep-alive timeout, as it is between requests. Without
  them, idle sockets, half-sent headers and bodies short of their Content-Length stayed open for
  good, holding file descriptors, and a stalled body held its tenant's quota and an in-flight slot.
- A malformed request is still 400 and closed, as uvicorn does, but logged once per interval
  with a count: every bad request from a fuzzer was a warning line.
"""

import logging
from asyncio import TimerHandle, Transport
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from common.logs import LogThrottle

DEFAULT_MAX_HEADER_BYTES = 16 * 1024  # h11's default, and what uvicorn's h11 protocol enforces
LINGER_S = 2.0


class _HeadersTooLarge(Exception):
    pass


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """Configured by `guarded_protocol` (uvicorn builds one per connection from its config)."""

    max_header_bytes = DEFAULT_MAX_HEADER_BYTES
    read_timeout_s = 10.0
    throttle: LogThrottle | None = None  # shared by the process's connections

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # between the start of a request and the end of its headers
        self._head_received = 0  # bytes received while in the head, whatever they parse to
        self._head_parsed = 0  # bytes of the URL and the headers the parser has handed over
        self._began_in_this_read = False
        self._reading: TimerHandle | None = None
        self._refused = False  # answered with a refusal (or about to be): the connection is closing
        self._refusal: bytes | None = None  # the refusal, while earlier answers are still due

    def connection_made(self, transport: Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # A connection that never sends a byte is as idle as one between requests.
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_reading_clock()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # answered and closing: what the client still sends is dropped
        # The idle clock stops when a request begins (on_message_begin), not on any byte: the
        # parser skips a bare CRLF without beginning one, and 2 bytes kept a socket open for good.
        self._began_in_this_read = False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, _HeadersTooLarge):
                self._headers_too_large()
            else:
                self._malformed(exc)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():  # as uvicorn does; other upgrades (h2c) are served as HTTP/1.1
                self.handle_websocket_upgrade()
        except httptools.HttpParserError as exc:
            self._malformed(exc)
        else:
            # httptools buffers a header until its line ends and only then calls on_header: an
            # endless line is counted here, as the bytes come, once its head began in an earlier
            # read (the read in which it begins may also hold the end of the request before it).
            if self._in_head and not self._began_in_this_read and not self._refused:
                self._head_received += len(data)
                if self._head_received > self.max_header_bytes:
                    self._headers_too_large()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._began_in_this_read = True
        self._unset_keepalive_if_required()
        self._in_head, self._head_received, self._head_parsed = True, 0, 0
        self._stop_reading_clock()
        self._reading = self.loop.call_later(self.read_timeout_s, self._read_timed_out)

    def on_url(self, url: bytes) -> None:
        self._count_parsed(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_parsed(len(name) + len(value) + 4)  # ": " and CRLF
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._stop_reading_clock()
        super().on_message_complete()

    def _count_parsed(self, count: int) -> None:
        """In a parser callback: raising stops the parser, and data_received answers."""
        self._head_parsed += count
        if self._head_parsed > self.max_header_bytes:
            raise _HeadersTooLarge

    def _headers_too_large(self) -> None:
        self._refuse(431, "Request Header Fields Too Large",
                     f"request line and headers over {self.max_header_bytes} bytes")

    def _stop_reading_clock(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
            self._reading = None

    def _read_timed_out(self) -> None:
        self._reading = None
        if self.transport.is_closing() or self._refused:
            return
        message = f"request not received within {self.read_timeout_s:g} s"
        if self._in_head:  # its headers never came: it has no cycle, earlier answers may still be due
            self._refuse(408, "Request Timeout", message)
        elif not self.cycle.response_started:  # its body never came: the app waiting for it is told
            self._refuse(408, "Request Timeout", message, abandon_current=True)
        else:
            self.transport.close()  # the app answered early (say 413) or is answering: no second answer

    def _malformed(self, exc: Exception) -> None:
        if self.throttle is not None:
            self.throttle.log(logging.WARNING, "malformed", "malformed HTTP request from %s: %s",
                              self.client[0] if self.client else "?", exc)
        self._refuse(400, "Bad Request", "malformed HTTP request")

    def _refuse(self, status: int, reason: str, message: str, *, abandon_current: bool = False) -> None:
        """Answer `status` and close, after the answers still due to earlier requests on this
        connection (pipelined): the refusal is the answer to the last request, never to one of theirs."""
        self._refused = True
        self._stop_reading_clock()
        body = message.encode("ascii")
        self._refusal = b"".join([
            f"HTTP/1.1 {status} {reason}\r\n".encode("ascii"),
            b"content-type: text/plain; charset=utf-8\r\n",
            b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
            b"connection: close\r\n\r\n", body])
        if abandon_current and self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True  # the app reading the body learns the client is gone
            self.cycle.message_event.set()
        elif self._answering():
            return  # sent by on_response_complete once the last of them is out
        self._send_refusal()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._refusal is not None and not self._answering():
            self._send_refusal()

    def _answering(self) -> bool:
        return bool(self.pipeline) or (self.cycle is not None and not self.cycle.response_complete)

    def _send_refusal(self) -> None:
        refusal, self._refusal = self._refusal, None
        if refusal is None or self.transport.is_closing():
            return
        self._unset_keepalive_if_required()
        self.transport.write(refusal)
        # Closing a socket with unread input sends a reset, which can destroy the answer before the
        # client reads it: the answer goes out with a FIN, what still arrives is read and dropped, and
        # the socket closes once the client does, or after LINGER_S.
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)
        else:
            self.transport.close()


def guarded_protocol(*, max_header_bytes: int, read_timeout_s: float,
                     throttle: LogThrottle | None) -> type[GuardedHttpToolsProtocol]:
    """The protocol class for `uvicorn.Config(http=...)`, with these bounds."""
    return type("GatewayHttpProtocol", (GuardedHttpToolsProtocol,),
                {"max_header_bytes": max_header_bytes, "read_timeout_s": read_timeout_s, "throttle": throttle})
