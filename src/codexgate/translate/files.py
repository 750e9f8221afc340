"""`input_file` content parts as the text a model reads. Pure: decoding in memory, no I/O.

A Chat Completions upstream has no file input, so a file a client sends must become text or be
refused; it is never dropped. What is read:

- text files (`text/*`, JSON, XML, YAML, CSV, source code...), known by the data URL's media
  type, else by the file name, else because the bytes are UTF-8 with no NUL in them;
- PDFs, their text layer extracted with PDFium (pypdfium2, imported on first use: serving
  without files never loads it), the reader Chrome uses: it opens what browsers open, a file
  with no cross-reference table or one with wrong offsets (it rebuilds the table by scanning
  the objects), incremental updates (the latest revision), encryption with an empty user
  password ("protected" files).

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

Reading a file costs CPU (base64, and for a PDF about 1 ms a page of plain text with PDFium):
a backend reads them off the event loop, ahead of the translation, with a `FileTexts` (the
translators stay synchronous: they ask it for each part's text). `file_text` reads one part
where it is called.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import codecs
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any, Literal, NoReturn, TypeVar
from urllib.parse import unquote_to_bytes

from codexgate.errors import Code, InvalidRequest

__all__ = [
    "MAX_FILE_BYTES", "MAX_FILE_CHARS", "MAX_PDF_PAGES", "FileTexts", "check_file_part", "file_text",
    "pdf_bytes", "with_files",
]  # fmt: skip

T = TypeVar("T")

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
    its fields are strings when present), read now. Raises InvalidRequest naming the part for
    a file that cannot be read as text or is past a bound."""
    data = check_file_part(part, param)
    try:
        return _block(part, data)
    except _Refused as refused:
        raise refused.at(param) from None


class FileTexts:
    """The text blocks of a request's `input_file` parts, read ahead of its translation and off
    the event loop. A translator asks `text(part, param)`: a part read already gives its block
    (or raises its refusal, naming `param`); a part not read yet is noted and gives "", which
    makes that translation a first pass to throw away: the backend reads what was noted
    (`read`, in a worker thread: `with_files`) and translates again. So only the files a
    translation reads are read (not those of a history it resumes from). Parts are known by
    identity: the request holds them while it is translated."""

    __slots__ = ("_noted", "_read")

    def __init__(self) -> None:
        self._read: dict[int, tuple[Mapping[str, Any], str | _Refused]] = {}
        self._noted: dict[int, Mapping[str, Any]] = {}

    @property
    def unread(self) -> bool:
        """Whether a translation asked for a part not read yet (its result is to be thrown away)."""
        return bool(self._noted)

    def text(self, part: Mapping[str, Any], param: str) -> str:
        """`file_text(part, param)` as read ahead; "" for a part not read yet (noted). Raises
        InvalidRequest as `file_text` does (at once for what needs no reading)."""
        check_file_part(part, param)
        found = self._read.get(id(part))
        if found is None or found[0] is not part:
            self._noted[id(part)] = part
            return ""
        result = found[1]
        if isinstance(result, _Refused):
            raise result.at(param)
        return result

    def read(self) -> None:
        """Read every part noted: CPU work (base64, PDF parsing), for a worker thread."""
        noted, self._noted = self._noted, {}
        for key, part in noted.items():
            result: str | _Refused
            try:
                result = _block(part, str(part.get("file_data")))
            except _Refused as refused:
                result = refused
            self._read[key] = (part, result)


async def with_files(files: FileTexts, translate: Callable[[], T]) -> T:
    """`translate()`, which reads its files through `files`, once every file it asks for is
    read: what is noted is read in a worker thread first, and a pass that asks for files not
    read yet is run again once they are. Raises what `translate` raises."""
    while True:
        if files.unread:
            await asyncio.to_thread(files.read)
        result = translate()
        if not files.unread:
            return result


class _Refused(Exception):
    """Why a file cannot be read, before the place of its part is known (a FileTexts reads
    ahead of the translation that names it). `field`: the part's field at fault, if any."""

    def __init__(self, why: str, code: str = Code.UNSUPPORTED_FILE, field: str = "") -> None:
        super().__init__(why)
        self.why, self.code, self.field = why, code, field

    def at(self, param: str) -> InvalidRequest:
        where = param + self.field
        return InvalidRequest(f"'{where}' {self.why}.", param=where, code=self.code)


def _block(part: Mapping[str, Any], data: str) -> str:
    """The text block of a part whose `file_data` is `data`. Raises _Refused."""
    name = _display_name(part.get("filename"))
    media_type, charset, raw = _decode(data)
    kind = _kind(media_type, part.get("filename"), raw)
    if kind == "pdf":
        pages = _pdf_pages(raw)
        body = "\n".join(f"[page {number}]\n{text}" for number, text in enumerate(pages, 1))
        count = f"{len(pages)} page" + ("" if len(pages) == 1 else "s")
        head = f"--- file: {name} (PDF, {count}) ---"
    else:
        body = _text(raw, charset)
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
    try:
        media_type, _, raw = _decode(data)
        return raw if _kind(media_type, part.get("filename"), raw) == "pdf" else None
    except _Refused as refused:
        raise refused.at(param) from None


def _refuse(param: str, why: str, code: str = Code.UNSUPPORTED_FILE) -> NoReturn:
    raise InvalidRequest(f"'{param}' {why}.", param=param, code=code)


