#!/usr/bin/env bash
# Installs the pinned plugin toolchains for Python and JavaScript into
# $DAGR_TOOLCHAINS (default target/toolchains), from the package registries:
#
#   py/  a venv with componentize-py and pytest (scripts/toolchains/requirements.txt)
#   js/  jco and componentize-js from npm (scripts/toolchains/package*.json,
#        with @bytecodealliance/preview2-shim pinned to 0.25.0: jco 1.35 cannot
#        read a WIT directory with 0.26)
#
# A stamp of the pins skips the work when nothing changed (warm runs take
# well under a second). Needs python3 (with venv) and node 20+ with npm.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${DAGR_TOOLCHAINS:-$PWD/target/toolchains}
PINS=scripts/toolchains
log() { printf '\033[1m[toolchains]\033[0m %s\n' "$*" >&2; }
mkdir -p "$DIR"

stamp_of() { cat "$@" | sha256sum | cut -d' ' -f1; }

py_stamp=$(stamp_of "$PINS/requirements.txt")
if [ "$(cat "$DIR/py.stamp" 2>/dev/null)" != "$py_stamp" ] || [ ! -x "$DIR/py/bin/componentize-py" ]; then
  log "installing componentize-py and pytest into $DIR/py"
  rm -rf "$DIR/py"
  python3 -m venv "$DIR/py"
  "$DIR/py/bin/pip" install -q --disable-pip-version-check -r "$PINS/requirements.txt"
  echo "$py_stamp" > "$DIR/py.stamp"
fi

js_stamp=$(stamp_of "$PINS/package.json" "$PINS/package-lock.json")
if [ "$(cat "$DIR/js.stamp" 2>/dev/null)" != "$js_stamp" ] || [ ! -x "$DIR/js/node_modules/.bin/jco" ]; then
  log "installing jco and componentize-js into $DIR/js"
  rm -rf "$DIR/js"
  mkdir -p "$DIR/js"
  cp "$PINS/package.json" "$PINS/package-lock.json" "$DIR/js/"
  (cd "$DIR/js" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  echo "$js_stamp" > "$DIR/js.stamp"
fi
