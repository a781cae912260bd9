"""Reader groups, checkpoints and StreamCut-based positions (issue 3).

This package will hold the group state kept in the store's LMDB, segment assignment and
checkpoints. It has no public names yet: nothing here is importable API until issue 3 lands.
"""

__all__: list[str] = []
