#!/usr/bin/env bash
# Installs the Debian packages the tests use, for /usr/bin/python3 and the
# browser test, unless they are there already:
#   python3-torch, python3-sklearn  real PyTorch training (CPU, gloo)
#   chromium, chromium-driver       the status page's browser test
#   prometheus                      promtool check metrics
set -euo pipefail
need=()
/usr/bin/python3 -c 'import torch' 2>/dev/null || need+=(python3-torch)
/usr/bin/python3 -c 'import sklearn' 2>/dev/null || need+=(python3-sklearn)
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
command -v promtool >/dev/null || need+=(prometheus)
if [ ${#need[@]} -eq 0 ]; then
  echo "install-deps: all present" >&2
  exit 0
fi
echo "install-deps: installing ${need[*]}" >&2
sudo=
[ "$(id -u)" -eq 0 ] || sudo=sudo
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq "${need[@]}" >/dev/null
/usr/bin/python3 -c 'import torch, sklearn' || { echo "install-deps: torch/sklearn still not importable by /usr/bin/python3" >&2; exit 1; }
