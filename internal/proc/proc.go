// Package proc names this process well enough that another process on
// the same machine can tell later that it has ended: what a lease
// records so that the next `whale run` after a crash need not wait for
// the lease to expire.
//
// A process id alone is not enough: ids are reused, a machine reboots,
// two machines (cloned VMs, containers) may share a host name, and two
// PID namespaces each have their own ids. So an Identity also holds the
// machine id, the kernel's boot id, the PID namespace, the user id and
// the process's start time (in clock ticks since boot, from
// /proc/<pid>/stat). Gone answers "ended" only when it can tell: on the
// same host and machine, either after a reboot that came after the
// holder started, or in the same boot and PID namespace, for a process
// of the same user (whose processes /proc's hidepid never hides), with
// no process of that id started at that time. Anything else (another
// host or machine, another namespace or user, no /proc, a /proc of
// another PID namespace) is "cannot tell", and the caller waits as
// before.
package proc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Identity names one process.
type Identity struct {
	Host string
	PID  int
	// UID is the process's real user id; -1 where unknown.
	UID int
	// MachineID is /etc/machine-id; empty where there is none.
	MachineID string
	// BootID is the kernel's boot id (/proc/sys/kernel/random/boot_id);
	// empty where there is none.
	BootID string
	// PIDNamespace is the process's PID namespace, as the link
	// /proc/self/ns/pid reads ("pid:[4026531836]"); empty where unknown.
	PIDNamespace string
	// Start is the process's start time in clock ticks after boot; 0
	// where unknown.
	Start uint64
}

// procRoot is /proc; tests point it elsewhere.
var procRoot = "/proc"

// Self is this process's identity. Parts it cannot read stay empty; so do
// the namespace and start time when /proc is not this PID namespace's
// (its "self" is not this process), since they would name another one.
func Self() Identity {
	host, _ := os.Hostname()
	id := Identity{Host: host, PID: os.Getpid(), UID: os.Getuid(), MachineID: machineID(), BootID: bootID()}
	if self, err := os.Readlink(procRoot + "/self"); err == nil && self == strconv.Itoa(id.PID) {
		id.PIDNamespace = pidNamespace("self")
		id.Start, _ = startTime(self)
	}
	return id
}

// Of is the identity of the running process pid on this host, as Self
// would give in that process.
func Of(pid int) (Identity, error) {
	id := Self()
	id.PID, id.PIDNamespace = pid, pidNamespace(strconv.Itoa(pid))
	id.UID = -1
	if fi, err := os.Stat(procRoot + "/" + strconv.Itoa(pid)); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			id.UID = int(st.Uid)
		}
	}
	var err error
	if id.Start, err = startTime(strconv.Itoa(pid)); err != nil {
		return Identity{}, fmt.Errorf("process %d: %w", pid, err)
	}
	return id, nil
}

// Gone reports whether the process id names has ended, and why, when
// that can be told from this machine: see the package doc. started is
// when the holder is known to have been running (a lease's acquisition,
// on the holder's clock): a reboot before it does not end it. ok is false
// when it cannot tell.
func (id Identity) Gone(self Identity, started time.Time) (why string, ok bool) {
	if id.Host == "" || id.Host != self.Host || id.MachineID == "" || id.MachineID != self.MachineID ||
		id.BootID == "" || self.BootID == "" || id.PID <= 0 {
		return "", false
	}
	if id.BootID != self.BootID {
		if boot, err := bootTime(); err != nil || !boot.After(started) {
			return "", false
		}
		return fmt.Sprintf("host %s has rebooted since (boot id %s, now %s)", id.Host, short(id.BootID), short(self.BootID)), true
	}
	if id.PIDNamespace == "" || id.PIDNamespace != self.PIDNamespace || id.Start == 0 || self.Start == 0 ||
		id.UID < 0 || id.UID != self.UID {
		return "", false
	}
	start, err := startTime(strconv.Itoa(id.PID))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("no process %d runs on host %s", id.PID, id.Host), true
	case err != nil:
		return "", false
	case start != id.Start:
		return fmt.Sprintf("process %d on host %s is another process (started at tick %d, not %d)", id.PID, id.Host, start, id.Start), true
	}
	return "", false
}

func machineID() string {
	b, err := os.ReadFile("/etc/machine-id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// bootTime is when this machine booted (btime in /proc/stat).
func bootTime() (time.Time, error) {
	b, err := os.ReadFile(procRoot + "/stat")
	if err != nil {
		return time.Time{}, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			sec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("%s/stat: btime %q: %w", procRoot, strings.TrimSpace(v), err)
			}
			return time.Unix(sec, 0), nil
		}
	}
	return time.Time{}, fmt.Errorf("%s/stat: no btime", procRoot)
}

func bootID() string {
	b, err := os.ReadFile(procRoot + "/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func pidNamespace(pid string) string {
	ns, err := os.Readlink(procRoot + "/" + pid + "/ns/pid")
	if err != nil {
		return ""
	}
	return ns
}

// startTime reads field 22 of /proc/<pid>/stat, the start time in clock
// ticks after boot. The second field, the command name, is in
// parentheses and may hold spaces and parentheses itself: the fields
// after it start after the last ")".
func startTime(pid string) (uint64, error) {
	b, err := os.ReadFile(procRoot + "/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("%s/%s/stat: no command name", procRoot, pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (the state), so field 22 is f[19].
	if len(f) < 20 {
		return 0, fmt.Errorf("%s/%s/stat: %d fields after the command name, want 20 or more", procRoot, pid, len(f))
	}
	return strconv.ParseUint(f[19], 10, 64)
}

func short(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}
