"""Mapping a framework's own status onto the shared status vocabulary.

Matchers under one status are OR'ed; the parts of one matcher (byPhase,
byConditions, byExpression) are AND'ed.  Several statuses may match; the
resolved status is the highest by precedence (see definitions.STATUS_PRECEDENCE),
``Undefined`` when none matches.
"""

from __future__ import annotations

from .definitions import UNDEFINED, StatusDefinition
from .jqlang.values import tojson


def as_text(value) -> str | None:
    """How an expression result or field compares with the strings of a definition."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return tojson(value)


def _condition_status_text(value) -> str | None:
    # Kubernetes writes "True"/"False"; some CRDs write JSON booleans.
    if isinstance(value, bool):
        return "True" if value else "False"
    return as_text(value)


def match_statuses(sd: StatusDefinition, phase, conditions: list, evaluate) -> list[str]:
    """Every matched status, in precedence order.

    `evaluate(expr)` returns the outputs of a byExpression program on the object.
    """
    by_type = {}
    for c in conditions:
        if isinstance(c, dict):
            by_type[as_text(c.get(sd.type_field))] = c
    matched = []
    for status, matchers in sd.mappings.items():
        for m in matchers:
            if m.phase is not None and as_text(phase) != m.phase:
                continue
            ok = True
            for expected in m.conditions:
                cond = by_type.get(expected.type)
                if cond is None:
                    ok = False
                    break
                if expected.status is not None and _condition_status_text(cond.get(sd.status_field)) != expected.status:
                    ok = False
                    break
                if expected.reason is not None and as_text(cond.get(sd.reason_field)) != expected.reason:
                    ok = False
                    break
            if not ok:
                continue
            if m.expression is not None:
                out = evaluate(m.expression)
                if not out or (as_text(out[0]) if out[0] is not None else "null") != m.expected_result:
                    continue
            matched.append(status)
            break
    return matched


def resolve_status(matched: list[str]) -> str:
    return matched[0] if matched else UNDEFINED
