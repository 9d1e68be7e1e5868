#!/usr/bin/env bash
# Turns the official ILSVRC2012 (ImageNet-1k) archives into the ImageFolder layout rn50 reads,
# the way DLE's and PyTorch's ImageNet examples prepare it, then runs `rn50 check-data` on it.
#
# Usage: scripts/prepare-imagenet.sh TRAIN_TAR VAL_TAR VAL_LABELS [OUT_DIR]
#   TRAIN_TAR   ILSVRC2012_img_train.tar: a tar of 1000 per-class tars named <synset>.tar
#               (n01440764.tar ...), each a flat tar of that class's JPEGs
#   VAL_TAR     ILSVRC2012_img_val.tar: a flat tar of the 50,000 validation JPEGs
#               (ILSVRC2012_val_00000001.JPEG ...)
#   VAL_LABELS  the validation labels, either
#               - LOC_val_solution.csv (Kaggle's ImageNet localization files): a header line
#                 "ImageId,PredictionString", then "ILSVRC2012_val_00008726,n02119789 255 142 ..."
#                 (the synset is the first word of the prediction string), or
#               - a plain list, one "FILENAME SYNSET" per line (space, tab or comma between;
#                 FILENAME with or without .JPEG; blank lines and lines starting with # skipped)
#   OUT_DIR     where train/<synset>/*.JPEG and val/<synset>/*.JPEG go (default: ./imagenet)
# Env: RN50 (the rn50 binary for the final check; default: build/rn50 of this checkout),
#      JOBS (parallel class-tar extractions; default: all cores),
#      CHECK_DATA_ARGS (extra check-data flags, e.g. --header-only to skip the full decode).
#
# Disk: about 155 GB for ImageNet-1k (the per-class tars are removed as they are unpacked, so
# the output plus one class tar at a time). Nothing is left half-written: each split is unpacked
# into OUT_DIR/.<split>.partial and renamed to OUT_DIR/<split> only once complete; an existing
# OUT_DIR/train or OUT_DIR/val is never overwritten. The class list goes to OUT_DIR/classes.txt.
# Exit status: 0 when the dataset is ready, 1 on bad arguments or archives, 2 when check-data
# reports problems, 3 when rn50 is not built (the data is in place; run check-data yourself).
set -euo pipefail

die() { echo "prepare-imagenet: error: $*" >&2; exit 1; }
note() { echo "prepare-imagenet: $*" >&2; }

[ $# -ge 3 ] && [ $# -le 4 ] || {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 1
}
TRAIN_TAR=$1 VAL_TAR=$2 VAL_LABELS=$3 OUT=${4:-imagenet}
REPO=$(cd "$(dirname "$0")/.." && pwd)
RN50=${RN50:-$REPO/build/rn50}
JOBS=${JOBS:-$(nproc)}

for f in "$TRAIN_TAR" "$VAL_TAR" "$VAL_LABELS"; do
  [ -f "$f" ] && [ -r "$f" ] || die "'$f': no such readable file"
done
for s in train val; do
  [ ! -e "$OUT/$s" ] || die "'$OUT/$s' already exists; remove it (or pick another OUT_DIR) and run again"
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SYNSET_RE='^n[0-9]{8}$'

# ---- train: the outer tar holds <synset>.tar per class ----
part="$OUT/.train.partial"
rm -rf "$part"; mkdir -p "$part"
note "unpacking $TRAIN_TAR into $OUT/train"
tar -xf "$TRAIN_TAR" -C "$part" || die "'$TRAIN_TAR': tar could not unpack it"
shopt -s nullglob
class_tars=("$part"/*.tar)
[ ${#class_tars[@]} -gt 0 ] ||
  die "'$TRAIN_TAR' holds no per-class tars (<synset>.tar); is it ILSVRC2012_img_train.tar?"
for t in "${class_tars[@]}"; do
  syn=$(basename "$t" .tar)
  [[ $syn =~ $SYNSET_RE ]] || die "'$TRAIN_TAR' holds '$syn.tar': expected per-class tars named by synset (n01440764.tar)"
done
others=$(find "$part" -mindepth 1 -maxdepth 1 ! -name '*.tar' | head -3)
[ -z "$others" ] || die "'$TRAIN_TAR' holds more than per-class tars, e.g. '${others##*/}'"
# Each class tar: unpack into its synset folder, then drop the tar (keeps the disk peak low).
export part
printf '%s\n' "${class_tars[@]}" | xargs -P "$JOBS" -I{} bash -c '
  t="$1"; d="${t%.tar}"; mkdir -p "$d"
  tar -xf "$t" -C "$d" || { echo "prepare-imagenet: error: class tar ${t##*/} could not be unpacked" >&2; exit 255; }
  rm -f "$t"' _ {} || die "unpacking the class tars of '$TRAIN_TAR' failed (see above)"
