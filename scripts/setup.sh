#!/usr/bin/env bash
# Installs the Debian packages rn50 builds and tests with (CPU build; the CUDA toolkit, when
# present, is found at /usr/local/cuda by a later change). Idempotent; needs root (or sudo).
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config
      libdnnl-dev libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev
      nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev libgmock-dev
      libopenmpi-dev openmpi-bin
      python3-torch python3-torchvision python3-numpy python3-pil)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
