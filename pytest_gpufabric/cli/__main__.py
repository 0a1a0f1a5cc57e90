"""`python -m pytest_gpufabric.cli` is the `gpufabric` command."""

import sys

from ..command import main

sys.exit(main())
