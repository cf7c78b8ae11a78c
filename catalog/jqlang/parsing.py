"""Parsing jq source text into a small AST.

Why our own parser: libjq's Python binding serialises and re-parses the whole
document on every call (about 150 µs per KiB on these machines), which is ten
times over the budget of resolving 20,000 objects a second.  We parse the jq
subset that definitions use into tuples and compile those into Python closures
(``evaluating.py``); anything outside the subset raises :class:`Unsupported`
and runs in libjq inside a bounded sandbox (``sandboxing.py``).

AST nodes are plain tuples ``(tag, ...)``, cheap to build and to pattern-match.
"""

from __future__ import annotations

import re

from .errors import JqSyntaxError, JqTooComplex, Unsupported

MAX_SOURCE_LENGTH = 8192
MAX_NESTING = 64

KEYWORDS = {
    "if", "then", "elif", "else", "end", "as", "def", "reduce", "foreach",
    "try", "catch", "label", "import", "include", "and", "or", "__loc__",
}

_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+|\#[^\n]*)
  | (?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<field>\.[A-Za-z_][A-Za-z0-9_]*)
  | (?P<var>\$(?:__loc__|[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*))
  | (?P<format>@[A-Za-z0-9_]+)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<op>\?//=|\?//|\|=|\+=|-=|\*=|/=|%=|//=|==|!=|<=|>=|//|\.\.|and|or|[.\[\]{}(),:;|+\-*/%<>=?])
    """,
    re.VERBOSE,
)

_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class Token(tuple):
    """(kind, value, position)."""

    __slots__ = ()

    @property
    def kind(self):
        return self[0]

    @property
    def value(self):
        return self[1]

    @property
    def pos(self):
        return self[2]


def tokenize(source: str, start: int = 0, *, stop_at_paren: bool = False):
    """Split source into tokens; strings become ('str', [parts]) with parts being
    literal text or token lists of an interpolation.  Returns (tokens, end)."""
    tokens: list[Token] = []
    pos = start
    depth = 0
    n = len(source)
    while pos < n:
        ch = source[pos]
        if ch == '"':
            parts, pos = _lex_string(source, pos + 1)
            tokens.append(Token(("str", parts, pos)))
            continue
        if stop_at_paren:
            if ch == "(":
                depth += 1
            elif ch == ")":
                if depth == 0:
                    return tokens, pos + 1
                depth -= 1
        m = _TOKEN_RE.match(source, pos)
        if not m:
            raise JqSyntaxError(f"unexpected character {ch!r} at offset {pos}")
        kind = m.lastgroup
        text = m.group()
        if kind == "ws":
            pass
        elif kind == "ident" and text in ("and", "or"):
            tokens.append(Token(("op", text, pos)))
        else:
            tokens.append(Token((kind, text, pos)))
        pos = m.end()
    if stop_at_paren:
        raise JqSyntaxError("unterminated string interpolation")
    return tokens, pos


def _lex_string(source: str, pos: int):
    parts: list = []
    buf: list[str] = []
    n = len(source)
    while pos < n:
        ch = source[pos]
        if ch == '"':
            if buf or not parts:
                parts.append("".join(buf))
            return parts, pos + 1
        if ch == "\\":
            if pos + 1 >= n:
                break
            esc = source[pos + 1]
            if esc == "(":
                if buf:
                    parts.append("".join(buf))
                    buf = []
                inner, pos = tokenize(source, pos + 2, stop_at_paren=True)
                parts.append(inner)
                continue
            if esc == "u":
                hexdigits = source[pos + 2:pos + 6]
                if len(hexdigits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in hexdigits):
                    raise JqSyntaxError(f"invalid \\u escape at offset {pos}")
                code = int(hexdigits, 16)
                pos += 6
                # surrogate pairs
                if 0xD800 <= code < 0xDC00 and source[pos:pos + 2] == "\\u":
                    low = int(source[pos + 2:pos + 6], 16)
                    if 0xDC00 <= low < 0xE000:
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                        pos += 6
                buf.append(chr(code))
                continue
            if esc not in _ESCAPES:
                raise JqSyntaxError(f"invalid escape \\{esc} at offset {pos}")
            buf.append(_ESCAPES[esc])
            pos += 2
            continue
        buf.append(ch)
        pos += 1
    raise JqSyntaxError("unterminated string literal")


def parse(source: str):
    """Parse jq source into an AST; raises JqSyntaxError or Unsupported."""
    if len(source) > MAX_SOURCE_LENGTH:
        raise JqTooComplex(f"expression longer than {MAX_SOURCE_LENGTH} characters")
    tokens, _ = tokenize(source)
    parser = _Parser(tokens)
    if not tokens:
        raise JqSyntaxError("empty expression")
    node = parser.parse_pipe()
    if parser.i != len(tokens):
        tok = tokens[parser.i]
        raise JqSyntaxError(f"unexpected {tok.value!r} at offset {tok.pos}")
    return node


class _Parser:
    def __init__(self, tokens):
        self.toks = tokens
        self.i = 0
        self.depth = 0
        self.memo: dict[int, tuple] = {}

    # -- helpers -----------------------------------------------------------
    def peek(self, offset=0):
        j = self.i + offset
        return self.toks[j] if j < len(self.toks) else None

    def at(self, kind, value=None):
        tok = self.peek()
        return tok is not None and tok.kind == kind and (value is None or tok.value == value)

    def at_op(self, *values):
        tok = self.peek()
        return tok is not None and tok.kind == "op" and tok.value in values

    def expect_op(self, value):
        tok = self.peek()
        if tok is None or tok.kind != "op" or tok.value != value:
            where = f"{tok.value!r} at offset {tok.pos}" if tok else "end of expression"
            raise JqSyntaxError(f"expected {value!r}, found {where}")
        self.i += 1
        return tok

    def expect_ident(self, value):
        tok = self.peek()
        if tok is None or tok.kind != "ident" or tok.value != value:
            where = f"{tok.value!r} at offset {tok.pos}" if tok else "end of expression"
            raise JqSyntaxError(f"expected {value!r}, found {where}")
        self.i += 1

    def enter(self):
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise JqTooComplex(f"expression nested deeper than {MAX_NESTING} levels")

    # -- grammar -----------------------------------------------------------
    def parse_pipe(self):
        self.enter()
        try:
            tok = self.peek()
            if tok is not None and tok.kind == "ident" and tok.value in ("def", "label", "import", "include"):
                raise Unsupported(f"'{tok.value}' is not in the native subset")
            # `Term as $x | body`
            save = self.i
            if tok is not None and not (tok.kind == "op" and tok.value in ("-",)):
                try:
                    term = self.parse_postfix()
                except (JqSyntaxError, Unsupported):
                    term = None
                if term is not None and self.at("ident", "as"):
                    self.i += 1
                    var = self.peek()
                    if var is None or var.kind != "var":
                        raise Unsupported("destructuring patterns are not in the native subset")
                    self.i += 1
                    self.expect_op("|")
                    body = self.parse_pipe()
                    return ("as", term, var.value[1:], body)
                self.i = save
            left = self.parse_comma()
            if self.at_op("|"):
                self.i += 1
                right = self.parse_pipe()
                return ("pipe", left, right)
            return left
        finally:
            self.depth -= 1

    def parse_comma(self):
        left = self.parse_alt()
        while self.at_op(","):
            self.i += 1
            left = ("comma", left, self.parse_alt())
        return left

    def parse_alt(self):
        left = self.parse_or()
        if self.at_op("//"):
            self.i += 1
            return ("alt", left, self.parse_alt())
        if self.at_op("=", "|=", "+=", "-=", "*=", "/=", "%=", "//=", "?//", "?//="):
            raise JqSyntaxError(f"operator {self.peek().value!r} is not allowed: paths read state only")
        return left

    def parse_or(self):
        left = self.parse_and()
        while self.at_op("or"):
            self.i += 1
            left = ("or", left, self.parse_and())
        return left

    def parse_and(self):
        left = self.parse_cmp()
        while self.at_op("and"):
            self.i += 1
            left = ("and", left, self.parse_cmp())
        return left

    def parse_cmp(self):
        left = self.parse_add()
        if self.at_op("==", "!=", "<", "<=", ">", ">="):
            op = self.peek().value
            self.i += 1
            right = self.parse_add()
            if self.at_op("==", "!=", "<", "<=", ">", ">="):
                raise JqSyntaxError("comparison operators are not associative")
            return ("binop", op, left, right)
        return left

    def parse_add(self):
        left = self.parse_mul()
        while self.at_op("+", "-"):
            op = self.peek().value
            self.i += 1
            left = ("binop", op, left, self.parse_mul())
        return left

    def parse_mul(self):
        left = self.parse_unary()
        while self.at_op("*", "/", "%"):
            op = self.peek().value
            self.i += 1
            left = ("binop", op, left, self.parse_unary())
        return left

    def parse_unary(self):
        if self.at_op("-"):
            self.i += 1
            return ("neg", self.parse_unary())
        return self.parse_postfix()

    def parse_postfix(self):
        # Memoised by position: parse_pipe tries a postfix term first (to spot
        # `Term as $x`) and re-parses on a miss; without the memo nested
        # parentheses would cost 2^depth.
        start = self.i
        hit = self.memo.get(start)
        if hit is not None:
            if isinstance(hit[0], Exception):
                raise hit[0]
            self.i = hit[1]
            return hit[0]
        self.enter()
        try:
            node = self.parse_suffixes(self.parse_primary())
        except (JqSyntaxError, Unsupported) as exc:
            self.memo[start] = (exc, start)
            raise
        finally:
            self.depth -= 1
        self.memo[start] = (node, self.i)
        return node

    def parse_suffixes(self, node):
        # In jq a `?` after an index (`.a?`, `.[0]?`, `.[]?`) guards that one
        # index operation only (`.a.b?` still fails when `.a` does); after any
        # other term it is `try term`.
        indexed = node[0] in ("index", "iter", "slice") and node[1] == ("identity",)
        while True:
            tok = self.peek()
            if tok is None:
                return node
            if tok.kind == "field":
                self.i += 1
                node = ("index", node, ("lit", tok.value[1:]))
                indexed = True
            elif tok.kind == "op" and tok.value == "." and self.peek(1) is not None and (
                self.peek(1).kind == "str" or (self.peek(1).kind == "op" and self.peek(1).value == "[")
            ):
                self.i += 1
                if self.peek().kind == "str":
                    node = ("index", node, self.parse_string(self.peek()))
                    self.i += 1
                    indexed = True
                # `.[` handled by the bracket branch on the next loop turn
            elif tok.kind == "op" and tok.value == "[":
                node = self.parse_bracket(node)
                indexed = True
            elif tok.kind == "op" and tok.value == "?":
                self.i += 1
                if indexed and len(node) in (2, 3, 4) and node[0] in ("index", "iter", "slice"):
                    node = ("opt", node)
                else:
                    node = ("try", node, None)
                indexed = False
            else:
                return node

    def parse_bracket(self, node):
        self.expect_op("[")
        if self.at_op("]"):
            self.i += 1
            return ("iter", node)
        if self.at_op(":"):
            self.i += 1
            hi = self.parse_pipe()
            self.expect_op("]")
            return ("slice", node, None, hi)
        idx = self.parse_pipe()
        if self.at_op(":"):
            self.i += 1
            hi = None if self.at_op("]") else self.parse_pipe()
            self.expect_op("]")
            return ("slice", node, idx, hi)
        self.expect_op("]")
        return ("index", node, idx)

    def parse_string(self, tok):
        parts = tok.value
        if len(parts) == 1 and isinstance(parts[0], str):
            return ("lit", parts[0])
        out = []
        for part in parts:
            if isinstance(part, str):
                out.append(part)
            else:
                sub = _Parser(part)
                sub.depth = self.depth
                node = sub.parse_pipe()
                if sub.i != len(part):
                    raise JqSyntaxError("unexpected token in string interpolation")
                out.append(node)
        return ("interp", tuple(out))

    def parse_primary(self):
        tok = self.peek()
        if tok is None:
            raise JqSyntaxError("unexpected end of expression")
        kind, value = tok.kind, tok.value
        if kind == "num":
            self.i += 1
            num = float(value)
            return ("lit", int(num) if num.is_integer() and abs(num) < 2**53 and "e" not in value.lower() and "." not in value else num)
        if kind == "str":
            self.i += 1
            return self.parse_string(tok)
        if kind == "field":
            self.i += 1
            return ("index", ("identity",), ("lit", value[1:]))
        if kind == "var":
            self.i += 1
            name = value[1:]
            if name in ("ENV", "__loc__") or "::" in name:
                raise JqSyntaxError(f"${name} is not allowed in definitions")
            return ("var", name)
        if kind == "format":
            self.i += 1
            if value in ("@json", "@text"):
                if self.at("str"):
                    raise Unsupported("format strings are not in the native subset")
                return ("call", "tojson" if value == "@json" else "tostring", ())
            raise Unsupported(f"format {value} is not in the native subset")
        if kind == "op":
            if value == ".":
                self.i += 1
                nxt = self.peek()
                if nxt is not None and nxt.kind == "str":
                    self.i += 1
                    return ("index", ("identity",), self.parse_string(nxt))
                return ("identity",)
            if value == "..":
                raise JqSyntaxError("recursive descent operator '..' is not allowed")
            if value == "(":
                self.i += 1
                inner = self.parse_pipe()
                self.expect_op(")")
                return inner
            if value == "[":
                self.i += 1
                if self.at_op("]"):
                    self.i += 1
                    return ("lit", [])
                inner = self.parse_pipe()
                self.expect_op("]")
                return ("array", inner)
            if value == "{":
                return self.parse_object()
            raise JqSyntaxError(f"unexpected {value!r} at offset {tok.pos}")
        if kind == "ident":
            if value == "if":
                return self.parse_if()
            if value == "try":
                self.i += 1
                body = self.parse_postfix()
                handler = None
                if self.at("ident", "catch"):
                    self.i += 1
                    handler = self.parse_postfix()
                return ("try", body, handler)
            if value == "reduce":
                self.i += 1
                source = self.parse_postfix()
                self.expect_ident("as")
                var = self.peek()
                if var is None or var.kind != "var":
                    raise Unsupported("destructuring patterns are not in the native subset")
                self.i += 1
                self.expect_op("(")
                init = self.parse_pipe()
                self.expect_op(";")
                update = self.parse_pipe()
                self.expect_op(")")
                return ("reduce", source, var.value[1:], init, update)
            if value in ("foreach", "def", "label", "import", "include"):
                raise Unsupported(f"'{value}' is not in the native subset")
            if value in ("true", "false", "null"):
                self.i += 1
                return ("lit", {"true": True, "false": False, "null": None}[value])
            if value in KEYWORDS:
                raise JqSyntaxError(f"unexpected keyword {value!r} at offset {tok.pos}")
            self.i += 1
            args = []
            if self.at_op("("):
                self.i += 1
                args.append(self.parse_pipe())
                while self.at_op(";"):
                    self.i += 1
                    args.append(self.parse_pipe())
                self.expect_op(")")
            return ("call", value, tuple(args))
        raise JqSyntaxError(f"unexpected {value!r} at offset {tok.pos}")

    def parse_if(self):
        self.i += 1  # `if`, or an `elif` that shares the outer `end`
        cond = self.parse_pipe()
        self.expect_ident("then")
        then = self.parse_pipe()
        if self.at("ident", "elif"):
            return ("if", cond, then, self.parse_if())
        other = None
        if self.at("ident", "else"):
            self.i += 1
            other = self.parse_pipe()
        self.expect_ident("end")
        return ("if", cond, then, other)

    def parse_object(self):
        self.expect_op("{")
        entries = []
        if self.at_op("}"):
            self.i += 1
            return ("object", ())
        while True:
            tok = self.peek()
            if tok is None:
                raise JqSyntaxError("unterminated object construction")
            if tok.kind == "var":
                self.i += 1
                name = tok.value[1:]
                if name in ("ENV", "__loc__"):
                    raise JqSyntaxError(f"${name} is not allowed in definitions")
                key, value = ("lit", name), ("var", name)
                entries.append((key, value))
            else:
                if tok.kind == "ident" or (tok.kind == "op" and tok.value in ("and", "or")):
                    self.i += 1
                    key = ("lit", tok.value)
                elif tok.kind == "str":
                    self.i += 1
                    key = self.parse_string(tok)
                elif tok.kind == "num":
                    raise JqSyntaxError("object keys must be strings")
                elif tok.kind == "format":
                    raise Unsupported("format keys are not in the native subset")
                elif tok.kind == "op" and tok.value == "(":
                    self.i += 1
                    key = self.parse_pipe()
                    self.expect_op(")")
                else:
                    raise JqSyntaxError(f"unexpected {tok.value!r} in object construction at offset {tok.pos}")
                if self.at_op(":"):
                    self.i += 1
                    value = self.parse_object_value()
                else:
                    if key[0] not in ("lit", "interp"):
                        raise JqSyntaxError("object key in parentheses needs a value")
                    value = ("index", ("identity",), key)
                entries.append((key, value))
            if self.at_op(","):
                self.i += 1
                continue
            self.expect_op("}")
            return ("object", tuple(entries))

    def parse_object_value(self):
        # jq restricts object values to terms joined by '|' (ObjVal); we accept
        # the same plus unary minus.  Binary operators need parentheses in jq,
        # and libjq validates the syntax of every definition too.
        node = self.parse_unary()
        while self.at_op("|"):
            self.i += 1
            node = ("pipe", node, self.parse_unary())
        return node

