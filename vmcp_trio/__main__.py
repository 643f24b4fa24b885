"""``python -m vmcp_trio`` is the ``vmcp`` command."""

from .cli import main

raise SystemExit(main())
