# rn50 CPU image (issue 72): Debian 12, oneDNN, the portable build (x86-64-v2 with run-time
# AVX2 / AVX-512 kernels; never -march=native, so the image runs on any x86-64 host), no CUDA.
#
#   docker build -t rn50:cpu .                  # or: podman build -t rn50:cpu .
#   docker run --rm -v /path/to/imagenette:/data:ro -v "$PWD/out":/output rn50:cpu \
#     train --image-root /data --checkpoint-dir /output/checkpoints --epochs 1 --batch-size 32
#   docker build --target test -t rn50:test . && docker run --rm rn50:test     # the test suite
#
# Stages: compile (compiler, -dev packages, the rn50 binary's objects), build (the binary with its
# git revision, stripped), test (compile + the whole tree: the test programs; its command runs
# ctest), runtime (the default, last stage: Debian's runtime libraries and the binary). A plain
# build skips the test stage (BuildKit and buildah build only the stages the target needs).
# scripts/container-check.sh builds and checks it all with podman/buildah. The GPU image is
# docker/Dockerfile.cuda.

# ---- compile ----
FROM docker.io/library/debian:bookworm AS compile
# Not scripts/setup.sh: it also installs what the whole test suite, CI and the benchmarks use
# (PyTorch, Chromium, clang, qemu, prometheus: several GB). The build needs only the compiler
# and the libraries' -dev packages, the same ones setup.sh names for them (see its notes on
# ocl-icd-opencl-dev for oneDNN's CMake config, and on ONNX and cpp-httplib); GoogleTest so
# that the same configured tree builds the tests in the test stage.
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      cmake ninja-build g++ pkg-config \
      libdnnl-dev ocl-icd-opencl-dev libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev \
      nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev libgmock-dev \
      libopenmpi-dev openmpi-bin libonnx-dev libprotobuf-dev libcpp-httplib-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# What the build reads, folder by folder: README.md, scripts/, docker/ and the Dockerfiles stay
# out, so that editing them does not recompile rn50 (the test stage adds scripts/).
COPY CMakeLists.txt ./
COPY cmake/ cmake/
COPY include/ include/
COPY src/ src/
COPY tools/ tools/
COPY tests/ tests/
COPY fuzz/ fuzz/
COPY bench/ bench/
COPY configs/ configs/
COPY docs/ docs/
# The README's build (scripts/build.sh) without its setup.sh: Release, portable, server and ONNX
# export on (their packages are installed above, so a missing one fails here instead of building
# an image without them), CUDA off. Only the CLI here; the test stage builds the rest.
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DRN50_NATIVE=OFF -DRN50_CUDA=OFF -DRN50_SERVE=ON -DRN50_ONNX=ON \
 && cmake --build build --target rn50_cli -j "$(nproc)"
# The label marks every stage (the stages below inherit it) and the runtime image, so that
# container-check.sh can prune the stages that earlier builds left untagged, and only those.
LABEL org.opencontainers.image.title=rn50

# ---- build: the binary with its git revision ----
# .git is not in the build context: the revision that reports record comes from the build
# argument RN50_GIT_REVISION (scripts/container-check.sh passes `git describe`; default
# "unknown"). Given only here, after the compile stage, a new revision recompiles one file and
# relinks instead of invalidating the whole compile layer.
FROM compile AS build
ARG RN50_GIT_REVISION=unknown
RUN RN50_GIT_REVISION="$RN50_GIT_REVISION" cmake --build build --target rn50_cli \
 && strip -o /rn50 build/rn50

# ---- test: docker build --target test -t rn50:test . && docker run --rm rn50:test ----
# The whole build tree (test programs, MPI workers, docs) and ctest as scripts/test.sh runs it
# (OMP_WAIT_POLICY=passive, min(cores, 4) tests at a time). Tests whose outside dependency is
# absent here skip and say so: PyTorch/torchvision parity, ONNX/OpenCV, matplotlib, Chromium,
# promtool, qemu, tmpfs mounts, a GPU. ../shared's data: mount it, `-v /path/to/shared:/shared:ro`
# (the source is /src, so the tests' ../shared is /shared); without it the data tests skip.
# RN50_REQUIRE=mpi: the multi-process tests must run (they would otherwise skip without mpirun).
FROM compile AS test
# python3 with numpy and PIL: the data tests' helper scripts (TFRecord writer, reference images).
# Not PyTorch (over 1 GB): the torchvision parity tests skip.
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends python3-numpy python3-pil \
 && rm -rf /var/lib/apt/lists/*
RUN cmake --build build -j "$(nproc)"
# test_data_prepare_imagenet runs scripts/prepare-imagenet.sh.
COPY scripts/ scripts/
ARG RN50_GIT_REVISION=unknown
RUN RN50_GIT_REVISION="$RN50_GIT_REVISION" cmake --build build -j "$(nproc)"
ENV OMP_WAIT_POLICY=passive RN50_REQUIRE=mpi
CMD ["sh", "-c", "n=$(nproc); exec ctest --test-dir /src/build --output-on-failure -j $((n < 4 ? n : 4))"]

# ---- runtime (default) ----
FROM docker.io/library/debian:bookworm AS runtime
# The shared libraries the binary links (ldd build/rn50, each file's package from dpkg -S):
# oneDNN (+ the OpenCL loader its Debian build links), libjpeg-turbo (both APIs), libpng, GNU
# OpenMP, fmt, ONNX + protobuf (rn50 export's model.onnx), cpp-httplib (rn50 serve; brings
# OpenSSL and brotli), OpenMPI; openmpi-bin for mpirun/orted (it brings openssh-client, which
# mpirun starts the other hosts' ranks with) and openssh-server so that a container can be such
# a host (rn50-sshd; README "Containers"). No Python: only `rn50 convert-weights` (python3 with
# numpy, and PyTorch for .pth files) and `rn50 report --plot` (matplotlib) run Python; their
# scripts are in /usr/local/share/rn50/tools and an image FROM this one can add the packages.
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libdnnl2 ocl-icd-libopencl1 libturbojpeg0 libjpeg62-turbo libpng16-16 libgomp1 libfmt9 \
      libonnx1 libprotobuf32 libcpp-httplib0.11 libopenmpi3 openmpi-bin \
      openssh-client openssh-server \
 && rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_*
COPY --from=build /rn50 /usr/local/bin/rn50
COPY --from=build /src/tools/convert_weights.py /src/tools/plot_report.py /usr/local/share/rn50/tools/
COPY docker/rn50-sshd /usr/local/bin/rn50-sshd
ENV RN50_CONVERT_SCRIPT=/usr/local/share/rn50/tools/convert_weights.py \
    RN50_PLOT_SCRIPT=/usr/local/share/rn50/tools/plot_report.py
# A non-root user owns /output (checkpoints, reports, exported models); /data is read only.
RUN useradd --create-home --uid 1000 --shell /bin/bash rn50 \
 && mkdir -p /data /output && chown rn50:rn50 /output
LABEL org.opencontainers.image.title=rn50
USER rn50
WORKDIR /output
VOLUME ["/data", "/output"]
ENTRYPOINT ["rn50"]
CMD ["--help"]
