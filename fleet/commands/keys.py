"""`fleet keys create|list|revoke`: the gateway's API keys, one tenant each.

    fleet keys create --tenant acme      # prints the new key once, on stdout alone
    KEY=$(fleet keys create --tenant acme)
    fleet keys list [--tenant acme]      # key ids, tenants, when created, revoked or not
    fleet keys revoke <key id>           # the gateway refuses it within a second

Only sha256(key) is stored (Redis hash fleet:apikeys); the key cannot be shown again, only
replaced. For a mounted keys file (FLEET_AUTH_KEYS_FILE) write `<sha256 hex> <tenant>` lines:
    printf %s "$KEY" | sha256sum | awk '{print $1, "acme"}' >> keys.txt
"""

import argparse
import asyncio
import sys
from datetime import UTC, datetime


from common.redis_cluster import AnyRedis
from common.auth_keys import TENANT_PATTERN, KeyRecord, create_key, list_keys, revoke_key, valid_tenant
from common.settings import FleetSettings
from fleet.arguments import command_parser
from fleet.commands.redis_access import with_redis
from fleet.exits import Exit
from fleet.tables import format_table
from schemas.wire import now_ms


def when(epoch_ms: int | None) -> str:
    if not epoch_ms:
        return "-"
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def key_rows(records: list[KeyRecord]) -> list[tuple[str, ...]]:
    return [(r.key_id, r.tenant, when(r.created_ms), "active" if r.active else f"revoked {when(r.revoked_ms)}")
            for r in records]


async def create(redis: AnyRedis, tenant: str) -> int:
    issued = await create_key(redis, tenant, now_ms=now_ms())
    # The key alone on stdout, so `KEY=$(fleet keys create ...)` takes it; what it is goes to stderr.
    print(f"created key {issued.record.key_id} for tenant {tenant}; it is shown this once, store it now",
          file=sys.stderr)
    print(issued.key, flush=True)
    return Exit.OK


async def show(redis: AnyRedis, tenant: str | None) -> int:
    records = await list_keys(redis, tenant)
    if not records:
        print("no keys" + (f" of tenant {tenant}" if tenant else ""))
        return Exit.OK
    print(format_table(("key id", "tenant", "created", "state"), key_rows(records)))
    return Exit.OK


async def revoke(redis: AnyRedis, key_id: str) -> int:
    record = await revoke_key(redis, key_id, now_ms=now_ms())
    if record is None:
        print(f"no key with id {key_id}; `fleet keys list` shows them", file=sys.stderr)
        return Exit.FAILED
    print(f"key {key_id} of tenant {record.tenant} revoked at {when(record.revoked_ms)}")
    return Exit.OK


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = command_parser("keys", __doc__)
    actions = parser.add_subparsers(dest="action", required=True)
    made = actions.add_parser("create", help="make a key for a tenant and print it once")
    made.add_argument("--tenant", required=True, help=f"tenant the key acts for ({TENANT_PATTERN})")
    listing = actions.add_parser("list", help="key ids, tenants, created, revoked (never the keys)")
    listing.add_argument("--tenant")
    revoked = actions.add_parser("revoke", help="refuse a key from now on (the gateway: within a second)")
    revoked.add_argument("key_id")
    args = parser.parse_args(argv)
    if args.action == "create" and not valid_tenant(args.tenant):
        parser.error(f"--tenant {args.tenant!r} must match {TENANT_PATTERN}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.action == "create":
        return asyncio.run(with_redis(FleetSettings(), lambda redis: create(redis, args.tenant)))
    if args.action == "list":
        return asyncio.run(with_redis(FleetSettings(), lambda redis: show(redis, args.tenant)))
    return asyncio.run(with_redis(FleetSettings(), lambda redis: revoke(redis, args.key_id)))


if __name__ == "__main__":
    raise SystemExit(main())
