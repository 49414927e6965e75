#!/bin/bash
# Installs code-server (VS Code in a browser) into PREFIX from the npm registry alone.
#
# code-server's own install scripts download prebuilt binaries from GitHub, which these machines
# cannot reach, so every npm step runs with --ignore-scripts and the native addons are compiled
# here against the system Node's headers. Needs a C++ toolchain, python3, pkg-config,
# libkrb5-dev and ripgrep (Debian packages).
set -euo pipefail
PREFIX=${1:?usage: install-code-server.sh PREFIX [VERSION]}
VERSION=${2:-4.100.3}
GYP=$(dirname "$(readlink -f "$(command -v npm)")")/../node_modules/node-gyp/bin/node-gyp.js
export npm_config_nodedir=/usr npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false

rm -rf "$PREFIX.partial"
mkdir -p "$PREFIX.partial"
cd "$PREFIX.partial"
echo '{"name": "code-server-install", "private": true}' > package.json
npm install --silent --ignore-scripts "code-server@$VERSION"
npm_config_build_from_source=true npm rebuild --silent argon2

vscode=node_modules/code-server/lib/vscode
(cd "$vscode" && npm install --silent --omit=dev --ignore-scripts)
for addon in node-pty @vscode/spdlog native-watchdog @vscode/deviceid kerberos; do
  (cd "$vscode/node_modules/$addon" && node "$GYP" rebuild --silent --nodedir=/usr > /dev/null)
done
mkdir -p "$vscode/node_modules/@vscode/ripgrep/bin"
ln -sf "$(command -v rg)" "$vscode/node_modules/@vscode/ripgrep/bin/rg"
# The links and built-in extensions that code-server's postinstall step would have made.
ln -sfn node_modules "$vscode/node_modules.asar"
ln -sf code-linux.sh "$vscode/bin/remote-cli/code-server"
ln -sf browser-linux.sh "$vscode/bin/helpers/browser.sh"
(cd "$vscode/extensions" && npm install --silent --omit=dev --ignore-scripts && node ./postinstall.mjs > /dev/null)

HOME=$PWD/.home node_modules/.bin/code-server --version > /dev/null
cd /
rm -rf "$PREFIX"
mv "$PREFIX.partial" "$PREFIX"
