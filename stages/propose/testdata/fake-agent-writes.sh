#!/bin/sh
# A FAKE agent for tests: no model, no reasoning. It checks the workspace
# the propose stage laid out, then writes one valid candidate, one that
# does not compile and one that is a link (which must not be followed).
set -eu
cd "$WHALE_WORKSPACE"
for f in SKILL.md CONTRACT.md frontier.json evolution_log.md; do
    test -s "$f" || { echo "missing $f" >&2; exit 3; }
done
test "$WHALE_CANDIDATES" = 3 || { echo "WHALE_CANDIDATES=$WHALE_CANDIDATES" >&2; exit 4; }
parent=$(ls -d candidates/h0-*)
test -s "$parent/harness.star"
test -s "$parent/scores.json"
grep -q UNIQUE-FAILURE-MARK "$parent/trajectories.jsonl"
test -s search_tasks.txt
mkdir -p new/more-turns new/broken new/link
sed 's/^MAX_TURNS = 4$/MAX_TURNS = 6/' "$parent/harness.star" > new/more-turns/harness.star
cat > new/more-turns/meta.json <<'JSON'
{"name": "more-turns", "hypothesis": "six turns leave room to search twice", "axis": "turns"}
JSON
printf 'def parse_action(text, state)\n    return None\n' > new/broken/harness.star
ln -s "$WHALE_WORKSPACE/SKILL.md" new/link/harness.star
echo "fake agent wrote 3 candidates"
