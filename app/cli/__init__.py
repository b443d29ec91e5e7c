"""The `trainyard` command: the REST API from a terminal, with live progress for a running job."""

from __future__ import annotations

from typing import Any

import click
import httpx

from app.cli import cluster, code, compare, jobs, observe
from app.client import DEFAULT_URL, ApiError, TrainyardClient


class ApiGroup(click.Group):
    """Refusals from the API print their detail (which names the fix), never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ApiError as exc:
            raise click.ClickException(f"{exc.detail} (HTTP {exc.status})") from exc
        except httpx.TransportError as exc:
            url = ctx.params.get("url")
            raise click.ClickException(
                f"cannot reach the API at {url} ({exc}); start it with `make run`, or point --url or "
                "TRAINYARD_URL at it"
            ) from exc


@click.group(cls=ApiGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", envvar="TRAINYARD_URL", default=DEFAULT_URL, show_default=True, help="the API")
@click.option("--token", envvar="TRAINYARD_TOKEN", help="API key, sent as a bearer token")
@click.pass_context
def cli(ctx: click.Context, url: str, token: str | None) -> None:
    ctx.obj = ctx.with_resource(TrainyardClient(url, token))


for command in (
    jobs.submit,
    jobs.list_jobs,
    jobs.status,
    jobs.cancel,
    jobs.retry,
    jobs.priority,
    observe.logs,
    observe.metrics,
    cluster.gpus,
    cluster.queue,
    cluster.keys,
    compare.compare,
    code.code,
):
    cli.add_command(command)


def main() -> None:
    cli(prog_name="trainyard")
