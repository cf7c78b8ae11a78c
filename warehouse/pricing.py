"""Prices of GPU, CPU and memory hours, per cluster and per GPU resource name: the pricing file.

Why a file of its own: prices are the operator's knowledge (a cloud's list
price, an internal charge-back rate, an amortised on-prem figure), they differ
per cluster and per GPU model, and a MIG slice costs a fraction of a whole
GPU.  The warehouse knows hours; this module turns (cluster, GPU resource
name) into a price per hour.  The format (``warehouse/pricing.example.yaml``
is a complete example)::

    currency: USD                 # a label printed with every cost; default "USD"
    default:                      # rates of clusters not listed, and fallbacks for those listed
      gpu:                        # per GPU-hour, by Kubernetes resource name
        nvidia.com/gpu: 2.50
        nvidia.com/mig-1g.10gb: 0.40
        nvidia.com/mig-*: 0.90    # a glob: any other MIG profile
        default: 2.00             # any other GPU resource
      cpu: 0.03                   # per core-hour (optional: CPU is not costed without it)
      memory: 0.004               # per GiB-hour (optional)
    clusters:
      prod-us-east:               # cluster name as in the records
        gpu: {nvidia.com/gpu: 3.10}
        cpu: 0.05

Lookup of a GPU price for (cluster, resource): in the cluster's section the
exact resource name, then the matching globs (the longest pattern first),
then its ``default``; then the same three in the top-level ``default``
section.  CPU and memory: the cluster's rate, then the top-level one.  A GPU
resource that nothing prices has no price (``None``): the report counts its
hours and says they were not costed, rather than guessing.

The lookup runs in DuckDB (``queries/cost_report.sql``), once per (cluster, GPU
resource) of a report: ``gpu_rules`` turns the file into rows ranked in the
order above, ``rate_rows`` the CPU and memory rates.  A glob is matched by
DuckDB's ``GLOB`` (``*``, ``?``, ``[seq]``, ``[!seq]``, as ``fnmatch``): a key
with a backslash or an unclosed ``[``, where the two would differ, is refused
when the file is read.
"""

from __future__ import annotations

import fnmatch
import math
import os
from dataclasses import dataclass, field

import yaml

DEFAULT_KEY = "default"


class PricingError(ValueError):
    """A pricing file that cannot be read or does not follow the format."""


@dataclass(frozen=True)
class Rates:
    """The rates of one section: GPU per resource name or glob (plus ``default``), CPU, memory."""

    gpu: dict[str, float] = field(default_factory=dict)
    cpu: float | None = None  # per core-hour
    memory: float | None = None  # per GiB-hour

    def globs(self) -> list[str]:
        """The glob keys, in the order they are tried: the longest pattern first."""
        return sorted((p for p in self.gpu if p != DEFAULT_KEY and any(c in p for c in "*?[")),
                      key=lambda p: (-len(p), p))


@dataclass(frozen=True)
class Pricing:
    currency: str = "USD"
    default: Rates = field(default_factory=Rates)
    clusters: dict[str, Rates] = field(default_factory=dict)
    source: str = "<pricing>"

    def gpu_rules(self) -> list[dict]:
        """The GPU prices as rows ``{cluster, name, pattern, rank, price}`` for SQL (the lookup order as `rank`).

        ``cluster`` None is the top-level default section.  A row matches a resource by its exact
        ``name``, by its glob ``pattern``, or, with neither, any resource (a section's ``default``).  The
        lowest rank that matches wins: the cluster's section before the default one, and in one
        section the exact name, then the globs (longest first), then ``default``.
        """
        out = []
        for cluster, rates in [*self.clusters.items(), (None, self.default)]:
            base = (0 if cluster is not None else 1) * 1_000_000
            out.extend({"cluster": cluster, "name": key, "pattern": None, "rank": base, "price": price}
                       for key, price in rates.gpu.items() if key != DEFAULT_KEY)
            out.extend({"cluster": cluster, "name": None, "pattern": key, "rank": base + 1 + i, "price": rates.gpu[key]}
                       for i, key in enumerate(rates.globs()))
            if DEFAULT_KEY in rates.gpu:
                out.append({"cluster": cluster, "name": None, "pattern": None, "rank": base + 999_999,
                            "price": rates.gpu[DEFAULT_KEY]})
        return out

    def gpu_price(self, cluster: str, resource: str) -> float | None:
        """Price of one GPU-hour of `resource` in `cluster`, or None when nothing prices it: the rule
        of ``gpu_rules`` with the lowest rank that matches, as the cost report's SQL picks it."""
        for rule in sorted(self.gpu_rules(), key=lambda r: r["rank"]):
            if rule["cluster"] not in (None, cluster):
                continue
            if rule["name"] is not None and rule["name"] != resource:
                continue
            if rule["pattern"] is not None and not fnmatch.fnmatchcase(resource, rule["pattern"]):
                continue
            return rule["price"]
        return None

    def cpu_price(self, cluster: str) -> float | None:
        own = self.clusters.get(cluster)
        return own.cpu if own is not None and own.cpu is not None else self.default.cpu

    def memory_price(self, cluster: str) -> float | None:
        own = self.clusters.get(cluster)
        return own.memory if own is not None and own.memory is not None else self.default.memory

    def rate_rows(self) -> list[dict]:
        """CPU and memory rates as rows ``{cluster, cpu, memory}`` for SQL (cluster None: the default section)."""
        return [{"cluster": cluster, "cpu": rates.cpu, "memory": rates.memory}
                for cluster, rates in [*self.clusters.items(), (None, self.default)]]


