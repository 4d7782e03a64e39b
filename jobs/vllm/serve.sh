#!/bin/sh
# Keeps one vLLM server running the checkpoint that whale's reload.sh last
# named, restarting it when that changes. Run it where the server runs (an
# inference node, inside its Slurm allocation), once per server:
#
#   jobs/vllm/serve.sh STATE_DIR BASE_MODEL SERVED_NAME [vllm serve options...]
#
#   STATE_DIR    a directory on a filesystem both this node and the node
#                that runs whale's finetune stage see (reload.sh writes
#                STATE_DIR/current there)
#   BASE_MODEL   what to serve before the first reload: a hub name or a
#                checkpoint directory (model.checkpoint of the experiment)
#   SERVED_NAME  its name before the first reload (model.name)
#   options      passed to `vllm serve` as they are (--port, --host,
#                --tensor-parallel-size, ...). For a key, export
#                VLLM_API_KEY (vllm serve reads it) rather than pass
#                --api-key, which any user of the node sees in ps.
#
# STATE_DIR/current holds three lines: the checkpoint directory, the model
# id to serve it under (--served-model-name) and a tag that is new for
# every reload. When the file changes, the server is stopped (SIGTERM, and
# this script waits for it to exit so that its GPU memory is free) and
# started again on the new checkpoint. A server that exits by itself is
# started again after WHALE_VLLM_POLL seconds, on whatever current says.
#
# Environment: VLLM_BIN (default vllm), WHALE_VLLM_POLL (seconds between
# looks at STATE_DIR/current, default 5). SIGTERM or SIGINT stops the
# server and this script.
set -u

if [ "$#" -lt 3 ]; then
  echo "usage: $0 STATE_DIR BASE_MODEL SERVED_NAME [vllm serve options...]" >&2
  exit 2
fi
state=$1
base=$2
name=$3
shift 3
vllm_bin=${VLLM_BIN:-vllm}
poll=${WHALE_VLLM_POLL:-5}
if ! [ -d "$state" ]; then
  echo "whale serve.sh: state directory $state does not exist; create it on a filesystem reload.sh sees" >&2
  exit 2
fi

pid=
stop() {
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    pid=
  fi
}
trap 'stop; exit 143' TERM
trap 'stop; exit 130' INT

# snapshot prints STATE_DIR/current, or the base model when there is none.
snapshot() {
  if [ -f "$state/current" ]; then
    cat "$state/current"
  else
    printf '%s\n%s\nbase\n' "$base" "$name"
  fi
}

# pause waits WHALE_VLLM_POLL seconds in a way a signal interrupts.
pause() {
  sleep "$poll" &
  wait "$!"
}

while :; do
  gen=$(snapshot)
  dir=$(printf '%s\n' "$gen" | sed -n 1p)
  id=$(printf '%s\n' "$gen" | sed -n 2p)
  if [ -z "$dir" ] || [ -z "$id" ]; then
    echo "whale serve.sh: $state/current must hold a checkpoint directory and a model id, one a line; waiting for a good one" >&2
    pause
    continue
  fi
  echo "whale serve.sh: starting $vllm_bin serve $dir --served-model-name $id" >&2
  "$vllm_bin" serve "$dir" --served-model-name "$id" "$@" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    pause
    if [ "$(snapshot)" != "$gen" ]; then
      echo "whale serve.sh: $state/current changed; stopping the server (pid $pid)" >&2
      stop
      break
    fi
  done
  if [ -n "$pid" ]; then
    wait "$pid"
    rc=$?
    pid=
    echo "whale serve.sh: the server exited with status $rc; starting it again in ${poll}s" >&2
    pause
  fi
done
