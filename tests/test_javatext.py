"""Invalid UTF-8 shown as Java shows it (records/javatext.py), checked against a real JVM."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest
from kafka_fixtures import kafka_required

from records.javatext import java_utf8

JAVA_PROGRAM = Path(__file__).parent / "java" / "JavaUtf8.java"
FFFD = "\ufffd"

# Bytes around every boundary of UTF-8's lead and continuation ranges, and ASCII.
_INTERESTING = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF,
                0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xF7, 0xF8, 0xFF]  # fmt: skip


def test_an_encoded_surrogate_is_one_replacement_as_in_java() -> None:
    assert b"\xed\xa0\x80".decode("utf-8", "replace") == FFFD * 3  # what Python's codec gives
    assert java_utf8(b"\xed\xa0\x80") == FFFD
    assert java_utf8(b"a\xed\xa0\xbd\xed\xb8\x80b") == "a" + FFFD * 2 + "b"


@pytest.mark.parametrize(
    "data",
    [b"plain", "h\u00e9\u20ac\U0001f600".encode(), b"\xff", b"\xc0\x80", b"\xe2\x82", b"\xe2\x82x",
     b"\xf0\x9f\x98", b"\xf5\x80\x80\x80", b"\x80\x80", b"\xe0\x80\x80", b"\xf4\x90\x80\x80"],
)  # fmt: skip
def test_sequences_where_java_and_python_agree_still_agree(data: bytes) -> None:
    assert java_utf8(data) == data.decode("utf-8", "replace")


def _samples(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        size = rng.randint(1, 9)
        out.append(bytes(rng.choice(_INTERESTING) if rng.random() < 0.8 else rng.randrange(256) for _ in range(size)))
    return out


def test_java_utf8_matches_a_real_jvm_on_generated_bytes(tmp_path: Path) -> None:
    java = shutil.which("java")
    if java is None:
        if kafka_required():
            pytest.fail("java is not on PATH", pytrace=False)
        pytest.skip("needs Java 17 (`java` on PATH)")
    samples = _samples(4000, seed=1279) + [b"\xed\xa0\x80", b"\xed\xa0\xbd\xed\xb8\x80", b"\xed\xa0", b"\xf0\x90"]
    inputs = tmp_path / "samples.hex"
    inputs.write_text("".join(s.hex() + "\n" for s in samples))
    done = subprocess.run([java, "-Xmx64m", str(JAVA_PROGRAM), str(inputs)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    javas = done.stdout.splitlines()
    assert len(javas) == len(samples)
    differ_from_python = 0
    for data, expected in zip(samples, javas):
        ours = java_utf8(data).encode("utf-16-be").hex()
        assert ours == expected, f"{data.hex()}: Java {expected}, ours {ours}"
        differ_from_python += data.decode("utf-8", "replace").encode("utf-16-be").hex() != expected
    assert differ_from_python > 20  # the samples do reach the cases where Java is not Python
