package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// ToolSpec is a native function tool a domain offers (Contract.Tools): the
// name the loop executes, and the description and JSON-schema parameters
// the model is shown unless the harness gives its own.
type ToolSpec struct {
	Name        string
	Description string
	// Parameters is the JSON schema of the arguments object.
	Parameters map[string]any
}

// Tool is a native tool of a loaded harness: what the loop offers the model
// on every call, and the schema it checks each call's arguments against.
type Tool struct {
	Name        string
	Description string
	Parameters  map[string]any
	schema      *jsonschema.Schema
}

// CheckArgs checks the arguments of a call of t against its parameters
// schema. The error says what is wrong, in words the model can act on.
func (t Tool) CheckArgs(args map[string]any) error {
	if t.schema == nil {
		return nil
	}
	err := t.schema.Validate(args)
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		return fmt.Errorf("the arguments do not match the parameters of %s: %s", t.Name, schemaProblems(ve))
	}
	return err
}

var english = message.NewPrinter(language.English)

// schemaProblems is a one-line list of the leaf errors of a validation,
// each with the place in the arguments it concerns.
func schemaProblems(ve *jsonschema.ValidationError) string {
	var out []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			where := "/" + strings.Join(e.InstanceLocation, "/")
			out = append(out, fmt.Sprintf("at %s: %s", where, e.ErrorKind.LocalizedString(english)))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	// A model can write arguments with thousands of wrong items; the first
	// few say what is wrong.
	const most = 8
	if len(out) > most {
		out = append(out[:most], fmt.Sprintf("and %d more", len(out)-most))
	}
	return strings.Join(out, "; ")
}

// noLoader refuses every $ref to another document: a tool schema is
// self-contained, and a harness must not make whale read files or URLs.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("$ref to %s: a tool schema may only refer to itself", url)
}

// compileParameters checks that params is a JSON schema of an arguments
// object and compiles it.
func compileParameters(params map[string]any) (*jsonschema.Schema, error) {
	if t, _ := params["type"].(string); t != "object" {
		return nil, fmt.Errorf(`parameters must be a JSON schema with "type": "object", got type %v`, params["type"])
	}
	// The compiler wants the document as encoding/json decodes it.
	data, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("parameters as JSON: %w", err)
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(data)))
	if err != nil {
		return nil, fmt.Errorf("parameters as JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	c.DefaultDraft(jsonschema.Draft2020)
	const loc = "tool-parameters.json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("parameters: %w", err)
	}
	sch, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("parameters are not a valid JSON schema: %v", err)
	}
	return sch, nil
}

// ToolShape is one entry of TOOLS: the name of a tool the domain offers, or
// a dict that names one and may replace its description and parameters.
var ToolShape = OneOf{StringShape, Record{Name: "tool", Fields: []Field{
	{Name: "name", Shape: StringShape},
	{Name: "description", Shape: StringShape, Optional: true},
	{Name: "parameters", Shape: DictShape, Optional: true},
}}}

// toolChoices are the TOOL_CHOICE values other than a tool's name.
var toolChoices = []string{"", "auto", "none", "required"}

// resolveTools turns the harness's TOOLS and TOOL_CHOICE into the tools the
// loop offers. Problems are placed at the constant (at) and name the entry
// and what the domain offers.
func (h *Harness) resolveTools(at func(name string) Pos) []Problem {
	var problems []Problem
	add := func(name, format string, args ...any) {
		problems = append(problems, Problem{Pos: at(name), Msg: "constant " + name + fmt.Sprintf(format, args...)})
	}
	offered := h.contract.Tools
	names := make([]string, len(offered))
	for i, t := range offered {
		names[i] = t.Name
	}
	list, _ := h.consts["TOOLS"].([]any) // a contract without Base's constants has none
	for i, entry := range list {
		var t Tool
		switch e := entry.(type) {
		case string:
			t.Name = e
		case map[string]any:
			t.Name, _ = e["name"].(string)
			t.Description, _ = e["description"].(string)
			t.Parameters, _ = e["parameters"].(map[string]any)
		}
		j := slices.Index(names, t.Name)
		if j < 0 {
			if len(names) == 0 {
				add("TOOLS", "[%d]: domain %s offers no native tools", i, h.contract.Name)
			} else {
				add("TOOLS", "[%d]: domain %s offers no tool %q (it offers %s)", i, h.contract.Name, t.Name, strings.Join(names, ", "))
			}
			continue
		}
		if slices.ContainsFunc(h.tools, func(o Tool) bool { return o.Name == t.Name }) {
			add("TOOLS", "[%d]: tool %q is listed twice", i, t.Name)
			continue
		}
		if t.Description == "" {
			t.Description = offered[j].Description
		}
		if t.Parameters == nil {
			t.Parameters = offered[j].Parameters
		}
		sch, err := compileParameters(t.Parameters)
		if err != nil {
			add("TOOLS", "[%d] (%s): %v", i, t.Name, err)
			continue
		}
		t.schema = sch
		h.tools = append(h.tools, t)
	}
	choice, _ := h.consts["TOOL_CHOICE"].(string)
	switch {
	case choice == "":
	case len(list) == 0:
		add("TOOL_CHOICE", " %q needs TOOLS: no native tool is offered", choice)
	case !slices.Contains(toolChoices, choice) && !slices.ContainsFunc(h.tools, func(t Tool) bool { return t.Name == choice }):
		add("TOOL_CHOICE", " %q: want auto, none, required or the name of a tool in TOOLS", choice)
	}
	return problems
}

// Tools are the native tools the harness offers the model, in TOOLS order;
// nil when it uses none (a tag-based harness).
func (h *Harness) Tools() []Tool { return slices.Clone(h.tools) }

// Tool returns the harness's native tool of that name.
func (h *Harness) Tool(name string) (Tool, bool) {
	i := slices.IndexFunc(h.tools, func(t Tool) bool { return t.Name == name })
	if i < 0 {
		return Tool{}, false
	}
	return h.tools[i], true
}

// ToolChoice is TOOL_CHOICE: "" (not sent), auto, none, required, or the
// name of the one tool the model must call.
func (h *Harness) ToolChoice() string {
	s, _ := h.consts["TOOL_CHOICE"].(string)
	return s
}

// Stop is STOP: the harness's stop sequences.
func (h *Harness) Stop() []string {
	list, _ := h.consts["STOP"].([]any)
	out := make([]string, 0, len(list))
	for _, v := range list {
		out = append(out, v.(string))
	}
	return out
}

// validateTools checks the tools a domain offers; a failure is a bug in the
// domain's Go code.
func validateTools(tools []ToolSpec) []string {
	var errs []string
	seen := map[string]bool{}
	for _, t := range tools {
		if !identRE.MatchString(t.Name) || seen[t.Name] {
			errs = append(errs, fmt.Sprintf("tool %q: not an identifier, or offered twice", t.Name))
		}
		seen[t.Name] = true
		if _, err := compileParameters(t.Parameters); err != nil {
			errs = append(errs, fmt.Sprintf("tool %s: %v", t.Name, err))
		}
	}
	return errs
}
