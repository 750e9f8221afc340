"""Validate codexgate output against the Open Responses spec.

The spec is the OpenAPI 3.1 document at ``tests/fixtures/openresponses-openapi.json``; its
``components.schemas`` are JSON Schema 2020-12 and reference each other with
``#/components/schemas/X``.  We register the whole document in a :mod:`referencing` registry
under a private URI so those refs resolve, and compile one validator per schema name (cached).

Public helpers (all raise ``AssertionError`` with a readable, path-precise message):

* :func:`validate_response` -- a ``ResponseResource`` (a JSON body, or ``event["response"]``).
* :func:`validate_event` -- one streaming event, schema picked by its ``type``.
* :func:`validate_stream` -- every event, plus the ordering / pairing invariants of a stream.

Extensions
----------
The spec does not know a few things Codex reads.  They are accepted only through the explicit
tables below (``EXTENSION_EVENT_SCHEMAS`` / ``EXTENSION_ITEM_SCHEMAS``), each with a local
schema, so any *other* unknown type still fails loudly:

* ``response.reasoning_text.delta`` / ``.done`` -- OpenAI's (and Codex's) name for what the spec
  calls ``response.reasoning.delta`` / ``.done``; validated with the spec's own schema for those,
  with only the ``type`` value swapped.
* ``response.custom_tool_call_input.delta`` / ``.done`` and the ``custom_tool_call`` output item
  (Codex freeform tools such as ``apply_patch``); the spec has no custom tool calls at all.

Sequence numbers follow the OpenAI convention (the spec only says "integer"): the first event,
``response.created``, has ``sequence_number`` 0 and each next event is exactly one more.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SPEC_PATH = Path(__file__).resolve().parent.parent / "fixtures" / "openresponses-openapi.json"
_SPEC_URI = "urn:openresponses:openapi"
_SCHEMA_PREFIX = "#/components/schemas/"

TERMINAL_EVENT_TYPES = frozenset({"response.completed", "response.failed", "response.incomplete"})
_LIFECYCLE_EVENT_TYPES = frozenset(
    {"response.created", "response.queued", "response.in_progress", *TERMINAL_EVENT_TYPES}
)
_TERMINAL_STATUS = {
    "response.completed": "completed",
    "response.failed": "failed",
    "response.incomplete": "incomplete",
}

# --------------------------------------------------------------------------------------
# Explicit extensions (types Codex reads that the spec lacks)
# --------------------------------------------------------------------------------------

# event type -> spec schema whose shape it shares (only the ``type`` value differs)
_RENAMED_SPEC_EVENTS: dict[str, str] = {
    "response.reasoning_text.delta": "ResponseReasoningDeltaStreamingEvent",
    "response.reasoning_text.done": "ResponseReasoningDoneStreamingEvent",
}


def _local_event_schema(type_: str, fields: Mapping[str, str]) -> dict[str, Any]:
    props: dict[str, Any] = {
        "type": {"type": "string", "enum": [type_]},
        "sequence_number": {"type": "integer"},
    }
    props.update({name: {"type": kind} for name, kind in fields.items()})
    return {"type": "object", "properties": props, "required": ["type", "sequence_number", *fields]}


# Shapes as in OpenAI's Responses API (what Codex parses).
_LOCAL_EVENT_SCHEMAS: dict[str, dict[str, Any]] = {
    "response.custom_tool_call_input.delta": _local_event_schema(
        "response.custom_tool_call_input.delta",
        {"item_id": "string", "output_index": "integer", "delta": "string"},
    ),
    "response.custom_tool_call_input.done": _local_event_schema(
        "response.custom_tool_call_input.done",
        {"item_id": "string", "output_index": "integer", "input": "string"},
    ),
}

EXTENSION_EVENT_TYPES = frozenset({*_RENAMED_SPEC_EVENTS, *_LOCAL_EVENT_SCHEMAS})


def extension_item_schema(
    type_: str, required: Mapping[str, Any], optional: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The JSON Schema of an item kind the spec lacks: its `type`, an `id` (as every spec item
    has: stream invariants pair added/done by id) and the `required` fields must be there, the
    `optional` ones may (each field name -> its schema)."""
    props: dict[str, Any] = {"type": {"type": "string", "enum": [type_]}, "id": {"type": "string"}}
    props.update(required)
    props.update(optional or {})
    return {"type": "object", "properties": props, "required": ["type", "id", *required]}


