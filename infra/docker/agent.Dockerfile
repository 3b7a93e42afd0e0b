# The warmpool agent image: the agent (warmpool-agent) and the CNI plugin
# (warmpool-cni) with a relocatable Python, so the init container can copy the
# whole runtime to the node's /opt/warmpool and the container runtime can exec
# the plugin on the host without a Python of its own there.
#
# Build from the repository root:
#   docker build -f infra/docker/agent.Dockerfile -t <registry>/warmpool-agent:<tag> .
# (arm64 and amd64: add --platform linux/arm64,linux/amd64 with buildx.)
#
# Build arguments for builds that reach no container registry (the e2e tier,
# e2e/build-images.sh): BASE_IMAGE and UV_IMAGE name locally made stand-ins for
# debian:bookworm-slim and uv's image, and PYTHON_SOURCE=debian takes the base's own
# python3 (copied under /opt/warmpool/python, where it finds its standard library
# from its own location) instead of the standalone CPython uv downloads. That
# interpreter needs the shared libraries of Debian's python3 on the node as well.
# SSL_CERT_FILE names a CA bundle the builder mounts, for a TLS-inspecting proxy.

ARG PYTHON_VERSION=3.13
ARG UV_VERSION=0.9
ARG BASE_IMAGE=debian:bookworm-slim
ARG UV_IMAGE=ghcr.io/astral-sh/uv:${UV_VERSION}
ARG PYTHON_SOURCE=uv

FROM ${UV_IMAGE} AS uv

FROM ${BASE_IMAGE} AS build
ARG PYTHON_VERSION
ARG PYTHON_SOURCE
# A CA bundle for builds behind a TLS-inspecting proxy, mounted by the builder
# (e2e/build-images.sh: buildah bud --volume); unset, uv trusts its own roots.
ARG SSL_CERT_FILE
COPY --from=uv /uv /usr/local/bin/uv
# A standalone (python-build-standalone) interpreter under the path it will have on
# the node, so the venv's links stay valid after install-cni.sh copies it there.
ENV UV_PYTHON_INSTALL_DIR=/opt/warmpool/python \
    UV_PYTHON_PREFERENCE=only-managed \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy
RUN if [ "${PYTHON_SOURCE}" = debian ]; then \
      apt-get update && apt-get install -y --no-install-recommends python3 ca-certificates \
      && v=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])') \
      && mkdir -p /opt/warmpool/python/bin /opt/warmpool/python/lib \
      && cp "/usr/bin/python$v" /opt/warmpool/python/bin/ && ln -s "python$v" /opt/warmpool/python/bin/python3 \
      && cp -a "/usr/lib/python$v" /opt/warmpool/python/lib/ \
      && UV_PYTHON_PREFERENCE=only-system uv venv --relocatable --python /opt/warmpool/python/bin/python3 /opt/warmpool/venv; \
    else \
      uv python install ${PYTHON_VERSION} \
      && uv venv --relocatable --python ${PYTHON_VERSION} /opt/warmpool/venv; \
    fi
WORKDIR /src
COPY pyproject.toml README.md ./
COPY warmpool ./warmpool
COPY node_agent ./node_agent
RUN uv pip install --python /opt/warmpool/venv/bin/python --no-cache '.[agent]'

FROM ${BASE_IMAGE}
ARG PYTHON_SOURCE
# nft: the agent's SNAT and NodePort rules (node_agent/nodenet.py). With
# PYTHON_SOURCE=debian, python3's shared libraries too (its interpreter is not used).
RUN apt-get update && apt-get install -y --no-install-recommends nftables \
    $(if [ "${PYTHON_SOURCE}" = debian ]; then echo python3; fi) \
 && rm -rf /var/lib/apt/lists/*
LABEL org.opencontainers.image.title="warmpool-agent" \
      org.opencontainers.image.description="warmpool node agent and CNI plugin" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/warmpool /opt/warmpool
COPY infra/docker/install-cni.sh /opt/warmpool/install-cni.sh
RUN chmod 0755 /opt/warmpool/install-cni.sh
ENV PATH=/opt/warmpool/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
ENTRYPOINT ["/opt/warmpool/venv/bin/warmpool-agent"]
