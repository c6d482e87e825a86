"""Which partitions each member of a consumer group holds, from Kafka's DescribeGroups: the
Workers page shows them, so a drain is seen as its partitions moving to the other members.
A worker's Kafka client id is its worker id (workers/membership.py), which ties a member to
its heartbeat."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

# DescribeGroups v0-v2 response rows: (error_code, group, state, protocol_type, protocol, members),
# each member (member_id, client_id, client_host, metadata, assignment).
_GROUP_ID_FIELD, _GROUP_MEMBERS_FIELD = 1, 5
_CLIENT_ID_FIELD, _ASSIGNMENT_FIELD = 1, 4

log = logging.getLogger(__name__)

# group -> client id -> ["topic:partition", ...]
Assignments = dict[str, dict[str, list[str]]]


def decode_assignment(raw: bytes) -> list[str]:
    """`topic:partition` of each partition in a member's assignment bytes; none when empty or unreadable
    (a member mid-rebalance has an empty assignment)."""
    if not raw:
        return []
    try:
        assignment = ConsumerProtocolMemberAssignment.decode(raw)
    except Exception:  # bytes of a protocol other than `consumer`: nothing to show, not a failure
        return []
    return sorted((f"{topic}:{partition}" for topic, partitions in assignment.assignment for partition in partitions),
                  key=lambda ref: (ref.rsplit(":", 1)[0], int(ref.rsplit(":", 1)[1])))


async def describe_assignments(admin: AIOKafkaAdminClient, groups: Sequence[str],
                               timeout_s: float = 5.0) -> Assignments:
    """The partitions each member of each group holds now. Each group is described on its own: one
    whose answer cannot be read (aiokafka fails to decode some DescribeGroups answers) or does not
    come in time is left out, and the other groups are still shown."""
    found: Assignments = {}
    for name in groups:
        try:
            async with asyncio.timeout(timeout_s):
                responses: list[Any] = await admin.describe_consumer_groups([name])
        except Exception as exc:  # noqa: BLE001 (shown as no partitions; the lag is unaffected)
            log.debug("describing group %s failed: %s: %s", name, type(exc).__name__, exc)
            continue
        for response in responses:
            for group in response.groups:
                members = found.setdefault(str(group[_GROUP_ID_FIELD]), {})
                for member in group[_GROUP_MEMBERS_FIELD]:
                    members.setdefault(str(member[_CLIENT_ID_FIELD]), []).extend(
                        decode_assignment(member[_ASSIGNMENT_FIELD]))
    return found


def partitions_of_worker(assignments: Assignments, model: str, worker: str) -> list[str]:
    """The partitions `worker` holds in the model's groups (`<model>` and its shadow group `<model>.shadow`)."""
    return [ref for group, members in sorted(assignments.items()) if group == model or group.startswith(model + ".")
            for ref in members.get(worker, [])]
