package harness

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Doc renders the contract as Markdown: constants with types, ranges and
// defaults, hooks with parameters, results and defaults, the state dict,
// the builtins and helpers, and the sandbox's rules. Proposers receive this
// text; `whale harness doc D` prints it.
func (c *Contract) Doc() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Harness contract: %s\n\n", c.Name)
	if c.Intro != "" {
		b.WriteString(strings.TrimSpace(c.Intro))
		b.WriteString("\n\n")
	}

	b.WriteString("## Constants\n\n")
	b.WriteString("Define any of these at the top level of the module. A constant left out takes its default, and hooks can read every constant by name either way; `defaults.NAME` is always the default.\n\n")
	for _, k := range c.Constants {
		fmt.Fprintf(&b, "### `%s` — %s", k.Name, constType(k))
		b.WriteString("\n\n")
		if k.Doc != "" {
			b.WriteString(strings.TrimSpace(k.Doc))
			b.WriteString("\n\n")
		}
		if k.Type == TypeTemplate && len(k.Fields) > 0 {
			fmt.Fprintf(&b, "Fields: `{%s}`.\n\n", strings.Join(k.Fields, "}`, `{"))
		}
		b.WriteString(defaultBlock(k.Default))
	}

	b.WriteString("## Hooks\n\n")
	b.WriteString("Define any of these as functions; the loop calls them with positional arguments. A hook left out runs its default, which a hook of yours may call as `defaults.NAME(...)`.\n\n")
	for _, h := range c.Hooks {
		fmt.Fprintf(&b, "### `%s(%s)` → %s\n\n", h.Name, strings.Join(h.Params, ", "), h.Returns)
		if h.Doc != "" {
			b.WriteString(strings.TrimSpace(h.Doc))
			b.WriteString("\n\n")
		}
		if r, ok := h.Returns.(ListOf); ok {
			if rec, ok := r.Elem.(Record); ok && rec.Name != "" {
				fmt.Fprintf(&b, "A %s is `%s`.\n\n", rec.Name, rec.Literal())
			}
		}
		if h.DefaultDoc != "" {
			fmt.Fprintf(&b, "Default: %s\n\n", strings.TrimSpace(h.DefaultDoc))
		}
	}

	if len(c.Tools) > 0 {
		b.WriteString("## Tools\n\n")
		b.WriteString("The native function tools this domain runs; list in `TOOLS` the ones the model is offered. Each is shown with the description and JSON-schema parameters it gets unless TOOLS gives its own.\n\n")
		for _, t := range c.Tools {
			fmt.Fprintf(&b, "### `%s`\n\n%s\n\n", t.Name, strings.TrimSpace(t.Description))
			params, _ := json.MarshalIndent(t.Parameters, "", "  ")
			fmt.Fprintf(&b, "Parameters:\n\n````json\n%s\n````\n\n", params)
		}
	}

	if c.StateDoc != "" {
		b.WriteString("## State\n\n")
		b.WriteString(strings.TrimSpace(c.StateDoc))
		b.WriteString("\n\n")
	}

	if len(c.Helpers) > 0 {
		b.WriteString("## Domain helpers\n\n")
		for _, name := range slices.Sorted(maps.Keys(c.Helpers)) {
			hb := c.Helpers[name]
			fmt.Fprintf(&b, "- `%s(%s)`", name, strings.Join(hb.Params, ", "))
			if hb.Returns != "" {
				fmt.Fprintf(&b, " → %s", hb.Returns)
			}
			if hb.Doc != "" {
				b.WriteString(": ")
				b.WriteString(strings.TrimSpace(hb.Doc))
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}

	b.WriteString(builtinsDoc)
	return b.String()
}

func constType(k ConstSpec) string {
	t := string(k.Type)
	switch {
	case k.Min != nil && k.Max != nil:
		t += fmt.Sprintf(", %d to %d", *k.Min, *k.Max)
	case k.Min != nil:
		t += fmt.Sprintf(", at least %d", *k.Min)
	case k.Max != nil:
		t += fmt.Sprintf(", at most %d", *k.Max)
	}
	if k.Shape != nil {
		t += " (" + k.Shape.String() + ")"
	}
	return t
}

func defaultBlock(v any) string {
	switch x := v.(type) {
	case string:
		if !strings.Contains(x, "\n") && len(x) <= 80 && !strings.Contains(x, "`") {
			return fmt.Sprintf("Default: `%q`\n\n", x)
		}
		return "Default:\n\n````text\n" + x + "\n````\n\n"
	}
	nv, err := normalize(v)
	if err != nil {
		return fmt.Sprintf("Default: `%v`\n\n", v)
	}
	data, err := json.Marshal(nv)
	if err != nil {
		return fmt.Sprintf("Default: `%v`\n\n", v)
	}
	if b, ok := nv.(bool); ok {
		if b {
			return "Default: `True`\n\n"
		}
		return "Default: `False`\n\n"
	}
	return fmt.Sprintf("Default: `%s`\n\n", data)
}

const builtinsDoc = "## Builtins\n\n" +
	"Besides Starlark's own (`len`, `str`, `int`, `float`, `dict`, `list`, `range`, `sorted`, `enumerate`, `zip`, `min`, `max`, `any`, `all`, `print`, `fail`, `type`, ... and the string, list and dict methods):\n\n" +
	"- `re`: Python's `re` over RE2 — `search`, `match`, `fullmatch`, `findall`, `finditer`, `split`, `sub` (repl a string with `\\1`/`\\g<name>` or a function of the match), `escape`, `compile` (a pattern with the same methods), flags `re.I`, `re.M`, `re.S`. A match has `group()`, `groups()`, `groupdict()`, `start()`, `end()`, `span()` and `m[1]`; offsets are byte offsets, as Starlark string indices are. RE2 has no backreferences and no lookaround: such patterns fail with an error saying so.\n" +
	"- `json`: `encode`, `decode`, `indent`, `encode_indent`.\n" +
	"- `math`: `ceil`, `floor`, `sqrt`, `log`, `exp`, `pow`, `fabs`, `inf`, `pi`, `e`, trigonometry, ...\n" +
	"- `truncate(s, n, marker=\"…\", side=\"end\")`: at most n characters, marker included; side \"end\" keeps the start, \"start\" keeps the end, \"middle\" keeps both ends.\n" +
	"- `dedent(s)`: removes the indentation common to every line (Python's textwrap.dedent).\n" +
	"- `defaults`: the contract's defaults, e.g. `defaults.parse_action(text, state)`, `defaults.SYSTEM_PROMPT`.\n\n" +
	"## Rules\n\n" +
	"- The module is Starlark, a deterministic Python dialect: no imports, no `load()`, no files, network, processes, clock or randomness; `isinstance` is `type(x) == \"string\"`.\n" +
	"- Top-level code runs once, when the harness loads; its values are then frozen. Hooks are functions of their arguments: they cannot keep state between calls.\n" +
	"- `while`, top-level `if`/`for`, sets and reassigning a global (`PROMPT += \"...\"`) are allowed; recursion is not.\n" +
	"- Every call has a step limit (about ten million steps) and a deadline; strings made by one builtin call are limited to 1 MiB, `range()` to about a million elements, and hook results to a few MiB.\n" +
	"- Memory is bounded: one operation makes at most a 16 MiB string or a list of about a million elements (`\"x\" * n`, `s + s`, `[0] * n`, `\"%s\" % v`, `s.join(...)`, `str(v)`, slices, ...), one call allocates at most 1 GiB in all (build long strings with `\"\".join(parts)`, not `+=` in a loop), `json.decode` reads at most 1000 levels of nesting, `re` refuses to match a very long string against a complex pattern, and one comparison, `in` test, dict key or set element visits at most about four million nested elements (a sort twice that). Code that passes a limit fails with an error naming it.\n" +
	"- Errors name the file and line; a hook that fails, loops forever or returns the wrong shape fails the episode.\n"
