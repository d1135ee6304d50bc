#!/usr/bin/env bash
# Builds a release: atomic for every platform (Bun cross-compiles; each
# target's runtime comes from the npm registry the first time), their
# SHA256SUMS, and install.sh with the release's download address filled in.
#
#   bash scripts/release.sh --url https://example.org/atomic/v0.1.0 [--out DIR] [--targets "linux-x64 darwin-arm64"]
#
# --url   where the release's files will be downloadable (install.sh fetches
#         atomic-<platform> and SHA256SUMS from there); default: file://OUT
# --out   where to write them (default dist/release)
# The baseline builds are for x64 processors without AVX2 (install.sh picks
# them on such machines).
set -euo pipefail
cd "$(dirname "$0")/.."
out=dist/release
url=""
targets="linux-x64 linux-x64-baseline linux-arm64 darwin-x64 darwin-x64-baseline darwin-arm64"
while [ "$#" -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --url) url=$2; shift 2 ;;
    --targets) targets=$2; shift 2 ;;
    *) echo "error: unknown option $1." >&2; echo "hint: bash scripts/release.sh --url URL [--out DIR] [--targets \"linux-x64 darwin-arm64\"]" >&2; exit 2 ;;
  esac
done
# Installs the dependencies only when they are missing: a checkout that has them (a test, a worktree sharing them)
# is never reinstalled under its feet.
[ -x node_modules/.bin/bun ] || bash scripts/setup.sh
mkdir -p "$out"
out=$(cd "$out" && pwd)
url=${url:-file://$out}
rm -f "$out"/atomic-* "$out/SHA256SUMS" "$out/install.sh"
for t in $targets; do
  node_modules/.bin/bun scripts/build.ts "$out/atomic-$t" --target "bun-$t"
done
# install.sh knows where its release lives: `curl -fsSL URL/install.sh | sh` needs nothing else.
sed "s#^release_url=\"\" \# filled in by scripts/release.sh\$#release_url=\"$url\"#" scripts/install.sh > "$out/install.sh"
(cd "$out" && sha256sum atomic-* install.sh > SHA256SUMS)
echo "release in $out:"
(cd "$out" && ls -l atomic-* install.sh SHA256SUMS | awk '{ printf "  %-28s %6.1f MB\n", $9, $5 / 1048576 }')
