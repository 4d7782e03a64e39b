// Package jobs holds what runs outside the Go binary — Slurm templates,
// cron examples, trainers, example experiment files — and embeds the
// examples that `whale demo` writes out for a new user.
package jobs

import "embed"

// Examples are the example experiment files and sample data under
// examples/.
//
//go:embed examples/*.yaml examples/*.csv
var Examples embed.FS
