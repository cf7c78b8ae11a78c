"""Tests of warehouse/: checking and writing records, the schema, rollups, deletions, and the readers (capacity, cost, query, export)."""
