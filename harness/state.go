package harness

import (
	"math"

	"go.starlark.net/starlark"

	"github.com/whalerun/whale/schemas"
)

// State is the state dict of the base StateDoc (task, turn, messages,
// last_action, retries) as an episode loop keeps it through one episode.
// Passed to Call in place of that dict, it gives every hook the same dict
// while converting only what changed since the previous call:
//
//   - a Go default gets one plain map[string]any, shared by the calls that
//     see the same state (defaults do not modify their arguments);
//   - a harness hook gets a fresh Starlark dict, a deep copy it may change
//     freely: each message is converted once and copied for each call; a
//     hook whose code never names its state parameter gets None instead,
//     since it cannot tell (see unreadParams);
//   - the call's record summarises it once per change;
//   - every kind of call checks it against the harness's value budget
//     (MaxValueBytes, MaxValueItems) as a dict would be.
//
// The task and the last action are plain values (see FromStarlark) that the
// caller does not modify once given; messages only grow. A State is not
// safe for concurrent use: one episode loop owns it.
type State struct {
	task            map[string]any
	turn            int
	messages        []schemas.Message
	lastAction      map[string]any
	format, illegal int

	taskPart, lastPart part
	msgsSize           size // what messages[:measured] count
	measured           int

	// plain is the state as plain Go, nil when something changed since it
	// was made; plainMsgs are the messages in plain form.
	plain     map[string]any
	plainMsgs []any
	// summary is the state's summary in hook records (made under
	// summaryLen/2, never empty once made), "" until a record needs it.
	summary string

	// Starlark forms of the messages, from which each call gets copies.
	starMsgs []messageProto
	// retries is the plain retries dict, kept while the counts stay.
	retries map[string]any
}

// part is the task or the last action in the forms hooks get.
type part struct {
	done  bool
	err   error
	plain any    // the value, or its normalized copy when it was not plain
	star  *proto // nil until a harness hook needs it
	size  size   // what a conversion counts for it
}

// size is what a conversion counts against a budget.
type size struct{ bytes, items int }

func (a size) plus(b size) size { return size{a.bytes + b.bytes, a.items + b.items} }

// stateKeysSize is what the state dict's own keys and the retries dict
// count: 5 and 2 entries, and the bytes of their keys.
var stateKeysSize = size{
	bytes: len("last_action") + len("messages") + len("retries") + len("task") + len("turn") + len("format") + len("illegal"),
	items: 5 + 2,
}

// NewState returns the state of an episode of task ({id, question, meta}
// as hooks may see it): turn 0, no messages, no last action, no retries.
func NewState(task map[string]any) *State {
	return &State{task: task}
}

// SetTurn sets state["turn"], the model calls made so far.
func (s *State) SetTurn(turn int) {
	if turn != s.turn {
		s.turn = turn
		s.changed()
	}
}

// SetRetries sets state["retries"]: the format and illegal retries used.
func (s *State) SetRetries(format, illegal int) {
	if format != s.format || illegal != s.illegal {
		s.format, s.illegal = format, illegal
		s.retries = nil
		s.changed()
	}
}

// SetLastAction sets state["last_action"]; nil is None.
func (s *State) SetLastAction(a map[string]any) {
	s.lastAction = a
	s.lastPart = part{}
	s.changed()
}

// SetMessages sets state["messages"], the transcript. msgs must begin with
// the messages of the previous call (a transcript only grows): only the
// new ones are converted. A shorter msgs starts over.
func (s *State) SetMessages(msgs []schemas.Message) {
	if len(msgs) < len(s.messages) {
		s.plainMsgs, s.starMsgs, s.msgsSize, s.measured = nil, nil, size{}, 0
	}
	if len(msgs) != len(s.messages) {
		s.changed()
	}
	s.messages = msgs
}

func (s *State) changed() {
	s.plain = nil
	s.summary = ""
}

// resolve makes p's plain form and size from v.
func (p *part) resolve(v map[string]any) {
	if p.done {
		return
	}
	p.done = true
	if v == nil {
		return // None
	}
	b := budget{maxBytes: math.MaxInt, maxItems: math.MaxInt}
	if plain(v, &b, 1) {
		p.plain = v
	} else {
		b = budget{maxBytes: math.MaxInt, maxItems: math.MaxInt}
		p.plain, p.err = normalizeIn(v, &b, 1)
	}
	p.size = size{b.bytes, b.items}
}

