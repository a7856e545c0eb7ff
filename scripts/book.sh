#!/usr/bin/env bash
# Builds the book under docs/ (mdBook, diagrams by mdbook-mermaid) into docs/book/, and fails on
# any warning mdBook prints: mdBook itself only warns about unbalanced HTML in a chapter, an
# unused footnote and the like, and those pages then render wrong.
#
#   scripts/book.sh            # build; open docs/book/index.html
#   scripts/book.sh serve      # build, serve on http://127.0.0.1:3000 and rebuild on changes
#
# mdbook and mdbook-mermaid are pinned below and installed with `cargo install --locked` into
# $HMDP_TOOLS_DIR (default ~/.cache/hmdp-tools) when the right versions are not there yet, built
# in a target folder of their own beside it, so a second run (or CI on the same machine)
# installs nothing. The mermaid assets in docs/ are the ones this mdbook-mermaid writes: a
# version bump that forgets to refresh them fails here.
set -euo pipefail
cd "$(dirname "$0")/.."

# mdbook-mermaid 0.17.1's lock file builds it against mdbook 0.5.0, and a preprocessor built
# against another mdbook version warns on every build: the two move together.
MDBOOK_VERSION=0.5.0
MDBOOK_MERMAID_VERSION=0.17.1

log() { printf '\033[1m[book.sh]\033[0m %s\n' "$*" >&2; }

tools="${HMDP_TOOLS_DIR:-$HOME/.cache/hmdp-tools}"
mdbook="$tools/bin/mdbook"
mermaid="$tools/bin/mdbook-mermaid"
# `mdbook --version` prints "mdbook v0.5.0", `mdbook-mermaid --version` "mdbook-mermaid 0.17.1".
has_version() {
  local shown
  shown=$("$1" --version 2>/dev/null | awk '{print $2}') || return 1
  [ "${shown#v}" = "$2" ]
}
if ! has_version "$mdbook" "$MDBOOK_VERSION" || ! has_version "$mermaid" "$MDBOOK_MERMAID_VERSION"; then
  command -v cargo >/dev/null || { log "cargo is missing: install Rust from https://rustup.rs"; exit 1; }
  log "installing mdbook $MDBOOK_VERSION and mdbook-mermaid $MDBOOK_MERMAID_VERSION into $tools"
  started=$SECONDS
  CARGO_TARGET_DIR="${HMDP_TOOLS_TARGET_DIR:-$HOME/.cache/hmdp-tools-target}" \
    cargo install --locked --quiet --root "$tools" \
    "mdbook@$MDBOOK_VERSION" "mdbook-mermaid@$MDBOOK_MERMAID_VERSION"
  log "installed in $((SECONDS - started)) s"
fi
# The book's preprocessor is found on PATH by its command name.
export PATH="$tools/bin:$PATH"

# The committed assets must be what this mdbook-mermaid would install.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp docs/book.toml "$scratch/"
mdbook-mermaid install "$scratch" >/dev/null 2>&1
for asset in mermaid.min.js mermaid-init.js; do
  cmp -s "$scratch/$asset" "docs/$asset" ||
    { log "docs/$asset is not the one mdbook-mermaid $MDBOOK_MERMAID_VERSION installs: run \`mdbook-mermaid install docs\` and commit it"; exit 1; }
done

if [ "${1:-}" = serve ]; then
  rm -rf "$scratch"
  exec "$mdbook" serve docs
fi

started=$SECONDS
"$mdbook" build docs 2>&1 | tee "$scratch/build.log"
if grep -Eiq '\b(warn|warning|error)\b' "$scratch/build.log"; then
  log "mdbook warned (above): the book must build without a warning"
  exit 1
fi
log "built docs/book/ in $((SECONDS - started)) s"
