package propose

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/whalerun/whale/storage"
)

// ErrNoAgentSandbox marks an agent the stage refuses to run: the root is
// a local directory (Stage.RootDir) and this machine cannot run the agent
// under bubblewrap, which would hide that directory from it.
var ErrNoAgentSandbox = errors.New("no sandbox for the agent")

// agentSandboxID is the uid and gid the agent runs as when whale is
// root: bwrap itself is started as this user (nobody), so that the agent
// is neither root on the host nor the owner of root's files.
const agentSandboxID = 65534

// credentialPathVars are variables that name files or folders holding
// credentials (of the bucket's drivers, of cloud tools, of Kubernetes and
// Docker); what they name is hidden from the agent wherever it lies.
var credentialPathVars = []string{
	"AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
	"GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CONFIG",
	"AZURE_CONFIG_DIR", "AZURE_FEDERATED_TOKEN_FILE",
	"KUBECONFIG", "DOCKER_CONFIG",
}

// secretDirs hold the secrets a container runtime mounts (Docker
// secrets, Kubernetes service-account and cloud identity tokens).
var secretDirs = []string{"/run/secrets", "/var/run/secrets"}

// StoreDir is the directory of a file:// root (the whole directory, not
// only its prefix folder), for Stage.RootDir; "" for any other root. A
// file:// root whose URL cannot be read back gives "/", which the stage
// cannot hide, so it refuses to run an agent rather than show it.
func StoreDir(s *storage.Store) string {
	if s == nil || s.Scheme() != "file" {
		return ""
	}
	u, err := url.Parse(s.URL())
	if err != nil || !filepath.IsAbs(u.Path) {
		return "/"
	}
	return filepath.Clean(u.Path)
}

// agentSandbox is how one agent run is started under bubblewrap.
type agentSandbox struct {
	bwrap string
	cred  *syscall.Credential // set when whale is root: bwrap runs as nobody
	// hide are the paths masked, pruned (none inside another) and sorted:
	// folders by an empty read-only tmpfs, files by /dev/null.
	hide []hidden
}

type hidden struct {
	path string
	file bool
	// temp marks the system's temporary folders: their mask is a private,
	// writable tmpfs (agentTmpBytes), for tools that ignore TMPDIR.
	temp bool
}

// agentTmpBytes is the size of the agent's private /tmp.
const agentTmpBytes = 1 << 30

// bwrapProbes caches, per bwrap binary and user, whether bubblewrap can
// make its namespaces here (nil) or why not.
var bwrapProbes sync.Map

// findSandbox finds bwrap and checks once per process, by running a
// shell in the sandbox's namespaces, that it works here. The error says
// why not; it is not an ErrNoAgentSandbox yet, as only a file:// root
// makes the sandbox a must.
func findSandbox(ctx context.Context) (*agentSandbox, error) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		return nil, fmt.Errorf("bubblewrap (bwrap) is not on PATH (%v)", err)
	}
	sb := &agentSandbox{bwrap: bwrap}
	if os.Geteuid() == 0 {
		sb.cred = &syscall.Credential{Uid: agentSandboxID, Gid: agentSandboxID, Groups: []uint32{}}
	}
	key := bwrap + "\x00" + strconv.FormatBool(sb.cred != nil)
	if v, ok := bwrapProbes.Load(key); ok {
		if err, _ := v.(error); err != nil {
			return nil, err
		}
		return sb, nil
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	args := append(sb.baseArgs(), "--", "/bin/sh", "-c", "exit 0")
	cmd := exec.CommandContext(pctx, args[0], args[1:]...)
	cmd.Dir = "/"
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: sb.cred}
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err() // not cached: the answer is unknown
		}
		msg := strings.TrimSpace(string(bytes.ToValidUTF8(out, nil)))
		if len(msg) > 500 {
			msg = msg[len(msg)-500:]
		}
		err = fmt.Errorf("%s cannot make its namespaces here (%v: %s); it needs user namespaces", bwrap, err, msg)
		if sb.cred != nil {
			err = fmt.Errorf("%w (whale is root, so bwrap runs as uid %d)", err, agentSandboxID)
		}
	}
	bwrapProbes.Store(key, err)
	if err != nil {
		return nil, err
	}
	return sb, nil
}

