package slurm

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// Lines as slurm-wlm 22.05.8 printed them on the test cluster.
const (
	scontrolFailed  = "JobId=1 JobName=wrap UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 Nice=0 Account=(null) QOS=(null) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=1:0 RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-29T13:40:03 EligibleTime=2026-11-29T13:40:03 AccrueTime=2026-11-29T13:40:03 StartTime=2026-11-29T13:40:05 EndTime=2026-11-29T13:40:05 Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-29T13:40:05 Scheduler=Main Partition=debug AllocNode:Sid=localhost:27939 ReqNodeList=(null) ExcNodeList=(null) NodeList=vm BatchHost=vm NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=1,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=(null) WorkDir=/tmp/slurmprobe StdErr=/tmp/slurmprobe/a.out StdIn=/dev/null StdOut=/tmp/slurmprobe/a.out Power= "
	scontrolPending = "JobId=2 JobName=my job UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901758 Nice=0 Account=(null) QOS=(null) JobState=PENDING Reason=Dependency Dependency=afterok:1(unfulfilled) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 Partition=debug Command=/x/run.sh a=b StdErr=/tmp/b.out StdIn=/dev/null StdOut=/tmp/b.out Power= "
	scontrolArray   = "JobId=3 ArrayJobId=3 ArrayTaskId=1-2 JobName=wrap JobState=PENDING Reason=Resources Dependency=(null) ExitCode=0:0 Partition=debug StdOut=/tmp/c-4294967294.out\n" +
		"JobId=4 ArrayJobId=3 ArrayTaskId=0 JobName=wrap JobState=RUNNING Reason=None Dependency=(null) ExitCode=0:0 Partition=debug StdOut=/tmp/c-0.out\n"
)

func TestParseScontrol(t *testing.T) {
	jobs, err := parseScontrol(scontrolFailed + "\n" + scontrolPending + "\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []Job{
		{ID: "1", Name: "wrap", Partition: "debug", State: StateFailed, Reason: "NonZeroExitCode", ExitCode: "1:0", StdOut: "/tmp/slurmprobe/a.out", StdErr: "/tmp/slurmprobe/a.out"},
		{ID: "2", Name: "my job", Partition: "debug", State: StatePending, Reason: "Dependency", Dependency: "afterok:1(unfulfilled)", ExitCode: "0:0", StdOut: "/tmp/b.out", StdErr: "/tmp/b.out"},
	}
	if len(jobs) != len(want) {
		t.Fatalf("got %d jobs, want %d: %+v", len(jobs), len(want), jobs)
	}
	for i := range want {
		if !jobsEqual(jobs[i], want[i]) {
			t.Errorf("job %d\n got %+v\nwant %+v", i, jobs[i], want[i])
		}
	}
	if _, err := parseScontrol("Nonsense line\n"); err == nil {
		t.Error("a line without JobId parsed")
	}
}

func jobsEqual(a, b Job) bool {
	return a.ID == b.ID && a.ArrayJobID == b.ArrayJobID && a.ArrayTaskID == b.ArrayTaskID && a.Name == b.Name &&
		a.Partition == b.Partition && a.State == b.State && a.Reason == b.Reason && a.Dependency == b.Dependency &&
		a.ExitCode == b.ExitCode && a.StdOut == b.StdOut && a.StdErr == b.StdErr && len(a.Tasks) == len(b.Tasks)
}

func TestPickArray(t *testing.T) {
	jobs, err := parseScontrol(scontrolArray)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id, wantID, wantState string
		tasks                 int
	}{
		{"3", "3", StateRunning, 2},
		{"3_0", "3_0", StateRunning, 0},
	} {
		j, err := pick(tc.id, jobs)
		if err != nil {
			t.Fatalf("pick %s: %v", tc.id, err)
		}
		if j.ID != tc.wantID || j.State != tc.wantState || len(j.Tasks) != tc.tasks {
			t.Errorf("pick %s = %s %s with %d tasks, want %s %s with %d", tc.id, j.ID, j.State, len(j.Tasks), tc.wantID, tc.wantState, tc.tasks)
		}
	}
	if jobs[0].ID != "3_[1-2]" || jobs[0].ArrayTaskID != "1-2" {
		t.Errorf("pending remainder parsed as %+v", jobs[0])
	}
	if _, err := pick("9", jobs); !errors.Is(err, ErrUnknownJob) {
		t.Errorf("pick of an absent id: %v", err)
	}
}

