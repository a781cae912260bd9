"""Tiering of sealed and flushed segment data to an fsspec target as Parquet (a later issue).

It has no public names yet: nothing here is importable API until that issue lands.
"""

__all__: list[str] = []
