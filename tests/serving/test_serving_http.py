"""HTTP API end to end over loopback (uvicorn in a thread, httpx): endpoints, the bad-request table (4xx, never
500), the body types `curl -d` sends, the read deadline on partial requests (raw sockets), hot reload of `latest`
under concurrent requests with zero errors, broken runs refused by the canary with the reason in `/v1/status`, no
absolute path in any response, the `pipelines.serve` command (also refusing a broken first run), Prometheus `/metrics`,
and `--workers`: two processes on one port, each reloading `latest` itself, a crashed one restarted."""

import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import threading
import time

import faiss
import httpx
import numpy as np
import pytest
import tensorflow as tf

from retrieval.artifacts import point_link
from retrieval.export import read_item_embeddings
from retrieval.index import ItemIndex
from retrieval.index.run_index import build_run_index
from retrieval.serving import CandidateGenerator
from retrieval.serving.app import Limits, create_app
from retrieval.serving.demo_run import write_demo_run, write_user_tower
from retrieval.serving.reload import GeneratorHolder
from retrieval.serving.server import BackgroundServer

LIMITS = Limits(max_k=50, max_history=20, max_exclude=20, max_id_length=32, max_body_bytes=2048)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """Runs r1, r2, r3 (versions 1-3; r2 has other item vectors), `latest` -> r1."""
    root = tmp_path_factory.mktemp("http") / "item2vec"
    build_run_index(write_demo_run(root / "r1", version="1"))
    build_run_index(write_demo_run(root / "r2", version="2", seed=1))
    shutil.copytree(root / "r1", root / "r3")
    manifest = json.loads((root / "r3" / "manifest.json").read_text())
    (root / "r3" / "manifest.json").write_text(json.dumps({**manifest, "version": "3", "run_id": "r3"}))
    point_link(root / "latest", "r1")
    return root


@pytest.fixture(scope="module")
def fixed_app(model_dir):
    return create_app(GeneratorHolder(model_dir / "r1"), LIMITS)  # a fixed run: reload tests switch their own copy


@pytest.fixture(scope="module")
def client(fixed_app):
    with BackgroundServer(fixed_app) as server, httpx.Client(base_url=server.url) as http:
        yield http


def assert_no_absolute_path(payload, directory) -> None:
    """No string in ``payload`` (JSON) is an absolute path or names ``directory``'s parent (the test's temp dir)."""
    text = json.dumps(payload)
    assert str(directory.parent) not in text and os.path.realpath(directory.parent) not in text, text
    assert not [value for value in strings(payload) if os.path.isabs(value)], text


def strings(payload) -> list[str]:
    if isinstance(payload, dict):
        return [s for value in payload.values() for s in strings(value)]
    if isinstance(payload, list):
        return [s for value in payload for s in strings(value)]
    return [payload] if isinstance(payload, str) else []


def test_candidates_over_http_equal_the_library(client, model_dir):
    generator = CandidateGenerator.from_run(model_dir / "r1")
    response = client.post("/v1/candidates", json={"user_id": "u2", "history": ["i3", "bogus"], "k": 7,
                                                   "exclude": ["i5"]})
    assert response.status_code == 200
    body = response.json()
    expected = generator.recommend("u2", ["i3", "bogus"], 7, ["i5"])
    assert [item["item_id"] for item in body["items"]] == expected.item_ids.tolist()
    np.testing.assert_allclose([item["score"] for item in body["items"]], expected.scores, rtol=1e-6)
    assert body["unknown_history"] == ["bogus"] and body["unknown_history_count"] == 1
    assert body["history_source"] == "request" and not body["fallback"] and body["model_version"] == "1"
    cold = client.post("/v1/candidates", json={"user_id": "nobody", "k": 4}).json()
    assert cold["fallback"] and len(cold["items"]) == 4
    counts = [item["count"] for item in cold["items"]]  # popularity counts, never in the field of similarities
    assert all(item["score"] is None for item in cold["items"]) and counts == sorted(counts, reverse=True) > [0]
    assert all(item["count"] is None for item in body["items"])
    library = generator.recommend("nobody", k=4)  # one answer for an unknown user on every path (issue 50)
    assert [item["item_id"] for item in cold["items"]] == library.item_ids.tolist()
    assert counts == library.counts.tolist() and library.fallback and np.isnan(library.scores).all()


