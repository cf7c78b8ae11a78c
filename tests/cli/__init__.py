"""Tests of cli/: the output dialect, errors, exit codes, documentation and the live commands."""
