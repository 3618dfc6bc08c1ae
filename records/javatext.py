"""Bytes to text as Java decodes them: ``new String(bytes, UTF_8)``, which Kafka uses for keys,
values (its StringDecoder), header keys and the strings of its messages.

Valid UTF-8 reads the same everywhere. Invalid bytes become U+FFFD, but Java and Python do not
cut them into the same pieces: Java replaces an encoded surrogate (``ED A0 80``) with one U+FFFD,
Python with three; a surrogate pair (``ED A0 BD ED B8 80``) gives 2 in Java, 6 in Python. This is
JDK 17's ``String.decodeUTF8_UTF16`` (the replacing path), step for step, so that a dump shows the
characters ``kafka-dump-log`` shows. tests/test_javatext.py checks it against a real JVM.
"""

from __future__ import annotations

REPLACEMENT = "\ufffd"


def _cont(b: int) -> bool:
    return b & 0xC0 == 0x80


def java_utf8(data: bytes) -> str:
    """``data`` decoded as Java 17's ``new String(data, StandardCharsets.UTF_8)`` does."""
    try:
        return data.decode("utf-8")  # valid UTF-8: Java and Python agree
    except UnicodeDecodeError:
        return _decode_replacing(data)


def _decode_replacing(src: bytes) -> str:
    out: list[str] = []
    put = out.append
    sp, sl = 0, len(src)
    while sp < sl:
        b1 = src[sp]
        sp += 1
        if b1 < 0x80:
            put(chr(b1))
        elif b1 >> 5 == 0b110 and b1 & 0x1E:  # C2..DF: two bytes
            if sp < sl:
                b2 = src[sp]
                sp += 1
                if not _cont(b2):
                    put(REPLACEMENT)
                    sp -= 1
                else:
                    put(chr(((b1 & 0x1F) << 6) | (b2 & 0x3F)))
                continue
            put(REPLACEMENT)
            break
        elif b1 >> 4 == 0b1110:  # E0..EF: three bytes
            if sp + 1 < sl:
                b2, b3 = src[sp], src[sp + 1]
                sp += 2
                if (b1 == 0xE0 and b2 & 0xE0 == 0x80) or not _cont(b2) or not _cont(b3):
                    put(REPLACEMENT)
                    sp -= 3
                    # malformed3: how many bytes the replacement stands for
                    sp += 1 if (b1 == 0xE0 and b2 & 0xE0 == 0x80) or not _cont(b2) else 2
                else:
                    c = ((b1 & 0x0F) << 12) | ((b2 & 0x3F) << 6) | (b3 & 0x3F)
                    put(REPLACEMENT if 0xD800 <= c <= 0xDFFF else chr(c))  # a surrogate: one U+FFFD for 3 bytes
                continue
            if sp < sl and ((b1 == 0xE0 and src[sp] & 0xE0 == 0x80) or not _cont(src[sp])):
                put(REPLACEMENT)
                continue
            put(REPLACEMENT)  # a sequence cut short by the end: one U+FFFD
            break
        elif b1 >> 3 == 0b11110:  # F0..F7: four bytes
            if sp + 2 < sl:
                b2, b3, b4 = src[sp], src[sp + 1], src[sp + 2]
                sp += 3
                uc = ((b1 & 0x07) << 18) | ((b2 & 0x3F) << 12) | ((b3 & 0x3F) << 6) | (b4 & 0x3F)
                if not (_cont(b2) and _cont(b3) and _cont(b4)) or not 0x10000 <= uc <= 0x10FFFF:
                    put(REPLACEMENT)
                    sp -= 4
                    sp += _malformed4(src, sp)
                else:
                    put(chr(uc))
                continue
            if b1 > 0xF4 or (sp < sl and _malformed4_2(b1, src[sp])):
                put(REPLACEMENT)
                continue
            sp += 1
            put(REPLACEMENT)
            if sp < sl and not _cont(src[sp]):
                continue
            break
        else:
            put(REPLACEMENT)
    return "".join(out)


def _malformed4_2(b1: int, b2: int) -> bool:
    return (b1 == 0xF0 and not 0x90 <= b2 <= 0xBF) or (b1 == 0xF4 and b2 & 0xF0 != 0x80) or not _cont(b2)


def _malformed4(src: bytes, sp: int) -> int:
    b1, b2 = src[sp], src[sp + 1]
    if b1 > 0xF4 or (b1 == 0xF0 and not 0x90 <= b2 <= 0xBF) or (b1 == 0xF4 and b2 & 0xF0 != 0x80) or not _cont(b2):
        return 1
    if not _cont(src[sp + 2]):
        return 2
    return 3
