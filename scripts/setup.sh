#!/usr/bin/env bash
# Installs the Debian packages rn50 builds, tests and trains with on a new Debian 12 machine that
# ships only g++, cmake, ninja, pkg-config, git, GoogleTest/GoogleMock, Google Benchmark and python3.
# The CUDA toolkit, when present at /usr/local/cuda, is found by CMakeLists.txt; nothing here needs it.
# Idempotent; needs root (or sudo).
#
# OpenCL: Debian's oneDNN is built with its OpenCL GPU runtime, so its CMake config runs
# find_package(OpenCL REQUIRED) and its dnnl target links OpenCL::OpenCL. The package that provides
# libOpenCL.so and the CL headers, ocl-icd-opencl-dev, is only a Recommends of libdnnl-dev, which
# --no-install-recommends skips. We install it explicitly rather than locate oneDNN by hand around
# its config: the config is the supported interface and the package is 23 kB (plus headers).
#
# ONNX: rn50 export writes model.onnx through libonnx-dev's protobuf classes and checker
# (libprotobuf-dev for the headers); python3-onnx and python3-opencv are what the tests (and a
# user) load the exported model with: onnx.checker and OpenCV DNN.
#
# Plots: rn50 report --plot draws with tools/plot_report.py through python3-matplotlib.
#
# Serving: rn50 serve is built on cpp-httplib (libcpp-httplib-dev). Its tests check /metrics
# with promtool (the prometheus package ships it) and drive the web page in headless Chromium
# (chromium, chromium-driver, python3-selenium); bench/serve_load.sh loads it with hey.
#
# Reliability (CI): the fuzz harnesses (scripts/fuzz.sh) are libFuzzer programs, which only clang
# builds: clang-14 with its runtimes (libclang-rt-14-dev: libFuzzer, ASan, UBSan) and its OpenMP
# (libomp-14-dev; the components the harnesses link use OpenMP). The sanitized test suite
# (scripts/sanitize.sh) is built with g++ and needs nothing more.
#
# Portability (tests/test_cli_portable.cpp): qemu-user runs the default build under an emulated
# Haswell (AVX2) and Nehalem (SSE4.2), the CPUs below the one it was built on.
#
# Many hosts on one machine (scripts/netns-cluster.sh, tests/test_parallel_netns.cpp): iproute2's
# ip (network namespaces, veths, a bridge) and tc (link speeds); Slurm on those hosts
# (scripts/netns-slurm.sh): slurm-wlm (slurmctld, slurmd, srun with PMIx) and munge. Their
# system services are not used (the script starts its own daemons with their own files).
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config
      libdnnl-dev ocl-icd-opencl-dev libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev
      nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev
      libopenmpi-dev openmpi-bin libonnx-dev libprotobuf-dev
      python3-torch python3-torchvision python3-numpy python3-pil python3-onnx python3-opencv
      python3-matplotlib
      libcpp-httplib-dev prometheus hey chromium chromium-driver python3-selenium
      clang-14 libclang-rt-14-dev libomp-14-dev
      qemu-user iproute2 slurm-wlm munge)
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
