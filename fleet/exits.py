"""The exit statuses of every `fleet` command, so scripts can tell "no" from "could not tell".

    0  OK           done, or the check passed
    1  FAILED       it ran and the answer is no: a check disagreed, a target was missed, an
                    operation failed, requests came back with errors
    2  UNAVAILABLE  it could not run or judge: Kafka or Redis does not answer, nothing to
                    compare, a request refused as asked (argparse's usage errors exit 2 too)
    3  ROLLED_BACK  a rollout ended without promoting its candidate
  130  INTERRUPTED  stopped with Ctrl-C (128 + SIGINT, as shells report it)
"""

from enum import IntEnum


class Exit(IntEnum):
    OK = 0
    FAILED = 1
    UNAVAILABLE = 2
    ROLLED_BACK = 3
    INTERRUPTED = 130
