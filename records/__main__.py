import sys

from records.cli import main

sys.exit(main())
