"""`GET` and `DELETE /v1/responses/{id}` and `GET /v1/responses/{id}/input_items`: stored
responses as the Responses API shows them. A response another API key made is "not found",
exactly as an unknown one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from codexgate.errors import InvalidRequest, NotFound
from codexgate.server.state import ResponseState
from codexgate.store.base import StoredResponse

# (response id, owner, query parameters) -> (HTTP status, JSON body)
ResourceHandler = Callable[[str, str, dict[str, str]], Awaitable[tuple[int, Any]]]

_DEFAULT_LIMIT = 20
_MAX_LIMIT = 100


class StoredResponses:
    def __init__(self, state: ResponseState) -> None:
        self.state = state

    async def _find(self, response_id: str, owner: str) -> StoredResponse:
        await self.state.ready()
        store = self.state.store
        record = await store.get(response_id, owner) if store is not None else None
        if record is None:
            raise NotFound(f"Response with id '{response_id}' not found.", param="response_id")
        return record

    async def get(self, response_id: str, owner: str, query: dict[str, str]) -> tuple[int, Any]:
        if query.get("stream") in ("true", "1"):
            raise InvalidRequest(
                "'stream' is not served for a stored response: responses are stored once complete; "
                "retrieve it without stream.",
                param="stream",
            )
        record = await self._find(response_id, owner)
        return 200, record.response

    async def delete(self, response_id: str, owner: str, query: dict[str, str]) -> tuple[int, Any]:
        await self.state.ready()
        store = self.state.store
        if store is None or not await store.delete(response_id, owner):
            raise NotFound(f"Response with id '{response_id}' not found.", param="response_id")
        return 200, {"id": response_id, "object": "response", "deleted": True}

    async def input_items(self, response_id: str, owner: str, query: dict[str, str]) -> tuple[int, Any]:
        """The response's input items, newest first by default (`order=asc` for oldest first),
        `limit` (1-100, default 20) at a time after the item id `after` (or before `before`)."""
        limit = _limit(query.get("limit"))
        order = query.get("order", "desc")
        if order not in ("asc", "desc"):
            raise InvalidRequest("'order' must be 'asc' or 'desc'.", param="order")
        record = await self._find(response_id, owner)
        items = record.input if order == "asc" else record.input[::-1]
        ids = [item.get("id") for item in items]
        start, end = 0, len(items)
        after, before = query.get("after"), query.get("before")
        if after is not None:
            start = _position(ids, after, "after") + 1
        if before is not None:
            end = _position(ids, before, "before")
        page = items[start:end][:limit]
        return 200, {
            "object": "list",
            "data": page,
            "first_id": page[0].get("id") if page else None,
            "last_id": page[-1].get("id") if page else None,
            "has_more": start + len(page) < end,
        }


def _limit(raw: str | None) -> int:
    if raw is None:
        return _DEFAULT_LIMIT
    try:
        limit = int(raw)
    except ValueError:
        raise InvalidRequest("'limit' must be an integer.", param="limit") from None
    if not 1 <= limit <= _MAX_LIMIT:
        raise InvalidRequest(f"'limit' must be between 1 and {_MAX_LIMIT}.", param="limit")
    return limit


def _position(ids: list[Any], item_id: str, param: str) -> int:
    try:
        return ids.index(item_id)
    except ValueError:
        raise InvalidRequest(f"No input item with id '{item_id}' in this response.", param=param) from None
