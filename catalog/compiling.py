"""Compiling a definition into two generated functions: its status and its components.

Why: resolution runs once per event at every stage of the pipeline.  The
reference resolver (``resolving.py``) walks the definition's model for every
object: a closure call per jq node, a budget and a result list per program,
the same ``.spec.x`` read by a dozen programs.  Here each definition becomes
Python code once (``jqlang/generating.py`` builds it as an AST, never from
text): every root path is read once per object and shared by all programs,
status mappings are one chain of tests, and each component is a few
straight-line statements ending in one call of a small assembler below.

Exactness is by construction: the generated code computes what the reference
computes, or raises :class:`Bail` (on any error, any value outside the plain
shapes it expects, any evaluation long enough to meet the reference's bounds),
and the resolver then resolves that object the reference way, which yields
the reference's record or its precise error.  The differential tests
(tests/catalog/test_compiling.py) hold both to identical records.
"""

from __future__ import annotations

import ast

from .definitions import Component, Definition, StatusDefinition
from .jqlang import Unsupported
from .jqlang.generating import (
    Bail, Generator, assign, build_function, call, class_of, const, if_, is_, is_not, method, name, raise_bail,
)
from .jqlang.values import tojson, tostring
from .requests import RequestError, Resources, effective_request
from .statuses import as_text
from .workloads import ComponentView

MAX_COUNT = 2**31 - 1  # Kubernetes counts are int32; MaxInt32 is the usual "no maximum"


# -- the assemblers generated code calls -------------------------------------------------------
def _text(v):
    return v if v.__class__ is str else as_text(v)


def _condition_status(v):
    if v.__class__ is str:
        return v
    if v.__class__ is bool:
        return "True" if v else "False"
    return as_text(v)


def _result_text(v):
    """How a byExpression result compares with its expectedResult."""
    if v.__class__ is str:
        return v
    return "null" if v is None else as_text(v)


def _conditions(raw, tf, sf, rf, mf):
    out = []
    for c in raw:
        if c.__class__ is not dict:
            raise Bail
        t, s, r, m = c.get(tf), c.get(sf), c.get(rf), c.get(mf)
        out.append({
            "type": t if t.__class__ is str else as_text(t),
            "status": s if s.__class__ is str else ("True" if s else "False") if s.__class__ is bool else as_text(s),
            "reason": r if r.__class__ is str else as_text(r),
            "message": m if m.__class__ is str else as_text(m),
        })
    return out


def _by_type(raw, tf):
    return {_text(c.get(tf)): c for c in raw}


def read_count(value, minimum: int = 0) -> int | None:
    """A count as definitions give them: ints, digit strings and finite numbers (truncated),
    null for none; ValueError with the reason otherwise."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ValueError(f"expected a count, got {as_text(value)!r}")
    if value < minimum or value > MAX_COUNT:
        raise ValueError(f"count {value!r} out of range")
    return int(value)


_count = read_count   # generated code: its ValueError hands the object to the reference

AUTOSCALED = -1   # a replicas count of -1: an autoscaler owns the count (Milvus's HPA mode)


def read_replicas(value) -> int | None:
    """A replicas count as read_count, except -1, the convention for "an autoscaler owns the
    count": no count (null, so the pods fall back to the minimum, else one), never an error."""
    count = read_count(value, AUTOSCALED)
    return None if count == AUTOSCALED else count


def _ids(outputs):
    ids = []
    for v in outputs:
        if v is None:
            raise Bail
        ids.append(v if v.__class__ is str else tostring(v))
    return ids


def align(outputs: list, n: int) -> list | None:
    """One value per instance: n outputs, or one shared by all, or none (null); None when the
    counts do not match."""
    if len(outputs) == n:
        return outputs
    if len(outputs) == 1:
        return outputs * n
    if not outputs:
        return [None] * n
    return None


def _aligned(outputs, n):
    aligned = align(outputs, n)
    if aligned is None:
        raise Bail
    return aligned


