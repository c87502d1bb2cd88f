#!/usr/bin/env bash
# Installs, from Debian packages, everything mrcnic needs to build, test and
# benchmark. Idempotent and non-interactive: packages already present are
# left alone, and apt runs only when something is missing.
set -euo pipefail

packages=(
  g++ meson ninja-build pkg-config
  dpdk dpdk-dev libdpdk-dev libnuma-dev libbsd-dev libpcap-dev libxdp-dev libbpf-dev
  libfmt-dev libcli11-dev catch2 libisal-dev libibverbs-dev
  python3 python3-pyelftools python3-scapy tshark
  clang libclang-rt-14-dev
  iproute2 time gdb
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: missing packages: ${missing[*]}; run as root (or with sudo) to install them" >&2
  exit 1
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# tshark asks whether non-root users may capture; answer before it asks.
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
