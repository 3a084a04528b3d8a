#!/usr/bin/env bash
# Installs the providers' official webhook libraries (Python venv + node_modules) that the
# intake's cross tests sign with, into one directory outside the clone, and prints that
# directory (the value of IDEM_TEST_SIGNERS) on stdout; everything else goes to stderr.
# Idempotent: a stamp of the pinned versions skips the install when nothing changed.
set -euo pipefail
DIR="${IDEM_SIGNERS_DIR:-$HOME/.cache/idem/signers}"
PY_PINS=(
  'stripe==16.1.0'
  'standardwebhooks==1.1.0'
  'slack_sdk==3.48.0'
  'twilio==9.13.0'
  'hubspot-api-client==12.0.0'
)
NPM_PINS=(
  '@octokit/webhooks-methods@6.0.0'
  'stripe@23.1.0'
)
STAMP="${PY_PINS[*]} ${NPM_PINS[*]}"
mkdir -p "$DIR"
if [ "$(cat "$DIR/.stamp" 2>/dev/null || true)" != "$STAMP" ] || [ ! -x "$DIR/venv/bin/python" ] ||
  [ ! -d "$DIR/node_modules/@octokit/webhooks-methods" ] || [ ! -d "$DIR/node_modules/stripe" ]; then
  {
    [ -x "$DIR/venv/bin/python" ] || python3 -m venv "$DIR/venv"
    "$DIR/venv/bin/pip" install --quiet --disable-pip-version-check "${PY_PINS[@]}"
    [ -f "$DIR/package.json" ] || printf '{"name":"idem-signers","private":true}\n' >"$DIR/package.json"
    (cd "$DIR" && npm install --silent --no-audit --no-fund --save-exact "${NPM_PINS[@]}")
  } 1>&2
  "$DIR/venv/bin/python" -c 'import stripe, standardwebhooks, slack_sdk, twilio, hubspot' 1>&2
  printf '%s' "$STAMP" >"$DIR/.stamp"
fi
printf '%s\n' "$DIR"
