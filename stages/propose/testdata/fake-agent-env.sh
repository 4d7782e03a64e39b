#!/bin/sh
# A FAKE agent for tests: it records its environment in $HOME/agent.env
# (the sandbox lets it write nowhere but its scratch folder), prints the
# API key it was given and a URL with a password (agent.log must show
# neither), and writes two candidates: one whose hypothesis quotes the
# key and one whose source holds it.
set -eu
env > "$HOME/agent.env"
echo "my key is $PROPOSE_TEST_API_KEY"
echo "the bucket is https://user:hunter2hunter2@bucket.example/x"
touch "$HOME/was-here" "$TMPDIR/was-here"
cd "$WHALE_WORKSPACE"
parent=$(ls -d candidates/h0-*)
mkdir -p new/quotes-key new/holds-key
sed 's/^MAX_TURNS = 4$/MAX_TURNS = 6/' "$parent/harness.star" > new/quotes-key/harness.star
printf '{"name": "quotes-key", "hypothesis": "the key %s helps", "axis": "turns"}\n' "$PROPOSE_TEST_API_KEY" > new/quotes-key/meta.json
{ sed 's/^MAX_TURNS = 4$/MAX_TURNS = 5/' "$parent/harness.star"; echo "# $PROPOSE_TEST_API_KEY"; } > new/holds-key/harness.star
