#!/bin/sh
# A FAKE agent for tests: no model, no reasoning. It reads the parent's
# trajectories, picks a failed task, writes a candidate, prototypes it
# with ./try (and tries what ./try must refuse), and checks that whale's
# bucket credentials are not in its environment.
set -u
cd "$WHALE_WORKSPACE" || exit 3
if [ -n "${AWS_SECRET_ACCESS_KEY:-}" ] || env | grep -q '^AWS_'; then
    echo "the agent has AWS credentials" >&2
    exit 4
fi
echo "AWS_SECRET_ACCESS_KEY absent"
parent=$(ls -d candidates/h0-*)
test -s "$parent/trajectories.jsonl" || { echo "no trajectories" >&2; exit 5; }
echo "trajectories: $(wc -l < "$parent/trajectories.jsonl") episodes"
failed=$(sed -n 's/.*"task_id":"\([^"]*\)".*"reward":0,.*/\1/p' "$parent/trajectories.jsonl" | head -n 1)
test -n "$failed" || { echo "no failed episode" >&2; exit 6; }
echo "failed task: $failed"
if grep -qx x9 search_tasks.txt; then
    echo "search_tasks.txt lists a test task" >&2
    exit 7
fi
mkdir -p new/more-turns scratch
sed 's/^MAX_TURNS = 4$/MAX_TURNS = 6/' "$parent/harness.star" > new/more-turns/harness.star
printf '{"name": "more-turns", "hypothesis": "prototyped: more turns", "axis": "turns"}\n' > new/more-turns/meta.json
printf 'def parse_action(text, state)\n' > scratch/broken.star

echo "== try good"
./try new/more-turns/harness.star t1 "$failed" || { echo "try good failed" >&2; exit 8; }
req=$(ls -d prototype/requests/req-* | head -n 1)
grep -q '"task_id":"t1"' "$req/trajectories.jsonl" || { echo "no prototype trajectory" >&2; exit 9; }
grep -q 'Paris' "$req/trajectories.jsonl" || { echo "no model reply in the prototype trajectory" >&2; exit 9; }
echo "== try broken"
./try scratch/broken.star t1 && { echo "a broken harness was played" >&2; exit 10; }
echo "== try test split"
./try new/more-turns/harness.star x9 && { echo "a test task was played" >&2; exit 11; }
echo "== try unknown"
./try new/more-turns/harness.star nope && { echo "an unknown task was played" >&2; exit 12; }
echo "== try over budget"
./try new/more-turns/harness.star t2 t1 && { echo "the budget was not enforced" >&2; exit 13; }
echo "fake agent done"
