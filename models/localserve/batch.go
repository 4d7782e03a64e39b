package localserve

import (
	"time"

	"github.com/whalerun/whale/models/local"
)

func (s *Server) batcher() {
	defer close(s.done)
	for {
		var batch []*job
		select {
		case <-s.ctx.Done():
			return
		case j := <-s.queue:
			batch = append(batch, j)
		}
		// Requests that queued while the last batch decoded join at once;
		// then the batch closes after a quiet Window, or 5 Windows in all,
		// so a burst spread by HTTP handling still decodes as one batch.
		timer := time.NewTimer(s.opts.Window)
		deadline := time.Now().Add(5 * s.opts.Window)
	collect:
		for len(batch) < s.opts.MaxBatch {
			select {
			case j := <-s.queue:
				batch = append(batch, j)
				timer.Reset(min(s.opts.Window, time.Until(deadline)))
			case <-timer.C:
				break collect
			case <-s.ctx.Done():
				break collect
			}
		}
		timer.Stop()
		s.run(batch)
	}
}

// run decodes a batch, one Generate call per served model.
func (s *Server) run(batch []*job) {
	groups := map[*served][]*job{}
	var order []*served
	for _, j := range batch {
		if groups[j.model] == nil {
			order = append(order, j.model)
		}
		groups[j.model] = append(groups[j.model], j)
	}
	for _, sv := range order {
		js := groups[sv]
		prompts := make([][]int, len(js))
		opts := make([]local.SampleOptions, len(js))
		for i, j := range js {
			prompts[i], opts[i] = j.prompt, j.opts
		}
		s.calls.Add(1)
		start, before := time.Now(), s.PrefixStats()
		gens, err := sv.m.GenerateEach(s.ctx, prompts, opts, s.prefix)
		if err == nil {
			tokens := 0
			for _, g := range gens {
				tokens += g.CompletionTokens
			}
			after := s.PrefixStats()
			s.log.Debug("localserve: batch decoded", "model", sv.name, "requests", len(js), "tokens", tokens,
				"prompt_rows_fed", after.FedRows-before.FedRows, "prompt_rows_cached", after.ReusedRows-before.ReusedRows,
				"seconds", time.Since(start).Seconds())
		}
		for i, j := range js {
			if err != nil {
				j.res <- result{err: err}
			} else {
				j.res <- result{gen: gens[i]}
			}
		}
	}
}

// PrefixStats counts the prompt rows the prefix cache gave and those the
// model computed since the server started; zero when the cache is off.
func (s *Server) PrefixStats() local.PrefixStats {
	if s.prefix == nil {
		return local.PrefixStats{}
	}
	return s.prefix.Stats()
}

// --- models and adapters ---
