"""The console's overview lists what the fleet serves (the catalogue and live workers), not every
folder of the registry: a model imported but never made stable raises no alert, a retired one
leaves, and the Gateways table says what each running gateway serves."""

from __future__ import annotations

import secrets

from redis.asyncio import Redis

from common.catalog import GatewayBeat, remove_gateway_beat, retire, write_gateway_beat
from tests.integration.fleet.console.conftest import ConsoleSite
from versions import VersionPointers


async def test_the_overview_lists_served_models_and_what_each_gateway_serves(console: ConsoleSite,
                                                                            redis: Redis) -> None:
    served, retired = (f"catalogue-{secrets.token_hex(3)}" for _ in range(2))
    for model in (served, retired):
        await VersionPointers(redis, model).set_stable(f"{model}-20261206-001", "test@console", "imported")
    await retire(redis, retired, None, "test@console", "replaced")
    gateway = f"console-test:{secrets.token_hex(3)}"
    await write_gateway_beat(redis, GatewayBeat(gateway, (served, "minilm-embed")), ttl_s=30)
    try:
        with console.signed_in_client(console.reader_key) as reader:
            page = reader.get("/").text
    finally:
        await remove_gateway_beat(redis, gateway)
    assert f'id="model-{served}"' in page and f"no healthy primary worker serves {served}" in page
    assert f'id="model-{retired}"' not in page and retired not in page
    assert "cache-verifier" not in page  # the workers' own model is in the registry, never served
    assert f'data-gateway="{gateway}"' in page and f"{served}, minilm-embed" in page
