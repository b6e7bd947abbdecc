"""uvicorn in a background thread: embed the HTTP server in tests, benchmarks or a notebook.

``with BackgroundServer(app) as server: httpx.get(server.url + "/healthz")``. Port 0 binds a free port, which is read
back from the listening socket.
"""

from __future__ import annotations

import threading
import time

import uvicorn

STARTUP_TIMEOUT_S = 30.0


class BackgroundServer:
    """Runs ``app`` with uvicorn in a daemon thread, from ``__enter__`` (returns self, ``url`` set) to ``__exit__``."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="off"))
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
