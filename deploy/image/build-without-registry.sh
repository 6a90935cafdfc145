#!/usr/bin/env bash
# Builds the gpuplace image where no container registry can be reached and no Docker engine runs (this project's
# development machines): buildah (Debian package), vfs storage, chroot isolation, and as the base a Debian
# bookworm root filesystem made by debootstrap with bookworm's Python 3.11, standing in for python:3.11-slim.
# With a registry, `docker build -t gpuplace:0.1.0 .` (or `buildah bud`) is all it takes.
#
#   bash deploy/image/build-without-registry.sh [TAG]     (root; default tag localhost/gpuplace:dev)
#
# The machine's CA bundle and /etc/pip.conf are mounted into the build's RUN steps, for a network that reaches
# PyPI through a TLS-inspecting proxy; they are not copied into the image.
set -euo pipefail
cd "$(dirname "$0")/../.."
tag=${1:-localhost/gpuplace:dev}
base=localhost/gpuplace-pybase:3.11-bookworm
rootfs=${GPUPLACE_BASE_ROOTFS:-/tmp/gpuplace-pybase-rootfs}
b=(buildah --storage-driver vfs)

((EUID == 0)) || { echo "run as root (debootstrap, buildah with vfs)" >&2; exit 1; }
missing=()
command -v buildah >/dev/null || missing+=(buildah)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if ((${#missing[@]})); then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! "${b[@]}" inspect --type image "$base" >/dev/null 2>&1; then
  [[ -x $rootfs/usr/bin/python3 ]] ||
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$rootfs" \
      http://deb.debian.org/debian
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  ctr=$("${b[@]}" from scratch)
  cp -a "$rootfs"/. "$("${b[@]}" mount "$ctr")"/
  "${b[@]}" umount "$ctr"
  "${b[@]}" config --env LANG=C.UTF-8 --cmd '["python3"]' "$ctr"
  "${b[@]}" commit -q "$ctr" "$base"
  "${b[@]}" rm "$ctr" >/dev/null
fi

mounts=()
[[ -f /etc/ssl/certs/ca-certificates.crt ]] &&
  mounts+=(--volume /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
[[ -f /etc/pip.conf ]] && mounts+=(--volume /etc/pip.conf:/etc/pip.conf:ro)
"${b[@]}" bud --isolation chroot --pull=never --layers=false --build-arg "PYTHON_IMAGE=$base" "${mounts[@]}" \
  -t "$tag" .
ctr=$("${b[@]}" from --pull=never "$tag")
trap '"${b[@]}" rm "$ctr" >/dev/null' EXIT
"${b[@]}" run --isolation chroot "$ctr" -- id
"${b[@]}" run --isolation chroot "$ctr" -- gpuplace --help >/dev/null
echo "built $tag; it runs gpuplace --help as $("${b[@]}" inspect --format '{{.OCIv1.Config.User}}' "$tag")"
