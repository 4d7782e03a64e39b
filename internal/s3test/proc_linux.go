package s3test

import "syscall"

// sysProcAttr makes the server die with the test binary, even when the
// binary is killed by a test timeout before its cleanups run. (Pdeathsig
// follows the spawning OS thread; the Go runtime keeps threads alive unless
// a goroutine exits while locked to one, which this package never does.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// xattrsWork reports whether dir's filesystem takes user extended
// attributes, which versitygw's posix backend keeps object metadata in.
func xattrsWork(dir string) bool {
	err := syscall.Setxattr(dir, "user.whale-probe", []byte("1"), 0)
	if err != nil {
		return false
	}
	_ = syscall.Removexattr(dir, "user.whale-probe")
	return true
}
