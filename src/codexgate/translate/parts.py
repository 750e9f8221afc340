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
from codexgate.translate.files import file_text
from codexgate.translate.items import is_opaque

__all__ = ["TEXT_PARTS", "chat_content", "text_of_parts"]

# Parts whose `text` is their content.
TEXT_PARTS = frozenset(("input_text", "output_text", "text", "summary_text", "reasoning_text"))
_NO_CHAT_FORM = {
    "input_audio": "audio",
    "input_video": "video",
}


def chat_content(parts: list[Any], param: str, *, images: bool) -> tuple[str, list[dict[str, Any]]]:
    """The text of a content array (joined by newlines) and its images in chat form.
    `param` names the array (`input[3].content`); `images`: whether images may be in it (a
    chat upstream takes them from users only). Raises InvalidRequest naming the part for one
    that cannot be carried."""
    texts: list[str] = []
    found: list[dict[str, Any]] = []
    for index, part in enumerate(parts):
        part_param = f"{param}[{index}]"
        kind = part.get("type")  # parts are objects with a string or no type (wire/responses.py)
        if kind in TEXT_PARTS:
            texts.append(_required_text(part, "text", part_param))
        elif kind == "refusal":
            texts.append(_required_text(part, "refusal", part_param))
        elif kind == "input_file":
            texts.append(file_text(part, part_param))
        elif kind == "input_image":
            if not images:
                raise InvalidRequest(
                    f"'{part_param}' is an image, which a chat upstream takes only in user messages and "
                    "tool outputs; send it in a user message.",
                    param=part_param,
                )
            found.append(_image(part, part_param))
        elif kind == "encrypted_content":
            texts.append(_readable_blob(part, part_param))
        elif kind is None:
            raise InvalidRequest(
                f"Missing required parameter: '{part_param}.type'.", param=f"{part_param}.type"
            )
        else:
            what = _NO_CHAT_FORM.get(kind)
            why = f"is {what}, which" if what else f"is '{kind[:80]}', a content part type that"
            raise InvalidRequest(
                f"'{part_param}.type' {why} codexgate cannot give this model; expected input_text, "
                "input_image, input_file, output_text or refusal.",
                param=f"{part_param}.type",
            )
    return "\n".join(texts), found


def text_of_parts(parts: Any) -> str:
    """The text of parts that are read leniently (a reasoning item's summary or content: with
    nothing readable in it, it is left out, see translate/items.py)."""
    texts = []
    for part in parts if isinstance(parts, list) else ():
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            texts.append(part["text"])
    return "\n".join(texts)


def _required_text(part: dict[str, Any], name: str, param: str) -> str:
    text = part.get(name)
    if not isinstance(text, str):
        raise InvalidRequest(f"Missing required parameter: '{param}.{name}'.", param=f"{param}.{name}")
    return text


def _image(part: dict[str, Any], param: str) -> dict[str, Any]:
    url = part.get("image_url")
    if isinstance(url, dict):  # the Chat Completions shape, {"url": ...}
        url = url.get("url")
    if not isinstance(url, str) or not url:
        if part.get("file_id"):
            raise InvalidRequest(
                f"'{param}' names a file_id, and the gateway has no files API; send the image as a URL or "
                "a data: URL in 'image_url'.",
                param=param,
            )
        raise InvalidRequest(f"Missing required parameter: '{param}.image_url'.", param=f"{param}.image_url")
    image: dict[str, Any] = {"url": url}
    if part.get("detail") in ("low", "high", "auto"):
        image["detail"] = part["detail"]
    return {"type": "image_url", "image_url": image}


def _readable_blob(part: dict[str, Any], param: str) -> str:
    """Codex copies text a model wrote into `encrypted_content` (multi-agent v2): read it; a
    real blob (OpenAI's) no other model can read."""
    blob = _required_text(part, "encrypted_content", param)
    if is_opaque(blob):
        raise InvalidRequest(
            f"'{param}.encrypted_content' is encrypted by another server and cannot be read by this model.",
            param=f"{param}.encrypted_content",
        )
    return blob
