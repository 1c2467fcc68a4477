"""``python -m storage.cli``: the ``chatlayers`` command."""

import sys

from storage.cli import main

sys.exit(main())
