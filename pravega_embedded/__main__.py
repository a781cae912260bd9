"""``python -m pravega_embedded``: the CLI (``python -m pravega_embedded demo`` runs the demo)."""

import sys

from .cli import main

sys.exit(main())
