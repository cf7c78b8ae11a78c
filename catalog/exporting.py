"""Exporting definitions in upstream's form: a `Karta` document and the `Karta` CRD.

Why: users and tools of the upstream ecosystem (KAI Scheduler's pod grouper, Run:ai) read
`run.ai/v1alpha1 Karta` objects from their API server, whose CRD knows no workloadmap
extension: it prunes unknown fields, and `kubectl apply` with strict field validation refuses
them.  A definition exported here is one that API server accepts: the extensions are left out
(and named, since the definition then means less: a LeaderWorkerSet counts one pod per worker
replica without `podsPerReplicaPath`), every GVK carries `group` (upstream requires it, "" for
the core API), and the rest is the definition as written.  The Karta CRD is ours minus the
extensions, so the server-side rules (CEL, list-map keys) are the same for both kinds.
"""

from __future__ import annotations

import copy

import yaml

from .definitions import Definition

KARTA_API_VERSION = "run.ai/v1alpha1"
KARTA_KIND = "Karta"

# workloadmap's extensions, as (where, field): `spec` for the spec itself, `component`,
# `specDefinition` and `scaleDefinition` for every component's
EXTENSIONS = (("spec", "framework"), ("specDefinition", "requestsFromPath"),
              ("scaleDefinition", "podsPerReplicaPath"))


def karta_document(definition: Definition) -> tuple[dict, list[str]]:
    """(the definition as a Karta document, the paths of the extension fields left out)."""
    spec = copy.deepcopy(definition.document.get("spec") or {})
    dropped: list[str] = []
    if "framework" in spec:
        del spec["framework"]
        dropped.append("spec.framework")
    structure = spec.get("structureDefinition") or {}
    sp = "spec.structureDefinition"
    components = [(f"{sp}.rootComponent", structure.get("rootComponent") or {})]
    components += [(f"{sp}.childComponents[{i}]", c) for i, c in enumerate(structure.get("childComponents") or [])]
    for path, comp in components:
        for where, name in EXTENSIONS[1:]:
            part = comp.get(where)
            if isinstance(part, dict) and name in part:
                del part[name]
                dropped.append(f"{path}.{where}.{name}")
                if not part:
                    del comp[where]
        if isinstance(comp.get("kind"), dict):
            comp["kind"] = _full_gvk(comp["kind"])
    if structure.get("additionalChildKinds"):
        structure["additionalChildKinds"] = [_full_gvk(k) for k in structure["additionalChildKinds"]]
    doc = {"apiVersion": KARTA_API_VERSION, "kind": KARTA_KIND, "metadata": {"name": definition.name}, "spec": spec}
    return doc, dropped


def _full_gvk(gvk: dict) -> dict:
    return {"group": gvk.get("group", ""), "version": gvk.get("version"), "kind": gvk.get("kind")}


def karta_crd(workloadmap_crd: dict) -> dict:
    """The Karta CRD (kartas.run.ai) from ours: the same schema and rules without the extensions."""
    crd = copy.deepcopy(workloadmap_crd)
    crd["metadata"] = {"name": "kartas.run.ai"}
    crd["spec"]["group"] = "run.ai"
    crd["spec"]["names"] = {"kind": KARTA_KIND, "listKind": "KartaList", "plural": "kartas", "singular": "karta",
                            "shortNames": ["krt"]}
    version = crd["spec"]["versions"][0]
    version["additionalPrinterColumns"] = [c for c in version.get("additionalPrinterColumns") or []
                                           if c["jsonPath"] != ".spec.framework"]
    schema = version["schema"]["openAPIV3Schema"]
    schema["description"] = ("Karta (upstream Workload Map): how to read one workload kind, its components, pods, "
                             "scale and status, with jq paths.")
    spec = schema["properties"]["spec"]
    del spec["properties"]["framework"]
    component = spec["properties"]["structureDefinition"]["properties"]["rootComponent"]
    for where, name in EXTENSIONS[1:]:   # the children's schema is the root's (one YAML anchor)
        del component["properties"][where]["properties"][name]
    return crd


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data):   # a CRD written out in full: no anchors
        return True


def karta_crd_text(workloadmap_crd: dict) -> str:
    """The Karta CRD file's text (catalog/crd/run.ai_kartas.yaml; regenerate it with
    `python -m workloadmap.catalog.exporting > catalog/crd/run.ai_kartas.yaml`)."""
    return CRD_HEADER + yaml.dump(karta_crd(workloadmap_crd), Dumper=_Dumper, sort_keys=False, width=100)


CRD_HEADER = """\
# The Karta CRD (run.ai/v1alpha1) for users coming from upstream Workload Map: upstream's kind
# with the same schema and server-side rules as our WorkloadMap CRD, without our extensions.
# Generated from workloadmap.io_workloadmaps.yaml by catalog/exporting.py: do not edit.
"""


if __name__ == "__main__":
    from .validating import crd_document

    print(karta_crd_text(crd_document()), end="")
