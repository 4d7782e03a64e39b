package slurm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// SubmitSharded submits a sharded stage: shards through TemplateArray and,
// after it (afterok on the whole array), commit through TemplateCommit.
// If the commit job cannot be submitted the array is cancelled, so that
// no shard runs without a job to commit it.
func SubmitSharded(ctx context.Context, s Scheduler, r *Renderer, shards, commit Spec) (arrayID, commitID string, err error) {
	arr, err := r.Render(TemplateArray, shards)
	if err != nil {
		return "", "", err
	}
	arrayID, err = s.Submit(ctx, arr)
	if err != nil {
		return "", "", fmt.Errorf("submit shards of %s: %w", shards.Name, err)
	}
	commit.AfterOK = append(slices.Clone(commit.AfterOK), arrayID)
	script, err := r.Render(TemplateCommit, commit)
	if err == nil {
		commitID, err = s.Submit(ctx, script)
	}
	if err != nil {
		// Cancel even when ctx is done: a detached, bounded context.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if cerr := s.Cancel(cctx, arrayID); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cancel array %s: %w", arrayID, cerr))
		}
		return "", "", fmt.Errorf("submit commit job %s after array %s (array cancelled): %w", commit.Name, arrayID, err)
	}
	return arrayID, commitID, nil
}
