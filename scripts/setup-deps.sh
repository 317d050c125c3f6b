#!/usr/bin/env bash
# Installs the Debian packages Sluice needs (idempotent; quiet when everything is present),
# python3-h5py and python3-numpy included, for reading the outputs (docs/formats.md).
# The CUDA toolkit is not a Debian package: when nvcc is on PATH (or /usr/local/cuda/bin), the
# CUDA backend is built too.
set -euo pipefail

packages=(build-essential cmake pkg-config zlib1g-dev libhdf5-dev libmetis-dev
          libboost-program-options-dev libgtest-dev libopenblas-dev nlohmann-json3-dev
          libomp-dev clang-format libzip-dev python3-h5py python3-numpy)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
echo "setup-deps: installing ${missing[*]}" >&2
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