def test_similar_model_health_and_openapi(client, model_dir):
    similar = client.post("/v1/similar", json={"item_id": "i9", "k": 3}).json()
    assert similar["item_id"] == "i9" and len(similar["items"]) == 3
    assert "i9" not in [item["item_id"] for item in similar["items"]]
    assert client.post("/v1/similar", json={"item_id": "nope"}).status_code == 404
    assert client.get("/healthz").json() == {"status": "ok", "model_version": "1"}
    model = client.get("/v1/model").json()
    assert model["version"] == "1" and model["run_id"] == "r1" and model["items"] > 0 and model["users"] == 80
    assert model["run"] == "r1"
    status = client.get("/v1/status").json()
    assert status["status"] == "ok" and status["serving"]["run"] == "r1" and status["last_reload"] is None
    assert status["serving"]["canary"]["recall"] >= status["serving"]["canary"]["floor"]
    assert_no_absolute_path([model, status], model_dir)
    schema = client.get("/openapi.json").json()
    assert {"/v1/candidates", "/v1/similar", "/v1/model", "/v1/status", "/healthz"} <= set(schema["paths"])


@pytest.mark.parametrize("path, body, status", [
    ("/v1/candidates", b'{"user_id": "u1", "k": ', 400),  # malformed JSON
    ("/v1/candidates", b'[1, 2]', 422),  # not an object
    ("/v1/candidates", b'{"k": "5"}', 422),  # string for int
    ("/v1/candidates", b'{"k": true}', 422),  # bool for int
    ("/v1/candidates", b'{"k": 2.5}', 422),
    ("/v1/candidates", b'{"k": 0}', 422),
    ("/v1/candidates", b'{"k": -3}', 422),
    ("/v1/candidates", b'{"k": 51}', 422),  # above max_k
    ("/v1/candidates", b'{"user_id": 17.0}', 422),  # ids are strings (or integers)
    ("/v1/candidates", b'{"user_id": true}', 422),
    ("/v1/candidates", b'{"history": "i1"}', 422),  # a string, not a list
    ("/v1/candidates", b'{"history": ["i1", 2.5]}', 422),
    ("/v1/candidates", json.dumps({"history": ["i1"] * 21}).encode(), 422),  # history too long
    ("/v1/candidates", json.dumps({"exclude": ["i1"] * 21}).encode(), 422),
    ("/v1/candidates", json.dumps({"user_id": "u" * 33}).encode(), 422),  # id too long
    ("/v1/candidates", b'{"user": "u1"}', 422),  # unknown field
    ("/v1/candidates", b'{"k": 1, "pad": "' + b"x" * 3000 + b'"}', 413),  # body too large
    ("/v1/similar", b'{"k": 3}', 422),  # item_id missing
    ("/v1/similar", b'{"item_id": "i1", "k": 1000}', 422),
])
def test_bad_requests_get_4xx_with_a_message(client, path, body, status):
    response = client.post(path, content=body, headers={"content-type": "application/json"})
    assert response.status_code == status
    assert response.json()["error"]


def test_a_non_string_id_is_told_what_an_id_may_be(client):
    response = client.post("/v1/candidates", json={"user_id": 17.0})
    assert response.status_code == 422
    assert [e["msg"] for e in response.json()["detail"]] == [
        "Input should be a valid string (an id: a string, or an integer)"]


def test_integer_ids_are_read_as_their_decimal_strings_as_the_log_readers_read_them():
    from retrieval.serving.app import _request_models
    from retrieval.serving.settings import Limits

    candidates, similar = _request_models(Limits())
    request = candidates.model_validate_json(b'{"user_id": 196, "history": [242, "i2"], "exclude": [7]}')
    assert (request.user_id, request.history, request.exclude) == ("196", ["242", "i2"], ["7"])
    assert similar.model_validate_json(b'{"item_id": 288}').item_id == "288"


def test_oversized_chunked_body_is_refused_before_parsing(client):
    chunks = (b" " * 1000 for _ in range(5))  # no content-length: streamed
    response = client.post("/v1/candidates", content=chunks, headers={"content-type": "application/json"})
    assert response.status_code == 413


