# mailrun: hub, sidecars and the CLI in one image (see compose.yaml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY runtime ./runtime
COPY hub ./hub
COPY sidecar ./sidecar
RUN pip install ".[postgres]" && rm -rf /src

RUN useradd --system --uid 10001 --create-home --home-dir /home/mailrun mailrun \
    && mkdir /data /data2 && chown mailrun:mailrun /data /data2
USER mailrun
WORKDIR /home/mailrun
VOLUME /data
EXPOSE 8470

CMD ["mailrun", "up", "--state-dir", "/data", "--http", "0.0.0.0:8470"]
