#!/usr/bin/env bash
# Run a command with one local Prefect server on 127.0.0.1 (instead of a temporary server per
# flow run, 10-25 s each), then stop it. Usage: scripts/with_prefect_server.sh dvc repro
# A PREFECT_API_URL already set is used as is (no server started).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -d "$root/.venv/bin" ]; then export PATH="$root/.venv/bin:$PATH"; fi
export PREFECT_HOME="${PREFECT_HOME:-$root/.prefect}"
export PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_SERVER_UI_ENABLED=false \
       PREFECT_LOGGING_LEVEL="${PREFECT_LOGGING_LEVEL:-WARNING}" DO_NOT_TRACK=1 \
       PREFECT_CLOUD_ENABLE_ORCHESTRATION_TELEMETRY=false PREFECT_TELEMETRY_ENABLE_RESOURCE_METRICS=false \
       MLFLOW_DISABLE_TELEMETRY=true DVC_NO_ANALYTICS=1 ORT_DISABLE_TELEMETRY=1
if [ -n "${PREFECT_API_URL:-}" ]; then exec "$@"; fi

port="$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
mkdir -p "$PREFECT_HOME"
log="$PREFECT_HOME/server-$port.log"
setsid prefect server start --host 127.0.0.1 --port "$port" --no-ui --analytics-off >"$log" 2>&1 &
server=$!
stop() { kill -TERM -- "-$server" 2>/dev/null || kill -TERM "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }
trap stop EXIT INT TERM
export PREFECT_API_URL="http://127.0.0.1:$port/api"
for _ in $(seq 1 240); do
  if python -c "import urllib.request,sys; urllib.request.urlopen('$PREFECT_API_URL/health', timeout=2)" 2>/dev/null; then break; fi
  if ! kill -0 "$server" 2>/dev/null; then echo "Prefect server failed to start; see $log" >&2; exit 1; fi
  sleep 0.5
done
"$@"
