#!/usr/bin/env bash
# Installs, from Debian's packages, the system tools the test suite drives when they are
# missing: chromium (the admin's browser tests, through Playwright; never a browser download),
# promtool (from the `prometheus` package: checks and unit-tests the alerting rules of
# deploy/prometheus/) and nginx (the proxy of deploy/nginx/, tested in front of gunicorn).
# Run by `make test`; a machine that already has them installs nothing.
set -euo pipefail

missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
command -v promtool >/dev/null || missing+=(prometheus)
[ -x /usr/sbin/nginx ] || missing+=(nginx)
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing ${missing[*]} (Debian packages) for the test suite"
if [ "$(id -u)" -eq 0 ]; then
  run=()
elif command -v sudo >/dev/null; then
  run=(sudo)
else
  echo "cannot install ${missing[*]}: run as root, or install them with apt-get" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${run[@]}" apt-get update -qq
"${run[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
