// Package registry is the table of domains: each Entry names a domain,
// builds it with the outside tools it needs, and carries the defaults its
// experiments take (learning rate, the built-in model). The experiment
// spec validates a domain against it; the runtime and the CLI build
// domains through it. Adding a domain is its package and one Register
// call (in this package's init for the built-in ones).
//
// Contract:
//   - All lists the entries in the order registered; Names their names,
//     sorted. Register rejects a taken or malformed name, a missing
//     constructor and an unknown tool.
//   - Lookup returns a fresh episode.Domain for a name, wired to the tools in
//     Resources. A missing tool is not an error here: the domain still
//     plays, and each call of that tool becomes a ToolError ("no retriever
//     configured", "no code runner configured") that the harness feeds back
//     to the model, so a run without a sandbox fails loudly per episode
//     rather than not at all. An unknown name is an error listing the known
//     ones.
//   - Built-in harnesses: Entry.Harness(name) is the source of a domain's
//     harness by name, HarnessNames the names, "h0" (BaselineHarness, the
//     domain's Baseline, the paper's harness) first. The paper's domains
//     keep their earlier tag-based harnesses as named variants (h0-tags,
//     h0-compact); an experiment's harness.initial may give any of them.
//
// It is the only place that imports every domain; commands and stages ask
// it rather than importing domains one by one.
package registry
