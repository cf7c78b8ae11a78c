"""workloadmap: one uniform view of every AI workload kind on Kubernetes.

The installed import names live under this package (``workloadmap.catalog``,
``workloadmap.ingest``, ...) while their folders stay at the repository root.
"""

__version__ = "0.1.0"
