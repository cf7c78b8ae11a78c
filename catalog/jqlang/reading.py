"""Which top-level fields of its input a jq program reads.

The resolver caches the component tree of an object per (uid, generation)
when every path behind it reads only ``.spec``: Kubernetes bumps
``metadata.generation`` on every spec change, so such results stay valid
across the status-only updates that make up most of a watch stream.  This
module answers "what does the program read?" conservatively: anything it
cannot prove is ``ANY``.
"""

from __future__ import annotations

from .parsing import parse

ANY = None  # the whole input


def _union(*sets):
    out = set()
    for s in sets:
        if s is ANY:
            return ANY
        out |= s
    return out


def root_reads(node) -> set | None:
    """Top-level keys of the input the node reads, or ANY."""
    tag = node[0]
    if tag in ("lit", "var"):
        return set()
    if tag == "identity":
        return ANY
    if tag == "index":
        base, key = node[1], node[2]
        if base == ("identity",) and key[0] == "lit" and isinstance(key[1], str):
            return {key[1]}
        return _union(root_reads(base), root_reads(key))
    if tag in ("opt", "iter"):
        return root_reads(node[1])
    if tag == "slice":
        return _union(*[root_reads(n) for n in node[1:] if n is not None])
    if tag in ("pipe",):
        return root_reads(node[1])
    if tag == "as":
        return _union(root_reads(node[1]), root_reads(node[3]))
    if tag == "reduce":
        return _union(root_reads(node[1]), root_reads(node[3]))
    if tag in ("comma", "alt", "and", "or"):
        return _union(root_reads(node[1]), root_reads(node[2]))
    if tag == "binop":
        return _union(root_reads(node[2]), root_reads(node[3]))
    if tag == "neg":
        return root_reads(node[1])
    if tag == "if":
        parts = [root_reads(node[1]), root_reads(node[2])]
        parts.append(root_reads(node[3]) if node[3] is not None else ANY)
        return _union(*parts)
    if tag == "try":
        return _union(root_reads(node[1]), root_reads(node[2]) if node[2] is not None else set())
    if tag == "array":
        return root_reads(node[1])
    if tag == "object":
        return _union(*[_union(root_reads(k), root_reads(v)) for k, v in node[1]])
    if tag == "interp":
        return _union(*[root_reads(p) for p in node[1] if not isinstance(p, str)])
    # a builtin call works on its whole input
    return ANY


def reads(source: str) -> set | None:
    """Top-level keys a program reads from its input (ANY when unknown or outside the subset)."""
    try:
        return root_reads(parse(source))
    except Exception:  # noqa: BLE001 - unparsable here means "unknown", the safe answer
        return ANY
