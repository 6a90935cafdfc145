# One image for every gpuplace service: the command picks it (`gpuplace service placement`, `gpuplace migrate`).
#   buildah bud -t gpuplace:0.1.0 .      (or: docker build -t gpuplace:0.1.0 .)
# Runtime dependencies only, at the versions requirements.lock pins; no dev tools, no compiler in the final image.
# No HEALTHCHECK: Kubernetes probes /healthz and /readyz on GPUPLACE_HTTP_PORT (the Helm chart), compose has none.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# PIP_CONSTRAINT also pins what pip installs into its isolated build environment (setuptools), which -c does not.
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CONSTRAINT=/src/requirements.lock
WORKDIR /src
RUN python3 -m venv /opt/gpuplace
COPY requirements.lock pyproject.toml README.md ./
COPY libs ./libs
COPY services ./services
RUN /opt/gpuplace/bin/pip install --no-compile -c requirements.lock . \
 && /opt/gpuplace/bin/python -m compileall -q /opt/gpuplace/lib

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="gpuplace" \
      org.opencontainers.image.description="Fragmentation-aware, deadline-aware GPU placement for Kubernetes fleets"
# A fixed numeric uid/gid, so Kubernetes' runAsNonRoot can verify it without resolving names.
RUN groupadd --system --gid 10001 gpuplace \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin gpuplace
COPY --from=build /opt/gpuplace /opt/gpuplace
ENV PATH=/opt/gpuplace/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /tmp
USER 10001:10001
CMD ["gpuplace", "--help"]
