"""``python -m vmcp_trio`` is the ``vmcp`` command."""

from vmcp_trio.cli import main

raise SystemExit(main())
