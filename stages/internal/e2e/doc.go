// Package e2e holds only tests: rollout → evaluate end to end on each real
// domain (searchqa, math, chess) with the data the project ships in its
// testdata folders, on a file:// root and on a real S3 server (versitygw).
//
// The model is a FAKE: a modeltest server whose handler knows the tasks and
// solves about half of the episodes, deciding from each request's task and
// seed. The tests compute what every episode must score from the same
// decision and the documented seed formula, never from the stages' output,
// so a stage that loses, duplicates or misgrades an episode fails them.
package e2e
