package spec

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Slurm gives the sbatch resources of the jobs `whale submit slurm` makes:
// Default for every job, and Stages per stage name (rollout, filter,
// finetune, propose, evaluate) overriding Default field by field. Flags of
// `whale submit slurm` override both.
type Slurm struct {
	Default SlurmResources            `yaml:"default" json:"default"`
	Stages  map[string]SlurmResources `yaml:"stages" json:"stages"`
}

// SlurmResources are one job's sbatch options; empty fields are left to
// the site's defaults.
type SlurmResources struct {
	Partition string `yaml:"partition" json:"partition,omitempty"`
	Account   string `yaml:"account" json:"account,omitempty"`
	QOS       string `yaml:"qos" json:"qos,omitempty"`
	// Time is a Go duration (90m, 6h) or Slurm's [D-]HH:MM:SS.
	Time    string `yaml:"time" json:"time,omitempty"`
	GPUs    int    `yaml:"gpus" json:"gpus,omitempty"`
	GPUType string `yaml:"gpu_type" json:"gpu_type,omitempty"`
	CPUs    int    `yaml:"cpus" json:"cpus,omitempty"`
	Mem     string `yaml:"mem" json:"mem,omitempty"`
	// MaxParallel throttles a sharded rollout's running array tasks.
	MaxParallel int `yaml:"max_parallel" json:"max_parallel,omitempty"`
	// Extra are further sbatch options ("--constraint=a100"); Prologue
	// shell lines run before whale (module load, venv activation).
	Extra    []string `yaml:"extra" json:"extra,omitempty"`
	Prologue []string `yaml:"prologue" json:"prologue,omitempty"`
}

// SlurmStages are the stage names a slurm.stages entry may have.
var SlurmStages = []string{"rollout", "filter", "finetune", "propose", "evaluate"}

// For returns the resources of a job running stage: Default with the
// stage's fields laid over it (lists replace, not append).
func (s Slurm) For(stage string) SlurmResources {
	r := s.Default
	o, ok := s.Stages[stage]
	if !ok {
		return r
	}
	str := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	num := func(dst *int, v int) {
		if v != 0 {
			*dst = v
		}
	}
	str(&r.Partition, o.Partition)
	str(&r.Account, o.Account)
	str(&r.QOS, o.QOS)
	str(&r.Time, o.Time)
	num(&r.GPUs, o.GPUs)
	str(&r.GPUType, o.GPUType)
	num(&r.CPUs, o.CPUs)
	str(&r.Mem, o.Mem)
	num(&r.MaxParallel, o.MaxParallel)
	if o.Extra != nil {
		r.Extra = o.Extra
	}
	if o.Prologue != nil {
		r.Prologue = o.Prologue
	}
	return r
}

var slurmTimeRE = regexp.MustCompile(`^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$`)

// ParseTimeLimit reads a Go duration (90m) or Slurm's time formats:
// minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
func ParseTimeLimit(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return 0, fmt.Errorf("time %q: want a positive limit", s)
		}
		return d, nil
	}
	m := slurmTimeRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("time %q: want a duration such as 90m or 2h, or Slurm's [D-]HH:MM:SS", s)
	}
	n := func(i int) time.Duration {
		v, _ := strconv.Atoi(m[i])
		return time.Duration(v)
	}
	var d time.Duration
	switch {
	case m[1] != "": // D-HH[:MM[:SS]]
		d = n(1)*24*time.Hour + n(2)*time.Hour + n(3)*time.Minute + n(4)*time.Second
	case m[4] != "": // HH:MM:SS
		d = n(2)*time.Hour + n(3)*time.Minute + n(4)*time.Second
	case m[3] != "": // MM:SS
		d = n(2)*time.Minute + n(3)*time.Second
	default: // minutes
		d = n(2) * time.Minute
	}
	if d <= 0 {
		return 0, fmt.Errorf("time %q: want a positive limit", s)
	}
	return d, nil
}

func (e *Experiment) validateSlurm(c *checker) {
	check := func(path string, r SlurmResources) {
		if r.Time != "" {
			if _, err := ParseTimeLimit(r.Time); err != nil {
				c.add(path+".time", "%v", err)
			}
		}
		for _, f := range []struct {
			name string
			v    int
			most int64
		}{{"gpus", r.GPUs, MaxSlurmGPUs}, {"cpus", r.CPUs, MaxSlurmCPUs}, {"max_parallel", r.MaxParallel, MaxShards}} {
			c.count(path+"."+f.name, int64(f.v), 0, f.most)
		}
		for i, x := range r.Extra {
			if !strings.HasPrefix(x, "-") {
				c.add(fmt.Sprintf("%s.extra[%d]", path, i), "must be an sbatch option such as --constraint=a100, got %q", x)
			}
		}
	}
	check("slurm.default", e.Slurm.Default)
	for name, r := range e.Slurm.Stages {
		if !slices.Contains(SlurmStages, name) {
			c.add("slurm.stages."+name, "is not a stage: want one of %s", strings.Join(SlurmStages, ", "))
			continue
		}
		check("slurm.stages."+name, r)
	}
}