def test_concurrent_requests_are_micro_batched_and_each_gets_its_own_answer(model_dir):
    generator = CandidateGenerator.from_run(model_dir / "r1")
    users = [f"u{i}" for i in range(40)]
    bodies = [{"user_id": u, "k": 5 + i % 3} if i % 4 else {"history": [f"i{i}", f"i{i + 1}"], "k": 6}
              for i, u in enumerate(users)]
    expected = [generator.recommend(b.get("user_id"), b.get("history"), b["k"]).item_ids.tolist() for b in bodies]
    app = create_app(GeneratorHolder(model_dir / "r1"), LIMITS, max_batch=16, max_wait_s=0.02)
    answers: dict[int, list] = {}

    def client(rows: range) -> None:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            for row in rows:
                response = http.post("/v1/candidates", json=bodies[row])
                answers[row] = [item["item_id"] for item in response.json()["items"]]

    with BackgroundServer(app) as server:
        threads = [threading.Thread(target=client, args=(range(i, len(bodies), 8),)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    app.state.batcher.close()
    assert [answers[row] for row in range(len(bodies))] == expected
    assert app.state.batcher.batches < len(bodies)  # requests shared user-tower calls and index searches


def test_hot_reload_under_concurrent_requests_has_zero_errors(model_dir, tmp_path):
    root = tmp_path / "model"
    for name in ("r1", "r2", "r3"):
        shutil.copytree(model_dir / name, root / name)
    point_link(root / "latest", "r1")
    holder = GeneratorHolder(root)
    holder.start(interval_s=0.05)
    errors, versions, stop = [], [[] for _ in range(4)], threading.Event()

    def hammer(seen: list) -> None:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            while not stop.is_set():
                response = http.post("/v1/candidates", json={"user_id": "u1", "k": 5})
                if response.status_code != 200 or len(response.json()["items"]) != 5:
                    errors.append(response.text)
                else:
                    seen.append(response.json()["model_version"])

    def wait_for(version: str) -> None:
        deadline = time.monotonic() + 30
        while holder.current.version != version and time.monotonic() < deadline:
            time.sleep(0.02)

    with BackgroundServer(create_app(holder, LIMITS)) as server:
        clients = [threading.Thread(target=hammer, args=(seen,)) for seen in versions]
        for thread in clients:
            thread.start()
        time.sleep(0.3)
        for name, version in (("r2", "2"), ("r3", "3")):
            point_link(root / "latest", name)
            wait_for(version)
            time.sleep(0.3)  # requests on the new run
        stop.set()
        for thread in clients:
            thread.join()
        status = httpx.get(server.url + "/v1/status").json()
    holder.stop()
    assert not errors
    assert holder.reloads == 2 and holder.current.version == "3"
    assert status["status"] == "ok" and status["reloads"] == 2 and status["serving"]["run"] == "r3"
    assert status["last_reload"]["run"] == "r3" and status["last_reload"]["outcome"] == "swapped"
    for seen in versions:  # each client saw the versions change, in publication order, never backwards
        assert seen and seen == sorted(seen) and seen[0] == "1" and seen[-1] == "3"


def test_serve_command_starts_and_answers(model_dir, tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "pipelines.serve", f"--run_dir={model_dir}", f"--port={port}",
               "--log_level=warning"]
    log = (tmp_path / "serve.log").open("w+")
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline, health = time.monotonic() + 60, None
        while health is None and time.monotonic() < deadline and process.poll() is None:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz").json()
            except httpx.TransportError:
                time.sleep(0.2)
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.seek(0)
    assert health == {"status": "ok", "model_version": "1"}, log.read()[-2000:]


def test_curl_style_form_bodies_are_read_as_json_and_other_types_get_415(client):
    body = b'{"user_id": "u2", "k": 3}'  # what `curl -d '...'` sends, with its default form content type
    form = client.post("/v1/candidates", content=body, headers={"content-type": "application/x-www-form-urlencoded"})
    assert form.status_code == 200 and len(form.json()["items"]) == 3
    assert client.post("/v1/similar", content=b'{"item_id": "i9", "k": 2}').status_code == 200  # no content type
    real_form = client.post("/v1/candidates", content=b"user_id=u2&k=3",
                            headers={"content-type": "application/x-www-form-urlencoded; charset=utf-8"})
    assert real_form.status_code == 400 and real_form.json()["error"].startswith("malformed JSON")
    text = client.post("/v1/candidates", content=body, headers={"content-type": "text/plain"})
    assert text.status_code == 415
    assert text.json()["error"] == ("unsupported content type 'text/plain': send a JSON body with "
                                    "-H 'Content-Type: application/json'")


READ_TIMEOUT_S = 0.5
HEAD = b"POST /v1/candidates HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nConnection: close\r\n"
BODY = b'{"user_id": "u1", "k": 3}'
COMPLETE = HEAD + b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY)


@pytest.fixture(scope="module")
def impatient(fixed_app):
    """A server whose clients have READ_TIMEOUT_S to send each request."""
    with BackgroundServer(fixed_app, read_timeout_s=READ_TIMEOUT_S) as server:
        yield server.url


def exchange(url: str, chunks: list[bytes], pause_s: float) -> tuple[bytes, float]:
    """Sends ``chunks`` over a raw socket, ``pause_s`` apart (stopping once the server answers), then reads until the
    server closes the connection; returns (everything read, seconds from connecting to the close)."""
    host, port = url.removeprefix("http://").split(":")
    start = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        for chunk in chunks:
            sock.sendall(chunk)
            if select.select([sock], [], [], pause_s)[0]:
                break
        reply = b""
        while data := sock.recv(4096):
            reply += data
    return reply, time.monotonic() - start


@pytest.mark.parametrize("chunks, pause_s, status", [
    ([HEAD], 0, b"408"),  # a request head that never ends
    ([HEAD + b"Content-Length: 100\r\n\r\n", BODY], 0, b"408"),  # a body shorter than announced
    ([bytes([b]) for b in COMPLETE], 0.05, b"408"),  # trickled a byte at a time: the deadline is not extended
    ([], 0, None),  # an idle connection is closed without a reply
    ([COMPLETE], 0, b"200"),  # a whole request is answered
], ids=["partial-head", "partial-body", "trickle", "idle", "complete"])
def test_requests_not_received_within_the_read_timeout_get_408_and_are_closed(impatient, chunks, pause_s, status):
    reply, seconds = exchange(impatient, chunks, pause_s)
    if status is None:
        assert reply == b""
    else:
        assert reply.startswith(b"HTTP/1.1 " + status), reply
    if status != b"200":
        assert READ_TIMEOUT_S - 0.05 < seconds < READ_TIMEOUT_S + 2, seconds
    if status == b"408":
        assert json.loads(reply.split(b"\r\n\r\n", 1)[1]) == {"error": "request not received within 0.5 s"}


def test_an_idle_keep_alive_connection_is_closed_at_the_deadline_without_a_stray_408(impatient):
    reply, seconds = exchange(impatient, [COMPLETE.replace(b"Connection: close\r\n", b"")], 0)
    assert reply.startswith(b"HTTP/1.1 200") and reply.count(b"HTTP/1.1 ") == 1, reply  # the answer, then silence
    assert READ_TIMEOUT_S - 0.05 < seconds < READ_TIMEOUT_S + 2, seconds


class RaisingTower(tf.Module):
    """A user tower in the export contract that loads but fails on every call (as a broken graph would)."""

    def __init__(self, dimension: int):
        super().__init__()
        self.max_history, self.dimension, self.metric = (tf.Variable(20), tf.Variable(dimension), tf.Variable("ip"))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="user_id"),
                                  tf.TensorSpec([None, None], tf.string, name="history")])
    def serve(self, user_id: tf.Tensor, history: tf.Tensor) -> dict:
        tf.debugging.assert_equal(tf.size(history), -1, message="user tower exploded")
        return {"embedding": tf.zeros(tf.stack([tf.size(user_id), self.dimension]))}


