#!/usr/bin/env bash
# Keeps README.md true (CI runs it at the end of scripts/test.sh, with its self-test):
#   1. every rn50 command in a fenced code block, or in an inline code span that starts with one,
#      is a command rn50 has, and every --flag (also --flag=VALUE) is one that
#      `rn50 <command> --help` lists. Found as ./build/rn50, build/rn50, any .../rn50, `rn50` at
#      the start of a command or after a launcher (mpirun, srun, env, nice, ...), and the image
#      rn50:TAG in `docker|podman run` without --entrypoint (the images' entrypoint is rn50).
#      Lines ending in a backslash are joined; `# comments` are left out; the command ends at
#      ; && || | > and `--`; a second `rn50` on the line starts a new command (usage lines such
#      as "rn50 eval [flags] = rn50 train --run-scope eval_only"). Words in capitals or <angle
#      brackets> after rn50 (rn50 COMMAND --help) are placeholders and are not checked.
#   2. every repository path the README names exists: words that start with a top-level entry
#      of the repository (docs/ src/ scripts/ configs/ bench/ ..., as git ls-files lists them;
#      ./ allowed), link targets included (#anchors and :LINE dropped), and the root files
#      (Dockerfile, CMakeLists.txt, CHANGELOG.md, ...). Not checked: URLs, ../shared/...,
#      absolute paths, outputs (build/, runs/: not in the repository), and placeholders (a path
#      part in capitals such as DATE or N, or with < { * $ ...).
#   3. no line is about rounds or sessions (how the project was made, not what it is):
#      case-insensitive \b(rounds?|sessions?)\b. Not counted: `Session` inside an inline code
#      span (the class), and "round-robin", "round trip", "round to", "round-to-nearest".
#   4. docs/flags.md and docs/report-schema.md, which the build writes from the code
#      (tools/gen_docs.cpp, target rn50_docs), are committed as the build wrote them: no
#      difference from git's HEAD after the build (in a git checkout; not in --self-test).
# Each problem is printed as README.md:LINE: what is wrong, and what to do; the exit status is 1
# when there is any (2 for a usage error, or no rn50 binary).
#
#   bash scripts/check-docs.sh [README.md] [--rn50 build/rn50]
#   bash scripts/check-docs.sh --self-test [--rn50 build/rn50]
# --self-test checks the checker: a small README that must pass, the same with planted problems
# that must fail naming each, and a copy of README.md with a planted unknown flag on its
# `rn50 train` line, a missing path, a missing script, an unknown command and a "this session"
# line, each of which must be reported on its line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
readme=""
rn50="$root/${BUILD_DIR:-build}/rn50"
self_test=0
while (($#)); do
  case $1 in
    --rn50) rn50=$2; shift 2 ;;
    --rn50=*) rn50=${1#--rn50=}; shift ;;
    --self-test) self_test=1; shift ;;
    -h | --help) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "check-docs: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) readme=$1; shift ;;
  esac
done
readme=${readme:-$root/README.md}
if [[ ! -x $rn50 ]]; then
  echo "check-docs: no rn50 binary at $rn50: build it first (bash scripts/build.sh) or pass --rn50 PATH" >&2
  exit 2
fi
rn50=$(cd "$(dirname "$rn50")" && pwd)/$(basename "$rn50")

# The checker: python3 (CI has it), reading README, repository root and rn50 from its arguments.
checker=$(cat <<'PYEOF'
import os, re, shlex, subprocess, sys

readme, root, rn50 = sys.argv[1], sys.argv[2], sys.argv[3]
shown = os.path.relpath(readme)
if shown.startswith(".."):
    shown = readme
problems = []  # (line, text)
checked = {"commands": 0, "flags": 0, "paths": 0}


def problem(line, text):
    problems.append((line, text))


# ---- rn50's commands and flags, as its --help prints them (cached per command) ----
help_cache = {}
subcommands = {}


def help_of(words):
    """The flags `rn50 WORDS --help` lists, or None when rn50 refuses the command."""
    key = tuple(words)
    if key not in help_cache:
        r = subprocess.run([rn50, *words, "--help"], capture_output=True, text=True)
        if r.returncode != 0:
            help_cache[key] = None
        else:
            # CLI11's help: "  -h,--help ...", "  --lr FLOAT ..." at two spaces; after
            # "Subcommands:", "  train  ..."
            flags, subs, in_subs = set(), [], False
            for l in r.stdout.splitlines():
                if re.match(r"^\S.*:$", l):
                    in_subs = l.lower().startswith("subcommands")
                m = re.match(r"^  (-\S+)", l)
                if m:
                    flags.update(f for f in m.group(1).split(",") if f.startswith("-"))
                m = re.match(r"^  ([a-z][\w-]*)(\s|$)", l)
                if m and in_subs:
                    subs.append(m.group(1))
            help_cache[key] = flags
            subcommands[key] = subs
    return help_cache[key]


def flags_of_every_command():
    every = set(help_of([]) or ())
    for c in subcommands.get((), []):
        words = [c]
        every |= help_of(words) or set()
        for sub in subcommands.get((c,), []):
            every |= help_of([c, sub]) or set()
    return every


# ---- repository entries ----
try:
    tracked = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True,
                             check=True).stdout.split("\n")
