# Trainyard for a GPU box: the API and the worker run from this one image (docker-compose.yml says which).
# The base brings CUDA, cuDNN and a matching torch + torchvision; pip must keep those, not replace them with
# a different multi-GB build, so they are pinned to what the image has.
# BASE_IMAGE: any base with Python 3.11 as `python` and `pip` and torch + torchvision installed;
# deploy/compose_check.sh passes one it builds from Debian, where no image registry is reachable.
ARG BASE_IMAGE=pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime
FROM ${BASE_IMAGE}

# TRAINYARD_HOST: the API listens on every interface of its container; the port is published from there.
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TRAINYARD_HOST=0.0.0.0 \
    TRAINYARD_RUNS_DIR=/var/lib/trainyard/runs \
    TRAINYARD_DATA_DIR=/var/lib/trainyard/data

WORKDIR /opt/trainyard

# Dependencies first, from pyproject.toml alone, so editing the code does not reinstall them. The pins are the
# installed distributions' versions, not torch.__version__: a torch wheel from PyPI says 2.14.1+cu130 there
# while pip knows it as 2.14.1, and a pin on the former matches nothing. The import checks the pair loads.
COPY pyproject.toml ./
RUN python -c "import torch, torchvision; from importlib.metadata import version; print('\n'.join(f'{name}=={version(name)}' for name in ('torch', 'torchvision')))" \
        > /opt/torch-pins.txt \
    && python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install --no-cache-dir -c /opt/torch-pins.txt -r /tmp/requirements.txt

# bubblewrap: the sandbox of user code (docs/security.md); setpriv, prlimit and env come with the base.
# gcc and libc6-dev: performance.compile's Inductor/Triton build small C launchers on first use, and the
# runtime base has no C compiler (the conda Python brings its own headers).
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

COPY . .
RUN pip install --no-cache-dir --no-deps . \
    && useradd --create-home --uid 1000 trainyard \
    && mkdir -p /var/lib/trainyard/runs /var/lib/trainyard/data /var/cache/trainyard/compile \
    && chown -R trainyard /var/lib/trainyard /var/cache/trainyard

# The worker runs as this user, and so do jobs: a job with a code bundle in bubblewrap, this uid mapped in a
# user namespace of its own, seeing only its run directory writable (docs/security.md).
USER trainyard
EXPOSE 8000
# The API with its connection limits from TRAINYARD_* settings (app/serve.py).
CMD ["python", "-m", "app.serve"]
