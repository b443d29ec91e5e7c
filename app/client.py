"""A Python client for the Trainyard API: one method per REST call, answers parsed into the API's schemas."""

from __future__ import annotations

import os
from collections.abc import Iterator
from email.message import Message
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import quote

# httpx and the API's schemas (pydantic builds every model as it imports them) are imported where a request
# first needs them: the `trainyard` command loads this module for every call, its --help and a refusal of its
# arguments included, and those imports were most of such a call's CPU.
if TYPE_CHECKING:
    import httpx

    from app.schemas import (
        CheckpointsPublic,
        CodeBundleDetail,
        CodeBundlesPublic,
        ForecastAccuracy,
        GpuHealthChanged,
        HostsPublic,
        JobEventsPublic,
        JobPublic,
        JobsPublic,
        JobSubmitted,
        KeyCreated,
        KeysPublic,
        LogChunk,
        MetricPublic,
        MetricsPublic,
        QueuePublic,
        RetryFrom,
        SpecDiff,
        StacksPublic,
        StreamEnd,
        SweepPublic,
        SweepsPublic,
        TrialsPublic,
        UsagesPublic,
    )
    from app.secret_schemas import SecretPublic, SecretsPublic
    from core.states import JobStatus
    from jobspec.profile_summary import ProfileSummary

DEFAULT_URL = "http://127.0.0.1:8000"


