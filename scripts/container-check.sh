#!/usr/bin/env bash
# End-to-end check of the CPU container image (Dockerfile; issue 72) on this machine, with
# podman and buildah and no registry: nothing is pulled.
#   1. installs podman, buildah and debootstrap when missing (apt-get; needs root);
#   2. makes the base image docker.io/library/debian:bookworm from a debootstrap --variant=minbase
#      root (main + updates + security sources, as the official image has), cached as a tarball in
#      $RN50_CONTAINER_CACHE (default /var/tmp/rn50-container) and imported with podman import;
#   3. podman build --isolation chroot: rn50:cpu (the runtime image) and rn50:test (the test stage);
#   4. checks the runtime image: its config (ENTRYPOINT rn50, a non-root user, /data and /output
#      volumes, WORKDIR /output), that every library resolves, `rn50 --version`, then trains
#      ResNet-50 for one epoch on real JPEGs (CHECK_CLASSES classes of ../shared's imagenette,
#      CHECK_TRAIN train and CHECK_VAL val images each, mounted as /data) and looks for the
#      checkpoint in /output; the same training on 2 MPI ranks in one container, and on 2 ranks
#      in two containers (mpirun starts rank 1 in the other one through its rn50-sshd);
#   5. runs the whole test suite inside rn50:test (ctest, min(cores, 4) at a time) with ../shared
#      mounted as /shared, RN50_REQUIRE=mpi,data so the MPI and data tests cannot skip, and
#      lists why test cases skipped; CHECK_TESTS=REGEX runs only the tests ctest -R selects,
#      CHECK_TESTS=none none.
# Containers are run with `buildah run --isolation chroot`: `podman run` fails in sandboxes
# without the rights to set rlimits (this project's machines: "crun: setrlimit `RLIMIT_NOFILE`:
# Operation not permitted: OCI permission denied"); buildah's chroot isolation needs none of it.
# Prints PASS/FAIL lines and a summary; exits non-zero when anything failed.
# Time on this project's 2-core machine (shared, 2026-12-07): 646 s from nothing (debootstrap
# and import 38 s, rn50:cpu 254 s, the training checks 61 s, rn50:test 148 s, ctest 144 s; an
# earlier run on a busier machine: debootstrap 93 s, rn50:cpu 285 s, ctest 277 s). A rerun
# reuses the base image and the build layers: a new commit relinks (the git revision) and
# reruns the checks. Not part of CI (.ci/run): too slow for it.
# Usage: bash scripts/container-check.sh      (SHARED_DIR=../shared, KEEP=1 keeps the containers)
set -uo pipefail
# The whole script is one block that bash reads before running it: editing the file while a
# check runs (it takes a while) does not change the running check.
{
cd "$(dirname "$0")/.." || exit 1
CACHE=${RN50_CONTAINER_CACHE:-/var/tmp/rn50-container}
SHARED=$(readlink -f "${SHARED_DIR:-../shared}")
TRAIN_N=${CHECK_TRAIN:-34}
VAL_N=${CHECK_VAL:-14}
CLASSES=${CHECK_CLASSES:-3}
TESTS=${CHECK_TESTS:-all}
BASE=docker.io/library/debian:bookworm
fails=0
T0=$SECONDS
say() { echo "container-check: $*"; }
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
elapsed() { echo "$(( SECONDS - $1 )) s"; }
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo

# ---- 1. tools ----
missing=()
for t in podman:podman buildah:buildah debootstrap:debootstrap; do
  command -v "${t%%:*}" > /dev/null || missing+=("${t#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  $SUDO apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" uidmap fuse-overlayfs > /dev/null ||
    { fail "apt-get install ${missing[*]}"; exit 1; }
fi
pass "tools: $(podman --version), $(buildah --version | cut -d' ' -f1-3)"

# ---- 2. base image ----
t=$SECONDS
if podman image exists "$BASE"; then
  pass "base image $BASE present"
else
  tarball=$CACHE/debian-bookworm-minbase.tar
  if [ ! -s "$tarball" ]; then
    say "debootstrap --variant=minbase bookworm (a few minutes; log $CACHE/debootstrap.log)"
    mkdir -p "$CACHE"
    rootfs=$CACHE/rootfs.tmp
    $SUDO rm -rf "$rootfs"
    if $SUDO nice debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian \
         > "$CACHE/debootstrap.log" 2>&1; then
      # The official image's sources: main with bookworm-updates and the security archive.
      printf '%s\n' "deb http://deb.debian.org/debian bookworm main" \
        "deb http://deb.debian.org/debian bookworm-updates main" \
        "deb http://deb.debian.org/debian-security bookworm-security main" |
        $SUDO tee "$rootfs/etc/apt/sources.list" > /dev/null
      $SUDO rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
      $SUDO tar --numeric-owner -C "$rootfs" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
      $SUDO rm -rf "$rootfs"
    else
      fail "debootstrap (tail of $CACHE/debootstrap.log:)"; tail -5 "$CACHE/debootstrap.log"
      exit 1
    fi
  fi
  if out=$(podman import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
       --change 'CMD ["bash"]' "$tarball" "$BASE" 2>&1); then
    pass "base image $BASE imported from $tarball ($(elapsed $t))"
  else
    fail "podman import $tarball: $out"; exit 1
  fi
fi

# ---- 3. images ----
rev=$(git describe --always --dirty --abbrev=12 2> /dev/null || echo unknown)
build() {  # build TAG [TARGET]
  local tag=$1 target=${2:-} log="$CACHE/build-${1//[:\/]/-}.log" t=$SECONDS
  mkdir -p "$CACHE"
  say "podman build ${target:+--target $target }-t $tag (log $log)"
  if nice podman build --isolation chroot --build-arg RN50_GIT_REVISION="$rev" \
       ${target:+--target "$target"} -t "$tag" . > "$log" 2>&1; then
    pass "podman build -t $tag ($(elapsed $t))"
  else
    fail "podman build -t $tag (tail of $log:)"; tail -20 "$log"; return 1
  fi
}
build rn50:cpu || { say "$fails failed"; exit 1; }
size=$(podman images --format '{{.Size}}' rn50:cpu | head -1)
say "image rn50:cpu: $size"

# ---- 4. the runtime image ----
cfg=$(podman image inspect rn50:cpu --format \
  'entrypoint={{json .Config.Entrypoint}} user={{.Config.User}} workdir={{.Config.WorkingDir}} volumes={{json .Config.Volumes}}')
say "$cfg"
case "$cfg" in
  *'entrypoint=["rn50"]'*'user=rn50 '*'workdir=/output '*'"/data":{}'*'"/output":{}'*)
    pass "image config: ENTRYPOINT rn50, USER rn50, WORKDIR /output, volumes /data /output";;
  *) fail "image config: $cfg";;