def _one_of(outputs):
    """The value of a multi-output program for a single instance (aligned to 1)."""
    if len(outputs) == 1:
        return outputs[0]
    if not outputs:
        return None
    raise Bail


def _pod_template(t):
    if t is None:
        return None
    if t.__class__ is not dict:
        raise Bail
    return {"metadata": t.get("metadata") or {}, "spec": t.get("spec") or {}}


def _pod_spec(s, m):
    if s is None:
        return None
    if s.__class__ is not dict:
        raise Bail
    return {"metadata": m if m.__class__ is dict else {}, "spec": s}


def fragment_template(got: dict):
    """A pod template (or None) from the values of a fragmented pod spec's paths, by field;
    TypeError when the containers are not a list.  (Once per component of every object of a
    fragmented definition, a Milvus's dozen: plain statements, no comprehension frames.)"""
    for v in got.values():
        if v is not None:
            break
    else:
        return None   # nothing given (a component the object does not deploy)
    get = got.get
    containers = get("containers")
    if containers is not None and not isinstance(containers, list):
        raise TypeError(f"containers must be a list, got {type(containers).__name__}")
    resources, image = get("resources"), get("image")
    if containers is None:
        if get("container") is not None:
            containers = [got["container"]]
        elif resources is not None or image is not None:
            containers = [{"name": "main"}]
    if containers:
        containers = [dict(c) if isinstance(c, dict) else c for c in containers]   # ours to complete
        first = containers[0]
        if isinstance(first, dict):
            if resources is not None:
                first["resources"] = resources
            if image is not None:
                first["image"] = image
    pod_spec = {"containers": containers or []}
    for key in ("schedulerName", "priorityClassName", "resourceClaims"):
        value = get(key)
        if value is not None:
            pod_spec[key] = value
    pod_affinity, node_affinity = get("podAffinity"), get("nodeAffinity")
    if pod_affinity is not None or node_affinity is not None:
        affinity = pod_spec["affinity"] = {}
        if pod_affinity is not None:
            affinity["podAffinity"] = pod_affinity
        if node_affinity is not None:
            affinity["nodeAffinity"] = node_affinity
    metadata = {}
    labels, annotations = get("labels"), get("annotations")
    if isinstance(labels, dict):
        metadata["labels"] = labels
    if isinstance(annotations, dict):
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": pod_spec}


class _Shape:
    """What the assembler needs to know of a component: its names."""

    __slots__ = ("name", "parent", "kind")

    def __init__(self, comp: Component):
        self.name = comp.name
        self.parent = comp.parent.name if comp.parent else None
        self.kind = str(comp.kind) if comp.kind else None


def _source(v):
    if v is None or v.__class__ is str:
        return v
    raise Bail


def _view(shape, instance, template, r, lo, hi, per, status, source, gpus):
    # counts are mostly null or plain ints in range: checked here without a call
    if r is not None and not (r.__class__ is int and 0 <= r <= MAX_COUNT):
        r = read_replicas(r)
    if lo is not None and not (lo.__class__ is int and 0 <= lo <= MAX_COUNT):
        lo = _count(lo)
    if hi is not None and not (hi.__class__ is int and 0 <= hi <= MAX_COUNT):
        hi = _count(hi)
    if per is None:
        per = 1
    elif not (per.__class__ is int and 0 <= per <= MAX_COUNT):
        per = _count(per)
    if template is not None:
        pods = (r if r is not None else (lo if lo is not None else 1)) * per
        if pods > MAX_COUNT:
            raise Bail   # the reference names the error
        try:
            per_pod = effective_request(template.get("spec"), gpus)
        except RequestError:
            raise Bail from None
    else:
        pods, per_pod = 0, Resources()
    return ComponentView(shape.name, instance, shape.parent, shape.kind, r, lo, hi, per, pods,
                         per_pod, per_pod.scaled(pods), template, status, source)


