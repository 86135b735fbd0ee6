package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/capture"
	"github.com/asrprof/asrprof/table"
)

func runShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("show", flag.ContinueOnError)
	fs.SetOutput(stderr)
	format := fs.String("format", "table", "`table`, markdown, csv or json")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: asrprof show DIR [--format table|markdown|csv|json]\n\nPrints the sweep table of a capture bundle (one that was killed loads too).\n\nExample:\n  asrprof show runs/demo --format markdown\n\nFlags:\n")
		printFlags(fs.Output(), fs)
	}
	// Flags may come before or after the directory.
	pos, flags := splitArgs(fs, args)
	if err := parse(fs, flags, stdout); err != nil {
		return err
	}
	var dir string
	if len(pos) > 0 {
		dir = pos[0]
	}
	if dir == "" {
		return fmt.Errorf("%w: give the bundle directory", errUsage)
	}
	// The sweep is the sweep analysis, as analyze and capture print it;
	// it reads requests.jsonl, so a killed capture (no results.json) shows.
	c, err := analysis.Load(dir)
	if err != nil {
		return err
	}
	tables, err := analysis.NewSession(c, analysis.Options{Timeout: analysis.DefaultTimeout, Print: stderr}).Run(ctx, "sweep")
	if rerr := table.Render(stdout, *format, tables...); rerr != nil && err == nil {
		err = rerr
	}
	waitTables(stderr, c)
	return err
}

// waitTables lets the bundle's tables that Load is still writing finish
// (docs/BUNDLE.md), and says when they could not be written.
func waitTables(stderr io.Writer, cs ...*analysis.Capture) {
	for _, c := range cs {
		if err := c.Tables.Wait(); err != nil {
			fmt.Fprintf(stderr, "note: %v (analysed from memory; the bundle's JSONL files are unchanged)\n", err)
		}
	}
}

func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fmt.Fprintf(stdout, "asrprof %s\n", capture.Version)
	return nil
}
