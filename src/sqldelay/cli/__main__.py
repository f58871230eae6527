"""``python -m sqldelay.cli``: the ``sqldelay`` command, where its script is not on PATH."""

import sys

from . import main

sys.exit(main())
