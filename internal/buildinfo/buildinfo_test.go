package buildinfo

import (
	"strings"
	"testing"
)

func TestVersionIsStableAndNonEmpty(t *testing.T) {
	v := Version()
	if v == "" || strings.ContainsAny(v, " \n") {
		t.Fatalf("Version() = %q; want one non-empty word", v)
	}
	if Version() != v {
		t.Fatal("Version() changed between calls")
	}
}
