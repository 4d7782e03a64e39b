#!/bin/sh
# whale's restart hand-off of a new checkpoint to vLLM servers run by
# jobs/vllm/serve.sh: the reload_command of `finetune.reload: command`
# (see jobs/vllm/README.md). It returns when every server answers with the
# new checkpoint under $WHALE_MODEL_ID, the id whale's next rollouts ask
# for; any failure exits non-zero, which fails the finetune stage (nothing
# is committed, and a rerun trains and reloads again).
#
# From whale's finetune stage:
#   WHALE_CHECKPOINT_DIR  the new Hugging Face checkpoint (config.json,
#                         *.safetensors, tokenizer)
#   WHALE_MODEL_ID        the id to serve it under
#   WHALE_RUN, WHALE_POSITION, WHALE_ATTEMPT
# From the experiment's finetune.env (no secrets there):
#   WHALE_VLLM_STATE      the STATE_DIR every serve.sh watches (shared)
#   WHALE_VLLM_ENDPOINTS  the servers' base URLs, space-separated, as in
#                         model.endpoints (http://node1:8000/v1 ...)
#   WHALE_VLLM_STORE      where checkpoints are kept for the servers, on a
#                         filesystem they see; default $WHALE_VLLM_STATE/checkpoints
#   WHALE_VLLM_TIMEOUT    seconds to wait for the servers, default 1800
#   WHALE_VLLM_POLL       seconds between looks at a server, default 2
# From whale's own environment, when the servers have --api-key:
#   VLLM_API_KEY          sent as a bearer token (never on a command line)
set -u

fail() {
  echo "whale reload.sh: $*" >&2
  exit 1
}
need() {
  eval "v=\${$1:-}"
  # shellcheck disable=SC2154 # v is set by the eval above
  if [ -z "$v" ]; then
    echo "whale reload.sh: $1 is not set: $2" >&2
    exit 2
  fi
}
need WHALE_CHECKPOINT_DIR "whale's finetune stage sets it; run this script as finetune.reload_command"
need WHALE_MODEL_ID "whale's finetune stage sets it"
need WHALE_RUN "whale's finetune stage sets it"
need WHALE_POSITION "whale's finetune stage sets it"
need WHALE_VLLM_STATE "set it in finetune.env to the STATE_DIR of jobs/vllm/serve.sh"
need WHALE_VLLM_ENDPOINTS "set it in finetune.env to the servers' base URLs, e.g. http://node1:8000/v1"

ckpt=$WHALE_CHECKPOINT_DIR
id=$WHALE_MODEL_ID
state=$WHALE_VLLM_STATE
store=${WHALE_VLLM_STORE:-$state/checkpoints}
timeout=${WHALE_VLLM_TIMEOUT:-1800}
[ -d "$state" ] || fail "WHALE_VLLM_STATE $state is not a directory"
[ -f "$ckpt/config.json" ] || fail "$ckpt has no config.json: the trainer must save a Hugging Face checkpoint to \$WHALE_OUTPUT_DIR"
poll=${WHALE_VLLM_POLL:-2}
case $timeout in
'' | *[!0-9]*) fail "WHALE_VLLM_TIMEOUT is $timeout: seconds, a whole number (e.g. 1800)" ;;
esac
case $poll in
'' | .* | *. | *[!0-9.]* | *.*.*) fail "WHALE_VLLM_POLL is $poll: seconds, a number (e.g. 2 or 0.5)" ;;
esac
# The id is matched in the servers' JSON as it is written: characters
# JSON escapes (quotes, backslashes, control characters) would never match.
case $id in
*[!A-Za-z0-9._@/:+-]*) fail "WHALE_MODEL_ID $id: only letters, digits and . _ @ / : + - can be matched in /v1/models" ;;
esac

# The servers load the checkpoint from a directory of their own: whale's
# work directory goes when the stage ends, and a server that restarts
# later must find it again. The name is new for every reload, so a
# retrained checkpoint of the same position is a change serve.sh sees, and
# /v1/models (whose "root" is the directory a server was started on) tells
# the new server from the old.
tag="a${WHALE_ATTEMPT:-0}-$(date +%s)-$$"
run_dir="$store/$WHALE_RUN"
dest="$run_dir/$WHALE_POSITION-$tag"
mkdir -p "$run_dir" || fail "cannot create $run_dir"
cp -R "$ckpt" "$dest.partial" || fail "cannot copy $ckpt to $dest.partial"
mv "$dest.partial" "$dest" || fail "cannot rename $dest.partial"

# Atomic for serve.sh, which reads the file whole.
printf '%s\n%s\n%s\n' "$dest" "$id" "$tag" >"$state/current.$$" || fail "cannot write $state/current.$$"
mv "$state/current.$$" "$state/current" || fail "cannot replace $state/current"
echo "whale reload.sh: asked the servers to serve $dest as $id"

# models prints an endpoint's /v1/models, compacted.
models() {
  if [ -n "${VLLM_API_KEY:-}" ]; then
    printf 'Authorization: Bearer %s\n' "$VLLM_API_KEY" | curl -fsS --max-time 10 -H @- "$1/models" 2>/dev/null
  else
    curl -fsS --max-time 10 "$1/models" 2>/dev/null
  fi | sed 's/": "/":"/g'
}

start=$(date +%s)
set -f # the endpoints are split on spaces, never globbed
for ep in $WHALE_VLLM_ENDPOINTS; do
  ep=${ep%/}
  case $ep in
  */v1) ;;
  *) ep="$ep/v1" ;;
  esac
  while :; do
    seen=$(models "$ep")
    case $seen in
    *"\"id\":\"$id\""*"\"root\":\"$dest\""*) break ;;
    esac
    if [ $(($(date +%s) - start)) -ge "$timeout" ]; then
      fail "$ep does not serve $dest as $id after ${timeout}s (it answered: ${seen:-nothing}); see the log of its serve.sh"
    fi
    sleep "$poll"
  done
  echo "whale reload.sh: $ep serves $id"
done
set +f

# Earlier checkpoints of this run are no longer served; the bucket holds
# them all.
for old in "$run_dir"/*; do
  [ "$old" = "$dest" ] && continue
  [ -e "$old" ] || continue
  rm -rf "$old"
done
