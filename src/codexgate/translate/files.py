"""`input_file` content parts as the text a model reads. Pure: decoding in memory, no I/O.

A Chat Completions upstream has no file input, so a file a client sends must become text or be
refused; it is never dropped. What is read:

- text files (`text/*`, JSON, XML, YAML, CSV, source code...), known by the data URL's media
  type, else by the file name, else because the bytes are UTF-8 with no NUL in them;
- PDFs, their text layer extracted with pypdf (imported on first use: serving without files
  never loads it).

A file reaches the model as one text block, under its name:

    --- file: report.pdf (PDF, 2 pages) ---
    [page 1]
    ...
    [page 2]
    ...
    --- end of report.pdf ---

Everything else is refused with a 400 naming the part: binary kinds (images belong in
`input_image`), `file_id` (the gateway has no files API), `file_url` (the gateway fetches
nothing), a PDF with no text (a scan), and a file past a bound (MAX_FILE_BYTES, MAX_PDF_PAGES,
MAX_FILE_CHARS). Past a bound the file is refused rather than cut: a model reading half a file
as if it were whole would answer wrongly without knowing it.

Reading a PDF costs CPU on the request's path (about 3 ms a page of plain text; the page bound
keeps it to a fraction of a second for ordinary documents).
"""

from __future__ import annotations

import base64
import binascii
import codecs
import io
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, NoReturn
from urllib.parse import unquote_to_bytes

from codexgate.errors import Code, InvalidRequest

if TYPE_CHECKING:
    from pypdf import PdfReader

__all__ = ["MAX_FILE_BYTES", "MAX_FILE_CHARS", "MAX_PDF_PAGES", "check_file_part", "file_text", "pdf_bytes"]

MAX_FILE_BYTES = 10 * 1024 * 1024  # decoded bytes of one file
MAX_PDF_PAGES = 100
# Characters of one file's text: some 250k tokens, more than any open model's window holds.
MAX_FILE_CHARS = 1_000_000

FileKind = Literal["text", "pdf"]

_PDF_MEDIA_TYPE = "application/pdf"
_TEXT_MEDIA_TYPES = frozenset(
    (
        "application/json", "application/ld+json", "application/x-ndjson", "application/jsonl",
        "application/xml", "application/xhtml+xml", "application/javascript", "application/x-javascript",
        "application/ecmascript", "application/typescript", "application/x-typescript", "application/x-sh",
        "application/x-shellscript", "application/sql", "application/x-sql", "application/yaml",
        "application/x-yaml", "application/toml", "application/x-toml", "application/csv",
        "application/graphql", "application/x-httpd-php", "application/x-perl", "application/x-ruby",
        "application/x-tex", "application/x-latex", "application/rtf",
    )
)  # fmt: skip
_TEXT_SUFFIXES = ("+json", "+xml", "+yaml")
# Media types that say nothing of the content: the file name decides, else the bytes.
_GENERIC_MEDIA_TYPES = frozenset(
    ("", "application/octet-stream", "binary/octet-stream", "application/unknown")
)
_TEXT_EXTENSIONS = frozenset(
    (
        "txt", "text", "md", "markdown", "rst", "adoc", "org", "csv", "tsv", "json", "jsonl", "ndjson",
        "json5", "yaml", "yml", "toml", "ini", "cfg", "conf", "properties", "env", "xml", "html", "htm",
        "xhtml", "css", "scss", "sass", "less", "svg", "js", "mjs", "cjs", "jsx", "ts", "tsx", "mts", "cts",
        "vue", "svelte", "astro", "py", "pyi", "ipynb", "rb", "go", "rs", "java", "kt", "kts", "scala",
        "groovy", "gradle", "c", "h", "cc", "cpp", "cxx", "hpp", "hh", "hxx", "cs", "fs", "swift", "m",
        "mm", "php", "pl", "pm", "r", "jl", "lua", "dart", "ex", "exs", "erl", "hrl", "hs", "ml", "mli",
        "clj", "cljs", "el", "lisp", "scm", "vim", "zig", "nim", "sol", "asm", "s", "sql", "sh", "bash",
        "zsh", "fish", "ps1", "bat", "cmd", "tex", "bib", "log", "diff", "patch", "proto", "graphql",
        "gql", "tf", "hcl", "nix", "cmake", "mk", "dockerfile", "lock", "gitignore", "editorconfig",
        "rtf", "srt", "vtt",
    )
)  # fmt: skip
_TEXT_NAMES = frozenset(("makefile", "dockerfile", "readme", "license", "copying", "authors", "changelog"))
_UTF8 = frozenset(("utf-8", "utf8", "us-ascii", "ascii"))
_NAME_UNSAFE = re.compile(r"[\x00-\x1f\x7f]")
_NAME_CHARS = 200