// baseArgs are the options every agent sandbox has (and the probe):
//
//	--unshare-user          a user namespace of its own: bwrap needs no
//	                        privilege, and the agent gets none on the host
//	--unshare-pid, --proc   a PID namespace and a fresh /proc of it: no
//	                        process of whale's shows, so neither does its
//	                        /proc/<pid>/environ (the bucket's credentials)
//	--unshare-ipc           no System V IPC shared with whale
//	--die-with-parent       the sandbox dies with bwrap, and bwrap with
//	                        whale (Pdeathsig)
//	--new-session           no TIOCSTI into a terminal of whale's
//	--ro-bind / /           the machine read-only: its programs, node,
//	                        python, certificates, resolv.conf
//	--dev /dev              a minimal /dev (null, zero, random, tty, pts,
//	                        a private /dev/shm)
//
// The network is shared: the agent calls its model's API.
func (sb *agentSandbox) baseArgs() []string {
	return []string{sb.bwrap, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--die-with-parent", "--new-session",
		"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"}
}

// args is the whole bwrap command line of one agent run in the scratch
// folder scratch (its workspace ws): baseArgs, then
//
//	--tmpfs <dir>             each hidden folder replaced by an empty tmpfs
//	--size 1GiB --perms 1777  the system's temporary folders (/tmp, whale's
//	  --tmpfs <tmp>           TMPDIR) by a private writable one, for tools
//	                          that ignore TMPDIR
//	--ro-bind /dev/null <f>   each hidden file replaced by /dev/null (nodev:
//	                          reading it is refused)
//	--bind <scratch>          the run's scratch folder (workspace, HOME,
//	                          TMPDIR), at its own path, read-write: the
//	                          only place the agent writes; bound after the
//	                          masks, so it shows even where it lies under a
//	                          hidden folder (the system's temporary folder)
//	--remount-ro <dir>        the other masks read-only (not recursive: the
//	                          scratch folder stays writable)
//	--chdir <ws>              the agent starts in its workspace
//	--json-status-fd 3        bwrap reports there that the agent ran
//	                          ("exit-code"): without it, bwrap failed to
//	                          set the sandbox up
//	-- /bin/sh -c <command>
func (sb *agentSandbox) args(scratch, ws, command string) []string {
	a := sb.baseArgs()
	for _, h := range sb.hide {
		switch {
		case h.file:
			a = append(a, "--ro-bind", "/dev/null", h.path)
		case h.temp:
			a = append(a, "--size", strconv.Itoa(agentTmpBytes), "--perms", "1777", "--tmpfs", h.path)
		default:
			a = append(a, "--tmpfs", h.path)
		}
	}
	a = append(a, "--bind", scratch, scratch)
	for _, h := range sb.hide {
		if !h.file && !h.temp {
			a = append(a, "--remount-ro", h.path)
		}
	}
	return append(a, "--chdir", ws, "--json-status-fd", "3", "--", "/bin/sh", "-c", command)
}

// hidePaths lists what the agent must not see besides rootDir and the
// stage's Hide: whale's user's home (passwd's and $HOME; there live
// ~/.aws, ~/.config/gcloud, ~/.azure, ~/.ssh, ~/.netrc, ~/.docker), /root
// when whale is root, whale's cache and config folders where they lie
// outside it, its runtime folder (agent sockets: ssh, gpg, D-Bus), the
// system's temporary folders (whale's spooled uploads, fine-tuning work,
// other runs' scratch), the files and folders the credential variables
// name, and the secrets a container runtime mounts.
func hidePaths(getenv func(string) string, root bool) []string {
	var p []string
	if h := getenv("HOME"); h != "" {
		p = append(p, h)
	}
	if u, err := user.Current(); err == nil && u.HomeDir != "" {
		p = append(p, u.HomeDir)
	}
	if root {
		p = append(p, "/root")
	}
	if d, err := os.UserCacheDir(); err == nil {
		p = append(p, filepath.Join(d, "whale"))
	}
	if d, err := os.UserConfigDir(); err == nil {
		p = append(p, d)
	}
	if d := getenv("XDG_RUNTIME_DIR"); d != "" {
		p = append(p, d)
	} else {
		p = append(p, "/run/user/"+strconv.Itoa(os.Geteuid()))
	}
	p = append(p, "/tmp", os.TempDir())
	for _, k := range credentialPathVars {
		for v := range strings.SplitSeq(getenv(k), string(filepath.ListSeparator)) {
			p = append(p, v)
		}
	}
	return append(p, secretDirs...)
}

