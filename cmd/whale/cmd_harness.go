package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
	"github.com/whalerun/whale/domains/registry"
	"github.com/whalerun/whale/harness"
)

// domainContract is the hook contract of a domain the registry knows.
func domainContract(name string) (*harness.Contract, error) {
	d, err := registry.Lookup(name, registry.Resources{})
	if err != nil {
		return nil, err
	}
	return d.Contract(), nil
}

func harnessCommand() *cli.Command {
	return &cli.Command{
		Name:   "harness",
		Usage:  "read a domain's harness contract, check harness files against it and run one episode",
		Action: unknownSubcommand,
		Subcommands: []*cli.Command{
			{
				Name:      "doc",
				Usage:     "print a domain's harness contract (Markdown): constants, hooks, state, helpers, sandbox rules",
				ArgsUsage: "DOMAIN",
				Description: "DOMAIN is one of " + strings.Join(registry.Names(), ", ") + `. The text is what a
proposer receives to write a harness for that domain.`,
				Action: action(func(c *cli.Context, args []string) error {
					if len(args) != 1 {
						return usagef("harness doc takes one domain, got %d arguments", len(args))
					}
					contract, err := domainContract(args[0])
					if err != nil {
						return err
					}
					_, err = io.WriteString(c.App.Writer, contract.Doc())
					return err
				}),
			},
			{
				Name:      "check",
				Usage:     "load a harness file in the sandbox and check it against a domain's contract",
				ArgsUsage: "FILE",
				Description: `Compiles FILE, runs its top level once and checks its constants and hooks
against the contract of --domain. Prints the harness id (sha256 of the
file), the constants and hooks the file defines and any warnings. A harness
that does not load is a usage error (exit code 2) naming file:line of each
problem.`,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "domain", Usage: "`DOMAIN` whose contract applies: " + strings.Join(registry.Names(), ", ")},
				},
				Action: action(func(c *cli.Context, args []string) error {
					if len(args) != 1 {
						return usagef("harness check takes one harness file, got %d arguments", len(args))
					}
					if c.String("domain") == "" {
						return usagef("harness check needs --domain (%s)", strings.Join(registry.Names(), ", "))
					}
					return runHarnessCheck(args[0], c.String("domain"), c.App.Writer)
				}),
			},
			harnessRunCommand(),
		},
	}
}

func runHarnessCheck(file, domain string, out io.Writer) error {
	contract, err := domainContract(domain)
	if err != nil {
		return err
	}
	src, err := os.ReadFile(file)
	if err != nil {
		return usageError{fmt.Errorf("harness: %w", err)}
	}
	h, err := harness.Load(file, src, harness.Options{Contract: contract})
	if err != nil {
		var le *harness.LoadError
		if errors.As(err, &le) {
			// One line: every problem with its file:line, as errors print.
			probs := make([]string, len(le.Problems))
			for i, p := range le.Problems {
				probs[i] = p.String()
			}
			return usageError{fmt.Errorf("harness does not load for domain %s: %s", domain, strings.Join(probs, "; "))}
		}
		return fmt.Errorf("check harness %s: %w", file, err)
	}

	fmt.Fprintf(out, "harness  %s\n", file)
	fmt.Fprintf(out, "id       %s\n", h.ID())
	fmt.Fprintf(out, "domain   %s\n", contract.Name)
	consts := h.Constants()
	var set []string
	for _, k := range contract.Constants {
		if h.Defines(k.Name) {
			set = append(set, k.Name)
		}
	}
	fmt.Fprintf(out, "constants set: %d of %d\n", len(set), len(contract.Constants))
	for _, name := range set {
		fmt.Fprintf(out, "  %s = %s  (%s)\n", name, harness.Summarize(consts[name], 60), h.Position(name))
	}
	var hooks []string
	for _, hk := range contract.Hooks {
		if h.Defines(hk.Name) {
			hooks = append(hooks, hk.Name)
		}
	}
	fmt.Fprintf(out, "hooks defined: %d of %d\n", len(hooks), len(contract.Hooks))
	for _, name := range hooks {
		fmt.Fprintf(out, "  %s  (%s)\n", name, h.Position(name))
	}
	warnings := h.Warnings()
	fmt.Fprintf(out, "warnings: %d\n", len(warnings))
	for _, w := range warnings {
		fmt.Fprintf(out, "  %s\n", w)
	}
	return nil
}
