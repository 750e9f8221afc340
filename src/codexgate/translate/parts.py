"""Content parts of a message or a tool output -> the text and images of a chat message. Pure.

A chat message holds text and, from a user, images; a Responses message holds typed parts. Each
part becomes one of those or is refused with a 400 naming it (`input[2].content[1].type`): a
part the translator does not know, or one with no `type`, would otherwise reach the model as
nothing at all. Items are lenient (Codex adds kinds every release); parts inside a message the
gateway translates are not, since leaving one out loses what the client said.

| part | becomes |
|---|---|
| `input_text`, `output_text` (and `text`, `summary_text`, `reasoning_text`) | its `text` |
| `refusal` | its `refusal` text |
| `input_image` with `image_url` | an image (user messages and tool outputs only) |
| `input_file` with `file_data` | its text (translate/files.py) |
| `encrypted_content` (Codex's tool outputs) | its text when it is plain text; 400 when opaque |
| anything else (`input_audio`, `input_video`, unknown or missing `type`) | 400 |
"""

from __future__ import annotations

from typing import Any

from codexgate.errors import InvalidRequest
from codexgate.translate.chat_upstream.items import is_opaque
from codexgate.translate.files import FileTexts, check_file_part, file_text

__all__ = [
    "TEXT_PARTS",
    "chat_content",
    "check_parts",
    "checked_kind",
    "image_url",
    "plain_texts",
    "text_of_parts",
]

# Parts whose `text` is their content.
TEXT_PARTS = frozenset(("input_text", "output_text", "text", "summary_text", "reasoning_text"))
# Parts whose text is in another field: Codex copies text a model wrote into
# `encrypted_content` (multi-agent v2), read unless it is a real blob (OpenAI's).
_TEXT_FIELDS = {"refusal": "refusal", "encrypted_content": "encrypted_content"}
_NO_CHAT_FORM = {
    "input_audio": "audio",
    "input_video": "video",
}


def chat_content(
    parts: list[Any], param: str, *, images: bool, files: FileTexts | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """The text of a content array (joined by newlines) and its images in chat form.
    `param` names the array (`input[3].content`); `images`: whether images may be in it (a
    chat upstream takes them from users only); `files`: the files read ahead (None: read here).
    Raises InvalidRequest naming the part for one that cannot be carried."""
    texts: list[str] = []
    found: list[dict[str, Any]] = []
    for index, part in enumerate(parts):
        part_param = f"{param}[{index}]"
        kind = checked_kind(part, part_param, images=images)
        if kind == "input_image":
            found.append(_image(part))
        elif kind == "input_file":
            texts.append(file_text(part, part_param) if files is None else files.text(part, part_param))
        else:
            texts.append(part[_TEXT_FIELDS.get(kind, "text")])
    return "\n".join(texts), found


def plain_texts(parts: list[Any]) -> str | None:
    """`chat_content(parts, ...)[0]` when every part is a text part with its text (no image,
    file, refusal or blob: the common message, read with no parameter names); else None."""
    texts: list[str] = []
    for part in parts:
        kind = part.get("type") if type(part) is dict else None
        text = part.get("text") if type(kind) is str and kind in TEXT_PARTS else None
        if type(text) is not str:
            return None
        texts.append(text)
    return "\n".join(texts)


def check_parts(parts: list[Any], param: str, *, images: bool) -> None:
    """What `chat_content` would refuse, files aside (they are not read: cheap enough for a
    whole history every turn, for a backend that sends only what is new). Raises
    InvalidRequest naming the part."""
    for index, part in enumerate(parts):
        checked_kind(part, f"{param}[{index}]", images=images)


def checked_kind(part: dict[str, Any], param: str, *, images: bool) -> str:
    """The type of the part at `param` once it is known to be carried: its text field is a
    string, an image has a URL, a file its data, a blob is readable. Raises InvalidRequest
    naming what is wrong."""
    kind = part.get("type")  # parts are objects with a string or no type (wire/responses.py)
    if kind in TEXT_PARTS or kind in _TEXT_FIELDS:
        _required_text(part, _TEXT_FIELDS.get(kind, "text"), param)
        if kind == "encrypted_content" and is_opaque(part["encrypted_content"]):
            raise InvalidRequest(
                f"'{param}.encrypted_content' is encrypted by another server; this model cannot read it.",
                param=f"{param}.encrypted_content",
            )
    elif kind == "input_file":
        check_file_part(part, param)
    elif kind == "input_image":
        if not images:
            raise InvalidRequest(
                f"'{param}' is an image, which this upstream takes only in user messages and tool outputs; "
                "send it in a user message.",
                param=param,
            )
        _check_image(part, param)
    elif kind is None:
        raise InvalidRequest(f"Missing required parameter: '{param}.type'.", param=f"{param}.type")
    else:
        what = _NO_CHAT_FORM.get(kind)
        why = f"is {what}, which" if what else f"is '{kind[:80]}', a content part type that"
        raise InvalidRequest(
            f"'{param}.type' {why} codexgate cannot give this model; expected input_text, input_image, "
            "input_file, output_text or refusal.",
            param=f"{param}.type",
        )
    return str(kind)


def text_of_parts(parts: Any) -> str:
    """The text of parts that are read leniently (a reasoning item's summary or content: with
    nothing readable in it, it is left out, see translate/chat_upstream/items.py)."""
    texts = []
    for part in parts if isinstance(parts, list) else ():
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            texts.append(part["text"])
    return "\n".join(texts)


def _required_text(part: dict[str, Any], name: str, param: str) -> None:
    if not isinstance(part.get(name), str):
        raise InvalidRequest(f"Missing required parameter: '{param}.{name}'.", param=f"{param}.{name}")


def image_url(part: dict[str, Any]) -> str | None:
    """An `input_image` part's URL (a string, or the Chat Completions shape `{"url": ...}`)."""
    url = part.get("image_url")
    if isinstance(url, dict):
        url = url.get("url")
    return url if isinstance(url, str) and url else None


def _check_image(part: dict[str, Any], param: str) -> None:
    if image_url(part) is not None:
        return
    if part.get("file_id"):
        raise InvalidRequest(
            f"'{param}' names a file_id, and the gateway has no files API; send the image as a URL or a "
            "data: URL in 'image_url'.",
            param=param,
        )
    raise InvalidRequest(f"Missing required parameter: '{param}.image_url'.", param=f"{param}.image_url")


def _image(part: dict[str, Any]) -> dict[str, Any]:
    """A checked `input_image` part in chat form."""
    image: dict[str, Any] = {"url": image_url(part)}
    if part.get("detail") in ("low", "high", "auto"):
        image["detail"] = part["detail"]
    return {"type": "image_url", "image_url": image}