def _display_name(filename: Any) -> str:
    if not isinstance(filename, str) or not filename.strip():
        return "file"
    name = _NAME_UNSAFE.sub(" ", filename).strip()
    return name if len(name) <= _NAME_CHARS else name[: _NAME_CHARS - 3] + "..."


def _decode(data: str) -> tuple[str, str | None, bytes]:
    """The media type ('' when not said), the charset named, and the bytes of `file_data`:
    a `data:` URL (base64 or percent-encoded) or bare base64."""
    media_type, charset, encoded = "", None, True
    payload = data
    if data[:5].lower() == "data:":
        header, comma, payload = data[5:].partition(",")
        if not comma:
            raise _Refused("is a data: URL without a comma before its data", field=".file_data")
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
        _too_large(f"is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB")
    raw = _base64(payload) if encoded else unquote_to_bytes(payload)
    if len(raw) > MAX_FILE_BYTES:
        _too_large(f"is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB")
    return media_type, charset, raw


def _base64(payload: str) -> bytes:
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        pass
    cleaned = "".join(payload.split())  # line-wrapped base64, missing padding
    cleaned += "=" * (-len(cleaned) % 4)
    try:
        return base64.b64decode(cleaned, validate=True)
    except (binascii.Error, ValueError):
        raise _Refused("is neither a data: URL nor base64", field=".file_data") from None


def _too_large(why: str) -> NoReturn:
    raise _Refused(why + "; send a smaller file or the part of it that matters", Code.FILE_TOO_LARGE)


def _kind(media_type: str, filename: Any, raw: bytes) -> FileKind:
    """What the file is: its media type says, else its name, else its first bytes."""
    if media_type == _PDF_MEDIA_TYPE:
        return "pdf"
    textual = media_type.startswith("text/") or media_type.endswith(_TEXT_SUFFIXES)
    if textual or media_type in _TEXT_MEDIA_TYPES:
        return "text"
    if media_type not in _GENERIC_MEDIA_TYPES:
        _refuse_binary(media_type)
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
    _refuse_binary(media_type or "unknown")


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


def _refuse_binary(media_type: str) -> NoReturn:
    hint = "send images as input_image parts" if media_type.startswith("image/") else "send its text instead"
    raise _Refused(
        f"is a file of type '{media_type[:80]}', which cannot be read as text (the gateway reads text files "
        f"and PDFs); {hint}"
    )


def _text(raw: bytes, charset: str | None) -> str:
    encoding = "utf-8-sig" if charset is None or charset in _UTF8 else charset
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise _Refused(f"names the charset '{encoding[:40]}', which the gateway does not know") from None
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError:
        raise _Refused(f"is not valid {'UTF-8' if encoding == 'utf-8-sig' else encoding} text") from None
    if "\x00" in text:
        raise _Refused("holds NUL characters: it is a binary file, not text")
    if len(text) > MAX_FILE_CHARS:
        _too_large(f"holds more than {MAX_FILE_CHARS} characters")
    return text


# PDFium is not thread-safe, not even across documents: one call at a time in the process
# (requests read their files in worker threads).
_PDFIUM = threading.Lock()
_LOCKED = (4, 5)  # PDFium's FPDF_ERR_PASSWORD (a password is needed), FPDF_ERR_SECURITY


def _pdf_pages(raw: bytes) -> list[str]:
    """The text of each page. Raises _Refused for a PDF that cannot be read, is encrypted
    with a password, is past a bound, or has no text at all."""
    import pypdfium2  # type: ignore[import-untyped]  # on first use: ~15 MB a gateway reading no PDF never holds

    with _PDFIUM:
        try:
            document = pypdfium2.PdfDocument(raw)  # tries the empty password itself
        except Exception as exc:  # hostile or damaged input to a parser: any failure is the file's
            if getattr(exc, "err_code", None) in _LOCKED:
                raise _Refused("is an encrypted PDF; send it unencrypted") from None
            raise _Refused("could not be read as a PDF") from None
        try:
            pages = _page_texts(document)
        except _Refused:
            raise
        except Exception:  # a page PDFium cannot load
            raise _Refused("could not be read as a PDF") from None
        finally:
            document.close()  # here, under the lock: not by a finalizer on some other thread
    if not any(pages):
        raise _Refused(
            "is a PDF with no text in it (a scan?); the gateway cannot read text from images. Send its "
            "text, or its pages as input_image parts",
            Code.FILE_WITHOUT_TEXT,
        )
    return pages


def _page_texts(document: Any) -> list[str]:
    """Each page's text (PDFium's line ends made newlines). Raises _Refused past a bound."""
    count = len(document)
    if count > MAX_PDF_PAGES:
        _too_large(f"is a PDF of {count} pages, more than the {MAX_PDF_PAGES} the gateway reads")
    pages: list[str] = []
    chars = 0
    for index in range(count):
        page = document[index]
        textpage = page.get_textpage()
        try:
            text = textpage.get_text_bounded()
        finally:
            textpage.close()
            page.close()
        chars += len(text)
        if chars > MAX_FILE_CHARS:
            _too_large(f"holds more than {MAX_FILE_CHARS} characters of text")
        pages.append(text.replace("\r\n", "\n").replace("\r", "\n").strip())
    return pages