esac
ctrs=()
cleanup() {
  if [ -z "${KEEP:-}" ]; then
    for c in "${ctrs[@]}"; do buildah rm "$c" > /dev/null 2>&1; done
    [ -n "${WORK:-}" ] && rm -rf "$WORK"
  fi
}
trap cleanup EXIT
WORK=$(mktemp -d /var/tmp/rn50-container-check.XXXXXX)
ctr=$(buildah from rn50:cpu) || { fail "buildah from rn50:cpu"; exit 1; }
ctrs+=("$ctr")
brun() { buildah run --isolation chroot "$@"; }
if out=$(brun "$ctr" -- sh -c 'ldd /usr/local/bin/rn50 | grep "not found"; id -un; rn50 --version' 2>&1) &&
   ! grep -q "not found" <<< "$out"; then
  pass "libraries resolve; user $(sed -n 1p <<< "$out"); $(tail -1 <<< "$out")"
else
  fail "rn50 in the image: $out"
fi

# A small real dataset: the first CLASSES classes, TRAIN_N train and VAL_N val JPEGs each.
# Mounts: buildah 1.28's chroot isolation honours a bind mount over one of the image's VOLUMEs
# only when it is the last mount given (with two, /data or /output shows the container's own
# empty volume instead): /data is mounted last, and /output is the container's volume, read
# back with buildah run (it lasts as long as the container). docker and podman run mount both.
src=$SHARED/data/imagenette
if [ -d "$src/train" ] && [ -d "$src/val" ]; then
  mkdir -p "$WORK/data"
  for c in $(ls "$src/train" | head -n "$CLASSES"); do
    for split in train:$TRAIN_N val:$VAL_N; do
      s=${split%%:*}; mkdir -p "$WORK/data/$s/$c"
      ls "$src/$s/$c" | head -n "${split#*:}" | while read -r f; do cp "$src/$s/$c/$f" "$WORK/data/$s/$c/"; done
    done
  done
  ntrain=$(find "$WORK/data/train" -type f | wc -l); nval=$(find "$WORK/data/val" -type f | wc -l)
  chmod -R a+rX "$WORK"
  say "data: $ntrain train + $nval val JPEGs, $CLASSES classes of $src"
  flags=(--epochs 1 --warmup-epochs 0 --crop-size 64 --resize-short 73
         --print-interval 4 --workers 1)
  t=$SECONDS
  brun -v "$WORK/data:/data:ro" "$ctr" -- rn50 train --image-root /data "${flags[@]}" --batch-size 8 \
    --checkpoint-dir /output/checkpoints --report-file /output/train.jsonl > "$WORK/train.log" 2>&1
  rc=$?
  grep -E "train_eval|done:" "$WORK/train.log" | sed 's/^/  | /'
  ck=$(brun "$ctr" -- find /output/checkpoints -name '*.safetensors' 2> /dev/null | sort | tr '\n' ' ')
  if [ "$rc" -eq 0 ] && [[ "$ck" == *model.safetensors* ]]; then
    pass "rn50 train in the image: exit 0 ($(elapsed $t)); in /output: $ck"
  else
    fail "rn50 train in the image: exit $rc, checkpoint files: '$ck' (log $WORK/train.log)"
    KEEP=1
  fi

  # Two MPI ranks in the image, as its user (no --allow-run-as-root).
  t=$SECONDS
  brun -v "$WORK/data:/data:ro" "$ctr" -- mpirun -np 2 --bind-to none --mca btl tcp,self \
    rn50 train --image-root /data "${flags[@]}" --batch-size 4 --checkpoint-dir /output/checkpoints-mpi \
    > "$WORK/train-mpi.log" 2>&1
  rc=$?
  ck=$(brun "$ctr" -- find /output/checkpoints-mpi -name model.safetensors 2> /dev/null)
  if [ "$rc" -eq 0 ] && [ -n "$ck" ] && grep -q "local 1 of 2" "$WORK/train-mpi.log"; then
    pass "mpirun -np 2 rn50 train in one container: exit 0 ($(elapsed $t)); $ck"
  else
    fail "mpirun -np 2 rn50 train in one container: exit $rc (log $WORK/train-mpi.log)"
    KEEP=1
  fi

  # MPI across two containers: a second container of the image runs rn50-sshd (docs/containers.md's
  # recipe for a further host), and mpirun in the first starts rank 1 there through ssh. Both
  # share the host's network (chroot isolation), so the "remote" host is 127.0.0.2: another
  # address of the loopback, which OpenMPI does not take for its own node. Two mounts each
  # (~/.ssh and the data), so the data goes to /mnt/data, not to the /data VOLUME (above).
  t=$SECONDS
  port=${CHECK_SSH_PORT:-$(for p in $(shuf -i 20000-40000 -n 20); do
    ss -ltn | grep -q ":$p " || { echo "$p"; break; }; done)}
  mkdir -p "$WORK/ssh" && chown 1000:1000 "$WORK/ssh" && chmod 700 "$WORK/ssh"
  sctr=$(buildah from rn50:cpu) && ctrs+=("$sctr")
  ssh_mount=(-v "$WORK/ssh:/home/rn50/.ssh")
  brun "${ssh_mount[@]}" "$ctr" -- sh -c "ssh-keygen -q -t ed25519 -N '' -f ~/.ssh/id_ed25519 &&
    cp ~/.ssh/id_ed25519.pub ~/.ssh/authorized_keys &&
    printf 'Host *\n  Port $port\n  StrictHostKeyChecking accept-new\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n' > ~/.ssh/config" ||
    fail "ssh keys"
  buildah run --isolation chroot "${ssh_mount[@]}" -v "$WORK/data:/mnt/data:ro" "$sctr" -- \
    rn50-sshd "$port" > "$WORK/sshd.log" 2>&1 &
  sshd_pid=$!   # buildah run passes the TERM on to sshd
  for _ in $(seq 30); do grep -q "Server listening" "$WORK/sshd.log" && break; sleep 1; done
  brun "${ssh_mount[@]}" -v "$WORK/data:/mnt/data:ro" "$ctr" -- mpirun -np 2 -H 127.0.0.1:1,127.0.0.2:1 \
    --bind-to none --mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    rn50 train --image-root /mnt/data "${flags[@]}" --batch-size 4 \
    --checkpoint-dir /output/checkpoints-2ctr --log-all-ranks \
    > "$WORK/train-2ctr.log" 2>&1
  rc=$?
  kill "$sshd_pid" 2> /dev/null; wait "$sshd_pid" 2> /dev/null
  if [ "$rc" -eq 0 ] && grep -q "Accepted publickey for rn50" "$WORK/sshd.log" &&
     [ "$(grep -c '^\[rank [01]\] epoch 0 (1/1) done' "$WORK/train-2ctr.log")" -eq 2 ]; then
    pass "mpirun across two containers (rank 1 through rn50-sshd on port $port): exit 0 ($(elapsed $t))"
  else
    fail "mpirun across two containers: exit $rc (logs $WORK/train-2ctr.log, $WORK/sshd.log)"
    tail -n 5 "$WORK/train-2ctr.log" "$WORK/sshd.log"
    KEEP=1
  fi
