"""The PySpark data source "pravega" (batch, micro-batch, sink) — a later issue.

It has no public names yet: nothing here is importable API until that issue lands.
"""

__all__: list[str] = []
