"""uvicorn for the HTTP API: its configuration (with a request read deadline), and a server in a background thread.

``uvicorn_config`` is what ``pipelines.serve`` runs. ``BackgroundServer`` embeds the same server in tests, benchmarks
or a notebook: ``with BackgroundServer(app) as server: httpx.get(server.url + "/healthz")``. Port 0 binds a free
port, which is read back from the listening socket.

Read deadline: uvicorn closes idle keep-alive connections (``timeout_keep_alive``) but sets no limit on reading a
request, so a client that sends part of a request head or body (slowly, or never the rest) holds a connection and a
request task forever. ``read_deadline_protocol`` is uvicorn's h11 protocol with one more timer: each request (head
and body) must arrive within ``read_timeout_s`` of the connection opening or of the previous response, else the
server closes the connection, with a 408 if part of a request had come (silently if it was idle, as the keep-alive
timeout does, so that a client never reads a 408 as the answer to its next request). Trickling bytes does not extend
the deadline.
"""

from __future__ import annotations

import copy
import json
import threading
import time

import h11
import uvicorn
import uvicorn.config
from uvicorn.protocols.http.h11_impl import H11Protocol

from retrieval.serving.settings import READ_TIMEOUT_S

STARTUP_TIMEOUT_S = 30.0
_RECEIVING = (h11.IDLE, h11.SEND_BODY)  # the client's states while its request is incomplete


def _timeout_response(read_timeout_s: float) -> bytes:
    body = json.dumps({"error": f"request not received within {read_timeout_s:g} s"}).encode()
    return (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body))


def read_deadline_protocol(read_timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol closing connections whose request is not received within ``read_timeout_s`` (408)."""
    timeout_response = _timeout_response(read_timeout_s)

    class ReadDeadlineProtocol(H11Protocol):
        _deadline = None  # asyncio.TimerHandle while a request is being read

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state not in _RECEIVING:
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()  # may start reading a pipelined request
            self._disarm()
            if not self.transport.is_closing() and self.conn.their_state in _RECEIVING:
                self._arm()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._deadline = self.loop.call_later(read_timeout_s, self._expire)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expire(self) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            if self.conn.their_state == h11.IDLE:
                answer = bool(self.conn.trailing_data[0])  # part of a request head, or nothing (an idle connection)
            else:
                answer = self.cycle is None or not self.cycle.response_started  # part of a body, not yet answered
            if answer:
                self.transport.write(timeout_response)
            self.transport.close()  # the app, if waiting for the body, gets http.disconnect

    return ReadDeadlineProtocol


def _logging_config() -> dict:
    """uvicorn's logging, its access lines on stderr beside every other log line (uvicorn writes them to stdout)."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    config["handlers"]["access"]["stream"] = "ext://sys.stderr"
    return config


def uvicorn_config(app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning",
                   read_timeout_s: float = READ_TIMEOUT_S) -> uvicorn.Config:
    """The server's uvicorn configuration: h11 with the read deadline, uvicorn's keep-alive timeout, every log line
    on stderr."""
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="off",
                          http=read_deadline_protocol(read_timeout_s), log_config=_logging_config())


class BackgroundServer:
    """Runs ``app`` with uvicorn in a daemon thread, from ``__enter__`` (returns self, ``url`` set) to ``__exit__``."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning",
                 read_timeout_s: float = READ_TIMEOUT_S):
        self.server = uvicorn.Server(uvicorn_config(app, host, port, log_level, read_timeout_s))
        self.host = host
        self.url = ""
        self._thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)

    def __enter__(self) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the HTTP server did not start")
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://{self.host}:{port}"
        return self

    def __exit__(self, *exc_info) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=STARTUP_TIMEOUT_S)
