package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pollux-nomad/pollux/policy/record"
)

// runReplay decides each recorded round again (files, or every
// round-*.json of a directory) and prints, per round, whether the
// decision is the recorded one and where it differs. It exits 0 when
// every round decides the same, 1 when one differs, 2 for a file that
// is not a record.
func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quiet := fs.Bool("q", false, "print only the rounds that differ")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: pollux replay [-q] FILE|DIR ...")
		fmt.Fprintln(stderr, "Decides recorded rounds (pollux simulate -record-rounds, the agent's /v1/rounds) again with the recorded policy, settings and input.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return usageErr("replay needs a record file or a directory of them")
	}
	var files []string
	for _, a := range fs.Args() {
		st, err := os.Stat(a)
		if err != nil {
			return usageErr("%v", err)
		}
		if !st.IsDir() {
			files = append(files, a)
			continue
		}
		m, err := filepath.Glob(filepath.Join(a, "round-*.json"))
		if err != nil {
			return usageErr("%v", err)
		}
		if len(m) == 0 {
			return usageErr("%s: no round-*.json records", a)
		}
		slices.Sort(m)
		files = append(files, m...)
	}
	differ := 0
	for _, f := range files {
		rec, err := record.Read(f)
		if err != nil {
			return usageErr("%v", err)
		}
		_, diff, err := rec.Replay(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if len(diff) == 0 {
			if !*quiet {
				fmt.Fprintf(stdout, "%s: round %d (%s, %d jobs): same decision\n", f, rec.Input.Round, rec.Policy, len(rec.Input.Jobs))
			}
			continue
		}
		differ++
		fmt.Fprintf(stdout, "%s: round %d (%s, %d jobs): %d jobs decided differently\n  %s\n", f, rec.Input.Round, rec.Policy, len(rec.Input.Jobs), len(diff), strings.Join(diff, "\n  "))
	}
	if differ > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d of %d rounds decided differently", differ, len(files))}
	}
	if len(files) > 1 {
		fmt.Fprintf(stdout, "%d rounds: every decision the recorded one\n", len(files))
	}
	return nil
}