except (OSError, subprocess.CalledProcessError):
    tracked = []
tracked_set = {p for p in tracked if p}
top_dirs = {p.split("/")[0] for p in tracked if "/" in p}
root_files = {p for p in tracked if p and "/" not in p}
if not tracked:  # not a git checkout: what is there, less the outputs
    for e in os.listdir(root):
        if e.startswith("build") or e in ("runs", ".git"):
            continue
        (top_dirs if os.path.isdir(os.path.join(root, e)) else root_files).add(e)
root_files |= {"CHANGELOG.md", "CONTRIBUTING.md", "LICENSE", "LICENSE.md", "NOTICE",
               "SECURITY.md", "Dockerfile", "CMakeLists.txt", "README.md"}
top_dirs.discard("build")

PLACEHOLDER_PART = re.compile(r"^[A-Z][A-Z0-9_]*$")


def check_path(line, word):
    w = word.rstrip(".,;:!?)'\"")
    w = re.sub(r":\d+(-\d+)?$", "", w)  # file.cpp:123
    if w.startswith("./"):
        w = w[2:]
    if not w or "..." in w or "//" in w:
        return
    first = w.split("/")[0]
    if "/" in w:
        if first not in top_dirs:
            return
    elif w not in root_files:
        return
    if any(PLACEHOLDER_PART.match(p) for p in w.split("/")):
        return
    checked["paths"] += 1
    if not os.path.exists(os.path.join(root, w)):
        problem(line, f"'{w}' does not exist in the repository: fix the path, or add the file")
    elif tracked_set and w.rstrip("/") not in tracked_set and \
            not any(t.startswith(w.rstrip("/") + "/") for t in tracked_set):
        problem(line, f"'{w}' is here but not committed (a clean clone lacks it): commit it")


PATH_WORD = re.compile(r"(?<![\w./$~<{*@-])[\w.][\w./@+-]*")


def check_paths_in(line, text):
    # Words glued to placeholders (docs/<name>.md, src/*.cpp, bench/{a,b}.sh) are skipped whole.
    for m in PATH_WORD.finditer(text):
        end = m.end()
        if end < len(text) and text[end] in "<{*$":
            continue
        check_path(line, m.group(0))


# ---- rn50 command lines ----
LAUNCHERS = {"mpirun", "mpiexec", "srun", "env", "nice", "time", "timeout", "sudo", "exec",
             "taskset", "numactl", "valgrind", "gdb", "perf", "qemu-x86_64", "chrt", "ionice",
             "stdbuf", "docker", "podman", "xargs", "strace", "ltrace", "command"}
SEPARATORS = {";", "&&", "||", "|", "&"}
REDIRECT = re.compile(r"^(\d*>>?|\d*>&\d*|<|&>)")


def strip_comment(s):
    """s without its shell comment (a # at the start or after a blank, outside quotes)."""
    q = None
    for i, ch in enumerate(s):
        if q:
            if ch == q:
                q = None
        elif ch in "'\"":
            q = ch
        elif ch == "#" and (i == 0 or s[i - 1].isspace()):
            return s[:i]
    return s


def words_of(s):
    try:
        return shlex.split(s)
    except ValueError:
        return s.split()


def is_placeholder(w):
    return bool(re.match(r"^[<\[{(]", w) or re.match(r"^[A-Z][A-Z0-9_|-]*(\.\.\.)?$", w)
                or w in ("...", "COMMAND", "CMD"))


def is_rn50_word(w):
    """rn50, ./rn50, or the binary in a build or bin folder (not runs/rn50, a checkpoint)."""
    return re.match(r"^(\.?/?rn50|([\w./$}{-]*/)?(build[\w.-]*|bin)/rn50)$", w) is not None


