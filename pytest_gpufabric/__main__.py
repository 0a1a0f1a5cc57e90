"""`python -m pytest_gpufabric` is the `gpufabric` command."""

import sys

from .command import main

sys.exit(main())
