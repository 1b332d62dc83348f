"""``python -m conformance.client.reference --agent-cmd CMD``: the terminal client."""

import sys

from conformance.client.reference.terminal import main

sys.exit(main())
