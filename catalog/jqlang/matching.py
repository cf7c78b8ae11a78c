"""jq's regular expressions (test, match, capture, scan, split/2, splits, sub, gsub) run by RE2.

A definition's patterns meet strings that anyone who can create a workload
controls (names, labels, annotations).  A backtracking engine (Python's ``re``,
libjq's Oniguruma) can take exponential time on ``(a+)+$`` or on an innocent
``^([a-z]+-?)+$``, and a single match call cannot be interrupted by the
evaluation's step and time bound.  RE2 matches in time linear in the subject,
so every regex ends within the bound of the evaluation around it.

The price is RE2's syntax: what RE2 cannot do in linear time (backreferences,
lookahead and lookbehind, atomic groups, possessive quantifiers, ``\\G``,
conditionals) is refused with the reason, when the definition is validated if
the pattern is a literal (``check_literal_patterns``), else when it is
evaluated.  jq's modifier letters map as far as RE2 allows:

- ``g`` every match; ``i`` case-insensitive; ``l`` the longest match (of the
  leftmost-longest ones RE2 finds one after another);
- ``x`` extended: whitespace and ``#`` comments outside classes are removed
  before RE2 sees the pattern (RE2 has no free-spacing mode);
- ``p`` lets ``.`` match a newline (Oniguruma's MULTILINE under jq's Perl
  syntax); ``s`` is jq's default there already and changes nothing;
- ``n`` drops empty matches.

Known differences from libjq: ``$`` and ``\\Z`` match at the very end of the
subject only (Oniguruma also before a final newline), ``\\w``, ``\\d``, ``\\s``
and ``\\b`` are ASCII, and a global search after an empty match moves one
character on (libjq moves one byte).
"""

from __future__ import annotations

from functools import lru_cache

import re2

from .errors import JqRuntimeError, JqSyntaxError
from .values import tojson, type_name

# (function name, arity) -> (index of the pattern argument, index of the flags argument or None)
REGEX_CALLS = {
    ("test", 1): (0, None), ("test", 2): (0, 1), ("match", 1): (0, None), ("match", 2): (0, 1),
    ("capture", 1): (0, None), ("capture", 2): (0, 1), ("scan", 1): (0, None), ("scan", 2): (0, 1),
    ("split", 2): (0, 1), ("splits", 1): (0, None), ("splits", 2): (0, 1),
    ("sub", 2): (0, None), ("sub", 3): (0, 2), ("gsub", 2): (0, None), ("gsub", 3): (0, 2),
}

# RE2's own words for what it refuses -> what a definition author should read
_UNSUPPORTED = (
    ("invalid perl operator: (?=", "lookahead is not supported"),
    ("invalid perl operator: (?!", "lookahead is not supported"),
    ("invalid perl operator: (?<=", "lookbehind is not supported"),
    ("invalid perl operator: (?<!", "lookbehind is not supported"),
    ("invalid perl operator: (?>", "atomic groups are not supported"),
    ("invalid perl operator: (?(", "conditionals are not supported"),
    ("invalid escape sequence: \\k", "backreferences are not supported"),
    ("invalid escape sequence: \\g", "backreferences and subexpression calls are not supported"),
    ("bad repetition operator: *+", "possessive quantifiers are not supported"),
    ("bad repetition operator: ++", "possessive quantifiers are not supported"),
    ("bad repetition operator: ?+", "possessive quantifiers are not supported"),
)
_LINEAR = "regular expressions run in linear time (RE2)"


class Regex:
    """One compiled pattern with its jq modifiers."""

    __slots__ = ("re", "every", "skip_empty", "longest", "names")

    def __init__(self, compiled, every: bool, skip_empty: bool, longest: bool):
        self.re = compiled
        self.every = every
        self.skip_empty = skip_empty
        self.longest = longest
        by_index = {i: n for n, i in compiled.groupindex.items()}
        self.names = [by_index.get(i) for i in range(1, compiled.groups + 1)]