def check_invocation(line_of, args, where):
    """args: the words after rn50 (each with its line via line_of)."""
    if not args:
        return
    first = args[0]
    if first.startswith("-"):
        words, rest = [], args
    elif is_placeholder(first):
        return
    elif first == "bench" and len(args) > 1 and not args[1].startswith("-"):
        if is_placeholder(args[1]):
            return
        words, rest = args[:2], args[2:]
    else:
        words, rest = [first.rstrip(";:,")], args[1:]
    flags = help_of(words)
    checked["commands"] += 1
    name = " ".join(["rn50", *words])
    if flags is None:
        problem(line_of(0), f"{where}'{name}': rn50 has no such command (see rn50 --help); "
                            f"fix or remove the command")
        return
    if where:
        # Prose may show a flag given to the wrong command on purpose (`rn50 eval --lr 9` is
        # refused): there a flag need only be one of some rn50 command.
        flags = flags_of_every_command()
    for i, w in enumerate(rest, start=len(args) - len(rest)):
        if w == "--":
            break
        w = w.lstrip("[(").rstrip(")],;:.")
        m = re.match(r"^(--?[A-Za-z][\w-]*)(=.*)?$", w)
        if not m:
            continue
        flag = m.group(1)
        checked["flags"] += 1
        if flag in flags:
            continue
        if where:
            problem(line_of(i), f"{where}'{name} ... {flag}': no rn50 command has the flag "
                                f"{flag} (rn50 COMMAND --help lists them): fix the flag")
        else:
            problem(line_of(i), f"'{name}' has no flag {flag} ({name} --help lists its "
                                f"flags): fix the flag, or the command it is given to")


def check_command_words(words, line_of, where=""):
    """Finds the rn50 commands in one logical shell line (words; line_of(i) = line of word i)."""
    segment_start = 0
    i = 0
    n = len(words)
    while i < n:
        w = words[i]
        if w in SEPARATORS or w.endswith(";"):
            segment_start = i + 1
            i += 1
            continue
        # leading VAR=value words, then the program
        k = segment_start
        while k < i and re.match(r"^[A-Za-z_]\w*=", words[k]):
            k += 1
        prog = os.path.basename(words[k]) if k < i else None
        if prog in ("docker", "podman"):
            # `docker run [options] IMAGE ARGS`: the image's entrypoint is rn50, unless
            # --entrypoint names another program (mpirun ... rn50 train ...)
            run = "run" in words[k + 1:i]
            entry = any(x.startswith("--entrypoint") for x in words[k:i])
            found = run and (re.match(r"^([\w.-]+/)?rn50(:[\w.-]+)?$", w) if not entry else
                             is_rn50_word(w) and i + 1 < n and not words[i + 1].startswith("-"))
        elif prog in LAUNCHERS:
            found = is_rn50_word(w)
        else:
            found = prog is None and is_rn50_word(w)  # the first word of the command
        if (found or prog is None) and re.match(r"^(\./)?build/[\w./-]+$", w) \
                and os.path.isdir(os.path.join(root, "build")) \
                and not os.path.exists(os.path.join(root, w)):
            problem(line_of(i), f"'{w}': the build makes no such file (bash scripts/build.sh "
                                f"builds into build/): fix the path")
        if found:
            # this command's words: up to a separator, a redirection, or the next rn50
            j = i + 1
            while j < n:
                x = words[j]
                if x in SEPARATORS and not (x == "|" and j + 1 < n and words[j + 1].startswith("-")):
                    break
                if REDIRECT.match(x) or is_rn50_word(x):
                    break
                j += 1
            check_invocation(lambda a, i=i: line_of(i + 1 + a), words[i + 1:j], where)
            if j < n and is_rn50_word(words[j]):
                segment_start = j  # "= rn50 train ...": a new command
            i = j
            continue
        i += 1


# ---- the README ----
with open(readme, encoding="utf-8") as f:
    lines = f.read().split("\n")

SESSION = re.compile(r"\b(rounds?|sessions?)\b", re.I)
ALLOWED_ROUND = re.compile(r"\brounds?(-robin|[- ]trip|[- ]to\b|-to-nearest)", re.I)

USAGE_CONTINUATION = re.compile(r"^\s+[\[(]*--\w")


def check_code(words_lines):
    """One command line of a code block: [(word, line)]."""
    if words_lines:
        ws = [w for w, _ in words_lines]
        ls = [l for _, l in words_lines]
        check_command_words(ws, lambda i: ls[min(i, len(ls) - 1)])