def check_file_part(part: Mapping[str, Any], param: str) -> str:
    """The `file_data` of the `input_file` part at `param`, without reading it (cheap: for a
    whole history checked every turn). Raises InvalidRequest for a part that names its file
    in a way the gateway cannot follow, or not at all."""
    data = part.get("file_data")
    if data:
        return str(data)
    if part.get("file_id"):
        _refuse(param, "names a file_id, and the gateway has no files API; send the file in 'file_data'")
    if part.get("file_url"):
        _refuse(param, "names a file_url, and the gateway fetches nothing; send the file in 'file_data'")
    raise InvalidRequest(f"Missing required parameter: '{param}.file_data'.", param=f"{param}.file_data")


def file_text(part: Mapping[str, Any], param: str) -> str:
    """The text block a model reads for the `input_file` part at `param` (validated on input:
    its fields are strings when present). Raises InvalidRequest naming the part for a file
    that cannot be read as text or is past a bound."""
    data = check_file_part(part, param)
    name = _display_name(part.get("filename"))
    media_type, charset, raw = _decode(data, param)
    kind = _kind(media_type, part.get("filename"), raw, param)
    if kind == "pdf":
        pages = _pdf_pages(raw, param)
        body = "\n".join(f"[page {number}]\n{text}" for number, text in enumerate(pages, 1))
        count = f"{len(pages)} page" + ("" if len(pages) == 1 else "s")
        head = f"--- file: {name} (PDF, {count}) ---"
    else:
        body = _text(raw, charset, param)
        head = f"--- file: {name} ---"
    if not body.endswith("\n"):
        body += "\n"
    return f"{head}\n{body}--- end of {name} ---"


def pdf_bytes(part: Mapping[str, Any], param: str) -> bytes | None:
    """The bytes of the `input_file` part at `param` when it is a PDF, for an upstream that
    reads PDFs itself (Anthropic's `document` blocks); None for a text file (then `file_text`).
    Raises InvalidRequest as `file_text` does for a part it cannot decode, a binary kind, or a
    file past MAX_FILE_BYTES."""
    data = check_file_part(part, param)
    media_type, _, raw = _decode(data, param)
    return raw if _kind(media_type, part.get("filename"), raw, param) == "pdf" else None


def _refuse(param: str, why: str, code: str = Code.UNSUPPORTED_FILE) -> NoReturn:
    raise InvalidRequest(f"'{param}' {why}.", param=param, code=code)


def _display_name(filename: Any) -> str:
    if not isinstance(filename, str) or not filename.strip():
        return "file"
    name = _NAME_UNSAFE.sub(" ", filename).strip()
    return name if len(name) <= _NAME_CHARS else name[: _NAME_CHARS - 3] + "..."


def _decode(data: str, param: str) -> tuple[str, str | None, bytes]:
    """The media type ('' when not said), the charset named, and the bytes of `file_data`:
    a `data:` URL (base64 or percent-encoded) or bare base64."""
    media_type, charset, encoded = "", None, True
    payload = data
    if data[:5].lower() == "data:":
        header, comma, payload = data[5:].partition(",")
        if not comma:
            _refuse(f"{param}.file_data", "is a data: URL without a comma before its data")
        params = [p.strip() for p in header.split(";")]
        media_type = params[0].lower()
        encoded = len(params) > 1 and params[-1].lower() == "base64"
        for extra in params[1:]:
            key, _, value = extra.partition("=")
            if key.strip().lower() == "charset" and value:
                charset = value.strip().strip('"').lower()
    # A cheap bound first, so that a huge payload is not decoded only to be refused.
    decoded_size = len(payload) * 3 // 4 if encoded else len(payload) // 3
    if decoded_size > MAX_FILE_BYTES:
        _too_large(param, f"is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB")
    raw = _base64(payload, param) if encoded else unquote_to_bytes(payload)
    if len(raw) > MAX_FILE_BYTES:
        _too_large(param, f"is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB")
    return media_type, charset, raw