def _rate(value, where: str) -> float:
    # .inf and .nan are YAML floats: an infinite price makes every cost infinite (and JSON has
    # no Infinity), NaN compares false with everything and passed the sign check
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise PricingError(f"{where}: a price is a finite non-negative number, not {value!r}")
    return float(value)


def _check_glob(key: str, where: str) -> None:
    """Refuse a key that DuckDB's GLOB and fnmatch would read differently (a backslash, an unclosed ``[``)."""
    if "\\" in key:
        raise PricingError(f"{where}: a GPU resource name or glob has no backslash")
    start = key.find("[")
    while start >= 0:
        close = key.find("]", start + 2)  # ``[]]`` and ``[!]]`` hold a literal ]
        if close < 0:
            raise PricingError(f"{where}: the glob has an unclosed '['")
        start = key.find("[", close + 1)


def _rates(data, where: str) -> Rates:
    if data is None:
        return Rates()
    if not isinstance(data, dict):
        raise PricingError(f"{where}: expected a mapping with gpu, cpu, memory")
    unknown = sorted(set(map(str, data)) - {"gpu", "cpu", "memory"})
    if unknown:
        raise PricingError(f"{where}: unknown key(s) {', '.join(unknown)} (expected gpu, cpu, memory)")
    gpu = data.get("gpu") or {}
    if isinstance(gpu, (int, float)) and not isinstance(gpu, bool):
        gpu = {DEFAULT_KEY: gpu}  # `gpu: 2.5` prices every GPU resource alike
    if not isinstance(gpu, dict):
        raise PricingError(f"{where}.gpu: expected a mapping of GPU resource name (or glob, or default) to price")
    for name in map(str, gpu):
        _check_glob(name, f"{where}.gpu.{name}")
    return Rates(
        gpu={str(name): _rate(price, f"{where}.gpu.{name}") for name, price in gpu.items()},
        cpu=None if data.get("cpu") is None else _rate(data["cpu"], f"{where}.cpu"),
        memory=None if data.get("memory") is None else _rate(data["memory"], f"{where}.memory"),
    )


def parse_pricing(data, source: str = "<pricing>") -> Pricing:
    """A Pricing from the parsed YAML document; PricingError says what is wrong and where."""
    if not isinstance(data, dict):
        raise PricingError(f"{source}: expected a mapping with currency, default, clusters")
    unknown = sorted(set(map(str, data)) - {"currency", "default", "clusters"})
    if unknown:
        raise PricingError(f"{source}: unknown key(s) {', '.join(unknown)} (expected currency, default, clusters)")
    currency = data.get("currency", "USD")
    if not isinstance(currency, str) or not currency:
        raise PricingError(f"{source}: currency is a non-empty label such as USD")
    clusters = data.get("clusters") or {}
    if not isinstance(clusters, dict):
        raise PricingError(f"{source}: clusters maps a cluster name to its rates")
    return Pricing(
        currency=currency,
        default=_rates(data.get("default"), f"{source}: default"),
        clusters={str(name): _rates(rates, f"{source}: clusters.{name}") for name, rates in clusters.items()},
        source=source,
    )


def load_pricing(path: str | os.PathLike) -> Pricing:
    """Read and check a pricing file."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise PricingError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise PricingError(f"{path}: not YAML: {exc}") from None
    return parse_pricing(data, str(path))