// prepare decides what the run masks: paths (and rootDir) as they exist
// now, symbolic links resolved, none inside another, none the agent
// could not reach anyway (whale root: behind a folder that nobody cannot
// search). A rootDir that cannot be hidden is an error.
func (sb *agentSandbox) prepare(rootDir string, paths []string) error {
	type cand struct {
		path     string
		required bool
	}
	var cs []cand
	if rootDir != "" {
		cs = append(cs, cand{rootDir, true})
	}
	for _, p := range paths {
		cs = append(cs, cand{p, false})
	}
	var temps []string
	for _, d := range []string{"/tmp", os.TempDir()} {
		if real, err := filepath.EvalSymlinks(d); err == nil {
			temps = append(temps, real)
		}
	}
	var hs []hidden
	for _, c := range cs {
		if c.path == "" || !filepath.IsAbs(c.path) {
			continue
		}
		real, err := filepath.EvalSymlinks(c.path)
		if err != nil {
			if c.required && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("the root's directory %s: %w", c.path, err)
			}
			continue // nothing there to see
		}
		if real == "/" {
			if c.required {
				return fmt.Errorf("the root's directory %s is the whole file system: it cannot be hidden from the agent", c.path)
			}
			continue
		}
		fi, err := os.Stat(real)
		if err != nil {
			continue
		}
		if sb.cred != nil && !canReach(real, sb.cred.Uid) {
			continue // nobody cannot get there: hidden already
		}
		hs = append(hs, hidden{path: real, file: !fi.IsDir(), temp: fi.IsDir() && slices.Contains(temps, real)})
	}
	slices.SortFunc(hs, func(a, b hidden) int { return strings.Compare(a.path, b.path) })
	sb.hide = sb.hide[:0]
	for _, h := range hs {
		if slices.ContainsFunc(sb.hide, func(k hidden) bool {
			return !k.file && (h.path == k.path || strings.HasPrefix(h.path, k.path+"/"))
		}) || slices.Contains(sb.hide, h) {
			continue
		}
		sb.hide = append(sb.hide, h)
	}
	return nil
}

// within reports whether path is dir or lies inside it.
func within(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}

// hiddenPath returns the masked folder that path lies in, if any.
func (sb *agentSandbox) hiddenPath(path string) (string, bool) {
	for _, h := range sb.hide {
		if !h.file && within(path, h.path) {
			return h.path, true
		}
	}
	return "", false
}

// canReach reports whether the user id (and its group of the same
// number, with no other groups) may search every folder above path, by
// mode bits; a folder with an ACL counts as searchable, so that an ACL
// never hides what is then left unmasked.
func canReach(path string, id uint32) bool {
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err != nil {
			return true // let bwrap say
		}
		mode := st.Mode
		ok := mode&0o001 != 0 || st.Uid == id && mode&0o100 != 0 || st.Gid == id && mode&0o010 != 0
		if !ok {
			if n, err := unix.Getxattr(dir, "system.posix_acl_access", nil); err == nil && n > 0 {
				ok = true
			}
		}
		if !ok {
			return false
		}
		if dir == "/" {
			return true
		}
	}
}

// chownScratch gives the agent (nobody, whale being root) its scratch
// folder: every entry whale made there. Nothing in it is a link.
func chownScratch(root string, id int) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, id, id)
	})
}

