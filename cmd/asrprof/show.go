package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/table"
)

func runShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("show", "Usage: asrprof show DIR [--format text|markdown|csv|json]\n\nPrints the sweep table of a capture bundle (one that was killed loads too).\n\nExample:\n  asrprof show runs/demo --format markdown\n\nFlags:\n", stderr)
	af := analysisFlags(fs, "format")
	pos, flags := splitArgs(fs, args)
	if err := parse(fs, flags, stdout); err != nil {
		return err
	}
	if err := checkFormat(af.Format); err != nil {
		return err
	}
	if len(pos) == 0 || pos[0] == "" {
		return fmt.Errorf("%w: give the bundle directory", errUsage)
	}
	if len(pos) > 1 {
		return fmt.Errorf("%w: unexpected argument %q: show takes one bundle directory ('asrprof analyze DIR NAME...' runs analyses)", errUsage, pos[1])
	}
	dir := pos[0]
	if err := checkBundle(dir); err != nil {
		return err
	}
	// The sweep is the sweep analysis, as analyze and capture print it;
	// it reads requests.jsonl, so a killed capture (no results.json) shows.
	c, err := analysis.Load(dir)
	if err != nil {
		return err
	}
	tables, err := analysis.NewSession(c, analysis.Options{Timeout: analysis.DefaultTimeout, Print: stderr}).Run(ctx, "sweep")
	return printTables(stdout, stderr, af.Format, tables, err, c)
}

// printTables renders the tables that analyses of the captures cs made
// (err: theirs, returned before a rendering error), then waits for the
// bundle tables that Load is still writing (docs/BUNDLE.md) and says when
// they could not be written.
func printTables(stdout, stderr io.Writer, format string, tables []*table.Table, err error, cs ...*analysis.Capture) error {
	if rerr := table.Render(stdout, format, tables...); rerr != nil && err == nil {
		err = rerr
	}
	for _, c := range cs {
		if werr := c.Tables.Wait(); werr != nil {
			fmt.Fprintf(stderr, "note: %v (analysed from memory; the bundle's JSONL files are unchanged)\n", werr)
		}
	}
	return err
}

func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "Usage: asrprof version\n\nPrints asrprof's version.\n", stderr)
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	fmt.Fprintf(stdout, "asrprof %s\n", capture.Version)
	return nil
}

// checkBundle checks that each of dirs, a command's arguments, is a
// capture bundle before anything reads it: a missing directory or one
// without a manifest is bad input (exit 2), named once.
func checkBundle(dirs ...string) error {
	for _, dir := range dirs {
		st, err := os.Stat(dir)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("%w: %s: no such directory", errUsage, dir)
		case err != nil:
			return fmt.Errorf("%w: %v", errUsage, err)
		case !st.IsDir():
			return fmt.Errorf("%w: %s: not a directory (want a capture bundle)", errUsage, dir)
		}
		if _, err := os.Stat(filepath.Join(dir, bundle.ManifestFile)); errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %s: not a capture bundle (no %s)", errUsage, dir, bundle.ManifestFile)
		}
	}
	return nil
}
