"""The PromQL subset the service asks, parsed: what :mod:`tests.support.synthetic_prom` evaluates.

The grammar (anything else is a :class:`PromQLError`, which the server answers with a 400
``bad_data`` like Prometheus)::

    expr      := aggregate | call | selector
    aggregate := AGG [by (labels)] ( expr ) [by (labels)]      AGG: max min sum count group
    call      := last_over_time ( selector [ duration ] )
    selector  := [metric] { matcher, ... }  |  metric
    matcher   := label (= | != | =~ | !~) string

Regular expressions are fully anchored, as in Prometheus. A ``=~`` whose alternatives are all
literals (``"a|b\\\\.c|"``, RE2-escaped punctuation allowed) keeps them as a set
(:attr:`Matcher.literals`): the server looks a shard's 500 nodes up in it instead of testing the
regex against every node of the fleet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleetscope.errors import FleetscopeError
from fleetscope.times import parse_duration as parse_seconds

AGGREGATIONS = ("max", "min", "sum", "count", "group")
FUNCTIONS = ("last_over_time",)
OPS = ("=", "!=", "=~", "!~")

_TOKEN = re.compile(
    r"""\s*(?:
    (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
   |(?P<dur>\d+(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*)
   |(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
   |(?P<op>=~|!~|!=|=)
   |(?P<punct>[{}()\[\],])
    )""",
    re.VERBOSE,
)
#: A duration without a unit: seconds on the command line, not PromQL.
_PLAIN_NUMBER = re.compile(r"[\d.]+")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "a": "\a", "b": "\b"}
#: An RE2 literal character: anything but a metacharacter, or a backslash-escaped punctuation.
_LITERAL_PIECE = re.compile(r"[^\\.+*?()|\[\]{}^$]|\\[^A-Za-z0-9]")


class PromQLError(ValueError):
    """A query outside the subset, or not PromQL: Prometheus' ``bad_data``."""


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str
    value: str
    #: ``=~`` of literals only: the set of strings it matches (None: a real regex).
    literals: frozenset[str] | None = None
    regex: re.Pattern[str] | None = None

    def matches(self, value: str) -> bool:
        if self.op == "=":
            return value == self.value
        if self.op == "!=":
            return value != self.value
        hit = (
            value in self.literals
            if self.literals is not None
            else bool(self.regex and self.regex.fullmatch(value))
        )
        return hit if self.op == "=~" else not hit


@dataclass(frozen=True)
class Selector:
    matchers: tuple[Matcher, ...]


@dataclass(frozen=True)
class LastOverTime:
    selector: Selector
    range_ms: int


@dataclass(frozen=True)
class Aggregate:
    op: str
    by: tuple[str, ...]
    inner: Expr


Expr = Selector | LastOverTime | Aggregate


def make_matcher(label: str, op: str, value: str) -> Matcher:
    if op not in ("=~", "!~"):
        return Matcher(label, op, value)
    literals = _literal_alternatives(value)
    if literals is not None:
        return Matcher(label, op, value, literals=frozenset(literals))
    try:
        return Matcher(label, op, value, regex=re.compile(value))
    except re.error as exc:
        raise PromQLError(f"invalid regular expression in matcher {label}{op}{value!r}: {exc}") from None


def _literal_alternatives(pattern: str) -> list[str] | None:
    """The strings a regex of literal alternatives matches, or None when it is a real regex."""
    out, cur, i = [], [], 0
    while i < len(pattern):
        if pattern[i] == "|":
            out.append("".join(cur))
            cur, i = [], i + 1
            continue
        m = _LITERAL_PIECE.match(pattern, i)
        if m is None:
            return None
        piece = m.group()
        cur.append(piece[-1])
        i = m.end()
    out.append("".join(cur))
    return out


def parse_duration(text: str) -> int:
    """A Prometheus duration (``5m``, ``1h30m``; :func:`fleetscope.times.parse_duration`'s
    grammar, units only) in milliseconds, above zero."""
    try:
        seconds = None if _PLAIN_NUMBER.fullmatch(text) else parse_seconds(text)
    except FleetscopeError:
        seconds = None
    if seconds is None or seconds <= 0:
        raise PromQLError(f'bad duration "{text}"')
    return round(seconds * 1000)


def _unquote(token: str) -> str:
    if token[0] == "`":
        return token[1:-1]
    body, out, i = token[1:-1], [], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            nxt = body[i + 1]
            if nxt not in _ESCAPES:
                raise PromQLError(f"unknown escape sequence \\{nxt}")
            out.append(_ESCAPES[nxt])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str, int]] = []
        pos = 0
        text = text.rstrip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                raise PromQLError(f"1:{pos + 1}: parse error: unexpected character {text[pos : pos + 1]!r}")
            kind = m.lastgroup or ""
            self.tokens.append((kind, m.group(kind), m.start(kind)))
            pos = m.end()
        self.i = 0

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, kind: str | None = None, value: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (kind and tok[0] != kind) or (value and tok[1] != value):
            where = f"1:{tok[2] + 1}" if tok else "end of input"
            want = value or kind or "a token"
            got = repr(tok[1]) if tok else "nothing"
            raise PromQLError(f"{where}: parse error: expected {want}, got {got}")
        self.i += 1
        return tok[1]

    def at(self, value: str) -> bool:
        tok = self.peek()
        return tok is not None and tok[1] == value and tok[0] != "str"

    def expr(self) -> Expr:
        tok = self.peek()
        if tok is None:
            raise PromQLError("parse error: empty query")
        if tok[0] == "ident" and tok[1] in AGGREGATIONS and self._next_is_call():
            return self.aggregate()
        if tok[0] == "ident" and self._next_value() == "(":
            if tok[1] not in FUNCTIONS:
                raise PromQLError(f"unknown or unsupported function {tok[1]!r} (synthetic subset)")
            return self.call()
        return self.selector()

    def _next_value(self) -> str | None:
        return self.tokens[self.i + 1][1] if self.i + 1 < len(self.tokens) else None

    def _next_is_call(self) -> bool:
        return self._next_value() in ("(", "by", "without")

    def labels(self) -> tuple[str, ...]:
        self.take("punct", "(")
        out: list[str] = []
        while not self.at(")"):
            out.append(self.take("ident"))
            if not self.at(")"):
                self.take("punct", ",")
        self.take("punct", ")")
        return tuple(out)

    def aggregate(self) -> Aggregate:
        op = self.take("ident")
        by: tuple[str, ...] = ()
        if self.at("without"):
            raise PromQLError("'without' is outside the synthetic subset")
        if self.at("by"):
            self.take()
            by = self.labels()
        self.take("punct", "(")
        inner = self.expr()
        self.take("punct", ")")
        if self.at("by") and not by:
            self.take()
            by = self.labels()
        return Aggregate(op, by, inner)

    def call(self) -> LastOverTime:
        self.take("ident")
        self.take("punct", "(")
        sel = self.selector()
        self.take("punct", "[")
        range_ms = parse_duration(self.take("dur"))
        self.take("punct", "]")
        self.take("punct", ")")
        return LastOverTime(sel, range_ms)

    def selector(self) -> Selector:
        matchers: list[Matcher] = []
        tok = self.peek()
        if tok is not None and tok[0] == "ident":
            matchers.append(Matcher("__name__", "=", self.take()))
        if self.at("{"):
            self.take()
            while not self.at("}"):
                label = self.take("ident")
                op = self.take("op")
                matchers.append(make_matcher(label, op, _unquote(self.take("str"))))
                if not self.at("}"):
                    self.take("punct", ",")
            self.take("punct", "}")
        if not matchers:
            where = f"1:{tok[2] + 1}" if tok else "end of input"
            raise PromQLError(f"{where}: parse error: unexpected {tok[1] if tok else 'end of input'!r}")
        if all(m.matches("") for m in matchers):
            raise PromQLError("vector selector must contain at least one non-empty matcher")
        return Selector(tuple(matchers))


def parse(text: str) -> Expr:
    """The query's tree, or a :class:`PromQLError` (outside the subset, or not PromQL)."""
    p = _Parser(text)
    expr = p.expr()
    if p.peek() is not None:
        tok = p.peek()
        assert tok is not None
        raise PromQLError(f"1:{tok[2] + 1}: parse error: unexpected {tok[1]!r} (synthetic subset)")
    return expr


def selector_of(expr: Expr) -> Selector:
    """The one vector selector of ``expr``."""
    while isinstance(expr, Aggregate):
        expr = expr.inner
    return expr.selector if isinstance(expr, LastOverTime) else expr
