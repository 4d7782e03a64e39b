// Package registry names the domains the episode loop can play and builds
// them with the outside tools they need.
//
// Contract:
//   - Names lists every domain Lookup knows, sorted.
//   - Lookup returns a fresh episode.Domain for a name, wired to the tools in
//     Resources. A missing tool is not an error here: the domain still
//     plays, and each call of that tool becomes a ToolError ("no retriever
//     configured", "no code runner configured") that the harness feeds back
//     to the model, so a run without a sandbox fails loudly per episode
//     rather than not at all. An unknown name is an error listing the known
//     ones.
//
// It is the only place that imports every domain; commands and stages ask
// it rather than importing domains one by one.
package registry
