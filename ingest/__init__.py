"""ingest: see README.md."""
