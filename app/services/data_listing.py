"""An s3:// data.root at submission and in a dry run: its credentials opened and its objects listed (how many,
how many bytes), so that a wrong key, bucket or prefix is refused before the job waits in the queue.

The listing is bounded (TRAINYARD_DATA_LIST_MAX_OBJECTS, TRAINYARD_DATA_LIST_TIMEOUT_S): a prefix a user
names may hold billions of objects, and the request must stay cheap. The API opens the owner's secret here,
as it does to mask logs; the value never leaves this function but as the client's credentials.
"""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError
from cryptography.exceptions import InvalidTag
from sqlalchemy.orm import Session

from app.services.errors import InvalidSpec
from app.services.keys import Caller
from core.config import Settings
from core.executors import executor_traits
from core.secrets import cipher, unseal, usable_secret
from jobspec.data_store import (
    StoreCredentials,
    StoreListing,
    bounded_listing,
    is_store_root,
    parse_credentials,
    parse_store_root,
    store_client,
)
from jobspec.spec import JobSpec

# Retries at the API: a storm of 5xx answers fails the request in seconds, and the user submits again.
API_ATTEMPTS = 3


def _opened(session: Session, settings: Settings, name: str, caller: Caller) -> str:
    secret = usable_secret(session, caller.user, name)
    if secret is None:
        raise InvalidSpec(
            "data.credentials",
            f"you have no secret {name!r} and none is shared by that name; set it with `trainyard secret set "
            f"{name}` (list yours with `trainyard secret ls`)",
        )
    try:
        return unseal(cipher(settings, "this server"), secret)
    except InvalidTag:
        raise InvalidSpec(
            "data.credentials", f"this server's key does not open the secret {name!r}; set it again"
        ) from None


def store_credentials(
    session: Session, settings: Settings, spec: JobSpec, caller: Caller
) -> StoreCredentials | None:
    """The spec's data.credentials, opened and parsed; None: the worker's own (AWS_* variables), which only a
    job running no code of its user's may use."""
    ref = spec.inputs.data.credentials
    if ref is None:
        if spec.code is not None:
            raise InvalidSpec(
                "data.credentials",
                "a job with a code bundle is not given the worker's own credentials to read an s3:// "
                'data.root; set data.credentials to {"secret": NAME}, a secret of yours that holds the '
                "store's keys",
            )
        return None
    traits = executor_traits(settings)
    if not traits.places_jobs:
        raise InvalidSpec(
            "data.credentials",
            f"secrets do not reach jobs run by {traits.placed_by} here "
            f"(TRAINYARD_EXECUTOR={settings.executor}); leave data.credentials out to use the nodes' own AWS "
            "credentials, or run on the local executor",
        )
    try:
        return parse_credentials(_opened(session, settings, ref.secret, caller))
    except ValueError as exc:
        raise InvalidSpec("data.credentials", str(exc)) from None


def _refused(root: str, exc: Exception) -> InvalidSpec:
    said = (
        exc.response.get("Error", {}).get("Code", "an error") if isinstance(exc, ClientError) else "nothing"
    )
    return InvalidSpec(
        "data.root",
        f"{root} cannot be listed (the store answered {said}: {type(exc).__name__}); check the bucket, the "
        "prefix, the endpoint and that data.credentials may list and read it",
    )


def list_store_data(
    session: Session, settings: Settings, spec: JobSpec, caller: Caller
) -> StoreListing | None:
    """What an s3:// data.root holds, listed within the settings' bounds; None for any other root."""
    if spec.program is not None:  # a program reads its own data
        return None
    data = spec.inputs.data
    if data.root is None or not is_store_root(data.root):
        return None
    if data.cache_bytes > settings.data_cache_max_bytes:
        raise InvalidSpec(
            "data.cache_bytes",
            f"data.cache_bytes={data.cache_bytes} is more than this service allows "
            f"(TRAINYARD_DATA_CACHE_MAX_BYTES={settings.data_cache_max_bytes}); lower it",
        )
    root = parse_store_root(data.root)
    credentials = store_credentials(session, settings, spec, caller)
    client = store_client(credentials, settings.data_list_timeout_s, API_ATTEMPTS)
    try:
        listing = bounded_listing(client, root, settings.data_list_max_objects, settings.data_list_timeout_s)
    except (BotoCoreError, ClientError) as exc:
        raise _refused(data.root, exc) from None
    if not listing.objects:
        raise InvalidSpec(
            "data.root",
            f"{data.root} holds no objects; upload the dataset under that prefix, or fix data.root",
        )
    return listing
