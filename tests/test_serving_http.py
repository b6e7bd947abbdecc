"""HTTP API end to end over loopback (uvicorn in a thread, httpx): endpoints, the bad-request table (4xx, never
500), hot reload of `latest` under concurrent requests with zero errors, and the `pipelines.serve` command."""

import json
import shutil
import socket
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest

from retrieval.artifacts import point_link
from retrieval.serving import CandidateGenerator, build_run_index
from retrieval.serving.app import Limits, create_app
from retrieval.serving.demo_run import write_demo_run
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
def client(model_dir):
    holder = GeneratorHolder(model_dir / "r1")  # a fixed run: the reload test switches its own copy
    with BackgroundServer(create_app(holder, LIMITS)) as server, httpx.Client(base_url=server.url) as http:
        yield http


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


def test_similar_model_health_and_openapi(client):
    similar = client.post("/v1/similar", json={"item_id": "i9", "k": 3}).json()
    assert similar["item_id"] == "i9" and len(similar["items"]) == 3
    assert "i9" not in [item["item_id"] for item in similar["items"]]
    assert client.post("/v1/similar", json={"item_id": "nope"}).status_code == 404
    assert client.get("/healthz").json() == {"status": "ok", "model_version": "1"}
    model = client.get("/v1/model").json()
    assert model["version"] == "1" and model["run_id"] == "r1" and model["items"] > 0 and model["users"] == 80
    schema = client.get("/openapi.json").json()
    assert {"/v1/candidates", "/v1/similar", "/v1/model", "/healthz"} <= set(schema["paths"])


@pytest.mark.parametrize("path, body, status", [
    ("/v1/candidates", b'{"user_id": "u1", "k": ', 400),  # malformed JSON
    ("/v1/candidates", b'[1, 2]', 422),  # not an object
    ("/v1/candidates", b'{"k": "5"}', 422),  # string for int
    ("/v1/candidates", b'{"k": true}', 422),  # bool for int
    ("/v1/candidates", b'{"k": 2.5}', 422),
    ("/v1/candidates", b'{"k": 0}', 422),
    ("/v1/candidates", b'{"k": -3}', 422),
    ("/v1/candidates", b'{"k": 51}', 422),  # above max_k
    ("/v1/candidates", b'{"user_id": 17}', 422),  # ids are strings
    ("/v1/candidates", b'{"history": "i1"}', 422),  # a string, not a list
    ("/v1/candidates", b'{"history": ["i1", 2]}', 422),
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


def test_oversized_chunked_body_is_refused_before_parsing(client):
    chunks = (b" " * 1000 for _ in range(5))  # no content-length: streamed
    response = client.post("/v1/candidates", content=chunks, headers={"content-type": "application/json"})
    assert response.status_code == 413


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
    holder.stop()
    assert not errors
    assert holder.reloads == 2 and holder.current.version == "3"
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
