// Package mathdomain is the math domain (DAPO-Math-17K training, AIME
// tests): the verifier, the Python code-interpreter tool, the harness
// contract and the episode environment (NewDomain) that ties them together.
//
// Contract:
//   - Verify is the domain's verifier: the last \boxed{} or \fbox{} of a
//     response (Extract), normalised as the DAPO/Minerva/Hendrycks graders
//     do (Normalize) and compared exactly with each reference (Equivalent).
//     The reward is binary, 1 or 0. It is pure, deterministic and safe for
//     concurrent use; it never panics on any input.
//   - A CodeRunner runs one Python program and reports what it printed.
//     The program's own failures (an exception, a timeout, running out of
//     memory) are a RunResult with Status error, timeout or oom and a nil
//     error; an error means the tool itself failed (the sandbox service is
//     down after retries, bwrap cannot start) or ctx ended. Output beyond
//     the runner's limit is cut and Truncated is set.
//   - SandboxFusion talks to a SandboxFusion-compatible service
//     (POST /run_code): a response of Success or Failed is the program's
//     outcome whatever its commands' statuses (Finished, TimeLimitExceeded
//     or Error), a SandboxError is the service's failure and is retried;
//     LocalPython runs python3 here under bubblewrap:
//     own user, mount, PID and network namespaces; a read-only view of
//     /usr, the loader's files of /etc and the interpreter's prefix (no
//     /home, /root, bucket or host /proc); a private size-limited /tmp; an
//     empty environment but for a fixed few variables (so no credentials);
//     uid 65534 without capabilities (whale as root starts bwrap as that
//     user, so RLIMIT_NPROC holds); rlimits on address space, CPU time,
//     processes, open files and file size; and a wall-clock limit whose
//     kill ends the PID namespace, so no descendant outlives the run.
//     Where that isolation cannot be had (no bwrap, no user namespaces)
//     NewLocalPython fails with ErrNoSandbox: use SandboxFusion.
//   - The environment (env.go) grades an answer that contains \boxed{} with
//     Verify and a bare answer as if it were boxed; a python tool action
//     runs through the CodeRunner, its output cut to MAX_OUTPUT_CHARS.
//
// The package is named mathdomain because "math" would shadow the standard
// library in every file that uses both.
package mathdomain
