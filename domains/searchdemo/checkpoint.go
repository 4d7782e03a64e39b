package searchdemo

import _ "embed"

// pretrained is the committed starting checkpoint (testdata/pretrained.wlm;
// README.md says how it is rebuilt), carried in the binary so that `whale
// demo` runs on a machine with nothing but whale.
//
//go:embed testdata/pretrained.wlm
var pretrained []byte

// PretrainedCheckpoint returns a copy of the starting checkpoint's bytes
// (the WHALELM1 format of models/local).
func PretrainedCheckpoint() []byte { return append([]byte(nil), pretrained...) }
