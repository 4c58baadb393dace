"""KernelBench-format problems end to end: problems/ (20 of this repository's own), the Inductor capture
script, the metrics, and ``python -m bench.kernelbench`` (see __main__.py)."""
