"""exporter: the pipeline's records as Prometheus series (`workloadmap run exporter`).

A reader of the records topics beside the warehouse, never imported by the
other stages.  ``tracking.Tracker`` keeps the live workloads, pods and nodes
as the lines of their metric families (``families``), written when a record
arrives; ``consuming.TopicsConsumer`` feeds it from Kafka;
``serving.MetricsServer`` serves /metrics, /healthz and /readyz.  The
prometheus_client library is used here and nowhere else.  Recording rules
and a Grafana dashboard for the common joins are in ``prometheus/`` and
``grafana/``.
"""