def _instances(shape, ids, templates, replicas, mins, maxs, pprs, status, sources, gpus):
    n = len(ids)
    replicas, mins, maxs, pprs, sources = (_aligned(replicas, n), _aligned(mins, n), _aligned(maxs, n),
                                           _aligned(pprs, n), [_source(s) for s in _aligned(sources, n)])
    return [_view(shape, ids[i], templates[i], replicas[i], mins[i], maxs[i], pprs[i], status, sources[i], gpus)
            for i in range(n)]


ASSEMBLERS = {
    "_Bail": Bail, "_text": _text, "_condition_status": _condition_status, "_result_text": _result_text,
    "_conditions": _conditions, "_by_type": _by_type, "_ids": _ids, "_aligned": _aligned,
    "_one_of": _one_of, "_pod_template": _pod_template, "_pod_spec": _pod_spec, "_fragmented": fragment_template,
    "_view": _view, "_instances": _instances, "_source": _source, "_tojson": tojson,
}


# -- code generation ---------------------------------------------------------------------------
class _Builder:
    """The code of one generated function: a Generator plus per-program fallbacks."""

    def __init__(self):
        self.ns: dict = dict(ASSEMBLERS)
        self.gen = Generator(self.ns)
        self.body: list = []

    def outputs(self, expr, stmts: list) -> tuple[ast.expr, bool]:
        """(value, one): the program's single output, or the name of its output list.  A bound
        expression (one reading a reference's variable) runs on `bound`, [object, referenced
        objects...], as the reference evaluates it."""
        inp = name("bound" if expr.bound else "obj")
        try:
            code = self.gen.program(expr.program, inp)
        except Unsupported:
            # outside what we generate: the reference program, bounds and all (errors bail)
            ref = self.gen.tmp("r")
            self.ns[ref] = expr.program
            out = self.gen.tmp("o")
            stmts.append(assign(out, method(name(ref), "outputs", inp)))
            return name(out), False
        stmts += code.stmts
        if code.one:
            t = self.gen.tmp()
            if self.gen.is_bool(code.value):
                self.gen.bools.add(t)
            stmts.append(assign(t, code.value))
            return name(t), True
        return code.value, False

    def first(self, expr, stmts: list) -> ast.expr:
        """`ev.first(expr)`: the first output or null (every output computed, as the reference)."""
        return self._one_value(expr, stmts, lambda outs: ast.IfExp(
            test=outs, body=ast.Subscript(value=outs, slice=const(0), ctx=ast.Load()), orelse=const(None)))

    def single(self, expr, stmts: list) -> ast.expr:
        """The value of `expr` for a single instance (the reference's aligned(expr, 1)[0])."""
        return self._one_value(expr, stmts, lambda outs: call("_one_of", outs))

    def _one_value(self, expr, stmts: list, of_outputs) -> ast.expr:
        """One value of `expr`: its single output, or `of_outputs(its output list)`."""
        if expr is None:
            return const(None)
        value, one = self.outputs(expr, stmts)
        if one:
            return value
        t = self.gen.tmp()
        stmts.append(assign(t, of_outputs(value)))
        return name(t)

    def listed(self, expr, stmts: list) -> ast.expr:
        """The outputs of `expr` as a list (a one-output program as a list of one)."""
        if expr is None:
            return ast.List(elts=[], ctx=ast.Load())
        value, one = self.outputs(expr, stmts)
        return ast.List(elts=[value], ctx=ast.Load()) if one else value

    def function(self, fn_name: str, args: list[str]):
        return build_function(fn_name, args, self.gen.prologue() + self.body, self.ns)

    # -- status ------------------------------------------------------------------------------
    def status(self, sd: StatusDefinition, stmts: list, with_details: bool) -> ast.expr:
        """Statements computing the status; returns the expression of (status, statuses, phase,
        conditions) when `with_details`, else of the status alone."""
        g = self.gen
        phase = g.tmp("ph")
        stmts.append(assign(phase, self.first(sd.phase, stmts)))
        stmts.append(if_(ast.BoolOp(op=ast.And(), values=[
            is_not(name(phase), const(None)), is_not(class_of(name(phase)), name("str"))]),
            [assign(phase, call("_text", name(phase)))]))
        raw = g.tmp("raw")
        stmts.append(assign(raw, self.first(sd.conditions, stmts)))
        stmts.append(if_(is_(name(raw), const(None)), [assign(raw, ast.List(elts=[], ctx=ast.Load()))],
                         [if_(is_not(class_of(name(raw)), name("list")), [raise_bail()])]))
        conditions = g.tmp("cs")
        stmts.append(assign(conditions, call("_conditions", name(raw), const(sd.type_field), const(sd.status_field),
                                             const(sd.reason_field), const(sd.message_field))))
        by_type = g.tmp("bt")
        if any(m.conditions for ms in sd.mappings.values() for m in ms):
            stmts.append(assign(by_type, call("_by_type", name(raw), const(sd.type_field))))
        matched = g.tmp("m")
        stmts.append(assign(matched, ast.List(elts=[], ctx=ast.Load())))
        for status, matchers in sd.mappings.items():
            hit = g.tmp("h")
            stmts.append(assign(hit, const(False)))
            for m in matchers:
                tests = []
                if m.phase is not None:
                    tests.append(ast.Compare(left=name(phase), ops=[ast.Eq()], comparators=[const(m.phase)]))
                for expected in m.conditions:
                    c = g.tmp("c")
                    parts = [is_not(ast.NamedExpr(target=ast.Name(id=c, ctx=ast.Store()),
                                                  value=method(name(by_type), "get", const(expected.type))),
                                    const(None))]
                    if expected.status is not None:
                        parts.append(ast.Compare(
                            left=call("_condition_status", method(name(c), "get", const(sd.status_field))),
                            ops=[ast.Eq()], comparators=[const(expected.status)]))
                    if expected.reason is not None:
                        parts.append(ast.Compare(
                            left=call("_text", method(name(c), "get", const(sd.reason_field))),
                            ops=[ast.Eq()], comparators=[const(expected.reason)]))
                    tests.append(ast.BoolOp(op=ast.And(), values=parts) if len(parts) > 1 else parts[0])
                inner: list = []
                if m.expression is not None:
                    value, one = self.outputs(m.expression, inner)
                    first = value if one else ast.Subscript(value=value, slice=const(0), ctx=ast.Load())
                    if one and g.is_bool(value) and m.expected_result in ("true", "false"):
                        # a boolean's text is "true" or "false": test the boolean itself
                        check = value if m.expected_result == "true" else ast.UnaryOp(op=ast.Not(), operand=value)
                    else:
                        check = ast.Compare(left=call("_result_text", first), ops=[ast.Eq()],
                                            comparators=[const(m.expected_result)])
                    if not one:
                        check = ast.BoolOp(op=ast.And(), values=[value, check])
                    inner.append(if_(check, [assign(hit, const(True))]))
                else:
                    inner.append(assign(hit, const(True)))
                if tests:
                    inner = [if_(ast.BoolOp(op=ast.And(), values=tests) if len(tests) > 1 else tests[0], inner)]
                stmts.append(if_(ast.UnaryOp(op=ast.Not(), operand=name(hit)), inner))
            stmts.append(if_(name(hit), [ast.Expr(value=method(name(matched), "append", const(status)))]))
        status_value = ast.IfExp(test=name(matched), body=ast.Subscript(value=name(matched), slice=const(0),
                                                                         ctx=ast.Load()),
                                 orelse=const("Undefined"))
        if not with_details:
            return status_value
        return ast.Tuple(elts=[status_value, name(matched), name(phase), name(conditions)], ctx=ast.Load())

    # -- components ----------------------------------------------------------------------------
    def component(self, definition: Definition, comp: Component, views: str, stmts: list):
        g = self.gen
        shape = g.tmp("shape")
        self.ns[shape] = _Shape(comp)
        body: list = []
        child_status = const(None)
        status_stmts: list = []
        if comp.status is not None and comp is not definition.root:
            child_status = self.status(comp.status, status_stmts, with_details=False)
        scale = comp.scale
        scale_exprs = [scale.replicas, scale.min_replicas, scale.max_replicas, scale.pods_per_replica] \
            if scale else [None] * 4
        requests_from = comp.spec.requests_from if comp.spec else None
        if comp.instance_id is None:
            template = self._template_single(comp, body)
            values = [self.single(e, body) for e in scale_exprs]
            st = g.tmp()
            body += status_stmts
            body.append(assign(st, child_status))
            source = call("_source", self.single(requests_from, body)) if requests_from else const(None)
            body.append(ast.Expr(value=method(name(views), "append", call(
                "_view", name(shape), const(None), template, *values, name(st), source, name("gpus")))))
            stmts += body
            return
        ids = g.tmp("ids")
        body.append(assign(ids, call("_ids", self.listed(comp.instance_id, body))))
        rest: list = []
        templates = self._templates_many(comp, name(ids), rest)
        values = [self.listed(e, rest) for e in scale_exprs]
        st = g.tmp()
        rest += status_stmts
        rest.append(assign(st, child_status))
        sources = self.listed(requests_from, rest)
        rest.append(ast.Expr(value=method(name(views), "extend", call(
            "_instances", name(shape), name(ids), templates, *values, name(st), sources, name("gpus")))))
        body.append(if_(name(ids), rest))
        stmts += body

    def _template_single(self, comp: Component, stmts: list) -> ast.expr:
        spec = comp.spec
        if spec is None:
            return const(None)
        t = self.gen.tmp("tpl")
        if spec.pod_template is not None:
            stmts.append(assign(t, call("_pod_template", self.single(spec.pod_template, stmts))))
        elif spec.pod_spec is not None:
            s = self.single(spec.pod_spec, stmts)
            m = self.single(spec.metadata, stmts)
            stmts.append(assign(t, call("_pod_spec", s, m)))
        else:
            got = ast.Dict(keys=[], values=[])
            for field, expr in spec.fragments.items():
                got.keys.append(const(field))
                got.values.append(self.single(expr, stmts))
            stmts.append(assign(t, call("_fragmented", got)))
        return name(t)

    def _templates_many(self, comp: Component, ids: ast.expr, stmts: list) -> ast.expr:
        spec = comp.spec
        n = call("len", ids)
        t = self.gen.tmp("tpls")
        if spec is None:
            stmts.append(assign(t, ast.BinOp(left=ast.List(elts=[const(None)], ctx=ast.Load()), op=ast.Mult(),
                                             right=n)))
            return name(t)
        item = self.gen.tmp("i")
        if spec.pod_template is not None:
            values = call("_aligned", self.listed(spec.pod_template, stmts), n)
            stmts.append(assign(t, ast.ListComp(elt=call("_pod_template", name(item)), generators=[
                ast.comprehension(target=ast.Name(id=item, ctx=ast.Store()), iter=values, ifs=[], is_async=0)])))
        elif spec.pod_spec is not None:
            specs = call("_aligned", self.listed(spec.pod_spec, stmts), n)
            metas = call("_aligned", self.listed(spec.metadata, stmts), n)
            m = self.gen.tmp("i")
            stmts.append(assign(t, ast.ListComp(elt=call("_pod_spec", name(item), name(m)), generators=[
                ast.comprehension(target=ast.Tuple(elts=[ast.Name(id=item, ctx=ast.Store()),
                                                         ast.Name(id=m, ctx=ast.Store())], ctx=ast.Store()),
                                  iter=call("zip", specs, metas), ifs=[], is_async=0)])))
        else:
            fields = list(spec.fragments)
            columns = [call("_aligned", self.listed(spec.fragments[f], stmts), n) for f in fields]
            row = self.gen.tmp("row")
            got = ast.Dict(keys=[const(f) for f in fields],
                           values=[ast.Subscript(value=name(row), slice=const(i), ctx=ast.Load())
                                   for i in range(len(fields))])
            stmts.append(assign(t, ast.ListComp(elt=call("_fragmented", got), generators=[
                ast.comprehension(target=ast.Name(id=row, ctx=ast.Store()), iter=call("zip", *columns),
                                  ifs=[], is_async=0)])))
        return name(t)