def raising_tower(run) -> None:
    shutil.rmtree(run / "user_tower")
    module = RaisingTower(16)
    tf.saved_model.save(module, str(run / "user_tower"), signatures={"serving_default": module.serve})


def narrow_tower(run) -> None:
    item_ids, vectors = read_item_embeddings(run / "item_embeddings.parquet")
    shutil.rmtree(run / "user_tower")
    write_user_tower(run / "user_tower", item_ids, vectors[:, :8], 20, "ip")


def index_holding(make_vectors):
    """A breaker replacing the run's index vectors with ``make_vectors(n, d)`` (ids and manifest kept: it loads)."""
    def breaker(run) -> None:
        good = ItemIndex.load(run / "index")
        flat = faiss.IndexIDMap2(faiss.IndexFlatIP(good.dimension))
        flat.add_with_ids(make_vectors(len(good), good.dimension), good.id_map.indices)
        ItemIndex(flat, good.id_map, good.manifest).save(run / "index")
    return breaker


BROKEN = {  # name: (how r1 is broken, the reason /v1/status must give)
    "raising_tower": (raising_tower, r"^the user tower fails: InvalidArgumentError: assertion failed: "
                                     r"\[user tower exploded\]"),
    "wrong_dimension": (narrow_tower, r"^the user tower returns shape \[64, 8\] for 64 users; the index expects "
                                      r"\[64, 16\]$"),
    "random_index": (index_holding(lambda n, d: np.random.default_rng(0).standard_normal([n, d]).astype(np.float32)),
                     r"^the index reaches recall@\d+ = 0\.\d+ against exact search .* below the canary floor 0\.9"),
    "nan_index": (index_holding(lambda n, d: np.full([n, d], np.nan, np.float32)),
                  r"^the index (returns non-finite scores|reaches recall@\d+ = 0\.)"),
    "no_user_tower": (lambda run: shutil.rmtree(run / "user_tower"),
                      r"^cannot load the run: file no_user_tower/user_tower: cannot load the user tower"),
}


