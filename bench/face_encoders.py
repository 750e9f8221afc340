"""What each face's stream encoder costs per event, on the same canonical stream, in one process.

    uv run python bench/face_encoders.py

The stream is an answer of 1,000 text deltas made by the real ResponseBuilder, handed to each
face's StreamEncoder (Responses SSE, chat chunks, Messages events) one event per batch and 8 per
batch; a figure is the best of 15 rounds of 20 answers (the machine is shared: the minimum is the
honest figure). Also encode_events on a terminal event as a plain dict and as a StopSequenceEnd
(the stop sequence's slot, wire/responses_events.py), alternated, best of 40 rounds.
The encoders only: what reading the upstream and the turn cost is bench/run.py's.
"""

from __future__ import annotations

import itertools
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from codexgate.server.delivery import StreamEncoder  # noqa: E402
from codexgate.server.faces.chat import ChatSSE  # noqa: E402
from codexgate.server.faces.messages import MessagesSSE  # noqa: E402
from codexgate.server.faces.responses import ResponsesSSE  # noqa: E402
from codexgate.translate.builder import ResponseBuilder  # noqa: E402
from codexgate.translate.envelope import Envelope  # noqa: E402
from codexgate.wire.responses import ResponsesRequest  # noqa: E402
from codexgate.wire.responses_events import StopSequenceEnd  # noqa: E402
from codexgate.wire.sse import encode_events  # noqa: E402

DELTAS = 1000


def answer() -> list[dict[str, Any]]:
    ids = itertools.count()
    builder = ResponseBuilder(Envelope("resp_1", 0, "m", b"{}"), lambda prefix: f"{prefix}_{next(ids)}")
    events = builder.start()
    for _ in range(DELTAS):
        builder.text(" word")
    builder.finish({"input_tokens": 10, "output_tokens": DELTAS})
    return events + builder.take()


def per_event(make: Callable[[], StreamEncoder], batches: list[list[dict[str, Any]]], events: int) -> float:
    def run() -> None:
        encoder = make()
        for batch in batches:
            encoder.batch(batch)

    return min(timeit.repeat(run, number=20, repeat=15)) / 20 / events * 1e6


def terminal_event() -> dict[str, Any]:
    tools = [{"type": "function", "name": f"t{i}", "parameters": {"type": "object"}} for i in range(10)]
    envelope = Envelope.for_request(ResponsesRequest(model="m", input=[], tools=tools), "resp_1", 0)
    ids = itertools.count()
    builder = ResponseBuilder(envelope, lambda prefix: f"{prefix}_{next(ids)}")
    builder.start()
    builder.text("hello " * 200)
    builder.finish({"input_tokens": 10, "output_tokens": 5})
    return builder.take()[-1]


def main() -> None:
    events = answer()
    faces: dict[str, Callable[[], StreamEncoder]] = {
        "responses": ResponsesSSE,
        "chat": lambda: ChatSSE(False),
        "messages": lambda: MessagesSSE("m"),
    }
    for size in (1, 8):
        batches = [events[start : start + size] for start in range(0, len(events), size)]
        costs = {name: per_event(make, batches, len(events)) for name, make in faces.items()}
        figures = ", ".join(f"{name} {cost:.3f} us" for name, cost in costs.items())
        ratio = costs["messages"] / costs["responses"]
        print(f"{size} event(s) a batch, per event: {figures}; messages / responses {ratio:.2f}x")
    plain = terminal_event()
    stopped = StopSequenceEnd(plain, "END")
    assert encode_events([plain]) == encode_events([stopped])
    best = {"plain dict": 1e9, "StopSequenceEnd": 1e9}
    for _ in range(40):
        for name, event in (("plain dict", plain), ("StopSequenceEnd", stopped)):
            batch = [event]
            best[name] = min(
                best[name], timeit.timeit(lambda b=batch: encode_events(b), number=5000) / 5000 * 1e6
            )
    print("encode_events([terminal]): " + ", ".join(f"{name} {cost:.3f} us" for name, cost in best.items()))


if __name__ == "__main__":
    main()
