# syntax=docker/dockerfile:1
# topogang's image: `topogang serve` on a slim Python 3.11, as a non-root user.
#
#   docker build -t topogang:0.1.0 .
#
# Two stages: the build stage installs the pinned dependencies (constraints.txt, the versions
# `make test` runs) and topogang into a virtualenv; the final stage copies only that virtualenv
# onto the same base image, so pip's caches, the sources and any build tool stay behind.

# The base image by version and digest (python:3.11.15-slim-trixie, multi-arch index), so a
# rebuild gets the same Python and Debian; update both together.
ARG PYTHON_IMAGE=python:3.11.15-slim-trixie@sha256:90744cff8f32887f075c47d747a173ff333e9e98801667af93c357fa9f5e28ff

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore
RUN python -m venv /opt/topogang
WORKDIR /src
# Dependencies first, in their own layer: it is rebuilt only when the pins change, not with
# every change to the code. Only wheels: numpy, orjson, jq, aiohttp and friends publish them
# for Linux on amd64 and arm64, so no compiler is needed anywhere.
COPY pyproject.toml constraints.txt ./
RUN python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
        > requirements.txt \
    && /opt/topogang/bin/pip install --only-binary=:all: -c constraints.txt -r requirements.txt
COPY README.md ./
COPY extender/ extender/
RUN /opt/topogang/bin/pip install --no-deps . \
    && /opt/topogang/bin/topogang serve --help > /dev/null

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="topogang" \
      org.opencontainers.image.description="A kube-scheduler extender that places AI workloads as whole gangs on a GPU datacenter's topology" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/topogang /opt/topogang
# Unbuffered logs (one JSON line per decision reaches the node at once); no .pyc written at run
# time (the root filesystem is read-only in manifests/deployment.yaml; pip compiled them at
# install); HOME for a user that has no passwd entry.
ENV PATH=/opt/topogang/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
# A numeric, unprivileged user (the distroless "nonroot" id), so `runAsNonRoot` can verify it.
USER 65532:65532
# 8888: the extender (mTLS); 8889: the probes and /metrics (--health-listen in manifests/)
EXPOSE 8888 8889
ENTRYPOINT ["topogang", "serve"]
