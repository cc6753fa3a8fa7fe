"""``python -m tether``: the same as the ``tether`` console script."""

import sys

from .cli import main

sys.exit(main())