func TestAggregate(t *testing.T) {
	task := func(state string) Job { return Job{State: state, Reason: "r-" + state} }
	for _, tc := range []struct {
		name   string
		states []string
		want   string
	}{
		{"all completed", []string{StateCompleted, StateCompleted}, StateCompleted},
		{"one running", []string{StateCompleted, StateRunning, StatePending}, StateRunning},
		{"pending only", []string{StatePending, StateCompleted}, StatePending},
		{"failed beats cancelled", []string{StateCancelled, StateFailed, StateCompleted}, StateFailed},
		{"timeout beats cancelled", []string{StateCancelled, StateTimeout}, StateTimeout},
		{"active beats failed", []string{StateFailed, StatePending}, StatePending},
		{"unknown state counts as unfinished", []string{"SPECIAL_EXIT", StateCompleted}, "SPECIAL_EXIT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tasks []Job
			for _, s := range tc.states {
				tasks = append(tasks, task(s))
			}
			if got := aggregate("5", tasks); got.State != tc.want || len(got.Tasks) != len(tasks) {
				t.Errorf("aggregate(%v) = %s, want %s", tc.states, got.State, tc.want)
			}
		})
	}
}

func TestParseSqueue(t *testing.T) {
	out := strings.Join([]string{
		"12\x1f12\x1fN/A\x1fwhale-demo-r001-rollout\x1fPENDING\x1fDependency\x1fafterok:11(unfulfilled)\x1fdebug",
		"13_1\x1f13\x1f1\x1fname with spaces\x1fRUNNING\x1fNone\x1f(null)\x1fgpu",
		"",
	}, "\n")
	jobs, err := parseSqueue(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []Job{
		{ID: "12", Name: "whale-demo-r001-rollout", State: StatePending, Reason: "Dependency", Dependency: "afterok:11(unfulfilled)", Partition: "debug"},
		{ID: "13_1", ArrayJobID: "13", ArrayTaskID: "1", Name: "name with spaces", State: StateRunning, Reason: "None", Partition: "gpu"},
	}
	if len(jobs) != 2 || !jobsEqual(jobs[0], want[0]) || !jobsEqual(jobs[1], want[1]) {
		t.Errorf("got %+v\nwant %+v", jobs, want)
	}
	for _, bad := range []string{"12\x1f12\n", "\x1f\x1f\x1f\x1f\x1f\x1f\x1f\n"} {
		if _, err := parseSqueue(bad); err == nil {
			t.Errorf("parseSqueue(%q) accepted it", bad)
		}
	}
}

func TestParseSubmitted(t *testing.T) {
	for _, tc := range []struct{ out, want string }{
		{"42\n", "42"},
		{"42;cluster\n", "42"},
		{"sbatch: notice: site banner\n43\n", "43"},
	} {
		got, err := parseSubmitted(tc.out)
		if err != nil || got != tc.want {
			t.Errorf("parseSubmitted(%q) = %q, %v; want %q", tc.out, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "Submitted batch job 42", "x;y"} {
		if _, err := parseSubmitted(bad); err == nil {
			t.Errorf("parseSubmitted(%q) accepted it", bad)
		}
	}
}

func FuzzParseScontrol(f *testing.F) {
	f.Add(scontrolFailed)
	f.Add(scontrolPending)
	f.Add(scontrolArray)
	f.Add("JobId=1 JobName= JobState=")
	f.Fuzz(func(t *testing.T, out string) {
		jobs, err := parseScontrol(out)
		if err != nil {
			return
		}
		for _, j := range jobs {
			if j.ID == "" {
				t.Errorf("job without id from %q", out)
			}
		}
		_, _ = pick("1", jobs)
	})
}

func FuzzParseSqueue(f *testing.F) {
	f.Add("12\x1f12\x1fN/A\x1fa\x1fPENDING\x1fNone\x1f(null)\x1fdebug\n")
	f.Add("13_[1-3]\x1f13\x1f[1-3]\x1fa b\x1fPENDING\x1fResources\x1f\x1fdebug\n")
	f.Fuzz(func(t *testing.T, out string) {
		jobs, err := parseSqueue(out)
		if err != nil {
			return
		}
		for _, j := range jobs {
			if j.ID == "" || j.State == "" {
				t.Errorf("job without id or state from %q", out)
			}
		}
	})
}

func FuzzParseSubmitted(f *testing.F) {
	for _, s := range []string{"42\n", "42;c", "x\n43", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, out string) {
		id, err := parseSubmitted(out)
		if err == nil && !jobIDRE.MatchString(id) {
			t.Errorf("parseSubmitted(%q) = %q, not a job id", out, id)
		}
	})
}

// A value's words are joined back, and keys repeated later do not
// override the first.
func TestParseKV(t *testing.T) {
	kv := parseKV("JobId=7 JobName=a b  c Command=/bin/x y=1 JobId=8")
	if kv["JobId"] != "7" || kv["JobName"] != "a b  c" || kv["Command"] != "/bin/x y=1" {
		t.Errorf("parseKV = %q", kv)
	}
	keys := []string{}
	for k := range kv {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"Command", "JobId", "JobName"}) {
		t.Errorf("keys %v", keys)
	}
}