STRING = {"type": "string"}
EXTENSION_ITEM_SCHEMAS: dict[str, dict[str, Any]] = {
    # OpenAI ResponseCustomToolCall / Codex ResponseItem::CustomToolCall.
    "custom_tool_call": extension_item_schema(
        "custom_tool_call",
        {"call_id": STRING, "name": STRING, "input": STRING},
        {"status": {"type": "string", "enum": ["in_progress", "completed", "incomplete"]}},
    ),
}

# --------------------------------------------------------------------------------------
# Spec loading and compiled validators
# --------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def load_spec() -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(SPEC_PATH.read_text(encoding="utf-8"))
    return spec


def _schemas() -> dict[str, Any]:
    schemas: dict[str, Any] = load_spec()["components"]["schemas"]
    return schemas


@lru_cache(maxsize=1)
def _registry() -> Registry[Any]:
    resource = Resource.from_contents(load_spec(), default_specification=DRAFT202012)
    return Registry().with_resource(_SPEC_URI, resource)


@cache
def schema_validator(name: str) -> Draft202012Validator:
    """Compiled validator for ``components.schemas[name]``."""
    if name not in _schemas():
        raise KeyError(f"spec has no schema {name!r}")
    return Draft202012Validator({"$ref": f"{_SPEC_URI}{_SCHEMA_PREFIX}{name}"}, registry=_registry())


def _type_values(schema: Mapping[str, Any]) -> list[str]:
    prop = schema.get("properties", {}).get("type", {})
    if "const" in prop:
        return [prop["const"]]
    return list(prop.get("enum", []))


@lru_cache(maxsize=1)
def event_schema_names() -> dict[str, str]:
    """Event ``type`` -> spec schema name, read from every ``*StreamingEvent`` schema."""
    mapping: dict[str, str] = {}
    for name, schema in _schemas().items():
        if not name.endswith("StreamingEvent"):
            continue
        values = _type_values(schema)
        if len(values) != 1:
            raise RuntimeError(f"{name}: expected one `type` const/enum value, got {values!r}")
        if values[0] in mapping:
            raise RuntimeError(f"{values[0]!r} is the type of {mapping[values[0]]} and {name}")
        mapping[values[0]] = name
    return mapping


@cache
def _extension_event_validator(event_type: str) -> Draft202012Validator:
    if event_type in _RENAMED_SPEC_EVENTS:
        schema = copy.deepcopy(_schemas()[_RENAMED_SPEC_EVENTS[event_type]])
        schema["properties"]["type"] = {"type": "string", "enum": [event_type]}
        # keep the spec's internal refs resolvable from this copy
        schema["$id"] = f"urn:openresponses:extension:{event_type}"
        return Draft202012Validator(_rebase_refs(schema), registry=_registry())
    return Draft202012Validator(_LOCAL_EVENT_SCHEMAS[event_type])


@cache
def _extension_item_validator(item_type: str) -> Draft202012Validator:
    return Draft202012Validator(EXTENSION_ITEM_SCHEMAS[item_type])


