# The image every component of the chart and the compose stack runs (`workloadmap run ...`).
#
# Two stages: the build stage installs the package and its dependencies into a virtualenv
# (pip compiles the bytecode there, so nothing is compiled, and written, at run time); the
# final stage copies only that virtualenv onto a clean base: no pip cache, no sources, no
# build leftovers.  It runs as the unprivileged user the chart's securityContext names
# (runAsUser/runAsGroup 10001 in charts/workloadmap/values.yaml; a test checks they agree) and
# works on a read-only root filesystem: HOME is /tmp (an emptyDir in the chart), the processors'
# temporary directory is under /tmp, and the DuckDB file and the watchers' checkpoints live on
# the volumes given to `--duckdb` and `--checkpoint-dir`.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/workloadmap
WORKDIR /src
COPY . .
RUN /opt/workloadmap/bin/pip install --no-cache-dir .

FROM python:3.11-slim
COPY --from=build /opt/workloadmap /opt/workloadmap
# /data and /state: the mount points of the compose stack's named volumes, owned by the user
# (Docker copies the ownership into a new named volume)
RUN mkdir -p /data /state && chown 10001:10001 /data /state
ENV PATH=/opt/workloadmap/bin:$PATH \
    HOME=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
ENTRYPOINT []
CMD ["workloadmap", "--help"]
