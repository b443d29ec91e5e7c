# What pytorch/pytorch gives Trainyard's Dockerfile, made without an image registry: `python` and `pip` of a
# venv on Debian's Python 3.11 with torch and torchvision. deploy/compose_check.sh builds it on the host's
# network, serving the host's local wheels of the two on loopback: they are those files, never a download;
# their dependencies (CUDA's libraries, sympy...) come from PyPI.
ARG DEBIAN_IMAGE=trainyard-check/debian:bookworm
FROM ${DEBIAN_IMAGE}

# The host's certificate authorities: a TLS-inspecting egress proxy, where there is one, signs PyPI's
# certificate. PIP_CERT: pip reads the system's bundle rather than the one it vendors.
COPY host-ca-certificates.crt /usr/local/share/ca-certificates/host.crt
RUN update-ca-certificates
ENV PATH=/opt/venv/bin:$PATH \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    PIP_DISABLE_PIP_VERSION_CHECK=1

ARG WHEELS_URL
ARG TORCH_WHEEL
ARG TORCHVISION_WHEEL
RUN python3 -m venv /opt/venv \
    && pip install --no-cache-dir "$WHEELS_URL/$TORCH_WHEEL" "$WHEELS_URL/$TORCHVISION_WHEEL"