@pytest.fixture(scope="module")
def served(model_dir, tmp_path_factory):
    """(model directory, holder, client) of a server following `latest` -> r1, with broken copies of r1 to publish."""
    root = tmp_path_factory.mktemp("served") / "model"
    shutil.copytree(model_dir / "r1", root / "r1")
    for name, (breaker, _) in BROKEN.items():
        shutil.copytree(model_dir / "r1", root / name)
        breaker(root / name)
    point_link(root / "latest", "r1")
    holder = GeneratorHolder(root)
    with BackgroundServer(create_app(holder, LIMITS)) as server, httpx.Client(base_url=server.url) as http:
        yield root, holder, http


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_published_broken_run_is_refused_with_the_reason_over_http_and_the_old_run_keeps_answering(served, name):
    root, holder, http = served
    point_link(root / "latest", name)
    try:
        assert not holder.poll() and not holder.poll()  # refused, and not tried again while `latest` stays
        status, health = http.get("/v1/status").json(), http.get("/healthz").json()
        answer = http.post("/v1/candidates", json={"user_id": "u1", "k": 5})
    finally:
        point_link(root / "latest", "r1")
    attempt = status["last_reload"]
    assert attempt["run"] == name and attempt["outcome"] == "refused"
    assert re.search(BROKEN[name][1], attempt["error"]), attempt["error"]
    assert status["status"] == "degraded" and status["serving"]["run"] == "r1" and status["reloads"] == 0
    assert health == {"status": "degraded", "model_version": "1", "error": attempt["error"]}
    assert answer.status_code == 200 and answer.json()["model_version"] == "1" and len(answer.json()["items"]) == 5
    assert_no_absolute_path([status, health], root)
    assert not holder.poll() and http.get("/healthz").json() == {"status": "ok", "model_version": "1"}  # rolled back