def _rebase_refs(node: Any) -> Any:
    """Point ``#/components/schemas/X`` refs of a copied subschema at the registered spec."""
    if isinstance(node, dict):
        out = {k: _rebase_refs(v) for k, v in node.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            out["$ref"] = _SPEC_URI + ref
        return out
    if isinstance(node, list):
        return [_rebase_refs(v) for v in node]
    return node


# --------------------------------------------------------------------------------------
# Error formatting
# --------------------------------------------------------------------------------------


def _json_path(path: Iterable[Any]) -> str:
    out = "$"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _short(value: Any, limit: int = 160) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _branch_mismatched(branch_errors: Sequence[ValidationError]) -> bool:
    """True if an anyOf/oneOf branch is "not even the right kind of thing".

    That is: the instance has the wrong JSON type for the branch, or the branch is a different
    member of a discriminated union (its ``type`` property enum/const does not match).
    """
    for err in branch_errors:
        rel = list(err.relative_path)
        if err.validator == "type" and not rel:
            return True
        if err.validator in ("enum", "const") and rel == ["type"]:
            return True
    return False


def _leaf_errors(error: ValidationError) -> list[tuple[ValidationError, str]]:
    """Expand anyOf/oneOf failures into the errors of the branch that was meant to match."""
    if error.validator not in ("anyOf", "oneOf") or not error.context:
        return [(error, "")]
    branches: dict[Any, list[ValidationError]] = {}
    for sub in error.context:
        branches.setdefault(sub.relative_schema_path[0], []).append(sub)
    candidates = [errs for errs in branches.values() if not _branch_mismatched(errs)]
    if not candidates:
        allowed = sorted(
            {
                str(value)
                for sub in error.context
                if sub.validator in ("enum", "const") and list(sub.relative_path) == ["type"]
                for value in (sub.validator_value if sub.validator == "enum" else [sub.validator_value])
            }
        )
        got = error.instance.get("type") if isinstance(error.instance, dict) else None
        if allowed and got is not None:
            hint = f" (type {got!r} is not one of the allowed {allowed})"
        else:
            hint = f" (no {error.validator} branch fits; closest: {best_match(error.context).message})"
        return [(error, hint)]
    leaves: list[tuple[ValidationError, str]] = []
    for errs in candidates:
        for sub in errs:
            leaves.extend(_leaf_errors(sub))
    return leaves


def _format_errors(title: str, errors: Sequence[ValidationError]) -> str:
    lines: list[str] = []
    seen: set[str] = set()
    for error in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path]):
        for leaf, hint in _leaf_errors(error):
            where = _json_path(leaf.absolute_path)
            line = f"  - {where}: {leaf.message}{hint}"
            if leaf.validator not in ("required",) and not hint:
                line += f"  (got {_short(leaf.instance)})"
            schema_at = "/".join(str(p) for p in leaf.absolute_schema_path)
            line += f"  [schema: {schema_at}]"
            if line not in seen:
                seen.add(line)
                lines.append(line)
    return f"{title}: {len(lines)} error(s)\n" + "\n".join(lines)


def _errors(validator: Draft202012Validator, instance: Any) -> list[ValidationError]:
    return list(validator.iter_errors(instance))


def _with_prefix(errors: Iterable[ValidationError], prefix: Sequence[Any]) -> list[ValidationError]:
    out = []
    for err in errors:
        err.path.extendleft(reversed(list(prefix)))
        out.append(err)
    return out


# --------------------------------------------------------------------------------------
# ResponseResource
# --------------------------------------------------------------------------------------


def _split_extension_items(
    items: Any,
) -> tuple[Any, list[tuple[int, dict[str, Any]]], list[int]]:
    """Remove extension items from an output list; return (rest, extension items, index map)."""
    if not isinstance(items, list):
        return items, [], []
    rest: list[Any] = []
    ext: list[tuple[int, dict[str, Any]]] = []
    index_map: list[int] = []
    for i, item in enumerate(items):
        if isinstance(item, dict) and item.get("type") in EXTENSION_ITEM_SCHEMAS:
            ext.append((i, item))
        else:
            index_map.append(i)
            rest.append(item)
    return rest, ext, index_map


def _response_errors(resource: Any) -> list[ValidationError]:
    validator = schema_validator("ResponseResource")
    if not isinstance(resource, dict):
        return _errors(validator, resource)
    rest, ext, index_map = _split_extension_items(resource.get("output"))
    if not ext:
        return _errors(validator, resource)
    errors = _errors(validator, {**resource, "output": rest})
    for err in errors:  # map output indexes back to the original list
        if len(err.path) >= 2 and err.path[0] == "output" and isinstance(err.path[1], int):
            err.path[1] = index_map[err.path[1]]
    for i, item in ext:
        errors += _with_prefix(_errors(_extension_item_validator(item["type"]), item), ["output", i])
    return errors


def as_sent(value: Any) -> Any:
    """`value` as a client reads it: encoded and decoded again (the gateway's events may hold
    parts already encoded, `orjson.Fragment`, which only take their JSON shape on the wire)."""
    return orjson.loads(orjson.dumps(value))


