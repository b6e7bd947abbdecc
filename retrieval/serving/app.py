"""The HTTP JSON API (FastAPI): candidates, similar items, model info, reload status, health; OpenAPI schema at
``/openapi.json``.

Every client mistake gets a 4xx with a message, never a 500: a body type other than JSON -> 415 (the form type that
``curl -d`` sends is read as JSON, see ``middleware``); bodies above ``Limits.max_body_bytes`` -> 413 (checked before
parsing, also for chunked bodies); malformed JSON -> 400; wrong types, unknown fields, k out of range, lists
too long -> 422 (strict pydantic models: "5" is not an int, 2.0 and true are not ids; an integer id is read as its
decimal string, as the log readers read integer id columns); an unknown item for ``/v1/similar`` ->
404. Each request reads ``holder.current`` once, so a hot reload never changes the run under a request. Responses
name runs and files relative to the model directory, never by absolute path.
"""

import asyncio
from typing import Annotated, Optional

import faiss
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictInt, StrictStr

import retrieval
from retrieval.errors import InputError
from retrieval.serving import batcher as batching
from retrieval.serving.generator import CandidateGenerator, Candidates, UnknownItemError
from retrieval.serving.metrics import RequestMetrics, ServerMetrics
from retrieval.serving.middleware import BodySizeLimit, JsonContentType
from retrieval.serving.reload import GeneratorHolder
from retrieval.serving.settings import Limits


class ScoredItem(BaseModel):
    item_id: str
    score: Optional[float] = Field(description="the model's similarity, higher is better; null under fallback")
    count: Optional[int] = Field(None, description="under fallback only: the item's training interactions (what "
                                                   "popular items are ranked by)")


class CandidatesResponse(BaseModel):
    items: list[ScoredItem] = Field(description="best first; model scores, or training counts under fallback")
    fallback: bool = Field(description="true when no history was usable and popular items were returned")
    history_source: str = Field(description="request, stored (training history of user_id), similar (a history "
                                            "of items added since training only: the items like them in the "
                                            "item-to-item view, scores correlations) or none")
    history_used: int = Field(description="history items the user tower reads: the max_history most recent of "
                                          "those in effect (every history item is excluded from the candidates)")
    unknown_history: list[str] = Field(description="request history ids the user tower cannot read, ignored: ids "
                                                   "nobody knows, and items added since training (a catalogue "
                                                   "refresh's; still excluded from the candidates)")
    unknown_history_count: int
    model_version: str
    run_id: str


class SimilarResponse(BaseModel):
    item_id: str
    items: list[ScoredItem]
    model_version: str
    run_id: str


