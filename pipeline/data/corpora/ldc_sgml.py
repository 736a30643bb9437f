"""LDC SGML news documents: Gigaword and TREC/DUC newswire files, parsed into plain-text documents.

The formats (shared by :mod:`pipeline.data.corpora.gigaword` ``format: sgml``, :mod:`pipeline.data.corpora.duc`
and :mod:`pipeline.data.corpora.gigaword_pointers`):

* LDC Gigaword: ``<DOC id=... type="story">``, ``<HEADLINE>``, ``<TEXT>`` of ``<P>`` paragraphs;
  the files are gzipped (``.gz``, read transparently);
* TREC/DUC newswire: ``<DOC>`` with ``<DOCNO>``, a headline in ``<HEAD>``, ``<HL>`` or
  ``<HEADLINE>`` (WSJ's ``<HL>`` byline and FT's date prefix removed), ``<TEXT>`` with or without
  ``<P>`` (paragraphs then split at blank or indented lines), SJMN's ``<LEADPARA>`` (the lead its
  ``<TEXT>`` omits).

Two steps, so a reader can parse documents in worker processes: :func:`iter_doc_blocks` cuts a
file into raw ``<DOC>`` byte blocks (:class:`DocBlock`), checking the structure; :func:`parse_doc`
turns one block into a :class:`Doc` (id, type, headline, paragraphs: tags removed, entities
decoded, whitespace collapsed). :func:`iter_sgml_docs` does both.

Malformed files raise ``CorpusFormatError`` at ``file:line``: an unclosed or stray ``<DOC> <DOCNO>
<HEADLINE> <HEAD> <HL> <TEXT> <P>``, text outside ``<DOC>``, a document over ``MAX_DOC_BYTES``
(16 MiB: a missing ``</DOC>``), a file without any ``<DOC>``, a truncated or corrupt ``.gz``. A
document whose bytes do not decode raises ``UnicodeDecodeError`` from :func:`parse_doc` (readers
quarantine it); :func:`check_block` finds a document's NUL characters, over-long lines and tokens
(``pipeline.data.corpora.inputs.TextLimits``) at their own line, for readers to quarantine. Files are
opened by :func:`pipeline.data.corpora.inputs.open_input` (gzip by name or magic bytes); CRLF line ends
read as LF.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pipeline.data.corpora.common import CorpusFormatError, Quarantined
from pipeline.data.corpora.inputs import GzipInput, TextLimits, open_input

MAX_DOC_BYTES = 16 << 20  # a <DOC> larger than this is a missing </DOC>, not a document


@dataclass(frozen=True)
class DocBlock:
    """The raw bytes of one ``<DOC>...</DOC>`` and where it starts (``path:line``)."""

    raw: bytes
    path: str
    line: int


@dataclass
class Doc:
    """One parsed document: id (``id=`` attribute or ``<DOCNO>``), Gigaword ``type`` (None for
    TREC), headline and paragraphs as plain text (tags removed, entities decoded, spaces collapsed)."""

    doc_id: str | None
    doc_type: str | None
    headline: str | None
    paragraphs: list[str]
    path: str
    line: int


_TRACKED_TAG = re.compile(rb"<(/?)(DOC|DOCNO|HEADLINE|HEAD|HL|TEXT|P)(?=[\s>])[^>]*>")


def open_binary(path: str | Path) -> IO[bytes] | GzipInput:
    """The file's bytes, gunzipped when it is gzip data (LDC ships Gigaword gzipped):
    :func:`pipeline.data.corpora.inputs.open_input`."""
    return open_input(path)


def check_block(block: DocBlock, limits: TextLimits, encoding: str = "utf-8") -> Quarantined | None:
    """The document quarantined at its first line with a NUL character, more than
    ``max_line_chars`` characters or a token over ``max_token_chars`` (``nul_byte``,
    ``line_too_long``, ``token_too_long``), or None. Undecodable bytes are replaced here (the
    ``invalid_utf8`` rule is :func:`parse_doc`'s)."""
    raw = block.raw
    if b"\x00" not in raw and max(map(len, raw.split(b"\n"))) <= min(limits.max_line_chars, limits.max_token_chars):
        return None  # bytes >= characters: no line can break a limit (the common case, checked in C)
    return limits.check_lines(raw.decode(encoding, "replace"), block.path, block.line)


def iter_doc_blocks(path: str | Path) -> Iterator[DocBlock]:
    """Every ``<DOC>`` of an SGML file, checking that the structural tags nest and close.

    Tags are ASCII, so the scan works on bytes whatever the text encoding (decoding is per document,
    where a bad byte quarantines one document). The tracked tags are ``DOC DOCNO HEADLINE HEAD HL
    TEXT P``; others (``<DATELINE>``, ``<F P=105>`` ...) are content.
    """
    path = str(path)
    stack: list[tuple[str, int]] = []  # open tracked tags: (name, line)
    buf: list[bytes] = []
    size = docs = 0
    with open_binary(path) as fh:
        for lineno, line in enumerate(fh, start=1):
            if lineno == 1:
                line = line.removeprefix(codecs.BOM_UTF8)
            in_doc = bool(stack)
            if in_doc:
                buf.append(line)
                size += len(line)
                if size > MAX_DOC_BYTES:
                    raise CorpusFormatError(
                        path, stack[0][1], f"<DOC> larger than {MAX_DOC_BYTES:,} bytes (missing </DOC>?)"
                    )
            opened_doc = False
            if b"<" in line:
                for m in _TRACKED_TAG.finditer(line):
                    name = m.group(2).decode("ascii")
                    if not m.group(1):
                        if name == "DOC":
                            if stack:
                                _unclosed(path, stack[-1], f"<DOC> at line {lineno}")
                            buf, size, opened_doc = [line], len(line), True
                        elif not stack:
                            raise CorpusFormatError(path, lineno, f"<{name}> outside <DOC>")
                        elif stack[-1][0] == name:
                            _unclosed(path, stack[-1], f"another <{name}> at line {lineno}")
                        stack.append((name, lineno))
                        continue
                    if not stack or all(n != name for n, _ in stack):
                        raise CorpusFormatError(path, lineno, f"</{name}> without an open <{name}>")
                    if stack[-1][0] != name:
                        _unclosed(path, stack[-1], f"</{name}> at line {lineno}")
                    stack.pop()
                    if name == "DOC":
                        docs += 1
                        yield DocBlock(b"".join(buf), path, lineno - len(buf) + 1)
                        buf, size = [], 0
            if not in_doc and not opened_doc and line.strip():
                raise CorpusFormatError(path, lineno, "text outside <DOC> (not an SGML news file?)")
    if stack:
        _unclosed(path, stack[-1], "the end of the file")
    if not docs:
        raise CorpusFormatError(path, None, "no <DOC> element (not an SGML news file?)")


def _unclosed(path: str, tag: tuple[str, int], reached: str) -> None:
    name, line = tag
    raise CorpusFormatError(path, line, f"unclosed <{name}> (reached {reached})")


_DOC_OPEN = re.compile(r"<DOC\b([^>]*)>")
_ATTR = re.compile(r'(\w+)\s*=\s*"([^"]*)"')
_DOCNO = re.compile(r"<DOCNO>(.*?)</DOCNO>", re.S)
_HEADLINE = re.compile(r"<(HEADLINE|HL|HEAD)>(.*?)</\1>", re.S)
# Body text in document order: <TEXT>, and SJMN's <LEADPARA>, which holds the lead that its
# <TEXT> then omits.
_TEXT = re.compile(r"<(TEXT|LEADPARA)\b[^>]*>(.*?)</\1>", re.S)
_P = re.compile(r"<P\b[^>]*>(.*?)</P>", re.S)
_ANY_TAG = re.compile(r"<[^>]*>")
_ENTITY = re.compile(r"&(#\d+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);")
_KNOWN_ENTITIES = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'", "nbsp": " "}
# Paragraph breaks in <TEXT> without <P>: a blank line, an indented line (AP, NYT: 3 spaces or a
# tab), or SJMN's ";   " separator.
_PARA_BREAK = re.compile(r"\n[ \t]*\n|\n(?=[ \t])|;(?=[ \t]{2,})")
_FT_PREFIX = re.compile(r"^FT\s+\d{1,2}\s+[A-Z]{3}\s+\d{2}\s*/\s*")  # FT  02 JUN 93 / <headline>
_WSJ_RULE = re.compile(r"\n\s*@?\s*-{3,}.*", re.S)  # WSJ <HL>: a ---- line, then the byline
_WSJ_AT = re.compile(r"(?m)^\s*@\s*")  # WSJ <HL> continuation marks


def _entity(m: re.Match) -> str:
    """SGML entity -> text; TREC control codes (``&Cx1f; &QL; &UR;``) -> a space."""
    name = m.group(1)
    if name.startswith("#"):
        try:
            return chr(int(name[2:], 16) if name[1] in "xX" else int(name[1:]))
        except (ValueError, OverflowError):
            return " "
    return _KNOWN_ENTITIES.get(name.lower(), " ")


def clean_text(text: str) -> str:
    """Tags removed, entities decoded, whitespace collapsed to single spaces."""
    text = _ANY_TAG.sub(" ", text)
    if "&" in text:
        text = _ENTITY.sub(_entity, text)
    return " ".join(text.split())


def _clean_headline(text: str) -> str:
    text = _WSJ_RULE.sub("", _WSJ_AT.sub("", text))
    return _FT_PREFIX.sub("", clean_text(text))


def _paragraphs(body: str) -> list[str]:
    """Paragraphs of one ``<TEXT>`` body: the ``<P>`` elements and, between or without them,
    blocks separated by ``_PARA_BREAK``; empty ones dropped."""
    pieces = _P.split(body) if "<P" in body else [body]
    out: list[str] = []
    for i, piece in enumerate(pieces):
        parts = [piece] if i % 2 else _PARA_BREAK.split(piece)
        out.extend(p for p in map(clean_text, parts) if p)
    return out


def parse_doc(block: DocBlock, encoding: str = "utf-8") -> Doc:
    """Parse one document; ``UnicodeDecodeError`` if its bytes are not in ``encoding``."""
    text = block.raw.decode(encoding)
    if "\r" in text:
        text = text.replace("\r\n", "\n")  # CRLF files: paragraph breaks are blank lines
    attrs = dict(_ATTR.findall(m.group(1))) if (m := _DOC_OPEN.search(text)) else {}
    doc_id = attrs.get("id")
    if doc_id is None and (m := _DOCNO.search(text)):
        doc_id = clean_text(m.group(1)) or None
    headline = _clean_headline(m.group(2)) if (m := _HEADLINE.search(text)) else None
    paragraphs = [p for _, body in _TEXT.findall(text) for p in _paragraphs(body)]
    return Doc(doc_id, attrs.get("type"), headline or None, paragraphs, block.path, block.line)


def iter_sgml_docs(path: str | Path, encoding: str = "utf-8") -> Iterator[Doc]:
    """Every document of a Gigaword or TREC/DUC SGML file (``.gz`` too), in file order.

    Malformed structure raises ``CorpusFormatError`` at ``file:line`` (see :func:`iter_doc_blocks`),
    and so does a document that does not decode (readers quarantine it instead).
    """
    for block in iter_doc_blocks(path):
        try:
            yield parse_doc(block, encoding)
        except UnicodeDecodeError as err:
            raise CorpusFormatError(
                block.path, block.line, f"document is not {encoding}: {err.reason} at byte {err.start}"
            ) from err
