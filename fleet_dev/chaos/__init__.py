"""The chaos suite (`scripts/chaos`): the real fleet on its own stack, under a steady
load, through crashes, outages and malformed input; see fleet_dev/chaos/cli.py."""
