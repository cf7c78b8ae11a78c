"""Validating definition documents: schema, jq, and the rules between fields.

Every problem names the file, the definition, the field path and the reason,
and all problems of a document are reported at once, so an author fixes a
definition in one round.  The same checks run when a catalog loads, whatever
the origin of the definition (built-in, file, cluster).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import jsonschema
import yaml

from . import jqlang
from .definitions import DEFINITION_KINDS, ORIGINS, Definition, bound_source, build_definition


@dataclass(frozen=True)
class Problem:
    file: str
    definition: str
    path: str
    reason: str

    def __str__(self):
        where = f"{self.file}: " if self.file else ""
        name = f"definition {self.definition!r}: " if self.definition else ""
        path = f"{self.path}: " if self.path else ""
        return f"{where}{name}{path}{self.reason}"


class DefinitionError(Exception):
    """One or more problems make a definition unusable."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def _closed(schema):
    """Our validator treats object schemas as closed, unlike Kubernetes' pruning:
    an unknown field in a definition is almost always a typo (ownerName)."""
    if isinstance(schema, dict):
        schema = {k: _closed(v) for k, v in schema.items()}
        if schema.get("type") == "object" and "properties" in schema and not schema.get(
                "x-kubernetes-preserve-unknown-fields"):
            schema.setdefault("additionalProperties", False)
        return schema
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


@lru_cache(maxsize=1)
def crd_document() -> dict:
    text = resources.files("workloadmap.catalog").joinpath("crd/workloadmap.io_workloadmaps.yaml").read_text()
    return yaml.safe_load(text)


@lru_cache(maxsize=1)
def _schema_validator():
    schema = crd_document()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema = _closed(schema)
    schema["properties"]["metadata"] = {"type": "object"}
    return jsonschema.Draft7Validator(schema)


def prune_nulls(node):
    """The document as an API server stores it: a field given as null is dropped (none of the
    schema's fields is nullable), so its default applies, as upstream's rendered definitions
    expect (`typeFieldName: null` reads as `type`)."""
    if isinstance(node, dict):
        return {k: prune_nulls(v) for k, v in node.items() if v is not None}
    if isinstance(node, list):
        return [prune_nulls(v) for v in node]
    return node


def _list_problems(schema, node, parts=()):
    """(path parts, reason) of every duplicate in a list the CRD declares a map (by its keys) or
    a set, as an API server refuses them (`x-kubernetes-list-type`)."""
    if not isinstance(schema, dict):
        return
    if isinstance(node, dict):
        for key, value in node.items():
            sub = (schema.get("properties") or {}).get(key)
            if sub is not None:
                yield from _list_problems(sub, value, (*parts, key))
    elif isinstance(node, list):
        list_type = schema.get("x-kubernetes-list-type")
        keys = schema.get("x-kubernetes-list-map-keys") or []
        seen: dict = {}
        for i, item in enumerate(node):
            if list_type == "map" and isinstance(item, dict):
                entry = tuple(item.get(k) for k in keys)
                what = ", ".join(f"{k} {v!r}" for k, v in zip(keys, entry))
            elif list_type == "set":
                entry = json.dumps(item, sort_keys=True)
                what = f"value {item!r}"
            else:
                entry = None
            if entry is not None:
                if entry in seen:
                    yield (*parts, i), (f"duplicate entry ({what}; also at [{seen[entry]}]): the list is a "
                                        + (f"map keyed by {', '.join(keys)}" if list_type == "map" else "set"))
                else:
                    seen[entry] = i
            yield from _list_problems(schema.get("items") or {}, item, (*parts, i))