def _translate(pattern: str, extended: bool) -> str:
    """Oniguruma's spelling to RE2's: ``\\Z`` as ``\\z`` and, for ``x``, no whitespace or # comments outside classes."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "\\" and i + 1 < n:
            out.append("\\z" if pattern[i + 1] == "Z" else pattern[i:i + 2])
            i += 2
        elif ch == "[":
            j = i + 1
            j += pattern[j:j + 1] == "^"
            j += pattern[j:j + 1] == "]"
            while j < n and pattern[j] != "]":
                if pattern.startswith("[:", j) and ":]" in pattern[j:]:
                    j = pattern.index(":]", j) + 2
                else:
                    j += 2 if pattern[j] == "\\" else 1
            out.append(pattern[i:j + 1])
            i = j + 1
        elif extended and ch == "#":
            while i < n and pattern[i] != "\n":
                i += 1
        elif extended and ch.isspace():
            i += 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _reason(pattern: str, message: str) -> str:
    if message.startswith("invalid escape sequence: \\") and message[-1:].isdigit():
        return "backreferences are not supported"
    for prefix, reason in _UNSUPPORTED:
        if message.startswith(prefix):
            return reason
    return message


@lru_cache(maxsize=1024)
def regex(pattern, flags) -> Regex:
    """The compiled pattern; raises JqRuntimeError naming the pattern and the reason."""
    if not isinstance(pattern, str):
        raise JqRuntimeError(f"{type_name(pattern)} ({tojson(pattern)[:30]}) cannot be matched, as it is not a string")
    if flags is not None and not isinstance(flags, str):
        raise JqRuntimeError(f"{type_name(flags)} ({tojson(flags)[:30]}) is not a string")
    options = re2.Options()
    options.log_errors = False
    every = skip_empty = False
    extended = False
    for f in flags or "":
        if f == "g":
            every = True
        elif f == "i":
            options.case_sensitive = False
        elif f == "x":
            extended = True
        elif f == "n":
            skip_empty = True
        elif f == "p":
            options.dot_nl = True
        elif f == "l":
            options.longest_match = True
        elif f != "s":
            raise JqRuntimeError(f"{flags} is not a valid modifier string")
    try:
        compiled = re2.compile(_translate(pattern, extended), options)
    except re2.error as exc:
        message = exc.args[0].decode(errors="replace") if isinstance(exc.args[0], bytes) else str(exc)
        raise JqRuntimeError(
            f"{pattern} is not a valid regex: {_reason(pattern, message)} ({_LINEAR})") from None
    return Regex(compiled, every, skip_empty, options.longest_match)


def _subject(v):
    if not isinstance(v, str):
        raise JqRuntimeError(f"{type_name(v)} ({tojson(v)[:30]}) cannot be matched, as it is not a string")
    return v


def test(v, pattern, flags=None) -> bool:
    return regex(pattern, flags).re.search(_subject(v)) is not None


def _spans(rx: Regex, s: str, every: bool):
    if rx.longest and not every:
        # Oniguruma's FIND_LONGEST: the longest match anywhere, the first of equals
        found = max(_spans(rx, s, True), key=lambda m: m.end() - m.start(), default=None)
        if found is not None:
            yield found
        return
    pos, end = 0, len(s)
    while pos <= end:
        m = rx.re.search(s, pos)
        if m is None:
            return
        start, stop = m.span()
        if not (rx.skip_empty and start == stop):
            yield m
            if not every:
                return
        pos = stop + 1 if stop == start else stop


def matches(v, pattern, flags=None, every: bool = False) -> list:
    """jq's match objects: offset and length in characters, captures with their names."""
    s = _subject(v)
    rx = regex(pattern, flags)
    out = []
    for m in _spans(rx, s, every or rx.every):
        start, stop = m.span()
        captures = []
        for i, name in enumerate(rx.names, 1):
            a, b = m.span(i)
            if a < 0:
                captures.append({"offset": -1, "string": None, "length": 0, "name": name})
            else:
                captures.append({"offset": a, "length": b - a, "string": s[a:b], "name": name})
        out.append({"offset": start, "length": stop - start, "string": s[start:stop], "captures": captures})
    return out


def named(match: dict) -> dict:
    """capture's object: each named group's string."""
    return {c["name"]: c["string"] for c in match["captures"] if c["name"] is not None}


def scanned(match: dict):
    return [c["string"] for c in match["captures"]] if match["captures"] else match["string"]


def pieces(v, pattern, flags=None) -> list:
    """splits: the parts between every match."""
    s, out, start = _subject(v), [], 0
    for m in matches(s, pattern, flags, every=True):
        out.append(s[start:m["offset"]])
        start = m["offset"] + m["length"]
    out.append(s[start:])
    return out


def pattern_and_flags(arg):
    """The one-argument forms take a pattern or a [pattern, flags] array."""
    if isinstance(arg, str):
        return arg, None
    if isinstance(arg, list) and arg:
        return arg[0], (arg[1] if len(arg) > 1 else None)
    raise JqRuntimeError(f"{type_name(arg)} not a string or array")


def check_literal_patterns(tokens) -> None:
    """Refuse, when a program is compiled, the literal patterns RE2 cannot run (JqSyntaxError)."""
    for i, tok in enumerate(tokens):
        if tok.kind == "str":
            for part in tok.value:
                if not isinstance(part, str):
                    check_literal_patterns(part)
            continue
        if tok.kind != "ident" or i + 1 >= len(tokens) or tokens[i + 1].value != "(" or tokens[i + 1].kind != "op":
            continue
        args = _arguments(tokens, i + 2)
        where = REGEX_CALLS.get((tok.value, len(args)))
        if where is None:
            continue
        pattern = _literal(args[where[0]])
        if pattern is None:
            continue
        flags = _literal(args[where[1]]) if where[1] is not None else None
        try:
            regex(pattern, flags)
        except JqRuntimeError as exc:
            raise JqSyntaxError(f"{tok.value}: {exc}") from None


def _arguments(tokens, i):
    """The token runs of a call's arguments, from just after its '(' to the matching ')'."""
    args, current, depth = [], [], 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.kind == "op" and tok.value in ("(", "[", "{"):
            depth += 1
        elif tok.kind == "op" and tok.value in (")", "]", "}"):
            if depth == 0:
                args.append(current)
                return args
            depth -= 1
        elif tok.kind == "op" and tok.value == ";" and depth == 0:
            args.append(current)
            current = []
            i += 1
            continue
        current.append(tok)
        i += 1
    return []


def _literal(arg):
    if len(arg) == 1 and arg[0].kind == "str" and all(isinstance(p, str) for p in arg[0].value):
        return "".join(arg[0].value)
    return None
