"""``pipelines.refresh`` that kills itself (SIGKILL, no cleanup) at the point named by ``REFRESH_KILL_POINT``: the
fault harness of ``tests/jobs/test_refresh.py``. Points: ``embedded`` (the new vectors written), ``gate`` (the gate's
marker written), ``lineage_link`` (the lineage's link moved, ``latest`` not yet), ``latest_link`` (both links moved,
the manifest not yet ``published``)."""

import functools
import os
import signal

from pipelines import refresh
from retrieval import artifacts, cli, export

POINT = os.environ["REFRESH_KILL_POINT"]


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _after(function, when):
    @functools.wraps(function)
    def wrapped(*args, **kwargs):
        result = function(*args, **kwargs)
        wrapped.calls += 1
        if when(wrapped.calls, *args):
            _kill()
        return result

    wrapped.calls = 0
    return wrapped


if POINT == "embedded":
    export.write_item_embeddings = _after(export.write_item_embeddings, lambda calls, *_: True)
elif POINT == "gate":
    artifacts.write_json = _after(artifacts.write_json, lambda calls, path, *_: str(path).endswith("stages/gate.json"))
else:
    moves = {"lineage_link": 1, "latest_link": 2}[POINT]
    artifacts.point_link = _after(artifacts.point_link, lambda calls, *_: calls == moves)

if __name__ == "__main__":
    cli.run(refresh.main)
