"""``python -m agentrt`` = the ``agentrt`` command."""

import sys

from agentrt.cli import main

sys.exit(main())
