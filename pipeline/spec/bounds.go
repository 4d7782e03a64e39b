package spec

import (
	"fmt"

	"github.com/goccy/go-yaml/token"
)

// Bounds on an experiment file, checked before the YAML parser builds its
// tree (its memory grows much faster than the input with nesting: 40 KB
// nested 20,000 levels deep took 700 MB). A real experiment file is a few
// KB nested a few levels deep.
const (
	// MaxFileBytes bounds the size of an experiment file.
	MaxFileBytes = 128 << 10
	// MaxDepth bounds the nesting of mappings and lists.
	MaxDepth = 64
	// MaxKeys bounds the keys of one block mapping: the parser's time and
	// memory grow with their square (8,000 keys took 280 MB).
	MaxKeys = 1000
	// maxNesting bounds the depth summed over the tokens, which is what
	// the parser's memory follows (about 30 bytes each): a file of many
	// nests each within MaxDepth costs as much as one deep nest.
	maxNesting = 1 << 18
)

// checkShape returns the first token at which tokens nest deeper than
// MaxDepth, or their depths summed pass maxNesting, or a block mapping
// gets more than MaxKeys keys, and what is wrong; nil when none is.
//
// Flow collections ([ ], { }) count by their brackets; block collections
// by the columns of their indicators (-, ?, and the key before :), each
// column deeper than the enclosing one a level, as the parser nests them.
// It is an estimate from above, which is what a bound needs.
func checkShape(tokens token.Tokens) (*token.Token, string) {
	type level struct{ col, keys int }
	var block []level // the open block collections, by increasing column
	sum, flow := 0, 0
	var prev *token.Token
	for _, tk := range tokens {
		col := 0
		if tk.Position != nil {
			col = tk.Position.Column
		}
		switch tk.Type {
		case token.SequenceStartType, token.MappingStartType:
			flow++
		case token.SequenceEndType, token.MappingEndType:
			flow = max(flow-1, 0)
		case token.DocumentHeaderType, token.DocumentEndType:
			flow, block = 0, block[:0]
		case token.SequenceEntryType, token.MappingKeyType, token.MappingValueType:
			if flow > 0 {
				break
			}
			if tk.Type == token.MappingValueType && prev != nil && prev.Position != nil {
				col = prev.Position.Column // a mapping sits at its keys' column
			}
			for len(block) > 0 && block[len(block)-1].col > col {
				block = block[:len(block)-1]
			}
			if len(block) == 0 || block[len(block)-1].col < col {
				block = append(block, level{col: col})
			}
			if top := &block[len(block)-1]; tk.Type == token.MappingValueType {
				if top.keys++; top.keys > MaxKeys {
					return tk, fmt.Sprintf("a mapping with more than %d keys; an experiment file's mappings have a few", MaxKeys)
				}
			}
		}
		depth := flow + len(block)
		if depth > MaxDepth {
			return tk, fmt.Sprintf("the YAML nests deeper than %d levels of mappings and lists; an experiment file needs a few", MaxDepth)
		}
		if sum += depth; sum > maxNesting {
			return tk, fmt.Sprintf("the YAML holds too many nested values (their depths add up to more than %d); an experiment file is a few KB nested a few levels", maxNesting)
		}
		prev = tk
	}
	return nil, ""
}
