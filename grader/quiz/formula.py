"""A restricted arithmetic language for the answers of parametric questions.

Bank files are data, not code: a formula is tokenized and parsed here by a small recursive-descent
parser into a tree that can only do arithmetic on numbers and parameter names, so a bank can never
reach attributes, imports or arbitrary calls the way `eval` would.

Grammar (usual precedence, `**` binds tighter than unary minus and is right-associative):

    expr    := term (('+' | '-') term)*
    term    := unary (('*' | '/') unary)*
    unary   := '-' unary | '+' unary | power
    power   := atom ('**' unary)?
    atom    := NUMBER | NAME | NAME '(' expr (',' expr)* ')' | '(' expr ')'
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

FUNCTIONS: dict[str, Callable[..., float]] = {
    "min": min,
    "max": max,
    "ceil": math.ceil,
    "floor": math.floor,
    "round": round,
    "abs": abs,
    "log2": math.log2,
    "log10": math.log10,
    "sqrt": math.sqrt,
}

_TOKEN = re.compile(
    r"(?:(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)|(?P<name>[A-Za-z_]\w*)"
    r"|(?P<op>\*\*|[-+*/(),]))"
)


class FormulaError(ValueError):
    """A formula that cannot be parsed or evaluated; the message says where and why."""


@dataclass(frozen=True)
class Token:
    kind: str  # "number", "name", "op" or "end"
    text: str
    pos: int


def tokenize(source: str) -> list[Token]:
    """Split a formula into tokens; any character outside the language is rejected here."""
    tokens: list[Token] = []
    pos = 0
    while True:
        while pos < len(source) and source[pos].isspace():
            pos += 1
        if pos == len(source):
            break
        match = _TOKEN.match(source, pos)
        if match is None:
            raise FormulaError(f"unexpected character {source[pos]!r} at position {pos} in {source!r}")
        kind = match.lastgroup or "op"
        tokens.append(Token(kind, match.group(), pos))
        pos = match.end()
    tokens.append(Token("end", "", len(source)))
    return tokens


# A parsed formula is a tree of tuples: ("num", value), ("name", id), ("neg", node),
# ("bin", op, left, right), ("call", function, [args]).
Node = tuple


class _Parser:
    """Recursive descent over the token list; one method per grammar rule."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.tokens = tokenize(source)
        self.index = 0

    def peek(self) -> Token:
        return self.tokens[self.index]

    def take(self) -> Token:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def expect(self, text: str) -> None:
        token = self.take()
        if token.text != text:
            found = token.text or "end of formula"
            raise FormulaError(f"expected {text!r} at position {token.pos}, found {found!r} in {self.source!r}")

    def parse(self) -> Node:
        node = self.expr()
        token = self.peek()
        if token.kind != "end":
            raise FormulaError(f"unexpected {token.text!r} at position {token.pos} in {self.source!r}")
        return node

    def expr(self) -> Node:
        return self.left_associative(self.term, ("+", "-"))

    def term(self) -> Node:
        return self.left_associative(self.unary, ("*", "/"))

    def left_associative(self, operand: Callable[[], Node], operators: tuple[str, ...]) -> Node:
        """operand (op operand)*, folded to the left so that 8 - 3 - 2 is (8 - 3) - 2."""
        node = operand()
        while self.peek().text in operators:
            op = self.take().text
            node = ("bin", op, node, operand())
        return node

    def unary(self) -> Node:
        if self.peek().text == "-":
            self.take()
            return ("neg", self.unary())
        if self.peek().text == "+":
            self.take()
            return self.unary()
        return self.power()

    def power(self) -> Node:
        base = self.atom()
        if self.peek().text == "**":
            self.take()
            return ("bin", "**", base, self.unary())
        return base

    def atom(self) -> Node:
        token = self.take()
        if token.kind == "number":
            return ("num", float(token.text))
        if token.kind == "name":
            if self.peek().text != "(":
                return ("name", token.text)
            if token.text not in FUNCTIONS:
                allowed = ", ".join(sorted(FUNCTIONS))
                raise FormulaError(f"call of {token.text!r} is not allowed; functions: {allowed}")
            self.take()
            args = [self.expr()]
            while self.peek().text == ",":
                self.take()
                args.append(self.expr())
            self.expect(")")
            return ("call", token.text, args)
        if token.text == "(":
            node = self.expr()
            self.expect(")")
            return node
        found = token.text or "end of formula"
        raise FormulaError(
            f"expected a number, a name or '(' at position {token.pos}, found {found!r} in {self.source!r}"
        )


_BINARY: dict[str, Callable[[float, float], float]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
    "**": lambda a, b: a**b,
}


@dataclass(frozen=True)
class Formula:
    """A parsed formula: the names it reads and a safe evaluator."""

    source: str
    tree: Node

    @property
    def names(self) -> frozenset[str]:
        return frozenset(_names(self.tree))

    def evaluate(self, env: Mapping[str, float]) -> float:
        try:
            return float(_evaluate(self.tree, env))
        except ZeroDivisionError:
            raise FormulaError(f"division by zero in {self.source!r} with {dict(env)}") from None
        except (OverflowError, ValueError, TypeError) as exc:
            raise FormulaError(f"cannot evaluate {self.source!r} with {dict(env)}: {exc}") from None


def parse(source: str) -> Formula:
    """Parse a formula, raising FormulaError with the position of the first problem."""
    if not isinstance(source, str) or not source.strip():
        raise FormulaError("empty formula")
    try:
        return Formula(source, _Parser(source).parse())
    except RecursionError:
        raise FormulaError(f"formula nested too deeply: {source[:40]!r}...") from None


def _names(node: Node) -> list[str]:
    kind = node[0]
    if kind == "name":
        return [node[1]]
    if kind == "neg":
        return _names(node[1])
    if kind == "bin":
        return _names(node[2]) + _names(node[3])
    if kind == "call":
        return [name for arg in node[2] for name in _names(arg)]
    return []


def _evaluate(node: Node, env: Mapping[str, float]) -> float:
    kind = node[0]
    if kind == "num":
        return node[1]
    if kind == "name":
        if node[1] not in env:
            raise FormulaError(f"unknown name {node[1]!r}")
        return env[node[1]]
    if kind == "neg":
        return -_evaluate(node[1], env)
    if kind == "bin":
        return _BINARY[node[1]](_evaluate(node[2], env), _evaluate(node[3], env))
    return FUNCTIONS[node[1]](*(_evaluate(arg, env) for arg in node[2]))
