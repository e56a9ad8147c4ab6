#!/usr/bin/env bash
# attend-report's page rendered the way a person sees it: attend-report on the checked-in runs
# (tests/tools/data: real attend-bench JSON of two sessions on a Zen 5), headless Chromium
# (Debian's chromium, installed by tools/bootstrap.sh test) screenshots it, and check_png.py checks
# the PNG: the requested size, not blank, the charts' colours present. Also each chart alone.
# Exit 77 (skipped, reported as such) when chromium is not installed.
# usage: render_report.sh ATTEND_REPORT DATA_DIR
set -euo pipefail
report="$1"
data="$2"
chromium="$(command -v chromium || command -v chromium-browser || true)"
[[ -n "$chromium" ]] || { echo "SKIPPED: chromium not installed (apt-get install chromium)"; exit 77; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$report" "$data"/*.json -o "$work/report.html" --svg-dir "$work" --title "attend-bench: two sessions"
shot() {  # shot URL PNG WIDTH HEIGHT
  # The flags keep Chromium off the network (this machine has none) and out of the user's profile.
  timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars \
    --user-data-dir="$work/profile" --window-size="$3,$4" --screenshot="$2" "$1" >/dev/null 2>&1 || true
  [[ -s "$2" ]] || { echo "error: chromium wrote no screenshot of $1" >&2; exit 1; }
}
shot "file://$work/report.html" "$work/page.png" 1100 3000
# The page: its size, mostly white with enough ink, and the first series colours of the charts.
/usr/bin/python3 "$here/check_png.py" "$work/page.png" 1100 3000 --min-ink 0.03 --colour 1f77b4 --colour d62728
label="$(basename "$(ls "$data"/*.json | head -1)" .json)"
shot "file://$work/headline-$label.svg" "$work/headline.png" 780 900
/usr/bin/python3 "$here/check_png.py" "$work/headline.png" 780 900 --min-ink 0.02 --colour 1f77b4
shot "file://$work/roofline-$label.svg" "$work/roofline.png" 780 470
/usr/bin/python3 "$here/check_png.py" "$work/roofline.png" 780 470 --min-ink 0.02 --colour 1f77b4
echo "report rendered: page, headline and roofline PNGs checked"
