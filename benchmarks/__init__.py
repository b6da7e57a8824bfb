"""omg-ledger benchmark suite (issue 8): `python -m benchmarks.run --help`.

Kept import-free so the child processes (floor, bare walk) start as light as they can.
"""
