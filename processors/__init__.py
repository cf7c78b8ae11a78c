"""processors: see README.md."""
