"""`python3 -m meshgate.schema NAME FILE...`: validates JSON files against a shipped schema
(the validator and the schema names are meshgate.core.schema's), a results document also
against the kinds its runner registered (`run.kinds`); exit 1 on a violation."""

import sys

from .core.schema import NAMES, main  # noqa: F401  (NAMES: the shipped schemas, as before)

if __name__ == "__main__":
    sys.exit(main())