def check_spans(paragraph):
    """The inline code spans of a paragraph ([(line, text)]; a span may cross lines) that start
    with an rn50 command."""
    text = "\n".join(t for _, t in paragraph)
    for m in re.finditer(r"`([^`]+)`", text):
        first = paragraph[0][0] + text.count("\n", 0, m.start(1))
        wl = []
        for k, part in enumerate(m.group(1).split("\n")):
            wl += [(w, first + k) for w in words_of(strip_comment(part))]
        if wl and (is_rn50_word(wl[0][0]) or re.match(r"^[A-Za-z_]\w*=", wl[0][0])
                   or os.path.basename(wl[0][0]) in LAUNCHERS):
            ls = [l for _, l in wl]
            check_command_words([w for w, _ in wl], lambda i: ls[min(i, len(ls) - 1)],
                                "in `...`: ")


fence = None  # the fence string while inside a code block
pending = []  # (word, line) of a command continued with a backslash
command = []  # (word, line) of the last whole command line, checked when the next line is not
# its continuation in a usage synopsis (an indented line starting with [--flag, (--flag or --flag)
paragraph = []  # (line, text): prose lines, for code spans
for no, raw in enumerate(lines, start=1):
    stripped = raw.strip()
    m = re.match(r"^(`{3,}|~{3,})", stripped)
    if fence is None and (not stripped or m or stripped.startswith(("|", "#"))):
        check_spans(paragraph)
        paragraph = []
    if m and (fence is None or stripped.startswith(fence)):
        if fence is None:
            fence = m.group(1)
        else:
            fence = None
            check_code(pending + command)
            pending, command = [], []
        continue
    # 3. rounds and sessions
    text = ALLOWED_ROUND.sub("", raw)
    if fence is None:
        text = re.sub(r"`[^`]*\bSession\b[^`]*`", "", text)
    if SESSION.search(text):
        s = raw.strip()
        problem(no, "a line about rounds or sessions ('" + (s if len(s) <= 100 else s[:97] + "...")
                + "'): the README says what the project is and does, not how it was made; "
                  "drop or rewrite the line")
    # 2. paths: link targets, then every word
    for t in re.findall(r"\]\(([^)\s]+)\)", raw):
        if "://" not in t and not t.startswith(("#", "mailto:")):
            check_path(no, t.split("#")[0])
    check_paths_in(no, re.sub(r"\]\([^)\s]+\)", "]", raw))
    # 1. commands
    if fence is None:
        if stripped and not stripped.startswith("#"):
            paragraph.append((no, raw))
        continue
    code = strip_comment(raw).rstrip()
    cont = code.endswith("\\")
    if cont:
        code = code[:-1]
    words = [(w, no) for w in words_of(code)]
    if not pending and command and USAGE_CONTINUATION.match(code):
        command += words
        continue
    if pending:
        pending += words
    else:
        check_code(command)
        command, pending = [], words
    if not cont:
        command, pending = pending, []
check_spans(paragraph)
check_code(pending + command)

for line, text in sorted(set(problems)):
    print(f"{shown}:{line}: {text}")
summary = (f"{checked['commands']} rn50 command lines with {checked['flags']} flags, "
           f"{checked['paths']} paths")
if problems:
    print(f"check-docs: {len(set(problems))} problem(s) in {shown} ({summary} checked)",
          file=sys.stderr)
    sys.exit(1)
print(f"check-docs: {shown} ok ({summary})", file=sys.stderr)
PYEOF
)

check() { python3 -c "$checker" "$1" "$root" "$rn50"; }

if ((self_test == 0)); then
  status=0
  check "$readme" || status=1
  if git -C "$root" rev-parse --verify -q HEAD >/dev/null 2>&1; then
    for f in docs/flags.md docs/report-schema.md; do
      if ! git -C "$root" diff --quiet HEAD -- "$f"; then
        echo "$f: not as committed: the build rewrote it from the code (tools/gen_docs.cpp);" \
          "commit the new one with the change to the code (git diff $f shows what changed)"
        status=1
      fi
    done
  fi
  exit "$status"
fi

# ---- self-test ----
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
expect() {  # expect FILE LINE TEXT: the check of FILE reported TEXT on LINE
  if ! grep -qF -- "$(basename "$1"):$2: " "$tmp/out" ||
     ! grep -F -- "$(basename "$1"):$2: " "$tmp/out" | grep -qF -- "$3"; then
    echo "self-test: FAILED: no report of '$3' on line $2 of $(basename "$1")" >&2
    fail=1
  fi
}
cd "$tmp"

