"""`fleet console [--host H] [--port P]`: serve the operator's web console.

    FLEET_CONSOLE_TENANTS=ops:admin,oncall:read fleet console --port 8090

Sign in with a key of an operator tenant (`fleet keys create --tenant ops`). FLEET_CONSOLE_*
settings: see fleet/console/settings.py and docs/how-to/console.md.
"""

from __future__ import annotations

import uvicorn

from fleet.arguments import command_parser
from fleet.console.app import create_app
from fleet.console.settings import ConsoleSettings
from fleet.exits import Exit


def main(argv: list[str] | None = None) -> int:
    settings = ConsoleSettings()
    parser = command_parser("console", __doc__)
    parser.add_argument("--host", default=settings.console_host)
    parser.add_argument("--port", type=int, default=settings.console_port)
    args = parser.parse_args(argv)
    if not settings.tenant_roles():
        parser.error("FLEET_CONSOLE_TENANTS names no operator tenant (e.g. ops:admin); nobody could sign in")
    print(f"fleet console on http://{args.host}:{args.port}/ (operator tenants: "
          f"{', '.join(f'{t} ({r})' for t, r in settings.tenant_roles().items())})", flush=True)
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level="warning")
    return Exit.OK


if __name__ == "__main__":
    raise SystemExit(main())
