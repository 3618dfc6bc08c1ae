"""Java regular expressions (java.util.regex) read by Python's ``re``: the same meaning, or refused.

The prototype's patterns (topics, groups, topic properties, ACL rules) are Java's. Python's ``re``
shares most of the syntax, and this module accepts only that common part, as a Java matcher's
``matches()`` reads it (whole input, no flags). What the two read differently is refused with the
reason, never guessed at:

- Java-only syntax: ``\\Q...\\E``, ``\\p{...}``, ``\\h``, ``\\R``, ``\\X``, ``\\x{...}``, ``\\e``,
  ``\\cX``, ``\\k<name>``, class unions ``[a[bc]]`` and intersections ``[a-z&&[^e]]``, ``(?<name>...)``;
- Python-only syntax: ``(?P...)``, ``(?#...)``, ``(?(1)...)``, ``\\N{...}``, ``\\U...``, ``{,n}``;
- the same text with two meanings: ``\\v`` (Java: vertical whitespace; Python: one character),
  ``\\z``/``\\Z``, ``\\b``/``\\B``, octal and multi-digit back references, a ``{`` that is no
  repetition, ``]`` first in a class, possessive quantifiers and atomic groups (Python has them
  only from 3.11), flags other than ``i``, and a global flag past the start.

What is kept is translated where Java and Python differ quietly: ``\\d``, ``\\w``, ``\\s`` are
ASCII-only in Java (``re.ASCII``), Java's ``.`` matches no line terminator (``\\r``,
``\\u0085``, ``\\u2028``, ``\\u2029`` too, not only ``\\n``), and its ``$`` also matches
before any of them ending the input. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import NamedTuple

_DOT = "[^\\n\\r\\x85\\u2028\\u2029]"  # Java's '.' without DOTALL
# Java's '$' without MULTILINE: the end, or before a line terminator that ends the input (\r\n
# is one terminator: not between its two characters). Python's '$' knows only a final '\n'.
_DOLLAR = "(?:(?=\\r\\n\\Z)|(?<!\\r)(?=\\n\\Z)|(?=[\\r\\x85\\u2028\\u2029]\\Z)|\\Z)"
_HEX = frozenset("0123456789abcdefABCDEF")
_REPEAT = re.compile(r"\{(\d+)(,(\d*))?\}")
_SAME = frozenset("dDsSwWtnrfa")  # escapes both read alike (ASCII classes under re.ASCII)
_REASONS = {
    "Q": "quoting \\Q...\\E is Java-only: escape each character instead",
    "E": "quoting \\Q...\\E is Java-only: escape each character instead",
    "p": "Unicode classes \\p{...} are Java-only",
    "P": "Unicode classes \\P{...} are Java-only",
    "h": "\\h (horizontal whitespace) is Java-only",
    "H": "\\H is Java-only",
    "v": "\\v is vertical whitespace in Java but one character in Python",
    "V": "\\V is Java-only",
    "R": "\\R (any line break) is Java-only",
    "X": "\\X (grapheme cluster) is Java-only",
    "z": "\\z is Java's end of input, which Python 3.11 does not know",
    "Z": "\\Z is 'before a final line terminator' in Java but 'end of input' in Python",
    "G": "\\G is Java-only",
    "b": "word boundaries \\b differ between Java versions and Python",
    "B": "word boundaries \\B differ between Java versions and Python",
    "k": "named back references \\k<name> are Java-only",
    "e": "\\e is Java-only",
    "c": "control characters \\cX are Java-only",
    "N": "\\N{...} differs between Java and Python",
    "U": "\\U is Python-only",
    "0": "octal escapes read a different number of digits in Java and Python",
}


class JavaPatternError(ValueError):
    """A pattern refused: Java would not compile it, or Python would read it differently."""

    def __init__(self, pattern: str, reason: str) -> None:
        super().__init__(reason)
        self.pattern = pattern
        self.reason = reason


def _escape(p: str, i: int, in_class: bool) -> tuple[str, int]:
    """The escape at ``p[i] == '\\'``: (its Python source, the index after it)."""
    if i + 1 >= len(p):
        raise JavaPatternError(p, "a pattern cannot end with a lone '\\'")
    c = p[i + 1]
    if c in _SAME or (c == "A" and not in_class):
        return p[i : i + 2], i + 2
    if c in "xu":
        n = 2 if c == "x" else 4
        digits = p[i + 2 : i + 2 + n]
        if len(digits) != n or not set(digits) <= _HEX:
            raise JavaPatternError(p, f"\\{c} takes exactly {n} hex digits" + (" (\\x{...} is Java-only)" if c == "x" else ""))
        return p[i : i + 2 + n], i + 2 + n
    if c in "123456789":
        if in_class:
            raise JavaPatternError(p, f"\\{c} in a character class differs between Java and Python")
        if i + 2 < len(p) and p[i + 2].isdigit():
            raise JavaPatternError(p, "back references of more than one digit differ between Java and Python")
        return p[i : i + 2], i + 2
    if c in _REASONS:
        raise JavaPatternError(p, _REASONS[c])
    if c.isascii() and c.isalnum():
        raise JavaPatternError(p, f"unknown escape \\{c}")
    return p[i : i + 2], i + 2  # an escaped symbol is itself in both


def _char_class(p: str, i: int) -> tuple[str, int]:
    """The class opening at ``p[i] == '['``: (its Python source, the index after it)."""
    out, j = ["["], i + 1
    if j < len(p) and p[j] == "^":
        out.append("^")
        j += 1
    if j < len(p) and p[j] == "]":
        raise JavaPatternError(p, "a ']' first in a character class is read differently: escape it as \\]")
    while j < len(p):
        ch = p[j]
        if ch == "]":
            return "".join(out) + "]", j + 1
        if ch == "[":
            raise JavaPatternError(p, "nested character classes (unions like [a[bc]]) are Java-only: escape '[' as \\[")
        if ch == "&" and p.startswith("&&", j):
            raise JavaPatternError(p, "class intersections '&&' are Java-only")
        if ch == "\\":
            src, j = _escape(p, j, in_class=True)
            out.append(src)
            continue
        out.append(ch)
        j += 1
    raise JavaPatternError(p, "unterminated character class: a '[' has no ']'")


def _group(p: str, i: int, at_start: bool) -> tuple[str, int]:
    """The group opening at ``p[i] == '('``: (its Python source up to the body, the index after)."""
    if not p.startswith("(?", i):
        return "(", i + 1
    for head in ("(?:", "(?=", "(?!", "(?<=", "(?<!"):
        if p.startswith(head, i):
            return head, i + len(head)
    rest = p[i + 2 : i + 3]
    if rest == "<":
        raise JavaPatternError(p, "named groups (?<name>...) are spelled (?P<name>...) in Python, which Java does not read")
    if rest == ">":
        raise JavaPatternError(p, "atomic groups (?>...) are read only by Python 3.11 and later")
    if rest == "P":
        raise JavaPatternError(p, "(?P...) groups are Python-only")
    if rest == "#":
        raise JavaPatternError(p, "(?#...) comments are Python-only")
    if rest == "(":
        raise JavaPatternError(p, "conditional groups (?(...)...) are Python-only")
    m = re.compile(r"\(\?(-?)([a-zA-Z]*)([:)])").match(p, i)
    if m is None or not m.group(2):
        raise JavaPatternError(p, f"unknown group construct {p[i:i + 3]!r}")
    if set(m.group(2)) != {"i"}:
        raise JavaPatternError(p, f"flag(s) {m.group(2)!r}: only the (?i) flag means the same in Java and Python")
    if m.group(3) == ")" and (m.group(1) or not at_start):
        raise JavaPatternError(p, "a global flag such as (?i) is only read alike at the start of a pattern; "
                                  "use a scoped (?i:...) elsewhere")  # fmt: skip
    return m.group(0), m.end()


def java_to_python(pattern: str) -> str:
    """``pattern`` (a Java regex) as Python ``re`` source of the same meaning, compiled with
    ``re.ASCII``; raises JavaPatternError with the reason otherwise."""
    out: list[str] = []
    i, n = 0, len(pattern)
    quantified = False  # the last token was a quantifier: a '+' now would make it possessive
    while i < n:
        ch = pattern[i]
        was_quantifier, quantified = quantified, False
        if ch == "\\":
            src, i = _escape(pattern, i, in_class=False)
        elif ch == "[":
            src, i = _char_class(pattern, i)
        elif ch == "(":
            src, i = _group(pattern, i, at_start=i == 0 or pattern[:i] == "(?i)")
        elif ch == ".":
            src, i = _DOT, i + 1
        elif ch == "$":
            src, i = _DOLLAR, i + 1
        elif ch in "*+?":
            if was_quantifier and ch == "+":
                raise JavaPatternError(pattern, "possessive quantifiers (*+, ++, ?+, {n}+) are read only by Python 3.11 and later")
            # '?' after a quantifier makes it lazy (the same in both); the pair is one quantifier
            src, i, quantified = ch, i + 1, not (was_quantifier and ch == "?")
        elif ch == "{":
            m = _REPEAT.match(pattern, i)
            if m is None:
                raise JavaPatternError(pattern, "a '{' that is no repetition {n}, {n,} or {n,m} is an error in Java: "
                                                "escape it as \\{")  # fmt: skip
            src, i, quantified = m.group(0), m.end(), True
        else:
            src, i = ch, i + 1
        out.append(src)
    return "".join(out)


@lru_cache(maxsize=1024)
def compile_java(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled for ``fullmatch`` with Java's meaning; raises JavaPatternError."""
    source = java_to_python(pattern)
    try:
        return re.compile(source, re.ASCII)
    except re.error as e:
        raise JavaPatternError(pattern, e.msg) from None  # its position would be in the translation


def pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot be used as a Java regex here, or None: the one rule of every edge."""
    try:
        compile_java(pattern)
    except JavaPatternError as e:
        return e.reason
    return None


class JavaPatterns(NamedTuple):
    """Several patterns, each matched on its own (joined into one alternation, the back
    references of all but the first would point at the wrong groups)."""

    compiled: tuple[re.Pattern[str], ...]

    def fullmatch(self, text: str) -> bool:
        return any(p.fullmatch(text) is not None for p in self.compiled)


def compile_java_list(patterns: Iterable[str]) -> JavaPatterns | None:
    """The patterns (blank ones left out) as one matcher, None when there are none; raises
    JavaPatternError for the first that cannot be used."""
    compiled = tuple(compile_java(p.strip()) for p in patterns if p.strip())
    return JavaPatterns(compiled) if compiled else None
