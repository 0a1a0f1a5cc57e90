"""`python -m pytest_gpufabric` is the `gpufabric` command."""

import sys

from .cli import main

sys.exit(main())