# (a) a README that must pass: commands, a continuation, comments, launchers, a container,
# --flag=VALUE, paths that exist, and what is not checked.
cat >clean.md <<'EOF'
# rn50
```bash
bash scripts/build.sh && ./build/rn50 train --data synthetic --epochs 1 \
  --batch-size 2 --report-file=runs/x.jsonl   # a comment: --not-checked
rn50 bench infer --batch-sizes 1,32 --precision fp32
mpirun -np 2 --bind-to none ./build/rn50 train --amp --image-root ../shared/data/imagenette
docker run --rm -v /data:/data:ro rn50:cpu train --image-root /data --config configs/rn50_90e_tf32.toml
docker run --rm --entrypoint mpirun rn50:cpu -np 2 rn50 eval --image-root /data
rn50 COMMAND --help
```
See `docs/flags.md`, [the flags](docs/flags.md#rn50-train), `src/`, `tools/rn50.cpp:10`,
`bench/results/cpu/DATE/`, `runs/r.jsonl`, `build/rn50`, `../shared/data`, the Dockerfile,
https://github.com/NVIDIA/DeepLearningExamples/tree/master/docs/nothing.md and `rn50 eval --benchmark`.
Threads take the work round-robin; `Session` is the class.
EOF
if ! check clean.md >"$tmp/out" 2>&1; then
  echo "self-test: FAILED: a README that is right was refused:" >&2
  cat "$tmp/out" >&2
  fail=1
fi

# (b) the same with planted problems: each must be reported, and nothing else.
cp clean.md planted.md
sed -i 's/--batch-size 2 --report-file/--batch-size 2 --no-such-flag --report-file/' planted.md
cat >>planted.md <<'EOF'
```
rn50 bench infer --batch-sizes 1 --no-such-bench-flag=3
./build/rn50 no-such-command --help
bash scripts/no-such-script.sh
```
Read `docs/no-such-file.md` and [this](configs/no-such.toml).
Written in this session, the third round.
EOF
check planted.md >"$tmp/out" 2>&1 && { echo "self-test: FAILED: planted problems passed" >&2; fail=1; }
expect planted.md 4 "has no flag --no-such-flag"
expect planted.md 16 "has no flag --no-such-bench-flag"
expect planted.md 17 "'rn50 no-such-command': rn50 has no such command"
expect planted.md 18 "'scripts/no-such-script.sh' does not exist"
expect planted.md 20 "'docs/no-such-file.md' does not exist"
expect planted.md 20 "'configs/no-such.toml' does not exist"
expect planted.md 21 "rounds or sessions"
if [[ $(grep -c '^planted.md:' "$tmp/out") != 7 ]]; then
  echo "self-test: FAILED: expected exactly the 7 planted problems, got:" >&2
  fail=1
fi
echo "self-test: planted problems in a small README, as reported:"
sed 's/^/  /' "$tmp/out"

# (c) a copy of the real README with planted problems: each reported on its line.
cp "$readme" readme-planted.md
# prints: the line of the first `rn50 train` in a code block (now with --no-such-flag), and the
# first line of what is appended
read -r train end < <(python3 - readme-planted.md <<'EOF'
import re, sys
lines = open(sys.argv[1], encoding="utf-8").read().rstrip("\n").split("\n")
fence, train = False, 0
for i, l in enumerate(lines):
    if re.match(r"^\s*(```|~~~)", l):
        fence = not fence
    elif fence and not train and re.search(r"(^|[\s/])rn50 train\b", l):
        lines[i] = re.sub(r"rn50 train\b", "rn50 train --no-such-flag", l, count=1)
        train = i + 1
end = len(lines) + 1
lines += ["", "Written in this session: see `docs/no-such-file.md`.", "```",
          "bash scripts/no-such-script.sh", "./build/rn50 no-such-command", "```"]
open(sys.argv[1], "w", encoding="utf-8").write("\n".join(lines) + "\n")
print(train, end)
EOF
)
check readme-planted.md >"$tmp/out" 2>&1 && { echo "self-test: FAILED: the planted README passed" >&2; fail=1; }
if ((train == 0)); then
  echo "self-test: FAILED: $readme has no rn50 train command in a code block to plant a flag in" >&2
  fail=1
else
  expect readme-planted.md "$train" "has no flag --no-such-flag"
fi
expect readme-planted.md $((end + 1)) "rounds or sessions"
expect readme-planted.md $((end + 1)) "'docs/no-such-file.md' does not exist"
expect readme-planted.md $((end + 3)) "'scripts/no-such-script.sh' does not exist"
expect readme-planted.md $((end + 4)) "rn50 has no such command"
echo "self-test: planted in a copy of $(basename "$readme") (lines $train, $((end + 1))-$((end + 4))), as reported:"
grep -E "^readme-planted.md:($train|$((end + 1))|$((end + 3))|$((end + 4))):" "$tmp/out" | sed 's/^/  /'
if ((fail)); then
  echo "self-test: FAILED" >&2
  exit 1
fi
echo "self-test: passed (a right README passes; every planted problem is reported on its line)"