def validate_response(resource: dict[str, Any]) -> None:
    """Assert that ``resource`` is a valid Open Responses ``ResponseResource``."""
    errors = _response_errors(as_sent(resource))
    if errors:
        raise AssertionError(_format_errors("ResponseResource is invalid", errors))


# --------------------------------------------------------------------------------------
# Streaming events
# --------------------------------------------------------------------------------------


def _event_errors(event: Any) -> tuple[str, list[ValidationError]]:
    if not isinstance(event, dict):
        raise AssertionError(f"streaming event must be a JSON object, got {_short(event)}")
    event_type = event.get("type")
    spec_name = event_schema_names().get(event_type) if isinstance(event_type, str) else None
    if spec_name is None and event_type not in EXTENSION_EVENT_TYPES:
        known = ", ".join(sorted(event_schema_names()))
        raise AssertionError(
            f"event type {event_type!r} is not in the Open Responses spec "
            f"(nor in the Codex extension allow-list {sorted(EXTENSION_EVENT_TYPES)}); "
            f"spec types: {known}; event: {_short(event)}"
        )
    label = spec_name or f"{event_type} (Codex extension)"
    validator = schema_validator(spec_name) if spec_name else _extension_event_validator(str(event_type))

    # Substructures that may carry extension items are validated separately.
    item = event.get("item")
    response = event.get("response")
    if isinstance(item, dict) and item.get("type") in EXTENSION_ITEM_SCHEMAS:
        errors = _errors(validator, {**event, "item": None})
        errors += _with_prefix(_errors(_extension_item_validator(item["type"]), item), ["item"])
        return label, errors
    if isinstance(response, dict) and _split_extension_items(response.get("output"))[1]:
        errors = _errors(validator, {**event, "response": None})
        # `response: null` is only an error of its own; drop it and validate the real one
        errors = [e for e in errors if list(e.path)[:1] != ["response"]]
        errors += _with_prefix(_response_errors(response), ["response"])
        return label, errors
    return label, _errors(validator, event)


def validate_event(event: dict[str, Any]) -> None:
    """Assert that ``event`` is a valid streaming event of a type the spec (or allow-list) knows."""
    event = as_sent(event)
    label, errors = _event_errors(event)
    if errors:
        raise AssertionError(
            _format_errors(f"{event.get('type')!r} event is invalid against {label}", errors)
        )


# --------------------------------------------------------------------------------------
# Stream invariants
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _TextFamily:
    """A delta/done event pair whose deltas must concatenate to the done value."""

    delta: str
    done: str
    field: str  # field of the done event holding the full value
    index: str | None  # content_index / summary_index, or None (one value per item)
    final: Callable[[dict[str, Any], int | None], Any]  # value in the output_item.done item


_MISSING = object()


def _nested(item: dict[str, Any], key: str, idx: int | None, field: str) -> Any:
    try:
        return item[key][idx][field]
    except (KeyError, IndexError, TypeError):
        return _MISSING


_FAMILIES = (
    _TextFamily(
        "response.output_text.delta",
        "response.output_text.done",
        "text",
        "content_index",
        lambda item, i: _nested(item, "content", i, "text"),
    ),
    _TextFamily(
        "response.refusal.delta",
        "response.refusal.done",
        "refusal",
        "content_index",
        lambda item, i: _nested(item, "content", i, "refusal"),
    ),
    _TextFamily(
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "arguments",
        None,
        lambda item, i: item.get("arguments", _MISSING),
    ),
    _TextFamily(
        "response.reasoning.delta",
        "response.reasoning.done",
        "text",
        "content_index",
        lambda item, i: _nested(item, "content", i, "text"),
    ),
    _TextFamily(
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "text",
        "content_index",
        lambda item, i: _nested(item, "content", i, "text"),
    ),
    _TextFamily(
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "text",
        "summary_index",
        lambda item, i: _nested(item, "summary", i, "text"),
    ),
    _TextFamily(
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "input",
        None,
        lambda item, i: item.get("input", _MISSING),
    ),
)
_FAMILY_BY_TYPE = {t: f for f in _FAMILIES for t in (f.delta, f.done)}

