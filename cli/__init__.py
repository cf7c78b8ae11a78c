"""The workloadmap command line: thin commands over the library."""