# Kubernetes' label syntax (apimachinery's IsQualifiedName and IsValidLabelValue)
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def label_key_problem(key: str) -> str | None:
    """Why a text is not a label key ([prefix/]name), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"label key {key!r}: the prefix must be a DNS subdomain (lower-case alphanumerics, '-', '.')"
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        return (f"label key {key!r}: the name must be 1-63 characters of alphanumerics, '-', '_' or '.', "
                "starting and ending with an alphanumeric")
    return None


def label_value_problem(value) -> str | None:
    """Why a value is not a label value, or None."""
    if not isinstance(value, str):
        return f"label value {value!r} must be a string"
    if value and (len(value) > 63 or not _LABEL_NAME.match(value)):
        return (f"label value {value!r} must be empty or 1-63 characters of alphanumerics, '-', '_' or '.', "
                "starting and ending with an alphanumeric")
    return None


def _path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


JQ_FIELDS = {
    "instanceIdPath", "podTemplateSpecPath", "podSpecPath", "metadataPath", "replicasPath", "minReplicasPath",
    "maxReplicasPath", "podsPerReplicaPath", "requestsFromPath", "keyPath", "idPath", "expression",
    "schedulerNamePath", "labelsPath", "annotationsPath", "resourcesPath", "resourceClaimsPath",
    "podAffinityPath", "nodeAffinityPath", "containersPath", "containerPath", "priorityClassNamePath", "imagePath",
    "nameSelector", "kindSelector", "namespaceSelector",
}
# Fields evaluated on something else than the resolved object (a pod; the object to write to; the
# reference selectors, which name what the variables hold): a reference's variable is unbound there.
UNBOUND_FIELDS = {"keyPath", "idPath", "groupByKeyPaths", "filters", "nameSelector", "kindSelector",
                  "namespaceSelector", "suspendActions", "resumeActions", "matchLabels"}


def _jq_fields(node, parts=()):
    """(path parts, expression) of every jq expression in a spec."""
    if isinstance(node, dict):
        for k, v in node.items():
            here = (*parts, k)
            if isinstance(v, str) and (k in JQ_FIELDS or (k == "path" and parts and parts[-1] in (
                    "phaseDefinition", "conditionsDefinition")) or (k == "path" and len(parts) >= 2 and parts[-2] in (
                    "suspendActions", "resumeActions"))):
                yield here, v
            elif k in ("groupByKeyPaths", "filters") and isinstance(v, list):
                for i, e in enumerate(v):
                    if isinstance(e, str):
                        yield (*here, i), e
            else:
                yield from _jq_fields(v, here)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _jq_fields(v, (*parts, i))


def validate_document(doc, file: str = "") -> list[Problem]:
    """Every problem of one definition document (empty when it is valid)."""
    if not isinstance(doc, dict):
        return [Problem(file, "", "", f"a definition must be a mapping, got {type(doc).__name__}")]
    name = str((doc.get("metadata") or {}).get("name") or "") if isinstance(doc.get("metadata"), dict) else ""
    problems: list[Problem] = []

    def problem(path, reason):
        problems.append(Problem(file, name, path, reason))

    doc = prune_nulls(doc)
    if (doc.get("apiVersion"), doc.get("kind")) not in DEFINITION_KINDS:
        kinds = ", ".join(f"{k} ({a})" for a, k in sorted(DEFINITION_KINDS))
        problem("kind", f"{doc.get('kind')!r} of {doc.get('apiVersion')!r} is not a definition kind; expected one of {kinds}")
        return problems
    for err in sorted(_schema_validator().iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        message = err.message
        if err.validator == "additionalProperties":
            message = message.replace("Additional properties are not allowed", "unknown field")
        problem(_path(err.absolute_path), message)
    for parts, reason in _list_problems(_schema_validator().schema, doc):
        if parts[-2] != "childComponents":   # names: reported with the root's by _check_structure
            problem(_path(parts), reason)
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        return problems
    structure = spec.get("structureDefinition") if isinstance(spec.get("structureDefinition"), dict) else {}
    references = [r.get("name") for r in structure.get("references") or [] if isinstance(r, dict)]
    references = [n for n in references if isinstance(n, str)]
    for parts, expr in _jq_fields(spec, ("spec",)):
        bound = None if UNBOUND_FIELDS & {p for p in parts if isinstance(p, str)} else bound_source(expr, references)
        try:
            jqlang.compile(bound or expr)
        except jqlang.JqError as exc:
            problem(_path(parts), f"invalid jq expression {expr!r}: {_jq_reason(exc)}")
    schema_ok = not problems
    try:
        _check_structure(spec, problem)
    except (KeyError, TypeError, AttributeError):
        if schema_ok:
            raise
        # the shape is already reported as wrong; rules between fields need the shape
    return problems


def _jq_reason(exc) -> str:
    text = str(exc).strip()
    if text.startswith("jq: error: "):
        text = text[len("jq: error: "):]
    return text.rstrip(":").strip()


def _check_structure(spec, problem):
    sp = "spec.structureDefinition"
    structure = spec["structureDefinition"]
    root = structure["rootComponent"]
    rp = f"{sp}.rootComponent"
    kind = root.get("kind")
    if not kind or "group" not in kind or not kind.get("version") or not kind.get("kind"):
        problem(f"{rp}.kind", "root component must have full kind (group, version, kind; group \"\" for the core API)")
    if "statusDefinition" not in root:
        problem(f"{rp}.statusDefinition", "root component must have a status definition")
    if root.get("ownerRef"):
        problem(f"{rp}.ownerRef", "root component cannot have an owner ref")
    children = structure.get("childComponents") or []
    comps = [(rp, root)] + [(f"{sp}.childComponents[{i}]", c) for i, c in enumerate(children)]
    names = {}
    for path, c in comps:
        if c["name"] in names:
            problem(f"{path}.name", f"component name {c['name']!r} is not unique (also at {names[c['name']]})")
        else:
            names[c["name"]] = path
    for path, c in comps[1:]:
        owner = c.get("ownerRef")
        if not owner:
            problem(f"{path}.ownerRef", f"child component {c['name']!r} has no owner ref")
        elif owner not in names:
            problem(f"{path}.ownerRef", f"child component {c['name']!r} has owner ref to non-existing component {owner!r}")
    owners = {c["name"]: c.get("ownerRef") for _, c in comps[1:]}
    for path, c in comps[1:]:
        seen, node = set(), c["name"]
        while node in owners and owners[node] in names:
            if node in seen:
                problem(f"{path}.ownerRef", f"ownership cycle detected involving component {c['name']!r}")
                break
            seen.add(node)
            node = owners[node]
    for path, c in comps:
        _check_component(c, path, problem)
    for i, ref in enumerate(structure.get("references") or []):
        path = f"{sp}.references[{i}]"
        if bool(ref.get("kind")) == bool(ref.get("kinds")):
            problem(path, f"reference {ref['name']!r} names exactly one of kind or kinds")
        elif len(ref.get("kinds") or []) > 1 and not ref.get("kindSelector"):
            problem(f"{path}.kindSelector", f"reference {ref['name']!r} has several kinds: a kindSelector picks one")
    gang = (spec.get("optimizationInstructions") or {}).get("gangScheduling") or {}
    gp = "spec.optimizationInstructions.gangScheduling"
    members = [(f"{gp}.podGroups[{gi}].members[{mi}]", m)
               for gi, g in enumerate(gang.get("podGroups") or []) for mi, m in enumerate(g.get("members") or [])]
    if gang.get("podGroup"):
        members += [(f"{gp}.podGroup.subGroups[{mi}]", m) for mi, m in enumerate(gang["podGroup"].get("subGroups") or [])]
    for path, m in members:
        if m["componentName"] not in names:
            problem(f"{path}.componentName",
                    f"pod-group member component {m['componentName']!r} is not defined (should be a root or child component)")


def _check_component(c, path, problem):
    spec = c.get("specDefinition")
    if spec is not None:
        variants = [k for k in ("podTemplateSpecPath", "podSpecPath", "fragmentedPodSpecDefinition") if spec.get(k)]
        if len(variants) > 1:
            problem(f"{path}.specDefinition",
                    f"component {c['name']!r} has multiple pod spec definitions ({', '.join(variants)}); keep exactly one")
        elif not variants:
            problem(f"{path}.specDefinition", f"component {c['name']!r} has an empty spec definition")
        if spec.get("metadataPath") and not spec.get("podSpecPath"):
            problem(f"{path}.specDefinition.metadataPath", "metadataPath may only be used with podSpecPath")
    selector = c.get("podSelector") or {}
    type_selector = selector.get("componentTypeSelector")
    if type_selector is not None:
        tp = f"{path}.podSelector.componentTypeSelector"
        if "keyPath" not in type_selector and "matchLabels" not in type_selector:
            problem(tp, "at least one of keyPath or matchLabels must be set")
        if "value" in type_selector and "keyPath" not in type_selector:
            problem(f"{tp}.value", "value requires keyPath")
        for key, value in (type_selector.get("matchLabels") or {}).items():
            for reason in (label_key_problem(key), label_value_problem(value)):
                if reason:
                    problem(f"{tp}.matchLabels", reason)
    has_id_path = bool(c.get("instanceIdPath"))
    has_instance_selector = bool(selector.get("componentInstanceSelector"))
    if has_id_path and not has_instance_selector:
        problem(f"{path}.instanceIdPath",
                f"component {c['name']!r} has instance id path but no pod component instance selector")
    if has_instance_selector and not has_id_path:
        problem(f"{path}.podSelector.componentInstanceSelector",
                f"component {c['name']!r} has pod component instance selector but no instance id path")
    status = c.get("statusDefinition")
    if status is not None:
        sp = f"{path}.statusDefinition"
        for key, matchers in (status.get("statusMappings") or {}).items():
            for i, m in enumerate(matchers or []):
                mp = f"{sp}.statusMappings.{key}[{i}]"
                if not (m.get("byPhase") or m.get("byConditions") or m.get("byExpression")):
                    problem(mp, "a status matcher needs byPhase, byConditions or byExpression")
                if m.get("byPhase") and not status.get("phaseDefinition"):
                    problem(f"{mp}.byPhase", "byPhase needs a phaseDefinition")
                if m.get("byConditions") and not status.get("conditionsDefinition"):
                    problem(f"{mp}.byConditions", "byConditions needs a conditionsDefinition")
                for j, cond in enumerate(m.get("byConditions") or []):
                    if cond.get("status") is None and cond.get("reason") is None:
                        problem(f"{mp}.byConditions[{j}]", "an expected condition needs status or reason")
    suspend = c.get("suspendDefinition")
    if suspend is not None:
        for key in ("suspendActions", "resumeActions"):
            for i, action in enumerate(suspend.get(key) or []):
                try:
                    json.loads(action["value"])
                except ValueError:
                    problem(f"{path}.suspendDefinition.{key}[{i}].value",
                            f"value {action['value']!r} is not JSON text (write \"true\", \"0\", \"\\\"Suspended\\\"\")")


def load_definition(doc, origin: str, source: str) -> Definition:
    """Validate a document and build its model; raises DefinitionError."""
    assert origin in ORIGINS, origin
    problems = validate_document(doc, source)
    if problems:
        raise DefinitionError(problems)
    return build_definition(prune_nulls(doc), origin, source)


def read_documents(text: str, source: str) -> list:
    """The documents of a YAML/JSON text: multi-document, and the items of a `kind: List` or of
    the command line's ``{items: [...], count: N}`` (what `catalog show -o yaml|json` prints) flattened."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        reason = getattr(exc, "problem", None) or str(exc)
        raise DefinitionError([Problem(source, "", "", f"malformed YAML: {where}{reason}")]) from None
    except RecursionError:
        raise DefinitionError([Problem(source, "", "", "malformed YAML: nested too deeply")]) from None
    out = []
    for d in docs:
        if isinstance(d, list):
            out.extend(d)
        elif isinstance(d, dict) and isinstance(d.get("items"), list) and (
                str(d.get("kind", "")).endswith("List") or set(d) <= {"items", "count"}):
            out.extend(d["items"])
        else:
            out.append(d)
    return out


def validate_file(path: str) -> list[Problem]:
    """Every problem of every definition in a file."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        return [Problem(path, "", "", f"cannot read: {exc.strerror}")]
    try:
        docs = read_documents(text, path)
    except DefinitionError as exc:
        return exc.problems
    if not docs:
        return [Problem(path, "", "", "no definition documents")]
    problems = []
    for d in docs:
        problems.extend(validate_document(d, path))
    return problems


def load_file(path: str, origin: str = "file") -> list[Definition]:
    """Every definition of a file; raises DefinitionError with all problems."""
    problems = validate_file(path)
    if problems:
        raise DefinitionError(problems)
    with open(path, encoding="utf-8") as fh:
        docs = read_documents(fh.read(), path)
    return [build_definition(prune_nulls(d), origin, path) for d in docs]
