"""A file a job wrote, sent as an attachment from what was opened: the descriptor the confined opener
checked (never the path again, which the job may have swapped for a link since) or the object store's body,
with exactly the size checked as its Content-Length."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

from fastapi.responses import StreamingResponse


def attachment(
    chunks: Iterator[bytes], size: int | None, media_type: str, filename: str
) -> StreamingResponse:
    """`size` None: not known up front (a tar made as it is sent). The job chose part of `filename`, so it
    goes percent-encoded (RFC 6266) unless it is plain."""
    quoted = quote(filename)
    disposition = f'filename="{filename}"' if quoted == filename else f"filename*=utf-8''{quoted}"
    headers = {"Content-Disposition": f"attachment; {disposition}"}
    if size is not None:
        headers["Content-Length"] = str(size)
    return StreamingResponse(chunks, media_type=media_type, headers=headers)
