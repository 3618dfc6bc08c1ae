"""``python -m audit ...``: the same as ``kafka-cluster-mirrors audit ...``."""

import sys

from audit.cli import main

sys.exit(main(sys.argv[1:]))
