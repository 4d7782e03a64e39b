#!/bin/sh
# A FAKE agent for tests of its sandbox: it tries to read and write what it
# must not see (a file:// root's directory, a cache, whale's home and
# process), says what it got, calls a listener of the test on loopback and
# writes one candidate. Arguments: bucket, cache, home, a world-writable
# folder, whale's pid, the listener's port.
bucket=$1 cache=$2 home=$3 world=$4 whale=$5 port=$6
echo "bucket holds: $(ls -A "$bucket" 2>&1 | tr '\n' ' ')"
cat "$bucket/secret.txt" "$cache/index.txt" "$home/.aws/credentials" 2>&1
echo forged > "$bucket/evals.json" && echo "WROTE the bucket"
mkdir "$bucket/r001" && echo "MADE a folder in the bucket"
echo forged > "$world/forged" && echo "WROTE outside the workspace"
echo private > "/tmp/agent-tmp-$whale" && echo "private tmp ok"
test -e "/proc/$whale" && echo "whale's process SHOWS"
cat "/proc/$whale/environ" > /dev/null && echo "READ whale's environment"
for f in /proc/[0-9]*/environ; do cat "$f"; echo; done 2>&1
if command -v bash >/dev/null; then
    bash -c "echo hello-from-agent > /dev/tcp/127.0.0.1/$port" && echo "network ok"
else
    echo "no bash: network not tried"
fi
cd "$WHALE_WORKSPACE"
parent=$(ls -d candidates/h0-*)
mkdir -p new/sandboxed
sed 's/^MAX_TURNS = 4$/MAX_TURNS = 6/' "$parent/harness.star" > new/sandboxed/harness.star
printf '{"name": "sandboxed", "hypothesis": "six turns", "axis": "turns"}\n' > new/sandboxed/meta.json
echo "sandbox probe done"
