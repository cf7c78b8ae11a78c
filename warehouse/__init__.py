"""warehouse: see README.md."""
