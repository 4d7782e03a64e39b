//go:build unix

package local

import "syscall"

// cpuSeconds is the process's user+system CPU time. Benchmarks report
// work per CPU-second too, because wall-clock rates on a shared machine
// say more about the neighbours than about this code.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}
