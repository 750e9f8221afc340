"""`codexgate replay FILE`: a turn recorded by the transcript recorder (observability/recorder.py) run
again, so that a user's bug report becomes a test.

The gateway is built with the recorded upstream's settings (kind, dialect, model routes, the
settings that shape a turn) over a fixture upstream that answers with the recorded bytes
(commands/replay/upstream.py); the request the backend got is run through it; the events it produces
are compared with the recorded ones, ids and timestamps aside (an id stands for the first id
it was seen as, so references between ids are still compared). The request sent upstream is
compared too, as a note: a change there is not a change of the answer.

`--write-test PATH` writes a pytest file that does the same (the recording copied under
tests/fixtures/recordings/); `--upstream-only` serves the recorded answer over HTTP instead.
"""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import os
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
from pydantic import ValidationError

from codexgate.app import build_app
from codexgate.backends.base import UNKNOWN, Call
from codexgate.commands.replay.upstream import Answers, ReplayTransport, recorded_answers, serve_fixture
from codexgate.config import HttpUpstream, ModelConfig, Settings, parse_upstream
from codexgate.errors import GatewayError, UpstreamTimeout
from codexgate.observability.transcript import FORMAT_VERSION, scrub
from codexgate.redact import MASK, Redactor
from codexgate.server.http_errors import redact_failure
from codexgate.server.state import Prepared
from codexgate.translate.cuts import cut_ids
from codexgate.wire.responses import ResponsesRequest
from codexgate.wire.responses_events import FAILED, TERMINAL, Event

__all__ = ["ReplayError", "Result", "load_recording", "main", "normalize", "replay_file", "write_test"]

_TIME_KEYS = frozenset(("created_at", "completed_at", "created"))
_MAX_NOTE_LINES = 80
_CHAT_SETTINGS = ("name", "extra_body", "default_sampling", "text_tool_calls", "think_tags", "loop_guard")


class ReplayError(Exception):
    """The file cannot be replayed; the message says why."""


@dataclass(frozen=True, slots=True)
class Result:
    same: bool
    report: str


def load_recording(path: Path) -> dict[str, Any]:
    """Raises ReplayError for a file that is not a recording this version reads."""
    try:
        document = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ReplayError(f"cannot read {path}: {exc}") from None
    if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
        raise ReplayError(f"{path} is not a version {FORMAT_VERSION} recording")
    return document


def replay_file(path: Path) -> Result:
    """Replay the recording at `path`. Raises ReplayError."""
    document = load_recording(path)
    return asyncio.run(replay(document, path.name))


async def replay(document: Mapping[str, Any], name: str = "the recording") -> Result:
    """Run the recorded turn again and compare. Raises ReplayError."""
    settings, answers = _replay_settings(document)
    upstream = settings.upstreams[0]
    assert isinstance(upstream, HttpUpstream), "a replay is of a chat or responses upstream"
    transport = ReplayTransport(upstream.base_url, Answers(answers), _stall(document))
    app = build_app(settings, transport=transport, environ={})
    req = _request(document.get("backend_request") or document.get("request"))
    events: list[Event] = []
    error: dict[str, Any] | None = None
    try:
        route = app.router.resolve(req.model)
        call: Call = route.backend.call(req, route.upstream_model)
        if document.get("compaction"):
            prepared = Prepared(req, UNKNOWN, "", list(req.input), True)
            call = app.state.wrap(call, prepared)
        await call.open()
        events = await _events(call, app.redactor)
    except GatewayError as exc:  # refused before the answer started: an HTTP error
        error = {"status": exc.status, "code": exc.code}
    finally:
        await asyncio.gather(*(backend.aclose() for backend in app.router.backends.values()))
    return _compare(document, name, events, error, answers, transport.sent)


async def _events(call: Call, redactor: Redactor) -> list[Event]:
    """The events as delivery would deliver them (failures redacted), the upstream drained."""
    collected: list[Event] = []
    stream = call.events()
    try:
        async for batch in stream:
            last = batch[-1]
            if last["type"] == FAILED:
                redact_failure(last, redactor)
            collected += batch
            if last["type"] in TERMINAL:
                break
        async for _ in stream:
            pass
    finally:
        await stream.aclose()
    return collected


