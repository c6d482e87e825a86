import sys

from fleet.stack.cli import main

sys.exit(main())
