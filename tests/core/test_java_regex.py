"""Java regexes read by Python: the same meaning, or refused (``coordinator.java_regex``).

The table is checked against real java.util.regex (a tiny class run once with the JDK's source
launcher): every pattern accepted here compiles in Java and matches exactly the probe strings
Java's ``matches()`` does.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest

from coordinator.java_regex import JavaPatternError, compile_java, java_to_python, pattern_problem

PROBE = Path(__file__).parent / "java" / "RegexProbe.java"

# Strings each accepted pattern is matched against, in Java and in Python.
INPUTS = ["", "a", "ab", "abc", "orders", "orders-1", "orders.eu", "ordersXeu", "ORDERS", "Orders-eu",
          "ops-g1", "ops-g2", "x\ny", "x\ry", "x\u2028y", "x\u0085y", "a b", "a\tb", "x\x0by", "123", "\u0663",
          "é", "É", "a-b", "a]b", "a[b", "{", "a{2}", "aa", "aaa", "q", "E", "$", "a$", "ab\n", "_", "a.b",
          "abab", "\\", "xyz.txt", "\x07", "a\r", "a\r\n", "a\n", "a\u2028", "a\n\n", "a\r\r"]  # fmt: skip

ACCEPTED = [
    ".*", "orders", "orders-.*", r"orders\..*", "orders.eu", "(?i)orders", "(?i:or)ders", "ord(ers|er)",
    r"[a-z]+", r"[^a-z]+", r"\d+", r"\w+", r"\s", r"a\sb", r"x.y", "a{2}", "a{2,}", "a{1,3}", "a*?", "a+?",
    "a??", r"\.", r"\[", r"\]", "a]b", r"a\]b", "[]a]".replace("[]", "[\\]"), r"(a)\1", r"(ab)\1", r"\x41",
    r"\u00e9", "é", "a|b|", "(?:ab)+", "(?=a)a", "(?!b)a", "(?<=a)b.*", "(?<!b)a", "^orders$", "ops-g1",
    r"[\d-]+", r"[a\-z]", "[.]", "[$]", "a$|b", "[*+?{]", r"\{", r"\\", "\\t", r"a\tb", "[&]", r"\A.*",
    "x\u2028y", r"\a", r"[\w.]+\.txt", "}", "a}", "a$b", "a$\r", "a$\n", "a$\r\n", "(a$)\r", "a$.", r"a$\s",
    r"a$\r?\n?", "a$$", "(?i)A$",
]  # fmt: skip

REFUSED = [
    ("ord(ers", "missing )"), ("(unclosed", "missing )"), (r"\Qa.b\E", "\\Q...\\E"), (r"\p{Lower}+", "\\p{...}"),
    (r"\P{Alpha}", "\\P{...}"), (r"a\hb", "\\h"), (r"x\Ry", "\\R"), (r"a\z", "\\z"), (r"a\Z", "\\Z"),
    ("[a-z&&[^e]]+", "&&"), ("[a[bc]]", "nested"), ("(?<name>ab)", "(?P<name>"), (r"x\vy", "\\v"),
    (r"\012", "octal"), (r"\0101", "octal"), ("a(?i)b", "global flag"), ("a*+", "possessive"), ("a++", "possessive"),
    ("a?+", "possessive"), ("a{2}+", "possessive"), ("(?>ab)", "atomic"), ("(?P<n>a)", "Python-only"),
    ("(?#x)a", "Python-only"), ("(a)?(?(1)b|c)", "Python-only"), ("a{,3}", "repetition"), ("a{", "repetition"),
    ("{2}", "nothing to repeat"), ("(?s).*", "flag"), ("(?m)^a$", "flag"), ("(?x)a b", "flag"), ("(?u)a", "flag"),
    ("(?-i)a", "global flag"), (r"\ba\b", "word boundar"), (r"\x{41}", "hex"), (r"\e", "Java-only"),
    (r"\cA", "Java-only"), (r"\k<n>", "Java-only"), (r"\N{LATIN SMALL LETTER A}", "\\N"), (r"\U00000041", "Python-only"),
    ("[]a]", "']' first"), ("[^]a]", "']' first"), ("(a)\\12", "more than one digit"),
    ("\\", "lone"), (r"\y", "unknown escape"), ("[abc", "unterminated"), ("*a", "nothing to repeat"),
    (r"\G", "Java-only"), (r"\X", "Java-only"), (r"[\b]", "word boundar"),
]  # fmt: skip


@pytest.mark.parametrize("pattern,reason", REFUSED)
def test_refused_with_the_reason(pattern: str, reason: str) -> None:
    why = pattern_problem(pattern)
    assert why is not None and reason in why, (pattern, why)
    with pytest.raises(JavaPatternError):
        compile_java(pattern)


@pytest.mark.parametrize("pattern", ACCEPTED)
def test_accepted(pattern: str) -> None:
    assert pattern_problem(pattern) is None, pattern


def test_python_reads_what_it_accepts_as_java_does() -> None:
    """Java's ``matches()`` and our ``fullmatch`` agree on every probe; and every refused pattern
    is one Java rejects or reads differently (checked where Java compiles it: at least one probe
    or the syntax differs, which the table's reasons say)."""
    java = shutil.which("java")
    if java is None:
        pytest.skip("java is not installed")
    patterns = ACCEPTED + [p for p, _ in REFUSED]
    lines = [" ".join(s.encode().hex() for s in (p, *INPUTS)) for p in patterns]
    done = subprocess.run([java, str(PROBE)], input="\n".join(lines) + "\n", capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    answers = done.stdout.splitlines()
    assert len(answers) == len(patterns), done.stderr
    for pattern, answer in zip(ACCEPTED, answers, strict=False):
        assert answer.startswith("OK "), f"{pattern!r}: accepted here, refused by Java"
        ours = "".join("1" if compile_java(pattern).fullmatch(s) else "0" for s in INPUTS)
        assert ours == answer[3:], (pattern, java_to_python(pattern), ours, answer)
    # Refused ones Java does compile: Python's own reading of them differs from Java's somewhere.
    differ = 0
    for (pattern, _), answer in zip(REFUSED, answers[len(ACCEPTED):], strict=True):
        if answer == "ERR":
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # "possible nested set" and the like
                plain = re.compile(pattern)
        except re.error:
            continue  # Python cannot even read it
        ours = "".join("1" if plain.fullmatch(s) else "0" for s in INPUTS)
        differ += ours != answer[3:]
    assert differ > 0  # the table does hold patterns a plain re.compile would get wrong


def test_dot_and_classes_are_javas() -> None:
    # Java's '.' stops at every line terminator, and \d, \w are ASCII: Python's defaults are not.
    assert compile_java("x.y").fullmatch("x\ry") is None and compile_java("x.y").fullmatch("x-y")
    assert compile_java(r"\d").fullmatch("\u0663") is None and compile_java(r"\w").fullmatch("é") is None
