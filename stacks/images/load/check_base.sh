#!/bin/sh
# Refuse to build the load image on a base named by tag alone (a tag can be moved to other content): the
# base must be pinned by digest (name@sha256:<64 hex>), unless the deployment says explicitly that a tag is
# acceptable (CDK context benchctl:load_base_image_tag_ok=true, passed as ALLOW_TAG_BASE=1).
# Usage: BASE_IMAGE=... ALLOW_TAG_BASE=0|1 sh check_base.sh   (the Dockerfile's first RUN)
set -eu
case "${BASE_IMAGE:-}" in
  *@sha256:[0-9a-f]*)
    digest="${BASE_IMAGE##*@sha256:}"
    if [ "${#digest}" -eq 64 ] && [ -z "$(printf '%s' "$digest" | tr -d '0-9a-f')" ]; then
      exit 0
    fi ;;
esac
if [ "${ALLOW_TAG_BASE:-0}" = "1" ]; then
  echo "load image base ${BASE_IMAGE:-?} is not pinned by digest: built anyway (benchctl:load_base_image_tag_ok=true)" >&2
  exit 0
fi
echo "load image base '${BASE_IMAGE:-}' is not pinned by digest: set CDK context benchctl:load_base_image to" \
     "<image>@sha256:<digest> (e.g. docker buildx imagetools inspect python:3.11-slim-bookworm), or accept the" \
     "tag explicitly with benchctl:load_base_image_tag_ok=true" >&2
exit 1
