# One image for every app service of docker-compose.yml: the bridge with its
# PostgreSQL, Redis, web and Flower extras, plus the reference app in workers/.
FROM python:3.11-slim

# `celery -A workers.app` imports the reference app from the working
# directory; PYTHONPATH says so explicitly rather than rely on celery adding it.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/app

# Build and install from /src, then delete it: a bridge/ source folder left in
# the working directory would shadow the installed package when celery puts
# the cwd on sys.path, and that folder lacks bridge.migrations (pip installs
# migrations/ under that name), so `bridge migrate` would fail.
# Everything pip needs is copied: the code, the migrations and the metadata
# (pyproject names README.md as the long description).
WORKDIR /src
COPY pyproject.toml README.md ./
COPY bridge/ bridge/
COPY migrations/ migrations/
RUN pip install '.[postgres,redis,web,flower]' && rm -rf /src

# The reference app is imported from /app at run time, not installed.
WORKDIR /app
COPY workers/ workers/

# Run as an unprivileged user; it owns /app so that anything a process writes
# next to itself (a SQLite file or broker folder when run without compose's
# settings) has somewhere to go.
RUN useradd --create-home --uid 1000 bridge && chown -R bridge:bridge /app
USER bridge

CMD ["celery", "-A", "workers.app", "worker", "-l", "info"]
