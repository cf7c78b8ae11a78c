"""workloadmap: one uniform view of every AI workload kind on Kubernetes.

The installed import names live under this package (``workloadmap.catalog``,
``workloadmap.ingest``, ...) while their folders stay at the repository root.
Beside them, the modules of this folder compose the stages, which never
import each other: the embedded pipeline (``embedding``), the services'
wiring (``running``), their settings (``settings``) and the event feed
(``feeding``); the command line (``cli``) calls them.
"""

__version__ = "0.1.0"