def _base64(payload: str, param: str) -> bytes:
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        pass
    cleaned = "".join(payload.split())  # line-wrapped base64, missing padding
    cleaned += "=" * (-len(cleaned) % 4)
    try:
        return base64.b64decode(cleaned, validate=True)
    except (binascii.Error, ValueError):
        _refuse(f"{param}.file_data", "is neither a data: URL nor base64")


def _too_large(param: str, why: str) -> NoReturn:
    _refuse(param, why + "; send a smaller file or the part of it that matters", Code.FILE_TOO_LARGE)


def _kind(media_type: str, filename: Any, raw: bytes, param: str) -> FileKind:
    """What the file is: its media type says, else its name, else its first bytes."""
    if media_type == _PDF_MEDIA_TYPE:
        return "pdf"
    textual = media_type.startswith("text/") or media_type.endswith(_TEXT_SUFFIXES)
    if textual or media_type in _TEXT_MEDIA_TYPES:
        return "text"
    if media_type not in _GENERIC_MEDIA_TYPES:
        _refuse_binary(param, media_type)
    by_name = _kind_by_name(filename)
    if by_name is not None:
        return by_name
    if raw.startswith(b"%PDF-"):
        return "pdf"
    if media_type == "" and b"\x00" not in raw:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            return "text"
    _refuse_binary(param, media_type or "unknown")


def _kind_by_name(filename: Any) -> FileKind | None:
    if not isinstance(filename, str):
        return None
    base = filename.replace("\\", "/").rsplit("/", 1)[-1].lower()
    stem, dot, extension = base.rpartition(".")
    if not dot:
        return "text" if base in _TEXT_NAMES else None
    if extension == "pdf":
        return "pdf"
    return "text" if extension in _TEXT_EXTENSIONS or (not stem and extension) else None


def _refuse_binary(param: str, media_type: str) -> NoReturn:
    hint = "send images as input_image parts" if media_type.startswith("image/") else "send its text instead"
    _refuse(
        param,
        f"is a file of type '{media_type[:80]}', which cannot be read as text (the gateway reads text files "
        f"and PDFs); {hint}",
    )


def _text(raw: bytes, charset: str | None, param: str) -> str:
    encoding = "utf-8-sig" if charset is None or charset in _UTF8 else charset
    try:
        codecs.lookup(encoding)
    except LookupError:
        _refuse(param, f"names the charset '{encoding[:40]}', which the gateway does not know")
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError:
        _refuse(param, f"is not valid {'UTF-8' if encoding == 'utf-8-sig' else encoding} text")
    if "\x00" in text:
        _refuse(param, "holds NUL characters: it is a binary file, not text")
    if len(text) > MAX_FILE_CHARS:
        _too_large(param, f"holds more than {MAX_FILE_CHARS} characters")
    return text


def _pdf_pages(raw: bytes, param: str) -> list[str]:
    """The text of each page. Raises InvalidRequest for a PDF that cannot be read, is
    encrypted, is past a bound, or has no text at all."""
    from pypdf import PdfReader  # on first use: ~14 MB a gateway that reads no PDF never holds

    pages: list[str] = []
    try:
        reader = PdfReader(io.BytesIO(raw), strict=False)
        if reader.is_encrypted and not _opens_without_password(reader):
            _refuse(param, "is an encrypted PDF; send it unencrypted")
        count = len(reader.pages)
        if count > MAX_PDF_PAGES:
            _too_large(param, f"is a PDF of {count} pages, more than the {MAX_PDF_PAGES} the gateway reads")
        chars = 0
        for page in reader.pages:
            text = page.extract_text() or ""
            chars += len(text)
            if chars > MAX_FILE_CHARS:
                _too_large(param, f"holds more than {MAX_FILE_CHARS} characters of text")
            pages.append(text.strip())
    except InvalidRequest:
        raise
    except Exception:  # hostile or damaged input to a third-party parser: any failure is the file's
        _refuse(param, "could not be read as a PDF")
    if not any(pages):
        _refuse(
            param,
            "is a PDF with no text in it (a scan?); the gateway cannot read text from images. Send its "
            "text, or its pages as input_image parts",
            Code.FILE_WITHOUT_TEXT,
        )
    return pages


def _opens_without_password(reader: PdfReader) -> bool:
    """Whether an encrypted PDF opens with the empty password (many are only "protected")."""
    try:
        return bool(reader.decrypt(""))
    except Exception:  # AES without the optional `cryptography` package, a damaged dictionary
        return False
