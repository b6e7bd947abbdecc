"""A daemon thread that calls a function every few seconds until stopped: the server's watcher of ``latest``
(``retrieval.serving.reload``) and the parameter-server watchdog (``retrieval.parameter_server``)."""

from __future__ import annotations

import threading
from typing import Callable, Optional


class Periodic:
    """Calls ``tick`` every ``interval_s`` seconds in a daemon thread named ``name``, from ``start`` until ``stop``
    or until ``tick`` returns True (it asks to end)."""

    def __init__(self, tick: Callable[[], Optional[bool]], interval_s: float, name: str):
        self._tick, self.interval_s, self._name = tick, interval_s, name
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        def loop() -> None:
            while not self._stop.wait(self.interval_s):
                if self._tick():
                    return

        self._stop.clear()
        self._thread = threading.Thread(target=loop, name=self._name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ends the thread (after its current tick) and waits for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