# part-pair events: added type -> (done type, index field, container key in the item)
_PART_PAIRS = {
    "response.content_part.added": ("response.content_part.done", "content_index", "content"),
    "response.reasoning_summary_part.added": (
        "response.reasoning_summary_part.done",
        "summary_index",
        "summary",
    ),
}
_PART_DONE = {done: added for added, (done, _, _) in _PART_PAIRS.items()}
# events whose (output_index, content_index) must be inside an open content part
_NEEDS_OPEN_CONTENT_PART = frozenset(
    {
        "response.output_text.delta",
        "response.output_text.done",
        "response.refusal.delta",
        "response.refusal.done",
        "response.output_text.annotation.added",
    }
)


class _StreamChecker:
    def __init__(self, events: Sequence[dict[str, Any]]) -> None:
        self.events = events
        self.problems: list[str] = []
        self.added: dict[int, dict[str, Any]] = {}  # output_index -> item from .added
        self.done: dict[int, dict[str, Any]] = {}  # output_index -> item from .done
        # (kind, output_index, content/summary index) -> part
        self.parts_open: dict[tuple[str, Any, Any], dict[str, Any]] = {}
        self.parts_done: dict[tuple[str, Any, Any], dict[str, Any]] = {}
        # (family delta type, output_index, index) -> [concatenated deltas, done value]
        self.text: dict[tuple[str, Any, Any], list[Any]] = {}

    def fail(self, i: int, message: str) -> None:
        ev = self.events[i] if 0 <= i < len(self.events) else {}
        self.problems.append(f"  - event #{i} ({ev.get('type')!r}): {message}")

    def run(self) -> list[str]:
        self.check_sequence_and_lifecycle()
        for i, ev in enumerate(self.events):
            self.check_event(i, ev)
        self.check_closed()
        self.check_terminal_output()
        return self.problems

    def check_sequence_and_lifecycle(self) -> None:
        events = self.events
        for i, ev in enumerate(events):
            if ev.get("sequence_number") != i:
                self.fail(
                    i,
                    f"sequence_number is {ev.get('sequence_number')!r}, expected {i} "
                    "(must start at 0 and increase by exactly 1)",
                )
        if events[0].get("type") != "response.created":
            self.fail(0, "first event must be 'response.created'")
        terminals = [i for i, ev in enumerate(events) if ev.get("type") in TERMINAL_EVENT_TYPES]
        if not terminals:
            self.fail(
                len(events) - 1,
                f"stream has no terminal event ({' | '.join(sorted(TERMINAL_EVENT_TYPES))})",
            )
        elif len(terminals) > 1:
            self.fail(terminals[1], f"more than one terminal event (at {terminals})")
        elif terminals[0] != len(events) - 1:
            self.fail(terminals[0], "terminal event is not the last event")
        response_id = None
        for i, ev in enumerate(events):
            etype = ev.get("type")
            if etype not in _LIFECYCLE_EVENT_TYPES or not isinstance(ev.get("response"), dict):
                continue
            resp = ev["response"]
            if response_id is None:
                response_id = resp.get("id")
            elif resp.get("id") != response_id:
                self.fail(i, f"response.id {resp.get('id')!r} differs from {response_id!r}")
            status = resp.get("status")
            expected = _TERMINAL_STATUS.get(str(etype))
            if expected and status != expected:
                self.fail(i, f"response.status is {status!r}, expected {expected!r}")
            if not expected and status not in ("queued", "in_progress"):
                self.fail(i, f"response.status is {status!r}, expected 'in_progress' or 'queued'")
            if etype == "response.failed" and resp.get("error") is None:
                self.fail(i, "response.failed must carry a non-null response.error")
            if etype == "response.completed" and resp.get("error") is not None:
                self.fail(i, "response.completed must have response.error = null")
            if etype == "response.incomplete" and resp.get("incomplete_details") is None:
                self.fail(i, "response.incomplete must carry response.incomplete_details")

    def open_item(self, i: int, ev: dict[str, Any]) -> dict[str, Any] | None:
        """The added item an item-scoped event refers to, if it is open and ids match."""
        oi, item_id = ev.get("output_index"), ev.get("item_id")
        item = self.added.get(oi) if isinstance(oi, int) else None
        if item is None:
            self.fail(i, f"output_index {oi!r} has no preceding response.output_item.added")
            return None
        if oi in self.done:
            self.fail(i, f"output_index {oi} was already closed by response.output_item.done")
        if item.get("id") != item_id:
            self.fail(i, f"item_id {item_id!r} != id {item.get('id')!r} of output_index {oi}")
        return item

    def check_event(self, i: int, ev: dict[str, Any]) -> None:
        etype = ev.get("type")
        if etype == "response.output_item.added":
            self.on_item_added(i, ev)
        elif etype == "response.output_item.done":
            self.on_item_done(i, ev)
        elif "item_id" in ev:
            if self.open_item(i, ev) is None:
                return
            if etype in _PART_PAIRS or etype in _PART_DONE:
                self.on_part(i, ev)
            if etype in _NEEDS_OPEN_CONTENT_PART:
                key = ("content", ev.get("output_index"), ev.get("content_index"))
                if key not in self.parts_open:
                    self.fail(
                        i,
                        f"content_index {ev.get('content_index')!r} of output_index "
                        f"{ev.get('output_index')!r} has no open content part "
                        "(response.content_part.added first)",
                    )
            if etype in _FAMILY_BY_TYPE:
                self.on_text(i, ev, _FAMILY_BY_TYPE[etype])

    def on_item_added(self, i: int, ev: dict[str, Any]) -> None:
        oi, item = ev.get("output_index"), ev.get("item")
        if not isinstance(item, dict):
            self.fail(i, "output_item.added has no item")
            return
        if oi in self.added:
            self.fail(i, f"output_index {oi} was already added")
            return
        if oi != len(self.added):
            self.fail(i, f"output_index {oi!r} out of order, expected {len(self.added)}")
        if not item.get("id"):
            self.fail(i, "added item has no id")
        if isinstance(oi, int):
            self.added[oi] = item

    def on_item_done(self, i: int, ev: dict[str, Any]) -> None:
        oi, item = ev.get("output_index"), ev.get("item")
        if not isinstance(oi, int) or oi not in self.added:
            self.fail(i, f"output_index {oi!r} was never added")
            return
        if oi in self.done:
            self.fail(i, f"output_index {oi} is done twice")
            return
        if not isinstance(item, dict):
            self.fail(i, "output_item.done has no item")
            return
        added = self.added[oi]
        for field in ("id", "type"):
            if item.get(field) != added.get(field):
                self.fail(
                    i,
                    f"item.{field} {item.get(field)!r} != {added.get(field)!r} "
                    f"from output_item.added (output_index {oi})",
                )
        for (kind, part_oi, idx), _ in self.parts_open.items():
            if part_oi == oi:
                self.fail(i, f"{kind} part {idx} of output_index {oi} was never closed")
        self.done[oi] = item
        self.check_item_text(i, oi, item)

    def on_part(self, i: int, ev: dict[str, Any]) -> None:
        etype = str(ev.get("type"))
        added_type = etype if etype in _PART_PAIRS else _PART_DONE[etype]
        _, index_field, kind = _PART_PAIRS[added_type]
        key = (kind, ev.get("output_index"), ev.get(index_field))
        if etype == added_type:
            if key in self.parts_open or key in self.parts_done:
                self.fail(i, f"{kind} part {key[2]!r} of output_index {key[1]!r} added twice")
            else:
                self.parts_open[key] = ev.get("part") or {}
        else:
            if key not in self.parts_open:
                self.fail(
                    i,
                    f"{kind} part {key[2]!r} of output_index {key[1]!r} is done without {added_type}",
                )
                return
            del self.parts_open[key]
            self.parts_done[key] = ev.get("part") or {}

    def on_text(self, i: int, ev: dict[str, Any], fam: _TextFamily) -> None:
        idx = ev.get(fam.index) if fam.index else None
        key = (fam.delta, ev.get("output_index"), idx)
        state = self.text.setdefault(key, ["", _MISSING])
        if state[1] is not _MISSING:
            self.fail(i, f"event after {fam.done} for output_index {key[1]!r} index {idx!r}")
            return
        if ev.get("type") == fam.delta:
            state[0] += ev.get("delta") if isinstance(ev.get("delta"), str) else ""
            return
        value = ev.get(fam.field)
        state[1] = value
        if value != state[0]:
            self.fail(
                i,
                f"{fam.done}.{fam.field} {_short(value)} != concatenated deltas {_short(state[0])}",
            )

    def check_item_text(self, i: int, oi: int, item: dict[str, Any]) -> None:
        for (family_delta, t_oi, idx), (_, done_value) in self.text.items():
            if t_oi != oi:
                continue
            fam = _FAMILY_BY_TYPE[family_delta]
            if done_value is _MISSING:
                self.fail(i, f"{fam.delta} for output_index {oi} index {idx!r} never got {fam.done}")
                continue
            final = fam.final(item, idx)
            if final is not _MISSING and final != done_value:
                self.fail(
                    i,
                    f"item value {_short(final)} != {fam.done}.{fam.field} "
                    f"{_short(done_value)} (index {idx!r})",
                )
        for (kind, p_oi, idx), part in self.parts_done.items():
            if p_oi != oi:
                continue
            final = _nested(item, kind, idx, "text") if "text" in part else _MISSING
            if final is not _MISSING and part.get("text") != final:
                self.fail(
                    i,
                    f"{kind} part {idx} text {_short(part.get('text'))} != item "
                    f"{kind}[{idx}].text {_short(final)}",
                )

    def check_closed(self) -> None:
        last = len(self.events) - 1
        for oi in sorted(set(self.added) - set(self.done)):
            self.fail(
                last,
                f"output_index {oi} (item {self.added[oi].get('id')!r}) was added "
                "but never got response.output_item.done",
            )
        for kind, oi, idx in self.parts_open:
            self.fail(last, f"{kind} part {idx!r} of output_index {oi!r} was never closed")

    def check_terminal_output(self) -> None:
        last = self.events[-1]
        if last.get("type") not in TERMINAL_EVENT_TYPES or not isinstance(last.get("response"), dict):
            return
        output = last["response"].get("output")
        expected = [self.done[oi] for oi in sorted(self.done)]
        if output == expected:
            return
        if not isinstance(output, list) or len(output) != len(expected):
            self.fail(
                len(self.events) - 1,
                f"response.output has {len(output) if isinstance(output, list) else output!r}"
                f" items, but {len(expected)} items were done",
            )
            return
        for j, (got, want) in enumerate(zip(output, expected, strict=True)):
            if got != want:
                self.fail(
                    len(self.events) - 1,
                    f"response.output[{j}] {_short(got)} != output_item.done item {_short(want)}",
                )


