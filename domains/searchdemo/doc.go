// Package searchdemo is the search demo's world: invented people, three
// facts each, stated only in an embedded passage corpus that the
// search-QA domain (domains/searchqa) searches through its native
// `search` tool over a BM25 index, and the built-in model pretrained to
// use that tool. The harness decides what the model sees (how many
// passages, how they are shown); the weights decide how reliably the
// model searches for the name and copies the asked fact. README.md says
// why and what was measured.
package searchdemo
