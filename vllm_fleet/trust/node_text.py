"""Text from a node (or a bundle, a scrape, a file) shown as data: no terminal escape, no invalid XML.

A node controls what it answers: a host name, a ``/version``, a model id, a label, an error message. Printed as is,
an ESC sequence in it recolours or retitles the auditor's terminal, hides a line or moves the cursor, and a control
character makes a JUnit report not well-formed XML. Here:

- :func:`printable` writes every character a terminal acts on as a visible escape: C0 controls (ESC, CR, TAB,
  NUL, BEL, …; newline too unless asked to keep it), DEL and C1 controls (``\\x9b`` is CSI on some terminals) as
  ``\\x1b``; the bidirectional overrides and line separators that reorder or break what is shown as ``\\u202e``;
  a lone surrogate, as ``surrogateescape`` decoding leaves an undecodable byte, as that byte (``\\udcff`` →
  ``\\xff``), and any other lone surrogate as ``\\ud800``.
- :func:`xml_safe` makes any string legal XML 1.0 character data (and attribute values): what XML 1.0 forbids
  (C0 but tab, newline and carriage return; lone surrogates; U+FFFE and U+FFFF) and the controls a viewer would
  act on (DEL, C1) are written the same visible way; ElementTree escapes ``<``, ``&`` and quotes itself.

Both are idempotent on ordinary text: letters, accents, CJK and emoji pass unchanged. A backslash is not escaped
(a Windows path stays readable), so the escapes are for a reader, not to be decoded back.
"""

from __future__ import annotations

import re
from xml.etree import ElementTree as ET

_BIDI_AND_SEPARATORS = "\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_TERMINAL = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI_AND_SEPARATORS}\ud800-\udfff\ufffe\uffff]")
_TERMINAL_KEEP_NEWLINE = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f{_BIDI_AND_SEPARATORS}\ud800-\udfff\ufffe\uffff]")
_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape's stand-in for the undecodable byte code - 0xDC00
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def printable(text: str, *, newlines: bool = False) -> str:
    """``text`` with every control, bidi override and lone surrogate shown as an escape (``\\x1b``); newlines kept
    only when ``newlines``."""
    return (_TERMINAL_KEEP_NEWLINE if newlines else _TERMINAL).sub(_escape, text)


def xml_safe(text: str) -> str:
    """``text`` as legal XML 1.0 character data: forbidden and control characters shown as escapes (``\\x1b``)."""
    return _XML.sub(_escape, text)


def xml_safe_tree(root: ET.Element) -> ET.Element:
    """Every attribute value, text and tail under ``root`` made :func:`xml_safe` (in place); ``root`` back."""
    for element in root.iter():
        element.attrib = {xml_safe(k): xml_safe(v) for k, v in element.attrib.items()}
        if element.text is not None:
            element.text = xml_safe(element.text)
        if element.tail is not None:
            element.tail = xml_safe(element.tail)
    return root