def _integer_as_id(value):
    """A JSON integer id as its decimal string (a log's integer id column is read so: ``retrieval.data.readers``);
    anything else as it came, for the strict string check (a bool is no id)."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _request_models(limits: Limits) -> tuple[type, type]:
    """Strict request models with the configured limits (so the OpenAPI schema shows them)."""
    ItemId = Annotated[StrictStr, BeforeValidator(_integer_as_id),  # noqa: N806 (a type alias)
                       Field(max_length=limits.max_id_length)]
    K = Annotated[StrictInt, Field(ge=1, le=limits.max_k, description="number of items wanted")]  # noqa: N806

    class CandidatesRequest(BaseModel):
        model_config = ConfigDict(extra="forbid")
        user_id: Optional[ItemId] = Field(None, description="a user id; its training history is used if no "
                                                            "known history is given")
        history: Optional[list[ItemId]] = Field(None, max_length=limits.max_history,
                                                description="item ids, most recent first")
        k: K = 10
        exclude: list[ItemId] = Field(default_factory=list, max_length=limits.max_exclude,
                                      description="item ids never to return")

    class SimilarRequest(BaseModel):
        model_config = ConfigDict(extra="forbid")
        item_id: ItemId
        k: K = 10

    return CandidatesRequest, SimilarRequest


def _items(result: Candidates) -> list[dict]:
    """The answer's items: model scores in ``score``; under the popularity fallback ``score`` is null and ``count``
    holds the training counts (a count is no similarity: one field never holds both)."""
    if result.fallback:
        return [{"item_id": i, "score": None, "count": c}
                for i, c in zip(result.item_ids.tolist(), result.counts.tolist(), strict=True)]
    return [{"item_id": i, "score": s} for i, s in zip(result.item_ids.tolist(), result.scores.tolist(), strict=True)]


def create_app(holder: GeneratorHolder, limits: Limits = Limits(), faiss_threads: Optional[int] = 1,
               max_batch: int = batching.DEFAULT_MAX_BATCH, max_wait_s: float = batching.DEFAULT_MAX_WAIT_S,
               metrics: Optional[ServerMetrics] = None) -> FastAPI:
    """The FastAPI application serving ``holder.current``. ``faiss_threads``: OpenMP threads per FAISS search (None
    leaves FAISS's default). 1 suits serving: more threads per search only add synchronisation (3x the latency
    measured on 2 busy cores). ``/v1/candidates`` requests are micro-batched (``batcher.MicroBatcher``: up to
    ``max_batch`` waiting requests, waiting at most ``max_wait_s``, answered with one user-tower call and one index
    search); ``max_batch=0`` answers each request alone on the server's worker threads. The batcher is
    ``app.state.batcher`` (None without batching); its owner closes it when the server stops. ``GET /metrics``
    serves ``metrics`` (a fresh ``ServerMetrics`` when None) in Prometheus's text format; the holder's reloads
    are counted from here on (``ServerMetrics.watch``)."""
    app = FastAPI(title="retrieval candidates", version=retrieval.__version__,
                  description="Candidate generation from a published two-tower or Item2Vec run (FAISS index).")
    app.add_middleware(BodySizeLimit, max_bytes=limits.max_body_bytes)
    app.add_middleware(JsonContentType)  # a 415 needs no body
    metrics = metrics if metrics is not None else ServerMetrics()
    metrics.watch(holder)
    app.add_middleware(RequestMetrics, metrics=metrics)  # outermost: every answer is counted
    app.state.metrics = metrics
    candidates_request, similar_request = _request_models(limits)
    batcher = (batching.MicroBatcher(lambda: holder.current, max_batch, max_wait_s, faiss_threads) if max_batch > 0
               else None)
    app.state.batcher = batcher

    def current() -> CandidateGenerator:
        """The generator for this request, read once (a reload never changes the run under a request). OpenMP
        thread counts are per calling thread, so the worker thread running the request is pinned here."""
        if faiss_threads:
            faiss.omp_set_num_threads(faiss_threads)
        return holder.current

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"loc": list(e.get("loc", ())), "type": e.get("type", ""),
                   "msg": e.get("msg", "") + (" (an id: a string, or an integer)" if e.get("type") == "string_type"
                                              else "")} for e in exc.errors()]
        malformed = any(e["type"] == "json_invalid" for e in errors)
        message = "malformed JSON: send one JSON object" if malformed else "invalid request"
        return JSONResponse({"error": message, "detail": errors}, status_code=400 if malformed else 422)

    @app.exception_handler(InputError)
    async def input_error(request: Request, exc: InputError) -> JSONResponse:
        status = 404 if isinstance(exc, UnknownItemError) else 400
        return JSONResponse({"error": str(exc)}, status_code=status)

    @app.get("/healthz")
    def healthz() -> dict:
        """Liveness (200 while a run is served) and whether it is the published one (``degraded``: the run
        ``latest`` names was refused; ``error`` says why)."""
        status = holder.status()
        health = {"status": status["status"], "model_version": status["serving"]["version"]}
        if status["status"] != "ok":
            health["error"] = status["last_reload"]["error"]
        return health

    @app.get("/v1/status")
    def reload_status() -> dict:
        """The served run (name, version, run id, since when, its canary's recall) and the last reload attempt (run,
        time, ``swapped`` or ``refused``, one-line error)."""
        return holder.status()

    @app.get("/v1/model")
    def model() -> dict:
        return {**holder.current.info(), "reloads": holder.reloads}

    def answer(generator: CandidateGenerator, result: Candidates) -> dict:
        return {"items": _items(result), "fallback": result.fallback, "history_source": result.history_source,
                "history_used": result.history_used, "unknown_history": list(result.unknown_history),
                "unknown_history_count": len(result.unknown_history), "model_version": generator.version,
                "run_id": generator.run_id}

    if batcher is None:
        @app.post("/v1/candidates", response_model=CandidatesResponse)
        def candidates(body: candidates_request) -> dict:
            generator = current()
            return answer(generator, generator.recommend(body.user_id, body.history, body.k, body.exclude))
    else:
        @app.post("/v1/candidates", response_model=CandidatesResponse)
        async def candidates(body: candidates_request) -> dict:
            batched = await asyncio.wrap_future(batcher.submit(batching.Request(body.user_id, body.history, body.k,
                                                                       body.exclude)))
            return answer(batched.generator, batched.candidates)

    @app.post("/v1/similar", response_model=SimilarResponse)
    def similar(body: similar_request) -> dict:
        generator = current()
        result = generator.similar(body.item_id, body.k)
        return {"item_id": body.item_id, "items": _items(result), "model_version": generator.version,
                "run_id": generator.run_id}

    @app.get("/metrics", include_in_schema=False)
    def prometheus_metrics() -> Response:
        """Prometheus text format (``retrieval.serving.metrics``)."""
        return Response(metrics.exposition(), media_type=metrics.content_type)

    metrics.routes = frozenset(route.path for route in app.routes)
    return app
