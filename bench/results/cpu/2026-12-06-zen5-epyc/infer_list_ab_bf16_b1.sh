#!/usr/bin/env bash
# bf16 batch 1, 5 more interleaved pairs with 30 timed calls each (old = 8295366, new = 5146d5b).
OLD=/tmp/oldsrc/build/rn50 NEW=/work/main/build-dev/rn50
for r in 1 2 3 4 5; do
  for side in old new; do
    bin=$OLD; [ $side = new ] && bin=$NEW
    echo "== bf16 run $r $side"
    $bin bench infer --device cpu --arch resnet50 --precision bf16 --batch-sizes 1 \
      --benchmark-steps 30 --benchmark-warmup-steps 5 2>&1 | grep -E "^ +(batch|[0-9]+ )"
  done
done
