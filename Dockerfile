# The kons service: FastAPI + uvicorn, state in Redis (see docker-compose.yml and docs/service-design.md).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /srv/kons
# The dependencies first, in a layer of their own: it depends on pyproject.toml and constraints.txt only, so
# a change of the code reuses it and reinstalls the package alone. constraints.txt pins every dependency (CI
# installs the tests' environment from it too: scripts/test.sh).
COPY pyproject.toml constraints.txt ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print('\n'.join(p['dependencies'] + p['optional-dependencies']['service']))" > /tmp/requirements.txt \
    && pip install -c constraints.txt -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt
COPY README.md ./
COPY kons ./kons
COPY kons_service ./kons_service
RUN pip install --no-deps -c constraints.txt ".[service]" \
    && groupadd --gid 10001 kons \
    && useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin kons \
    && mkdir -p /data && chown 10001:10001 /data

# Numeric, so that Kubernetes' runAsNonRoot can verify it without reading the image's /etc/passwd.
USER 10001:10001
# KONS_WORKERS: uvicorn worker processes; KONS_DATA_DIR: the embedded Redis's files (no KONS_REDIS_URL).
# The service binds 0.0.0.0 when API keys are configured, 127.0.0.1 (unreachable from outside) otherwise.
ENV KONS_PORT=8000 \
    KONS_WORKERS=1 \
    KONS_DATA_DIR=/data
EXPOSE 8000
VOLUME ["/data"]

HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('KONS_PORT', '8000') + '/healthz', timeout=2)"]

CMD ["python", "-m", "kons_service"]
