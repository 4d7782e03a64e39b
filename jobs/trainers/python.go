package trainers

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// FindPython finds a python3 that has modules (torch, jinja2, ...) for
// the tests that run the trainer: $WHALE_PYTHON if set (an explicit choice
// is not second-guessed), else python3 on PATH, then Debian's
// /usr/bin/python3, where apt installs python3-torch and which a pyenv
// python3 earlier on PATH does not see. The error says what was tried and
// how to install what is missing.
func FindPython(modules ...string) (string, error) {
	candidates := []string{"python3", "/usr/bin/python3"}
	if p := os.Getenv("WHALE_PYTHON"); p != "" {
		candidates = []string{p}
	}
	// find_spec, not import: importing torch takes ~10 s on the test
	// machines, and the tests import it anyway.
	check := "import importlib.util as u, sys\nfor m in sys.argv[1:]:\n    if u.find_spec(m) is None: sys.exit('No module named ' + m)\n"
	var tried []string
	for _, c := range candidates {
		p, err := exec.LookPath(c)
		if err != nil {
			tried = append(tried, c+": not found")
			continue
		}
		out, err := exec.Command(p, append([]string{"-c", check}, modules...)...).CombinedOutput()
		if err == nil {
			return p, nil
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		tried = append(tried, fmt.Sprintf("%s: %s", p, lines[len(lines)-1]))
	}
	return "", fmt.Errorf("no python3 that has %s (%s): apt-get install -y python3-torch python3-jinja2 python3-numpy, or set WHALE_PYTHON",
		strings.Join(modules, ", "), strings.Join(tried, "; "))
}
