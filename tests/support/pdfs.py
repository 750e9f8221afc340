"""Small real PDFs, written byte by byte for the tests of file inputs (no PDF library involved,
so the reader is tested against a file it did not write).

Besides a well-formed file (`text_pdf`), the shapes PDF readers meet in the wild and browsers
open: a hand-made file with no cross-reference table at all (`hand_made_pdf`, as in the Open
Responses compliance test `file-input`), one whose table points at the wrong bytes
(`wrong_offsets_pdf`), one edited by an incremental update (`updated_pdf`), and one encrypted
with an empty user password (`encrypted_pdf`: opens without asking, as "protected" files do).
"""

from __future__ import annotations

import hashlib
import re

# The 32 bytes a password is padded with (PDF 1.7, 7.6.3.3, Algorithm 2).
_PAD = bytes.fromhex("28bf4e5e4e758a4164004e56fffa01082e2e00b6d0683e802f0ca9fe6453697a")


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def _content(lines: list[str]) -> bytes:
    """A page's content stream drawing each line as text in Helvetica (empty: no text)."""
    if not lines:
        return b""
    ops = ["BT /F1 12 Tf 72 720 Td 14 TL"] + [f"({_escape(line)}) '" for line in lines] + ["ET"]
    return "\n".join(ops).encode("latin-1")


def _stream(data: bytes) -> bytes:
    return f"<< /Length {len(data)} >>\nstream\n".encode() + data + b"\nendstream"


def _objects(pages: list[list[str]]) -> list[bytes]:
    """Objects 1 (catalogue), 2 (pages), 3 (font), then a page and its content for each page:
    page i is object 4 + 2i, its content 5 + 2i."""
    count = len(pages)
    objects: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids ["
        + b" ".join(f"{4 + 2 * i} 0 R".encode() for i in range(count))
        + f"] /Count {count} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for index, lines in enumerate(pages):
        content_number = 5 + 2 * index
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
            + f"/Contents {content_number} 0 R >>".encode()
        )
        objects.append(_stream(_content(lines)))
    return objects


def _body(objects: list[bytes], start: int = 1) -> tuple[bytearray, list[int]]:
    """The header and the numbered objects; the offset of each."""
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    return out, offsets


def _xref(offsets: list[int], first: int = 0) -> bytes:
    """A classic cross-reference section: the free head (when `first` is 0), then `offsets`."""
    rows = [b"0000000000 65535 f \n"] if first == 0 else []
    rows += [f"{offset:010d} 00000 n \n".encode() for offset in offsets]
    start = 0 if first == 0 else first
    return f"xref\n{start} {len(rows)}\n".encode() + b"".join(rows)


