package proc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestGone(t *testing.T) {
	self := Self()
	if self.BootID == "" || self.MachineID == "" || self.PIDNamespace == "" || self.Start == 0 {
		t.Skipf("no /proc to read here (%+v): Gone can never tell, which TestGoneCannotTell covers", self)
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	child := self
	child.PID = cmd.Process.Pid
	var err error
	if child.Start, err = startTime(strconv.Itoa(child.PID)); err != nil {
		t.Fatal(err)
	}
	if why, ok := child.Gone(self, time.Now()); ok {
		t.Fatalf("a running child is gone: %s", why)
	}
	if why, ok := self.Gone(self, time.Now()); ok {
		t.Fatalf("this process is gone: %s", why)
	}
	reused := child
	reused.Start++
	if why, ok := reused.Gone(self, time.Now()); !ok || !strings.Contains(why, "is another process") {
		t.Fatalf("a reused pid: %q %v", why, ok)
	}
	rebooted := child
	rebooted.BootID = "00000000-0000-0000-0000-000000000000"
	if why, ok := rebooted.Gone(self, time.Now().Add(-10*365*24*time.Hour)); !ok || !strings.Contains(why, "rebooted") {
		t.Fatalf("after a reboot: %q %v", why, ok)
	}
	// A holder that started after this machine booted, with another boot
	// id, runs on another machine that shares the name and machine id (a
	// clone): cannot tell.
	if why, ok := rebooted.Gone(self, time.Now()); ok {
		t.Fatalf("a holder younger than this boot is gone: %s", why)
	}
	// Another machine of the same name: cannot tell.
	clone := rebooted
	clone.MachineID = "another"
	if why, ok := clone.Gone(self, time.Now().Add(-10*365*24*time.Hour)); ok {
		t.Fatalf("a machine with another id is gone: %s", why)
	}
	// Another user's process may be hidden by /proc's hidepid.
	other := child
	other.UID = self.UID + 1
	other.PID = 999999999
	if why, ok := other.Gone(self, time.Now()); ok {
		t.Fatalf("another user's process is gone: %s", why)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if why, ok := child.Gone(self, time.Now()); !ok || !strings.Contains(why, "no process "+strconv.Itoa(child.PID)) {
		t.Fatalf("an ended child: %q %v", why, ok)
	}
}

// TestGoneCannotTell: whatever cannot be checked from here is not gone.
func TestGoneCannotTell(t *testing.T) {
	self := Identity{Host: "a", PID: 10, UID: 1, MachineID: "m", BootID: "b1", PIDNamespace: "pid:[1]", Start: 5}
	for name, id := range map[string]Identity{
		"another host":      {Host: "b", PID: 999999, UID: 1, MachineID: "m", BootID: "b1", PIDNamespace: "pid:[1]", Start: 5},
		"another machine":   {Host: "a", PID: 999999, UID: 1, MachineID: "n", BootID: "b1", PIDNamespace: "pid:[1]", Start: 5},
		"another namespace": {Host: "a", PID: 999999, UID: 1, MachineID: "m", BootID: "b1", PIDNamespace: "pid:[2]", Start: 5},
		"another user":      {Host: "a", PID: 999999, UID: 2, MachineID: "m", BootID: "b1", PIDNamespace: "pid:[1]", Start: 5},
		"no boot id":        {Host: "a", PID: 999999, UID: 1, MachineID: "m", PIDNamespace: "pid:[1]", Start: 5},
		"no machine id":     {Host: "a", PID: 999999, UID: 1, BootID: "b1", PIDNamespace: "pid:[1]", Start: 5},
		"no start time":     {Host: "a", PID: 999999, UID: 1, MachineID: "m", BootID: "b1", PIDNamespace: "pid:[1]"},
		"no namespace":      {Host: "a", PID: 999999, UID: 1, MachineID: "m", BootID: "b1", Start: 5},
		"no pid":            {Host: "a", UID: 1, MachineID: "m", BootID: "b1", PIDNamespace: "pid:[1]", Start: 5},
		"an older record":   {Host: "a", PID: 999999},
		"unknown user (-1)": {Host: "a", PID: 999999, UID: -1, MachineID: "m", BootID: "b1", PIDNamespace: "pid:[1]", Start: 5},
	} {
		if why, ok := id.Gone(self, time.Now()); ok {
			t.Errorf("%s: gone (%s)", name, why)
		}
	}
	if _, ok := (Identity{Host: "a", PID: 1}).Gone(Identity{Host: "a"}, time.Now()); ok {
		t.Error("gone without boot ids")
	}
}

func TestStartTimeParsesOddCommandNames(t *testing.T) {
	dir := t.TempDir()
	old := procRoot
	procRoot = dir
	t.Cleanup(func() { procRoot = old })
	// Fields 3..22 after a command name holding ") (" and spaces.
	rest := "S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 424242 20 21"
	for pid, stat := range map[string]string{
		"7": "7 (we ird) (name) " + rest,
		"8": "8 (x) S 1 2",
		"9": "9 no parens",
	} {
		if err := os.MkdirAll(filepath.Join(dir, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, pid, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := startTime("7"); err != nil || got != 424242 {
		t.Fatalf("startTime = %d, %v", got, err)
	}
	for _, pid := range []string{"8", "9"} {
		if _, err := startTime(pid); err == nil {
			t.Errorf("pid %s: a short stat parsed", pid)
		}
	}
}
