"""Every Kafka and Redis client the fleet makes comes from common/clients.py, so every one of them
carries the security protocol, SASL credentials, TLS context and Redis ACL user of the settings."""

import re
from pathlib import Path

from tests.paths import REPO_ROOT as ROOT
PACKAGES = ("common", "workers", "gateway", "fleet", "models", "versions", "schemas")
ALSO = ("tests/integration/conftest.py", "tests/integration/gateway/gateway_harness.py")
CONSTRUCTION = re.compile(r"\bAIOKafka(Producer|Consumer|AdminClient|Client)\(|\b(Strict)?Redis(Cluster)?\("
                          r"|\bfrom_url\(|\bcreate_conn\(")
ALLOWED = {
    "common/clients.py": "the factories themselves",
    "common/credentials.py": "one raw connection that authenticates with kafka_options(settings)",
    # The multi-node stack talks to one node at a time (metadata of node N, CLUSTER commands of a
    # Redis node), which no factory of a whole cluster does; --secure refuses multi-node stacks.
    "fleet_dev/stack/kafka_cluster.py": "per-node metadata of the plain multi-node stack",
    "fleet_dev/stack/redis_cluster.py": "per-node CLUSTER commands of the plain Redis Cluster",
}


def sources() -> list[Path]:
    found = [path for package in PACKAGES for path in (ROOT / package).rglob("*.py")]
    return sorted(found + [ROOT / name for name in ALSO])


def constructions(path: Path) -> list[str]:
    text = path.read_text()
    return [f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}: {match.group(0)}"
            for match in CONSTRUCTION.finditer(text)]


def test_no_client_is_built_outside_the_factories() -> None:
    stray = [hit for path in sources() if str(path.relative_to(ROOT)) not in ALLOWED for hit in constructions(path)]
    assert not stray, "build clients with common.clients (new_producer, new_consumer, new_admin, redis_client):\n" + \
        "\n".join(stray)


def test_the_check_sees_a_construction() -> None:
    # Proof that the pattern matches what it must, so the test above cannot pass by matching nothing.
    assert constructions(ROOT / "common" / "clients.py")
    for line in ("AIOKafkaConsumer(topic)", "aioredis.Redis(host=h)", "Redis.from_url(url)", "RedisCluster(h)"):
        assert CONSTRUCTION.search(line), line


def test_every_allowed_file_still_needs_its_exception() -> None:
    assert all(constructions(ROOT / name) for name in ALLOWED), "drop allow-list entries that build nothing"
