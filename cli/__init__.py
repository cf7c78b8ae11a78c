"""cli: the `workloadmap` command, thin commands over the library.

Each command parses its options, calls the library (the catalog, the live
reads of ``ingest``, the warehouse's reports, the services of
``workloadmap.running``) and prints through one output dialect
(``outputs.emit``: ``-o table|wide|tree|json|yaml|csv``, JSON always
``{"items", "count"}``).  ``main`` builds the group and registers the command
modules (``live_commands``, ``pipeline_commands``, ``analytics_commands``,
``cost_commands``); what two commands share lives in ``options``,
``catalogs``, ``outputs`` and ``rendering``, never in a command module.  The
CLI runs no SQL of its own (tests/test_layering.py).

Start reading at ``main.py``.  click and rich are imported here and nowhere else.
"""

__all__ = ["analytics_commands", "catalogs", "cost_commands", "cost_html", "live_commands", "main", "options",
           "outputs", "pipeline_commands", "rendering"]