def test_serve_command_refuses_a_broken_first_run_with_one_line(served):
    root = served[0]
    command = [sys.executable, "-m", "pipelines.serve", f"--run_dir={root / 'raising_tower'}", "--port=0"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert re.fullmatch(r"error: run \S+/raising_tower refused: the user tower fails: .*user tower exploded.*",
                        result.stderr.strip().splitlines()[-1]), result.stderr[-2000:]


def samples(text: str) -> dict:
    """``{(sample name, sorted labels): value}`` of a Prometheus text exposition (``pid`` labels dropped)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "pid"))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_count_requests_latency_reloads_and_the_served_version(model_dir, tmp_path):
    root = tmp_path / "model"
    for name in ("r1", "r2"):
        shutil.copytree(model_dir / name, root / name)
    shutil.copytree(model_dir / "r1", root / "broken")
    raising_tower(root / "broken")
    point_link(root / "latest", "r1")
    holder = GeneratorHolder(root)
    with BackgroundServer(create_app(holder, LIMITS)) as server, httpx.Client(base_url=server.url) as http:
        for _ in range(3):
            assert http.post("/v1/candidates", json={"user_id": "u1", "k": 5}).status_code == 200
        assert http.post("/v1/candidates", json={"k": 0}).status_code == 422
        assert http.post("/v1/similar", json={"item_id": "nope"}).status_code == 404
        assert http.get("/wp-admin/x").status_code == 404
        for i in range(30):  # made-up methods: one series between them, not one each
            http.request(f"FOO{i}", "/nowhere")
        before = http.get("/metrics")
        point_link(root / "latest", "r2")
        assert holder.poll()  # what the watcher thread calls
        point_link(root / "latest", "broken")
        assert not holder.poll()
        after = samples(http.get("/metrics").text)
    assert before.headers["content-type"].startswith("text/plain")
    got = samples(before.text)
    count = "retrieval_http_requests_total"
    assert got[(count, (("method", "POST"), ("route", "/v1/candidates"), ("status", "200")))] == 3
    assert got[(count, (("method", "POST"), ("route", "/v1/candidates"), ("status", "422")))] == 1
    assert got[(count, (("method", "POST"), ("route", "/v1/similar"), ("status", "404")))] == 1
    assert got[(count, (("method", "GET"), ("route", "other"), ("status", "404")))] == 1  # unknown paths: one route
    methods = {dict(labels)["method"] for name, labels in got if name == count}
    assert methods == {"GET", "POST", "other"}
    latency = "retrieval_http_request_duration_seconds"
    assert got[(latency + "_count", (("route", "/v1/candidates"),))] == 4
    assert got[(latency + "_bucket", (("le", "+Inf"), ("route", "/v1/candidates")))] == 4
    assert got[("retrieval_reloads_total", (("outcome", "swapped"),))] == 0
    assert got[("retrieval_model_info", (("run", "r1"), ("run_id", "r1"), ("version", "1")))] == 1
    assert after[("retrieval_reloads_total", (("outcome", "swapped"),))] == 1
    assert after[("retrieval_reloads_total", (("outcome", "refused"),))] == 1
    assert after[("retrieval_model_info", (("run", "r2"), ("run_id", "r2"), ("version", "2")))] == 1
    assert ("retrieval_model_info", (("run", "r1"), ("run_id", "r1"), ("version", "1"))) not in after  # one series


def start_serve(run_dir, log, *flags: str, stdout=subprocess.DEVNULL) -> tuple[subprocess.Popen, str]:
    """``pipelines.serve`` on a free port with ``flags`` (``--log_level=warning`` unless given); returns the process
    and its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "pipelines.serve", f"--run_dir={run_dir}", f"--port={port}",
                                "--log_level=warning", *flags], stdout=stdout, stderr=log)
    return process, f"http://127.0.0.1:{port}"


def healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz").status_code == 200
    except httpx.TransportError:
        return False


def test_with_port_0_the_start_up_line_names_the_port_the_server_listens_on(model_dir, tmp_path):
    log = (tmp_path / "serve.log").open("w+")
    process = subprocess.Popen([sys.executable, "-m", "pipelines.serve", f"--run_dir={model_dir}", "--port=0"],
                               stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline, found = time.monotonic() + 120, None
        while found is None:
            assert time.monotonic() < deadline and process.poll() is None, (tmp_path / "serve.log").read_text()
            found = re.search(r"serving .* on (http://127\.0\.0\.1:(\d+))", (tmp_path / "serve.log").read_text())
            time.sleep(0.2)
        assert int(found.group(2)) > 0
        while not healthy(found.group(1)):
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.2)
    finally:
        process.terminate()
        process.wait(timeout=60)


def test_every_log_line_of_the_server_goes_to_stderr_its_access_lines_too(model_dir, tmp_path):
    log, out = (tmp_path / "serve.log").open("w+"), (tmp_path / "serve.out").open("w+")
    process, url = start_serve(model_dir, log, "--log_level=info", stdout=out)
    try:
        deadline = time.monotonic() + 120
        while not healthy(url):
            assert time.monotonic() < deadline and process.poll() is None, (tmp_path / "serve.log").read_text()
            time.sleep(0.2)
        assert httpx.post(url + "/v1/candidates", json={"user_id": "u1", "k": 5}).status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=60)
    assert '"POST /v1/candidates HTTP/1.1" 200' in (tmp_path / "serve.log").read_text()
    assert (tmp_path / "serve.out").read_text() == ""


