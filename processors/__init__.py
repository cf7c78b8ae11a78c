"""processors: raw object events in, workload records, pod and node records, transitions and dead letters out.

The core has no transport: ``processing.Processor`` resolves an event (or a
batch) through the catalog against each object's last state, and is what the
faust worker, the embedded pipeline and the tests all run; ``attributing``
turns pods and nodes into their records and finds a pod's workload;
``remembering`` says what a worker keeps per object (the compacted state
topic) and when it forgets a deleted one.  The
faust side is thin: ``app.create_app(WorkerSettings(...))`` builds the worker,
``consuming`` feeds its agent batches from the raw topic, and ``sending``
writes each batch's outputs in transactional record batches.

Start reading at ``processing.py``.  faust (and aiokafka) are imported by
``app``, ``consuming`` and ``sending`` only, so the core runs without them.
"""

__all__ = ["app", "attributing", "consuming", "processing", "remembering", "sending"]
