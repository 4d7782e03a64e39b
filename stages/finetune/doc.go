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
//   - After the upload and before the commit, Reload tells the server:
//     vllm-lora posts /v1/load_lora_adapter to every endpoint, command runs
//     Config.ReloadCommand, none does nothing. A failed hand-off fails the
//     stage.
package finetune