def served_versions(url: str) -> dict:
    """``{worker pid: version}`` of the runs the workers serve, from ``/metrics``."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = httpx.get(url + "/metrics").text
    except httpx.TransportError:
        return {}
    return {s.labels["pid"]: s.labels["version"] for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == "retrieval_model_info" and s.value == 1}


def wait_for_workers(url: str, accept, timeout_s: float = 120.0) -> dict:
    """``served_versions(url)`` once ``accept`` of it is true."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        versions = served_versions(url)
        if accept(versions):
            return versions
        time.sleep(0.2)
    raise AssertionError(f"timed out; last seen {versions}")


def test_two_workers_share_the_port_and_each_reloads_latest_itself(model_dir, tmp_path):
    root = tmp_path / "model"
    for name in ("r1", "r2"):
        shutil.copytree(model_dir / name, root / name)
    point_link(root / "latest", "r1")
    log = (tmp_path / "serve.log").open("w+")
    process, url = start_serve(root, log, "--workers=2", "--reload_interval_s=0.2")
    try:
        workers = wait_for_workers(url, lambda v: len(v) == 2)
        assert set(workers.values()) == {"1"}
        seen = set()
        for _ in range(20):  # a new connection each: the kernel hands them to either worker
            response = httpx.post(url + "/v1/candidates", json={"user_id": "u1", "k": 5})
            assert response.status_code == 200 and len(response.json()["items"]) == 5
            seen.add(response.json()["model_version"])
        point_link(root / "latest", "r2")
        wait_for_workers(url, lambda v: len(v) == 2 and set(v.values()) == {"2"})
        os.kill(int(next(iter(workers))), 9)  # a crashed worker: the other one keeps answering ...
        for _ in range(10):
            assert httpx.post(url + "/v1/candidates", json={"user_id": "u1", "k": 5}).status_code == 200
        restarted = wait_for_workers(url, lambda v: len(v) == 2 and set(v) != set(workers))
        assert set(restarted.values()) == {"2"}  # ... and its replacement loads what `latest` names now
        totals = samples(httpx.get(url + "/metrics").text)
        assert totals[("retrieval_reloads_total", (("outcome", "swapped"),))] >= 2  # both workers' reloads
    finally:
        process.terminate()
        code = process.wait(timeout=60)
        log.seek(0)
    assert seen == {"1"} and code == 0, log.read()[-3000:]


def test_workers_stop_when_their_supervisor_is_killed(model_dir, tmp_path):
    """kill -9 of the supervisor: its workers leave the port within the deadline, so a restart can bind it."""
    root = tmp_path / "model"
    shutil.copytree(model_dir / "r1", root / "r1")
    point_link(root / "latest", "r1")
    log = (tmp_path / "serve.log").open("w+")
    process, url = start_serve(root, log, "--workers=2")
    try:
        workers = [int(pid) for pid in wait_for_workers(url, lambda v: len(v) == 2)]
    finally:
        process.kill()
        process.wait(timeout=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(_alive(pid) for pid in workers):
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in workers), "workers outlived their supervisor"
    port = int(url.rsplit(":", 1)[1])
    while True:  # what a restarted server does, within the same deadline (a loaded box closes sockets late)
        with socket.socket() as again:
            again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                again.bind(("127.0.0.1", port))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_workers_are_bounded_by_the_cores(model_dir):
    too_many = (os.cpu_count() or 1) + 1
    result = subprocess.run([sys.executable, "-m", "pipelines.serve", f"--run_dir={model_dir / 'r1'}", "--port=0",
                             f"--workers={too_many}"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: flag --workers={too_many}: {too_many} is not an integer in the range [1, {os.cpu_count()}]"]


def test_workers_refuse_a_broken_first_run_with_one_line(served):
    root = served[0]
    command = [sys.executable, "-m", "pipelines.serve", f"--run_dir={root / 'raising_tower'}", "--port=0",
               "--workers=2"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert re.fullmatch(r"error: run \S+/raising_tower refused: the user tower fails: .*user tower exploded.*",
                        result.stderr.strip().splitlines()[-1]), result.stderr[-2000:]
