package main

import (
	"strings"
	"testing"

	"github.com/whalerun/whale/harness"
)

func TestHarnessDoc(t *testing.T) {
	tests := []struct {
		domain string
		wants  []string
	}{
		{"chess", []string{"# Harness contract: chess", "`BOARD_FORMAT`", "`legal_moves(fen, notation)`", "`parse_move(fen, text)`", "`parse_action(text, state)`"}},
		{"math", []string{"# Harness contract: math", "`CODE_TOOL`", "`MAX_OUTPUT_CHARS`", "`extract_boxed(text)`", "`normalize_answer(s)`"}},
		{"searchqa", []string{"# Harness contract: searchqa", "`TOPK`", "`MAX_DOC_CHARS`", "`extract_answer(text)`", "`normalize_answer(s)`"}},
		{"demo", []string{"# Harness contract: demo", "`ANSWER_CUE`", "`LENIENT_PARSE`"}},
	}
	for _, tt := range tests {
		t.Run(tt.domain, func(t *testing.T) {
			r := whale(t, "harness", "doc", tt.domain)
			r.mustCode(t, exitOK, tt.wants...)
			c, err := domainContract(tt.domain)
			if err != nil {
				t.Fatal(err)
			}
			if want := c.Doc(); r.stdout != want {
				t.Errorf("stdout is not the contract's Doc()")
			}
		})
	}
}

func TestHarnessCheck(t *testing.T) {
	valid := `MAX_TURNS = 6
BOARD_FORMAT = "ascii"
SYSTEM_PROMPT = """You solve chess puzzles.
Reply with one move in <answer></answer>."""

def parse_action(text, state):
    m = re.search(r"<answer>\s*(\S+)\s*</answer>", text)
    if not m:
        return {"kind": "invalid", "error": "no <answer> tag"}
    return {"kind": "move", "move": m.group(1)}

def format_observation(obs):
    return board_ascii(obs["fen"], True) + "\n" + ", ".join(legal_moves(obs["fen"], MOVE_FORMAT))

MAX_TURN = 3
`
	path := writeFile(t, "h.star", valid)
	id := harness.SourceID([]byte(valid))

	r := whale(t, "harness", "check", path, "--domain", "chess")
	r.mustCode(t, exitOK, id, "MAX_TURNS = 6", `BOARD_FORMAT = "ascii"`, "SYSTEM_PROMPT", path+":1",
		"hooks defined: 2 of 6", "parse_action", "format_observation", path+":6", "warnings: 1", "MAX_TURN")
	for _, notSet := range []string{"  FORMAT_RETRIES", "  should_stop", "  MOVE_FORMAT"} {
		if strings.Contains(r.stdout, notSet) {
			t.Errorf("stdout lists %q, which the harness does not define:\n%s", notSet, r.stdout)
		}
	}

	// Flags may come first, too; a harness of another domain's helpers
	// does not load.
	whale(t, "harness", "check", "--domain", "chess", path).mustCode(t, exitOK, id)
	whale(t, "harness", "check", path, "--domain", "math").mustCode(t, exitUsage, path+":13", "board_ascii")
}

func TestHarnessCheckErrors(t *testing.T) {
	tests := []struct {
		name, src string
		domain    string
		wants     []string
	}{
		{"syntax error", "MAX_TURNS = 3\ndef parse_action(text, state):\n    return )\n", "math", []string{"h.star:3:12", "does not load"}},
		{"wrong constant type", "TOPK = \"three\"\n", "searchqa", []string{"h.star:1", "TOPK", "int"}},
		{"constant out of range", "\n\nTOPK = 51\n", "searchqa", []string{"h.star:3", "TOPK", "maximum"}},
		{"several problems on one line", "TOPK = \"a\"\nMAX_DOC_CHARS = True\n", "searchqa", []string{"h.star:1", "h.star:2", "; "}},
		{"unknown domain", "", "go", []string{`"go"`, "chess, demo, math, searchqa"}},
		{"no domain", "", "", []string{"--domain"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, "h.star", tt.src)
			args := []string{"harness", "check", path}
			if tt.domain != "" {
				args = append(args, "--domain", tt.domain)
			}
			whale(t, args...).mustCode(t, exitUsage, tt.wants...)
		})
	}
}

func TestHarnessArgs(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		wants []string
	}{
		{"doc unknown domain", []string{"harness", "doc", "poker"}, []string{`"poker"`, "chess, demo, math, searchqa"}},
		{"doc without domain", []string{"harness", "doc"}, []string{"one domain"}},
		{"check without file", []string{"harness", "check", "--domain", "chess"}, []string{"one harness file"}},
		{"check missing file", []string{"harness", "check", "/nonexistent/h.star", "--domain", "chess"}, []string{"/nonexistent/h.star"}},
		{"unknown subcommand", []string{"harness", "lint"}, []string{`"lint"`, "whale harness --help"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			whale(t, tt.args...).mustCode(t, exitUsage, tt.wants...)
		})
	}
}