n_train=$(find "$part" -type f | wc -l)
[ "$n_train" -gt 0 ] || die "'$TRAIN_TAR': the class tars hold no files"
mv "$part" "$OUT/train"
note "train/: ${#class_tars[@]} classes, $n_train images"

# ---- val: a flat tar, labelled by VAL_LABELS ----
part="$OUT/.val.partial"
rm -rf "$part"; mkdir -p "$part"
note "unpacking $VAL_TAR into $OUT/val"
tar -xf "$VAL_TAR" -C "$part" || die "'$VAL_TAR': tar could not unpack it"
nested=$(find "$part" -mindepth 1 -type d | head -1)
[ -z "$nested" ] || die "'$VAL_TAR' holds folders ('${nested#"$part"/}'); expected the flat ILSVRC2012_img_val.tar"

# "file synset" per line, from either label format; checked for shape here, for files below.
pairs="$OUT/.val.labels"
awk -v src="$VAL_LABELS" '
  BEGIN { bad = 0 }
  { sub(/\r$/, "") }
  NR == 1 && /^ImageId,PredictionString/ { csv = 1; next }
  /^[ \t]*$/ || /^#/ { next }
  {
    if (csv) { i = index($0, ","); name = substr($0, 1, i - 1); split(substr($0, i + 1), w, " "); syn = w[1] }
    else     { n = split($0, w, /[ \t,]+/); name = w[1]; syn = w[2]; if (w[1] == "") { name = w[2]; syn = w[3] } }
    if (name == "" || syn !~ /^n[0-9]+$/ || length(syn) != 9) {
      if (bad++ < 5) printf "prepare-imagenet: error: %s line %d: expected FILENAME SYNSET (e.g. ILSVRC2012_val_00000001.JPEG n01751748), got: %s\n", src, NR, $0 > "/dev/stderr"
      next
    }
    sub(/^.*\//, "", name)
    print name, syn
  }
  END { if (bad) exit 1; if (NR == 0) { print "prepare-imagenet: error: " src " is empty" > "/dev/stderr"; exit 1 } }
' "$VAL_LABELS" > "$pairs" || die "'$VAL_LABELS' is not a label file in either format (see the usage above)"
[ -s "$pairs" ] || die "'$VAL_LABELS' holds no labels"

# Resolve names without an extension (LOC_val_solution.csv's ImageId) to the file in the tar.
resolved="$OUT/.val.resolved"
missing=0
: > "$resolved"
while read -r name syn; do
  if [ -f "$part/$name" ]; then f=$name
  elif [ -f "$part/$name.JPEG" ]; then f=$name.JPEG
  else
    missing=$((missing + 1))
    [ $missing -le 5 ] && note "error: '$VAL_LABELS' labels '$name', which '$VAL_TAR' does not hold"
    continue
  fi
  echo "$f $syn" >> "$resolved"
done < "$pairs"
[ $missing -eq 0 ] || die "$missing labelled image(s) missing from '$VAL_TAR'; are the label file and the archive from the same release?"
dups=$(cut -d' ' -f1 "$resolved" | sort | uniq -d | head -3)
[ -z "$dups" ] || die "'$VAL_LABELS' labels some images more than once, e.g. $(echo $dups)"
n_val=$(find "$part" -maxdepth 1 -type f | wc -l)
n_lab=$(wc -l < "$resolved")
if [ "$n_val" -ne "$n_lab" ]; then
  unlabelled=$(comm -23 <(find "$part" -maxdepth 1 -type f -printf '%f\n' | sort) \
                        <(cut -d' ' -f1 "$resolved" | sort) | head -3)
  die "'$VAL_TAR' holds $n_val images but '$VAL_LABELS' labels $n_lab; unlabelled: $(echo $unlabelled)"
fi
# One mv per synset: 50,000 files without 50,000 processes.
for syn in $(cut -d' ' -f2 "$resolved" | sort -u); do
  mkdir -p "$part/$syn"
  awk -v s="$syn" -v d="$part" '$2 == s { print d "/" $1 }' "$resolved" | xargs -d '\n' mv -t "$part/$syn" --
done
rm -f "$pairs" "$resolved"
mv "$part" "$OUT/val"
note "val/: $(find "$OUT/val" -mindepth 1 -maxdepth 1 -type d | wc -l) classes, $n_val images"

# ---- check ----
if [ ! -x "$RN50" ]; then
  note "the data is ready in $OUT, but '$RN50' is not built: run 'bash scripts/build.sh', then"
  note "  $RN50 check-data --image-root $OUT --output $OUT/classes.txt"
  exit 3
fi
note "running: $RN50 check-data --image-root $OUT --output $OUT/classes.txt ${CHECK_DATA_ARGS:-}"
# shellcheck disable=SC2086
if ! "$RN50" check-data --image-root "$OUT" --output "$OUT/classes.txt" ${CHECK_DATA_ARGS:-}; then
  note "check-data found problems in $OUT (listed above)"
  exit 2
fi
note "done: train with  $RN50 train --image-root $OUT"