else
  fail "no imagenette at $src (SHARED_DIR): the training check needs real images"
fi

# ---- 5. the test suite in rn50:test ----
if [ "$TESTS" != none ]; then
  if build rn50:test test; then
    tctr=$(buildah from rn50:test) && ctrs+=("$tctr")
    sel=(); [ "$TESTS" != all ] && sel=(-R "$TESTS")
    t=$SECONDS
    req=mpi; [ -d "$SHARED/data/imagenette" ] && req=mpi,data
    brun -v "$SHARED:/shared:ro" --env RN50_REQUIRE="$req" "$tctr" -- sh -c \
      "n=\$(nproc); ctest --test-dir /src/build --output-on-failure -j \$((n < 4 ? n : 4)) ${sel[*]}" \
      > "$CACHE/ctest.log" 2>&1
    rc=$?
    grep -E "tests passed|tests failed|Total Test time" "$CACHE/ctest.log" | sed 's/^/  | /'
    if [ "$rc" -eq 0 ]; then
      pass "ctest in rn50:test (${TESTS}; RN50_REQUIRE=$req; $(elapsed $t); log $CACHE/ctest.log)"
    else
      fail "ctest in rn50:test: exit $rc (failed tests:)"
      grep -E "^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess)" "$CACHE/ctest.log" | head -20
    fi
    # ctest keeps every test's output in LastTest.log: the GoogleTest cases that skipped, and why.
    brun "$tctr" -- cat /src/build/Testing/Temporary/LastTest.log > "$CACHE/ctest-last.log" 2>&1
    reasons=$(grep -A1 ': Skipped$' "$CACHE/ctest-last.log" | grep -v -e '^--$' -e ': Skipped$')
    lack=$(grep -iE 'python|torch|PIL|numpy|onnx|opencv|matplotlib|chromium|selenium|promtool|qemu|mount' \
      <<< "$reasons")
    say "$(grep -c . <<< "$reasons") test cases skipped; $(grep -c . <<< "$lack") of them for what the" \
      "image leaves out (below), the others as in any CPU-only build (no GPU, this CPU's ISA)"
    sort <<< "$lack" | uniq -c | sort -rn | sed 's/^/  | /'
  fi
fi

# Each new revision leaves the previous images and build stages untagged (1-3 GB a run): prune
# those of rn50 (the Dockerfile's label), not other projects'. rn50:test keeps the compile stage
# that the next build reuses.
podman image prune -f --filter label=org.opencontainers.image.title=rn50 > /dev/null 2>&1 ||
  say "podman image prune failed (harmless)"
say "image rn50:cpu $size; $(elapsed $T0) in all"
if [ "$fails" -eq 0 ]; then echo "PASS container-check"; else echo "FAIL container-check: $fails failed"; fi
[ "$fails" -eq 0 ]
exit
}