def text_pdf(pages: list[list[str]]) -> bytes:
    """A PDF of one page per entry, each line of it drawn as text in Helvetica; an empty entry
    is a page with no text (what a scan's pages look like to a text extractor)."""
    objects = _objects(pages)
    out, offsets = _body(objects)
    xref = len(out)
    out += _xref(offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def hand_made_pdf(lines: list[str], *, trailer: bool = True) -> bytes:
    """A one-page PDF as people write one by hand: its objects and a trailer naming the
    catalogue, with no cross-reference table and no `startxref` (`trailer=False`: not even
    the trailer, the objects and `%%EOF`). A reader finds the objects by scanning for them."""
    out, _ = _body(_objects([lines]))
    if trailer:
        out += b"trailer\n<< /Root 1 0 R >>\n"
    out += b"%%EOF\n"
    return bytes(out)


def wrong_offsets_pdf(pages: list[list[str]]) -> bytes:
    """`text_pdf`, with every offset in its cross-reference table 7 bytes off (as a file
    edited in a text editor, or re-saved with other line endings, has them); `startxref`
    still finds the table."""
    objects = _objects(pages)
    out, offsets = _body(objects)
    xref = len(out)
    out += _xref([offset + 7 for offset in offsets])
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def updated_pdf(first: list[str], latest: list[str]) -> bytes:
    """A one-page PDF saved twice: drawing `first`, then an incremental update appended that
    replaces the page's content with `latest` (a second body, table and trailer, the new
    trailer's /Prev naming the first table). A reader shows `latest`."""
    original = text_pdf([first])
    previous = int(re.findall(rb"startxref\n(\d+)", original)[-1])
    size = len(_objects([first])) + 1
    out = bytearray(original)
    content_number = 5
    offset = len(out)
    out += f"{content_number} 0 obj\n".encode() + _stream(_content(latest)) + b"\nendobj\n"
    xref = len(out)
    out += _xref([offset], first=content_number)
    out += f"trailer\n<< /Size {size} /Root 1 0 R /Prev {previous} >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def encrypted_pdf(pages: list[list[str]], user_password: str = "", owner_password: str = "owner") -> bytes:
    """`text_pdf` encrypted by the standard security handler (RC4, 128-bit key, revision 3).
    With an empty user password (the default) a reader opens it without asking for one, and
    must decrypt its content streams to read the text; with another, it cannot open it."""
    file_id = hashlib.md5(b"codexgate test file").digest()
    permissions = -4  # everything allowed
    user_bytes = user_password.encode("latin-1")
    owner = _owner_entry(owner_password.encode("latin-1"), user_bytes)
    key = _file_key(user_bytes, owner, permissions, file_id)
    user = _user_entry(key, file_id)
    objects = _objects(pages)
    encrypted: list[bytes] = []
    for number, body in enumerate(objects, 1):
        if b"stream\n" in body:  # a content stream: its data encrypted with the object's key
            data = body.split(b"stream\n", 1)[1].rsplit(b"\nendstream", 1)[0]
            body = _stream(_rc4(_object_key(key, number), data))
        encrypted.append(body)
    encrypt_number = len(objects) + 1
    encrypted.append(
        f"<< /Filter /Standard /V 2 /R 3 /Length 128 /P {permissions} /O <{owner.hex()}> "
        f"/U <{user.hex()}> >>".encode()
    )
    out, offsets = _body(encrypted)
    xref = len(out)
    out += _xref(offsets)
    out += (
        f"trailer\n<< /Size {len(encrypted) + 1} /Root 1 0 R /Encrypt {encrypt_number} 0 R "
        f"/ID [<{file_id.hex()}> <{file_id.hex()}>] >>\nstartxref\n{xref}\n%%EOF\n"
    ).encode()
    return bytes(out)


def _rc4(key: bytes, data: bytes) -> bytes:
    state = list(range(256))
    j = 0
    for i in range(256):
        j = (j + state[i] + key[i % len(key)]) % 256
        state[i], state[j] = state[j], state[i]
    out = bytearray()
    i = j = 0
    for byte in data:
        i = (i + 1) % 256
        j = (j + state[i]) % 256
        state[i], state[j] = state[j], state[i]
        out.append(byte ^ state[(state[i] + state[j]) % 256])
    return bytes(out)


def _padded(password: bytes) -> bytes:
    return (password + _PAD)[:32]


def _owner_entry(owner_password: bytes, user_password: bytes) -> bytes:
    """/O for revision 3 (Algorithm 3)."""
    digest = hashlib.md5(_padded(owner_password)).digest()
    for _ in range(50):
        digest = hashlib.md5(digest).digest()
    value = _rc4(digest, _padded(user_password))
    for round_ in range(1, 20):
        value = _rc4(bytes(b ^ round_ for b in digest), value)
    return value


def _file_key(user_password: bytes, owner: bytes, permissions: int, file_id: bytes) -> bytes:
    """The file's 128-bit key (Algorithm 2, revision 3)."""
    digest = hashlib.md5(
        _padded(user_password) + owner + (permissions & 0xFFFFFFFF).to_bytes(4, "little") + file_id
    ).digest()
    for _ in range(50):
        digest = hashlib.md5(digest).digest()
    return digest


def _user_entry(key: bytes, file_id: bytes) -> bytes:
    """/U for revision 3 (Algorithm 5): 16 bytes that prove the key, then 16 of padding."""
    value = _rc4(key, hashlib.md5(_PAD + file_id).digest())
    for round_ in range(1, 20):
        value = _rc4(bytes(b ^ round_ for b in key), value)
    return value + bytes(16)


def _object_key(key: bytes, number: int, generation: int = 0) -> bytes:
    """The key of one object's strings and streams (Algorithm 1)."""
    digest = hashlib.md5(key + number.to_bytes(3, "little") + generation.to_bytes(2, "little")).digest()
    return digest[: min(len(key) + 5, 16)]
