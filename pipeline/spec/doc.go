// Package spec defines the experiment file a researcher writes and the frozen
// run.json that `whale init` derives from it.
//
// Contract:
//   - Parse/Load decode YAML strictly: an unknown field, a wrong type, a
//     duplicate key or a syntax error is an *Error that names the file, line,
//     column and field path. All problems found are returned together as an
//     ErrorList.
//   - A file is refused before parsing when it is larger than MaxFileBytes
//     or nests deeper than MaxDepth; counts are bounded (the Max constants
//     of validate.go), and an integer beyond 64 bits is said to be one.
//   - Load resolves relative paths (PathFields: model.checkpoint) against
//     the file's directory; Parse leaves them as written. ReadInputs records
//     what the paths hold (run.json's inputs: a small file copied into the
//     bucket, a large one or a directory pinned by a digest of its
//     listing); Run.CheckInputs says, as an *InputChangedError (which is
//     ErrSpecMismatch), when a path holds something else (a path missing
//     on this machine is not checked).
//   - A parsed Experiment starts from Defaults() (the paper's settings), gets
//     the fields that depend on other fields from Normalize(), and passes
//     Validate(). Parse returns nothing else.
//   - Read returns a Draft: the file decoded and normalized, with what
//     validation finds kept apart (Draft.Problems); Load is Read refusing
//     a draft with problems. Draft.Reinit compares a draft with the run of
//     its name that exists before judging it: a run frozen before a check
//     existed is the same run still, the problems its file has today
//     warnings, and a run frozen before paths were resolved is compared
//     from the file's directory or the one init runs in (LegacyPaths).
//   - Freeze turns a valid Experiment into a Run whose SpecDigest is the sha256
//     of the canonical JSON of the normalized spec: compact, object keys sorted,
//     so the digest does not depend on the key order or formatting of the YAML.
//     DecodeRun verifies that digest when run.json is read back.
//   - The names of harness.proposer and finetune.backend are those of the
//     stages' tables, propose.Backends() and finetune.Backends(); the checks of
//     a backend's own settings are one entry of proposerChecks or
//     finetuneChecks (validate.go), for a backend that has any.
//   - Diff names the field paths in which two specs differ; it is what an
//     error about "the same run with a different spec" shows.
//   - A spec never holds a secret (secrets.go): URLs that redaction would
//     change, credential-named keys in free-form maps, the value of a
//     credential variable of whale's environment, or a literal token in a
//     command (an assignment or flag, an Authorization or X-Api-Key
//     header, a bearer token, a JSON credential field) are refused,
//     naming the field but never the value, and saying which *_env
//     setting or variable to use instead.
//
// To add a field: add it to the struct with yaml and json tags, its default to
// Defaults (or Normalize when it depends on other fields) and its checks to
// Validate. The decoder, the canonical form and Diff follow the tags.
package spec
