#!/bin/sh
# Installs atomic from a release: picks the binary for this machine
# (linux or darwin; x64, x64 without AVX2, or arm64), checks it against the
# release's SHA256SUMS, and installs it as ~/.local/bin/atomic (or --to DIR).
# Nothing is installed when the checksum does not match.
#
#   curl -fsSL RELEASE-URL/install.sh | sh
#   sh install.sh [--from RELEASE-URL] [--to DIR] [--platform linux-arm64]
#
# scripts/release.sh fills in release_url below; --from overrides it
# (https://, http:// or file:// addresses; curl or wget fetch them).
set -eu

release_url="" # filled in by scripts/release.sh
to="$HOME/.local/bin"
platform=""

fail() {
  printf 'error: %s.\n' "$1" >&2
  [ -n "${2:-}" ] && printf 'hint: %s\n' "$2" >&2
  exit 1
}

while [ "$#" -gt 0 ]; do
  case "$1" in
    --from) [ "$#" -ge 2 ] || fail "--from needs a value" "e.g. --from https://example.org/atomic/v0.1.0"; release_url=$2; shift 2 ;;
    --to) [ "$#" -ge 2 ] || fail "--to needs a value" "e.g. --to ~/bin"; to=$2; shift 2 ;;
    --platform) [ "$#" -ge 2 ] || fail "--platform needs a value" "e.g. --platform linux-arm64"; platform=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" 2>/dev/null | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) fail "unknown option $1" "sh install.sh [--from RELEASE-URL] [--to DIR] [--platform linux-arm64]" ;;
  esac
done
[ -n "$release_url" ] || fail "no release to install from" "give its address: sh install.sh --from RELEASE-URL"
release_url=${release_url%/}

if [ -z "$platform" ]; then
  case "$(uname -s)" in
    Linux) os=linux ;;
    Darwin) os=darwin ;;
    *) fail "atomic has no build for $(uname -s)" "releases have linux and darwin binaries; build from source elsewhere" ;;
  esac
  case "$(uname -m)" in
    x86_64|amd64)
      arch=x64
      # Bun's default x64 build needs AVX2; older processors get the baseline build.
      if [ "$os" = linux ] && ! grep -qw avx2 /proc/cpuinfo 2>/dev/null; then arch=x64-baseline; fi
      if [ "$os" = darwin ] && ! sysctl -n machdep.cpu.leaf7_features 2>/dev/null | grep -qw AVX2; then arch=x64-baseline; fi
      ;;
    aarch64|arm64) arch=arm64 ;;
    *) fail "atomic has no build for the $(uname -m) processor" "releases have x64 and arm64 binaries" ;;
  esac
  platform="$os-$arch"
fi

fetch() { # URL FILE
  if command -v curl >/dev/null 2>&1; then curl -fsSL "$1" -o "$2"
  elif command -v wget >/dev/null 2>&1; then wget -q "$1" -O "$2"
  else fail "neither curl nor wget is installed" "install one of them, or download atomic-$platform by hand"; fi
}

sha256() { # FILE
  if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1
  elif command -v shasum >/dev/null 2>&1; then shasum -a 256 "$1" | cut -d' ' -f1
  else fail "neither sha256sum nor shasum is installed" "install coreutils to check the download"; fi
}

mkdir -p "$to" || fail "cannot create $to" "choose another folder with --to DIR"
# The download lands next to its destination, so the final move is a rename on one filesystem.
tmp=$(mktemp -d "$to/.atomic-install.XXXXXX") || fail "cannot write in $to" "choose another folder with --to DIR"
trap 'rm -rf "$tmp"' EXIT INT TERM

fetch "$release_url/SHA256SUMS" "$tmp/SHA256SUMS" || fail "could not download $release_url/SHA256SUMS" "check the release address"
expected=$(awk -v f="atomic-$platform" '$2 == f || $2 == "*" f { print $1 }' "$tmp/SHA256SUMS")
[ -n "$expected" ] || fail "the release has no build for $platform" "its SHA256SUMS lists: $(awk '{ print $2 }' "$tmp/SHA256SUMS" | grep '^atomic-' | tr '\n' ' ')"
fetch "$release_url/atomic-$platform" "$tmp/atomic" || fail "could not download $release_url/atomic-$platform" "check the release address"
actual=$(sha256 "$tmp/atomic")
[ "$actual" = "$expected" ] || fail "atomic-$platform does not match the release's SHA256SUMS (got $actual, expected $expected); nothing was installed" "download again; if it persists, the release or the connection is not to be trusted"
chmod 755 "$tmp/atomic"
mv -f "$tmp/atomic" "$to/atomic"
echo "installed atomic ($platform) as $to/atomic"
case ":$PATH:" in
  *":$to:"*) ;;
  *) echo "note: $to is not on PATH; add it, e.g. export PATH=\"$to:\$PATH\"" ;;
esac
