"""The `trainyard` command: the REST API from a terminal, with live progress for a running job."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from app.cli import artifacts, cluster, code, compare, forecast, jobs, observe, secrets, stacks, sweeps
from app.cli.api_url import ENV_VAR, ApiUrl, find_api_url
from app.client import ApiError, TrainyardClient

# Where the URL in use is kept for the error that says it cannot be reached (click's meta is shared by every
# nested context).
API_URL_KEY = "trainyard.api_url"


class ApiGroup(click.Group):
    """Refusals from the API print their detail (which names the fix), never a traceback; every error from
    talking to the API names the URL that answered, or did not, and where that URL came from."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ApiError as exc:
            api: ApiUrl = ctx.meta[API_URL_KEY]
            raise click.ClickException(
                f"{exc.detail} (HTTP {exc.status} at {api.url}, {api.origin})"
            ) from exc
        except (click.ClickException, click.exceptions.Exit):
            raise  # click's own errors and exits (--help) say all they need to
        except Exception as exc:
            # httpx is imported here, as in the client, only once a request may have failed: it is most of
            # the CPU of a call that makes none (--help).
            import httpx

            if isinstance(exc, httpx.ConnectError):
                api = ctx.meta[API_URL_KEY]
                raise click.ClickException(
                    f"nothing listening at {api.url} ({api.origin}): {exc}; start the API with `make run`, "
                    "or point --url or TRAINYARD_URL at it"
                ) from exc
            if isinstance(exc, httpx.TransportError):
                api = ctx.meta[API_URL_KEY]
                raise click.ClickException(
                    f"the API at {api.url} ({api.origin}) did not answer: {exc}"
                ) from exc
            raise


@click.group(cls=ApiGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--url",
    help="the API [default: TRAINYARD_URL, else the URL `make run` wrote to var/api-url in this folder or "
    "one above it, else http://127.0.0.1:8000]",
)
@click.option("--token", envvar="TRAINYARD_TOKEN", help="API key, sent as a bearer token")
@click.pass_context
def cli(ctx: click.Context, url: str | None, token: str | None) -> None:
    api = find_api_url(url, os.environ, Path.cwd())
    if not api.configured:
        # Said once, on stderr: stdout may be a script's JSON.
        click.echo(f"no {ENV_VAR} set; using {api.url}", err=True)
    ctx.meta[API_URL_KEY] = api
    ctx.obj = ctx.with_resource(TrainyardClient(api.url, token))


for command in (
    jobs.submit,
    jobs.list_jobs,
    jobs.status,
    jobs.cancel,
    jobs.retry,
    jobs.priority,
    jobs.delete,
    observe.logs,
    observe.metrics,
    observe.events,
    stacks.stacks,
    artifacts.checkpoints,
    artifacts.export,
    artifacts.tensorboard,
    artifacts.profile,
    cluster.gpus,
    cluster.queue,
    cluster.usage,
    cluster.keys,
    secrets.secret,
    compare.compare,
    forecast.forecast,
    code.code,
    sweeps.sweep,
):
    cli.add_command(command)


def main() -> None:
    cli(prog_name="trainyard")
