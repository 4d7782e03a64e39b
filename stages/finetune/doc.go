// Package finetune is the fine-tune stage of a weight step: it trains a new
// model version on a filter stage's SFT table, stores the checkpoint in the
// bucket and hands it to the inference server.
//
// Contract:
//   - Inputs: "sft" (a committed manifest with table "sft", Parquet files of
//     schemas.SFTExample) and, optionally, "base" (the previous finetune
//     stage, whose checkpoint is the base; without it the base is
//     Config.BaseCheckpoint, a hub name or path passed through untouched).
//   - Backends are chosen by Config.Backend from one table (backends.go; its
//     names in order are Backends(), and "" is the first): each row is a
//     backend's name, the check of its own settings and how it trains. For
//     every backend the stage materialises the SFT table in a local work
//     directory (the Parquet files as stored, and a chat-messages JSONL
//     export that TRL, verl and SkyRL read) and downloads a base checkpoint
//     from the bucket when there is one; after training it uploads the output
//     directory and reloads. Adding a backend is its file and one row.
//   - The command backend runs Config.Command with /bin/sh -c (optionally
//     under srun) with the WHALE_* environment described on Config. Its
//     output is streamed line by line to the log; cancelling ctx kills its
//     process group.
//   - The local backend trains whale's built-in model (models/local) in
//     process instead of running a command, and writes model.whalelm to the
//     same output directory; everything after is shared (see local.go).
//   - Every file the trainer writes to $WHALE_OUTPUT_DIR is uploaded
//     through Exec.Create as table "checkpoint_files"; table "checkpoint"
//     holds one JSON Index that maps each relative path to its object key,
//     size and sha256. Both are named by the stage manifest, so the commit
//     protocol covers the checkpoint (DESIGN §2 puts checkpoints under
//     models/<run>/<position>/; a stage can write only into its own folder,
//     and the manifest is what makes a file trustworthy, so they live there).
//   - An empty SFT table trains nothing: the stage commits trained=false and
//     an Index that carries the base forward (its entries keep pointing at
//     the committed files of the stage that wrote them).
//   - After the upload and before the commit, Reload tells the servers
//     (one path each; a failed hand-off fails the stage, nothing is
//     committed, and a rerun hands off again):
//     vllm-lora posts /v1/load_lora_adapter to every endpoint under the
//     model id, which for LoRA is new to every execution
//     ("<name>@<run>/<position>-a<attempt>-<hex>", loraModelID: vLLM keeps
//     adapters by name), then unloads the adapters earlier tries of the
//     position left; vllm-weights loads the full checkpoint into every
//     running server in place (POST /collective_rpc reload_weights with
//     weights_path, then /reset_prefix_cache; vLLM's development
//     endpoints, VLLM_SERVER_DEV_MODE=1) and checks that the server still
//     serves Config.ModelName, which is what rollouts then request while
//     their rows record the position's id; command runs
//     Config.ReloadCommand with WHALE_CHECKPOINT_DIR and WHALE_MODEL_ID,
//     which must leave the servers serving the checkpoint under
//     WHALE_MODEL_ID (jobs/vllm/reload.sh restarts them so); none does
//     nothing. The model id is the manifest's "model_id" summary, the id
//     the next rollouts record (pipeline reads it from there).
package finetune
