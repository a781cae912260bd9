"""An HTTP ingest service on asyncio: FastAPI in front of an embedded store (``pe.open_async``).

    python examples/async_ingest.py                  # a demo against a temporary store
    python examples/async_ingest.py --serve --store ./data --port 8000   # needs uvicorn

``POST /events/{key}`` writes the request body as one event with routing key ``key`` and
answers only once the event is durable (``flush()``: fsync'ed under the default durability);
concurrent requests share one writer, so their flushes share fsyncs (group commit).
``GET /events/{key}?limit=N`` answers the last N readings of that key, oldest first, read as
an Arrow table in a worker thread. The store opens in the app's lifespan and closes (flushing
the writer) when the app stops; nothing here blocks the event loop.

:func:`create_app` is importable (``tests/aio/test_example_async_ingest.py`` drives it with
FastAPI's TestClient).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pyarrow.compute as pc
from fastapi import FastAPI, Request

import pravega_embedded as pe

SCOPE = "iot"
STREAM = "sensors"


def create_app(path: str = "./data", **open_options: object) -> FastAPI:
    """The ingest app on the store in ``path`` (``open_options`` go to ``pe.open_async``)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with pe.open_async(path, **open_options) as store:  # type: ignore[arg-type]
            await store.create_scope(SCOPE, exist_ok=True)
            await store.create_stream(SCOPE, STREAM, pe.StreamConfiguration(
                scaling=pe.ScalingPolicy.fixed(4)), exist_ok=True)
            app.state.store = store
            app.state.writer = await store.create_writer(SCOPE, STREAM)
            yield  # serving; on shutdown the store closes, flushing and closing the writer

    app = FastAPI(title="pravega_embedded ingest", lifespan=lifespan)

    @app.post("/events/{key}")
    async def ingest(key: str, request: Request) -> dict[str, int]:
        """Write the body as one event; answer once it is durable."""
        writer: pe.AsyncWriter = request.app.state.writer
        seq = await writer.write_event(await request.body(), routing_key=key)
        durable = await writer.flush()  # >= seq: this event (and all before it) is durable
        return {"sequence": seq, "durable_sequence": durable}

    @app.get("/events/{key}")
    async def readings(key: str, request: Request, limit: int = 100) -> list[str]:
        """The last ``limit`` readings of ``key``, oldest first."""
        store: pe.AsyncStore = request.app.state.store
        table = await (await store.read_slice(SCOPE, STREAM)).to_arrow()
        mine = table.filter(pc.equal(table.column("routing_key"), key))
        # one key lives in one segment (a fixed stream): offsets are its write order
        mine = mine.sort_by("offset").slice(max(0, mine.num_rows - limit))
        return [b.decode("utf-8", "replace") for b in mine.column("event").to_pylist()]

    return app


def demo(path: str) -> None:
    """Post a few readings through the app in this process, then read them back."""
    from fastapi.testclient import TestClient

    with TestClient(create_app(path)) as client:
        for i, t in enumerate([21.5, 21.7, 22.0]):
            answer = client.post("/events/sensor-7", content=f'{{"t": {t}}}'.encode())
            print("POST /events/sensor-7 ->", answer.json())
            assert answer.json()["durable_sequence"] >= answer.json()["sequence"] == i
        print("GET  /events/sensor-7 ->", client.get("/events/sensor-7").json())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", help="store directory (default: a temporary one)")
    ap.add_argument("--serve", action="store_true", help="serve over HTTP with uvicorn")
    ap.add_argument("--port", type=int, default=8000)
    args = ap.parse_args(argv)
    path = args.store or os.path.join(tempfile.mkdtemp(prefix="pe-ingest-"), "data")
    if args.serve:
        import uvicorn  # pip install uvicorn
        uvicorn.run(create_app(path), port=args.port)
    else:
        demo(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
