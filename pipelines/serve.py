"""Serves candidates over HTTP from a published run, following ``latest`` (hot reload).

    python -m pipelines.serve --run_dir=artifacts/two_tower --port=8000

Endpoints: ``POST /v1/candidates``, ``POST /v1/similar``, ``GET /v1/model``, ``GET /v1/status``, ``GET /healthz``,
``GET /metrics`` (Prometheus), OpenAPI at ``/docs`` and ``/openapi.json``. ``--workers=N`` serves with N processes
sharing the port and one memory-mapped index, each following ``latest`` itself (``retrieval.serving.workers``). Concurrent ``/v1/candidates`` requests are micro-batched
(``--batch_max_size``, ``--batch_max_wait_ms``; ``retrieval.serving.batcher``). Binds 127.0.0.1 unless ``--host``
says otherwise. Every run, the first included, is served only after it passed the canary
(``retrieval.serving.canary``); a first run that fails it exits with code 2 and one line saying why.
"""

import os
from typing import Sequence

from absl import flags

import retrieval  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow is imported)
from retrieval import cli
from retrieval.serving.settings import (
    CANARY_RECALL_FLOOR,
    CANARY_USERS,
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_WAIT_S,
    READ_TIMEOUT_S,
    Limits,
    ServeSettings,
)

FLAGS = flags.FLAGS
_RUN = cli.RunDirFlags("serve (a model directory is watched: the server swaps to a newly published run without "
                      "downtime)")
flags.DEFINE_string("host", "127.0.0.1", "Interface to bind (0.0.0.0 exposes the server to the network).")
flags.DEFINE_integer("port", 8000, "TCP port (0 picks a free one).")
flags.DEFINE_float("reload_interval_s", 5.0, "Seconds between checks of 'latest' for a new run (0 disables reload).")
flags.DEFINE_integer("max_k", Limits.max_k, "Largest k a request may ask for.")
flags.DEFINE_integer("max_history", Limits.max_history, "Longest history (item ids) a request may send.")
flags.DEFINE_integer("max_body_bytes", Limits.max_body_bytes, "Largest request body in bytes (413 beyond).")
flags.DEFINE_integer("faiss_threads", 1, "OpenMP threads per FAISS search (0: FAISS's default). 1 suits serving: "
                                         "requests bring one query each and run concurrently on the server's threads; "
                                         "more threads per search only add synchronisation.")
flags.DEFINE_integer("batch_max_size", DEFAULT_MAX_BATCH,
                     "Most concurrent /v1/candidates requests answered by one user-tower call and one index search "
                     "(micro-batching; 0 answers each request alone).")
flags.DEFINE_float("batch_max_wait_ms", DEFAULT_MAX_WAIT_S * 1000,
                   "Longest a request waits for others to join its batch, counted from its arrival (a request that "
                   "arrived while the previous batch ran is not held back further).")
flags.DEFINE_float("read_timeout_s", READ_TIMEOUT_S, "Seconds a client has to send a whole request (head and body); "
                                                    "slower or partial requests get 408 and are closed.")
flags.DEFINE_integer("canary_users", CANARY_USERS, "Training users whose queries the canary sends to a new run.")
flags.DEFINE_float("canary_recall_floor", CANARY_RECALL_FLOOR, "Recall against exact search a new run's index must "
                                                               "reach on the canary's users to be served.")
flags.DEFINE_integer("workers", 1, "Server processes sharing the port (about one per core, at most this machine's "
                                   "cores; see docs/serving.md). Each loads the run and reloads 'latest' itself.",
                     lower_bound=1, upper_bound=os.cpu_count() or 1)
flags.DEFINE_bool("mmap_index", True, "Memory-map the FAISS index file (workers share one copy in the page cache).")
flags.DEFINE_enum("log_level", "info", ["critical", "error", "warning", "info", "debug"], "uvicorn log level.")


def main(argv: Sequence[str]) -> None:
    cli.check_arguments(argv, _RUN.run_dir)
    limits = Limits(max_k=FLAGS.max_k, max_history=FLAGS.max_history, max_exclude=FLAGS.max_history,
                    max_body_bytes=FLAGS.max_body_bytes)
    _RUN.resolve()  # a wrong --run_dir is refused before TensorFlow loads (exit 2 in about a second)
    run_dir = _RUN.watched()
    settings = ServeSettings(run_dir, FLAGS.host, FLAGS.port, FLAGS.reload_interval_s, limits,
                             FLAGS.faiss_threads or None, FLAGS.batch_max_size, FLAGS.batch_max_wait_ms / 1000,
                             FLAGS.read_timeout_s, FLAGS.canary_users, FLAGS.canary_recall_floor, FLAGS.mmap_index,
                             FLAGS.log_level)
    from retrieval.serving.workers import serve  # imports TensorFlow

    serve(settings, FLAGS.workers)


if __name__ == "__main__":
    cli.run(main)