class ApiError(Exception):
    """The API refused a request; `detail` is its problem+json detail, which names the fix."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail


def _raise_for_problem(response: httpx.Response) -> None:
    if response.is_success:
        return
    response.read()
    try:
        detail = str(response.json()["detail"])
    except (ValueError, KeyError, TypeError):
        detail = response.text or response.reason_phrase
    raise ApiError(response.status_code, detail)


def _present(params: dict[str, Any]) -> dict[str, Any]:
    """None means "leave it to the server's default", so it is not sent."""
    return {key: value for key, value in params.items() if value is not None}


def _attachment_name(response: httpx.Response) -> str | None:
    """The file name the API gave (RFC 6266, `filename*` too), without any folder: the job chose part of it,
    so it never says where the file goes."""
    header = Message()
    header["Content-Disposition"] = response.headers.get("content-disposition", "")
    name = Path(header.get_filename() or "").name
    return name if name not in ("", ".", "..") else None


def _sse_events(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    """(event, data) per Server-Sent Event; comments (keepalives) and ids are skipped."""
    event = "message"
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))


class TrainyardClient:
    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        token: str | None = None,
        timeout: float = 30.0,
        http: httpx.Client | None = None,
    ) -> None:
        """`http` replaces the connection pool, e.g. with a TestClient that calls the app in-process; without
        it, the pool is made at the first request."""
        self._base_url, self._timeout, self._token = base_url, timeout, token
        self._pool = None if http is None else self._authorized(http)

    def _authorized(self, http: httpx.Client) -> httpx.Client:
        if self._token:
            http.headers["Authorization"] = f"Bearer {self._token}"
        return http

    @property
    def _http(self) -> httpx.Client:
        if self._pool is None:
            import httpx

            self._pool = self._authorized(httpx.Client(base_url=self._base_url, timeout=self._timeout))
        return self._pool

    def __enter__(self) -> TrainyardClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:  # else no request made one
            self._pool.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        if "params" in kwargs:
            kwargs["params"] = _present(kwargs["params"])
        response = self._http.request(method, path, **kwargs)
        _raise_for_problem(response)
        return response.json() if response.content else None

    def submit(
        self, spec: dict[str, Any], *, dry_run: bool = False, idempotency_key: str | None = None
    ) -> JobSubmitted:
        from app.schemas import JobSubmitted

        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        body = self._call("POST", "/v1/jobs", json=spec, params={"dry_run": dry_run or None}, headers=headers)
        return JobSubmitted.model_validate(body)

    def list_jobs(
        self, status: JobStatus | None = None, cursor: int | None = None, limit: int | None = None
    ) -> JobsPublic:
        from app.schemas import JobsPublic

        params = {"status": status, "cursor": cursor, "limit": limit}
        return JobsPublic.model_validate(self._call("GET", "/v1/jobs", params=params))

    def get_job(self, job_id: int) -> JobPublic:
        from app.schemas import JobPublic

        return JobPublic.model_validate(self._call("GET", f"/v1/jobs/{job_id}"))

    def set_priority(self, job_id: int, priority: int) -> JobPublic:
        from app.schemas import JobPublic

        body = self._call("PATCH", f"/v1/jobs/{job_id}", json={"priority": priority})
        return JobPublic.model_validate(body)

    def cancel(self, job_id: int) -> JobPublic:
        from app.schemas import JobPublic

        return JobPublic.model_validate(self._call("POST", f"/v1/jobs/{job_id}/cancel"))

    def retry(
        self,
        job_id: int,
        *,
        start: RetryFrom | None = None,
        again: bool = False,
        idempotency_key: str | None = None,
    ) -> tuple[JobSubmitted, bool]:
        """The retry, and whether this call made it (False: an earlier retry with the same spec, or key)."""
        from app.schemas import JobSubmitted

        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        params = _present({"from": start, "again": again or None})
        response = self._http.post(f"/v1/jobs/{job_id}/retry", params=params, headers=headers)
        _raise_for_problem(response)
        return JobSubmitted.model_validate(response.json()), response.status_code == 201

    def delete(self, job_id: int) -> None:
        self._call("DELETE", f"/v1/jobs/{job_id}")

    def events(self, job_id: int) -> JobEventsPublic:
        from app.schemas import JobEventsPublic

        return JobEventsPublic.model_validate(self._call("GET", f"/v1/jobs/{job_id}/events"))

    def metrics(
        self,
        job_id: int,
        name: str | None = None,
        after_step: int | None = None,
        limit: int | None = None,
        max_points: int | None = None,
    ) -> MetricsPublic:
        from app.schemas import MetricsPublic

        params = {"name": name, "after_step": after_step, "limit": limit, "max_points": max_points}
        return MetricsPublic.model_validate(self._call("GET", f"/v1/jobs/{job_id}/metrics", params=params))

    def all_metrics(
        self, job_id: int, name: str | None = None, page_size: int = 10_000
    ) -> list[MetricPublic]:
        """Every row, page after page."""
        rows: list[MetricPublic] = []
        after_step: int | None = None
        while True:
            page = self.metrics(job_id, name, after_step, limit=page_size)
            rows += page.data
            if page.next_after_step is None:
                return rows
            after_step = page.next_after_step

    def stream_metrics(
        self, job_id: int, name: str | None = None, after_step: int | None = None
    ) -> Iterator[MetricPublic | StreamEnd]:
        """Metric rows as the job reports them, then one StreamEnd with its terminal status (or `deleted`)."""
        import httpx

        from app.schemas import MetricPublic, StreamEnd

        params = _present({"name": name, "after_step": after_step})
        # No read timeout: a job between reports sends only keepalives, minutes apart if it must.
        timeout = httpx.Timeout(self._http.timeout.connect, read=None)
        with self._http.stream(
            "GET", f"/v1/jobs/{job_id}/metrics/stream", params=params, timeout=timeout
        ) as response:
            _raise_for_problem(response)
            for event, data in _sse_events(response.iter_lines()):
                if event == "metric":
                    yield MetricPublic.model_validate_json(data)
                elif event == "end":
                    yield StreamEnd.model_validate_json(data)
                    return

    def _download(self, path: str, target: Path, fallback: str) -> Path:
        """Streams the answer into a file, chunk by chunk (checkpoints and exports can be many GB); `target`
        is the file, or a folder for the name the API gives (`fallback` if it gives none). A partial file
        never takes the final name."""
        with self._http.stream("GET", path) as response:
            _raise_for_problem(response)
            if target.is_dir():
                target = target / (_attachment_name(response) or fallback)
            partial = target.with_name(f".{target.name}.part")
            try:
                with partial.open("wb") as out:
                    for chunk in response.iter_bytes():
                        out.write(chunk)
                os.replace(partial, target)
            finally:
                partial.unlink(missing_ok=True)
        return target

    def checkpoints(self, job_id: int) -> CheckpointsPublic:
        from app.schemas import CheckpointsPublic

        return CheckpointsPublic.model_validate(self._call("GET", f"/v1/jobs/{job_id}/checkpoints"))

    def download_checkpoint(self, checkpoint_id: int, target: Path) -> Path:
        return self._download(
            f"/v1/checkpoints/{checkpoint_id}/download", target, f"checkpoint-{checkpoint_id}"
        )

    def download_export(self, job_id: int, target: Path) -> Path:
        """A finished hf_causal_lm job's model as a tar that from_pretrained loads once unpacked."""
        return self._download(f"/v1/jobs/{job_id}/export", target, f"job{job_id}-export.tar")

    def download_tensorboard(self, job_id: int, target: Path) -> Path:
        return self._download(f"/v1/jobs/{job_id}/tensorboard", target, f"job{job_id}-tensorboard.tar")

    def profile(self, job_id: int) -> ProfileSummary:
        from jobspec.profile_summary import ProfileSummary

        return ProfileSummary.model_validate(self._call("GET", f"/v1/jobs/{job_id}/profile"))

    def download_profile_trace(self, job_id: int, target: Path) -> Path:
        return self._download(f"/v1/jobs/{job_id}/profile/trace", target, f"job{job_id}-trace.json")

    def ask_stacks(self, job_id: int) -> None:
        """Have the job's worker capture its ranks' stacks now."""
        self._call("POST", f"/v1/jobs/{job_id}/stacks")

    def stacks(self, job_id: int) -> StacksPublic:
        from app.schemas import StacksPublic

        return StacksPublic.model_validate(self._call("GET", f"/v1/jobs/{job_id}/stacks"))

    def usage(self) -> UsagesPublic:
        from app.schemas import UsagesPublic

        return UsagesPublic.model_validate(self._call("GET", "/v1/usage"))

    def compare(self, job_ids: list[int]) -> SpecDiff:
        """Where the jobs' specs and plans differ."""
        from app.schemas import SpecDiff

        return SpecDiff.model_validate(self._call("GET", "/v1/compare", params={"job": job_ids}))

    def forecast_accuracy(self, limit: int = 50) -> ForecastAccuracy:
        """Recent finished jobs' forecasts against what they measured."""
        from app.schemas import ForecastAccuracy

        body = self._call("GET", "/v1/forecast/accuracy", params={"limit": limit})
        return ForecastAccuracy.model_validate(body)

    def logs(self, job_id: int, rank: int | None = None, offset: int = 0) -> LogChunk:
        from app.schemas import LogChunk

        params = {"rank": rank, "offset": offset}
        return LogChunk.model_validate(self._call("GET", f"/v1/jobs/{job_id}/logs", params=params))

    def gpus(self) -> HostsPublic:
        from app.schemas import HostsPublic

        return HostsPublic.model_validate(self._call("GET", "/v1/gpus"))

    def drain_gpu(self, host: str, index: int, reason: str) -> GpuHealthChanged:
        from app.schemas import GpuHealthChanged

        path = f"/v1/gpus/{quote(host, safe='')}/{index}/drain"
        return GpuHealthChanged.model_validate(self._call("POST", path, json={"reason": reason}))

    def undrain_gpu(self, host: str, index: int) -> GpuHealthChanged:
        from app.schemas import GpuHealthChanged

        path = f"/v1/gpus/{quote(host, safe='')}/{index}/undrain"
        return GpuHealthChanged.model_validate(self._call("POST", path))

    def queue(self) -> QueuePublic:
        from app.schemas import QueuePublic

        return QueuePublic.model_validate(self._call("GET", "/v1/queue"))

    def create_key(self, user: str, admin: bool = False) -> KeyCreated:
        """Admins only; the answer holds the new key's token, which the API never shows again."""
        from app.schemas import KeyCreated

        body = self._call("POST", "/v1/keys", json={"user": user, "admin": admin})
        return KeyCreated.model_validate(body)

    def list_keys(self) -> KeysPublic:
        from app.schemas import KeysPublic

        return KeysPublic.model_validate(self._call("GET", "/v1/keys"))

    def revoke_key(self, key_id: int) -> None:
        self._call("DELETE", f"/v1/keys/{key_id}")

    def set_secret(self, name: str, value: str) -> SecretPublic:
        """Store `value` sealed as the caller's secret `name`; the answer never holds the value."""
        from app.secret_schemas import SecretPublic

        body = self._call("POST", "/v1/secrets", json={"name": name, "value": value})
        return SecretPublic.model_validate(body)

    def list_secrets(self) -> SecretsPublic:
        from app.secret_schemas import SecretsPublic

        return SecretsPublic.model_validate(self._call("GET", "/v1/secrets"))

    def delete_secret(self, name: str) -> None:
        self._call("DELETE", f"/v1/secrets/{name}")

    def push_code(self, archive: IO[bytes] | bytes) -> tuple[CodeBundleDetail, bool]:
        """Uploads a tar.gz; the bundle, and whether it is new (False: these bytes were pushed before)."""
        from app.schemas import CodeBundleDetail

        headers = {"Content-Type": "application/gzip"}
        response = self._http.post("/v1/code", content=archive, headers=headers)
        _raise_for_problem(response)
        return CodeBundleDetail.model_validate(response.json()), response.status_code == 201

    def list_code(self) -> CodeBundlesPublic:
        from app.schemas import CodeBundlesPublic

        return CodeBundlesPublic.model_validate(self._call("GET", "/v1/code"))

    def get_code(self, code_id: str) -> CodeBundleDetail:
        from app.schemas import CodeBundleDetail

        return CodeBundleDetail.model_validate(self._call("GET", f"/v1/code/{code_id}"))

    def delete_code(self, code_id: str) -> None:
        self._call("DELETE", f"/v1/code/{code_id}")

    def create_sweep(self, body: dict[str, Any]) -> SweepPublic:
        """A sweep as POST /v1/sweeps takes it (docs/sweeps.md); its first trials are queued as jobs."""
        from app.schemas import SweepPublic

        return SweepPublic.model_validate(self._call("POST", "/v1/sweeps", json=body))

    def list_sweeps(self, cursor: int | None = None, limit: int | None = None) -> SweepsPublic:
        from app.schemas import SweepsPublic

        params = {"cursor": cursor, "limit": limit}
        return SweepsPublic.model_validate(self._call("GET", "/v1/sweeps", params=params))

    def get_sweep(self, sweep_id: int) -> SweepPublic:
        from app.schemas import SweepPublic

        return SweepPublic.model_validate(self._call("GET", f"/v1/sweeps/{sweep_id}"))

    def sweep_trials(self, sweep_id: int) -> TrialsPublic:
        from app.schemas import TrialsPublic

        return TrialsPublic.model_validate(self._call("GET", f"/v1/sweeps/{sweep_id}/trials"))

    def cancel_sweep(self, sweep_id: int) -> SweepPublic:
        """No more trials are made, and the running ones are cancelled."""
        from app.schemas import SweepPublic

        return SweepPublic.model_validate(self._call("POST", f"/v1/sweeps/{sweep_id}/cancel"))
