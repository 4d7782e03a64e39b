package slurmtest

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// daemons are the commands (/proc/PID/comm) of a cluster's daemons.
var daemons = []string{"munged", "slurmctld", "slurmd", "slurmstepd", "slurmscriptd"}

// sweep kills what a broken cluster leaves running: the daemons, the
// slurmstepd and job processes that carry its SLURM_CONF (daemons are
// started with it, and slurmd passes it on to steps and jobs), and, when
// dir is not empty, a watchdog of dir other than this process. Commands of
// test processes (sbatch, squeue, the test binaries themselves) carry
// SLURM_CONF too but are neither daemons nor jobs, so they are left
// alone. It returns the pids it killed.
func sweep(conf, dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var killed []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		vars := environ(pid)
		ours := slices.Contains(vars, "SLURM_CONF="+conf)
		isWatchdog := dir != "" && slices.Contains(vars, watchdogEnv+"="+dir)
		if !ours && !isWatchdog {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		isDaemon := slices.Contains(daemons, strings.TrimSpace(string(comm)))
		isJob := slices.ContainsFunc(vars, func(v string) bool { return strings.HasPrefix(v, "SLURM_JOB_ID=") })
		if isWatchdog || ours && (isDaemon || isJob) {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed = append(killed, pid)
			}
		}
	}
	return killed
}

func environ(pid int) []string {
	env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	if err != nil {
		return nil
	}
	return strings.Split(string(env), "\x00")
}

// carries reports whether process pid was started with variable kv
// ("NAME=value") in its environment.
func carries(pid int, kv string) bool { return slices.Contains(environ(pid), kv) }

// zombie reports whether pid has exited but not been reaped (its parent
// may be a container's init that never reaps).
func zombie(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command, which may hold spaces.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}
