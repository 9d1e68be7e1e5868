#!/usr/bin/env bash
# Interleaved A/B: the CPU engine before (8295366) and after (5146d5b; build-dev: Release, -DRN50_CUDA=OFF) choosing through the list.
set -u
OLD=/tmp/oldsrc/build/rn50 NEW=/work/main/build-dev/rn50
for prec in fp32 bf16; do
  for r in 1 2 3; do
    for side in old new; do
      bin=$OLD; [ $side = new ] && bin=$NEW
      echo "== $prec run $r $side"
      $bin bench infer --device cpu --arch resnet50 --precision $prec --batch-sizes 1,32 \
        --benchmark-steps 10 --benchmark-warmup-steps 3 2>&1 | grep -E "^ +(batch|[0-9]+ )"
    done
  done
done
