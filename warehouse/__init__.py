"""warehouse: the DuckDB history of every workload, pod and node, and everything that reads it.

Writing: ``writing.Warehouse`` stores checked batches (``checking``) in one
transaction each, with the pods' and nodes' intervals (``allocating``), the
deleted workloads' filter (``deletions``) and the daily rollup and kept cost
rows (``rolling``), reading its batches' Arrow tables by name (``scanning``);
``consuming.KafkaWarehouseWriter`` feeds it from the
topics, exactly once; ``schema`` migrates the file forward.  Reading, always
read-only: ``querying`` runs the named queries of ``queries/``, and the
reports are library calls the CLI only prints: ``capacities.capacity_report``,
``capacities.allocation_report``, ``costing.cost_report`` (priced by
``pricing``), ``exporting`` to Parquet; ``values`` parses times and steps the
one way every reader takes them.  The tables are described in README.md.

Start reading at ``writing.py`` (and ``querying.py`` for the readers).  Kafka
is imported by ``consuming`` only; duckdb and pyarrow stay inside this stage.
"""

__all__ = ["allocating", "capacities", "checking", "consuming", "costing", "deletions", "exporting", "pricing",
           "querying", "rolling", "scanning", "schema", "values", "writing"]
