"""Which paths of its input a jq program reads.

The resolver caches the component tree of an object per (uid, generation) and
the values of the paths outside ``.spec`` its definition reads: Kubernetes
bumps ``metadata.generation`` on every spec change, so such results stay valid
across the status-only updates that make up most of a watch stream, unless a
value the components depend on (a Job's ``.status.succeeded``, an
InferenceService's deployment-mode annotation) changed.  This module answers
"what does the program read?" conservatively: a path means everything under
it may be read; anything it cannot prove reads the whole input (``ANY``).
"""

from __future__ import annotations

from .parsing import parse

ANY = None  # the whole input
WHOLE = ()  # the path of the whole input


def _path_of(node, aliases: dict, base: tuple = WHOLE):
    """The root path a node is, when it is a plain path (`.a.b["c"]` from an input at path
    `base`, or `$v.x` with $v bound to a path), else None."""
    keys = []
    while node[0] == "index" and node[2][0] == "lit" and isinstance(node[2][1], str):
        keys.append(node[2][1])
        node = node[1]
    if node == ("identity",):
        if base is None:
            return None   # a computed value, not a root path
    elif node[0] == "var" and node[1] in aliases:
        base = aliases[node[1]]
    else:
        return None
    return base + tuple(reversed(keys))


def root_paths(node, aliases: dict | None = None, base: tuple | None = WHOLE) -> set:
    """The root paths a node reads, its input being the value at root path `base`, or a
    computed value when `base` is None (then only path-bound variables read the root).
    WHOLE among them when it may read everything."""
    aliases = aliases or {}
    tag = node[0]
    if tag == "lit":
        return set()
    if tag == "var":
        return {aliases[node[1]]} if node[1] in aliases else set()
    if tag == "identity":
        return {base} if base is not None else set()
    path = _path_of(node, aliases, base)
    if path is not None:
        return {path}
    if tag == "index":
        return root_paths(node[1], aliases, base) | root_paths(node[2], aliases, base)
    if tag in ("opt", "iter", "neg", "array"):
        return root_paths(node[1], aliases, base)
    if tag == "slice":
        return set().union(*[root_paths(n, aliases, base) for n in node[1:] if n is not None])
    if tag == "pipe":
        left = _path_of(node[1], aliases, base)
        if left is not None:   # `.spec.x | f`, `$root | f`: f reads under that path
            out = root_paths(node[2], aliases, left)
            if not any(p[:len(left)] == left for p in out):
                out.add(left)   # read for its shape at least (indexing a string fails)
            return out
        return root_paths(node[1], aliases, base) | root_paths(node[2], aliases, None)
    if tag == "as":
        source = node[1]
        bound = _path_of(source, aliases, base)
        inner = dict(aliases)
        if bound is not None:   # `.spec.x as $v`, `. as $root`: what reads through $v counts
            inner[node[2]] = bound
            out = root_paths(node[3], inner, base)
            if bound and not any(p[:len(bound)] == bound for p in out):
                out.add(bound)   # read for its shape at least
            return out
        inner.pop(node[2], None)   # a computed value: what it read is the source's reads
        return root_paths(source, aliases, base) | root_paths(node[3], inner, base)
    if tag == "reduce":
        return root_paths(node[1], aliases, base) | root_paths(node[3], aliases, base) \
            | root_paths(node[4], aliases, None)
    if tag in ("comma", "alt", "and", "or"):
        return root_paths(node[1], aliases, base) | root_paths(node[2], aliases, base)
    if tag == "binop":
        return root_paths(node[2], aliases, base) | root_paths(node[3], aliases, base)
    if tag == "if":
        out = root_paths(node[1], aliases, base) | root_paths(node[2], aliases, base)
        if node[3] is not None:
            return out | root_paths(node[3], aliases, base)
        return out | ({base} if base is not None else set())
    if tag == "try":
        return root_paths(node[1], aliases, base) | (root_paths(node[2], aliases, None) if node[2] is not None else set())
    if tag == "object":
        return set().union(*[root_paths(k, aliases, base) | root_paths(v, aliases, base) for k, v in node[1]])
    if tag == "interp":
        return set().union(*[root_paths(p, aliases, base) for p in node[1] if not isinstance(p, str)])
    if tag == "call":
        if (node[1], len(node[2])) == ("empty", 0):
            return set()
        # a builtin works on its whole input; its arguments run on that input or on parts of it
        out = {base} if base is not None else set()
        for arg in node[2]:
            out |= root_paths(arg, aliases, None)
        return out
    return {base} if base is not None else set()


def paths_read(source: str) -> set | None:
    """The input paths a program reads, minimal (no path under another), or ANY."""
    try:
        paths = root_paths(parse(source))
    except Exception:  # noqa: BLE001 - unparsable here means "unknown", the safe answer
        return ANY
    if WHOLE in paths:
        return ANY
    return {p for p in paths if not any(p[:i] in paths for i in range(1, len(p)))}


def reads(source: str) -> set | None:
    """Top-level keys a program reads from its input (ANY when unknown or outside the subset)."""
    paths = paths_read(source)
    return ANY if paths is ANY else {p[0] for p in paths}
