"""A call's priority picks its lane's topic, whichever way it comes: /v1, the Open Inference
Protocol's REST infer (`parameters.priority`) and, with lanes off, the first lane for every priority."""

from aiokafka import TopicPartition

from common.settings import FleetSettings
from gateway.settings import GatewaySettings
from tests.integration.conftest import MODEL, end_offsets
from tests.integration.gateway.gateway_harness import in_process

INTERACTIVE, BULK = FleetSettings().lane_plan.topics(MODEL)


async def landed(settings: FleetSettings, before: dict[str, dict[TopicPartition, int]]) -> dict[str, int]:
    after = {topic: await end_offsets(settings, topic) for topic in before}
    return {topic: sum(after[topic][tp] - before[topic].get(tp, 0) for tp in after[topic]) for topic in before}


async def test_v1_and_v2_route_each_priority_to_its_lane(stack: FleetSettings, serve) -> None:  # type: ignore[no-untyped-def]
    async with serve(), in_process(GatewaySettings(models=[MODEL])) as http:
        warm = await http.post(f"/v1/models/{MODEL}/infer", json={"text": "warm up, make the lane topics"})
        assert warm.status_code == 200, warm.text
        before = {topic: await end_offsets(stack, topic) for topic in (INTERACTIVE, BULK)}
        answers = [await http.post(f"/v1/models/{MODEL}/infer", json={"text": "urgent", "priority": 9}),
                   await http.post(f"/v1/models/{MODEL}/infer", json={"text": "urgent too", "priority": 5}),
                   await http.post(f"/v1/models/{MODEL}/infer", json={"text": "overnight", "priority": 4}),
                   await http.post(f"/v2/models/{MODEL}/infer", json={
                       "inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["urgent oip"]}],
                       "parameters": {"priority": 7}})]
        assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
        assert await landed(stack, before) == {INTERACTIVE: 3, BULK: 1}
        refused = await http.post(f"/v1/models/{MODEL}/infer", json={"text": "too urgent", "priority": 10})
        assert refused.status_code == 422 and "priority" in refused.text


async def test_with_lanes_off_every_priority_goes_to_the_first_lane(stack: FleetSettings, serve) -> None:  # type: ignore[no-untyped-def]
    async with serve(), in_process(GatewaySettings(models=[MODEL], lanes_enabled=False)) as http:
        before = {topic: await end_offsets(stack, topic) for topic in (INTERACTIVE, BULK)}
        answers = [await http.post(f"/v1/models/{MODEL}/infer", json={"text": f"lanes off {p}", "priority": p})
                   for p in (0, 9)]
        assert [a.status_code for a in answers] == [200, 200]
        assert await landed(stack, before) == {INTERACTIVE: 2, BULK: 0}
