"""``python -m benchctl.cli``: the command line, as ``benchctl`` runs it (:func:`benchctl.cli.main.main`)."""

import sys

from benchctl.cli.main import main

sys.exit(main())