// NoSandboxEnv, set to 1 in whale's environment, lets the agent run
// without bubblewrap where there is none, for an object-store root: it
// then runs as whale's user and can read whatever that user can (~/.aws,
// caches), though not whale's own environment (cmd/whale makes whale's
// process undumpable). A file:// root never allows it: the agent could
// rewrite the bucket.
const NoSandboxEnv = "WHALE_AGENT_NO_SANDBOX"

// noAgentSandbox is the refusal of an agent without a sandbox.
func noAgentSandbox(rootDir string, why error) error {
	if rootDir != "" {
		return fmt.Errorf("propose: %w: %v; the root is the local directory %s, which an agent outside a sandbox could read and rewrite "+
			"(evaluation artifacts included): install bubblewrap (Debian: apt-get install bubblewrap; it needs user namespaces)",
			ErrNoAgentSandbox, why, rootDir)
	}
	return fmt.Errorf("propose: %w: %v; outside a sandbox the agent runs as whale's user and can read its files "+
		"(~/.aws/credentials, caches): install bubblewrap (Debian: apt-get install bubblewrap; it needs user namespaces), "+
		"or set %s=1 to run it so anyway", ErrNoAgentSandbox, why, NoSandboxEnv)
}

// useSandbox decides how this run starts the agent: under bubblewrap,
// or, where there is none, not at all unless the root is not a local
// directory and NoSandboxEnv allows it (with a warning).
func (s *Stage) useSandbox(ctx context.Context, log *slog.Logger) (*agentSandbox, error) {
	sb, err := findSandbox(ctx)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("propose: agent: %w", ctx.Err())
	}
	if err != nil {
		if s.RootDir != "" || os.Getenv(NoSandboxEnv) != "1" {
			return nil, noAgentSandbox(s.RootDir, err)
		}
		log.Warn("the agent runs without a sandbox ("+NoSandboxEnv+"=1): it can read whale's user's files (home, caches, temporary files); "+
			"its environment has no bucket credentials", "why", err.Error())
		return nil, nil
	}
	if err := sb.prepare(s.RootDir, append(hidePaths(os.Getenv, sb.cred != nil), s.Hide...)); err != nil {
		return nil, fmt.Errorf("propose: agent sandbox: %w", err)
	}
	return sb, nil
}

// enter readies the scratch folder for the sandbox: when whale is root,
// the agent (nobody) must reach it and own it.
func (sb *agentSandbox) enter(scratch string) error {
	if sb.cred == nil {
		return nil
	}
	if !canReach(scratch, sb.cred.Uid) {
		return fmt.Errorf("propose: agent workspace %s: whale is root, so the agent runs as uid %d, which cannot reach it: "+
			"give the stage a WorkDir every user can search (the default is the system's temporary folder)", scratch, agentSandboxID)
	}
	if err := chownScratch(scratch, int(sb.cred.Uid)); err != nil {
		return fmt.Errorf("propose: agent workspace: %w", err)
	}
	return nil
}

// warnHiddenPath logs the entries of the agent's PATH that the sandbox
// hides: programs installed there (under the home folder) do not run.
func (sb *agentSandbox) warnHiddenPath(env []string, log *slog.Logger) {
	var gone []string
	for _, kv := range env {
		v, ok := strings.CutPrefix(kv, "PATH=")
		if !ok {
			continue
		}
		for d := range strings.SplitSeq(v, ":") {
			if real, err := filepath.EvalSymlinks(d); err == nil {
				if _, hid := sb.hiddenPath(real); hid {
					gone = append(gone, d)
				}
			}
		}
	}
	if len(gone) > 0 {
		log.Warn("the agent's sandbox hides these PATH entries (under the home or temporary folder): install the agent's programs elsewhere (/usr/local, /opt)",
			"entries", gone)
	}
}

// lastOutputLine is the last non-empty line of b, at most 500 bytes of it.
func lastOutputLine(b []byte) string {
	s := strings.TrimRight(string(bytes.ToValidUTF8(b, nil)), "\n\r\t ")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 500 {
		s = s[len(s)-500:]
	}
	return strings.TrimSpace(s)
}
