import sys

from fleet_dev.stack.cli import main

sys.exit(main())
