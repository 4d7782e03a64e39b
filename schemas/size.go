package schemas

// sizer estimates the uncompressed Parquet bytes of one row: strings count
// their bytes plus the 4-byte length prefix of PLAIN byte arrays, scalars
// their width, list elements one extra level byte. The writer cuts row groups
// on the running sum, so the estimate only has to be cheap and proportional.
type sizer interface {
	approxSize() int64
}

func strSize(s string) int64 { return int64(len(s)) + 4 }

func (t *Task) approxSize() int64 {
	n := strSize(t.ID) + strSize(t.Domain) + strSize(t.Split) + strSize(t.Question) + strSize(t.Meta)
	for _, a := range t.Answers {
		n += strSize(a) + 1
	}
	return n
}

func (c *ToolCall) approxSize() int64 {
	return strSize(c.ID) + strSize(c.Name) + strSize(c.Arguments) + 1
}

func (m *Message) approxSize() int64 {
	n := strSize(m.Role) + strSize(m.Content) + strSize(m.Name) + strSize(m.ToolCallID) + 1
	for i := range m.ToolCalls {
		n += m.ToolCalls[i].approxSize()
	}
	return n
}

func (e *TraceEvent) approxSize() int64 {
	return 4 + strSize(e.Kind) + strSize(e.Action) + strSize(e.Feedback) + 1
}

func (r *Rollout) approxSize() int64 {
	n := strSize(r.Run) + strSize(r.Position) + strSize(r.ModelID) + strSize(r.HarnessID) +
		strSize(r.TaskID) + strSize(r.Answer) + strSize(r.FinishReason) + strSize(r.Error) +
		strSize(r.Tools) + strSize(r.Schedule) + strSize(r.Section) + strSize(r.Stage) +
		4 + 8 + 8 + 1 + 4 + 8 + 8 + 8 + 4
	for i := range r.Messages {
		n += r.Messages[i].approxSize()
	}
	for i := range r.Trace {
		n += r.Trace[i].approxSize()
	}
	return n
}

func (s *SFTExample) approxSize() int64 {
	n := strSize(s.ExampleID) + strSize(s.EpisodeID) + strSize(s.TaskID) + int64(len(s.TrainMask))*2
	for i := range s.Messages {
		n += s.Messages[i].approxSize()
	}
	return n
}

func (e *Eval) approxSize() int64 {
	return strSize(e.HarnessID) + strSize(e.ModelID) + strSize(e.TaskID) + 4 + 8*4
}

func (c *Candidate) approxSize() int64 {
	return strSize(c.HarnessID) + strSize(c.ParentID) + strSize(c.Name) + strSize(c.Hypothesis) +
		strSize(c.Axis) + strSize(c.Proposer) + strSize(c.Source)
}