def _replay_settings(document: Mapping[str, Any]) -> tuple[Settings, list[Any]]:
    upstream = document.get("upstream") or {}
    if upstream.get("kind") == "codex":
        raise ReplayError(
            "a turn of a codex upstream is recorded without its JSON-RPC frames: nothing to replay"
        )
    answers = recorded_answers(document)
    if not answers:
        raise ReplayError("the recording holds no upstream exchange: nothing to replay")
    config = dict(upstream.get("config") or {})
    if upstream.get("kind") not in ("chat", "responses"):
        # A chat server the gateway ran itself (embedded): replayed as a chat upstream with the
        # settings such a kind shares with chat.
        config = {"kind": "chat", **{k: config[k] for k in _CHAT_SETTINGS if k in config}}
    config["base_url"] = upstream.get("base_url") or config.get("base_url")
    config.pop("api_key_env", None)  # the replay sends no key
    if config.get("headers"):
        config["headers"] = {k: v for k, v in config["headers"].items() if v != MASK}
    config.setdefault("name", upstream.get("name") or "recorded")
    try:
        settings = Settings(
            upstreams=[parse_upstream(config)],
            models=[ModelConfig.model_validate(model) for model in upstream.get("models") or []],
            store="none",
            discover=False,
            **(upstream.get("settings") or {}),
        )
    except (ValidationError, TypeError) as exc:
        raise ReplayError(f"the recorded upstream settings are not valid here: {exc}") from None
    return settings, answers


def _stall(document: Mapping[str, Any]) -> UpstreamTimeout | None:
    """A recorded turn that ended by an upstream timeout: the timeout to raise where the
    recorded answer stops, with the recorded message (a replay does not wait it out)."""
    events = document.get("events") or []
    last = events[-1] if events else {}
    error = (last.get("response") or {}).get("error") if isinstance(last, dict) else None
    if isinstance(error, dict) and error.get("code") == UpstreamTimeout.default_code:
        return UpstreamTimeout(str(error.get("message", "")))
    return None


def _request(data: Any) -> ResponsesRequest:
    if not isinstance(data, dict) or "model" not in data:
        raise ReplayError("the recording holds no canonical request")
    names = {f.name for f in dataclasses.fields(ResponsesRequest)}
    return ResponsesRequest(**{key: value for key, value in data.items() if key in names})


def normalize(events: list[Any]) -> list[Any]:
    """Events with ids replaced by placeholders in order of first appearance (the same id, the
    same placeholder; the ids a cut marker names too), timestamps and sealed compaction blobs by
    markers."""
    ids: dict[str, str] = {}

    def placeholder(value: str) -> str:
        return ids.setdefault(value, f"<id{len(ids) + 1}>")

    def walk(value: Any, key: str | None = None, kind: Any = None) -> Any:
        if isinstance(value, dict):
            inner = value.get("type")
            walked = {k: walk(v, k, inner) for k, v in value.items()}
            # A cut marker (translate/cuts.py) names item ids inside its blob.
            cut = cut_ids([value]) if inner == "reasoning" else set()
            if cut:
                walked["encrypted_content"] = {"cut": sorted(placeholder(i) for i in cut)}
            return walked
        if isinstance(value, list):
            return [walk(v, key, kind) for v in value]
        if key in _TIME_KEYS and isinstance(value, (int, float)):
            return "<time>"
        if isinstance(value, str) and key is not None and (key == "id" or key.endswith("_id")):
            return placeholder(value)
        if key == "encrypted_content" and isinstance(kind, str) and kind.startswith("compaction"):
            return "<sealed>"
        return value

    return [walk(event) for event in events]


def _lines(values: list[Any]) -> list[str]:
    return [orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode() for value in values]


def _compare(
    document: Mapping[str, Any],
    name: str,
    events: list[Event],
    error: dict[str, Any] | None,
    answers: list[Any],
    sent: list[tuple[str, str, bytes | None]],
) -> Result:
    # The recording's strings went through the redactor's patterns; the replay's go too.
    patterns = Redactor().redact
    recorded = list(document.get("events") or [])
    replayed = scrub(orjson.loads(orjson.dumps(events, default=str)), patterns)
    outcome = document.get("outcome") or {}
    notes: list[str] = []
    if outcome.get("outcome") == "client_gone" and len(replayed) > len(recorded):
        replayed = replayed[: len(recorded)]
        notes.append("the client left during the recorded turn: its events are compared as a prefix")
    expected = _lines(normalize(recorded))
    got = _lines(normalize(replayed))
    if not recorded and outcome.get("terminal") is None:
        expected.append(f"error status={outcome.get('status')} code={outcome.get('outcome')}")
    if error is not None:
        got.append(f"error status={error['status']} code={error['code']}")
    notes += _request_notes(answers, sent, patterns)
    diff = list(difflib.unified_diff(expected, got, "recorded", "replayed", lineterm=""))
    head = f"replayed {name}: "
    if not diff:
        report = head + f"{len(replayed)} events, the same as recorded"
    else:
        report = head + "the events differ from the recorded ones\n" + "\n".join(diff)
    return Result(not diff, "\n".join([report, *(f"note: {n}" for n in notes)]))


