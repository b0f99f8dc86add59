"""``icefab controller serve``: run the ICE controller service (FastAPI + uvicorn)."""

from __future__ import annotations

import typer

from icefabric.cli.common import fail

controller_app = typer.Typer(help="The ICE controller service.", no_args_is_help=True)


@controller_app.command("serve")
def serve(
    host: str = typer.Option("127.0.0.1", help="address to bind"),
    port: int = typer.Option(8000, min=0, max=65535),
    db: str = typer.Option(None, help="database URL (default $ICE_DATABASE_URL or "
                                      "sqlite:///./ice.db)"),
    policy: str = typer.Option(None, help="planning policy (default $ICE_POLICY or ice)"),
    admin_token_file: str = typer.Option(None, help="file with the admin token (created "
                                                    "with a random one, mode 0600, if "
                                                    "missing), when ICE_ADMIN_TOKEN is unset"),
    insecure_local: bool = typer.Option(False, "--insecure-local",
                                        help="development only: no admin token; requests "
                                             "from 127.0.0.1 without a token are the admin "
                                             "(refused unless --host is a loopback address)"),
    log_level: str = typer.Option("info"),
    keep_alive_s: int = typer.Option(65, min=1, help="idle keep-alive of agent connections"),
) -> None:
    """Serve the /v1 API; settings come from ICE_* environment variables and options.
    An admin token is required (ICE_ADMIN_TOKEN or --admin-token-file) unless
    --insecure-local."""
    import ipaddress
    import sys

    import uvicorn
    from pydantic import ValidationError

    from icefabric.controller.app import create_app
    from icefabric.controller.settings import Settings
    from icefabric.controller.store.errors import StoreError

    if insecure_local:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if not loopback:
            fail(f"--insecure-local serves without an admin token, so it binds only a "
                 f"loopback address, not {host!r}")
    over = {k: v for k, v in (("database_url", db), ("policy", policy),
                              ("admin_token_file", admin_token_file),
                              ("insecure_local", insecure_local or None)) if v is not None}
    try:
        app = create_app(Settings(**over))
    except ValidationError as e:
        fail("; ".join(str(x["msg"]).removeprefix("Value error, ") for x in e.errors()))
    except (StoreError, OSError) as e:
        fail(f"cannot start the controller: {e}", code=1)
    # The planner thread is CPU-bound; a short GIL switch interval keeps request latency
    # low while it runs (the default 5 ms convoys every I/O wake-up behind it).
    sys.setswitchinterval(0.0005)
    uvicorn.run(app, host=host, port=port, log_level=log_level,
                access_log=False, timeout_keep_alive=keep_alive_s, backlog=4096)


def register(app: typer.Typer) -> None:
    app.add_typer(controller_app, name="controller")
