"""The ``pravega-embedded`` command line (``python -m pravega_embedded``): one module per
command group, all over the public API.

- ``main``: the parser, global options (before or after the command), ``--version``, errors;
- ``common``: argument types, output, opening the store (read commands never create one);
- ``streams``: create-scope, create-stream, list (``-l``), info, seal, delete, truncate;
- ``write`` and ``read``: kcat-like events in and out (``output``: ``-f``, ``-J``, ``-D``;
  ``progress``: the progress line on a terminal);
- ``groups``: reader-group ...; ``scaling``: history, scale, update-stream;
- ``txns``: txn list, abort; ``bytestreams``: bytes cat, write; ``tier2``: tier2 status,
  flush and the tier-2 global options; ``serve``: serve over TCP; ``demo``: the demo.
"""

from .main import build_parser, main

__all__ = ["main", "build_parser"]
