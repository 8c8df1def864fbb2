"""`python3 -m meshgate` (with harness/ on sys.path) is the same as ./meshgate."""

import sys

from .cli import main

sys.exit(main())