// check resolves the parts and counts the whole state against b, as
// converting it would.
func (s *State) check(b *budget) error {
	s.taskPart.resolve(s.task)
	s.lastPart.resolve(s.lastAction)
	for _, p := range []*part{&s.taskPart, &s.lastPart} {
		if p.err != nil {
			return p.err
		}
	}
	for ; s.measured < len(s.messages); s.measured++ {
		s.msgsSize = s.msgsSize.plus(messageSize(&s.messages[s.measured]))
	}
	total := stateKeysSize.plus(s.taskPart.size).plus(s.lastPart.size).plus(s.msgsSize)
	if err := b.addItems(total.items + len(s.messages)); err != nil {
		return err
	}
	return b.addBytes(total.bytes)
}

// messageSize is what converting m's message dict counts.
func messageSize(m *schemas.Message) size {
	n := size{bytes: len("role") + len(m.Role) + len("content") + len(m.Content), items: 2}
	if m.Name != "" {
		n = n.plus(size{len("name") + len(m.Name), 1})
	}
	if m.ToolCallID != "" {
		n = n.plus(size{len("tool_call_id") + len(m.ToolCallID), 1})
	}
	if len(m.ToolCalls) > 0 {
		n = n.plus(size{len("tool_calls"), 1 + len(m.ToolCalls)})
		for _, tc := range m.ToolCalls {
			n = n.plus(size{len("id") + len(tc.ID) + len("name") + len(tc.Name) + len("arguments") + len(tc.Arguments), 3})
		}
	}
	return n
}

// plainMessages is state["messages"] as plain Go, shared: each message is
// converted once.
func (s *State) plainMessages() []any {
	if s.plainMsgs == nil {
		s.plainMsgs = make([]any, 0, max(4, len(s.messages)))
	}
	for i := len(s.plainMsgs); i < len(s.messages); i++ {
		s.plainMsgs = append(s.plainMsgs, plainMessage(&s.messages[i]))
	}
	n := len(s.messages)
	return s.plainMsgs[:n:n]
}

// plainMap is the state as plain Go; check has resolved the parts.
func (s *State) plainMap() map[string]any {
	if s.plain != nil {
		return s.plain
	}
	msgs := s.plainMessages()
	if s.retries == nil {
		s.retries = map[string]any{"format": int64(s.format), "illegal": int64(s.illegal)}
	}
	s.plain = map[string]any{
		"task":        s.taskPart.plain,
		"turn":        int64(s.turn),
		"messages":    msgs,
		"last_action": s.lastPart.plain,
		"retries":     s.retries,
	}
	return s.plain
}

// plainMessage is m as FromStarlark(ToStarlark(m)) makes it.
func plainMessage(m *schemas.Message) map[string]any {
	v, _ := messageMap(m, &budget{maxBytes: math.MaxInt, maxItems: math.MaxInt})
	return v.(map[string]any)
}

// summarizeInto renders the state as summarize renders its plain map.
func (s *State) summarizeInto(w *limitWriter, depth int) {
	if err := s.check(newBudget(math.MaxInt, math.MaxInt)); err != nil {
		w.str("<state: " + err.Error() + ">")
		return
	}
	keys := [...]string{"last_action", "messages", "retries", "task", "turn"}
	w.str("{")
	for i, k := range keys {
		if i > 0 && !w.str(", ") {
			return
		}
		if !w.quote(k) || !w.str(": ") {
			return
		}
		switch k {
		case "last_action":
			summarize(w, s.lastPart.plain, depth+1)
		case "messages":
			summarizeMessages(w, s.messages)
		case "retries":
			_ = w.str(`{"format": `) && w.int(s.format) && w.str(`, "illegal": `) && w.int(s.illegal) && w.str("}")
		case "task":
			summarize(w, s.taskPart.plain, depth+1)
		case "turn":
			w.int(s.turn)
		}
	}
	w.str("}")
}

