"""ASGI middleware of the HTTP API: the request body's size and content type, checked before the app parses it."""

from __future__ import annotations

from fastapi.responses import JSONResponse

FORM = b"application/x-www-form-urlencoded"
METHODS_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})


class BodySizeLimit:
    """Reads the request body up to ``max_bytes`` (413 beyond it), then replays it to the app."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.max_bytes:
            return await self._reject(scope, receive, send)
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                return await self._reject(scope, receive, send)
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    async def _reject(self, scope, receive, send) -> None:
        response = JSONResponse({"error": f"request body larger than {self.max_bytes} bytes"}, status_code=413)
        await response(scope, receive, send)


class JsonContentType:
    """Request bodies are JSON. ``application/x-www-form-urlencoded``, which ``curl -d`` sends unless told
    otherwise, and a missing content type are read as JSON too (the body is what the client meant; a real form body
    then gets the "malformed JSON" 400; FastAPI itself would answer 422 without saying why). ``application/json`` and
    ``*+json`` pass; any other type gets a 415 saying what to send."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["method"] in METHODS_WITH_BODY:
            declared = dict(scope["headers"]).get(b"content-type", b"")
            media_type = declared.split(b";")[0].strip().lower()
            if media_type in (b"", FORM):
                headers = [(name, value) for name, value in scope["headers"] if name != b"content-type"]
                scope = {**scope, "headers": headers + [(b"content-type", b"application/json")]}
            elif media_type and media_type != b"application/json" and not media_type.endswith(b"+json"):
                message = (f"unsupported content type {media_type.decode('latin-1')!r}: send a JSON body with "
                           "-H 'Content-Type: application/json'")
                return await JSONResponse({"error": message}, status_code=415)(scope, receive, send)
        await self.app(scope, receive, send)
