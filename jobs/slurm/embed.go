// Package slurm holds the sbatch templates that `whale submit slurm`
// renders (see README.md). They are Go text/template files; the renderer in
// scheduler/slurm fills them, and a site may replace them with its own
// copies of the same names.
package slurm

import "embed"

// Templates are the *.tmpl files of this folder: header.tmpl defines the
// shared pieces, each *.sbatch.tmpl is one kind of job.
//
//go:embed *.tmpl
var Templates embed.FS