// starlarkValue is a fresh Starlark dict of the state, counted against b.
func (s *State) starlarkValue(b *budget) (starlark.Value, error) {
	if err := s.check(b); err != nil {
		return nil, err
	}
	for _, p := range []*part{&s.taskPart, &s.lastPart} {
		if p.star == nil {
			p.star = protoOf(p.plain)
		}
	}
	for i := len(s.starMsgs); i < len(s.messages); i++ {
		s.starMsgs = append(s.starMsgs, newMessageProto(&s.messages[i]))
	}

	msgs := make([]starlark.Value, len(s.messages))
	for i := range msgs {
		msgs[i] = s.starMsgs[i].value()
	}
	retries := starlark.NewDict(2)
	_ = retries.SetKey(starlark.String("format"), starlark.MakeInt(s.format))
	_ = retries.SetKey(starlark.String("illegal"), starlark.MakeInt(s.illegal))
	// Keys in sorted order, as ToStarlark inserts a map's.
	d := starlark.NewDict(5)
	_ = d.SetKey(starlark.String("last_action"), s.lastPart.star.value())
	_ = d.SetKey(starlark.String("messages"), starlark.NewList(msgs))
	_ = d.SetKey(starlark.String("retries"), retries)
	_ = d.SetKey(starlark.String("task"), s.taskPart.star.value())
	_ = d.SetKey(starlark.String("turn"), starlark.MakeInt(s.turn))
	return d, nil
}

// proto is a Starlark value kept to be copied: a leaf (an immutable
// value), or a list or dict of protos. Copies share the leaves and nothing
// else, so a hook may change its copy freely.
type proto struct {
	leaf  starlark.Value // set for a leaf
	dict  bool
	keys  []starlark.Value // a dict's keys, in insertion order
	elems []proto          // a dict's values or a list's elements
}

// protoOf is the proto of what toStarlark makes of v, a plain value.
func protoOf(v any) *proto {
	p := new(proto)
	p.set(v)
	return p
}

func (p *proto) set(v any) {
	switch x := v.(type) {
	case []any:
		p.elems = make([]proto, len(x))
		for i, e := range x {
			p.elems[i].set(e)
		}
	case map[string]any:
		p.dict = true
		keys := sortedKeys(x)
		p.keys = make([]starlark.Value, len(keys))
		p.elems = make([]proto, len(keys))
		for i, k := range keys {
			p.keys[i] = starlark.String(k)
			p.elems[i].set(x[k])
		}
	default:
		// nil, bool, int64, float64 or string: the budget is counted
		// elsewhere and cannot fail here.
		p.leaf, _ = toStarlark(v, &budget{maxBytes: math.MaxInt, maxItems: math.MaxInt}, 0)
	}
}

// messageProto is a message dict kept to be copied, as messageValue
// makes it: role, content, then the optional keys that are set.
type messageProto struct {
	role, content, name, toolCallID starlark.Value // name and toolCallID nil when empty
	calls                           *proto         // nil without tool calls
}

func newMessageProto(m *schemas.Message) messageProto {
	p := messageProto{role: starlark.String(m.Role), content: starlark.String(m.Content)}
	if m.Name != "" {
		p.name = starlark.String(m.Name)
	}
	if m.ToolCallID != "" {
		p.toolCallID = starlark.String(m.ToolCallID)
	}
	if len(m.ToolCalls) > 0 {
		p.calls = &proto{elems: make([]proto, len(m.ToolCalls))}
		for i, tc := range m.ToolCalls {
			p.calls.elems[i] = proto{dict: true,
				keys: toolCallKeys,
				elems: []proto{
					{leaf: starlark.String(tc.ID)},
					{leaf: starlark.String(tc.Name)},
					{leaf: starlark.String(tc.Arguments)},
				},
			}
		}
	}
	return p
}

var toolCallKeys = []starlark.Value{starlark.String("id"), starlark.String("name"), starlark.String("arguments")}

// value is a fresh copy of p.
func (p *messageProto) value() starlark.Value {
	d := starlark.NewDict(5)
	_ = d.SetKey(starlark.String("role"), p.role)
	_ = d.SetKey(starlark.String("content"), p.content)
	if p.name != nil {
		_ = d.SetKey(starlark.String("name"), p.name)
	}
	if p.toolCallID != nil {
		_ = d.SetKey(starlark.String("tool_call_id"), p.toolCallID)
	}
	if p.calls != nil {
		_ = d.SetKey(starlark.String("tool_calls"), p.calls.value())
	}
	return d
}

// value is a fresh copy of p.
func (p *proto) value() starlark.Value {
	switch {
	case p.leaf != nil:
		return p.leaf
	case p.dict:
		d := starlark.NewDict(len(p.keys))
		for i, k := range p.keys {
			_ = d.SetKey(k, p.elems[i].value()) // a fresh dict takes string keys
		}
		return d
	}
	elems := make([]starlark.Value, len(p.elems))
	for i := range p.elems {
		elems[i] = p.elems[i].value()
	}
	return starlark.NewList(elems)
}
