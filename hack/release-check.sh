#!/bin/sh
# release-check.sh VERSION: what `make release` checks before it builds
# (docs/releasing.md). Run from the repository root.
#   - VERSION is a semantic version with a leading v (v1.2.3, v1.2.3-rc.1);
#   - CHANGELOG.md's newest section, below [Unreleased], is that version;
#   - every image of fanout that manifests/ and the docs name has that tag,
#     and so do charts/fanout/Chart.yaml's appVersion and version (no v);
#   - unless RELEASE_CHECK_TAG=0 (a trial build): the git tag VERSION
#     exists, is the commit checked out, and the tree is clean.
set -eu
fail() { echo "release-check: $*" >&2; exit 1; }
[ $# -eq 1 ] && [ -n "$1" ] || fail "usage: make release VERSION=vX.Y.Z"
v=$1
semver='^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$'
echo "$v" | grep -Eq "$semver" || fail "VERSION=$v is not a semantic version with a leading v, such as v0.2.0 or v1.0.0-rc.1"

newest=$(sed -n 's/^## \[\([^]]*\)\].*/\1/p' CHANGELOG.md | grep -vx Unreleased | head -n 1)
[ "$newest" = "${v#v}" ] || fail "CHANGELOG.md's newest section is [$newest], want [${v#v}]: move the [Unreleased] entries under '## [${v#v}] - $(date -u +%Y-%m-%d)'"

images=$(grep -rhoE 'ghcr\.io/fanout-dev/fanout:[A-Za-z0-9._-]+' manifests docs/injector.md docs/static-pods.md | sort -u)
[ "$images" = "ghcr.io/fanout-dev/fanout:$v" ] || fail "manifests and docs name $(echo $images), want ghcr.io/fanout-dev/fanout:$v only (docs/releasing.md says how to bump it)"

chart=charts/fanout/Chart.yaml
grep -qx "appVersion: \"$v\"" $chart && grep -qx "version: ${v#v}" $chart || fail "$chart has $(grep -E '^(app)?[vV]ersion:' $chart | tr '\n' ' ')want appVersion: \"$v\" and version: ${v#v} (docs/releasing.md says how to bump them)"

if [ "${RELEASE_CHECK_TAG:-1}" != 0 ]; then
  tag=$(git rev-parse -q --verify "refs/tags/$v^{commit}") || fail "no git tag $v: tag the commit to release (git tag -a $v -m 'fanout $v'), or pass RELEASE_CHECK_TAG=0 for a trial build"
  [ "$tag" = "$(git rev-parse HEAD)" ] || fail "tag $v is commit $tag, but $(git rev-parse HEAD) is checked out: git checkout $v"
  [ -z "$(git status --porcelain)" ] || fail "the tree has uncommitted changes; a release builds the tagged commit only"
fi
echo "release-check: $v: semantic version, CHANGELOG.md section, manifests' image tag, chart version$( [ "${RELEASE_CHECK_TAG:-1}" = 0 ] && echo ' (tag not checked)' || echo ', git tag at HEAD')"
