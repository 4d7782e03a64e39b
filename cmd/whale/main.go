// Command whale runs WHALE experiments: alternating rejection-sampling
// fine-tuning of an agent's weights with search over its harness code, as a
// batch pipeline of idempotent stages over Parquet artifacts in a bucket.
//
// The commands are thin: each parses flags into an options struct and calls
// a run function that the tests call directly. main maps errors to exit
// codes in one place.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/urfave/cli/v2"
	"github.com/whalerun/whale/dataprep"
	"github.com/whalerun/whale/domains/registry"
	"github.com/whalerun/whale/domains/searchqa"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/importers"
	"github.com/whalerun/whale/internal/buildinfo"
	"github.com/whalerun/whale/internal/children"
	"github.com/whalerun/whale/pipeline"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/storage"
	"golang.org/x/sys/unix"
)

// Exit codes, documented in `whale --help`.
const (
	exitOK       = 0
	exitFailure  = 1 // the command failed: storage, a stage, a bug
	exitUsage    = 2 // bad flags, bad experiment file, bad input data
	exitConflict = 3 // same position asked with different inputs, or a run exists with another spec
	exitBusy     = 4 // another live process holds the run's lease (run, stage; step exits 0)
)

// usageError marks errors the user fixes by changing what they passed in.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// conflictError marks a request that contradicts what the artifacts say.
type conflictError struct{ err error }

func (e conflictError) Error() string { return e.err.Error() }
func (e conflictError) Unwrap() error { return e.err }

// Errors the packages classify, by the exit code they mean. Packages say
// what went wrong (sentinels and error types); this table, read by
// exitCode, is the one place that says what that means for the exit
// code. Commands wrap with usageError or conflictError only what they
// find wrong themselves (their flags and arguments).
var (
	conflictErrors = []error{storage.ErrInputsDiffer, storage.ErrDatasetDiffers, searchqa.ErrIndexDiffers, spec.ErrSpecMismatch}
	usageErrors    = []error{storage.ErrBadName, storage.ErrInvalidKey, registry.ErrUnknown, harness.ErrInvalid, dataprep.ErrBadInput}
)

// usageTypes are the error types of bad input: an experiment file, an
// import file, a harness that does not load.
func usageType(err error) bool {
	var se *spec.Error
	var sl spec.ErrorList
	var ie *importers.Error
	var le *harness.LoadError
	return errors.As(err, &se) || errors.As(err, &sl) || errors.As(err, &ie) || errors.As(err, &le)
}

func exitCode(err error) int {
	var ue usageError
	var ce conflictError
	isAny := func(targets []error) bool {
		return slices.ContainsFunc(targets, func(t error) bool { return errors.Is(err, t) })
	}
	var se *pipeline.StageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ce), isAny(conflictErrors):
		return exitConflict
	case errors.Is(err, storage.ErrLeaseHeld):
		return exitBusy
	case errors.As(err, &se):
		// A stage that failed (a stored harness that no longer loads, a
		// key made from bad data) is a failure of the run, whatever it
		// wraps: the command line was fine.
		return exitFailure
	case errors.As(err, &ue), isAny(usageErrors), usageType(err):
		return exitUsage
	default:
		return exitFailure
	}
}

func main() {
	undumpable()
	ctx, stop := signalContext(context.Background(), os.Stderr)
	err := runApp(ctx, os.Stdout, os.Stderr, os.Args)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "whale:", err)
	}
	os.Exit(exitCode(err))
}

// undumpable keeps other processes of whale's user — the coding agent,
// model-written code run without a sandbox — from reading whale's
// environment (/proc/<pid>/environ: bucket credentials, API keys) or
// attaching to it: a process that is not dumpable has its /proc files
// owned by root and refuses ptrace. It lasts until exec, so whale's own
// children are unaffected.
func undumpable() {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		slog.Debug("prctl(PR_SET_DUMPABLE, 0)", "err", err)
	}
}

// signalContext is signal.NotifyContext for SIGINT and SIGTERM, except
// for a second signal. The first cancels ctx: the command stops at its
// next check and cleans up (a lease released, a temporary directory
// removed), which may take a while. A second one exits the process at
// once, with the shell's code for death by that signal (130 for SIGINT,
// 143 for SIGTERM), whatever the command is doing. stop restores the
// default handling of both signals.
func signalContext(parent context.Context, stderr io.Writer) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		var sig os.Signal
		select {
		case sig = <-sigs:
		case <-done:
			return
		}
		fmt.Fprintf(stderr, "whale: %v: stopping (send it again to exit at once)\n", sig)
		cancel(fmt.Errorf("%w: %v", context.Canceled, sig))
		select {
		case sig = <-sigs:
		case <-done:
			return
		}
		fmt.Fprintf(stderr, "whale: %v again: exiting\n", sig)
		children.KillAll() // a trainer must not outlive whale on its GPUs
		code := 128 + 15
		if s, ok := sig.(syscall.Signal); ok {
			code = 128 + int(s)
		}
		os.Exit(code)
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(sigs)
			close(done)
			cancel(context.Canceled)
		})
	}
}

// runApp runs the command line args (os.Args: the program name first) as
// main does, minus the exit: flags may follow positional arguments (see
// flagsFirst), and a Required flag left out is a usage error.
func runApp(ctx context.Context, stdout, stderr io.Writer, args []string) error {
	app := newApp(stdout, stderr)
	err := app.RunContext(ctx, flagsFirst(app, args))
	if missingRequiredFlag(err) {
		return usageError{err}
	}
	return err
}

// missingRequiredFlag recognizes urfave/cli's error for Required flags not
// given, which it returns without OnUsageError and as an unexported type:
// by its wording, "Required flag %q not set" or "Required flags %q not set".
func missingRequiredFlag(err error) bool {
	var ue usageError
	var ce conflictError
	if err == nil || errors.As(err, &ue) || errors.As(err, &ce) {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "Required flag") && strings.HasSuffix(msg, " not set")
}

const exitCodesHelp = `EXIT CODES:
   0  success (also: nothing to do, the stage was already committed)
   1  failure: storage, a stage, an internal error
   2  usage: bad flags, a bad experiment file, bad input data (the message names the place)
   3  conflict: a position asked with different inputs, or a run name taken by another spec
   4  busy: another live process holds the run's lease (whale run, whale stage; whale step
      prints one line and exits 0 for cron; whale run --wait waits instead)
   130, 143  a second SIGINT or SIGTERM: exited at once (the first one stops the command
      at its next check, releasing what it holds)

ENVIRONMENT:
   WHALE_ROOT         default for --root (a bucket URL: file:///data/whale, s3://bucket/prefix?endpoint=...)
   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, GOOGLE_APPLICATION_CREDENTIALS,
   AZURE_STORAGE_ACCOUNT, ...: credentials come from the usual chains, never from flags.
`

func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:      "whale",
		Usage:     "Weight-Harness Alternating LEarning experiments as a batch pipeline over object storage",
		Version:   buildinfo.Version(),
		Writer:    stdout,
		ErrWriter: stderr,
		// main prints errors once; urfave would print some of them again.
		ExitErrHandler: func(*cli.Context, error) {},
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", EnvVars: []string{"WHALE_LOG_LEVEL"}},
		},
		Before: func(c *cli.Context) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(c.String("log-level"))); err != nil {
				return usagef("--log-level: %v", err)
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl})))
			return nil
		},
		CustomAppHelpTemplate: cli.AppHelpTemplate + "\n" + exitCodesHelp,
		Commands:              commands(),
		OnUsageError:          onUsageError,
		Action:                unknownCommand,
	}
	return app
}
