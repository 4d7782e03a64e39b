//go:build !linux

package s3test

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }

// xattrsWork is only probed on Linux; elsewhere the sidecar directory is
// the safe choice.
func xattrsWork(string) bool { return false }
