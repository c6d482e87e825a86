"""The chaos suite (`scripts/chaos`, `fleet chaos`): the real fleet on its own stack, under a steady
load, through crashes, outages and malformed input; see fleet/chaos/cli.py."""
