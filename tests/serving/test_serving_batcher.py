"""retrieval.serving.batcher with a fake generator that counts its calls: requests waiting together are answered by
one recommend_batch, batches respect max_batch and the bounded wait, each answer reaches its own caller, errors stay
with the request that caused them, and close() fails what is still waiting."""

import threading
import time

import numpy as np
import pytest

from retrieval.errors import InputError
from retrieval.serving.batcher import Answer, BatcherClosed, MicroBatcher, Request
from retrieval.serving.generator import Candidates

TIMEOUT_S = 10.0


class FakeGenerator:
    """Answers user u with the single item "u/k"; user "bad" makes the call raise; ``gate`` (when set) holds each call
    until released, so that tests decide what is waiting when the worker collects the next batch."""

    def __init__(self):
        self.calls: list[tuple[list, int]] = []
        self.gate: threading.Event | None = None
        self.entered = threading.Event()

    def recommend_batch(self, user_ids, histories=None, k=10, excludes=None, exclude_history=True):
        self.calls.append((list(user_ids), k))
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(TIMEOUT_S)
        if "bad" in user_ids:
            raise InputError("bad user")
        return [Candidates(np.array([f"{u}/{k}"]), np.array([1.0], np.float32)) for u in user_ids]


@pytest.fixture
def fake():
    return FakeGenerator()


def _hold_worker(fake: FakeGenerator, batcher: MicroBatcher):
    """Submits one request and returns once the worker is inside its call, blocked until ``fake.gate.set()``."""
    fake.gate = threading.Event()
    first = batcher.submit(Request("first"))
    assert fake.entered.wait(TIMEOUT_S)
    return first


def test_requests_waiting_together_are_one_call_and_each_answer_reaches_its_caller(fake):
    batcher = MicroBatcher(lambda: fake, max_batch=32, max_wait_s=0.0)
    first = _hold_worker(fake, batcher)
    futures = {user: batcher.submit(Request(user, k=3)) for user in ("a", "b", "c", "d", "e")}
    fake.gate.set()
    assert first.result(TIMEOUT_S).candidates.item_ids.tolist() == ["first/10"]
    for user, future in futures.items():
        answer = future.result(TIMEOUT_S)
        assert isinstance(answer, Answer) and answer.generator is fake
        assert answer.candidates.item_ids.tolist() == [f"{user}/3"]
    assert fake.calls == [(["first"], 10), (["a", "b", "c", "d", "e"], 3)]
    assert batcher.batches == 2
    batcher.close()


def test_batches_are_at_most_max_batch_and_split_by_k(fake):
    batcher = MicroBatcher(lambda: fake, max_batch=3, max_wait_s=0.0)
    _hold_worker(fake, batcher)
    futures = [batcher.submit(Request(f"u{i}", k=5)) for i in range(4)] + [batcher.submit(Request("v", k=7))]
    fake.gate.set()
    assert [f.result(TIMEOUT_S).candidates.item_ids[0] for f in futures] == ["u0/5", "u1/5", "u2/5", "u3/5", "v/7"]
    assert [(len(users), k) for users, k in fake.calls] == [(1, 10), (3, 5), (1, 5), (1, 7)]
    batcher.close()


def test_a_lone_request_waits_for_company_at_most_max_wait(fake):
    batcher = MicroBatcher(lambda: fake, max_batch=8, max_wait_s=0.3)
    start = time.monotonic()
    first = batcher.submit(Request("a"))
    second = batcher.submit(Request("b"))  # arrives within the wait: same batch
    assert first.result(TIMEOUT_S).candidates.item_ids.tolist() == ["a/10"] and second.done()
    assert 0.25 <= time.monotonic() - start < TIMEOUT_S
    assert fake.calls == [(["a", "b"], 10)]
    batcher.close()


def test_an_error_stays_with_its_request(fake):
    batcher = MicroBatcher(lambda: fake, max_wait_s=0.0)
    _hold_worker(fake, batcher)
    futures = [batcher.submit(Request(user)) for user in ("a", "bad", "c")]
    fake.gate.set()
    assert futures[0].result(TIMEOUT_S).candidates.item_ids.tolist() == ["a/10"]
    with pytest.raises(InputError, match="bad user"):
        futures[1].result(TIMEOUT_S)
    assert futures[2].result(TIMEOUT_S).candidates.item_ids.tolist() == ["c/10"]
    assert fake.calls[1][0] == ["a", "bad", "c"] and [users for users, _ in fake.calls[2:]] == [["a"], ["bad"], ["c"]]
    after = batcher.submit(Request("d"))  # the worker lives on
    assert after.result(TIMEOUT_S).candidates.item_ids.tolist() == ["d/10"]
    batcher.close()


def test_close_fails_waiting_and_later_requests_and_stops_the_worker(fake):
    batcher = MicroBatcher(lambda: fake, max_wait_s=0.0)
    first = _hold_worker(fake, batcher)
    waiting = batcher.submit(Request("w"))
    closer = threading.Thread(target=batcher.close)
    closer.start()
    fake.gate.set()
    closer.join(TIMEOUT_S)
    assert first.result(TIMEOUT_S).candidates.item_ids.tolist() == ["first/10"]  # the batch in hand completes
    with pytest.raises(BatcherClosed):
        waiting.result(TIMEOUT_S)
    with pytest.raises(BatcherClosed):
        batcher.submit(Request("late")).result(TIMEOUT_S)
    assert not batcher._thread.is_alive()


def test_bad_settings_are_refused(fake):
    with pytest.raises(ValueError):
        MicroBatcher(lambda: fake, max_batch=0)
