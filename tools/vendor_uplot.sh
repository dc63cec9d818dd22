#!/usr/bin/env bash
# Refresh the charting library vendored into the HTML report
# (src/pgsurge/report/vendor/): uPlot's minified IIFE build, its css and its
# licence, taken from the npm registry's package with `npm pack` and checked
# against the registry's sha512 integrity before anything is copied.
#
#   tools/vendor_uplot.sh [VERSION]      (default: the version below)
#
# Needs node's npm, python3 and tar. Commit the three files.
set -euo pipefail

version=${1:-1.6.32}
dest="$(cd "$(dirname "$0")/.." && pwd)/src/pgsurge/report/vendor"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

expected=$(npm view "uplot@$version" dist.integrity)
case "$expected" in
sha512-*) ;;
*)
    echo "vendor_uplot: no sha512 integrity for uplot@$version: '$expected'" >&2
    exit 1
    ;;
esac
tarball=$(npm pack --silent "uplot@$version")
actual=$(python3 -c 'import base64, hashlib, sys
data = open(sys.argv[1], "rb").read()
print("sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode())' "$tarball")
if [ "$actual" != "$expected" ]; then
    echo "vendor_uplot: integrity mismatch for $tarball" >&2
    echo "  registry: $expected" >&2
    echo "  tarball:  $actual" >&2
    exit 1
fi

tar xzf "$tarball"
mkdir -p "$dest"
cp package/dist/uPlot.iife.min.js "$dest/uPlot.iife.min.js"
cp package/dist/uPlot.min.css "$dest/uPlot.min.css"
cp package/LICENSE "$dest/LICENSE-uPlot"
printf 'uplot %s %s\n' "$version" "$expected" >"$dest/VERSION"
echo "vendored uplot@$version ($expected) into $dest"