class CompiledDefinition:
    """The generated status and components functions of one definition.

    `status(obj, bound)` -> (status, statuses, phase, conditions); `components(obj, gpus, bound)`
    -> views; `bound` is [obj, referenced objects...] for a definition with references (else
    None).  Either raises Bail for an object it leaves to the reference resolver.
    """

    __slots__ = ("status", "components")

    def __init__(self, definition: Definition):
        b = _Builder()
        if definition.root.status is None:
            self.status = _no_status
        else:
            b.gen.plan(e.program for e in _status_exprs(definition.root.status) if not e.bound)
            b.body.append(ast.Return(value=b.status(definition.root.status, b.body, with_details=True)))
            self.status = b.function(f"status_{_ident(definition.name)}", ["obj", "bound"])
        b = _Builder()
        b.gen.plan(e.program for comp in definition.components for e in component_exprs(definition, comp)
                   if not e.bound)   # (the sub-expressions shared are those on the object itself)
        views = b.gen.tmp("views")
        b.body.append(assign(views, ast.List(elts=[], ctx=ast.Load())))
        for comp in definition.components:
            b.component(definition, comp, views, b.body)
        b.body.append(ast.Return(value=name(views)))
        self.components = b.function(f"components_{_ident(definition.name)}", ["obj", "gpus", "bound"])


