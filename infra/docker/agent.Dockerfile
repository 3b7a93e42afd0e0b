# The warmpool agent image: the agent (warmpool-agent) and the CNI plugin
# (warmpool-cni) with a relocatable Python, so the init container can copy the
# whole runtime to the node's /opt/warmpool and the container runtime can exec
# the plugin on the host without a Python of its own there.
#
# Build from the repository root:
#   docker build -f infra/docker/agent.Dockerfile -t <registry>/warmpool-agent:<tag> .
# (arm64 and amd64: add --platform linux/arm64,linux/amd64 with buildx.)

ARG PYTHON_VERSION=3.13
ARG UV_VERSION=0.9

FROM ghcr.io/astral-sh/uv:${UV_VERSION} AS uv

FROM debian:bookworm-slim AS build
ARG PYTHON_VERSION
COPY --from=uv /uv /usr/local/bin/uv
# A standalone (python-build-standalone) interpreter under the path it will have on
# the node, so the venv's links stay valid after install-cni.sh copies it there.
ENV UV_PYTHON_INSTALL_DIR=/opt/warmpool/python \
    UV_PYTHON_PREFERENCE=only-managed \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy
RUN uv python install ${PYTHON_VERSION} \
 && uv venv --relocatable --python ${PYTHON_VERSION} /opt/warmpool/venv
WORKDIR /src
COPY pyproject.toml README.md ./
COPY warmpool ./warmpool
COPY node_agent ./node_agent
RUN uv pip install --python /opt/warmpool/venv/bin/python --no-cache '.[agent]'

FROM debian:bookworm-slim
# nft: the agent's SNAT and NodePort rules (node_agent/nodenet.py).
RUN apt-get update && apt-get install -y --no-install-recommends nftables \
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
