"""workloadmap: one uniform view of every AI workload kind on Kubernetes.

Every import name lives under this package (``workloadmap.catalog``,
``workloadmap.ingest``, ...): ``workloadmap/<stage>`` are relative links to the
stage folders at the repository root, so the package is an ordinary one.
Beside them, the modules of this folder compose the stages, which never
import each other: the embedded pipeline (``embedding``), the services'
wiring (``running``), their settings (``settings``) and the event feed
(``feeding``); the command line (``cli``) calls them.
"""

__version__ = "0.1.0"
