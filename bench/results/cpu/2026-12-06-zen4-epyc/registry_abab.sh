#!/bin/bash
# A/B: a3bad97 (before the registry) vs 1636d78 (registry), interleaved x3, fp32 and bf16 AMP
A=/tmp/ci3/build/rn50; B=/work/main/build/rn50
ARGS="train --benchmark --data synthetic --device cpu --arch resnet50 --crop-size 224 --batch-size 32 --benchmark-steps 6 --benchmark-warmup-steps 2"
for prec in fp32 bf16; do
  extra=""; [ $prec = bf16 ] && extra="--amp --amp-dtype bf16"
  for i in 1 2 3; do
    for side in A B; do
      bin=$A; [ $side = B ] && bin=$B
      echo "== $prec run $i side $side ($bin) $ARGS $extra"
      $bin $ARGS $extra 2>&1 | grep -Ei "ips|img/s|images/s" | tail -3
    done
  done
done
