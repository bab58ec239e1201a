#!/usr/bin/env bash
# Installs what the web UI's browser tests (test/e2e/ui_test.go) need:
# Debian's chromium, driven headless by chromedp, and axe-core from npm
# (pinned), cached where the test looks for it. Idempotent.
set -euo pipefail

AXE_VERSION=4.14.1
if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then
	echo "install-chromium: chromium already installed"
elif [ "$(id -u)" -ne 0 ]; then
	echo "install-chromium: chromium is missing and this is not root; run: sudo apt-get install chromium" >&2
	exit 1
else
	apt-get update
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium fonts-dejavu-core
	echo "install-chromium: installed $(chromium --version 2>/dev/null || echo chromium)"
fi

cache="${XDG_CACHE_HOME:-$HOME/.cache}/crucible/axe-core-$AXE_VERSION"
if [ -f "$cache/node_modules/axe-core/axe.min.js" ]; then
	echo "install-chromium: axe-core $AXE_VERSION already cached"
elif command -v npm >/dev/null; then
	mkdir -p "$cache"
	npm install --prefix "$cache" --no-save --no-audit --no-fund --silent "axe-core@$AXE_VERSION"
	echo "install-chromium: cached axe-core $AXE_VERSION in $cache"
else
	echo "install-chromium: npm is missing; the UI test fetches axe-core with it (apt-get install npm)" >&2
	exit 1
fi
