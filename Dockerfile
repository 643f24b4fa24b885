# syntax=docker/dockerfile:1
# vmcp-trio image: `docker build -t vmcp-trio .`
#   docker run -p 4483:4483 -v "$PWD/examples:/etc/vmcp:ro" vmcp-trio \
#     serve --config /etc/vmcp --host 0.0.0.0
# Stage 1 builds a wheel and a virtual environment; stage 2 copies only the environment, so no
# compiler, pip cache or source tree reaches the final image.

FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/vmcp
COPY pyproject.toml README.md ./
COPY vmcp_trio ./vmcp_trio
RUN /opt/vmcp/bin/pip install --no-compile . \
    && /opt/vmcp/bin/python -m compileall -q /opt/vmcp/lib

FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="vmcp-trio" \
      org.opencontainers.image.description="MCP gateway: one endpoint over many MCP servers"
RUN groupadd --system --gid 10001 vmcp \
    && useradd --system --uid 10001 --gid vmcp --home-dir /nonexistent --shell /usr/sbin/nologin vmcp
COPY --from=build /opt/vmcp /opt/vmcp
ENV PATH="/opt/vmcp/bin:$PATH" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
EXPOSE 4483
# The slim image has no curl: probe /health with the interpreter that is already there.
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:4483/health', timeout=2).status == 200 else 1)"]
ENTRYPOINT ["vmcp"]
CMD ["serve", "--config", "/etc/vmcp", "--host", "0.0.0.0"]
