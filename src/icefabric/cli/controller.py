"""``icefab controller serve``: run the ICE controller service (FastAPI + uvicorn)."""

from __future__ import annotations

import typer

controller_app = typer.Typer(help="The ICE controller service.", no_args_is_help=True)


@controller_app.command("serve")
def serve(
    host: str = typer.Option("127.0.0.1", help="address to bind"),
    port: int = typer.Option(8000, min=0, max=65535),
    db: str = typer.Option(None, help="database URL (default $ICE_DATABASE_URL or "
                                      "sqlite:///./ice.db)"),
    policy: str = typer.Option(None, help="planning policy (default $ICE_POLICY or ice)"),
    admin_token_file: str = typer.Option(None, help="where the generated admin token is "
                                                    "kept when ICE_ADMIN_TOKEN is unset"),
    log_level: str = typer.Option("info"),
    keep_alive_s: int = typer.Option(65, min=1, help="idle keep-alive of agent connections"),
) -> None:
    """Serve the /v1 API; settings come from ICE_* environment variables and options."""
    import sys

    import uvicorn

    from icefabric.controller.app import create_app
    from icefabric.controller.settings import Settings

    over = {k: v for k, v in (("database_url", db), ("policy", policy),
                              ("admin_token_file", admin_token_file)) if v is not None}
    settings = Settings(**over)
    # The planner thread is CPU-bound; a short GIL switch interval keeps request latency
    # low while it runs (the default 5 ms convoys every I/O wake-up behind it).
    sys.setswitchinterval(0.0005)
    uvicorn.run(create_app(settings), host=host, port=port, log_level=log_level,
                access_log=False, timeout_keep_alive=keep_alive_s, backlog=4096)


def register(app: typer.Typer) -> None:
    app.add_typer(controller_app, name="controller")
