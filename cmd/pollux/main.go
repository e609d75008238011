// Command pollux is the Pollux goodput-optimising scheduler for Nomad: the
// controller (agent), the trace-driven simulator and model tools. See the
// README and docs/ for usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// exitError carries an exit code: 1 runtime failure, 2 bad usage or input.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, a ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, a...)}
}

const usage = `Usage: pollux <command> [flags]

Commands:
  simulate   replay a workload on a simulated cluster (Pollux, Tiresias, Optimus, Sia)
  fit        fit the goodput models to one metrics document and print predictions
  agent      run the controller against Nomad and Consul
  status     print the controller's last round (from Consul KV)
  plan       show what the next round would do, changing nothing
  replay     decide recorded rounds again and compare with what was decided
  emulate    run an emulated training job (a Nomad task of a Pollux job)
  demo       closed loop on a local cluster: submit a workload slice of emulated jobs, run the controller, compare with the simulator
  version    print the version (the Python package pollux has the same)

Run 'pollux <command> -h' for the flags of a command.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		code := 1
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		if !errors.Is(err, errHelp) {
			fmt.Fprintln(os.Stderr, "pollux:", err)
		}
		os.Exit(code)
	}
}

// errHelp is returned after -h printed the usage.
var errHelp = &exitError{code: 0, err: errors.New("help")}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageErr("missing command")
	}
	switch args[0] {
	case "replay":
		return runReplay(ctx, args[1:], stdout, stderr)
	case "simulate":
		return runSimulate(ctx, args[1:], stdout, stderr)
	case "fit":
		return runFit(args[1:], stdout, stderr)
	case "agent":
		return runAgent(ctx, args[1:], stdout, stderr)
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "emulate":
		return runEmulate(ctx, args[1:], stdout, stderr)
	case "plan":
		return runPlan(ctx, args[1:], stdout, stderr)
	case "status":
		return runStatus(ctx, args[1:], stdout, stderr)
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, "pollux", Version)
		return nil
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return usageErr("unknown command %q", args[0])
	}
}

// parseFlags parses a subcommand's flags: -h is errHelp (exit 0), any
// other problem is bad usage (exit 2).
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return usageErr("%v", err)
	}
	return nil
}