def _status_exprs(sd: StatusDefinition) -> list:
    exprs = [sd.phase, sd.conditions] + [m.expression for ms in sd.mappings.values() for m in ms]
    return [e for e in exprs if e is not None]


def component_exprs(definition: Definition, comp: Component) -> list:
    """The expressions a component's resolution evaluates (its child status's included)."""
    exprs = [comp.instance_id]
    if comp.spec is not None:
        exprs += [comp.spec.pod_template, comp.spec.pod_spec, comp.spec.metadata, *comp.spec.fragments.values(),
                  comp.spec.requests_from]
    if comp.scale is not None:
        s = comp.scale
        exprs += [s.replicas, s.min_replicas, s.max_replicas, s.pods_per_replica]
    exprs = [e for e in exprs if e is not None]
    if comp.status is not None and comp is not definition.root:
        exprs += _status_exprs(comp.status)
    return exprs


def component_programs(definition: Definition, comp: Component) -> list:
    """The programs a component's resolution evaluates (its child status's included)."""
    return [e.program for e in component_exprs(definition, comp)]


def _no_status(obj, bound):
    return "Undefined", [], None, []


def _ident(text: str) -> str:
    """A function name for tracebacks; only letters, digits and underscores (never code)."""
    return "".join(ch if ch.isalnum() and ch.isascii() else "_" for ch in text)[:40] or "definition"


def compile_definition(definition: Definition) -> CompiledDefinition | None:
    """The compiled form, or None where it cannot be had (Python refuses code nested deeper
    than its compiler allows; a definition from a cluster may hold any jq): such a definition
    is resolved the reference way, which is always exact."""
    try:
        return CompiledDefinition(definition)
    except Exception:  # noqa: BLE001 - generated code is an optimisation, never a new failure
        return None


__all__ = ["Bail", "CompiledDefinition", "align", "compile_definition", "component_exprs", "component_programs",
           "fragment_template",
           "read_count", "read_replicas"]