def _request_notes(
    answers: list[Any], sent: list[tuple[str, str, bytes | None]], redact: Callable[[str], str]
) -> list[str]:
    """How the requests sent upstream differ from the recorded ones (JSON bodies only)."""
    notes: list[str] = []
    if len(sent) != len(answers):
        notes.append(f"the gateway sent {len(sent)} upstream requests; the recording has {len(answers)}")
    for index, (answer, (method, path, body)) in enumerate(zip(answers, sent, strict=False)):
        if answer.sent is None or body is None:
            continue
        try:
            now = scrub(orjson.loads(body), redact)
        except orjson.JSONDecodeError:
            continue
        if now != answer.sent:
            old = orjson.dumps(answer.sent, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
            new = orjson.dumps(now, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
            lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), "recorded", "replayed",
                                              lineterm=""))  # fmt: skip
            shown = "\n".join(lines[:_MAX_NOTE_LINES]) + ("\n..." if len(lines) > _MAX_NOTE_LINES else "")
            notes.append(
                f"upstream request {index + 1} ({method} {path}) differs from the recorded one\n{shown}"
            )
    return notes


_TEST_TEMPLATE = '''"""A recorded turn replayed (written by `codexgate replay --write-test`): the gateway must
answer the recorded request with the recorded events when the upstream answers as recorded.
When the recording shows a bug, edit its "events" to what should happen: this test then fails
until the gateway does it."""

from __future__ import annotations

from pathlib import Path

from codexgate.commands.replay.command import replay_file

RECORDING = Path(__file__).parent / "{relative}"


def test_{name}_replays_as_recorded() -> None:
    result = replay_file(RECORDING)
    assert result.same, result.report
'''


def write_test(recording: Path, test_path: Path) -> Path:
    """Write a pytest file replaying `recording`, copied to fixtures/recordings/ under the
    nearest `tests` directory above `test_path` (else beside it). Returns the copy's path."""
    folder = test_path.resolve().parent
    root = next((p for p in (folder, *folder.parents) if p.name == "tests"), folder)
    stem = re.sub(r"\W", "_", test_path.stem.removeprefix("test_")) or "recorded"
    fixture = root / "fixtures" / "recordings" / f"{stem}.json"
    fixture.parent.mkdir(parents=True, exist_ok=True)
    if recording.resolve() != fixture.resolve():
        shutil.copyfile(recording, fixture)
    relative = Path(os.path.relpath(fixture, folder)).as_posix()
    test_path.write_text(_TEST_TEMPLATE.format(relative=relative, name=stem))
    return fixture


def main(path: Path, *, upstream_only: bool = False, port: int = 0, write_test_to: Path | None = None) -> int:
    """The `replay` command: 0 when the events are the same, 1 when they differ, 2 when the
    file cannot be replayed."""
    try:
        document = load_recording(path)
        if upstream_only:
            settings, answers = _replay_settings(document)
            upstream = settings.upstreams[0]
            base_url = upstream.base_url if isinstance(upstream, HttpUpstream) else ""
            serve_fixture(Answers(answers, cycle=True), urlsplit(base_url).path.rstrip("/"), port, _announce)
            return 0
        if write_test_to is not None:
            fixture = write_test(path, write_test_to)
            print(f"wrote {write_test_to} (recording: {fixture})")
        result = asyncio.run(replay(document, path.name))
    except ReplayError as exc:
        print(f"codexgate replay: {exc}")
        return 2
    print(result.report)
    return 0 if result.same else 1


def _announce(url: str) -> None:
    print(f"serving the recorded upstream at {url} (Ctrl-C to stop)", flush=True)
