// Package buildinfo tells which whale built an artifact, so that every
// manifest and run.json can name the code that wrote it.
package buildinfo

import (
	"runtime/debug"
	"sync"
)

// version is set at link time: -ldflags "-X github.com/whalerun/whale/internal/buildinfo.version=v0.1.0".
var version = ""

var once = sync.OnceValue(func() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		v += "+" + rev + dirty
	}
	return v
})

// Version is whale's version string: the link-time version if set, else the
// module version and VCS revision from the build info, else "devel".
func Version() string { return once() }
