// Package trainers holds whale's reference GPU trainer, train_sft.py, and
// its library whale_sft.py: the trainer the finetune stage's command
// backend runs for Hugging Face models (see README.md). Files embeds them so
// that the whale binary can write them out next to a job.
//
// The Go tests here run the Python unit tests (toy model, no transformers)
// and the finetune stage end to end with the toy trainer; they need a
// python3 that imports torch, and jinja2 for the chat-template tests
// (apt-get install -y python3-torch python3-jinja2). With CI=true a missing
// torch or jinja2 fails them; otherwise they are skipped.
package trainers

import "embed"

// Files are train_sft.py and whale_sft.py.
//
//go:embed train_sft.py whale_sft.py README.md
var Files embed.FS
