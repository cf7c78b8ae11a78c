"""Tests of catalog/: definitions, the jq evaluator, resolution, pods, requests and the built-in definitions."""