def validate_stream(events: Sequence[dict[str, Any]]) -> None:
    """Validate every event and the invariants of a complete Responses stream.

    Checked: each event against its schema; ``sequence_number`` is 0, 1, 2, ...; the first event
    is ``response.created``; exactly one terminal event (completed | failed | incomplete) and it
    is last; lifecycle events share ``response.id`` and carry the matching ``status``; items are
    added with ``output_index`` 0, 1, 2, ... and each is closed by exactly one
    ``output_item.done`` with the same index, id and type; item-scoped events only refer to open
    items (matching ``item_id``); content/summary parts are paired; deltas concatenate to the
    matching ``.done`` value, which also equals the final item's value; and the terminal
    ``response.output`` equals the done items in ``output_index`` order.
    """
    if not events:
        raise AssertionError("stream is empty")
    events = [as_sent(event) for event in events]
    schema_problems: list[str] = []
    for i, ev in enumerate(events):
        try:
            validate_event(ev)
        except AssertionError as exc:
            schema_problems.append(f"event #{i}: {exc}")
    if schema_problems:
        raise AssertionError(
            f"{len(schema_problems)} of {len(events)} events are invalid:\n" + "\n".join(schema_problems)
        )
    checker = _StreamChecker(events)
    problems = checker.run()
    if problems:
        raise AssertionError(
            f"stream of {len(events)} events breaks {len(problems)} invariant(s):\n" + "\n".join(problems)
        )
