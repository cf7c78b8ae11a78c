"""Tests of ingest/: the simulator, the publisher and the watchers (against a real API server)."""
