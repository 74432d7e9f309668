#!/usr/bin/env bash
# The device as an app installs it: the wheel alone in a clean venv (no torch), drafting from the
# default Specialist's bundle in the cache against a live verifier from this checkout's .venv, with
# an audit log that `audit verify` (the device venv's) checks against the server's transcript; then
# an app folder with its own `core` and `server` packages imports the SDK.
#
#   make install && bash tools/device_install_check.sh [WORK_DIR]     # writes WORK_DIR/report.txt
#
# Prints pip's resolved package list, the device's peak RSS (GNU time), the text, the stats and
# the audit verdict. Loopback only; the verifier is stopped at the end.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
FULL=$REPO/.venv
D=${1:-$(mktemp -d /tmp/specsteer-device-XXXXXX)}
mkdir -p "$D"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PORT=$($FULL/bin/python -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
{
echo "== the wheel: its top-level entries"
rm -rf "$D/dist" && $FULL/bin/pip wheel -q --no-deps --no-build-isolation -w "$D/dist" "$REPO" 2>&1 | grep -v WARNING || true
rm -rf "$REPO/build"
unzip -l "$D"/dist/*.whl | awk 'NR>3 {print $4}' | cut -d/ -f1 | sort -u | grep -v '^$'
echo "== a clean venv with the wheel alone (pip's report)"
rm -rf "$D/device" && python3 -m venv "$D/device"
"$D/device/bin/pip" install -q --report "$D/device-report.json" -c "$REPO/constraints.txt" "$D"/dist/*.whl 2>&1 | grep -v WARNING || true
python3 -c "import json, sys; names = sorted(i['metadata']['name'].lower() for i in json.load(open(sys.argv[1]))['install']); print(len(names), 'packages; torch:', 'torch' in names, 'transformers:', 'transformers' in names, 'peft:', 'peft' in names); print(' '.join(names))" "$D/device-report.json"
echo "== PKI, device key, verifier on 127.0.0.1:$PORT"
rm -rf "$D/pki" "$D/keys" "$D/log" "$D/transcript"
$FULL/bin/server pki init --dir "$D/pki" >/dev/null
$FULL/bin/server pki issue-device --dir "$D/pki" --name alice >/dev/null
$FULL/bin/audit keygen --name alice --out "$D/keys" >/dev/null
$FULL/bin/server serve --tls-dir "$D/pki" --host 127.0.0.1 --port "$PORT" --transcript-dir "$D/transcript" > "$D/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 1800); do grep -q "serving on" "$D/server.log" && break; sleep 1; done
echo "== sdk generate --server (the device venv)"
(cd "$D" && /usr/bin/time -f "device: wall %e s, peak RSS %M KB" "$D/device/bin/sdk" generate --server "127.0.0.1:$PORT" \
  --pins "$D/pki/pins.txt" --cert "$D/pki/devices/alice.pem" --key "$D/pki/devices/alice.key" \
  --profile "$REPO/sdk/data/demo_profile.json" --audit-log "$D/log" --audit-key "$D/keys/alice.key" --max-new-tokens 48 \
  --prompt "Write the commit body for: Inline mmapped_ref_iterator into packed_ref_iterator")
kill $SERVER; wait $SERVER 2>/dev/null || true
echo "== audit verify (the device venv's)"
"$D/device/bin/audit" verify "$D/log" --key "$D/keys/alice.pub" --server-transcript "$D/transcript/server-transcript.jsonl" --device alice | head -3
echo "== an app with its own core/ and server/ packages"
mkdir -p "$D/app/core" "$D/app/server"
echo 'NAME = "the app'"'"'s core"' > "$D/app/core/__init__.py"
echo 'NAME = "the app'"'"'s server"' > "$D/app/server/__init__.py"
(cd "$D/app" && "$D/device/bin/python" -c "import core, server; from specsteer.sdk import load_specialist; s = load_specialist(); print(core.NAME, '|', server.NAME, '|', type(s.drafter).__name__, s.lm.name)")
} 2>&1 | tee "$D/report.txt"
